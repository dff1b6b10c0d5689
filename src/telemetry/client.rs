//! The HTTP client the OTLP exporters send with: the workspace's own
//! reqwest (the one the providers use, with rustls), blocking, because the
//! SDK exports from threads of its own that run no async runtime.
//!
//! Why not the exporter's built-in client: it is reqwest 0.13 with a
//! second TLS stack (aws-lc, a C build); this one adds no crate and
//! speaks to `https://` collectors (Honeycomb, Datadog, Grafana Cloud)
//! with the TLS the providers already have.

use std::io::Read as _;
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The largest answer a collector may give (it says "accepted", or why
/// not): more is cut off, not held.
const MAX_ANSWER: u64 = 1 << 20;

/// The blocking client, made on a thread of its own: reqwest's blocking
/// client starts a runtime of its own, which must not be made (or
/// dropped) inside the CLI's.
#[derive(Debug, Clone)]
pub(crate) struct Blocking(reqwest::blocking::Client);

impl Blocking {
    pub(crate) fn new(timeout: Duration) -> Result<Blocking, String> {
        std::thread::Builder::new()
            .name("dsh-otel-client".into())
            .spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .build()
                    .map(Blocking)
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| e.to_string())?
            .join()
            .map_err(|_| "the thread making the HTTP client panicked".to_string())?
    }
}

#[async_trait]
impl HttpClient for Blocking {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut sent = self
            .0
            .request(parts.method, parts.uri.to_string())
            .body(body.to_vec());
        for (name, value) in &parts.headers {
            sent = sent.header(name, value);
        }
        let answer = sent.send()?;
        let mut response = Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            response = response.header(name, value);
        }
        let mut bytes = Vec::new();
        answer.take(MAX_ANSWER).read_to_end(&mut bytes)?;
        Ok(response.body(Bytes::from(bytes))?)
    }
}
