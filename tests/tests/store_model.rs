#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Both stores against a model, in lockstep (issues 18 and 21): random sequences of store
//! operations — enqueue (types, priorities, max attempts, idempotency keys), batch claims by
//! agent over one or both types, renew, progress, complete (ok, partial, failed retryable or
//! not, cancelled), release, operator cancel, requeue, requeue-dead and purge-dead (deleted
//! tasks leave the model and each side's list alike), policy pause/resume and
//! concurrency limits, lease expiry (backdated in SQL) then recovery, retry backoff made due,
//! deadline passing then expiry — applied in the same order to a fresh PostgreSQL database, a
//! fresh SQLite file and a small pure model of DESIGN §3–§6 written here from the contract.
//!
//! ```text
//!            ┌──▶ PostgreSQL ──▶ outcome, rows ─┐
//!   Vec<Op> ─┼──▶ SQLite     ──▶ outcome, rows ─┼─▶ PG = SQLite? then both = model?
//!            └──▶ model      ──▶ outcome, rows ─┘   after EVERY step
//! ```
//! Compared after every step: the operation's outcome (enqueued/created, claimed tasks with
//! their epoch and attempt, renewed or lost, applied / fenced / repeated with the retry delay,
//! released, cancel and requeue results, policy rows, recovered leases, expired deadlines) and
//! every task's status, attempt, lease epoch, lease owner, whether a lease is set, and its
//! `task_attempts` rows. Tasks are named by their order of creation, so the two databases'
//! ids need not match. Every transition the model makes is checked against `TaskStatus::apply`
//! (the shared table); retry delays against `RetryPolicy::nominal_delay` (jitter 0, so exact).
//!
//! Determinism: claims follow DESIGN §4 (priority, then `available_at`, then id). The model
//! orders `available_at` by the step that set it, so steps are spaced by [`STEP_GAP`] (SQLite
//! keeps times at millisecond precision). A retry waits [`RETRY_BASE`] or more, far longer than
//! a case, and becomes due only through `MakeDue`, which backdates `available_at` by an hour.
//!
//! Runs: `cargo test -p leasehold-tests --test store_model` (PostgreSQL from DATABASE_URL or a
//! private server): [`DEFAULT_CASES`] cases of up to [`STEPS`] steps, each on fresh databases,
//! from the fixed [`DEFAULT_SEED`] so the run and its positive control are the same every time.
//! `MODEL_SEED=N` runs another seed (`random`: from the clock; the seed is printed at the start
//! and on failure, then proptest shrinks to a minimal sequence), `MODEL_CASES=N` another count,
//! `MODEL_TRACE=1` (with `--nocapture`) prints every step and its outcome.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::time::Duration;

use leasehold_shared::domain::{
    Policy, PolicyPatch, PolicyScope, RetryPolicy, TaskAction, TaskStatus,
};
use leasehold_shared::store::{
    CancelOutcome, CancelParams, ClaimParams, CompleteOutcome, CompleteParams, Completion,
    DeadFilter, DeadIdsPage, ExpireDeadlinesParams, HolderWrite, NewTask, PolicySetParams,
    ProgressParams, PurgeDeadParams, RecoverParams, ReleaseParams, RenewParams, RequeueDeadParams,
    RequeueParams,
};
use leasehold_shared::{Actor, Progress, Store, StoreError, TaskError, TaskId};
use leasehold_tests::helpers::{agent, key, tt};
use leasehold_tests::{Backend, StoreDb, Val};
use proptest::prelude::*;
use proptest::test_runner::{
    Config as ProptestConfig, RngAlgorithm, TestCaseError, TestRng, TestRunner,
};
use serde_json::json;

/// Lease owners: two agents, and agent `a` restarted (same name, new per-start suffix).
const AGENTS: [&str; 3] = ["model-a#1", "model-b#1", "model-a#2"];
/// The task types; policies are set per type or globally.
const TYPES: [&str; 2] = ["model.a", "model.b"];
const MAX_TASKS: usize = 4;
const STEPS: usize = 30;
const DEFAULT_CASES: u32 = 24;
/// The run's seed unless `MODEL_SEED` names one (`MODEL_SEED=random`: from the clock). Chosen
/// so the default run meets every positive control below (4 did until PurgeDead joined the
/// operations, which changed every generated case).
const DEFAULT_SEED: u64 = 9;
/// Shrinking replays a case on fresh databases each time: bound it.
const MAX_SHRINK_ITERS: u32 = 400;
const LEASE_TTL: Duration = Duration::from_secs(30);
/// Recovery grace; expired leases are backdated well past it.
const GRACE: Duration = Duration::from_secs(5);
const EXPIRED_SECS_AGO: f64 = 60.0;
/// `MakeDue` backdates `available_at` this far: before anything else a case sets.
const DUE_SECS_AGO: f64 = 3600.0;
/// Real time between steps, so every step's `now()` is later than the last one's on both
/// backends (SQLite keeps milliseconds) and `available_at` orders as the model says.
const STEP_GAP: Duration = Duration::from_millis(2);
/// The retry policy every case sets globally (jitter 0: delays are exact). The cap is reached
/// at the second attempt (40 s × 3 > 100 s).
const RETRY_BASE: Duration = Duration::from_secs(40);
const RETRY_MULTIPLIER: f64 = 3.0;
const RETRY_MAX: Duration = Duration::from_secs(100);

fn retry_policy() -> RetryPolicy {
    RetryPolicy {
        base: RETRY_BASE,
        multiplier: RETRY_MULTIPLIER,
        max: RETRY_MAX,
        jitter: 0.0,
    }
}

/// Which owner a holder write claims to be.
#[derive(Debug, Clone, Copy)]
enum Who {
    /// The row's current owner (agent 0 when there is none).
    Holder,
    /// One of [`AGENTS`].
    Agent(usize),
}

/// How a holder ends an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Succeed,
    Partial,
    Fail { retryable: bool },
    Cancelled,
}

impl End {
    fn outcome_name(self) -> &'static str {
        match self {
            End::Succeed => "succeeded",
            End::Partial => "partially_succeeded",
            End::Fail { .. } => "failed",
            End::Cancelled => "cancelled",
        }
    }

    fn completion(self) -> Completion {
        match self {
            End::Succeed => Completion::Succeeded {
                result: Some(json!({"ok": true})),
            },
            End::Partial => Completion::PartiallySucceeded { result: None },
            End::Fail { retryable: true } => Completion::Failed {
                error: TaskError::retryable("flaky", "try again"),
            },
            End::Fail { retryable: false } => Completion::Failed {
                error: TaskError::permanent("broken", "never works"),
            },
            End::Cancelled => Completion::Cancelled,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum HolderOp {
    Renew,
    Progress,
    Complete(End),
    Release,
}

/// One step. `task` indexes the tasks created so far (modulo their count); `ty` and a
/// policy `scope` of `Some(ty)` index [`TYPES`] (`None`: the global row).
#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        ty: usize,
        priority: i16,
        max_attempts: i32,
        /// An idempotency key `key-N`.
        key: Option<u8>,
    },
    Claim {
        agent: usize,
        /// Bit 0: type a, bit 1: type b (never 0).
        types: u8,
        batch: u32,
    },
    Holder {
        task: usize,
        /// Pick among the leased tasks (when any are).
        leased: bool,
        who: Who,
        epoch_delta: i64,
        op: HolderOp,
    },
    Cancel {
        task: usize,
    },
    Requeue {
        task: usize,
    },
    RequeueDead {
        ty: Option<usize>,
        dry_run: bool,
    },
    /// Delete the dead tasks (of a type, or all), with their attempts; a dry run deletes none.
    PurgeDead {
        ty: Option<usize>,
        dry_run: bool,
    },
    Pause {
        scope: Option<usize>,
        paused: bool,
    },
    Limit {
        scope: Option<usize>,
        limit: Option<u32>,
    },
    /// Backdate the lease past expiry and grace (only a leased task has one).
    ExpireLease {
        task: usize,
    },
    Recover,
    /// Backdate `available_at` by an hour: a retry backoff has run out.
    MakeDue {
        task: usize,
        /// Pick among the tasks waiting for a retry (when any are).
        waiting: bool,
    },
    /// Backdate `deadline_at` into the past.
    PassDeadline {
        task: usize,
    },
    ExpireDeadlines,
}

fn end_strategy() -> impl Strategy<Value = End> {
    prop_oneof![
        3 => Just(End::Succeed),
        1 => Just(End::Partial),
        3 => any::<bool>().prop_map(|retryable| End::Fail { retryable }),
        1 => Just(End::Cancelled),
    ]
}

fn holder_strategy() -> impl Strategy<Value = Op> {
    let who = prop_oneof![4 => Just(Who::Holder), 1 => (0..AGENTS.len()).prop_map(Who::Agent)];
    let delta = prop_oneof![6 => Just(0i64), 1 => Just(-1i64), 1 => Just(1i64)];
    let op = prop_oneof![
        2 => Just(HolderOp::Renew),
        1 => Just(HolderOp::Progress),
        5 => end_strategy().prop_map(HolderOp::Complete),
        1 => Just(HolderOp::Release),
    ];
    let leased = prop_oneof![3 => Just(true), 1 => Just(false)];
    (0..MAX_TASKS, leased, who, delta, op).prop_map(|(task, leased, who, epoch_delta, op)| {
        Op::Holder {
            task,
            leased,
            who,
            epoch_delta,
            op,
        }
    })
}

fn enqueue_strategy() -> impl Strategy<Value = Op> {
    let key = prop_oneof![2 => Just(None), 1 => (0..3u8).prop_map(Some)];
    (0..TYPES.len(), 0..=1i16, 1..=3i32, key).prop_map(|(ty, priority, max_attempts, key)| {
        Op::Enqueue {
            ty,
            priority,
            max_attempts,
            key,
        }
    })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let task = 0..MAX_TASKS;
    let scope = prop_oneof![1 => Just(None), 2 => (0..TYPES.len()).prop_map(Some)];
    let limit = prop_oneof![2 => Just(None), 1 => Just(Some(0)), 2 => (1..=2u32).prop_map(Some)];
    prop_oneof![
        5 => enqueue_strategy(),
        10 => (0..AGENTS.len(), 1..=3u8, 1..=3u32)
            .prop_map(|(agent, types, batch)| Op::Claim { agent, types, batch }),
        9 => holder_strategy(),
        1 => task.clone().prop_map(|task| Op::Cancel { task }),
        3 => task.clone().prop_map(|task| Op::Requeue { task }),
        1 => (prop::option::of(0..TYPES.len()), any::<bool>())
            .prop_map(|(ty, dry_run)| Op::RequeueDead { ty, dry_run }),
        1 => (prop::option::of(0..TYPES.len()), any::<bool>())
            .prop_map(|(ty, dry_run)| Op::PurgeDead { ty, dry_run }),
        1 => (scope.clone(), prop_oneof![1 => Just(true), 2 => Just(false)])
            .prop_map(|(scope, paused)| Op::Pause { scope, paused }),
        1 => (scope, limit).prop_map(|(scope, limit)| Op::Limit { scope, limit }),
        3 => task.clone().prop_map(|task| Op::ExpireLease { task }),
        3 => Just(Op::Recover),
        2 => (task.clone(), any::<bool>())
            .prop_map(|(task, waiting)| Op::MakeDue { task, waiting }),
        1 => task.prop_map(|task| Op::PassDeadline { task }),
        1 => Just(Op::ExpireDeadlines),
    ]
}

/// A case: a first enqueue, then the steps.
fn case_strategy() -> impl Strategy<Value = (Op, Vec<Op>)> {
    (
        enqueue_strategy(),
        prop::collection::vec(op_strategy(), STEPS / 3..=STEPS),
    )
}

/// The types a claim asks for.
fn claim_types(mask: u8) -> Vec<usize> {
    (0..TYPES.len()).filter(|t| mask & (1 << t) != 0).collect()
}

/// What the model knows of one task.
#[derive(Debug, Clone)]
struct ModelTask {
    ty: usize,
    priority: i16,
    key: Option<u8>,
    status: TaskStatus,
    attempt: i64,
    max_attempts: i64,
    epoch: i64,
    owner: Option<String>,
    lease_expired: bool,
    due: bool,
    deadline_passed: bool,
    /// When `available_at` was last set: (0 = backdated by `MakeDue`, 1 = now, step).
    available: (u8, usize),
    /// `(epoch, agent, outcome)` of every attempt row.
    attempts: Vec<(i64, String, String)>,
}

/// A policy row as far as claims care.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ModelPolicy {
    paused: bool,
    limit: Option<u32>,
}

/// An outcome reduced to what the model can predict; tasks by creation order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Enqueued {
        task: usize,
        created: bool,
    },
    /// `(task, epoch, attempt)` of each task claimed, by task.
    Claimed(Vec<(usize, i64, i64)>),
    Renewed(Option<bool>),
    Progress(bool),
    Applied {
        status: TaskStatus,
        /// A retry: `available_at − updated_at` of the row, in ms.
        retry_delay_ms: Option<i64>,
    },
    Repeated(TaskStatus),
    Fenced,
    /// A release: given back (true), or not (false: fenced).
    Released(bool),
    /// A release of a lease this owner gave back already (a retry whose reply was lost).
    ReleaseRepeated,
    CancelDone,
    CancelRequested(String, i64),
    CancelAlready(String, i64),
    Refused(TaskAction),
    Requeued(TaskStatus),
    RequeuedDead(u64),
    /// Dead tasks purged (or that a dry run would purge).
    PurgedDead(u64),
    Policy(ModelPolicy),
    /// `(task, revoked epoch, owner, new status)`, by task.
    Recovered(Vec<(usize, i64, String, TaskStatus)>),
    Expired(Vec<usize>),
    Skipped,
}

/// One task row as compared: status, attempt, epoch, owner, lease set, attempt rows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowView {
    status: TaskStatus,
    attempt: i64,
    epoch: i64,
    owner: Option<String>,
    lease_set: bool,
    attempts: Vec<(i64, String, String)>,
}

/// Totals over a whole run: the positive control that every path was exercised.
#[derive(Debug, Default)]
struct Tally {
    steps: u64,
    accepted: u64,
    fenced: u64,
    repeated: u64,
    refused: u64,
    recovered: u64,
    deadline_expired: u64,
    claimed: u64,
    retries: u64,
    idempotent_hits: u64,
    dead_requeued: u64,
    dead_purged: u64,
}

impl Tally {
    fn count(&mut self, seen: &Seen) {
        self.steps += 1;
        match seen {
            Seen::Applied { retry_delay_ms, .. } => {
                self.accepted += 1;
                self.retries += u64::from(retry_delay_ms.is_some());
            }
            Seen::Released(true) | Seen::Progress(true) | Seen::Renewed(Some(_)) => {
                self.accepted += 1;
            }
            Seen::Fenced | Seen::Released(false) | Seen::Progress(false) | Seen::Renewed(None) => {
                self.fenced += 1;
            }
            Seen::Repeated(_) | Seen::ReleaseRepeated => self.repeated += 1,
            Seen::Refused(_) => self.refused += 1,
            Seen::Recovered(r) => self.recovered += r.len() as u64,
            Seen::Expired(e) => self.deadline_expired += e.len() as u64,
            Seen::Claimed(c) => self.claimed += c.len() as u64,
            Seen::Enqueued { created: false, .. } => self.idempotent_hits += 1,
            Seen::RequeuedDead(n) => self.dead_requeued += n,
            Seen::PurgedDead(n) => self.dead_purged += n,
            _ => {}
        }
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!("{what}: {e:#}"))
}

/// `from --action-->` by the shared table; the model's own decision must be a legal move.
fn table(from: TaskStatus, action: TaskAction) -> Result<TaskStatus, TestCaseError> {
    from.apply(action).map_err(|e| {
        TestCaseError::fail(format!(
            "the model made a move the state table refuses: {e}"
        ))
    })
}

#[derive(Debug, Default)]
struct Model {
    tasks: Vec<ModelTask>,
    global: ModelPolicy,
    types: [ModelPolicy; TYPES.len()],
    /// The step being applied (orders `available_at`).
    step: usize,
}

impl Model {
    /// The task a step names, if any exist.
    fn task(&self, task: usize) -> Option<usize> {
        (!self.tasks.is_empty()).then(|| task % self.tasks.len())
    }

    /// The task a step names among those `wanted` (all of them when none is), if any exist.
    fn pick(&self, task: usize, wanted: impl Fn(&ModelTask) -> bool) -> Option<usize> {
        let among: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| wanted(&self.tasks[i]))
            .collect();
        if among.is_empty() {
            self.task(task)
        } else {
            Some(among[task % among.len()])
        }
    }

    /// The task a holder write names.
    fn holder_task(&self, task: usize, leased: bool) -> Option<usize> {
        self.pick(task, |t| leased && t.status.is_leased())
    }

    /// The task a `MakeDue` names.
    fn due_task(&self, task: usize, waiting: bool) -> Option<usize> {
        self.pick(task, |t| waiting && t.status == TaskStatus::RetryWait)
    }

    /// The task an `ExpireLease` names.
    fn expire_task(&self, task: usize) -> Option<usize> {
        self.pick(task, |t| t.status.is_leased())
    }

    /// The key a holder write carries.
    fn holder_key(&self, i: usize, who: Who, delta: i64) -> (String, i64) {
        let t = &self.tasks[i];
        let owner = match who {
            Who::Holder => t.owner.clone().unwrap_or_else(|| AGENTS[0].to_string()),
            Who::Agent(a) => AGENTS[a].to_string(),
        };
        (owner, (t.epoch + delta).max(0))
    }

    fn holds(&self, i: usize, owner: &str, epoch: i64) -> bool {
        let t = &self.tasks[i];
        t.status.is_leased() && t.owner.as_deref() == Some(owner) && t.epoch == epoch
    }

    /// An enqueue that returns an existing task, or `None` for a new one.
    fn existing(&self, key: Option<u8>) -> Option<usize> {
        key.and_then(|k| self.tasks.iter().position(|t| t.key == Some(k)))
    }

    fn enqueue(&mut self, ty: usize, priority: i16, max_attempts: i32, key: Option<u8>) -> Seen {
        if let Some(task) = self.existing(key) {
            return Seen::Enqueued {
                task,
                created: false,
            };
        }
        if self.tasks.len() >= MAX_TASKS {
            return Seen::Skipped;
        }
        self.tasks.push(ModelTask {
            ty,
            priority,
            key,
            status: TaskStatus::Queued,
            attempt: 0,
            max_attempts: i64::from(max_attempts),
            epoch: 0,
            owner: None,
            lease_expired: false,
            due: true,
            deadline_passed: false,
            available: (1, self.step),
            attempts: Vec::new(),
        });
        Seen::Enqueued {
            task: self.tasks.len() - 1,
            created: true,
        }
    }

    /// DESIGN §4 and §5: the due tasks of the open types in claim order, at most `batch`,
    /// then cut by each type's and the global concurrency limit.
    fn claim(&mut self, agent: usize, types: &[usize], batch: u32) -> Result<Seen, TestCaseError> {
        if self.global.paused {
            return Ok(Seen::Claimed(Vec::new()));
        }
        let running = |ty: Option<usize>| {
            self.tasks
                .iter()
                .filter(|t| t.status.is_leased() && ty.is_none_or(|ty| t.ty == ty))
                .count()
        };
        let batch = batch as usize;
        let global_cap = match self.global.limit {
            None => batch,
            Some(limit) => batch.min((limit as usize).saturating_sub(running(None))),
        };
        let mut type_cap: Vec<(usize, Option<usize>)> = Vec::new();
        for &ty in types {
            let policy = self.types[ty];
            if policy.paused {
                continue;
            }
            let cap = policy
                .limit
                .map(|limit| (limit as usize).saturating_sub(running(Some(ty))));
            if cap != Some(0) {
                type_cap.push((ty, cap));
            }
        }
        let mut candidates: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| {
                let t = &self.tasks[i];
                t.status.is_claimable()
                    && t.due
                    && !t.deadline_passed
                    && type_cap.iter().any(|(ty, _)| *ty == t.ty)
            })
            .collect();
        candidates.sort_by_key(|&i| (Reverse(self.tasks[i].priority), self.tasks[i].available, i));
        candidates.truncate(batch);
        let mut chosen = Vec::new();
        for i in candidates {
            if chosen.len() >= global_cap {
                break;
            }
            let Some((_, cap)) = type_cap.iter_mut().find(|(ty, _)| *ty == self.tasks[i].ty) else {
                continue;
            };
            match cap {
                Some(0) => continue,
                Some(left) => *left -= 1,
                None => {}
            }
            chosen.push(i);
        }
        chosen.sort_unstable();
        let mut out = Vec::new();
        for i in chosen {
            let t = &mut self.tasks[i];
            t.status = table(t.status, TaskAction::Claim)?;
            t.attempt += 1;
            t.epoch += 1;
            t.owner = Some(AGENTS[agent].to_string());
            t.lease_expired = false;
            out.push((i, t.epoch, t.attempt));
        }
        Ok(Seen::Claimed(out))
    }

    fn complete(
        &mut self,
        i: usize,
        owner: &str,
        epoch: i64,
        end: End,
    ) -> Result<Seen, TestCaseError> {
        let outcome = end.outcome_name();
        if !self.holds(i, owner, epoch) {
            let t = &self.tasks[i];
            let recorded = t
                .attempts
                .iter()
                .any(|(e, a, o)| *e == epoch && a == owner && o == outcome);
            return Ok(if recorded {
                Seen::Repeated(t.status)
            } else {
                Seen::Fenced
            });
        }
        let t = &mut self.tasks[i];
        let action = match end {
            End::Succeed => TaskAction::Succeed,
            End::Partial => TaskAction::PartiallySucceed,
            End::Cancelled => TaskAction::AckCancel,
            End::Fail { retryable } => {
                if retryable && t.attempt < t.max_attempts && !t.deadline_passed {
                    TaskAction::FailRetry
                } else {
                    TaskAction::FailDead
                }
            }
        };
        t.status = table(t.status, action)?;
        t.lease_expired = false;
        t.attempts
            .push((epoch, owner.to_string(), outcome.to_string()));
        let retry_delay_ms = (t.status == TaskStatus::RetryWait).then(|| {
            let attempt = i32::try_from(t.attempt).unwrap();
            retry_policy().nominal_delay(attempt).as_millis() as i64
        });
        // A retry waits its backoff (longer than a case) until MakeDue.
        t.due = retry_delay_ms.is_none();
        Ok(Seen::Applied {
            status: t.status,
            retry_delay_ms,
        })
    }

    fn holder(
        &mut self,
        i: usize,
        who: Who,
        delta: i64,
        op: HolderOp,
    ) -> Result<Seen, TestCaseError> {
        let (owner, epoch) = self.holder_key(i, who, delta);
        let held = self.holds(i, &owner, epoch);
        match op {
            HolderOp::Renew => {
                let t = &mut self.tasks[i];
                if held {
                    t.lease_expired = false;
                    Ok(Seen::Renewed(Some(t.status == TaskStatus::CancelRequested)))
                } else {
                    Ok(Seen::Renewed(None))
                }
            }
            HolderOp::Progress => Ok(Seen::Progress(held)),
            HolderOp::Complete(end) => self.complete(i, &owner, epoch, end),
            HolderOp::Release => {
                if !held {
                    // The holder's own release (or cancelled end) of this epoch is on record.
                    let t = &self.tasks[i];
                    let done = t.attempts.iter().any(|(e, a, o)| {
                        *e == epoch && *a == owner && (o == "released" || o == "cancelled")
                    });
                    return Ok(if done {
                        Seen::ReleaseRepeated
                    } else {
                        Seen::Released(false)
                    });
                }
                let step = self.step;
                let t = &mut self.tasks[i];
                let outcome = if t.status == TaskStatus::CancelRequested {
                    "cancelled"
                } else {
                    // A graceful release is not the task's failure: the attempt is refunded.
                    t.attempt = (t.attempt - 1).max(0);
                    "released"
                };
                t.status = table(t.status, TaskAction::Release)?;
                t.lease_expired = false;
                t.due = true;
                t.available = (1, step);
                t.attempts.push((epoch, owner, outcome.to_string()));
                Ok(Seen::Released(true))
            }
        }
    }

    fn cancel(&mut self, i: usize) -> Result<Seen, TestCaseError> {
        let t = &mut self.tasks[i];
        let owner = t.owner.clone().unwrap_or_default();
        Ok(match t.status {
            TaskStatus::CancelRequested => Seen::CancelAlready(owner, t.epoch),
            s if s.is_terminal() => {
                prop_assert!(s.apply(TaskAction::RequestCancel).is_err());
                Seen::Refused(TaskAction::RequestCancel)
            }
            s => {
                t.status = table(s, TaskAction::RequestCancel)?;
                if t.status == TaskStatus::CancelRequested {
                    Seen::CancelRequested(owner, t.epoch)
                } else {
                    Seen::CancelDone
                }
            }
        })
    }

    /// Requeues task `i` (already known to be terminal).
    fn requeue_one(&mut self, i: usize) -> Result<(), TestCaseError> {
        let step = self.step;
        let t = &mut self.tasks[i];
        t.status = table(t.status, TaskAction::Requeue)?;
        t.attempt = 0;
        t.due = true;
        t.available = (1, step);
        t.lease_expired = false;
        Ok(())
    }

    fn requeue(&mut self, i: usize) -> Result<Seen, TestCaseError> {
        let previous = self.tasks[i].status;
        if !previous.is_terminal() {
            prop_assert!(previous.apply(TaskAction::Requeue).is_err());
            return Ok(Seen::Refused(TaskAction::Requeue));
        }
        self.requeue_one(i)?;
        Ok(Seen::Requeued(previous))
    }

    fn requeue_dead(&mut self, ty: Option<usize>, dry_run: bool) -> Result<Seen, TestCaseError> {
        let dead: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| {
                let t = &self.tasks[i];
                t.status == TaskStatus::Dead && ty.is_none_or(|ty| t.ty == ty)
            })
            .collect();
        if !dry_run {
            for &i in &dead {
                self.requeue_one(i)?;
            }
        }
        Ok(Seen::RequeuedDead(dead.len() as u64))
    }

    /// The dead tasks of `ty` (or of every type) are deleted: they leave the model, so the
    /// tasks after them move up one place, as they leave the sides' id lists.
    fn purge_dead(&mut self, ty: Option<usize>, dry_run: bool) -> Seen {
        let dead = |t: &ModelTask| t.status == TaskStatus::Dead && ty.is_none_or(|ty| t.ty == ty);
        let n = self.tasks.iter().filter(|t| dead(t)).count() as u64;
        if !dry_run {
            self.tasks.retain(|t| !dead(t));
        }
        Seen::PurgedDead(n)
    }

    fn policy(&mut self, scope: Option<usize>) -> &mut ModelPolicy {
        match scope {
            None => &mut self.global,
            Some(ty) => &mut self.types[ty],
        }
    }

    fn recover(&mut self) -> Result<Seen, TestCaseError> {
        let step = self.step;
        let mut out = Vec::new();
        for (i, t) in self.tasks.iter_mut().enumerate() {
            if !(t.status.is_leased() && t.lease_expired) {
                continue;
            }
            let owner = t.owner.clone().unwrap_or_default();
            let revoked = t.epoch;
            let action = if t.attempt >= t.max_attempts {
                TaskAction::RecoverDead
            } else {
                TaskAction::RecoverRetry
            };
            let next = table(t.status, action)?;
            // A task that will run again gets a new epoch now, fencing the old holder, and is
            // claimable at once (a lost lease is the agent's failure, not the task's).
            if next == TaskStatus::RetryWait {
                t.epoch += 1;
            }
            t.status = next;
            t.lease_expired = false;
            t.due = true;
            t.available = (1, step);
            t.attempts
                .push((revoked, owner.clone(), "lease_expired".into()));
            out.push((i, revoked, owner, next));
        }
        Ok(Seen::Recovered(out))
    }

    fn expire_deadlines(&mut self) -> Result<Seen, TestCaseError> {
        let mut out = Vec::new();
        for (i, t) in self.tasks.iter_mut().enumerate() {
            if t.status.is_claimable() && t.deadline_passed {
                t.status = table(t.status, TaskAction::ExpireDeadline)?;
                out.push(i);
            }
        }
        Ok(Seen::Expired(out))
    }

    /// Applies `op` to the model.
    fn step(&mut self, op: &Op) -> Result<Seen, TestCaseError> {
        if let Op::Enqueue {
            ty,
            priority,
            max_attempts,
            key,
        } = *op
        {
            return Ok(self.enqueue(ty, priority, max_attempts, key));
        }
        let task = |task: usize| self.task(task);
        match *op {
            Op::Enqueue { .. } => unreachable!("handled above"),
            Op::Claim {
                agent,
                types,
                batch,
            } => self.claim(agent, &claim_types(types), batch),
            Op::Holder {
                task: n,
                leased,
                who,
                epoch_delta,
                op,
            } => match self.holder_task(n, leased) {
                Some(i) => self.holder(i, who, epoch_delta, op),
                None => Ok(Seen::Skipped),
            },
            Op::Cancel { task: n } => match task(n) {
                Some(i) => self.cancel(i),
                None => Ok(Seen::Skipped),
            },
            Op::Requeue { task: n } => match task(n) {
                Some(i) => self.requeue(i),
                None => Ok(Seen::Skipped),
            },
            Op::RequeueDead { ty, dry_run } => self.requeue_dead(ty, dry_run),
            Op::PurgeDead { ty, dry_run } => Ok(self.purge_dead(ty, dry_run)),
            Op::Pause { scope, paused } => {
                let p = self.policy(scope);
                p.paused = paused;
                Ok(Seen::Policy(*p))
            }
            Op::Limit { scope, limit } => {
                let p = self.policy(scope);
                p.limit = limit;
                Ok(Seen::Policy(*p))
            }
            Op::ExpireLease { task: n } => {
                if let Some(i) = self.expire_task(n) {
                    let t = &mut self.tasks[i];
                    t.lease_expired = t.status.is_leased();
                }
                Ok(Seen::Skipped)
            }
            Op::Recover => self.recover(),
            Op::MakeDue { task: n, waiting } => {
                if let Some(i) = self.due_task(n, waiting) {
                    let step = self.step;
                    let t = &mut self.tasks[i];
                    t.due = true;
                    t.available = (0, step);
                }
                Ok(Seen::Skipped)
            }
            Op::PassDeadline { task: n } => {
                if let Some(i) = task(n) {
                    self.tasks[i].deadline_passed = true;
                }
                Ok(Seen::Skipped)
            }
            Op::ExpireDeadlines => self.expire_deadlines(),
        }
    }

    fn rows(&self) -> Vec<RowView> {
        self.tasks
            .iter()
            .map(|t| {
                let mut attempts = t.attempts.clone();
                attempts.sort_by_key(|a| a.0);
                RowView {
                    status: t.status,
                    attempt: t.attempt,
                    epoch: t.epoch,
                    owner: t.owner.clone(),
                    lease_set: t.status.is_leased(),
                    attempts,
                }
            })
            .collect()
    }
}

/// One backend under test: a fresh database and the ids of the tasks it created, in order.
struct Side {
    db: StoreDb,
    ids: Vec<i64>,
}

impl Side {
    fn backend(&self) -> Backend {
        self.db.backend()
    }

    /// The creation index of a task id this store returned.
    fn index(&self, id: TaskId) -> Result<usize, TestCaseError> {
        self.ids.iter().position(|&x| x == id.0).ok_or_else(|| {
            TestCaseError::fail(format!("{}: unknown task id {}", self.backend(), id.0))
        })
    }

    async fn policy_set(
        &self,
        scope: Option<usize>,
        patch: PolicyPatch,
    ) -> Result<Policy, TestCaseError> {
        let scope = match scope {
            None => PolicyScope::Global,
            Some(ty) => PolicyScope::Type(tt(TYPES[ty])),
        };
        self.db
            .store()
            .policy_set(PolicySetParams {
                scope,
                patch,
                actor: Actor::operator("model-op"),
            })
            .await
            .map_err(|e| fail("policy set", e))
    }

    /// Applies `op` to this store; `model` is the state before the step (for holder keys).
    async fn step(&mut self, model: &Model, op: &Op) -> Result<Seen, TestCaseError> {
        let store = self.db.store();
        let store: &dyn Store = &*store;
        let task = |n: usize| model.task(n);
        Ok(match *op {
            Op::Enqueue {
                ty,
                priority,
                max_attempts,
                key,
            } => {
                if model.existing(key).is_none() && model.tasks.len() >= MAX_TASKS {
                    return Ok(Seen::Skipped);
                }
                let mut new = NewTask::new(tt(TYPES[ty]), json!({"n": model.tasks.len()}))
                    .with_priority(priority)
                    .with_max_attempts(max_attempts);
                new.idempotency_key = key.map(|k| format!("key-{k}"));
                let done = store
                    .task_enqueue(new)
                    .await
                    .map_err(|e| fail("enqueue", e))?;
                if done.created {
                    self.ids.push(done.id.0);
                }
                Seen::Enqueued {
                    task: self.index(done.id)?,
                    created: done.created,
                }
            }
            Op::Claim {
                agent: a,
                types,
                batch,
            } => {
                let claimed = store
                    .task_claim(ClaimParams {
                        owner: agent(AGENTS[a]),
                        task_types: claim_types(types).iter().map(|&t| tt(TYPES[t])).collect(),
                        batch,
                        lease_ttl: LEASE_TTL,
                    })
                    .await
                    .map_err(|e| fail("claim", e))?;
                let mut out = Vec::new();
                for c in &claimed.tasks {
                    out.push((self.index(c.id)?, c.lease_epoch.0, i64::from(c.attempt)));
                }
                out.sort_unstable();
                Seen::Claimed(out)
            }
            Op::Holder {
                task: n,
                leased,
                who,
                epoch_delta,
                op,
            } => {
                let Some(i) = model.holder_task(n, leased) else {
                    return Ok(Seen::Skipped);
                };
                let (owner, epoch) = model.holder_key(i, who, epoch_delta);
                let lease = key(self.ids[i], &owner, epoch);
                self.holder(store, lease, op).await?
            }
            Op::Cancel { task: n } => {
                let Some(i) = task(n) else {
                    return Ok(Seen::Skipped);
                };
                match store
                    .task_cancel(CancelParams {
                        id: TaskId(self.ids[i]),
                        actor: Actor::operator("model-op"),
                    })
                    .await
                {
                    Ok(CancelOutcome::Cancelled) => Seen::CancelDone,
                    Ok(CancelOutcome::Requested { owner, epoch }) => {
                        Seen::CancelRequested(owner.to_string(), epoch.0)
                    }
                    Ok(CancelOutcome::AlreadyRequested { owner, epoch }) => {
                        Seen::CancelAlready(owner.to_string(), epoch.0)
                    }
                    Err(StoreError::Transition { source, .. }) => Seen::Refused(source.action),
                    Err(e) => return Err(fail("cancel", e)),
                }
            }
            Op::Requeue { task: n } => {
                let Some(i) = task(n) else {
                    return Ok(Seen::Skipped);
                };
                match store
                    .task_requeue(RequeueParams {
                        id: TaskId(self.ids[i]),
                        actor: Actor::operator("model-op"),
                    })
                    .await
                {
                    Ok(done) => Seen::Requeued(done.previous),
                    Err(StoreError::Transition { source, .. }) => Seen::Refused(source.action),
                    Err(e) => return Err(fail("requeue", e)),
                }
            }
            Op::RequeueDead { ty, dry_run } => {
                let n = store
                    .task_requeue_dead(RequeueDeadParams {
                        filter: DeadFilter {
                            task_type: ty.map(|t| tt(TYPES[t])),
                            ..DeadFilter::default()
                        },
                        dry_run,
                        page: DeadIdsPage::default(),
                        actor: Actor::operator("model-op"),
                    })
                    .await
                    .map_err(|e| fail("requeue dead", e))?
                    .count;
                Seen::RequeuedDead(n)
            }
            Op::PurgeDead { ty, dry_run } => {
                let n = store
                    .task_purge_dead(PurgeDeadParams {
                        filter: DeadFilter {
                            task_type: ty.map(|t| tt(TYPES[t])),
                            ..DeadFilter::default()
                        },
                        dry_run,
                        page: DeadIdsPage::default(),
                        actor: Actor::operator("model-op"),
                    })
                    .await
                    .map_err(|e| fail("purge dead", e))?
                    .count;
                // The tasks the store deleted leave this side's list, found by reading each
                // back (not by asking the model).
                let mut kept = Vec::new();
                for &id in &self.ids {
                    let found = store
                        .task_get(TaskId(id))
                        .await
                        .map_err(|e| fail("reading a task after a purge", e))?;
                    if found.is_some() {
                        kept.push(id);
                    }
                }
                self.ids = kept;
                Seen::PurgedDead(n)
            }
            Op::Pause { scope, paused } => {
                let patch = PolicyPatch {
                    paused: Some(paused),
                    ..PolicyPatch::default()
                };
                let p = self.policy_set(scope, patch).await?;
                Seen::Policy(ModelPolicy {
                    paused: p.paused,
                    limit: p.max_concurrency,
                })
            }
            Op::Limit { scope, limit } => {
                let patch = PolicyPatch {
                    max_concurrency: Some(limit),
                    ..PolicyPatch::default()
                };
                let p = self.policy_set(scope, patch).await?;
                Seen::Policy(ModelPolicy {
                    paused: p.paused,
                    limit: p.max_concurrency,
                })
            }
            Op::ExpireLease { task: n } => {
                if let Some(i) = model.expire_task(n)
                    && model.tasks[i].status.is_leased()
                {
                    self.db
                        .backdate_lease(self.ids[i], EXPIRED_SECS_AGO)
                        .await
                        .map_err(|e| fail("backdating a lease", e))?;
                }
                Seen::Skipped
            }
            Op::Recover => {
                let recovered = store
                    .lease_recover_expired(RecoverParams {
                        grace: GRACE,
                        limit: 1000,
                        clock_bound: None,
                    })
                    .await
                    .map_err(|e| fail("recover", e))?;
                let mut out = Vec::new();
                for r in recovered {
                    out.push((
                        self.index(r.id)?,
                        r.revoked_epoch.0,
                        r.owner.to_string(),
                        r.status,
                    ));
                }
                out.sort();
                Seen::Recovered(out)
            }
            Op::MakeDue { task: n, waiting } => {
                if let Some(i) = model.due_task(n, waiting) {
                    self.db
                        .update_task(self.ids[i], &[("available_at", Val::At(-DUE_SECS_AGO))])
                        .await
                        .map_err(|e| fail("making a task due", e))?;
                }
                Seen::Skipped
            }
            Op::PassDeadline { task: n } => {
                if let Some(i) = task(n) {
                    self.db
                        .update_task(self.ids[i], &[("deadline_at", Val::At(-1.0))])
                        .await
                        .map_err(|e| fail("passing a deadline", e))?;
                }
                Seen::Skipped
            }
            Op::ExpireDeadlines => {
                let expired = store
                    .task_expire_deadlines(ExpireDeadlinesParams { limit: 1000 })
                    .await
                    .map_err(|e| fail("expire deadlines", e))?;
                let mut out = Vec::new();
                for id in expired {
                    out.push(self.index(id)?);
                }
                out.sort_unstable();
                Seen::Expired(out)
            }
        })
    }

    async fn holder(
        &self,
        store: &dyn Store,
        lease: leasehold_shared::LeaseKey,
        op: HolderOp,
    ) -> Result<Seen, TestCaseError> {
        Ok(match op {
            HolderOp::Renew => {
                let out = store
                    .lease_renew_many(RenewParams {
                        owner: lease.owner.clone(),
                        leases: vec![(lease.id, lease.epoch)],
                        lease_ttl: LEASE_TTL,
                        alive_for: None,
                    })
                    .await
                    .map_err(|e| fail("renew", e))?;
                prop_assert_eq!(out.renewed.len() + out.lost.len(), 1);
                Seen::Renewed(out.renewed.first().map(|r| r.cancel_requested))
            }
            HolderOp::Progress => {
                let out = store
                    .task_progress(ProgressParams {
                        key: lease,
                        progress: Progress {
                            total: 3,
                            processed: 1,
                            ..Progress::default()
                        },
                    })
                    .await
                    .map_err(|e| fail("progress", e))?;
                Seen::Progress(out == HolderWrite::Held)
            }
            HolderOp::Complete(end) => {
                let id = lease.id.0;
                match store
                    .task_complete(CompleteParams {
                        key: lease,
                        completion: end.completion(),
                    })
                    .await
                    .map_err(|e| fail("complete", e))?
                {
                    CompleteOutcome::Applied { status, retry_at } => {
                        let retry_delay_ms = match retry_at {
                            None => None,
                            Some(at) => Some(self.retry_delay_ms(id, at).await?),
                        };
                        Seen::Applied {
                            status,
                            retry_delay_ms,
                        }
                    }
                    CompleteOutcome::Repeated { status } => Seen::Repeated(status),
                    CompleteOutcome::Fenced => Seen::Fenced,
                }
            }
            HolderOp::Release => {
                let out = store
                    .lease_release_many(ReleaseParams {
                        owner: lease.owner.clone(),
                        leases: vec![(lease.id, lease.epoch)],
                    })
                    .await
                    .map_err(|e| fail("release", e))?;
                prop_assert_eq!(
                    out.released.len() + out.repeated.len() + out.fenced.len(),
                    1
                );
                if out.repeated.is_empty() {
                    Seen::Released(!out.released.is_empty())
                } else {
                    Seen::ReleaseRepeated
                }
            }
        })
    }

    /// The backoff a retry got: the row's `available_at` (which must be the reported
    /// `retry_at`) less its `updated_at` (the completion's `now()`).
    async fn retry_delay_ms(
        &self,
        id: i64,
        retry_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<i64, TestCaseError> {
        let available = self
            .db
            .task_time(id, "available_at")
            .await
            .map_err(|e| fail("reading available_at", e))?;
        let updated = self
            .db
            .task_time(id, "updated_at")
            .await
            .map_err(|e| fail("reading updated_at", e))?;
        prop_assert_eq!(
            available,
            retry_at,
            "{}: available_at of a retry is not the retry_at reported",
            self.backend()
        );
        Ok((available - updated).num_milliseconds())
    }

    /// Every task row this store created, in creation order.
    async fn rows(&self) -> Result<Vec<RowView>, TestCaseError> {
        let mut out = Vec::new();
        for &id in &self.ids {
            let row = self
                .db
                .task_row(id)
                .await
                .map_err(|e| fail("reading a task", e))?;
            let status: TaskStatus = row["status"]
                .as_str()
                .unwrap_or_default()
                .parse()
                .map_err(|e| fail("status", e))?;
            let attempts = self
                .db
                .attempt_rows(id)
                .await
                .map_err(|e| fail("reading attempts", e))?;
            out.push(RowView {
                status,
                attempt: row["attempt"].as_i64().unwrap_or(-1),
                epoch: row["lease_epoch"].as_i64().unwrap_or(-1),
                owner: row["lease_owner"].as_str().map(str::to_string),
                lease_set: !row["lease_until"].is_null(),
                attempts,
            });
        }
        Ok(out)
    }
}

/// Fresh databases of every backend, with the case's retry policy set globally.
async fn fresh_sides() -> Result<Vec<Side>, TestCaseError> {
    let mut sides = Vec::new();
    for backend in Backend::ALL {
        let db = StoreDb::new(backend)
            .await
            .map_err(|e| fail(&format!("creating the {backend} database"), e))?;
        let side = Side {
            db,
            ids: Vec::new(),
        };
        let retry = retry_policy();
        side.policy_set(
            None,
            PolicyPatch {
                retry_base: Some(Some(retry.base)),
                retry_multiplier: Some(Some(retry.multiplier)),
                retry_max: Some(Some(retry.max)),
                retry_jitter: Some(Some(retry.jitter)),
                ..PolicyPatch::default()
            },
        )
        .await?;
        sides.push(side);
    }
    Ok(sides)
}

async fn run_steps(
    sides: &mut [Side],
    first: &Op,
    ops: &[Op],
    tally: &RefCell<Tally>,
) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    for (step, op) in std::iter::once(first).chain(ops).enumerate() {
        tokio::time::sleep(STEP_GAP).await;
        model.step = step;
        let mut seen = Vec::new();
        for side in sides.iter_mut() {
            seen.push((side.backend(), side.step(&model, op).await?));
        }
        let want = model.step(op)?;
        let (first_backend, got) = &seen[0];
        for (backend, other) in &seen[1..] {
            prop_assert_eq!(
                got,
                other,
                "the backends disagree on the outcome of step {} {:?} ({} left, {} right)",
                step,
                op,
                first_backend,
                backend
            );
        }
        prop_assert_eq!(
            got,
            &want,
            "outcome of step {} {:?} (store left, model right)",
            step,
            op
        );
        tally.borrow_mut().count(got);
        if std::env::var_os("MODEL_TRACE").is_some() {
            eprintln!("step {step}: {op:?} -> {got:?}");
        }
        let want_rows = model.rows();
        let first_rows = sides[0].rows().await?;
        for side in &sides[1..] {
            let rows = side.rows().await?;
            prop_assert_eq!(
                &first_rows,
                &rows,
                "the backends' tasks disagree after step {} {:?} ({} left, {} right)",
                step,
                op,
                sides[0].backend(),
                side.backend()
            );
        }
        prop_assert_eq!(
            &first_rows,
            &want_rows,
            "tasks after step {} {:?} (stores left, model right)",
            step,
            op
        );
    }
    Ok(())
}

async fn run_case(first: &Op, ops: &[Op], tally: &RefCell<Tally>) -> Result<(), TestCaseError> {
    let mut sides = fresh_sides().await?;
    let result = run_steps(&mut sides, first, ops, tally).await;
    for side in sides {
        side.db
            .drop_db()
            .await
            .map_err(|e| fail("dropping a test database", e))?;
    }
    result
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn stores_match_each_other_and_the_model() {
    let cases = env_u64("MODEL_CASES").map_or(DEFAULT_CASES, |n| n as u32);
    let seed = match std::env::var("MODEL_SEED").ok().as_deref() {
        None => DEFAULT_SEED,
        Some("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
        Some(n) => n.parse().expect("MODEL_SEED is a number or `random`"),
    };
    eprintln!("store_model: {cases} cases, MODEL_SEED={seed}");
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tally = RefCell::new(Tally::default());
    let mut runner = TestRunner::new_with_rng(
        ProptestConfig {
            cases,
            failure_persistence: None,
            max_shrink_iters: MAX_SHRINK_ITERS,
            ..ProptestConfig::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let result = runner.run(&case_strategy(), |(first, ops)| {
        rt.block_on(run_case(&first, &ops, &tally))
    });
    if let Err(e) = result {
        panic!("the stores and the model disagree (replay with MODEL_SEED={seed}): {e}");
    }
    let tally = tally.into_inner();
    eprintln!("store_model: {tally:?}");
    // Positive control: the run exercised claims, accepted and fenced holder writes and
    // refusals, not only no-ops. The default run (a fixed seed, so this cannot flake) also
    // repeated completions, retried, recovered leases, expired deadlines, hit idempotency keys
    // and requeued dead tasks.
    assert!(tally.claimed > 0 && tally.accepted > 0, "{tally:?}");
    assert!(tally.fenced > 0 && tally.refused > 0, "{tally:?}");
    if seed == DEFAULT_SEED && cases >= DEFAULT_CASES {
        assert!(tally.repeated > 0 && tally.retries > 0, "{tally:?}");
        assert!(
            tally.recovered > 0 && tally.deadline_expired > 0,
            "{tally:?}"
        );
        assert!(
            tally.idempotent_hits > 0 && tally.dead_requeued > 0,
            "{tally:?}"
        );
        assert!(tally.dead_purged > 0, "{tally:?}");
    }
}
