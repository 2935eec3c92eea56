//! Input validation: every value that comes from outside (CLI, gRPC, config, library callers)
//! is checked here before any statement runs, so bad input gets a clear error and changes
//! nothing. The database CHECK constraints repeat the hard limits as a last line.

use thiserror::Error;

/// Default largest payload, in bytes of its JSON text (1 MiB, also the database's hard cap).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Largest payload the database accepts, whatever the configuration says.
pub const HARD_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Largest result a handler may store, in bytes of its JSON text.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// Longest concurrency key, in bytes.
pub const MAX_CONCURRENCY_KEY_LEN: usize = 200;
/// Most attempts a task may be given.
pub const MAX_ATTEMPTS_LIMIT: i32 = 1000;
/// Longest per-attempt timeout (7 days).
pub const MAX_TIMEOUT_MS: i64 = 7 * 24 * 3600 * 1000;
/// Longest enqueue delay (366 days).
pub const MAX_DELAY_MS: i64 = 366 * 24 * 3600 * 1000;
/// Most tasks in one bulk enqueue.
pub const MAX_BULK_ENQUEUE: usize = 100_000;
/// Largest page of a listing.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// Most tasks claimed in one batch.
pub const MAX_CLAIM_BATCH: u32 = 10_000;

/// Limits an operator may tighten (never loosen past the hard caps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// Largest payload accepted, in bytes of JSON text.
    pub max_payload_bytes: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        Self {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

impl InputLimits {
    /// Limits with a payload cap of `bytes`, refused when above the hard cap or zero.
    pub fn with_max_payload_bytes(bytes: usize) -> Result<Self, ValidationError> {
        if bytes == 0 || bytes > HARD_MAX_PAYLOAD_BYTES {
            return Err(ValidationError::OutOfRange {
                field: "max_payload_bytes",
                detail: format!("{bytes} is not within 1..={HARD_MAX_PAYLOAD_BYTES}"),
            });
        }
        Ok(Self {
            max_payload_bytes: bytes,
        })
    }
}

/// Why an input was refused. Every variant names the field and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ValidationError {
    #[error(
        "invalid task type {given:?}: use 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit"
    )]
    TaskType { given: String },
    #[error("invalid agent name {given:?}: use 1-128 characters of A-Z a-z 0-9 _ . : -")]
    AgentName { given: String },
    #[error("invalid agent id {given:?}")]
    AgentId { given: String },
    #[error("payload is {size} bytes, above the limit of {limit} bytes")]
    PayloadTooLarge { size: usize, limit: usize },
    #[error("result is {size} bytes, above the limit of {limit} bytes")]
    ResultTooLarge { size: usize, limit: usize },
    #[error("payload is not valid JSON: {detail}")]
    PayloadNotJson { detail: String },
    #[error("{field} out of range: {detail}")]
    OutOfRange { field: &'static str, detail: String },
    #[error("{field} is invalid: {detail}")]
    Invalid { field: &'static str, detail: String },
}

/// Parses JSON text from an untrusted source, bounded by `limits` before parsing.
pub fn parse_payload(
    text: &str,
    limits: &InputLimits,
) -> Result<serde_json::Value, ValidationError> {
    if text.len() > limits.max_payload_bytes {
        return Err(ValidationError::PayloadTooLarge {
            size: text.len(),
            limit: limits.max_payload_bytes,
        });
    }
    serde_json::from_str(text).map_err(|e| ValidationError::PayloadNotJson {
        detail: e.to_string(),
    })
}

/// Checks a payload's size against `limits` and returns its compact JSON text.
///
/// The size is measured the way the database's CHECK measures it (`payload::text`, which
/// writes `", "` and `": "` between items), so a payload this accepts is never refused by the
/// database for its size.
pub fn payload_text(
    payload: &serde_json::Value,
    limits: &InputLimits,
) -> Result<String, ValidationError> {
    let size = db_text_len(payload);
    if size > limits.max_payload_bytes {
        return Err(ValidationError::PayloadTooLarge {
            size,
            limit: limits.max_payload_bytes,
        });
    }
    Ok(payload.to_string())
}

/// Checks a handler result's size (measured as the database measures it).
pub fn check_result(result: &serde_json::Value) -> Result<(), ValidationError> {
    let size = db_text_len(result);
    if size > MAX_RESULT_BYTES {
        return Err(ValidationError::ResultTooLarge {
            size,
            limit: MAX_RESULT_BYTES,
        });
    }
    Ok(())
}

/// Replaces NUL characters (which `jsonb` and `text` refuse) with U+FFFD in every string and
/// key of `value`: output captured from programs may carry them, and one such result must not
/// make a whole batch of completions fail.
pub fn replace_nul(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) if s.contains('\0') => *s = s.replace('\0', "\u{FFFD}"),
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (k, mut v) in old {
                replace_nul(&mut v);
                map.insert(k.replace('\0', "\u{FFFD}"), v);
            }
        }
        _ => {}
    }
}

/// Whether any string or key of `value` holds a NUL character (which `jsonb` refuses).
pub fn has_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Length of a value's JSON text as PostgreSQL prints `jsonb` (a space after every `,` and `:`).
pub fn db_text_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    struct Spaced;
    impl serde_json::ser::Formatter for Spaced {
        fn begin_array_value<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            if first { Ok(()) } else { w.write_all(b", ") }
        }
        fn begin_object_key<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            if first { Ok(()) } else { w.write_all(b", ") }
        }
        fn begin_object_value<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
        ) -> std::io::Result<()> {
            w.write_all(b": ")
        }
    }
    let mut count = Count(0);
    let mut serializer = serde_json::Serializer::with_formatter(&mut count, Spaced);
    // Writing to a counter cannot fail; a value that cannot be serialised has no size to check.
    let _ = serde::Serialize::serialize(value, &mut serializer);
    count.0
}

/// Checks an idempotency key: 1-255 bytes, no control characters.
pub fn check_idempotency_key(key: &str) -> Result<(), ValidationError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN || key.chars().any(char::is_control) {
        return Err(ValidationError::Invalid {
            field: "idempotency_key",
            detail: format!("must be 1-{MAX_IDEMPOTENCY_KEY_LEN} bytes without control characters"),
        });
    }
    Ok(())
}

/// Checks a concurrency key: 1-200 bytes, no control characters.
pub fn check_concurrency_key(key: &str) -> Result<(), ValidationError> {
    if key.is_empty() || key.len() > MAX_CONCURRENCY_KEY_LEN || key.chars().any(char::is_control) {
        return Err(ValidationError::Invalid {
            field: "concurrency_key",
            detail: format!("must be 1-{MAX_CONCURRENCY_KEY_LEN} bytes without control characters"),
        });
    }
    Ok(())
}

/// Checks an integer lies in `range`, naming the field when it does not.
pub fn check_range<T>(
    field: &'static str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ValidationError>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ValidationError::OutOfRange {
            field,
            detail: format!("{value} is not within {}..={}", range.start(), range.end()),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nul_characters_are_made_visible_everywhere() {
        let mut v = serde_json::json!({"a\u{0000}": ["x\u{0000}y", {"k": "\u{0000}"}], "n": 1});
        super::replace_nul(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a\u{FFFD}": ["x\u{FFFD}y", {"k": "\u{FFFD}"}], "n": 1})
        );
    }

    use super::*;

    #[test]
    fn payload_limit_is_checked_before_parsing() {
        let limits = InputLimits::with_max_payload_bytes(10).unwrap();
        assert!(matches!(
            parse_payload(&format!("\"{}\"", "a".repeat(20)), &limits),
            Err(ValidationError::PayloadTooLarge { .. })
        ));
        assert!(matches!(
            parse_payload("{nope", &InputLimits::default()),
            Err(ValidationError::PayloadNotJson { .. })
        ));
        assert_eq!(
            parse_payload("{\"a\":1}", &InputLimits::default()).unwrap()["a"],
            1
        );
    }

    #[test]
    fn sizes_are_measured_as_the_database_prints_them() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"a":[0,0,0],"b":{"c":"x, y"}}"#).unwrap();
        // PostgreSQL prints it as {"a": [0, 0, 0], "b": {"c": "x, y"}}.
        assert_eq!(
            db_text_len(&v),
            r#"{"a": [0, 0, 0], "b": {"c": "x, y"}}"#.len()
        );
        let zeros = serde_json::Value::Array(vec![serde_json::json!(0); 400_000]);
        assert!(
            payload_text(&zeros, &InputLimits::default()).is_err(),
            "1.2 MB as the database sees it"
        );
    }

    #[test]
    fn limits_cannot_exceed_the_hard_cap() {
        assert!(InputLimits::with_max_payload_bytes(0).is_err());
        assert!(InputLimits::with_max_payload_bytes(HARD_MAX_PAYLOAD_BYTES + 1).is_err());
        assert!(InputLimits::with_max_payload_bytes(512).is_ok());
    }

    #[test]
    fn idempotency_keys_are_bounded() {
        assert!(check_idempotency_key("order-42").is_ok());
        assert!(check_idempotency_key("").is_err());
        assert!(check_idempotency_key(&"k".repeat(256)).is_err());
        assert!(check_idempotency_key("a\u{1b}b").is_err());
    }

    #[test]
    fn ranges_name_the_field() {
        let err = check_range("max_attempts", 0, 1..=MAX_ATTEMPTS_LIMIT).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_attempts out of range: 0 is not within 1..=1000"
        );
    }
}
