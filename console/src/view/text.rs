//! Text for cells: untrusted strings made inert (TESTING T33) and cut to width, times in
//! short words.

use crate::output::text;

/// Untrusted text (a payload, an error, a type or agent name) with every control, escape and
/// bidi character written out, cut to `max` columns.
pub fn untrusted(s: &str, max: usize) -> String {
    text::shown(s, max)
}

/// `12s`, `3m04s`; `-` for an unknown time.
pub fn dur(ms: i64) -> String {
    text::short_duration(ms)
}

/// How long ago `then_ms` was at `now_ms`; `-` when `then_ms` is unset.
pub fn ago(now_ms: i64, then_ms: i64) -> String {
    if then_ms <= 0 {
        "-".into()
    } else {
        text::age(now_ms, then_ms)
    }
}

/// A database time as `HH:MM:SS` UTC; `-` when unset.
pub fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .filter(|_| ms > 0)
        .map_or_else(|| "-".into(), |t| t.format("%H:%M:%S").to_string())
}

/// A database time as `YYYY-MM-DD HH:MM:SS` UTC; `-` when unset.
pub fn datetime(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .filter(|_| ms > 0)
        .map_or_else(|| "-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string())
}
