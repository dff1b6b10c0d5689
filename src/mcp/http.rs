//! `dsh workflow mcp --http ADDR`: the same tools over MCP's streamable
//! HTTP transport (rmcp's `StreamableHttpService`, on hyper). Loopback
//! unless told otherwise; an address that is not loopback needs a bearer
//! token (from the environment variable `--token-env` names), and every
//! request without it is refused with 401 before rmcp sees it.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::tools::Server;
use crate::error::{CliError, exit};

/// The environment variable a token is read from unless `--token-env`
/// names another.
pub(crate) const TOKEN_ENV: &str = "DSH_MCP_TOKEN";

/// Serves until SIGINT or SIGTERM.
pub(crate) async fn serve(
    server: Server,
    addr: &str,
    token_env: Option<&str>,
) -> Result<i32, CliError> {
    let var = token_env.unwrap_or(TOKEN_ENV);
    let (addr, token) = crate::token::listen_on(
        "--http",
        addr,
        "127.0.0.1:8765",
        var,
        "clients send `Authorization: Bearer TOKEN`",
    )?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::usage(format!("--http {addr}: cannot listen: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::usage(format!("--http {addr}: {e}")))?;
    let stop = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = stop.child_token();
    if !addr.ip().is_loopback() {
        // Behind a token, the Host header is not what keeps others out
        // (DNS rebinding needs a browser that holds the token).
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let expected = token.map(|t| Arc::<str>::from(format!("Bearer {t}")));
    // The address actually bound (a port 0 was given a free one), for the
    // one who started it.
    eprintln!("dsh: MCP on http://{bound}/mcp");
    let mut signals = crate::execute::Signals::install();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // A connection that failed before it was accepted is the
                // peer's; the server goes on.
                Err(_) => continue,
            },
            () = signals.next() => break,
        };
        let service = service.clone();
        let expected = expected.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let handler =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let service = service.clone();
                    let expected = expected.clone();
                    async move {
                        use tower_service::Service as _;
                        let allowed = match &expected {
                            None => true,
                            Some(e) => req
                                .headers()
                                .get(hyper::header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok())
                                .is_some_and(|v| crate::token::same(v.as_bytes(), e.as_bytes())),
                        };
                        if !allowed {
                            let body = http_body_util::Full::new(bytes::Bytes::from_static(
                                b"a bearer token is required (Authorization: Bearer TOKEN)\n",
                            ));
                            let mut refused =
                                hyper::Response::new(http_body_util::BodyExt::boxed(body));
                            *refused.status_mut() = hyper::StatusCode::UNAUTHORIZED;
                            return Ok::<_, std::convert::Infallible>(refused);
                        }
                        let mut service = service;
                        service.call(req).await
                    }
                });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), handler);
            tokio::select! {
                _ = conn => {}
                () = stop.cancelled() => {}
            }
        });
    }
    stop.cancel();
    Ok(exit::COMPLETED)
}
