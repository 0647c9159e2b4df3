//! Keeps other web pages from using knife through the user's browser.
//!
//! The web page made the API reachable from a browser, and a browser visits other
//! sites too. Two checks on every request (API, WebSocket, MCP, page):
//!
//! - **Origin**: a request that carries an `Origin` header (browsers send it on
//!   cross-site `fetch`/form posts and on every WebSocket) must come from knife's own
//!   page: the origin's `host[:port]` must be the request's `Host`. A foreign page
//!   gets 403 `forbidden` — it cannot subscribe to a thread's events over the
//!   WebSocket (which CORS does not cover) or post a form to the API. Clients other
//!   than browsers send no `Origin` and are not affected.
//! - **Host** (only without an API token): the `Host` must be a loopback name
//!   (`localhost`, `*.localhost`, `127.0.0.0/8`, `[::1]`). Without it a DNS-rebinding
//!   page (a foreign name that resolves to 127.0.0.1) would be same-origin with the
//!   tokenless API and could drive the agent. With a token any `Host` is accepted (a
//!   rebinding page has no token); behind a reverse proxy, forward the `Host` header.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiErr;

/// Middleware of the whole router: refuses a foreign `Origin`, and a non-loopback
/// `Host` when the server has no API token (see the module docs).
pub(crate) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match check(&request, state.api_token.is_some()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

fn check(request: &Request, has_token: bool) -> Result<(), ApiErr> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    if let Some(host) = host.as_deref().filter(|h| !has_token && !is_loopback(h)) {
        return Err(ApiErr::forbidden(format!(
            "knife without an API token answers only loopback names (localhost, 127.0.0.1, \
             [::1]), not `{host}`; open http://localhost:<port>/ instead, or start knife with \
             an API token (api_token_env) to serve other names"
        )));
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let authority = origin.split_once("://").map(|(_, a)| a);
        let same =
            matches!((authority, host.as_deref()), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h));
        if !same {
            return Err(ApiErr::forbidden(format!(
                "cross-site request refused: a page from `{origin}` may not use this knife; \
                 open knife's own page at http://{}/",
                host.as_deref().unwrap_or("<knife's address>")
            )));
        }
    }
    Ok(())
}

/// True for `localhost`, `*.localhost` and loopback IPs, with or without a port.
fn is_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
            _ => host,
        },
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn loopback_names_with_and_without_ports() {
        for h in [
            "localhost",
            "localhost:7878",
            "LOCALHOST.:1",
            "knife.localhost:80",
            "127.0.0.1",
            "127.1.2.3:9",
            "[::1]:7878",
            "[::1]",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:7878",
            "localhost.evil.example",
            "10.0.0.1:7878",
            "[::2]:1",
            "127.0.0.1.nip.io",
            "",
        ] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
