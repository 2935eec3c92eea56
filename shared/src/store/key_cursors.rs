//! Where each task type's round of concurrency keys stands, for one store's claims.
//!
//! A claim visits the keys of a type in key order, starting after the key it served last and
//! wrapping round to the first (the PostgreSQL lock statement walks them with a skip scan; the
//! SQLite claim reads them in a loop). After the claim the cursor moves to the last visited key
//! that started a task, or to the last visited key when none did (every one was full, or had
//! nothing due): keys the claim visited and could not serve come first next time, and no key
//! waits longer than one round behind others. Each agent keeps its own cursors; with several
//! agents every one of them goes round, so no key is skipped by all.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::domain::Task;

/// The last key served per task type (none: start from the first key).
#[derive(Debug, Default)]
pub struct KeyCursors(Mutex<HashMap<String, String>>);

impl KeyCursors {
    /// The cursors of `types`, as parallel arrays (type, key) for the claim statements.
    pub(crate) fn of(&self, types: &[&str]) -> (Vec<String>, Vec<String>) {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        types
            .iter()
            .filter_map(|t| map.get(*t).map(|k| (t.to_string(), k.clone())))
            .unzip()
    }

    /// The cursor of one type (SQLite's claim walks the types one by one).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn get(&self, task_type: &str) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(task_type).cloned()
    }

    /// Moves the cursors of `types` (those that had room in the claim) after a claim that
    /// visited the keys with a task due `walk` (type, key, in visiting order), whose walk of
    /// each type ended at `ends` (type, last key visited, due or not), and claimed `claimed`.
    /// The cursor goes to the last key in round order among those served at the lowest
    /// priority served: a key that won a place by the priority of its task does not move the
    /// round, so the keys taking turns below it keep taking turns. When none was served it goes
    /// to where the walk ended. A type whose walk found no key has no keyed task due: its
    /// cursor is dropped (a type with no keyed task waiting at all is not walked and keeps its
    /// cursor, which the next round starts after, wrapping round).
    pub(crate) fn advance(
        &self,
        types: &[&str],
        walk: &[(&str, &str)],
        ends: &[(&str, &str)],
        claimed: &[Task],
    ) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for t in types {
            let top = |key: &str| {
                claimed
                    .iter()
                    .filter(|c| {
                        c.task_type.as_str() == *t && c.concurrency_key.as_deref() == Some(key)
                    })
                    .map(|c| c.priority)
                    .max()
            };
            let visited: Vec<&str> = walk
                .iter()
                .filter(|(wt, _)| wt == t)
                .map(|(_, k)| *k)
                .collect();
            let served: Vec<(&str, i16)> = visited
                .iter()
                .filter_map(|k| top(k).map(|p| (*k, p)))
                .collect();
            let floor = served.iter().map(|(_, p)| *p).min();
            let last_served = served
                .iter()
                .rev()
                .find(|(_, p)| Some(*p) == floor)
                .map(|(k, _)| *k);
            let end = ends.iter().find(|(et, _)| et == t).map(|(_, k)| *k);
            match last_served.or(end).or(visited.last().copied()) {
                Some(key) => {
                    map.insert(t.to_string(), key.to_string());
                }
                None => {
                    map.remove(*t);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{TaskStatus, TaskType};

    fn task(t: &str, key: &str) -> Task {
        let now = chrono::Utc::now();
        Task {
            id: crate::domain::TaskId(1),
            task_type: TaskType::new(t).unwrap(),
            payload: serde_json::Value::Null,
            priority: 0,
            status: TaskStatus::Running,
            available_at: now,
            deadline_at: None,
            timeout_ms: None,
            attempt: 1,
            max_attempts: 1,
            lease_owner: None,
            lease_epoch: crate::domain::LeaseEpoch(1),
            lease_until: None,
            heartbeat_at: None,
            idempotency_key: None,
            concurrency_key: Some(key.into()),
            progress: None,
            snoozes: 0,
            checkpoint: None,
            checkpoint_at: None,
            result: None,
            last_error: None,
            created_at: now,
            started_at: None,
            finished_at: None,
            updated_at: now,
        }
    }

    #[test]
    fn moves_to_the_last_key_served_or_else_the_last_visited() {
        let c = KeyCursors::default();
        let walk = [("a", "k1"), ("a", "k2"), ("a", "k3"), ("b", "x")];
        c.advance(&["a", "b"], &walk, &[], &[task("a", "k2")]);
        assert_eq!(
            c.get("a").as_deref(),
            Some("k2"),
            "k3 was visited, not served"
        );
        assert_eq!(
            c.get("b").as_deref(),
            Some("x"),
            "nothing served: past the visited"
        );
        c.advance(&["a", "b"], &[("a", "k3")], &[], &[]);
        assert_eq!(c.get("a").as_deref(), Some("k3"));
        assert_eq!(c.get("b"), None, "no keyed task of b waits: start over");
        // A key that won by priority does not hold the round still.
        let walk = [("a", "d"), ("a", "e"), ("a", "k1"), ("a", "k3")];
        let mut urgent = task("a", "k3");
        urgent.priority = 5;
        c.advance(&["a"], &walk, &[("a", "zz")], &[urgent, task("a", "d")]);
        assert_eq!(
            c.get("a").as_deref(),
            Some("d"),
            "served beats where the walk ended"
        );
        c.advance(&["a"], &walk, &[("a", "zz")], &[]);
        assert_eq!(
            c.get("a").as_deref(),
            Some("zz"),
            "nothing served: where the walk ended"
        );
        c.advance(&["a"], &walk, &[], &[task("a", "d")]);
        assert_eq!(c.get("a").as_deref(), Some("d"));
        let (types, keys) = c.of(&["a", "b", "c"]);
        assert_eq!(
            (types, keys),
            (vec!["a".to_string()], vec!["d".to_string()])
        );
        // A type without room is not passed in: its cursor stays.
        c.advance(&[], &walk, &[], &[]);
        assert_eq!(c.get("a").as_deref(), Some("d"));
    }
}
