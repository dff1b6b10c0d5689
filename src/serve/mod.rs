//! `dsh workflow serve`: the live view in a browser. A list of runs (status,
//! agents, cost, duration) and a run page whose timeline grows as the run's
//! events arrive over server-sent events, with cancel and resume buttons —
//! for the runs of a runs directory, or of a PostgreSQL store.
//!
//! What it is not: a second place where runs are run. Cancel and resume
//! are `dsh workflow cancel` and `resume` (`detach.rs`, the store); the
//! pages only read what the runs write.
//!
//! Safety: loopback by default, and on loopback only loopback `Host`
//! names are answered (a DNS-rebinding page cannot reach it); any other
//! address needs a token (`$DSH_SERVE_TOKEN`), sent as a bearer token or
//! once as `?token=`, which sets a `SameSite=Strict` cookie. A request
//! that changes anything (cancel, resume) must carry the page's CSRF token
//! in a header a cross-site form cannot send, and must not come from
//! another site (`Sec-Fetch-Site`, `Origin`). Every string a script or a
//! model controls reaches the page as JSON and is put in with
//! `textContent`, never as markup.
//!
//! - [`source`]: where runs are read from (a runs directory or a store);
//! - this file: the routes, the guards and the event streams.

mod source;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::error::{CliError, exit};
use crate::flags::ServeArgs;
use source::Source;

/// The environment variable a token is read from unless `--token-env`
/// names another.
const TOKEN_ENV: &str = "DSH_SERVE_TOKEN";

/// Event streams open at once; one more is answered 503.
const MAX_STREAMS: usize = 64;

/// How often an open event stream looks for new events.
const FOLLOW: Duration = Duration::from_millis(200);

/// The run list page and the run page (their scripts read the JSON API).
const LIST_PAGE: &str = include_str!("list.html");
const RUN_PAGE: &str = include_str!("run.html");

/// What every request handler shares.
struct App {
    source: Source,
    /// The token every request must carry, when one is set.
    token: Option<String>,
    /// The CSRF token of this server's pages.
    csrf: String,
    /// The `Host` values answered on loopback (`None`: any, behind a token).
    hosts: Option<Vec<String>>,
    streams: Arc<Semaphore>,
}

type Shared = Arc<App>;

/// `dsh workflow serve`: serves until SIGINT or SIGTERM.
pub async fn serve(a: ServeArgs) -> Result<i32, CliError> {
    let var = a.token_env.as_deref().unwrap_or(TOKEN_ENV);
    let (addr, token) = crate::token::listen_on(
        "--addr",
        &a.addr,
        "127.0.0.1:8600",
        var,
        "open the page once with ?token=TOKEN",
    )?;
    let source = Source::open(&a).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::usage(format!("--addr {addr}: cannot listen: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::usage(format!("--addr {addr}: {e}")))?;
    let hosts = addr.ip().is_loopback().then(|| {
        let port = bound.port();
        vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]
    });
    let app: Shared = Arc::new(App {
        source,
        token,
        csrf: random_hex()?,
        hosts,
        streams: Arc::new(Semaphore::new(MAX_STREAMS)),
    });
    let router = Router::new()
        .route("/", get(list_page))
        .route("/runs/{id}", get(run_page))
        .route("/api/runs", get(api_runs))
        .route("/api/runs/{id}", get(api_run))
        .route("/api/runs/{id}/events", get(api_events))
        .route("/api/runs/{id}/cancel", post(api_cancel))
        .route("/api/runs/{id}/resume", post(api_resume))
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app);
    eprintln!("dsh: serving runs on http://{bound}/");
    let mut signals = crate::execute::Signals::install();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { signals.next().await })
        .await
        .map_err(|e| CliError::usage(format!("--addr {addr}: {e}")))?;
    Ok(exit::COMPLETED)
}

/// 16 random bytes as hex, from the kernel.
fn random_hex() -> Result<String, CliError> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| CliError::usage(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The token, the Host check, and the CSRF check, before any handler.
async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Some(hosts) = &app.hosts {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !hosts.iter().any(|h| h == host) {
            return (StatusCode::MISDIRECTED_REQUEST, "not a loopback host\n").into_response();
        }
    }
    if let Some(token) = &app.token {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| c.trim().strip_prefix("dsh_token="));
        let query = request
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .find_map(|kv| kv.strip_prefix("token="));
        let ok =
            |t: Option<&str>| t.is_some_and(|t| crate::token::same(t.as_bytes(), token.as_bytes()));
        if ok(query) && request.method() == axum::http::Method::GET {
            // Once in the address bar, then a cookie: the token leaves the
            // URL (and the history) at once.
            let mut to = Redirect::to(request.uri().path()).into_response();
            if let Ok(v) = HeaderValue::from_str(&format!(
                "dsh_token={token}; HttpOnly; SameSite=Strict; Path=/"
            )) {
                to.headers_mut().insert(header::SET_COOKIE, v);
            }
            return to;
        }
        if !ok(bearer) && !ok(cookie) {
            return (
                StatusCode::UNAUTHORIZED,
                "a token is required: open the page with ?token=TOKEN, or send Authorization: Bearer TOKEN\n",
            )
                .into_response();
        }
    }
    if request.method() == axum::http::Method::POST {
        let csrf = headers
            .get("x-dsh-csrf")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let cross_site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v != "same-origin" && v != "none");
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let foreign_origin = headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|o| {
                o.strip_prefix("http://")
                    .or_else(|| o.strip_prefix("https://"))
                    != Some(host)
            });
        if !crate::token::same(csrf.as_bytes(), app.csrf.as_bytes()) || cross_site || foreign_origin
        {
            return (
                StatusCode::FORBIDDEN,
                "refused: a change must come from this server's own page\n",
            )
                .into_response();
        }
    }
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; \
             form-action 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

async fn list_page() -> Html<&'static str> {
    Html(LIST_PAGE)
}

async fn run_page(State(app): State<Shared>) -> Html<String> {
    // The CSRF token is hex: nothing in it needs escaping.
    Html(RUN_PAGE.replace("{{CSRF}}", &app.csrf))
}

/// An error as the API answers it: a status and a JSON body.
fn failure(status: StatusCode, e: CliError) -> Response {
    (status, axum::Json(json!({ "error": e.message }))).into_response()
}

async fn api_runs(State(app): State<Shared>) -> Response {
    match app.source.runs().await {
        Ok(runs) => axum::Json(runs).into_response(),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn api_run(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    match app.source.run(&id).await {
        Ok(run) => axum::Json(run).into_response(),
        Err(e) => failure(StatusCode::NOT_FOUND, e),
    }
}

async fn api_cancel(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    match app.source.cancel(&id).await {
        Ok(said) => axum::Json(json!({ "said": said })).into_response(),
        Err(e) => failure(StatusCode::CONFLICT, e),
    }
}

async fn api_resume(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    match app.source.resume(&id).await {
        Ok(said) => axum::Json(json!({ "said": said })).into_response(),
        Err(e) => failure(StatusCode::CONFLICT, e),
    }
}

#[derive(serde::Deserialize)]
struct Since {
    /// The last event the page has (the `id:` of its last SSE event), for
    /// a reconnect; `Last-Event-ID` says the same.
    after: Option<u64>,
}

/// The run's events as server-sent events, from the first (or after the
/// one the client has), each with its number as the SSE `id`, until the
/// run has ended and the client has every event.
async fn api_events(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    Query(since): Query<Since>,
    headers: HeaderMap,
) -> Response {
    let Ok(permit) = app.streams.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many open event streams\n",
        )
            .into_response();
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .or(since.after)
        .unwrap_or(0);
    let mut follow = match app.source.follow(&id, after).await {
        Ok(f) => f,
        Err(e) => return failure(StatusCode::NOT_FOUND, e),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<SseEvent, std::convert::Infallible>>(64);
    tokio::spawn(async move {
        let _permit = permit;
        loop {
            let (lines, ended) = match follow.next(&app.source).await {
                Ok(x) => x,
                Err(e) => {
                    let _ = tx
                        .send(Ok(SseEvent::default().event("failure").data(e.message)))
                        .await;
                    return;
                }
            };
            for (n, line) in lines {
                if tx
                    .send(Ok(SseEvent::default().id(n.to_string()).data(line)))
                    .await
                    .is_err()
                {
                    // The page went away.
                    return;
                }
            }
            if ended {
                let _ = tx
                    .send(Ok(SseEvent::default().event("settled").data("{}")))
                    .await;
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(FOLLOW) => {}
                () = tx.closed() => return,
            }
        }
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}
