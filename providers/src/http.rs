//! The HTTP side of the API providers (`openai`, `anthropic`): one POST,
//! its body streamed into a [`BodySink`], with the retry policy: 429,
//! 5xx and connection errors are retried with exponential backoff and
//! jitter (honouring `Retry-After`), at most `max_attempts` attempts in
//! all; any other status fails at once. Every attempt goes out through the
//! provider's [`Dispatch`] (prefix-cache holds, adaptive concurrency),
//! which answers a 429 or 529 by pausing and lowering the concurrency
//! rather than by counting a failed attempt. A request that timed out is not
//! retried: the server may have answered (and charged for) it, and a
//! timed-out call is never retried silently at full cost. Every failure is a
//! [`ProviderError`]: its kind says whether it is retried (the loop below
//! reads nothing else), its reason is the child's `agent-end` reason;
//! nothing a server sends can panic.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Client, Response, StatusCode};
use serde_json::Value;

use crate::SetupError;
use crate::budget;
use crate::dispatch::{Dispatch, DispatchConfig, Permit, RATE_LIMITED_ATTEMPTS};
use crate::excerpt::excerpt;
use dsh_seam::{Activity, FailureKind, Progress, ProviderError, RetryCause};

/// Largest successful response body read (a chat answer is far smaller).
const MAX_BODY: usize = 16 << 20;
/// How much of an error body is read for the message.
const MAX_ERROR_BODY: usize = 4 << 10;
/// Longest wait between two attempts, whatever `backoff` or a
/// `Retry-After` header asks for.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// Where requests go and how they are retried; the HTTP client is built on
/// the first request.
pub struct Endpoint {
    url: String,
    /// The host is this machine: proxies from the environment are skipped.
    loopback: bool,
    headers: HeaderMap,
    timeout: Duration,
    max_attempts: u32,
    backoff: Duration,
    client: OnceLock<Result<Client, ProviderError>>,
    dispatch: Arc<Dispatch>,
}

impl Endpoint {
    /// An endpoint posting to `url` with `headers` (an API's own
    /// authentication among them) under the same retry policy.
    pub fn from_parts(
        url: String,
        headers: HeaderMap,
        timeout: Duration,
        max_attempts: u32,
        backoff: Duration,
        dispatch: DispatchConfig,
    ) -> Self {
        let loopback = reqwest::Url::parse(&url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .is_some_and(|h| {
                h.eq_ignore_ascii_case("localhost")
                    || h.trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            });
        Endpoint {
            url,
            loopback,
            headers,
            timeout,
            max_attempts: max_attempts.max(1),
            backoff,
            client: OnceLock::new(),
            dispatch: Dispatch::new(dispatch),
        }
    }

    #[cfg(test)]
    pub fn url(&self) -> &str {
        &self.url
    }

    #[cfg(test)]
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    #[cfg(test)]
    pub fn client_built(&self) -> bool {
        self.client.get().is_some()
    }

    fn client(&self) -> Result<&Client, ProviderError> {
        self.client
            .get_or_init(|| {
                let builder = Client::builder()
                    .default_headers(self.headers.clone())
                    .redirect(reqwest::redirect::Policy::none())
                    .user_agent(concat!("dsh-workflow/", env!("CARGO_PKG_VERSION")));
                // A server on this machine is never reached through a proxy
                // (HTTP_PROXY and friends are for the way out).
                let builder = if self.loopback {
                    builder.no_proxy()
                } else {
                    builder
                };
                builder.build().map_err(|e| {
                    ProviderError::fatal(format!("cannot set up the HTTP client: {}", chain(&e)))
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Posts `body` and streams a 2xx response's body into `sink`,
    /// retrying as the policy says. Each retry is an
    /// [`Activity::Retry`] on `progress`, saying whether part of an answer
    /// had already streamed in (it is discarded: the retry asks again).
    ///
    /// `held` is the call's share of the host's memory budget for model
    /// calls ([`budget`]), covering what the call already holds (its
    /// conversation): it is made to cover that plus the request and, as it
    /// streams in, the response; the caller keeps it until what the sink
    /// collected is parsed, then shrinks it back. A turn the budget cannot
    /// cover fails.
    pub async fn post_into(
        &self,
        body: &Value,
        progress: &Progress,
        sink: &mut dyn BodySink,
        held: &mut budget::Held<'_>,
    ) -> Result<(), ProviderError> {
        let client = self.client()?;
        // Serialized once: what is sent on every attempt, and what the
        // dispatch compares for a shared prefix.
        let bytes: Arc<[u8]> = serde_json::to_vec(body)
            .map_err(|e| ProviderError::fatal(format!("cannot encode the request: {e}")))?
            .into();
        // What the call holds already (its conversation) plus the request:
        // the floor the response's share is counted from.
        let request_cost = held
            .bytes()
            .saturating_add(bytes.len().saturating_mul(budget::REQUEST_COPIES));
        // Waited for as one amount: wait_cover gives back what the call
        // holds before it waits (budget's module docs).
        held.wait_cover(
            request_cost.saturating_add(budget::RESPONSE_ALLOWANCE),
            "the request",
        )
        .await
        .map_err(|e| ProviderError::fatal(e.to_string()))?;
        // Attempts counted against max_attempts, and 429/529 answers the
        // dispatch took in its stride (adaptive concurrency).
        let mut attempt = 1;
        let mut limited = 0;
        let mut sent = 0;
        loop {
            let mut permit = self.dispatch.admit(bytes.clone(), progress).await;
            sent += 1;
            let failed = match self
                .once(
                    client,
                    &bytes,
                    progress,
                    sink,
                    &mut permit,
                    held,
                    request_cost,
                )
                .await
            {
                Ok(()) => {
                    permit.succeeded(progress);
                    return Ok(());
                }
                Err(e) => e,
            };
            // The kind decides, never the message.
            let (retry_after, rate_limited) = match failed.kind {
                FailureKind::Retryable { cause, after } => {
                    (after, cause == RetryCause::RateLimited)
                }
                FailureKind::Refused { .. } | FailureKind::Fatal => return Err(failed),
            };
            let last = failed.reason;
            let adapted = rate_limited && self.dispatch.adaptive();
            if adapted {
                limited += 1;
                if limited >= RATE_LIMITED_ATTEMPTS {
                    return Err(ProviderError::fatal(format!(
                        "rate limited {limited} times for one request; the last: {last}"
                    )));
                }
                // Every request of the provider waits this out, at a
                // lower concurrency; this one goes back in line.
                let pause = retry_after
                    .unwrap_or_else(|| backoff_delay(self.backoff, limited, jitter()))
                    .min(MAX_DELAY);
                permit.rate_limited(pause, &last, progress);
            } else if attempt >= self.max_attempts {
                return Err(ProviderError::fatal(if self.max_attempts == 1 {
                    last
                } else {
                    format!("gave up after {attempt} attempts; the last: {last}")
                }));
            }
            drop(permit);
            tracing::debug!(attempt, limited, %last, "http: retrying");
            let partial = sink.restart();
            progress.activity(Activity::Retry {
                attempt: sent + 1,
                reason: last,
                partial,
            });
            if !adapted {
                let delay = retry_after
                    .unwrap_or_else(|| backoff_delay(self.backoff, attempt, jitter()))
                    .min(MAX_DELAY);
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn once(
        &self,
        client: &Client,
        body: &[u8],
        progress: &Progress,
        sink: &mut dyn BodySink,
        permit: &mut Permit,
        held: &mut budget::Held<'_>,
        request_cost: usize,
    ) -> Result<(), ProviderError> {
        let sent = client
            .post(&self.url)
            .timeout(self.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec())
            .send()
            .await;
        let mut resp = match sent {
            Ok(r) => r,
            Err(e) => return Err(self.transport(&e)),
        };
        progress.report();
        let status = resp.status();
        if status.is_success() {
            permit.answering();
            let content_type = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            sink.start(content_type.as_deref());
            let mut total = 0usize;
            loop {
                match resp.chunk().await {
                    Ok(Some(chunk)) => {
                        progress.report();
                        total += chunk.len();
                        if total > MAX_BODY {
                            return Err(ProviderError::fatal(format!(
                                "the API's response is larger than {} MiB",
                                MAX_BODY >> 20
                            )));
                        }
                        // A retry's body replaces the last one's, so the
                        // share already held covers it up to that size.
                        if let Err(e) = held.cover(
                            request_cost
                                .saturating_add(total.saturating_mul(budget::RESPONSE_COPIES)),
                            "the answer so far",
                        ) {
                            return Err(ProviderError::fatal(e.to_string()));
                        }
                        if let Err(e) = sink.chunk(&chunk) {
                            return Err(ProviderError::fatal(e.to_string()));
                        }
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(self.transport(&e)),
                }
            }
        }
        let after = retry_after(resp.headers(), SystemTime::now());
        let text = match read_capped(&mut resp, MAX_ERROR_BODY, progress).await {
            Ok((bytes, _)) => excerpt(&bytes),
            Err(_) => "(the body could not be read)".into(),
        };
        let reason = format!("HTTP {}: {text}", status_text(status));
        Err(match status_kind(status, after) {
            Some(kind) => ProviderError { kind, reason },
            None => ProviderError::fatal(reason),
        })
    }

    fn transport(&self, e: &reqwest::Error) -> ProviderError {
        if e.is_builder() {
            return ProviderError::fatal(format!("cannot build the request: {}", chain(e)));
        }
        if e.is_timeout() {
            return ProviderError::fatal(format!(
                "no complete response within {} (timeout); not retried: the request may have \
                 been answered and charged (raise the provider's timeout)",
                show_duration(self.timeout)
            ));
        }
        let reason = if e.is_connect() {
            format!("cannot connect to {}: {}", self.url, chain(e))
        } else {
            format!("the connection failed: {}", chain(e))
        };
        ProviderError::retryable(RetryCause::Connection, None, reason)
    }
}

/// The kind of a failure answered with the non-2xx `status` (`after`: its
/// `Retry-After`): `None` for a status that is not retried (fatal).
fn status_kind(status: StatusCode, after: Option<Duration>) -> Option<FailureKind> {
    // 529: Anthropic's "overloaded", a rate limit of the whole service.
    let cause = if status == StatusCode::TOO_MANY_REQUESTS || status.as_u16() == 529 {
        RetryCause::RateLimited
    } else if status.is_server_error() {
        RetryCause::ServerError
    } else {
        return None;
    };
    Some(FailureKind::Retryable { cause, after })
}

/// `headers` of a provider's table as HTTP headers.
pub fn header_map(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HeaderMap, SetupError> {
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            SetupError::invalid(
                "headers",
                format!("{name:?} is not a valid HTTP header name"),
            )
        })?;
        let v = HeaderValue::from_str(value).map_err(|_| {
            SetupError::invalid(
                format!("headers.{name}"),
                "the value is not a valid HTTP header value",
            )
        })?;
        out.insert(n, v);
    }
    Ok(out)
}

/// A header value holding a key from `env`: marked sensitive (never
/// shown in debug output); the key itself never appears in the error.
pub fn secret(value: &str, env: &str) -> Result<HeaderValue, SetupError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| SetupError::BadKey {
        env: env.to_string(),
        problem: "it is not a valid HTTP header value (stray newline or non-ASCII character?)"
            .into(),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// Where a 2xx response's body goes as it arrives.
pub trait BodySink: Send {
    /// The response arrived, with this `Content-Type`.
    fn start(&mut self, content_type: Option<&str>);
    /// The next piece of the body; an error ends the request (not retried).
    fn chunk(&mut self, bytes: &[u8]) -> Result<(), SinkError>;
    /// The attempt failed and another follows: forget what came. Returns
    /// whether anything had (part of an answer is being discarded).
    fn restart(&mut self) -> bool;
}

/// Why a [`BodySink`] cannot take a response's body; the request fails,
/// not retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The event stream is not one the decoder holds (a line past its
    /// bound).
    #[error(transparent)]
    Stream(#[from] crate::sse::SseError),
}

/// Reads at most `cap` bytes of the body; `true` when there was more.
async fn read_capped(
    resp: &mut Response,
    cap: usize,
    progress: &Progress,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        progress.report();
        if out.len() + chunk.len() > cap {
            let room = cap - out.len();
            out.extend_from_slice(&chunk[..room]);
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, false))
}

fn status_text(s: StatusCode) -> String {
    match s.canonical_reason() {
        Some(r) => format!("{} {r}", s.as_u16()),
        None => s.as_u16().to_string(),
    }
}

/// An error and its causes, "outer: inner: root".
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

fn show_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The wait before attempt `failed + 1`: `base · 2^(failed-1)`, at most
/// [`MAX_DELAY`], with "equal jitter" (`r` in `[0, 1)` picks a point in
/// the upper half).
pub fn backoff_delay(base: Duration, failed: u32, r: f64) -> Duration {
    let exp = 2f64.powi(failed.saturating_sub(1).min(30) as i32);
    let full = (base.as_secs_f64() * exp).min(MAX_DELAY.as_secs_f64());
    let r = if r.is_finite() {
        r.clamp(0.0, 1.0)
    } else {
        0.5
    };
    Duration::from_secs_f64(full / 2.0 + full / 2.0 * r)
}

/// A number in `[0, 1)`, different on every call (no RNG crate needed for
/// jitter: the standard library's hasher keys are random).
fn jitter() -> f64 {
    use std::hash::BuildHasher;
    let h = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// `retry-after-ms` (OpenAI's, in milliseconds) or `Retry-After`: a
/// number of seconds or an HTTP date (IMF-fixdate); `None` when absent or
/// unreadable.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = parse_http_date(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses an HTTP date (RFC 9110: IMF-fixdate such as `Sun, 06 Nov 1994
/// 08:49:37 GMT`, and the two obsolete forms).
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// The retry decision is the status's kind: 429 and 529 are rate
    /// limits (the dispatch's), 5xx the server's failure, any other 4xx
    /// (a bad key, a bad request, a refused model) is final.
    #[rstest]
    #[case::too_many_requests(429, Some(RetryCause::RateLimited))]
    #[case::overloaded(529, Some(RetryCause::RateLimited))]
    #[case::internal(500, Some(RetryCause::ServerError))]
    #[case::bad_gateway(502, Some(RetryCause::ServerError))]
    #[case::unavailable(503, Some(RetryCause::ServerError))]
    #[case::bad_request(400, None)]
    #[case::unauthorized(401, None)]
    #[case::forbidden(403, None)]
    #[case::not_found(404, None)]
    #[case::too_large(413, None)]
    #[case::unprocessable(422, None)]
    fn a_status_is_retried_by_its_kind(#[case] status: u16, #[case] want: Option<RetryCause>) {
        let status = StatusCode::from_u16(status).expect("a status");
        let after = Some(Duration::from_secs(2));
        let want = want.map(|cause| FailureKind::Retryable { cause, after });
        assert_eq!(status_kind(status, after), want);
    }

    /// What a server answers decides the kind; the retry loop reads only
    /// the kind. A connection that cannot be made or breaks is retried, a
    /// timeout is not (the request may have been charged).
    #[tokio::test]
    async fn transport_failures_are_retryable_timeouts_fatal() {
        let endpoint = |url: &str, timeout: Duration| {
            Endpoint::from_parts(
                url.to_string(),
                HeaderMap::new(),
                timeout,
                1,
                Duration::from_millis(1),
                DispatchConfig::default(),
            )
        };
        // Nothing listens on a port just released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let refused = endpoint(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(5));
        let client = refused.client().expect("client");
        let err = client
            .post(&refused.url)
            .send()
            .await
            .expect_err("nothing listens");
        let kind = refused.transport(&err).kind;
        assert_eq!(
            kind,
            FailureKind::Retryable {
                cause: RetryCause::Connection,
                after: None
            }
        );
        // A server that accepts and never answers: a timeout.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/", silent.local_addr().expect("addr"));
        let slow = endpoint(&url, Duration::from_millis(200));
        let client = slow.client().expect("client");
        let err = client
            .post(&slow.url)
            .timeout(slow.timeout)
            .send()
            .await
            .expect_err("no answer");
        let e = slow.transport(&err);
        assert_eq!(e.kind, FailureKind::Fatal);
        assert!(e.reason.contains("not retried"), "{e}");
        drop(silent);
    }
    use std::time::UNIX_EPOCH;

    #[rstest]
    #[case::first(1, 0.0, 250)]
    #[case::first_top(1, 1.0, 500)]
    #[case::second(2, 0.0, 500)]
    #[case::third(3, 0.5, 1500)]
    #[case::capped(40, 1.0, 60_000)]
    fn backoff_doubles_with_jitter_and_a_cap(
        #[case] failed: u32,
        #[case] r: f64,
        #[case] want_ms: u128,
    ) {
        let d = backoff_delay(Duration::from_millis(500), failed, r);
        assert_eq!(d.as_millis(), want_ms);
    }

    #[test]
    fn jitter_is_in_range() {
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).expect("value"));
        h
    }

    #[rstest]
    #[case::seconds("3", Some(3000))]
    #[case::fraction("0.25", Some(250))]
    #[case::date_ahead("Sun, 06 Nov 1994 08:49:47 GMT", Some(10_000))]
    #[case::date_past("Sun, 06 Nov 1994 08:49:27 GMT", Some(0))]
    #[case::garbage("soon", None)]
    #[case::negative("-1", None)]
    #[case::bad_zone("Sun, 06 Nov 1994 08:49:47 CET", None)]
    fn retry_after_seconds_or_date(#[case] v: &str, #[case] want_ms: Option<u128>) {
        let now = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        assert_eq!(
            UNIX_EPOCH + Duration::from_secs(784_111_777),
            now,
            "RFC 9110's example date"
        );
        assert_eq!(
            retry_after(&headers(v), now).map(|d| d.as_millis()),
            want_ms
        );
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2000 12:00:00 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(951_825_600))
        );
        for bad in [
            "",
            "Sun 06 Nov 1994",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT x",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_endpoint_knows_a_loopback_host_and_builds_its_client_lazily() {
        for (url, loopback) in [
            ("http://127.0.0.1:9/v1/chat/completions", true),
            ("http://localhost:8080/v1", true),
            ("http://[::1]:8080", true),
            ("http://127.1.2.3", true),
            ("https://api.deepseek.com", false),
            ("http://10.0.0.1:8080", false),
        ] {
            let e = Endpoint::from_parts(
                url.into(),
                HeaderMap::new(),
                Duration::from_secs(1),
                1,
                Duration::from_millis(1),
                DispatchConfig::default(),
            );
            assert_eq!(e.loopback, loopback, "{url}");
            assert_eq!(e.url(), url);
            assert!(e.client.get().is_none(), "the client is built lazily");
        }
    }

    #[test]
    fn a_secret_is_sensitive_and_a_bad_one_is_never_shown() {
        assert!(secret("Bearer k", "KEY").expect("valid").is_sensitive());
        let err = secret("Bearer bad\nkey", "DEEPSEEK_API_KEY").expect_err("refused");
        assert!(err.to_string().contains("DEEPSEEK_API_KEY"), "{err}");
        assert!(
            !err.to_string().contains("bad"),
            "the key is never shown: {err}"
        );
    }
}
