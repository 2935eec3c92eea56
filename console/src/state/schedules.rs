//! The Schedules view's data: the last ListSchedules answer of the agent the console is
//! connected to, polled about once a second while the view is shown, and its rows filtered and
//! sorted.
//!
//! When things fail: a failed read keeps the rows of the last good one (the view says the read
//! failed) and is retried at the next poll; before any good read the error is the view's empty
//! state. Nothing here panics on what the agent sent: rows are wire messages, read as they are.

use std::cmp::Reverse;

use leasehold_proto::v1 as pb;

use super::data::{Data, SortKey};

/// What the console knows of the schedules.
#[derive(Debug, Clone, Default)]
pub struct Schedules {
    /// By name, as the agent listed them.
    pub rows: Vec<pb::Schedule>,
    /// Database time of the last good read.
    pub now_ms: i64,
    /// A read is on its way.
    pub loading: bool,
    /// At least one read has succeeded.
    pub loaded: bool,
    /// The last read failed with this.
    pub error: Option<String>,
}

impl Schedules {
    /// Takes a good read.
    pub fn apply(&mut self, reply: pb::ListSchedulesResponse) {
        self.rows = reply.schedules;
        self.now_ms = reply.now_ms;
        self.loading = false;
        self.loaded = true;
        self.error = None;
    }

    /// Takes a failed read: the rows stay, the error is shown.
    pub fn failed(&mut self, error: String) {
        self.loading = false;
        self.error = Some(error);
    }
}

impl Data {
    /// The schedules matching `filter` (name, cron, type), sorted: by name, next fire (soonest
    /// first, never last) or last fire (latest first, never last).
    pub fn schedule_rows(&self, filter: &str, sort: SortKey, reverse: bool) -> Vec<&pb::Schedule> {
        let needle = filter.trim().to_lowercase();
        let mut rows: Vec<&pb::Schedule> = self
            .schedules
            .rows
            .iter()
            .filter(|s| {
                needle.is_empty()
                    || [&s.name, &s.cron, &s.task_type]
                        .iter()
                        .any(|f| f.to_lowercase().contains(&needle))
            })
            .collect();
        match sort {
            SortKey::NextFire => rows.sort_by(|a, b| {
                let key = |s: &pb::Schedule| {
                    let next = if s.enabled && s.next_fire_at_ms > 0 {
                        s.next_fire_at_ms
                    } else {
                        i64::MAX
                    };
                    (next, s.name.clone())
                };
                key(a).cmp(&key(b))
            }),
            SortKey::LastFire => rows.sort_by(|a, b| {
                (Reverse(a.last_fired_at_ms), &a.name).cmp(&(Reverse(b.last_fired_at_ms), &b.name))
            }),
            _ => rows.sort_by(|a, b| a.name.cmp(&b.name)),
        }
        if reverse {
            rows.reverse();
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(name: &str, next: i64, last: i64, enabled: bool) -> pb::Schedule {
        pb::Schedule {
            name: name.into(),
            cron: "0 * * * * *".into(),
            task_type: format!("{name}.job"),
            next_fire_at_ms: next,
            last_fired_at_ms: last,
            enabled,
            ..Default::default()
        }
    }

    fn data() -> Data {
        let mut d = Data::default();
        d.schedules.apply(pb::ListSchedulesResponse {
            schedules: vec![
                schedule("a", 30, 5, true),
                schedule("b", 10, 0, true),
                schedule("c", 5, 9, false),
                schedule("d", 0, 7, true),
            ],
            now_ms: 1,
        });
        d
    }

    fn names(rows: Vec<&pb::Schedule>) -> Vec<&str> {
        rows.into_iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn rows_sort_by_name_next_and_last_fire() {
        let d = data();
        assert_eq!(
            names(d.schedule_rows("", SortKey::Name, false)),
            ["a", "b", "c", "d"]
        );
        // Disabled or never again sorts last.
        assert_eq!(
            names(d.schedule_rows("", SortKey::NextFire, false)),
            ["b", "a", "c", "d"]
        );
        assert_eq!(
            names(d.schedule_rows("", SortKey::LastFire, false)),
            ["c", "d", "a", "b"]
        );
        assert_eq!(
            names(d.schedule_rows("", SortKey::Name, true)),
            ["d", "c", "b", "a"]
        );
        assert_eq!(
            names(d.schedule_rows(" B.JOB ", SortKey::Name, false)),
            ["b"]
        );
    }

    #[test]
    fn a_failed_read_keeps_the_rows_and_says_so() {
        let mut d = data();
        d.schedules.loading = true;
        d.schedules.failed("list schedules: unavailable".into());
        assert_eq!(d.schedules.rows.len(), 4);
        assert!(!d.schedules.loading);
        assert!(d.schedules.error.is_some());
        d.schedules.apply(pb::ListSchedulesResponse::default());
        assert!(d.schedules.error.is_none());
        assert!(d.schedules.rows.is_empty());
    }
}
