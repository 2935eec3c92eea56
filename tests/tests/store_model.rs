#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The task state machine against a model (issue 18): random sequences of store operations —
//! enqueue, claim, renew, progress, complete (ok, partial, failed retryable or not, cancelled),
//! release, operator cancel and requeue, lease expiry (backdated in SQL) then recovery,
//! retry backoff made due, deadline passing then expiry — applied to a REAL store (PostgreSQL
//! and SQLite) and to a small pure model of DESIGN §3 and §4, written here from the contract.
//!
//! ```text
//!   Vec<Op> ──▶ store (real SQL) ──▶ outcome ─┐
//!        └────▶ model (this file) ─▶ outcome ─┴─▶ equal? then every task row:
//!                                                 status, attempt, epoch, owner, lease set,
//!                                                 and its task_attempts rows
//! ```
//! Every transition the model makes is also checked against `TaskStatus::apply` (the shared
//! table), so the model, the table and both stores must agree. Holder writes carry the row's
//! key or a stale one (another agent, the same agent name after a restart, epoch ± 1), so both
//! accepted and fenced outcomes are compared. proptest shrinks a failure to a minimal
//! sequence of operations.
//!
//! Runs: `cargo test -p leasehold-tests --test store_model` (PostgreSQL from DATABASE_URL or a
//! private server; `-- sqlite` for the SQLite half). `MODEL_CASES=N` changes the case count.

use std::cell::RefCell;
use std::time::Duration;

use leasehold_shared::domain::{TaskAction, TaskStatus};
use leasehold_shared::store::{
    CancelOutcome, CancelParams, ClaimParams, CompleteOutcome, CompleteParams, Completion,
    ExpireDeadlinesParams, HolderWrite, NewTask, ProgressParams, RecoverParams, ReleaseParams,
    RenewParams, RequeueParams,
};
use leasehold_shared::{Actor, Progress, Store, StoreError, TaskError, TaskId};
use leasehold_tests::helpers::{agent, key, tt};
use leasehold_tests::{Backend, StoreDb, Val};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::json;

/// Lease owners: two agents, and agent `a` restarted (same name, new per-start suffix).
const AGENTS: [&str; 3] = ["model-a#1", "model-b#1", "model-a#2"];
const MAX_TASKS: usize = 3;
const STEPS: usize = 40;
const DEFAULT_CASES: u32 = 100;
const LEASE_TTL: Duration = Duration::from_secs(30);
/// Recovery grace; expired leases are backdated well past it.
const GRACE: Duration = Duration::from_secs(5);
const EXPIRED_SECS_AGO: f64 = 60.0;

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

/// One step. `task` indexes the tasks enqueued so far (modulo their count).
#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        max_attempts: i32,
    },
    Claim {
        task: usize,
        agent: usize,
    },
    Holder {
        task: usize,
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
    /// Backdate the lease past expiry and grace (only a leased task has one).
    ExpireLease {
        task: usize,
    },
    Recover,
    /// Backdate `available_at`: a retry backoff has run out.
    MakeDue {
        task: usize,
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
    (0..MAX_TASKS, who, delta, op).prop_map(|(task, who, epoch_delta, op)| Op::Holder {
        task,
        who,
        epoch_delta,
        op,
    })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let task = 0..MAX_TASKS;
    prop_oneof![
        1 => (1..=3i32).prop_map(|max_attempts| Op::Enqueue { max_attempts }),
        6 => (task.clone(), 0..AGENTS.len()).prop_map(|(task, agent)| Op::Claim { task, agent }),
        8 => holder_strategy(),
        1 => task.clone().prop_map(|task| Op::Cancel { task }),
        3 => task.clone().prop_map(|task| Op::Requeue { task }),
        2 => task.clone().prop_map(|task| Op::ExpireLease { task }),
        2 => Just(Op::Recover),
        2 => task.clone().prop_map(|task| Op::MakeDue { task }),
        1 => task.prop_map(|task| Op::PassDeadline { task }),
        1 => Just(Op::ExpireDeadlines),
    ]
}

/// A case: the first task's max attempts, then the steps.
fn case_strategy() -> impl Strategy<Value = (i32, Vec<Op>)> {
    (1..=3i32, prop::collection::vec(op_strategy(), 1..=STEPS))
}

/// What the model knows of one task.
#[derive(Debug, Clone)]
struct ModelTask {
    id: i64,
    task_type: String,
    status: TaskStatus,
    attempt: i64,
    max_attempts: i64,
    epoch: i64,
    owner: Option<String>,
    lease_expired: bool,
    due: bool,
    deadline_passed: bool,
    /// `(epoch, agent, outcome)` of every attempt row.
    attempts: Vec<(i64, String, String)>,
}

/// A store outcome reduced to what the model can predict.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Enqueued,
    Claimed(Option<(i64, i64)>),
    Renewed(Option<bool>),
    Progress(bool),
    Applied {
        status: TaskStatus,
        retry: bool,
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
    Recovered(Vec<(i64, i64, String, TaskStatus)>),
    Expired(Vec<i64>),
    Skipped,
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
    claims: u64,
}

impl Tally {
    fn count(&mut self, seen: &Seen) {
        self.steps += 1;
        match seen {
            Seen::Applied { .. } | Seen::Released(true) | Seen::Progress(true) => {
                self.accepted += 1;
            }
            Seen::Renewed(Some(_)) => self.accepted += 1,
            Seen::Fenced | Seen::Released(false) | Seen::Progress(false) | Seen::Renewed(None) => {
                self.fenced += 1;
            }
            Seen::Repeated(_) | Seen::ReleaseRepeated => self.repeated += 1,
            Seen::Refused(_) => self.refused += 1,
            Seen::Recovered(r) => self.recovered += r.len() as u64,
            Seen::Expired(e) => self.deadline_expired += e.len() as u64,
            Seen::Claimed(Some(_)) => self.claims += 1,
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

struct Model {
    tasks: Vec<ModelTask>,
}

impl Model {
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

    fn claim(&mut self, i: usize, agent: usize) -> Result<Seen, TestCaseError> {
        let t = &mut self.tasks[i];
        if !(t.status.is_claimable() && t.due && !t.deadline_passed) {
            return Ok(Seen::Claimed(None));
        }
        t.status = table(t.status, TaskAction::Claim)?;
        t.attempt += 1;
        t.epoch += 1;
        t.owner = Some(AGENTS[agent].to_string());
        t.lease_expired = false;
        Ok(Seen::Claimed(Some((t.epoch, t.attempt))))
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
        t.due = t.status != TaskStatus::RetryWait;
        t.attempts
            .push((epoch, owner.to_string(), outcome.to_string()));
        Ok(Seen::Applied {
            status: t.status,
            retry: t.status == TaskStatus::RetryWait,
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

    fn requeue(&mut self, i: usize) -> Result<Seen, TestCaseError> {
        let t = &mut self.tasks[i];
        if !t.status.is_terminal() {
            prop_assert!(t.status.apply(TaskAction::Requeue).is_err());
            return Ok(Seen::Refused(TaskAction::Requeue));
        }
        let previous = t.status;
        t.status = table(previous, TaskAction::Requeue)?;
        t.attempt = 0;
        t.due = true;
        t.lease_expired = false;
        Ok(Seen::Requeued(previous))
    }

    fn recover(&mut self) -> Result<Seen, TestCaseError> {
        let mut out = Vec::new();
        for t in self.tasks.iter_mut() {
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
            // A task that will run again gets a new epoch now, fencing the old holder.
            if next == TaskStatus::RetryWait {
                t.epoch += 1;
            }
            t.status = next;
            t.lease_expired = false;
            t.due = true;
            t.attempts
                .push((revoked, owner.clone(), "lease_expired".into()));
            out.push((t.id, revoked, owner, next));
        }
        Ok(Seen::Recovered(out))
    }

    fn expire_deadlines(&mut self) -> Result<Seen, TestCaseError> {
        let mut out = Vec::new();
        for t in self.tasks.iter_mut() {
            if t.status.is_claimable() && t.deadline_passed {
                t.status = table(t.status, TaskAction::ExpireDeadline)?;
                out.push(t.id);
            }
        }
        Ok(Seen::Expired(out))
    }
}

/// Applies `op` to the store and returns what it saw.
async fn store_step(
    store: &dyn Store,
    db: &StoreDb,
    model: &Model,
    op: &Op,
) -> Result<Seen, TestCaseError> {
    let n = model.tasks.len();
    let id = |task: usize| model.tasks[task % n].id;
    Ok(match op {
        Op::Enqueue { .. } => unreachable!("enqueue is applied by run_case"),
        Op::Claim { task, agent: a } => {
            let t = &model.tasks[task % n];
            let batch = store
                .task_claim(ClaimParams {
                    owner: agent(AGENTS[*a]),
                    task_types: vec![tt(&t.task_type)],
                    batch: 10,
                    lease_ttl: LEASE_TTL,
                })
                .await
                .map_err(|e| fail("claim", e))?;
            prop_assert!(
                batch.tasks.len() <= 1,
                "claimed {} tasks of one type",
                batch.tasks.len()
            );
            Seen::Claimed(batch.tasks.first().map(|c| {
                assert_eq!(c.id.0, t.id);
                (c.lease_epoch.0, i64::from(c.attempt))
            }))
        }
        Op::Holder {
            task,
            who,
            epoch_delta,
            op,
        } => {
            let i = task % n;
            let (owner, epoch) = model.holder_key(i, *who, *epoch_delta);
            let lease = key(id(i), &owner, epoch);
            match op {
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
                    match store
                        .task_complete(CompleteParams {
                            key: lease,
                            completion: end.completion(),
                        })
                        .await
                        .map_err(|e| fail("complete", e))?
                    {
                        CompleteOutcome::Applied { status, retry_at } => Seen::Applied {
                            status,
                            retry: retry_at.is_some(),
                        },
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
            }
        }
        Op::Cancel { task } => {
            match store
                .task_cancel(CancelParams {
                    id: TaskId(id(*task)),
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
        Op::Requeue { task } => {
            match store
                .task_requeue(RequeueParams {
                    id: TaskId(id(*task)),
                    actor: Actor::operator("model-op"),
                })
                .await
            {
                Ok(done) => Seen::Requeued(done.previous),
                Err(StoreError::Transition { source, .. }) => Seen::Refused(source.action),
                Err(e) => return Err(fail("requeue", e)),
            }
        }
        Op::ExpireLease { task } => {
            if !model.tasks[task % n].status.is_leased() {
                return Ok(Seen::Skipped);
            }
            db.backdate_lease(id(*task), EXPIRED_SECS_AGO)
                .await
                .map_err(|e| fail("backdating a lease", e))?;
            Seen::Skipped
        }
        Op::Recover => {
            let mut out: Vec<_> = store
                .lease_recover_expired(RecoverParams {
                    grace: GRACE,
                    limit: 1000,
                    clock_bound: None,
                })
                .await
                .map_err(|e| fail("recover", e))?
                .into_iter()
                .map(|r| (r.id.0, r.revoked_epoch.0, r.owner.to_string(), r.status))
                .collect();
            out.sort();
            Seen::Recovered(out)
        }
        Op::MakeDue { task } => {
            db.update_task(id(*task), &[("available_at", Val::At(-1.0))])
                .await
                .map_err(|e| fail("making a task due", e))?;
            Seen::Skipped
        }
        Op::PassDeadline { task } => {
            db.update_task(id(*task), &[("deadline_at", Val::At(-1.0))])
                .await
                .map_err(|e| fail("passing a deadline", e))?;
            Seen::Skipped
        }
        Op::ExpireDeadlines => {
            let mut out: Vec<i64> = store
                .task_expire_deadlines(ExpireDeadlinesParams { limit: 1000 })
                .await
                .map_err(|e| fail("expire deadlines", e))?
                .into_iter()
                .map(|id| id.0)
                .collect();
            out.sort_unstable();
            Seen::Expired(out)
        }
    })
}

/// Applies `op` to the model.
fn model_step(model: &mut Model, op: &Op) -> Result<Seen, TestCaseError> {
    let n = model.tasks.len();
    match *op {
        Op::Enqueue { .. } => unreachable!("enqueue is applied by run_case"),
        Op::Claim { task, agent } => model.claim(task % n, agent),
        Op::Holder {
            task,
            who,
            epoch_delta,
            op,
        } => model.holder(task % n, who, epoch_delta, op),
        Op::Cancel { task } => model.cancel(task % n),
        Op::Requeue { task } => model.requeue(task % n),
        Op::ExpireLease { task } => {
            let t = &mut model.tasks[task % n];
            if t.status.is_leased() {
                t.lease_expired = true;
            }
            Ok(Seen::Skipped)
        }
        Op::Recover => model.recover(),
        Op::MakeDue { task } => {
            model.tasks[task % n].due = true;
            Ok(Seen::Skipped)
        }
        Op::PassDeadline { task } => {
            model.tasks[task % n].deadline_passed = true;
            Ok(Seen::Skipped)
        }
        Op::ExpireDeadlines => model.expire_deadlines(),
    }
}

async fn enqueue(
    store: &dyn Store,
    model: &mut Model,
    max_attempts: i32,
) -> Result<Seen, TestCaseError> {
    if model.tasks.len() >= MAX_TASKS {
        return Ok(Seen::Skipped);
    }
    let task_type = format!("model.{}", model.tasks.len());
    let done = store
        .task_enqueue(
            NewTask::new(tt(&task_type), json!({"n": model.tasks.len()}))
                .with_max_attempts(max_attempts),
        )
        .await
        .map_err(|e| fail("enqueue", e))?;
    prop_assert!(done.created);
    model.tasks.push(ModelTask {
        id: done.id.0,
        task_type,
        status: TaskStatus::Queued,
        attempt: 0,
        max_attempts: i64::from(max_attempts),
        epoch: 0,
        owner: None,
        lease_expired: false,
        due: true,
        deadline_passed: false,
        attempts: Vec::new(),
    });
    Ok(Seen::Enqueued)
}

/// Every task row and its attempt rows must be what the model says.
async fn check_rows(db: &StoreDb, model: &Model, step: usize) -> Result<(), TestCaseError> {
    for t in &model.tasks {
        let row = db
            .task_row(t.id)
            .await
            .map_err(|e| fail("reading a task", e))?;
        let status: TaskStatus = row["status"]
            .as_str()
            .unwrap_or_default()
            .parse()
            .map_err(|e| fail("status", e))?;
        let what = format!("task {} after step {step}", t.id);
        prop_assert_eq!(status, t.status, "status of {}", what);
        prop_assert_eq!(
            row["attempt"].as_i64(),
            Some(t.attempt),
            "attempt of {}",
            what
        );
        prop_assert_eq!(
            row["lease_epoch"].as_i64(),
            Some(t.epoch),
            "epoch of {}",
            what
        );
        prop_assert_eq!(
            row["lease_owner"].as_str().map(str::to_string),
            t.owner.clone(),
            "owner of {}",
            what
        );
        prop_assert_eq!(
            !row["lease_until"].is_null(),
            t.status.is_leased(),
            "lease_until of {} (held iff leased)",
            what
        );
        let mut attempts = t.attempts.clone();
        attempts.sort_by_key(|a| a.0);
        let rows = db
            .attempt_rows(t.id)
            .await
            .map_err(|e| fail("reading attempts", e))?;
        prop_assert_eq!(rows, attempts, "attempt rows of {}", what);
    }
    Ok(())
}

async fn run_case(
    db: &StoreDb,
    first_max_attempts: i32,
    ops: &[Op],
    tally: &RefCell<Tally>,
) -> Result<(), TestCaseError> {
    // A clean slate per case: recovery and deadline expiry act on every row.
    for sql in ["DELETE FROM task_attempts", "DELETE FROM tasks"] {
        db.execute(sql, &[]).await.map_err(|e| fail(sql, e))?;
    }
    let store = db.store();
    let mut model = Model { tasks: Vec::new() };
    enqueue(&*store, &mut model, first_max_attempts).await?;
    for (step, op) in ops.iter().enumerate() {
        let seen = if let Op::Enqueue { max_attempts } = op {
            enqueue(&*store, &mut model, *max_attempts).await?
        } else {
            let got = store_step(&*store, db, &model, op).await?;
            let want = model_step(&mut model, op)?;
            prop_assert_eq!(&got, &want, "outcome of step {} {:?}", step, op);
            got
        };
        tally.borrow_mut().count(&seen);
        check_rows(db, &model, step).await?;
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

fn run(backend: Backend) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = rt.block_on(StoreDb::new(backend)).unwrap();
    let tally = RefCell::new(Tally::default());
    let mut runner = TestRunner::new(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&case_strategy(), |(first, ops)| {
        rt.block_on(run_case(&db, first, &ops, &tally))
    });
    if let Err(e) = result {
        panic!("{backend}: the store and the model disagree: {e}");
    }
    let tally = tally.into_inner();
    eprintln!("{backend}: {} cases, {tally:?}", cases());
    // Positive control: the run exercised accepted, fenced and repeated holder writes,
    // refusals, recoveries and deadline expiries, not only no-ops.
    assert!(tally.claims > 0 && tally.accepted > 0, "{tally:?}");
    assert!(tally.fenced > 0 && tally.repeated > 0, "{tally:?}");
    assert!(tally.refused > 0 && tally.recovered > 0, "{tally:?}");
    assert!(tally.deadline_expired > 0, "{tally:?}");
    rt.block_on(db.drop_db()).unwrap();
}

#[test]
fn postgres_store_matches_the_model() {
    run(Backend::Postgres);
}

#[test]
fn sqlite_store_matches_the_model() {
    run(Backend::Sqlite);
}
