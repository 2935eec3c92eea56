//! What the demo did, counted from the database after its agents stopped: the JSON line of
//! `--headless`, and the lines printed when the interactive demo ends (where the database
//! is, how to reopen it).
//!
//! The count pages through the tasks newest first (keyset pages of [`PAGE`]) and stops below
//! the demo's first task, so on a `--database-url` shared with other work it counts only the
//! tasks made since the demo started.

use std::collections::BTreeMap;
use std::path::Path;

use leasehold_shared::store::TaskListParams;
use leasehold_shared::{Store, TaskId, TaskStatus};
use serde::Serialize;

use super::database::Target;
use super::fleet::Ended;
use crate::error::{Error, Result};

/// Tasks read per page while counting.
pub const PAGE: u32 = 1000;

/// Tasks by status, by type and status, and dead letters by error code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Every status, zeros included.
    pub tasks: BTreeMap<&'static str, u64>,
    pub by_type: BTreeMap<String, BTreeMap<&'static str, u64>>,
    pub dead_by_code: BTreeMap<String, u64>,
    /// Of the tasks counted, those the demo's cron schedules fired (key `schedule:…`).
    pub fired_by_schedules: u64,
}

impl Counts {
    fn new() -> Self {
        Counts {
            tasks: TaskStatus::ALL.iter().map(|s| (s.as_str(), 0)).collect(),
            ..Counts::default()
        }
    }

    /// Tasks in a terminal state.
    pub fn finished(&self) -> u64 {
        TaskStatus::ALL
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| self.tasks.get(s.as_str()).copied().unwrap_or(0))
            .sum()
    }

    /// All tasks counted.
    pub fn total(&self) -> u64 {
        self.tasks.values().sum()
    }

    fn add(&mut self, task: &leasehold_shared::domain::Task) {
        let status = task.status.as_str();
        *self.tasks.entry(status).or_default() += 1;
        *self
            .by_type
            .entry(task.task_type.as_str().to_owned())
            .or_default()
            .entry(status)
            .or_default() += 1;
        if task
            .idempotency_key
            .as_deref()
            .is_some_and(|k| k.starts_with("schedule:"))
        {
            self.fired_by_schedules += 1;
        }
        if task.status == TaskStatus::Dead {
            let code = task.last_error.as_ref().map_or("none", |e| e.code.as_str());
            *self.dead_by_code.entry(code.to_owned()).or_default() += 1;
        }
    }
}

/// Counts the tasks from `first` (the demo's first task) on.
pub async fn count(store: &dyn Store, first: Option<TaskId>) -> Result<Counts> {
    let mut counts = Counts::new();
    let Some(first) = first else {
        return Ok(counts);
    };
    let mut before = None;
    loop {
        let page = store
            .task_list(TaskListParams {
                before,
                limit: PAGE,
                ..TaskListParams::default()
            })
            .await
            .map_err(|e| Error::Database {
                what: "counting the demo's tasks".into(),
                cause: crate::error::cause_chain(&e),
            })?;
        for task in page.tasks.iter().filter(|t| t.id >= first) {
            counts.add(task);
        }
        let past_first = page.tasks.last().is_some_and(|t| t.id < first);
        match page.next_before {
            Some(next) if !past_first => before = Some(next),
            _ => return Ok(counts),
        }
    }
}

/// One agent in the summary.
#[derive(Debug, Clone, Serialize)]
pub struct AgentLine {
    pub id: String,
    pub address: String,
    /// Why it ended (`signal` for the demo's own stop), or `error`.
    pub ended_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub claimed: u64,
    pub succeeded: u64,
    pub partially_succeeded: u64,
    pub failed: u64,
    pub retried: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub released: u64,
    pub lease_lost: u64,
    pub fenced: u64,
}

impl AgentLine {
    pub fn of(ended: &Ended) -> AgentLine {
        let (summary, error) = match &ended.outcome {
            Ok(summary) => (summary.clone(), None),
            Err(why) => (Default::default(), Some(why.clone())),
        };
        AgentLine {
            id: ended.id.clone(),
            address: ended.address.clone(),
            ended_by: if error.is_some() {
                "error".into()
            } else {
                summary.ended_by.clone()
            },
            error,
            claimed: summary.claimed,
            succeeded: summary.succeeded,
            partially_succeeded: summary.partially_succeeded,
            failed: summary.failed,
            retried: summary.retried,
            dead: summary.dead,
            cancelled: summary.cancelled,
            released: summary.released,
            lease_lost: summary.lease_lost,
            fenced: summary.fenced,
        }
    }
}

/// The JSON line of `leasehold demo --headless`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The SQLite file, or null for PostgreSQL.
    pub database: Option<String>,
    /// Without a password.
    pub database_url: String,
    pub log: Option<String>,
    /// Time the workload was fed, in seconds.
    pub duration_s: f64,
    pub enqueued: u64,
    /// Enqueue statements that failed (their tasks were not enqueued).
    pub enqueue_failures: u64,
    /// Tasks in a terminal state.
    pub finished: u64,
    pub processed_per_s: f64,
    #[serde(flatten)]
    pub counts: Counts,
    pub agents: Vec<AgentLine>,
}

/// Rounds to milliseconds (or thousandths), for output people read too.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The lines printed when the interactive demo ends.
pub fn farewell(
    target: &Target,
    log: Option<&Path>,
    counts: &Counts,
    ended: &[Ended],
) -> Vec<String> {
    let mut lines = Vec::new();
    let failed: Vec<&Ended> = ended.iter().filter(|e| e.outcome.is_err()).collect();
    let mut head = format!(
        "demo stopped: {} agent{} drained",
        ended.len() - failed.len(),
        if ended.len() - failed.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    if !failed.is_empty() {
        head.push_str(&format!(
            " ({} ended with an error, see the log)",
            failed.len()
        ));
    }
    let mut shown: Vec<String> = [
        ("succeeded", "succeeded"),
        ("partially_succeeded", "partially succeeded"),
        ("dead", "dead"),
        ("cancelled", "cancelled"),
        ("retry_wait", "retrying"),
        ("queued", "queued"),
    ]
    .iter()
    .filter_map(|(status, label)| {
        let n = counts.tasks.get(status).copied().unwrap_or(0);
        (n > 0).then(|| format!("{n} {label}"))
    })
    .collect();
    if shown.is_empty() {
        shown.push("none finished".into());
    }
    lines.push(format!(
        "{head}; {} tasks: {}",
        counts.total(),
        shown.join(", ")
    ));
    match &target.file {
        Some(file) => lines.push(format!("demo database: {}", file.display())),
        None => lines.push(format!("demo database: {}", target.shown_url())),
    }
    if let Some(log) = log {
        lines.push(format!("demo log: {}", log.display()));
    }
    lines.push("reopen it:".into());
    lines.push(format!(
        "  leasehold-agent run --database-url {} --handlers exec,sleep,noop,fail --exec-allow /bin/sh,/usr/bin/sh --unserved-after off &",
        crate::demo::shell_word(&target.shown_url())
    ));
    lines.push("  leasehold".into());
    lines
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn counts_start_with_every_status_at_zero() {
        let c = Counts::new();
        assert_eq!(c.tasks.len(), TaskStatus::ALL.len());
        assert_eq!(c.total(), 0);
        assert_eq!(c.finished(), 0);
    }

    #[test]
    fn the_farewell_says_where_the_file_is_and_how_to_reopen_it() {
        let target = Target {
            url: "sqlite:///tmp/my demo/leasehold-demo.sqlite".into(),
            file: Some(PathBuf::from("/tmp/my demo/leasehold-demo.sqlite")),
            fresh: true,
        };
        let mut counts = Counts::new();
        counts.tasks.insert("succeeded", 10);
        counts.tasks.insert("dead", 2);
        let lines = farewell(
            &target,
            Some(Path::new("/tmp/my demo/leasehold-demo.log")),
            &counts,
            &[],
        );
        assert_eq!(
            lines,
            [
                "demo stopped: 0 agents drained; 12 tasks: 10 succeeded, 2 dead",
                "demo database: /tmp/my demo/leasehold-demo.sqlite",
                "demo log: /tmp/my demo/leasehold-demo.log",
                "reopen it:",
                "  leasehold-agent run --database-url 'sqlite:///tmp/my demo/leasehold-demo.sqlite' --handlers exec,sleep,noop,fail --exec-allow /bin/sh,/usr/bin/sh --unserved-after off &",
                "  leasehold",
            ]
        );
    }
}
