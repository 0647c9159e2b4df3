//! Timestamps as people read them in lists (SPEC UX-04): `15:59 (in 29 min)`,
//! `2026-11-30 09:12 (yesterday)`; local time, no nanoseconds.

use chrono::{DateTime, Local, Utc};

/// `at` relative to `now`: the local clock time (with the date when it is not today) and
/// how far away it is (`just now`, `5 min ago`, `in 2 h`, `3 days ago`).
pub fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let local = at.with_timezone(&Local);
    let clock = if local.date_naive() == now.with_timezone(&Local).date_naive() {
        local.format("%H:%M").to_string()
    } else {
        local.format("%Y-%m-%d %H:%M").to_string()
    };
    format!("{clock} ({})", distance(at, now))
}

/// A count with its noun in the singular or plural: `count(1, "file")` is `1 file`,
/// `count(3, "file")` is `3 files` (nouns whose plural adds an `s`).
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn distance(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (at - now).num_seconds();
    let (n, future) = (secs.unsigned_abs(), secs > 0);
    let amount = match n {
        0..=44 => return "just now".into(),
        45..=5399 => format!("{} min", (n + 30) / 60),
        5400..=84_599 => format!("{} h", (n + 1800) / 3600),
        _ => {
            let days = (n + 43_200) / 86_400;
            if days == 1 {
                return if future {
                    "tomorrow".into()
                } else {
                    "yesterday".into()
                };
            }
            format!("{days} days")
        }
    };
    if future {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ux_04_timestamps_read_as_people_say_them() {
        let now: DateTime<Utc> = "2026-12-01T12:00:00.123456789Z".parse().unwrap();
        let at = |s: &str| -> DateTime<Utc> { s.parse().unwrap() };
        assert_eq!(distance(at("2026-12-01T11:59:50Z"), now), "just now");
        assert_eq!(distance(at("2026-12-01T11:55:00Z"), now), "5 min ago");
        assert_eq!(distance(at("2026-12-01T12:29:30Z"), now), "in 29 min");
        assert_eq!(distance(at("2026-12-01T09:00:00Z"), now), "3 h ago");
        assert_eq!(distance(at("2026-11-30T12:00:00Z"), now), "yesterday");
        assert_eq!(distance(at("2026-11-27T12:00:00Z"), now), "4 days ago");
        let text = when(at("2026-12-01T11:55:00.987654321Z"), now);
        assert!(text.ends_with(" (5 min ago)"), "{text}");
        assert!(
            !text.contains('.') && !text.contains("987"),
            "no sub-second digits: {text}"
        );
    }
}
