// Bench stream support: write-time markers in text deltas and their parser.
// Owns the fixed marker format `⟨t:<unix µs>⟩` used by `knife bench stream`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Marker prefix: U+27E8 MATHEMATICAL LEFT ANGLE BRACKET, then `t:`.
pub const MARKER_PREFIX: &str = "\u{27e8}t:";
/// Marker suffix: U+27E9 MATHEMATICAL RIGHT ANGLE BRACKET.
pub const MARKER_SUFFIX: &str = "\u{27e9}";

/// A bench stream: `deltas` text deltas with no delay, each one write-time marker.
///
/// Each delta's `content` is exactly one marker, `⟨t:<micros>⟩`, where
/// `<micros>` is the mock's wall-clock time (unix epoch, microseconds, decimal,
/// no padding) taken right before the chunk is handed to the HTTP connection.
/// A client subtracts it from its own receipt time to get the write-to-receipt
/// latency. Recover the times from the accumulated text with [`parse_write_times`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchStream {
    /// Number of text deltas (markers) per request.
    pub deltas: usize,
}

/// Wall-clock now in unix microseconds (0 if the clock is before 1970).
pub fn now_unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The marker for a write time in unix microseconds: `⟨t:1732900000123456⟩`.
pub fn write_time_marker(unix_micros: u64) -> String {
    format!("{MARKER_PREFIX}{unix_micros}{MARKER_SUFFIX}")
}

/// Every write time (unix µs) found in `text`, in order. Anything that is not a
/// well-formed marker (prefix, 1-20 ASCII digits, suffix) is skipped, so the
/// text may be a single delta or the whole accumulated answer.
pub fn parse_write_times(text: &str) -> Vec<u64> {
    let mut times = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(MARKER_PREFIX) {
        rest = &rest[start + MARKER_PREFIX.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if (1..=20).contains(&digits)
            && rest[digits..].starts_with(MARKER_SUFFIX)
            && let Ok(t) = rest[..digits].parse::<u64>()
        {
            times.push(t);
            rest = &rest[digits + MARKER_SUFFIX.len()..];
        }
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_garbage_is_skipped() {
        let text = format!(
            "{}{}⟨t:⟩⟨t:12x⟩{}",
            write_time_marker(1_732_900_000_123_456),
            write_time_marker(7),
            write_time_marker(u64::MAX)
        );
        assert_eq!(text.chars().next(), Some('⟨'));
        assert_eq!(
            parse_write_times(&text),
            vec![1_732_900_000_123_456, 7, u64::MAX]
        );
        assert!(parse_write_times("no markers").is_empty());
    }
}
