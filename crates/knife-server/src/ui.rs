//! The web page (issue 8): `GET /` serves `ui/index.html`, `GET /ui/{file}` its
//! modules and stylesheet. The files are embedded in the binary at compile time
//! (`include_str!`), so building or testing knife needs no Node step.
//!
//! The page is public (it holds no data); everything it shows comes from `/api`,
//! which keeps its own token check. Every answer carries a strict
//! `Content-Security-Policy`: scripts and styles only from this origin, no inline
//! script, no plugins, no framing — a second wall behind the page's rule of never
//! turning model text into HTML.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::error::ApiErr;

/// CSP of the page and its assets. `connect-src 'self'` covers `fetch` to `/api`
/// and the WebSocket to `/api/ws` on the same host and port.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The embedded files: name under `/ui/`, MIME type, contents.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../ui/style.css"),
    ),
    ("dom.js", JS, include_str!("../ui/dom.js")),
    ("api.js", JS, include_str!("../ui/api.js")),
    ("markdown.js", JS, include_str!("../ui/markdown.js")),
    ("app.js", JS, include_str!("../ui/app.js")),
    ("sidebar.js", JS, include_str!("../ui/sidebar.js")),
    ("thread.js", JS, include_str!("../ui/thread.js")),
    ("items.js", JS, include_str!("../ui/items.js")),
    ("approvals.js", JS, include_str!("../ui/approvals.js")),
    ("changes.js", JS, include_str!("../ui/changes.js")),
    ("sessions.js", JS, include_str!("../ui/sessions.js")),
    ("events.js", JS, include_str!("../ui/events.js")),
];

const JS: &str = "text/javascript; charset=utf-8";

/// `GET /`: the page.
pub(crate) async fn index() -> Response {
    page("text/html; charset=utf-8", include_str!("../ui/index.html"))
}

/// `GET /ui/{file}`: one embedded asset; JSON 404 for any other name.
pub(crate) async fn asset(Path(name): Path<String>) -> Result<Response, ApiErr> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, mime, body)| page(mime, body))
        .ok_or_else(|| {
            ApiErr::not_found(format!(
                "no web page asset `{name}`; open the page at / instead"
            ))
        })
}

fn page(mime: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            // The files change with the binary: always revalidate.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        // A module imported by another but missing from ASSETS would 404 in the
        // browser; catch it at `cargo test` time.
        let mut sources: Vec<&str> = ASSETS.iter().map(|(_, _, b)| *b).collect();
        sources.push(include_str!("../ui/index.html"));
        for src in sources {
            for part in src
                .split("from './")
                .skip(1)
                .chain(src.split("src=\"/ui/").skip(1))
            {
                let name: String = part
                    .chars()
                    .take_while(|c| *c != '\'' && *c != '"')
                    .collect();
                assert!(
                    ASSETS.iter().any(|(n, _, _)| *n == name),
                    "`{name}` is imported but not embedded"
                );
            }
        }
    }
}
