//! Newtypes for identifiers: a task id, a fencing epoch, an agent id (the lease owner), and a
//! validated task type name. A [`LeaseKey`] is what every holder write carries.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::validate::ValidationError;

/// Longest task type name, in bytes (DESIGN §3: `[a-z0-9][a-z0-9_.:-]{0,63}`).
pub const MAX_TASK_TYPE_LEN: usize = 64;
/// Longest agent id (name plus start suffix), in bytes.
pub const MAX_AGENT_ID_LEN: usize = 200;
/// Longest agent name, in bytes (before the per-start suffix is added).
pub const MAX_AGENT_NAME_LEN: usize = 128;

/// Identity of a task row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub i64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Fencing token of one holding of a lease: it grows by one on every claim (and on recovery),
/// so a write carrying an older epoch can be recognised and refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseEpoch(pub i64);

impl fmt::Display for LeaseEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The lease owner: an agent's name followed by a suffix unique to one process start
/// (`web-1#17`), so a restarted agent never mistakes an old process's leases for its own.
/// Shared text: every lease and write of an agent carries its id, and a clone costs no copy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(Arc<str>);

impl AgentId {
    /// Accepts any non-empty printable id up to [`MAX_AGENT_ID_LEN`] bytes.
    pub fn new(id: impl Into<String>) -> Result<Self, ValidationError> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_AGENT_ID_LEN || id.chars().any(char::is_control) {
            return Err(ValidationError::AgentId {
                given: truncate_for_error(&id),
            });
        }
        Ok(Self(Arc::from(id)))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for AgentId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AgentId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        AgentId::new(raw).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Validates an agent name (what `--id` gives, before the start suffix): the task-type
/// alphabet plus upper case, up to [`MAX_AGENT_NAME_LEN`] bytes.
pub fn validate_agent_name(name: &str) -> Result<(), ValidationError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_AGENT_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ValidationError::AgentName {
            given: truncate_for_error(name),
        })
    }
}

/// A task type name: `[a-z0-9][a-z0-9_.:-]{0,63}`. Shared text, like [`AgentId`]: every
/// lease, metric and event of a task carries its type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskType(Arc<str>);

impl TaskType {
    /// Validates a task type name.
    pub fn new(name: impl Into<String>) -> Result<Self, ValidationError> {
        let name = name.into();
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok = chars.all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | ':' | '-')
        });
        if first_ok && rest_ok && name.len() <= MAX_TASK_TYPE_LEN {
            Ok(Self(Arc::from(name)))
        } else {
            Err(ValidationError::TaskType {
                given: truncate_for_error(&name),
            })
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for TaskType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TaskType {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        TaskType::new(raw).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TaskType {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskType::new(s)
    }
}

/// What every holder write carries: the task, who holds it, and the fencing epoch of the
/// holding. A write whose key no longer matches the row changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseKey {
    pub id: TaskId,
    pub owner: AgentId,
    pub epoch: LeaseEpoch,
}

/// Shortens untrusted input quoted back in an error message, keeping it on one line.
pub(crate) fn truncate_for_error(raw: &str) -> String {
    const MAX: usize = 80;
    let mut out: String = raw
        .chars()
        .take(MAX)
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect();
    if raw.chars().count() > MAX {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_type_accepts_the_documented_alphabet() {
        for ok in ["a", "0", "email.send", "a:b-c_d.e", &"x".repeat(64)] {
            assert!(TaskType::new(ok).is_ok(), "{ok} should be valid");
        }
    }

    #[test]
    fn task_type_rejects_everything_else() {
        for bad in [
            "",
            "Email",
            "-a",
            "_a",
            ".a",
            "a b",
            "a/b",
            "é",
            &"x".repeat(65),
            "a\n",
        ] {
            let err = TaskType::new(bad).err();
            assert!(
                matches!(err, Some(ValidationError::TaskType { .. })),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn error_quotes_are_bounded_and_inert() {
        let quoted = truncate_for_error(&format!("\u{1b}[31m{}", "y".repeat(500)));
        assert!(!quoted.contains('\u{1b}'));
        assert!(quoted.chars().count() <= 81);
    }

    #[test]
    fn ids_and_types_serialise_as_plain_strings_and_deserialise_only_when_valid() {
        let id = AgentId::new("web-1#7").unwrap_or_else(|e| panic!("{e}"));
        let copy = id.clone();
        assert_eq!(copy, id);
        assert_eq!(
            serde_json::to_value(&id).ok(),
            Some(serde_json::json!("web-1#7"))
        );
        assert_eq!(
            serde_json::from_value::<AgentId>(serde_json::json!("web-1#7")).ok(),
            Some(id)
        );
        assert!(serde_json::from_value::<AgentId>(serde_json::json!("")).is_err());
        assert!(serde_json::from_value::<AgentId>(serde_json::json!("a\u{1b}b")).is_err());
        let t = TaskType::new("email.send").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::to_value(&t).ok(),
            Some(serde_json::json!("email.send"))
        );
        assert_eq!(
            serde_json::from_value::<TaskType>(serde_json::json!("email.send")).ok(),
            Some(t)
        );
        assert!(serde_json::from_value::<TaskType>(serde_json::json!("Bad")).is_err());
    }

    #[test]
    fn agent_names_are_restricted() {
        assert!(validate_agent_name("web-1.prod").is_ok());
        assert!(validate_agent_name("web#1").is_err());
        assert!(validate_agent_name("").is_err());
        assert!(validate_agent_name(&"a".repeat(129)).is_err());
    }
}
