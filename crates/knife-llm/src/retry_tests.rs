//! Table-driven tests of the retry policy, one table per rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::http::{http_error, parse_retry_after_at};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;

/// Header name/value pairs of one case.
type Headers = Vec<(&'static str, &'static str)>;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    map
}

fn http(status: u16, body: &str) -> LlmError {
    http_error(status, &HeaderMap::new(), body)
}

fn provider(body: Value) -> LlmError {
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    LlmError::Provider {
        code: error_code(&body),
        message,
        body: Some(body),
    }
}

fn retryable(e: &LlmError) -> bool {
    matches!(classify(e), ErrorClass::Retryable { .. })
}

#[test]
fn proc_05_recognised_transient_kinds_are_retried() {
    let cases: Vec<(&str, LlmError, &str)> = vec![
        (
            "stream too_many_requests",
            provider(json!({"type":"error","error":{"type":"too_many_requests"}})),
            "Too Many Requests",
        ),
        (
            "stream rate_limit code",
            provider(json!({"type":"error","error":{"code":"rate_limit_exceeded"}})),
            "Rate Limited",
        ),
        (
            "anthropic overloaded",
            provider(
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ),
            "Provider is overloaded",
        ),
        (
            "server_error",
            provider(json!({"error":{"type":"server_error","message":"oops"}})),
            "Provider Server Error",
        ),
        (
            "resource_exhausted",
            provider(json!({"error":{"code":"resource_exhausted","message":"try later"}})),
            "Provider is overloaded",
        ),
        (
            "unavailable",
            provider(json!({"error":{"code":"service_unavailable","message":"later"}})),
            "Provider is overloaded",
        ),
        (
            "plain text rate limit",
            LlmError::Provider {
                code: None,
                message: "Rate increased too quickly, slow down".into(),
                body: None,
            },
            "Rate Limited",
        ),
        (
            "http 429 rate limit",
            http(
                429,
                r#"{"error":{"code":"rate_limit_exceeded","message":"slow down"}}"#,
            ),
            "Rate Limited",
        ),
        (
            "http 503 no body",
            http(503, ""),
            "HTTP 503: Service Unavailable",
        ),
        (
            "http 529 overloaded",
            http(
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
            "Provider is overloaded",
        ),
        ("http 408", http(408, "timeout"), "HTTP 408: timeout"),
    ];
    for (name, error, message) in cases {
        assert_eq!(
            classify(&error),
            ErrorClass::Retryable {
                message: message.to_owned()
            },
            "{name}"
        );
    }
}

#[test]
fn transport_timeout_and_broken_streams_are_retried() {
    let cases = [
        LlmError::Transport("connection refused".into()),
        LlmError::Timeout {
            after: Duration::from_secs(300),
        },
        LlmError::Stream(SseError::ConnectionLost("reset".into())),
        LlmError::Stream(SseError::EndedEarly),
        LlmError::Stream(SseError::Incomplete),
    ];
    for e in cases {
        assert!(retryable(&e), "{e:?}");
    }
    // Phrases of provider refusals in a transport error's text do not count.
    assert!(retryable(&LlmError::Transport(
        "connection refused; check your usage policy".into()
    )));
    assert_eq!(
        classify(&LlmError::Stream(SseError::EventTooLarge { limit: 1 })),
        ErrorClass::Fatal { name: API_ERROR }
    );
}

#[test]
fn proc_04_unknown_json_errors_are_not_retried() {
    let cases = [
        provider(json!({"error":{"message":"no_kv_space"}})),
        provider(json!({"type":"error","error":{"code":42,"message":"numeric code"}})),
        provider(json!({"weird":true})),
        LlmError::Decode {
            message: "expected value".into(),
            data: "{".into(),
        },
    ];
    for e in cases {
        assert_eq!(
            classify(&e),
            ErrorClass::Fatal {
                name: UNKNOWN_ERROR
            },
            "{e:?}"
        );
        assert_eq!(error_name(&e), "UnknownError");
        assert_eq!(
            RetryPolicy::default().decide(&e, 1),
            RetryDecision::Stop {
                name: "UnknownError"
            }
        );
    }
}

#[test]
fn proc_07_context_overflow_codes_and_messages_are_recognised() {
    let cases: Vec<(&str, LlmError)> = vec![
        (
            "openai stream code",
            provider(json!({"type":"error","error":{"code":"context_length_exceeded"}})),
        ),
        (
            "openai http code",
            http(
                400,
                r#"{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 8192 tokens"}}"#,
            ),
        ),
        (
            "anthropic",
            http(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            ),
        ),
        (
            "openai-compatible (vLLM)",
            http(
                400,
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"}"#,
            ),
        ),
        (
            "responses api",
            provider(
                json!({"type":"error","error":{"message":"Your input exceeds the context window of this model."}}),
            ),
        ),
        (
            "llama.cpp",
            http(400, "the request exceeds the available context size"),
        ),
        ("413", http(413, "")),
        (
            "z.ai",
            provider(json!({"error":{"code":"model_context_window_exceeded"}})),
        ),
        (
            "ollama",
            http(
                500,
                r#"{"error":"prompt too long; exceeded max context length"}"#,
            ),
        ),
        (
            "gemini",
            http(
                400,
                r#"{"error":{"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}}"#,
            ),
        ),
    ];
    for (name, e) in cases {
        assert_eq!(classify(&e), ErrorClass::ContextOverflow, "{name}");
        assert_eq!(RetryPolicy::default().decide(&e, 1), RetryDecision::Compact);
        assert_eq!(error_name(&e), "ContextOverflowError");
    }
    // Not every 400 is an overflow.
    assert_eq!(
        classify(&http(400, r#"{"error":{"message":"unknown field: foo"}}"#)),
        ErrorClass::Fatal { name: API_ERROR }
    );
}

#[test]
fn proc_11_deterministic_refusals_are_not_retried() {
    let cases: Vec<(&str, LlmError)> = vec![
        (
            "insufficient_quota 429",
            http(
                429,
                r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details."}}"#,
            ),
        ),
        (
            "429 saying the quota is exhausted, no code",
            http(429, r#"{"error":{"message":"Monthly quota exhausted"}}"#),
        ),
        (
            "500 explaining a content refusal",
            http(
                500,
                r#"{"error":{"code":"content_policy_violation","message":"The response was filtered"}}"#,
            ),
        ),
        (
            "500 whose body explains a refusal, no code",
            http(
                500,
                r#"{"error":{"message":"The model refused to answer this request"}}"#,
            ),
        ),
        (
            "stream insufficient_quota",
            provider(json!({"type":"error","error":{"code":"insufficient_quota"}})),
        ),
        (
            "invalid_prompt",
            provider(json!({"type":"error","error":{"code":"invalid_prompt","message":"bad"}})),
        ),
    ];
    for (name, e) in cases {
        assert_eq!(
            classify(&e),
            ErrorClass::Fatal { name: API_ERROR },
            "{name}"
        );
    }
    assert_eq!(
        classify(&http(401, r#"{"error":{"message":"bad key"}}"#)),
        ErrorClass::Fatal {
            name: PROVIDER_AUTH_ERROR
        }
    );
    assert_eq!(
        classify(&http(404, "no such model")),
        ErrorClass::Fatal { name: API_ERROR }
    );
}

#[test]
fn proc_11_a_500_repeating_the_same_body_ends_after_the_budget() {
    let policy = RetryPolicy::default();
    let same = http(
        500,
        r#"{"error":{"message":"inference failed: bad tensor shape"}}"#,
    );
    let mut calls = 1;
    loop {
        match policy.decide(&same, calls) {
            RetryDecision::Retry { attempt, .. } => {
                assert_eq!(attempt, calls);
                calls += 1;
            }
            RetryDecision::Stop { name } => {
                assert_eq!(name, "APIError");
                break;
            }
            RetryDecision::Compact => panic!("not an overflow"),
        }
        assert!(calls <= 100, "never stopped");
    }
    assert_eq!(calls, DEFAULT_MAX_ATTEMPTS);
    // A budget of one call means no retry at all.
    let once = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    assert_eq!(
        once.decide(&same, 1),
        RetryDecision::Stop { name: "APIError" }
    );
}

#[test]
fn proc_10_backoff_doubles_from_2s_and_caps_at_30s() {
    let policy = RetryPolicy::default();
    let table = [(1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (6, 30), (40, 30)];
    for (attempt, secs) in table {
        assert_eq!(
            policy.delay(attempt, None),
            Duration::from_secs(secs),
            "attempt {attempt}"
        );
    }
}

#[test]
fn proc_10_retry_after_headers_are_honoured() {
    let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
    let policy = RetryPolicy::default();
    let cases: Vec<(&str, Headers, Duration)> = vec![
        (
            "ms",
            vec![("retry-after-ms", "1500")],
            Duration::from_millis(1500),
        ),
        ("ms zero", vec![("retry-after-ms", "0")], Duration::ZERO),
        (
            "ms wins over seconds",
            vec![("retry-after-ms", "700"), ("retry-after", "9")],
            Duration::from_millis(700),
        ),
        (
            "seconds",
            vec![("retry-after", "30")],
            Duration::from_secs(30),
        ),
        (
            "large seconds are honoured beyond the backoff cap",
            vec![("retry-after", "50")],
            Duration::from_secs(50),
        ),
        (
            "http date",
            vec![("retry-after", "Wed, 21 Oct 2015 07:28:12 GMT")],
            Duration::from_secs(12),
        ),
        (
            "huge hint capped",
            vec![("retry-after", "100000")],
            MAX_HINTED_DELAY,
        ),
        // Invalid hints fall back to the exponential backoff of attempt 2.
        (
            "garbage",
            vec![("retry-after", "soon")],
            Duration::from_secs(4),
        ),
    ];
    for (name, pairs, expected) in cases {
        let hint = parse_retry_after_at(&headers(&pairs), now);
        let error = LlmError::Http {
            status: 503,
            retry_after: hint,
            body: None,
            message: "Service Unavailable".into(),
        };
        match policy.decide(&error, 2) {
            RetryDecision::Retry { delay, attempt, .. } => {
                assert_eq!(delay, expected, "{name}");
                assert_eq!(attempt, 2);
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn proc_03_http_503_with_retry_after_ms_zero_is_retried_at_once() {
    let error = http_error(
        503,
        &headers(&[("retry-after-ms", "0")]),
        "service unavailable",
    );
    assert_eq!(
        RetryPolicy::default().decide(&error, 1),
        RetryDecision::Retry {
            attempt: 1,
            delay: Duration::ZERO,
            message: "HTTP 503: service unavailable".into()
        }
    );
}

#[test]
fn proc_11_openai_rate_limit_mentioning_billing_is_retried() {
    let e = http(
        429,
        r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s. Visit https://platform.openai.com/account/rate-limits to learn more. You can increase your rate limit by adding a payment method to your account at https://platform.openai.com/account/billing.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
    );
    assert!(retryable(&e), "{:?}", classify(&e));
    let stream = provider(json!({"type":"error","error":{"code":"rate_limit_exceeded",
        "message":"Rate limit reached … add a payment method at https://platform.openai.com/account/billing"}}));
    assert!(retryable(&stream), "{:?}", classify(&stream));
}

#[test]
fn proc_11_gemini_per_minute_quota_is_retried_but_daily_quota_stops() {
    let per_minute = http(
        429,
        r#"{"error":{"code":429,"message":"Quota exceeded for quota metric 'Generate Content API requests per minute' and limit 'GenerateContent request limit per minute for a region' of service 'generativelanguage.googleapis.com'","status":"RESOURCE_EXHAUSTED"}}"#,
    );
    assert!(retryable(&per_minute), "{:?}", classify(&per_minute));
    let quota_id = http(
        429,
        r#"{"error":{"code":429,"message":"You exceeded your current quota. Please retry in 39s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]}]}}"#,
    );
    assert!(retryable(&quota_id), "{:?}", classify(&quota_id));
    let daily = http(
        429,
        r#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}"#,
    );
    assert_eq!(classify(&daily), ErrorClass::Fatal { name: API_ERROR });
    // An explicit quota code still wins over everything.
    let insufficient = http(
        429,
        r#"{"error":{"code":"insufficient_quota","message":"rate limit: You exceeded your current quota, please check your plan and billing details."}}"#,
    );
    assert_eq!(
        classify(&insufficient),
        ErrorClass::Fatal { name: API_ERROR }
    );
    // A message that merely mentions billing is not a refusal.
    assert!(retryable(&http(
        503,
        r#"{"error":{"message":"Service busy; see the billing FAQ for priority access"}}"#
    )));
}

#[test]
fn turn_09_attempts_note_says_how_many_calls_over_how_long() {
    assert_eq!(
        attempts_note(8, Duration::from_secs(120)),
        "after 8 attempts over 2m 0s"
    );
    assert_eq!(human_duration(Duration::from_millis(350)), "350ms");
    assert_eq!(human_duration(Duration::from_millis(4500)), "4.5s");
    assert_eq!(human_duration(Duration::from_secs(42)), "42s");
    assert_eq!(human_duration(Duration::from_secs(3900)), "1h 5m");
}
