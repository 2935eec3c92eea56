//! Text for cells: untrusted strings made inert (TESTING T33) and cut to width, times in
//! short words.

use crate::output::text::{self, char_width, width};

/// Untrusted text (a payload, an error, a type or agent name) with every control, escape and
/// bidi character written out, cut to `max` columns.
pub fn untrusted(s: &str, max: usize) -> String {
    text::shown(s, max)
}

/// `12s`, `3m04s`; `-` for an unknown time.
pub fn dur(ms: i64) -> String {
    text::short_duration(ms)
}

/// Counts at least this old (database time) say how old they are.
const STALE_COUNTS_MS: i64 = 5_000;

/// `counts 34s old ` for counts read at `read_ms` that are [`STALE_COUNTS_MS`] or more old at
/// `now_ms` (an agent serves a slow count — a deep queue — ten times as long as it took).
pub fn stale_counts(now_ms: i64, read_ms: i64) -> Option<String> {
    let age = now_ms.saturating_sub(read_ms);
    (read_ms > 0 && age >= STALE_COUNTS_MS).then(|| format!("counts {} old ", dur(age)))
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

/// `s` (trusted text: help lines) broken into lines of at most `max` columns at spaces; a word
/// longer than a line is split.
pub fn wrap(s: &str, max: usize) -> Vec<String> {
    let max = max.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
        let needed = width(word) + usize::from(!line.is_empty());
        if !line.is_empty() && width(&line) + needed > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        for c in word.chars() {
            if width(&line) + char_width(c) > max {
                lines.push(std::mem::take(&mut line));
            }
            line.push(c);
        }
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_at_spaces_and_splits_only_what_cannot_fit() {
        assert_eq!(
            wrap("quit the console now", 10),
            ["quit the", "console", "now"]
        );
        assert_eq!(wrap("abcdefghijkl", 5), ["abcde", "fghij", "kl"]);
        assert_eq!(wrap("", 5), [""]);
        for line in wrap(&"word ".repeat(50), 12) {
            assert!(width(&line) <= 12, "{line}");
        }
    }
}
