//! The address and token of the servers dsh runs for others to call
//! (`workflow mcp --http`, `workflow serve`): loopback unless told
//! otherwise, and anywhere else only behind a token from the environment
//! that is long enough not to be guessed.

use std::net::SocketAddr;

use crate::error::CliError;

/// The shortest token accepted.
const MIN_TOKEN: usize = 16;

/// The address `flag` gave (`value`, e.g. `127.0.0.1:8600`) and the token
/// in `$var`: an address that is not loopback without a token is refused,
/// saying how a client sends it (`how`).
pub(crate) fn listen_on(
    flag: &str,
    value: &str,
    example: &str,
    var: &str,
    how: &str,
) -> Result<(SocketAddr, Option<String>), CliError> {
    let addr: SocketAddr = value.parse().map_err(|e| {
        CliError::usage(format!(
            "{flag} {value}: not an address and port ({e}); e.g. {flag} {example}"
        ))
    })?;
    let token = std::env::var(var).ok().filter(|t| !t.is_empty());
    if token.is_none() && !addr.ip().is_loopback() {
        return Err(CliError::usage(format!(
            "{flag} {addr} is not a loopback address: set a token in ${var} ({how}), or serve \
             on 127.0.0.1"
        )));
    }
    if let Some(t) = &token
        && t.len() < MIN_TOKEN
    {
        return Err(CliError::usage(format!(
            "${var}: a token of {} characters is too easy to guess; use at least {MIN_TOKEN}",
            t.len()
        )));
    }
    Ok((addr, token))
}

/// Compares without stopping at the first difference, so the time taken
/// tells nothing of where a guessed token went wrong.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
