//! The confirm dialog of destructive actions, and the other overlays' models.
//!
//! Invariant: nothing destructive is sent without a confirmation that named the verb, the count
//! and the first ids. Focus starts on Cancel, so a stray Enter does nothing; `y` confirms; an
//! action on more than [`TYPE_COUNT_ABOVE`] tasks, or on "all matching the filter", is confirmed
//! only by typing its count, then `y` or Enter. `n`, `q` and Esc only close a dialog: none of
//! them ever quits the console.

use leasehold_proto::v1 as pb;

use super::prompt::LineInput;
use crate::event::{LimitScope, TaskFilter};

/// Above this many tasks the count must be typed.
pub const TYPE_COUNT_ABOVE: u64 = 50;
/// How many ids the dialog lists.
pub const IDS_SHOWN: usize = 5;

/// A destructive verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Cancel,
    Requeue,
    /// Make waiting tasks due now.
    RunNow,
    /// Delete tasks with their attempts.
    Delete,
    RequeueDead,
    Drain,
    EnableSchedule,
    DisableSchedule,
    TriggerSchedule,
    /// An operator's forced release of a lock.
    ReleaseLock,
    /// Quitting `leasehold demo`, which stops the demo's agents.
    StopDemo,
}

impl Verb {
    pub fn word(self) -> &'static str {
        match self {
            Verb::Cancel => "Cancel",
            Verb::Requeue => "Requeue",
            Verb::RunNow => "Run now",
            Verb::Delete => "Delete",
            Verb::RequeueDead => "Requeue",
            Verb::Drain => "Drain",
            Verb::EnableSchedule => "Enable",
            Verb::DisableSchedule => "Disable",
            Verb::TriggerSchedule => "Trigger",
            Verb::ReleaseLock => "Release",
            Verb::StopDemo => "Stop",
        }
    }

    /// What the action will do, when the verb alone does not say it.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Verb::RunNow => Some(
                "due now: the next claim takes it in its turn (limits, pauses and breakers still \
                 apply)",
            ),
            Verb::Delete => Some(
                "the row and its attempts are gone for good (the audit log keeps \
                 the id, type and status)",
            ),
            Verb::EnableSchedule => Some("it fires from its next tick; missed ticks are skipped"),
            Verb::DisableSchedule => Some("it stops firing until enabled again"),
            Verb::TriggerSchedule => Some("enqueues its task once, now, outside its cron"),
            Verb::ReleaseLock => Some(
                "forced: frees it from whoever holds it now, whose next renew is refused; one \
                 taken with lock_at_least_for stays held until then",
            ),
            Verb::StopDemo => Some(
                "quits the console; the agents drain and release what they run (n or esc keeps \
                 the demo going)",
            ),
            _ => None,
        }
    }
}

/// What a confirmed action applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    Tasks(Vec<i64>),
    /// Every dead letter matching the filter (`typed`: the filter as the operator wrote it).
    DeadMatching {
        filter: TaskFilter,
        typed: String,
    },
    Agent {
        addr: String,
        agent_id: String,
    },
    /// One schedule, by name.
    Schedule(String),
    /// One lock, by name, with the holding the operator saw.
    Lock {
        name: String,
        owner: String,
        token: i64,
    },
    /// The agents `leasehold demo` runs in this process (how many still run).
    Demo {
        agents: usize,
    },
}

/// Which button has the focus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    Cancel,
    Confirm,
}

/// An open confirm dialog.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirm {
    pub verb: Verb,
    pub targets: Targets,
    pub focus: Focus,
    /// How many it applies to; `None` while a dry run counts them.
    pub count: Option<u64>,
    /// The count typed so far (when one must be typed).
    pub typed: LineInput,
    /// The dry run failed.
    pub error: Option<String>,
}

impl Confirm {
    pub fn new(verb: Verb, targets: Targets) -> Self {
        let count = match &targets {
            Targets::Tasks(ids) => Some(ids.len() as u64),
            Targets::Agent { .. }
            | Targets::Schedule(_)
            | Targets::Lock { .. }
            | Targets::Demo { .. } => Some(1),
            Targets::DeadMatching { .. } => None,
        };
        Self {
            verb,
            targets,
            focus: Focus::Cancel,
            count,
            typed: LineInput::default(),
            error: None,
        }
    }

    /// True when the count must be typed to confirm.
    pub fn needs_typed_count(&self) -> bool {
        matches!(self.targets, Targets::DeadMatching { .. })
            || self.count.is_some_and(|n| n > TYPE_COUNT_ABOVE)
    }

    /// True when confirming now would be accepted.
    pub fn can_confirm(&self) -> bool {
        match self.count {
            None | Some(0) => false,
            Some(n) => !self.needs_typed_count() || self.typed.text().trim() == n.to_string(),
        }
    }

    /// The noun phrase: "3 tasks", "all 120 dead letters matching type:mail", "agent web-1#3".
    pub fn what(&self) -> String {
        match (&self.targets, self.count) {
            (Targets::Tasks(ids), _) if ids.len() == 1 => "1 task".into(),
            (Targets::Tasks(ids), _) => format!("{} tasks", ids.len()),
            (Targets::DeadMatching { typed, .. }, count) => {
                let n = count.map_or_else(|| "…".to_string(), |n| n.to_string());
                if typed.trim().is_empty() {
                    format!("all {n} dead letters")
                } else {
                    format!("all {n} dead letters matching {}", typed.trim())
                }
            }
            (Targets::Agent { agent_id, .. }, _) => format!("agent {agent_id}"),
            (Targets::Schedule(name), _) => {
                format!("schedule {}", crate::output::text::shown(name, 64))
            }
            (Targets::Lock { name, owner, token }, _) => {
                let name = crate::output::text::shown(name, 64);
                if owner.is_empty() {
                    format!("lock {name} (token {token})")
                } else {
                    let owner = crate::output::text::shown(owner, 40);
                    format!("lock {name} held by {owner} (token {token})")
                }
            }
            (Targets::Demo { agents: 1 }, _) => "the demo's agent".into(),
            (Targets::Demo { agents }, _) => format!("the demo's {agents} agents"),
        }
    }

    /// The first ids, for the dialog.
    pub fn first_ids(&self) -> Option<String> {
        let Targets::Tasks(ids) = &self.targets else {
            return None;
        };
        let mut shown: Vec<String> = ids.iter().take(IDS_SHOWN).map(i64::to_string).collect();
        if ids.len() > IDS_SHOWN {
            shown.push(format!("… +{}", ids.len() - IDS_SHOWN));
        }
        Some(shown.join(", "))
    }
}

/// A task's detail pane. It is read again every [`DETAIL_REFRESH_MS`] while open, after
/// every action reply and on ctrl-l; only the answer to the latest read is shown, so an
/// answer from before an action never overwrites one from after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Detail {
    pub id: i64,
    pub reply: Option<Box<pb::GetTaskResponse>>,
    pub error: Option<String>,
    pub scroll: u16,
    /// The request id of the read on its way, if one is.
    pub asked: Option<u64>,
    /// Local time of the last read asked for.
    pub asked_ms: i64,
}

/// How often an open task pane is read again (local ms).
pub const DETAIL_REFRESH_MS: i64 = 1_000;

impl Detail {
    /// A pane for task `id`, nothing read yet.
    pub fn new(id: i64) -> Self {
        Self {
            id,
            reply: None,
            error: None,
            scroll: 0,
            asked: None,
            asked_ms: 0,
        }
    }
}

/// What a prompt's text is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptKind {
    /// The `/` filter of the current view.
    Filter,
    /// The `:` command line.
    Command,
    /// A typed concurrency limit ("none" for unlimited).
    Limit(LimitScope),
}

/// An open prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub kind: PromptKind,
    pub input: LineInput,
    /// Why the text entered was refused, shown on the prompt line until the next edit (the
    /// prompt takes the status line's place, so the status line cannot say it).
    pub error: Option<String>,
}

impl Prompt {
    pub fn new(kind: PromptKind, text: &str) -> Self {
        Self {
            kind,
            input: LineInput::new(text),
            error: None,
        }
    }
}

/// Something drawn over the view; the last one opened has the keys.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    Detail(Box<Detail>),
    Confirm(Box<Confirm>),
    Help {
        scroll: u16,
    },
    /// The log of actions sent (`@`): `selected` counts from the newest entry (shown first);
    /// `expanded` shows the selected entry's full text under it.
    Log {
        selected: usize,
        expanded: bool,
    },
    Prompt(Prompt),
}
