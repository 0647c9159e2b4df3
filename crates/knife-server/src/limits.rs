//! Request body limits before any handler or authentication (SPEC.md SEC-04): a
//! declared `Content-Length` over the limit is answered 413 without reading a byte.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use knife_protocol::limits::BODY_MAX_BYTES;

use crate::error::ApiErr;

/// Refuses a request whose `Content-Length` exceeds [`BODY_MAX_BYTES`] with 413
/// `payload_too_large` at once (the connection is then closed by hyper, so a client
/// declaring 100 GB holds nothing), and caps every other body at the same size
/// while it is read: a chunked body that grows past it fails the read, which JSON
/// routes answer with 413 too (see `routes::body`).
pub(crate) async fn body_limit(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = declared
        && length > BODY_MAX_BYTES as u64
    {
        let mut response = too_large(Some(length)).into_response();
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        return response;
    }
    let request = request.map(|body| Body::new(http_body_util::Limited::new(body, BODY_MAX_BYTES)));
    next.run(request).await
}

/// 413 `payload_too_large`, naming the declared size when there was one.
pub(crate) fn too_large(declared: Option<u64>) -> ApiErr {
    let what = match declared {
        Some(n) => format!("the request body declares {n} bytes"),
        None => "the request body is too large".to_owned(),
    };
    ApiErr {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "payload_too_large",
        message: format!(
            "{what}; the limit is {BODY_MAX_BYTES} bytes (a message may hold at most {} bytes)",
            knife_protocol::limits::MESSAGE_MAX_BYTES
        ),
        files: Vec::new(),
    }
}
