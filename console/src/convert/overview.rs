//! Task types from the wire (`leasehold types`, the console's Types view; see the parent module
//! for conventions).

use leasehold_proto::v1;
use serde::Serialize;

use super::breaker::BreakerStatusView;
use super::rate::FillView;
use super::shed::shed_after_opt;
use super::{Timestamp, WireError, time};

/// What holds a type back by its own policy, as the table's STATE column and the JSON's
/// `state` say it. A global pause, a full global limit or a full global rate window is not in
/// it: the list says those once (`global_paused`, `global_limit`, `global_rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TypeState {
    /// Claims of the type are paused (`leasehold resume TYPE`).
    Paused,
    /// As many run as its concurrency limit allows.
    AtLimit,
    /// Its rate window holds as many starts as its rate limit allows: nothing more of it
    /// starts until the window moves on.
    RateLimited,
    /// Nothing of the type's own holds it back.
    Active,
}

impl TypeState {
    /// The state of a type from its summary: a pause first, then a full limit, then a full
    /// rate window (a rate the wire breaks counts as none here; [`TypeView::from_wire`]
    /// refuses it).
    pub fn of(t: &v1::TypeSummary) -> Self {
        if t.paused {
            Self::Paused
        } else if t.limit.is_some_and(|n| t.running >= u64::from(n)) {
            Self::AtLimit
        } else if t
            .rate
            .as_ref()
            .and_then(|f| FillView::from_wire(f).ok())
            .is_some_and(|f| f.full())
        {
            Self::RateLimited
        } else {
            Self::Active
        }
    }

    /// The word a table shows.
    pub fn word(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::AtLimit => "at limit",
            Self::RateLimited => "rate limited",
            Self::Active => "active",
        }
    }
}

/// One task type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeView {
    pub task_type: String,
    /// Queued and due.
    pub queued: u64,
    /// Queued, due later.
    pub scheduled: u64,
    /// Waiting to retry.
    pub retrying: u64,
    /// Running or asked to cancel.
    pub running: u64,
    /// In the dead-letter queue.
    pub dead: u64,
    /// Succeeded (fully or partially) in the last minute of database time.
    pub finished_last_minute: u64,
    /// Dead-lettered in the last minute.
    pub dead_last_minute: u64,
    /// Its concurrency limit; `null` when unlimited.
    pub limit: Option<u32>,
    /// Its per-key limit: running tasks allowed per concurrency key; `null` when it has none.
    pub per_key_limit: Option<u32>,
    pub paused: bool,
    /// Its own rate limit and the starts of its current window; `null` when it has none.
    pub rate: Option<FillView>,
    /// Load shedding: waiting tasks overdue by more than this are cancelled (reason `shed`);
    /// `null` when the type does not shed.
    pub shed_after_ms: Option<u64>,
    /// Tasks shed in the last minute of database time.
    pub shed_last_minute: u64,
    pub state: TypeState,
    /// Its circuit breaker and where it stands; `null` when it has none.
    pub breaker: Option<BreakerStatusView>,
    /// How long (ms, the database clock) its oldest waiting task has been due (queued or
    /// retry_wait, due: what a claim could take now); `null` when none waits.
    pub oldest_waiting_ms: Option<u64>,
}

impl TypeView {
    /// Converts one summary; a type without a name, with a per-key limit of 0 or with a
    /// breaker out of bounds breaks the contract.
    pub fn from_wire(t: &v1::TypeSummary) -> Result<Self, WireError> {
        if t.task_type.is_empty() {
            return Err(WireError::MissingField("task type name"));
        }
        if t.per_key_limit == Some(0) {
            return Err(WireError::OutOfRange {
                field: "per_key_limit",
                value: 0,
            });
        }
        Ok(Self {
            task_type: t.task_type.clone(),
            queued: t.queued,
            scheduled: t.scheduled,
            retrying: t.retrying,
            running: t.running,
            dead: t.dead,
            finished_last_minute: t.finished_last_minute,
            dead_last_minute: t.dead_last_minute,
            limit: t.limit,
            per_key_limit: t.per_key_limit,
            paused: t.paused,
            rate: t.rate.as_ref().map(FillView::from_wire).transpose()?,
            shed_after_ms: shed_after_opt("shed_after_ms", t.shed_after_ms)?,
            shed_last_minute: t.shed_last_minute,
            state: TypeState::of(t),
            breaker: t
                .breaker
                .as_ref()
                .map(BreakerStatusView::from_wire)
                .transpose()?,
            oldest_waiting_ms: t.oldest_waiting_ms,
        })
    }
}

/// `leasehold types`: every type with waiting, running or dead tasks, a finish in the last
/// minute or a policy, by name in the database's order (as the agent sent them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeList {
    pub types: Vec<TypeView>,
    /// The global concurrency limit; `null` when unlimited.
    pub global_limit: Option<u32>,
    /// Every claim is paused.
    pub global_paused: bool,
    /// The global rate limit (starts of every type) and its current window; `null` when
    /// there is none.
    pub global_rate: Option<FillView>,
    /// More types exist than listed (the agent lists the first 1,000 by name).
    pub truncated: bool,
    /// Database time of the counts.
    pub now: Timestamp,
}

impl TypeList {
    /// Converts a `GetOverview` reply.
    pub fn from_wire(r: &v1::GetOverviewResponse) -> Result<Self, WireError> {
        let types = r
            .types
            .iter()
            .map(TypeView::from_wire)
            .collect::<Result<Vec<_>, _>>()?;
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = types.iter().find(|t| !seen.insert(t.task_type.as_str())) {
            return Err(WireError::Broken(format!(
                "type {:?} listed twice",
                twice.task_type
            )));
        }
        Ok(Self {
            types,
            global_limit: r.global_limit,
            global_paused: r.global_paused,
            global_rate: r
                .global_rate
                .as_ref()
                .map(FillView::from_wire)
                .transpose()?,
            truncated: r.truncated,
            now: time("now_ms", r.now_ms)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(name: &str) -> v1::TypeSummary {
        v1::TypeSummary {
            task_type: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_pause_comes_before_a_full_limit() {
        let mut t = summary("a");
        assert_eq!(TypeState::of(&t), TypeState::Active);
        t.limit = Some(2);
        t.running = 1;
        assert_eq!(TypeState::of(&t), TypeState::Active);
        t.running = 2;
        assert_eq!(TypeState::of(&t), TypeState::AtLimit);
        t.limit = Some(0);
        t.running = 0;
        assert_eq!(TypeState::of(&t), TypeState::AtLimit);
        t.paused = true;
        assert_eq!(TypeState::of(&t), TypeState::Paused);
    }

    fn fill(starts: u32, used: u64) -> v1::RateFill {
        v1::RateFill {
            limit: Some(v1::RateLimit {
                starts,
                period_ms: 1_000,
            }),
            used,
        }
    }

    #[test]
    fn a_full_rate_window_comes_after_a_pause_and_a_full_limit() {
        let mut t = summary("a");
        t.rate = Some(fill(50, 49));
        assert_eq!(TypeState::of(&t), TypeState::Active);
        t.rate = Some(fill(50, 50));
        assert_eq!(TypeState::of(&t), TypeState::RateLimited);
        assert_eq!(TypeState::RateLimited.word(), "rate limited");
        t.limit = Some(1);
        t.running = 1;
        assert_eq!(TypeState::of(&t), TypeState::AtLimit);
        t.paused = true;
        assert_eq!(TypeState::of(&t), TypeState::Paused);
        // A broken rate holds nothing back here; the list refuses it.
        let mut broken = summary("b");
        broken.rate = Some(v1::RateFill {
            limit: None,
            used: 9,
        });
        assert_eq!(TypeState::of(&broken), TypeState::Active);
        assert_eq!(
            TypeView::from_wire(&broken),
            Err(WireError::MissingField("rate limit"))
        );
        assert_eq!(
            serde_json::to_value(TypeState::RateLimited).ok(),
            Some(serde_json::json!("rate_limited"))
        );
    }

    #[test]
    fn shedding_is_read_and_a_setting_out_of_bounds_refused() {
        let mut t = summary("a");
        t.shed_after_ms = Some(30_000);
        t.shed_last_minute = 4;
        let v = TypeView::from_wire(&t).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.shed_after_ms, v.shed_last_minute), (Some(30_000), 4));
        // Shedding is no state of its own.
        assert_eq!(v.state, TypeState::Active);
        t.shed_after_ms = Some(0);
        assert!(matches!(
            TypeView::from_wire(&t),
            Err(WireError::OutOfRange {
                field: "shed_after_ms",
                ..
            })
        ));
    }

    #[test]
    fn a_per_key_limit_is_read_and_zero_refused() {
        let mut t = summary("a");
        assert_eq!(TypeView::from_wire(&t).map(|v| v.per_key_limit), Ok(None));
        t.per_key_limit = Some(2);
        let v = TypeView::from_wire(&t).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.per_key_limit, Some(2));
        // A per-key limit is no state of its own: the overview has no per-key counts.
        assert_eq!(v.state, TypeState::Active);
        t.per_key_limit = Some(0);
        assert!(matches!(
            TypeView::from_wire(&t),
            Err(WireError::OutOfRange {
                field: "per_key_limit",
                ..
            })
        ));
    }

    #[test]
    fn a_breaker_is_read_and_a_broken_one_refused() {
        let mut t = summary("a");
        assert_eq!(TypeView::from_wire(&t).map(|v| v.breaker), Ok(None));
        t.breaker = Some(v1::BreakerSummary {
            failures: 3,
            within_ms: 60_000,
            cooldown_ms: 2_000,
            state: "open".into(),
            since_ms: 1_764_588_000_000,
            until_ms: 1_764_588_002_000,
        });
        let v = TypeView::from_wire(&t).unwrap_or_else(|e| panic!("{e}"));
        let b = v.breaker.unwrap_or_else(|| panic!("no breaker"));
        assert_eq!((b.state.as_str(), b.failures), ("open", 3));
        // An open breaker is said in its own column, not in the state.
        assert_eq!(v.state, TypeState::Active);
        if let Some(b) = t.breaker.as_mut() {
            b.failures = 0;
        }
        assert!(matches!(
            TypeView::from_wire(&t),
            Err(WireError::OutOfRange {
                field: "failures",
                ..
            })
        ));
    }

    #[test]
    fn the_global_rate_is_read_and_a_broken_one_refused() {
        let mut reply = v1::GetOverviewResponse {
            global_rate: Some(fill(1000, 812)),
            now_ms: 1_764_588_000_000,
            ..Default::default()
        };
        let list = TypeList::from_wire(&reply).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            list.global_rate.map(|f| f.text()).as_deref(),
            Some("812/1000/1s")
        );
        reply.global_rate = Some(v1::RateFill {
            limit: Some(v1::RateLimit {
                starts: 0,
                period_ms: 1_000,
            }),
            used: 0,
        });
        assert!(matches!(
            TypeList::from_wire(&reply),
            Err(WireError::OutOfRange {
                field: "starts",
                ..
            })
        ));
    }

    #[test]
    fn the_list_keeps_the_agents_order_and_refuses_what_breaks_the_contract() {
        let reply = |types| v1::GetOverviewResponse {
            types,
            now_ms: 1_764_588_000_000,
            ..Default::default()
        };
        let list = TypeList::from_wire(&reply(vec![summary("b"), summary("a")]));
        let names: Vec<String> = list
            .map(|l| l.types.into_iter().map(|t| t.task_type).collect())
            .unwrap_or_default();
        assert_eq!(names, ["b", "a"]);
        assert!(matches!(
            TypeList::from_wire(&reply(vec![summary("a"), summary("a")])),
            Err(WireError::Broken(_))
        ));
        assert!(matches!(
            TypeList::from_wire(&reply(vec![summary("")])),
            Err(WireError::MissingField(_))
        ));
        let mut no_time = reply(vec![]);
        no_time.now_ms = 0;
        assert!(matches!(
            TypeList::from_wire(&no_time),
            Err(WireError::Time { .. })
        ));
    }
}
