//! HTTP failure mapping shared by every provider client: non-2xx answers to
//! [`LlmError::Http`] (retry-after, JSON body, message) and transport errors to text.

use std::time::{Duration, SystemTime};

use futures::{Stream, StreamExt};
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::error::LlmError;
use crate::sse::{SseEvent, decode_stream};

/// Longest raw (non-JSON) body excerpt kept in an error message, in characters.
const MESSAGE_BODY_CHARS: usize = 500;

/// Reads how long the server asks us to wait before retrying, from response headers.
///
/// Order: `retry-after-ms` (milliseconds, integer or decimal; OpenAI sends it),
/// then `retry-after` as delay-seconds (integer or decimal) or as an HTTP date
/// (RFC 9110 IMF-fixdate, also RFC 850 / asctime forms). A date in the past
/// gives `Duration::ZERO`. Returns `None` when neither header is present or
/// parseable (negative, NaN or garbage values are ignored).
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    parse_retry_after_at(headers, SystemTime::now())
}

/// [`parse_retry_after`] with an explicit "now" (for HTTP-date values), so tests
/// need no real clock.
pub fn parse_retry_after_at(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Some(secs) = parse_non_negative(value) {
        return Some(Duration::from_secs_f64(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A finite, non-negative number that fits a `Duration` comfortably (< ~31 years).
fn parse_non_negative(text: &str) -> Option<f64> {
    let n: f64 = text.parse().ok()?;
    (0.0..1e9).contains(&n).then_some(n)
}

/// Builds [`LlmError::Http`] from a non-2xx status, its headers and its body text.
///
/// `body` is parsed as JSON when it is JSON; `message` is the body's
/// `error.message` (OpenAI / Anthropic shape) or top-level `message`, else the
/// raw body truncated to 500 characters, else the status reason phrase.
pub fn http_error(status: u16, headers: &HeaderMap, body: &str) -> LlmError {
    let json: Option<Value> = serde_json::from_str(body).ok();
    let from_json = json.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let reason = || {
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
    };
    let message = from_json.unwrap_or_else(|| {
        let trimmed = body.trim();
        if trimmed.is_empty() {
            reason().unwrap_or("no response body").to_owned()
        } else if is_html(headers, trimmed) {
            // A proxy's or gateway's error page (TURN-09): the status line says it
            // all; the markup would only clutter the retry status and the error.
            reason().unwrap_or("an HTML error page").to_owned()
        } else {
            let mut excerpt: String = trimmed.chars().take(MESSAGE_BODY_CHARS).collect();
            if trimmed.chars().count() > MESSAGE_BODY_CHARS {
                excerpt.push('…');
            }
            excerpt
        }
    });
    LlmError::Http {
        status,
        retry_after: parse_retry_after(headers),
        body: json,
        message,
    }
}

/// True when an error body is an HTML page: `content-type: text/html`, or markup
/// that opens like a page (`<!doctype html`, `<html`, `<head`, `<body`, `<title`).
fn is_html(headers: &HeaderMap, body: &str) -> bool {
    let declared = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("text/html"));
    let head: String = body.chars().take(200).collect::<String>().to_lowercase();
    declared
        || (head.starts_with('<')
            && ["<!doctype html", "<html", "<head", "<body", "<title"]
                .iter()
                .any(|tag| head.contains(tag)))
}

/// Reads a non-2xx response (headers, then body) into [`LlmError::Http`].
/// A body that cannot be read is treated as empty: the status is what matters.
pub async fn http_error_from_response(response: reqwest::Response) -> LlmError {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.unwrap_or_default();
    http_error(status, &headers, &body)
}

/// An error and its `source()` chain as one line: `outer: inner: root`.
/// reqwest's own Display hides the cause (e.g. "connection refused").
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let h = headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]);
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(1500)));
        let h = headers(&[("retry-after-ms", "12.5")]);
        assert_eq!(parse_retry_after(&h), Some(Duration::from_micros(12_500)));
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        // An unparseable ms header falls back to retry-after.
        let h = headers(&[("retry-after-ms", "soon"), ("retry-after", " 3 ")]);
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3)));
    }

    #[test]
    fn retry_after_http_date_future_and_past() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let h = headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT")]);
        assert_eq!(parse_retry_after_at(&h, now), Some(Duration::from_secs(30)));
        let h = headers(&[("retry-after", "Wed, 21 Oct 2015 07:00:00 GMT")]);
        assert_eq!(parse_retry_after_at(&h, now), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_garbage_or_missing_is_none() {
        assert_eq!(parse_retry_after(&HeaderMap::new()), None);
        for bad in ["-1", "NaN", "inf", "tomorrow", ""] {
            assert_eq!(
                parse_retry_after(&headers(&[("retry-after", bad)])),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn http_error_message_from_json_or_raw_body() {
        let body = r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#;
        let err = http_error(429, &headers(&[("retry-after", "2")]), body);
        let LlmError::Http {
            status,
            retry_after,
            body,
            message,
        } = err
        else {
            panic!("not Http")
        };
        assert_eq!(status, 429);
        assert_eq!(retry_after, Some(Duration::from_secs(2)));
        assert_eq!(message, "Rate limit reached");
        assert_eq!(body.unwrap()["error"]["type"], "requests");

        let err = http_error(500, &HeaderMap::new(), "upstream crashed");
        assert!(
            matches!(err, LlmError::Http { body: None, ref message, .. } if message == "upstream crashed")
        );
        let err = http_error(503, &HeaderMap::new(), "");
        assert!(
            matches!(err, LlmError::Http { ref message, .. } if message == "Service Unavailable")
        );
    }

    #[test]
    fn turn_09_an_html_error_page_is_summarised_to_its_status_line() {
        let page = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n\
                    <center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n\
                    </body>\r\n</html>\r\n";
        for (headers, body) in [
            (HeaderMap::new(), page.to_owned()),
            (HeaderMap::new(), format!("<!DOCTYPE html>{page}")),
            (
                headers(&[("content-type", "text/html; charset=utf-8")]),
                "Bad gateway, try again".to_owned(),
            ),
        ] {
            let err = http_error(502, &headers, &body);
            let LlmError::Http { message, body, .. } = &err else {
                panic!("not Http")
            };
            assert_eq!(message, "Bad Gateway");
            assert_eq!(body, &None);
            assert_eq!(
                err.to_string(),
                "the model endpoint answered HTTP 502: Bad Gateway"
            );
        }
    }
}

/// A response body went silent for `after`; [`crate::sse::decode_stream`] reports
/// it as [`LlmError::Timeout`] instead of a lost connection.
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("no data for {:.1} s", after.as_secs_f64())]
pub struct IdleTimeout {
    /// The idle time that elapsed.
    pub after: std::time::Duration,
}

/// Connection timeouts of a provider's HTTP client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// Most time to establish the TCP/TLS connection (default 10 s).
    pub connect: Duration,
    /// Most silence between two reads, headers included (default 300 s: reasoning
    /// models may think for minutes before their first byte).
    pub idle: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            idle: Duration::from_secs(300),
        }
    }
}

impl HttpTimeouts {
    /// A reqwest client with these timeouts (no overall limit: a long answer may
    /// stream for minutes).
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .connect_timeout(self.connect)
            .read_timeout(self.idle)
            .build()
            .unwrap_or_else(|err| {
                tracing::warn!(error = %err, "could not configure HTTP timeouts; using defaults");
                reqwest::Client::new()
            })
    }
}

/// A body read error: an idle timeout or anything else reqwest reports.
#[derive(Debug, thiserror::Error)]
enum BodyReadError {
    // `#[source]`, not `transparent`: the decoder finds the IdleTimeout by walking
    // the source chain, and `transparent` would skip it.
    #[error("the response body went silent")]
    Idle(#[source] IdleTimeout),
    #[error("reading the response body failed")]
    Other(#[source] reqwest::Error),
}

/// Sends a streaming request and, once a 2xx answer's headers arrived, returns
/// its body decoded as SSE events.
///
/// Errors before the stream: [`LlmError::Timeout`] (connect timeout, or no
/// headers within the idle timeout), [`LlmError::Transport`] when the request
/// cannot be sent, [`LlmError::Http`] for non-2xx (see [`http_error`]). Inside
/// the stream: a body read that times out is [`LlmError::Timeout`], other read
/// failures and malformed SSE are [`LlmError::Stream`].
pub async fn open_event_stream(
    request: reqwest::RequestBuilder,
    timeouts: HttpTimeouts,
) -> Result<impl Stream<Item = Result<SseEvent, LlmError>> + Send + 'static, LlmError> {
    let response = request
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|err| {
            if err.is_timeout() {
                let after = if err.is_connect() {
                    timeouts.connect
                } else {
                    timeouts.idle
                };
                LlmError::Timeout { after }
            } else {
                LlmError::Transport(error_chain(&err))
            }
        })?;
    if !response.status().is_success() {
        return Err(http_error_from_response(response).await);
    }
    tracing::debug!(
        status = response.status().as_u16(),
        url = %response.url(),
        "model event stream opened"
    );
    let idle = timeouts.idle;
    // A body read that times out becomes an IdleTimeout the decoder reports as
    // LlmError::Timeout, not as a dropped connection.
    let bytes = response.bytes_stream().map(move |chunk| {
        chunk.map_err(|err| {
            if err.is_timeout() {
                BodyReadError::Idle(IdleTimeout { after: idle })
            } else {
                BodyReadError::Other(err)
            }
        })
    });
    Ok(decode_stream(bytes))
}
