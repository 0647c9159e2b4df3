//! Documented size limits of the text fields the API and MCP tools take (SPEC.md
//! SEC-08), checked where each field enters knife; a value over its limit is a 400.

/// Longest user message (`POST /api/threads/{id}/messages`, MCP
/// `thread_send_message` / `thread_create`): 1 MiB of UTF-8 (bytes).
pub const MESSAGE_MAX_BYTES: usize = 1024 * 1024;
/// Longest project display name: 200 characters (Unicode scalar values).
pub const PROJECT_NAME_MAX_CHARS: usize = 200;
/// Longest project root path as given: 4096 bytes (Linux `PATH_MAX`).
pub const PATH_MAX_BYTES: usize = 4096;
/// Longest model name a thread may ask for: 200 characters.
pub const MODEL_MAX_CHARS: usize = 200;
/// Longest message of an approval answer (`message` of a runtime request answer):
/// 64 KiB of UTF-8 (bytes).
pub const ANSWER_MESSAGE_MAX_BYTES: usize = 64 * 1024;
/// Largest request body the HTTP server reads: 4 MiB (bytes). A larger declared
/// `Content-Length` is answered 413 before the body is read; a streamed body is cut
/// off at this size with a 413 (SEC-04). Leaves room for a [`MESSAGE_MAX_BYTES`]
/// message with JSON escapes.
pub const BODY_MAX_BYTES: usize = 4 * 1024 * 1024;

/// `None` when `value` has at most `max` bytes; else the 400 message: which field,
/// its limit and how far over it is.
pub fn over_bytes(field: &str, value: &str, max: usize) -> Option<String> {
    (value.len() > max).then(|| {
        format!(
            "`{field}` is {} bytes long; the limit is {max} bytes (SPEC.md SEC-08): shorten it",
            value.len()
        )
    })
}

/// `None` when `value` has at most `max` characters; else the 400 message.
pub fn over_chars(field: &str, value: &str, max: usize) -> Option<String> {
    // Cheap first: a value with at most `max` bytes has at most `max` characters.
    if value.len() <= max {
        return None;
    }
    let chars = value.chars().count();
    (chars > max).then(|| {
        format!(
            "`{field}` is {chars} characters long; the limit is {max} characters (SPEC.md SEC-08): shorten it"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_bytes_or_characters() {
        assert!(over_bytes("text", "abc", 3).is_none());
        assert!(over_bytes("text", "abcd", 3).is_some_and(|m| m.contains("4 bytes")));
        // 3 characters, 6 bytes.
        assert!(over_chars("name", "ééé", 3).is_none());
        assert!(over_chars("name", "éééé", 3).is_some_and(|m| m.contains("4 characters")));
    }
}
