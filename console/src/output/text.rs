//! Text helpers for table mode: making untrusted text inert, measuring and truncating it to
//! terminal columns, and short human forms of times and ages.
//!
//! Invariants: [`inert`] output contains no control, escape, bidi or other invisible format
//! character, so payloads, error messages and names can neither move the cursor, recolour
//! the terminal, hide text nor reorder it (TESTING T33). [`truncate`] never returns more
//! columns than asked for.
//!
//! Width is counted per character: 2 columns for East Asian wide and emoji characters, 1 for
//! the rest. Combining marks are counted as 1 (too wide, never too narrow), so a line measured
//! to fit does fit.

use std::borrow::Cow;
use std::fmt::Write as _;

use leasehold_shared::Progress;

/// Shows `s` with every character that could act on a terminal written as an escape:
/// `\n`, `\r`, `\t`, and `\u{1b}`-style for the other C0/C1 controls, DEL, bidi overrides and
/// isolates, zero-width and other invisible format characters, line/paragraph separators and
/// tag characters. Everything else, backslashes included, is left as it is.
pub fn inert(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// True for characters [`inert`] escapes.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'                   // soft hyphen (invisible)
            | '\u{061C}'                 // Arabic letter mark
            | '\u{180E}'                 // Mongolian vowel separator
            | '\u{200B}'..='\u{200F}'    // zero-width space/joiners, LRM, RLM
            | '\u{2028}'..='\u{202E}'    // line/paragraph separators, bidi embeddings/overrides
            | '\u{2060}'..='\u{206F}'    // word joiner, invisible operators, bidi isolates
            | '\u{FEFF}'                 // zero-width no-break space (BOM)
            | '\u{FFF9}'..='\u{FFFB}'    // interlinear annotations
            | '\u{E0000}'..='\u{E007F}' // tag characters
        )
}

/// Columns one character takes in a terminal.
pub fn char_width(c: char) -> usize {
    let wide = matches!(
        c,
        '\u{1100}'..='\u{115F}'
            | '\u{2E80}'..='\u{303E}'
            | '\u{3041}'..='\u{33FF}'
            | '\u{3400}'..='\u{4DBF}'
            | '\u{4E00}'..='\u{9FFF}'
            | '\u{A000}'..='\u{A4CF}'
            | '\u{AC00}'..='\u{D7A3}'
            | '\u{F900}'..='\u{FAFF}'
            | '\u{FE30}'..='\u{FE4F}'
            | '\u{FF00}'..='\u{FF60}'
            | '\u{FFE0}'..='\u{FFE6}'
            | '\u{1F300}'..='\u{1F64F}'
            | '\u{1F900}'..='\u{1F9FF}'
            | '\u{20000}'..='\u{3FFFD}'
    );
    if wide { 2 } else { 1 }
}

/// Columns `s` takes in a terminal (see the module doc).
pub fn width(s: &str) -> usize {
    s.chars().map(char_width).sum()
}

/// `s` cut to at most `max` columns, ending in `…` when something was cut.
pub fn truncate(s: &str, max: usize) -> Cow<'_, str> {
    if width(s) <= max {
        return Cow::Borrowed(s);
    }
    if max == 0 {
        return Cow::Borrowed("");
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = char_width(c);
        if used + w > max - 1 {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    Cow::Owned(out)
}

/// Untrusted text made inert, then cut to `max` columns: what every free-form line of table
/// mode uses for a name, a message or a value.
pub fn shown(s: &str, max: usize) -> String {
    truncate(&inert(s), max).into_owned()
}

/// A duration in ms as at most two units: `850ms`, `42s`, `3m12s`, `2h05m`, `4d03h`.
pub fn short_duration(ms: i64) -> String {
    let ms = ms.unsigned_abs();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// How long ago `then_ms` was, seen at `now_ms` (both database clock): `3m12s ago`, or
/// `in 5s` for a time still to come.
pub fn age(now_ms: i64, then_ms: i64) -> String {
    let diff = now_ms.saturating_sub(then_ms);
    if diff >= 0 {
        format!("{} ago", short_duration(diff))
    } else {
        format!("in {}", short_duration(diff))
    }
}

/// A task's progress in words: `26/28 (25 succeeded, 1 failed)` — processed of total, then
/// the counts the handler reported (those above zero); `26 processed` when it gave no total.
pub fn progress(p: &Progress) -> String {
    let mut text = processed(p);
    let counts: Vec<String> = [
        (p.succeeded, "succeeded"),
        (p.failed, "failed"),
        (p.skipped, "skipped"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, word)| format!("{n} {word}"))
    .collect();
    if !counts.is_empty() {
        let _ = write!(text, " ({})", counts.join(", "));
    }
    text
}

/// Progress for a table cell: `26/28`, with `1 failed` and `2 skipped` when there are any
/// (the rest succeeded).
pub fn progress_short(p: &Progress) -> String {
    let mut text = processed(p);
    for (n, word) in [(p.failed, "failed"), (p.skipped, "skipped")] {
        if n > 0 {
            let _ = write!(text, " {n} {word}");
        }
    }
    text
}

fn processed(p: &Progress) -> String {
    if p.total > 0 {
        format!("{}/{}", p.processed, p.total)
    } else {
        format!("{} processed", p.processed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_processed_of_total_with_the_counts_reported() {
        let p = Progress {
            total: 28,
            processed: 26,
            succeeded: 25,
            failed: 1,
            skipped: 0,
        };
        assert_eq!(progress(&p), "26/28 (25 succeeded, 1 failed)");
        assert_eq!(progress_short(&p), "26/28 1 failed");
        let bare = Progress {
            total: 0,
            processed: 7,
            ..Progress::default()
        };
        assert_eq!(progress(&bare), "7 processed");
        assert_eq!(progress_short(&bare), "7 processed");
        let skipped = Progress {
            total: 10,
            processed: 10,
            succeeded: 8,
            failed: 0,
            skipped: 2,
        };
        assert_eq!(progress(&skipped), "10/10 (8 succeeded, 2 skipped)");
        assert_eq!(progress_short(&skipped), "10/10 2 skipped");
    }

    #[test]
    fn inert_escapes_terminal_controls() {
        assert_eq!(inert("plain text"), "plain text");
        assert!(matches!(inert("plain"), Cow::Borrowed(_)));
        assert_eq!(inert("\u{1b}[31mred\u{1b}[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(inert("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(inert("bell\u{7}"), "bell\\u{7}");
        assert_eq!(inert("del\u{7f}"), "del\\u{7f}");
        assert_eq!(inert("c1\u{9b}2J"), "c1\\u{9b}2J");
        assert_eq!(inert("nul\0"), "nul\\u{0}");
    }

    #[test]
    fn inert_escapes_bidi_and_invisible_characters() {
        // The "Trojan source" overrides and isolates.
        assert_eq!(inert("a\u{202E}b"), "a\\u{202e}b");
        assert_eq!(inert("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
        assert_eq!(inert("zero\u{200B}width"), "zero\\u{200b}width");
        assert_eq!(inert("\u{FEFF}bom"), "\\u{feff}bom");
        assert_eq!(inert("tag\u{E0041}"), "tag\\u{e0041}");
        assert_eq!(inert("line\u{2028}sep"), "line\\u{2028}sep");
    }

    #[test]
    fn inert_keeps_ordinary_unicode() {
        assert_eq!(inert("héllo 日本 🙂 \\u{1b}"), "héllo 日本 🙂 \\u{1b}");
    }

    #[test]
    fn inert_output_has_nothing_left_to_escape() {
        let nasty: String = (0u32..0x3000)
            .chain(0xE0000..0xE0080)
            .chain([0xFEFF, 0xFFF9])
            .filter_map(char::from_u32)
            .collect();
        let out = inert(&nasty);
        assert!(!out.chars().any(needs_escape));
        assert!(!out.chars().any(char::is_control));
    }

    #[test]
    fn truncate_fits_columns_and_marks_the_cut() {
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("hello!", 5), "hell…");
        assert_eq!(truncate("hello", 1), "…");
        assert_eq!(truncate("hello", 0), "");
        let cut = truncate("日本語テキスト", 7);
        assert!(width(&cut) <= 7, "{cut}");
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn shown_is_inert_and_bounded() {
        let s = shown(&format!("\u{1b}]0;title\u{7}{}", "x".repeat(200)), 40);
        assert!(!s.contains('\u{1b}'));
        assert!(width(&s) <= 40);
    }

    #[test]
    fn durations_and_ages_are_short() {
        assert_eq!(short_duration(850), "850ms");
        assert_eq!(short_duration(42_000), "42s");
        assert_eq!(short_duration(192_000), "3m12s");
        assert_eq!(short_duration(2 * 3_600_000 + 5 * 60_000), "2h05m");
        assert_eq!(short_duration(4 * 86_400_000 + 3 * 3_600_000), "4d03h");
        assert_eq!(age(10_000, 4_000), "6s ago");
        assert_eq!(age(10_000, 15_000), "in 5s");
        assert_eq!(
            age(i64::MAX, i64::MIN),
            format!("{} ago", short_duration(i64::MAX))
        );
    }
}
