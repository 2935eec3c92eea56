//! The states and outcomes Leasehold reports: how a held lease ended, what a cancel or a
//! schedule add did, how an agent, a shard member or a lease reads, how an audited action went.
//! Each enum's words are one table ([`word_enum!`]) behind `as_str` and `FromStr`; the wire enums
//! map to these in `leasehold_proto::wire`, the store decodes its words into them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::ids::truncate_for_error;
use super::status::TaskStatus;

/// A word that names no variant of the enum it was read as.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown {what} {word:?} (expected one of {expected})")]
pub struct UnknownWord {
    /// What was read, e.g. "lease outcome".
    pub what: &'static str,
    /// The word, cut for the message.
    pub word: String,
    /// The known words, comma-separated.
    pub expected: String,
}

/// An enum of words: the variants, their words and what they are called, written once. Gives
/// `ALL`, `as_str`, `Display` and `FromStr` (which refuses an unknown word with
/// [`UnknownWord`]).
macro_rules! word_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $what:literal {
            $($(#[$vmeta:meta])* $variant:ident = $word:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($word),+].len()] = [$($name::$variant),+];

            /// The word on the wire and on screen.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownWord;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownWord {
                        what: $what,
                        word: truncate_for_error(s),
                        expected: [$($word),+].join(", "),
                    })
            }
        }
    };
}

word_enum! {
    /// How a lease held by an agent ended, as its Watch stream reports it.
    pub enum LeaseOutcome: "lease outcome" {
        Succeeded = "succeeded",
        PartiallySucceeded = "partially_succeeded",
        RetryWait = "retry_wait",
        Dead = "dead",
        Cancelled = "cancelled",
        /// Given back at shutdown.
        Released = "released",
        /// Revoked, or not provable before the local deadline.
        Lost = "lost",
        /// A holder write was refused: the lease had moved on.
        Fenced = "fenced",
        /// Gone from the lease book while events were dropped (found by reconciliation).
        Ended = "ended",
    }
}

impl LeaseOutcome {
    /// How a lease ended when its task is now in `status`: the final statuses and retry_wait
    /// name themselves; `None` for a status no completion leaves a task in (queued, running,
    /// cancel_requested), which the caller decides about.
    pub const fn of_status(status: TaskStatus) -> Option<LeaseOutcome> {
        match status {
            TaskStatus::Succeeded => Some(LeaseOutcome::Succeeded),
            TaskStatus::PartiallySucceeded => Some(LeaseOutcome::PartiallySucceeded),
            TaskStatus::RetryWait => Some(LeaseOutcome::RetryWait),
            TaskStatus::Dead => Some(LeaseOutcome::Dead),
            TaskStatus::Cancelled => Some(LeaseOutcome::Cancelled),
            TaskStatus::Queued | TaskStatus::Running | TaskStatus::CancelRequested => None,
        }
    }
}

word_enum! {
    /// What a cancel did: stopped a waiting task, asked the holder, found it asked already, or
    /// (waiting for the holder) found it finished first with a final status.
    pub enum CancelOutcome: "cancel outcome" {
        Cancelled = "cancelled",
        CancelRequested = "cancel_requested",
        AlreadyRequested = "already_requested",
        Succeeded = "succeeded",
        PartiallySucceeded = "partially_succeeded",
        Dead = "dead",
    }
}

word_enum! {
    /// Where a task type's circuit breaker stands.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum BreakerState: "breaker state" {
        /// Tasks run; failures are counted.
        Closed = "closed",
        /// Too many failures: the type is not claimed until the cooldown ends.
        Open = "open",
        /// After the cooldown: one task at a time tries.
        HalfOpen = "half_open",
    }
}

word_enum! {
    /// How a shard group member reads at a moment.
    pub enum MemberState: "member state" {
        Live = "live",
        /// Heartbeat overdue, still counted.
        Suspect = "suspect",
        /// Past its lease and grace: not counted.
        Gone = "gone",
    }
}

word_enum! {
    /// State an agent reports of itself.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum AgentState: "agent state" {
        Running = "running",
        Draining = "draining",
        Stopped = "stopped",
    }
}

word_enum! {
    /// Result of an audited action.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum AuditResult: "audit result" {
        Applied = "applied",
        Noop = "noop",
        Denied = "denied",
        Failed = "failed",
    }
}

word_enum! {
    /// What a schedule add did.
    pub enum ScheduleAddOutcome: "schedule add outcome" {
        Created = "created",
        Replaced = "replaced",
        Unchanged = "unchanged",
    }
}

word_enum! {
    /// How a lease (lock or shard) reads at a moment.
    pub enum ResourceState: "resource state" {
        /// Nobody holds it.
        Free = "free",
        /// Held, renewals on time.
        Held = "held",
        /// Held, but the last renewal is older than half the lease: shown, not taken.
        Suspect = "suspect",
        /// Past `lease_until` (or `lock_at_most_until`), not yet takeable by others (grace).
        Expired = "expired",
        /// Given back before `lock_at_least_until`: held until then, renewed by nobody.
        Released = "released",
    }
}

impl ResourceState {
    /// Someone holds it (or keeps it held): not free, not past its lease.
    pub fn is_held(self) -> bool {
        matches!(
            self,
            ResourceState::Held | ResourceState::Suspect | ResourceState::Released
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back_and_unknown_words_are_refused_with_the_known_ones() {
        for o in LeaseOutcome::ALL {
            assert_eq!(o.as_str().parse::<LeaseOutcome>(), Ok(o));
        }
        for o in CancelOutcome::ALL {
            assert_eq!(o.to_string().parse::<CancelOutcome>(), Ok(o));
        }
        for s in MemberState::ALL {
            assert_eq!(s.as_str().parse::<MemberState>(), Ok(s));
        }
        for s in AgentState::ALL {
            assert_eq!(s.as_str().parse::<AgentState>(), Ok(s));
        }
        for r in AuditResult::ALL {
            assert_eq!(r.as_str().parse::<AuditResult>(), Ok(r));
        }
        for o in ScheduleAddOutcome::ALL {
            assert_eq!(o.as_str().parse::<ScheduleAddOutcome>(), Ok(o));
        }
        for s in ResourceState::ALL {
            assert_eq!(s.as_str().parse::<ResourceState>(), Ok(s));
        }
        let e = "asleep".parse::<MemberState>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown member state \"asleep\" (expected one of live, suspect, gone)"
        );
        assert!("".parse::<LeaseOutcome>().is_err());
        assert!("Succeeded".parse::<CancelOutcome>().is_err());
    }

    #[test]
    fn a_lease_ends_as_the_status_it_leaves_and_never_as_a_live_status() {
        for status in TaskStatus::ALL {
            match LeaseOutcome::of_status(status) {
                // The same word: a console shows the status the task ended in.
                Some(o) => assert_eq!(o.as_str(), status.as_str(), "{status:?}"),
                None => assert!(!status.is_terminal() && status != TaskStatus::RetryWait),
            }
        }
        assert_eq!(LeaseOutcome::of_status(TaskStatus::Queued), None);
        assert_eq!(
            LeaseOutcome::of_status(TaskStatus::RetryWait),
            Some(LeaseOutcome::RetryWait)
        );
    }

    #[test]
    fn words_are_distinct() {
        let mut words: Vec<&str> = LeaseOutcome::ALL.iter().map(|o| o.as_str()).collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), LeaseOutcome::ALL.len());
    }
}
