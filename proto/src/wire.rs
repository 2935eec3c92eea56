//! Enum mappings between the domain (`leasehold_shared`) and the wire (`leasehold.v1`), written
//! once for the agent and the console alike.
//!
//! Invariants: every match is exhaustive, with no wildcard arm, so a state added on either side
//! breaks the build here and nowhere else. Domain → wire cannot fail. Wire → domain gives `None`
//! for the UNSPECIFIED value (0) and for numbers this build does not know; each user turns that
//! into its own error or shows it as sent. Message conversions are not here: they stay with
//! their users.
//!
//! `TaskStatus` was an enum from the start. The other states and outcomes travelled as words
//! (`as_str` names) before they got enums; to keep the wire compatible both ways during a
//! rolling upgrade, a message now carries the enum in a new field and still the word in the old
//! (deprecated) one. [`write`] gives the pair; [`read`] takes the enum and, when an older agent
//! left it UNSPECIFIED, the word; [`from_request`] reads a request's pair for the agent. The
//! deprecated fields are touched only here (the `read_*` methods) and where the agent fills them.

use std::borrow::Cow;
use std::fmt;

use leasehold_shared::domain::outcome::CancelOutcome;
use leasehold_shared::domain::{
    AgentState, AttemptOutcome, AuditResult, LeaseOutcome, MemberState, OnConflict, ResourceState,
    Role, ScheduleAddOutcome, TaskStatus,
};
use leasehold_shared::store::EnqueueOutcome;

use crate::v1;

/// A task status on the wire.
pub fn status_to_wire(status: TaskStatus) -> v1::TaskStatus {
    match status {
        TaskStatus::Queued => v1::TaskStatus::Queued,
        TaskStatus::Running => v1::TaskStatus::Running,
        TaskStatus::RetryWait => v1::TaskStatus::RetryWait,
        TaskStatus::CancelRequested => v1::TaskStatus::CancelRequested,
        TaskStatus::Succeeded => v1::TaskStatus::Succeeded,
        TaskStatus::PartiallySucceeded => v1::TaskStatus::PartiallySucceeded,
        TaskStatus::Cancelled => v1::TaskStatus::Cancelled,
        TaskStatus::Dead => v1::TaskStatus::Dead,
    }
}

/// A task status from the wire (an enum number); `None` for TASK_STATUS_UNSPECIFIED and for
/// numbers this build does not know.
pub fn status_from_wire(value: i32) -> Option<TaskStatus> {
    let wire = v1::TaskStatus::try_from(value).ok()?;
    Some(match wire {
        v1::TaskStatus::Unspecified => return None,
        v1::TaskStatus::Queued => TaskStatus::Queued,
        v1::TaskStatus::Running => TaskStatus::Running,
        v1::TaskStatus::RetryWait => TaskStatus::RetryWait,
        v1::TaskStatus::CancelRequested => TaskStatus::CancelRequested,
        v1::TaskStatus::Succeeded => TaskStatus::Succeeded,
        v1::TaskStatus::PartiallySucceeded => TaskStatus::PartiallySucceeded,
        v1::TaskStatus::Cancelled => TaskStatus::Cancelled,
        v1::TaskStatus::Dead => TaskStatus::Dead,
    })
}

/// An enqueue's conflict mode on the wire.
pub fn on_conflict_to_wire(mode: OnConflict) -> v1::OnConflict {
    match mode {
        OnConflict::Skip => v1::OnConflict::Skip,
        OnConflict::Replace => v1::OnConflict::Replace,
        OnConflict::Debounce => v1::OnConflict::Debounce,
    }
}

/// An enqueue's conflict mode from the wire: ON_CONFLICT_UNSPECIFIED is skip (an older
/// client); `None` for numbers this build does not know.
pub fn on_conflict_from_wire(value: i32) -> Option<OnConflict> {
    Some(match v1::OnConflict::try_from(value).ok()? {
        v1::OnConflict::Unspecified | v1::OnConflict::Skip => OnConflict::Skip,
        v1::OnConflict::Replace => OnConflict::Replace,
        v1::OnConflict::Debounce => OnConflict::Debounce,
    })
}

/// What an enqueue did, on the wire.
pub fn enqueue_outcome_to_wire(outcome: EnqueueOutcome) -> v1::EnqueueOutcome {
    match outcome {
        EnqueueOutcome::Created => v1::EnqueueOutcome::Created,
        EnqueueOutcome::Existing => v1::EnqueueOutcome::Existing,
        EnqueueOutcome::Replaced => v1::EnqueueOutcome::Replaced,
        EnqueueOutcome::Debounced => v1::EnqueueOutcome::Debounced,
    }
}

/// What an enqueue did, from the wire; `None` for ENQUEUE_OUTCOME_UNSPECIFIED (an agent from
/// before unique enqueues: read `created`) and for numbers this build does not know.
pub fn enqueue_outcome_from_wire(value: i32) -> Option<EnqueueOutcome> {
    Some(match v1::EnqueueOutcome::try_from(value).ok()? {
        v1::EnqueueOutcome::Unspecified => return None,
        v1::EnqueueOutcome::Created => EnqueueOutcome::Created,
        v1::EnqueueOutcome::Existing => EnqueueOutcome::Existing,
        v1::EnqueueOutcome::Replaced => EnqueueOutcome::Replaced,
        v1::EnqueueOutcome::Debounced => EnqueueOutcome::Debounced,
    })
}

/// Largest enum number [`WireEnum::all`] looks at; every enum here is far below.
const MAX_NUMBER: i32 = 64;

/// A domain enum that travels as a protobuf enum beside its word.
pub trait WireEnum: Copy + PartialEq + fmt::Debug + Sized + 'static {
    /// What it is, for messages ("agent state").
    const WHAT: &'static str;
    /// The word: the domain's `as_str`, the same in the old string field and on screen.
    fn word(self) -> &'static str;
    /// The enum number on the wire (never UNSPECIFIED).
    fn number(self) -> i32;
    /// The protobuf name of its wire value, e.g. `AGENT_STATE_DRAINING`.
    fn wire_name(self) -> &'static str;
    /// The domain value of an enum number; `None` for UNSPECIFIED and unknown numbers.
    fn from_number(number: i32) -> Option<Self>;

    /// The domain value of a word (what an older peer sends); `None` for an unknown one. Read
    /// from the domain's own table (`ALL` and `as_str`), the one the word was written from.
    fn from_word(word: &str) -> Option<Self>;

    /// Every value, in wire order.
    fn all() -> Vec<Self> {
        (1..=MAX_NUMBER).filter_map(Self::from_number).collect()
    }
}

/// Implements [`WireEnum`] from one list of (domain, wire) pairs: both matches come from the same
/// list, so the mapping is a bijection the compiler checks (a missing variant does not build, a
/// repeated one is an unreachable pattern).
macro_rules! wire_enum {
    ($domain:ident => $wire:ident, $what:literal { $($d:ident => $w:ident,)+ }) => {
        impl WireEnum for $domain {
            const WHAT: &'static str = $what;

            fn word(self) -> &'static str {
                self.as_str()
            }

            fn number(self) -> i32 {
                self.to_wire() as i32
            }

            fn wire_name(self) -> &'static str {
                self.to_wire().as_str_name()
            }

            fn from_word(word: &str) -> Option<Self> {
                $domain::ALL.iter().copied().find(|v| v.as_str() == word)
            }

            fn from_number(number: i32) -> Option<Self> {
                let wire = v1::$wire::try_from(number).ok()?;
                Some(match wire {
                    v1::$wire::Unspecified => return None,
                    $(v1::$wire::$w => $domain::$d,)+
                })
            }
        }

        impl ToWire for $domain {
            type Wire = v1::$wire;
            fn to_wire(self) -> v1::$wire {
                match self {
                    $($domain::$d => v1::$wire::$w,)+
                }
            }
        }
    };
}

/// The protobuf enum value of a domain value.
pub trait ToWire {
    /// The generated enum.
    type Wire;
    /// Its value on the wire.
    fn to_wire(self) -> Self::Wire;
}

wire_enum!(AgentState => AgentState, "agent state" {
    Running => Running,
    Draining => Draining,
    Stopped => Stopped,
});

wire_enum!(LeaseOutcome => LeaseOutcome, "lease outcome" {
    Succeeded => Succeeded,
    PartiallySucceeded => PartiallySucceeded,
    RetryWait => RetryWait,
    Dead => Dead,
    Cancelled => Cancelled,
    Released => Released,
    Lost => Lost,
    Fenced => Fenced,
    Ended => Ended,
});

wire_enum!(AttemptOutcome => AttemptOutcome, "attempt outcome" {
    Succeeded => Succeeded,
    PartiallySucceeded => PartiallySucceeded,
    Failed => Failed,
    Cancelled => Cancelled,
    Released => Released,
    LeaseExpired => LeaseExpired,
    Snoozed => Snoozed,
});

wire_enum!(CancelOutcome => CancelOutcome, "cancel outcome" {
    Cancelled => Cancelled,
    CancelRequested => CancelRequested,
    AlreadyRequested => AlreadyRequested,
    Succeeded => Succeeded,
    PartiallySucceeded => PartiallySucceeded,
    Dead => Dead,
});

wire_enum!(ScheduleAddOutcome => ScheduleAddOutcome, "schedule add outcome" {
    Created => Created,
    Replaced => Replaced,
    Unchanged => Unchanged,
});

wire_enum!(ResourceState => LeaseState, "lease state" {
    Free => Free,
    Held => Held,
    Suspect => Suspect,
    Expired => Expired,
    Released => Released,
});

wire_enum!(MemberState => MemberState, "member state" {
    Live => Live,
    Suspect => Suspect,
    Gone => Gone,
});

wire_enum!(AuditResult => AuditResult, "audit result" {
    Applied => Applied,
    Noop => Noop,
    Denied => Denied,
    Failed => Failed,
});

wire_enum!(Role => Role, "role" {
    Viewer => Viewer,
    Operator => Operator,
    System => System,
});

/// The enum number and the word to send for a value: the new field and, for older peers, the
/// deprecated one.
pub fn write<D: WireEnum>(value: D) -> (i32, String) {
    (value.number(), value.word().to_string())
}

/// [`write`] for a value that may be absent (an attempt still running): UNSPECIFIED and "".
pub fn write_opt<D: WireEnum>(value: Option<D>) -> (i32, String) {
    value.map_or((0, String::new()), write)
}

/// A value as read from a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read<D> {
    /// Neither the enum nor the word was set.
    Absent,
    /// A value this build knows.
    Known(D),
    /// A value this build does not know (a newer peer, or a broken one): shown as sent.
    Unknown {
        /// The enum number (0 when only the word was set).
        number: i32,
        /// The word (empty when only the enum was set).
        word: String,
    },
}

impl<D: WireEnum> Read<D> {
    /// The value, when known.
    pub fn known(&self) -> Option<D> {
        match self {
            Read::Known(v) => Some(*v),
            Read::Absent | Read::Unknown { .. } => None,
        }
    }

    /// True when it is `value`.
    pub fn is(&self, value: D) -> bool {
        self.known() == Some(value)
    }

    /// The word to show: a known value's word; an unknown one as sent (its word, else
    /// `unknown(<number>)`); empty when absent.
    pub fn word(&self) -> Cow<'static, str> {
        match self {
            Read::Absent => Cow::Borrowed(""),
            Read::Known(v) => Cow::Borrowed(v.word()),
            Read::Unknown { word, .. } if !word.is_empty() => Cow::Owned(word.clone()),
            Read::Unknown { number, .. } => Cow::Owned(format!("unknown({number})")),
        }
    }
}

/// Reads a value from its enum number and, for an older peer that leaves the enum
/// UNSPECIFIED, its word. A number this build does not know falls back to the word too (a newer
/// peer still sends it), else the value is [`Read::Unknown`].
pub fn read<D: WireEnum>(number: i32, word: &str) -> Read<D> {
    if let Some(v) = D::from_number(number) {
        return Read::Known(v);
    }
    if let Some(v) = D::from_word(word) {
        return Read::Known(v);
    }
    if number == 0 && word.is_empty() {
        return Read::Absent;
    }
    Read::Unknown {
        number,
        word: word.to_string(),
    }
}

/// A request field that is wrong: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// The field to name.
    pub field: &'static str,
    /// What is wrong with it, starting with the field's name.
    pub message: String,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RequestError {}

/// Reads a request's filter sent as an enum (`number_field`) and, by older clients, as a word
/// (`word_field`); either may be unset (`None` when both are). An unknown number or word, or a
/// pair that names two values, is refused naming the field.
pub fn from_request<D: WireEnum>(
    number_field: &'static str,
    number: i32,
    word_field: &'static str,
    word: &str,
) -> Result<Option<D>, RequestError> {
    let by_number = match number {
        0 => None,
        n => Some(D::from_number(n).ok_or_else(|| RequestError {
            field: number_field,
            message: format!("{number_field}: {n} is not a known {}", D::WHAT),
        })?),
    };
    let by_word = match word {
        "" => None,
        w => Some(D::from_word(w).ok_or_else(|| RequestError {
            field: word_field,
            message: format!(
                "{word_field}: {:?} is not one of {}",
                w.chars().take(64).collect::<String>(),
                D::all()
                    .into_iter()
                    .map(WireEnum::word)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?),
    };
    match (by_number, by_word) {
        (Some(n), Some(w)) if n != w => Err(RequestError {
            field: word_field,
            message: format!(
                "{word_field}: {:?} disagrees with {number_field} {} (set one, or both the same)",
                w.word(),
                n.wire_name()
            ),
        }),
        (n, w) => Ok(n.or(w)),
    }
}

// The deprecated word fields are read only through these, so each reader reads the enum first.
#[allow(deprecated)]
mod readers {
    use super::*;

    impl v1::AgentStats {
        /// The agent's state (running or draining).
        pub fn read_state(&self) -> Read<AgentState> {
            read(self.agent_state, &self.state)
        }
    }

    impl v1::AgentInfo {
        /// The agent's registry state.
        pub fn read_state(&self) -> Read<AgentState> {
            read(self.agent_state, &self.state)
        }
    }

    impl v1::LeaseReleased {
        /// How the lease ended.
        pub fn read_outcome(&self) -> Read<LeaseOutcome> {
            read(self.lease_outcome, &self.outcome)
        }
    }

    impl v1::Attempt {
        /// How the attempt ended; [`Read::Absent`] while it runs.
        pub fn read_outcome(&self) -> Read<AttemptOutcome> {
            read(self.attempt_outcome, &self.outcome)
        }
    }

    impl v1::CancelResponse {
        /// What the cancel did.
        pub fn read_outcome(&self) -> Read<CancelOutcome> {
            read(self.cancel_outcome, &self.outcome)
        }
    }

    impl v1::AddScheduleResponse {
        /// What the add did.
        pub fn read_outcome(&self) -> Read<ScheduleAddOutcome> {
            read(self.add_outcome, &self.outcome)
        }
    }

    impl v1::ResourceLease {
        /// How the lock reads.
        pub fn read_state(&self) -> Read<ResourceState> {
            read(self.lease_state, &self.state)
        }
    }

    impl v1::Shard {
        /// How the shard reads.
        pub fn read_state(&self) -> Read<ResourceState> {
            read(self.lease_state, &self.state)
        }
    }

    impl v1::ShardMember {
        /// How the member reads.
        pub fn read_state(&self) -> Read<MemberState> {
            read(self.member_state, &self.state)
        }
    }

    impl v1::ListAgentsResponse {
        /// The role the caller's token has on the answering agent.
        pub fn read_caller_role(&self) -> Read<Role> {
            read(self.role, &self.caller_role)
        }
    }

    impl v1::AuditEntry {
        /// The actor's role.
        pub fn read_role(&self) -> Read<Role> {
            read(self.actor_role, &self.role)
        }

        /// The action's result.
        pub fn read_result(&self) -> Read<AuditResult> {
            read(self.audit_result, &self.result)
        }
    }

    impl v1::ListAuditRequest {
        /// The result filter, from the enum or (an older console) the word; `None` for any.
        pub fn read_result(&self) -> Result<Option<AuditResult>, RequestError> {
            from_request("audit_result", self.audit_result, "result", &self.result)
        }

        /// Sets the result filter in both fields, so an older agent filters too.
        pub fn set_result_filter(&mut self, result: Option<AuditResult>) {
            (self.audit_result, self.result) = write_opt(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips() {
        for s in TaskStatus::ALL {
            assert_eq!(status_from_wire(status_to_wire(s) as i32), Some(s), "{s:?}");
        }
    }

    #[test]
    fn statuses_map_to_distinct_specified_wire_values() {
        let mut seen: Vec<i32> = TaskStatus::ALL
            .iter()
            .map(|s| status_to_wire(*s) as i32)
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), TaskStatus::ALL.len());
        assert!(!seen.contains(&(v1::TaskStatus::Unspecified as i32)));
    }

    #[test]
    fn unspecified_and_unknown_numbers_give_none() {
        assert_eq!(status_from_wire(0), None);
        assert_eq!(status_from_wire(99), None);
        assert_eq!(status_from_wire(-1), None);
        assert_eq!(status_from_wire(i32::MAX), None);
    }

    /// Every variant of `D`, from the domain's own list: the wire side must cover each.
    fn check<D: WireEnum>(domain: &[D]) {
        let wire = D::all();
        assert_eq!(
            wire.len(),
            domain.len(),
            "{}: {wire:?} vs {domain:?}",
            D::WHAT
        );
        for &v in domain {
            let (number, word) = write(v);
            // Domain → proto → domain, by the enum alone and by the word alone.
            assert_eq!(D::from_number(number), Some(v), "{v:?}");
            assert_eq!(read::<D>(number, ""), Read::Known(v), "{v:?}");
            assert_eq!(read::<D>(0, &word), Read::Known(v), "{v:?}");
            // The word the agent sends in the old field names the same value as the enum: the
            // wire name is the word in capitals behind the enum's prefix.
            assert_eq!(read::<D>(number, &word), Read::Known(v), "{v:?}");
            assert!(
                v.wire_name()
                    .ends_with(&format!("_{}", word.to_uppercase())),
                "{} vs {word}",
                v.wire_name()
            );
            assert_ne!(number, 0, "{v:?} maps to UNSPECIFIED");
        }
        assert_eq!(D::from_number(0), None);
        assert_eq!(D::from_number(MAX_NUMBER + 1), None);
    }

    #[test]
    fn every_variant_round_trips_and_its_word_agrees_with_its_enum() {
        check(&AgentState::ALL);
        check(&AuditResult::ALL);
        check(&ResourceState::ALL);
        check(&ScheduleAddOutcome::ALL);
        check(&LeaseOutcome::ALL);
        check(&AttemptOutcome::ALL);
        check(&CancelOutcome::ALL);
        check(&MemberState::ALL);
        check(&Role::ALL);
    }

    #[test]
    fn an_older_peer_unknown_values_and_absence_read_as_such() {
        // An older agent: enum unset, word set.
        assert_eq!(
            read::<AgentState>(0, "draining"),
            Read::Known(AgentState::Draining)
        );
        // A newer one: a number this build does not know, with its word.
        let newer = read::<AgentState>(9, "hibernating");
        assert_eq!(
            newer,
            Read::Unknown {
                number: 9,
                word: "hibernating".into()
            }
        );
        assert_eq!(newer.word(), "hibernating");
        assert_eq!(newer.known(), None);
        // A number alone that this build does not know.
        assert_eq!(read::<Role>(42, "").word(), "unknown(42)");
        assert_eq!(read::<Role>(-1, "").word(), "unknown(-1)");
        // A word alone that this build does not know.
        assert_eq!(read::<MemberState>(0, "asleep").word(), "asleep");
        // Nothing at all (an attempt still running).
        assert_eq!(read::<AttemptOutcome>(0, ""), Read::Absent);
        assert_eq!(read::<AttemptOutcome>(0, "").word(), "");
        // The enum wins over a word that disagrees.
        assert!(read::<Role>(Role::Viewer.number(), "operator").is(Role::Viewer));
    }

    #[test]
    fn a_request_pair_is_read_from_either_field_and_a_conflict_names_the_field() {
        let f = |n, w: &str| from_request::<AuditResult>("audit_result", n, "result", w);
        let denied = AuditResult::Denied.number();
        assert_eq!(f(0, ""), Ok(None));
        assert_eq!(f(denied, ""), Ok(Some(AuditResult::Denied)));
        assert_eq!(f(0, "denied"), Ok(Some(AuditResult::Denied)));
        assert_eq!(f(denied, "denied"), Ok(Some(AuditResult::Denied)));
        let e = f(denied, "applied").unwrap_err();
        assert_eq!(e.field, "result");
        assert_eq!(
            e.message,
            "result: \"applied\" disagrees with audit_result AUDIT_RESULT_DENIED (set one, or both the same)"
        );
        let e = f(0, "maybe").unwrap_err();
        assert_eq!(
            e.message,
            "result: \"maybe\" is not one of applied, noop, denied, failed"
        );
        let e = f(77, "").unwrap_err();
        assert_eq!(
            (e.field, e.message.as_str()),
            (
                "audit_result",
                "audit_result: 77 is not a known audit result"
            )
        );
    }

    #[test]
    fn a_request_filter_set_here_is_read_back_by_the_agent() {
        let mut r = v1::ListAuditRequest::default();
        for v in [
            Some(AuditResult::Noop),
            Some(AuditResult::Failed),
            None::<AuditResult>,
        ] {
            r.set_result_filter(v);
            assert_eq!(r.read_result(), Ok(v));
        }
    }
}
