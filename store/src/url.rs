//! Where the store is: a `postgres://` URL, with what it leaves out taken
//! from the standard `PG*` environment variables, as `psql` would.
//!
//! Credentials come from the URL or the environment of the process that
//! connects, never from a stored run; nothing here prints a password
//! ([`StoreUrl`]'s `Display` leaves it out).

use std::time::Duration;

use tokio_postgres::Config;

use crate::StoreError;

/// How long a connection attempt may take unless the URL says
/// (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A validated store URL and the connection settings it gives.
#[derive(Clone)]
pub struct StoreUrl {
    config: Config,
    shown: String,
}

impl StoreUrl {
    /// Parses `url` (`postgres://USER:PASSWORD@HOST:PORT/DATABASE?…` or
    /// `postgresql://…`); what it leaves out comes from `env` (`PGHOST`,
    /// `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`), then libpq's
    /// defaults (`localhost`, 5432, the user's name as database).
    pub fn parse(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<StoreUrl, StoreError> {
        let shown = redact(url);
        let bad = |why: String| StoreError::Url {
            url: shown.clone(),
            why,
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad(
                "not a PostgreSQL URL; expected postgres://USER@HOST:PORT/DATABASE".into(),
            ));
        }
        let mut config: Config = url.parse().map_err(|e| bad(format!("{e}")))?;
        let set = |v: &str| env(v).filter(|s| !s.is_empty());
        if config.get_hosts().is_empty() {
            config.host(set("PGHOST").as_deref().unwrap_or("localhost"));
        }
        if config.get_ports().is_empty()
            && let Some(port) = set("PGPORT")
        {
            let port = port
                .parse::<u16>()
                .map_err(|_| bad(format!("PGPORT={port:?} is not a port number")))?;
            config.port(port);
        }
        if config.get_user().is_none() {
            let user = set("PGUSER").or_else(|| set("USER")).ok_or_else(|| {
                bad("no user: put one in the URL (postgres://USER@…) or set PGUSER".into())
            })?;
            config.user(&user);
        }
        if config.get_password().is_none()
            && let Some(p) = set("PGPASSWORD")
        {
            config.password(p);
        }
        if config.get_dbname().is_none() {
            let db = set("PGDATABASE")
                .or_else(|| config.get_user().map(str::to_string))
                .unwrap_or_default();
            config.dbname(&db);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("dsh");
        let shown = describe(&config);
        Ok(StoreUrl { config, shown })
    }

    /// The connection settings.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreUrl").field(&self.shown).finish()
    }
}

/// `url` with its password (if any) replaced by `***`: what an error may
/// show of a URL that did not parse.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.chars().take(80).collect();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

/// `postgres://USER@HOST:PORT/DATABASE` of a parsed configuration, without
/// its password.
fn describe(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or_default(),
        config.get_dbname().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[rstest]
    #[case::whole("postgres://ann:s3cret@db.example:6543/work", &[], "postgres://ann@db.example:6543/work")]
    #[case::from_env("postgresql://", &[("PGHOST", "10.0.0.7"), ("PGPORT", "7000"), ("PGUSER", "bob"), ("PGDATABASE", "runs")], "postgres://bob@10.0.0.7:7000/runs")]
    #[case::url_wins("postgres://ann@h/d", &[("PGUSER", "bob"), ("PGHOST", "x")], "postgres://ann@h:5432/d")]
    #[case::db_defaults_to_user("postgres://ann@h", &[], "postgres://ann@h:5432/ann")]
    fn a_url_and_the_environment_give_the_connection(
        #[case] url: &str,
        #[case] vars: &'static [(&'static str, &'static str)],
        #[case] shown: &str,
    ) {
        let parsed = StoreUrl::parse(url, env(vars)).expect("valid");
        assert_eq!(parsed.to_string(), shown);
    }

    #[test]
    fn the_password_comes_from_the_url_or_pgpassword_and_is_never_shown() {
        let p = StoreUrl::parse("postgres://ann:s3cret@h/d", env(&[])).expect("valid");
        assert_eq!(p.config().get_password(), Some(&b"s3cret"[..]));
        assert!(!format!("{p} {p:?}").contains("s3cret"));
        let p = StoreUrl::parse("postgres://ann@h/d", env(&[("PGPASSWORD", "pw")])).expect("valid");
        assert_eq!(p.config().get_password(), Some(&b"pw"[..]));
    }

    #[rstest]
    #[case::not_postgres("mysql://ann:s3cret@h/d", "not a PostgreSQL URL")]
    #[case::garbage(
        "postgres://ann:s3cret@h:notaport/d",
        "postgres://ann:***@h:notaport/d"
    )]
    fn a_bad_url_says_why_without_its_password(#[case] url: &str, #[case] says: &str) {
        let e = StoreUrl::parse(url, env(&[]))
            .expect_err("refused")
            .to_string();
        assert!(e.contains(says), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn a_pgport_that_is_not_a_port_is_refused() {
        let e = StoreUrl::parse("postgresql://", env(&[("PGUSER", "u"), ("PGPORT", "x")]))
            .expect_err("refused");
        assert!(e.to_string().contains("PGPORT=\"x\""), "{e}");
    }

    #[test]
    fn no_user_anywhere_is_refused_with_the_fix() {
        let e = StoreUrl::parse("postgres://h/d", env(&[])).expect_err("refused");
        assert!(e.to_string().contains("PGUSER"), "{e}");
    }
}
