//! The glob patterns of `exec_allow`: `*` matches any run of characters except `/`, `?` matches
//! one character except `/`, every other character matches itself. There are no character
//! classes and no escapes. The lone pattern `*` is not a glob: it allows any program.
//!
//! Matching is iterative with one backtrack point (the classic wildcard algorithm): linear in
//! practice, `O(pattern × text)` at worst, never exponential, whatever the input.

/// Whether `text` matches `pattern` (see the module docs). Works on characters, so a
/// multi-byte character is one `?`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0usize, 0usize);
    // The last `*` seen, and the text position it currently stretches to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some('?') if text[t] != '/' => {
                p += 1;
                t += 1;
            }
            Some(c) if *c != '?' && *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                // Let the last `*` take one more character, unless that character is `/`.
                Some((sp, st)) if text[st] != '/' => {
                    star = Some((sp, st + 1));
                    p = sp + 1;
                    t = st + 1;
                }
                _ => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::matches;

    #[test]
    fn stars_and_question_marks_stay_within_one_path_segment() {
        let yes = [
            ("/usr/bin/env", "/usr/bin/env"),
            ("/usr/local/bin/*", "/usr/local/bin/report"),
            ("/usr/local/bin/*", "/usr/local/bin/"),
            ("/opt/*/bin/run", "/opt/app/bin/run"),
            ("/usr/bin/python3.?", "/usr/bin/python3.9"),
            ("/srv/*.sh", "/srv/backup.sh"),
            ("/srv/a*b*c", "/srv/aXbYbZc"),
            ("*", "anything-without-slash"),
        ];
        for (pattern, text) in yes {
            assert!(matches(pattern, text), "{pattern} should match {text}");
        }
        let no = [
            ("/usr/bin/env", "/usr/bin/envx"),
            ("/usr/local/bin/*", "/usr/local/bin/sub/report"),
            ("/usr/local/bin/*", "/usr/local/bin"),
            ("/opt/*/bin/run", "/opt/a/b/bin/run"),
            ("/usr/bin/python3.?", "/usr/bin/python3.10"),
            ("/usr/bin/?", "/usr/bin//"),
            ("/srv/*.sh", "/srv/backup.shx"),
            ("*", "/bin/sh"),
        ];
        for (pattern, text) in no {
            assert!(!matches(pattern, text), "{pattern} should not match {text}");
        }
    }

    /// A plain recursive reference matcher: obviously right, exponential, fine for short input.
    fn reference(pattern: &[char], text: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('*', rest)) => {
                reference(rest, text)
                    || (text.first().is_some_and(|c| *c != '/') && reference(pattern, &text[1..]))
            }
            Some(('?', rest)) => {
                text.first().is_some_and(|c| *c != '/') && reference(rest, &text[1..])
            }
            Some((c, rest)) => text.first() == Some(c) && reference(rest, &text[1..]),
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_reference_matcher(
            pattern in "[ab/*?]{0,10}",
            text in "[ab/]{0,12}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let t: Vec<char> = text.chars().collect();
            prop_assert_eq!(matches(&pattern, &text), reference(&p, &t));
        }

        #[test]
        fn a_literal_pattern_matches_only_itself(a in "[ -~]{0,20}", b in "[ -~]{0,20}") {
            prop_assume!(!a.contains(['*', '?']));
            prop_assert!(matches(&a, &a));
            prop_assert_eq!(matches(&a, &b), a == b);
        }

        #[test]
        fn a_star_never_crosses_a_slash(dir in "/[a-z]{1,5}", rest in "[a-z]{1,5}/[a-z]{1,5}") {
            let pattern = format!("{dir}/*");
            let text = format!("{dir}/{rest}");
            prop_assert!(!matches(&pattern, &text));
        }
    }
}
