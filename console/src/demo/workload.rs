//! The demo's workload: what is enqueued, when, and the policies of its types.
//!
//! Every [`TICK`] (the first at once) one bulk enqueue of what [`Schedule::tick`] says is
//! due at that tick:
//! ```text
//!   every tick   2-4 quick ones: noop, or sleep 20-400 ms
//!   every 2 s    demo.long: 8-40 items of 250-750 ms, progress after each; a third of
//!                them have failing items and end partially succeeded
//!   every 3 s    demo.flaky: fails 0-2 times, then succeeds (4 attempts, 1 s backoff
//!                doubling); the first fails once; one in eight fails every attempt and is
//!                dead-lettered
//!   every 5 s    a poison task: fail (not retryable), or a sleep whose payload does not fit
//!   every 7 s    exec: a shell script that prints and succeeds; one in three exits 3
//!   every 15 s   a burst of 40 quick ones at low priority
//!   every 60 s   a sleep of 10 minutes with a 4 s timeout and one attempt: dead (timeout)
//! ```
//! A failed enqueue (SQLite busy) is logged and counted, never fatal: the next tick goes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{NewTask, PolicySetParams, ScheduleAddParams, ScheduleWriteMode};
use leasehold_shared::{Actor, Store, TaskId, TaskType};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::handlers::{FLAKY_TYPE, FlakyPayload, LONG_TYPE, ProgressPayload, task_type};
use crate::error::{Error, Result};

/// How often the feeder enqueues.
pub const TICK: Duration = Duration::from_millis(500);
/// Ticks between two long `demo.long` tasks.
const PROGRESS_EVERY: u64 = 4;
/// Ticks between two flaky tasks.
const FLAKY_EVERY: u64 = 6;
/// Ticks between two poison tasks.
const POISON_EVERY: u64 = 10;
/// Ticks between two `exec` tasks.
const EXEC_EVERY: u64 = 14;
/// Ticks between two bursts.
const BURST_EVERY: u64 = 30;
/// Tasks in a burst.
pub const BURST_SIZE: usize = 40;
/// Ticks between two hanging tasks (the first at tick 0).
const HANG_EVERY: u64 = 120;
/// The hanging task's timeout.
pub const HANG_TIMEOUT: Duration = Duration::from_secs(4);
/// Attempts of a flaky task.
pub const FLAKY_ATTEMPTS: i32 = 4;
/// How many times each flaky task fails, in turn: the first one retries once, and one in
/// eight fails every attempt (dead-lettered).
const FLAKY_PLAN: [i32; 8] = [1, 2, 0, 1, FLAKY_ATTEMPTS, 2, 0, 1];
/// The exec type's concurrency limit (all agents), so the Types view shows a limit.
pub const EXEC_LIMIT: u32 = 2;
/// `demo.long` tasks running longer than this are flagged slow.
pub const PROGRESS_SLOW: Duration = Duration::from_secs(12);
/// Name written to the audit log for the demo's policy changes.
pub const ACTOR: &str = "leasehold-demo";

/// The demo's task types, checked once.
#[derive(Debug, Clone)]
pub struct Types {
    noop: TaskType,
    sleep: TaskType,
    fail: TaskType,
    exec: TaskType,
    progress: TaskType,
    flaky: TaskType,
}

impl Types {
    pub fn new() -> Result<Types> {
        Ok(Types {
            noop: task_type("noop")?,
            sleep: task_type("sleep")?,
            fail: task_type("fail")?,
            exec: task_type("exec")?,
            progress: task_type(LONG_TYPE)?,
            flaky: task_type(FLAKY_TYPE)?,
        })
    }
}

/// Sets the policies the workload relies on: the flaky type's short backoff, the progress
/// type's slow threshold and the exec type's limit. Audited as [`ACTOR`].
pub async fn set_policies(store: &dyn Store, types: &Types) -> Result<()> {
    let set = |task_type: &TaskType, patch: PolicyPatch| PolicySetParams {
        scope: PolicyScope::Type(task_type.clone()),
        patch,
        actor: Actor::operator(ACTOR),
    };
    let changes = [
        set(
            &types.flaky,
            PolicyPatch {
                retry_base: Some(Some(Duration::from_secs(1))),
                retry_multiplier: Some(Some(2.0)),
                retry_max: Some(Some(Duration::from_secs(5))),
                retry_jitter: Some(Some(0.2)),
                ..PolicyPatch::default()
            },
        ),
        set(
            &types.progress,
            PolicyPatch {
                slow_threshold: Some(Some(PROGRESS_SLOW)),
                ..PolicyPatch::default()
            },
        ),
        set(
            &types.exec,
            PolicyPatch {
                max_concurrency: Some(Some(EXEC_LIMIT)),
                ..PolicyPatch::default()
            },
        ),
    ];
    for params in changes {
        let scope = params.scope.key().to_owned();
        store
            .policy_set(params)
            .await
            .map_err(|e| Error::Database {
                what: format!("setting the demo policy of {scope}"),
                cause: crate::error::cause_chain(&e),
            })?;
    }
    Ok(())
}

/// The cron schedules of the demo's own file (view 7): a heartbeat every 10 s, fired by
/// whichever agent leads, and a nightly report in Berlin time that shows a far next fire.
pub fn cron_schedules() -> Result<Vec<leasehold_shared::domain::Schedule>> {
    use leasehold_shared::domain::Schedule as Cron;
    use leasehold_shared::domain::schedule::MissedTicks;
    let limits = leasehold_shared::InputLimits::default();
    let invalid =
        |e: leasehold_shared::ValidationError| Error::usage(format!("demo schedule: {e}"));
    Ok(vec![
        Cron::builder("demo.heartbeat", "*/10 * * * * *", "noop")
            .missed(MissedTicks::Skip)
            .build(&limits)
            .map_err(invalid)?,
        Cron::builder("demo.nightly-report", "0 30 2 * * *", "sleep")
            .time_zone("Europe/Berlin")
            .payload(json!({"ms": 200}))
            .missed(MissedTicks::catch_up(1).map_err(invalid)?)
            .build(&limits)
            .map_err(invalid)?,
    ])
}

/// Declares `schedules` (audited as [`ACTOR`]).
pub async fn declare_schedules(
    store: &dyn Store,
    schedules: &[leasehold_shared::domain::Schedule],
) -> Result<()> {
    for schedule in schedules {
        store
            .schedule_add(ScheduleAddParams {
                schedule: schedule.clone(),
                mode: ScheduleWriteMode::Declare,
                actor: Actor::operator(ACTOR),
            })
            .await
            .map_err(|e| Error::Database {
                what: format!("declaring the demo schedule {}", schedule.name()),
                cause: crate::error::cause_chain(&e),
            })?;
    }
    Ok(())
}

/// What is enqueued at each tick.
#[derive(Debug)]
pub struct Schedule {
    types: Types,
    rng: fastrand::Rng,
}

impl Schedule {
    pub fn new(types: Types, rng: fastrand::Rng) -> Self {
        Self { types, rng }
    }

    /// The tasks due at tick `n` (0 is the first).
    pub fn tick(&mut self, n: u64) -> Vec<NewTask> {
        let mut tasks = Vec::new();
        if n.is_multiple_of(HANG_EVERY) {
            tasks.push(
                NewTask::new(self.types.sleep.clone(), json!({ "ms": 600_000 }))
                    .with_timeout(HANG_TIMEOUT)
                    .with_max_attempts(1),
            );
        }
        for _ in 0..self.rng.usize(2..=4) {
            let task = self.quick();
            tasks.push(task.with_priority(self.rng.i16(0..=1)));
        }
        if n.is_multiple_of(PROGRESS_EVERY) {
            let fail_every = (self.rng.u8(0..3) == 0).then(|| self.rng.u64(3..=6));
            let payload = ProgressPayload {
                steps: self.rng.u64(8..=40),
                step_ms: self.rng.u64(250..=750),
                fail_every,
            };
            tasks.push(NewTask::new(self.types.progress.clone(), to_json(&payload)));
        }
        if n % FLAKY_EVERY == 1 {
            let fail_attempts = FLAKY_PLAN[(n / FLAKY_EVERY) as usize % FLAKY_PLAN.len()];
            tasks.push(
                NewTask::new(
                    self.types.flaky.clone(),
                    to_json(&FlakyPayload { fail_attempts }),
                )
                .with_max_attempts(FLAKY_ATTEMPTS),
            );
        }
        if n % POISON_EVERY == 3 {
            let poison = if (n / POISON_EVERY).is_multiple_of(2) {
                NewTask::new(
                    self.types.fail.clone(),
                    json!({
                        "code": "poison",
                        "message": format!("cannot parse invoice #{}: unexpected end of input", 1000 + n),
                        "retryable": false,
                    }),
                )
            } else {
                NewTask::new(self.types.sleep.clone(), json!({ "ms": "soon" }))
            };
            tasks.push(poison);
        }
        if n % EXEC_EVERY == 5 {
            let script = if (n / EXEC_EVERY) % 3 == 2 {
                "echo \"checking $DEMO_VOLUME\"; echo \"$DEMO_VOLUME is 97% full\" >&2; exit 3"
            } else {
                "echo \"checking $DEMO_VOLUME\"; sleep 1; echo \"$DEMO_VOLUME is fine\""
            };
            tasks.push(
                NewTask::new(
                    self.types.exec.clone(),
                    json!({
                        "argv": ["sh", "-c", script],
                        "env": { "DEMO_VOLUME": "/var/lib/demo" },
                        "timeout": "10s",
                    }),
                )
                .with_max_attempts(1),
            );
        }
        if n % BURST_EVERY == 10 {
            for _ in 0..BURST_SIZE {
                tasks.push(self.quick().with_priority(-1));
            }
        }
        tasks
    }

    /// A quick success: noop, or a short sleep.
    fn quick(&mut self) -> NewTask {
        if self.rng.bool() {
            NewTask::new(self.types.noop.clone(), json!({}))
        } else {
            NewTask::new(
                self.types.sleep.clone(),
                json!({ "ms": self.rng.u64(20..=400) }),
            )
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}

/// What the feeder did, read while it runs and after.
#[derive(Debug, Default)]
pub struct FeedStats {
    /// Tasks enqueued.
    pub enqueued: AtomicU64,
    /// Enqueue statements that failed (their tasks were not enqueued).
    pub failures: AtomicU64,
    /// The id of the first task enqueued (0 before), the demo's first row.
    pub first_id: AtomicU64,
}

impl FeedStats {
    /// The first task the demo enqueued, once there is one.
    pub fn first_id(&self) -> Option<TaskId> {
        match self.first_id.load(Ordering::Relaxed) {
            0 => None,
            id => i64::try_from(id).ok().map(TaskId),
        }
    }
}

/// The feeder: one service, enqueueing every [`TICK`] until stopped.
pub struct Feeder {
    pub store: Arc<dyn Store>,
    pub schedule: Schedule,
    pub stats: Arc<FeedStats>,
    /// Cron schedules declared once the first task is in, so every task they fire comes
    /// after the demo's first row (the summary counts from there).
    pub cron: Vec<leasehold_shared::domain::Schedule>,
}

impl Feeder {
    /// Runs until `stop`; an enqueue in flight when `stop` fires completes first.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut n = 0u64;
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let tasks = self.schedule.tick(n);
            n += 1;
            let count = tasks.len();
            match self.store.task_enqueue_many(tasks).await {
                Ok(done) => {
                    if let Some(first) = done.first() {
                        let id = u64::try_from(first.id.0).unwrap_or(0);
                        let _ = self.stats.first_id.compare_exchange(
                            0,
                            id,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    let cron = std::mem::take(&mut self.cron);
                    if !cron.is_empty()
                        && let Err(error) = declare_schedules(&*self.store, &cron).await
                    {
                        tracing::warn!(%error, "demo schedules not declared");
                    }
                    self.stats
                        .enqueued
                        .fetch_add(done.len() as u64, Ordering::Relaxed);
                }
                Err(error) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, tasks = count, tick = n - 1, "demo enqueue failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn minute() -> BTreeMap<String, usize> {
        let mut schedule = Schedule::new(Types::new().unwrap(), fastrand::Rng::with_seed(7));
        let mut by_type = BTreeMap::new();
        for n in 0..120 {
            for task in schedule.tick(n) {
                *by_type
                    .entry(task.task_type.as_str().to_owned())
                    .or_default() += 1;
            }
        }
        by_type
    }

    #[test]
    fn a_minute_has_every_kind_of_task() {
        let by_type = minute();
        for t in ["noop", "sleep", "fail", "exec", LONG_TYPE, FLAKY_TYPE] {
            assert!(by_type.get(t).copied().unwrap_or(0) > 0, "{t}: {by_type:?}");
        }
        assert_eq!(by_type[LONG_TYPE], 30);
        assert_eq!(by_type[FLAKY_TYPE], 20);
        assert_eq!(by_type["exec"], 9);
        assert_eq!(by_type["fail"], 6);
    }

    #[test]
    fn the_first_tick_hangs_one_task_past_its_timeout() {
        let mut schedule = Schedule::new(Types::new().unwrap(), fastrand::Rng::with_seed(1));
        let first = schedule.tick(0);
        let hang: Vec<&NewTask> = first
            .iter()
            .filter(|t| t.timeout == Some(HANG_TIMEOUT))
            .collect();
        assert_eq!(hang.len(), 1);
        assert_eq!(hang[0].max_attempts, Some(1));
        assert_eq!(hang[0].payload, json!({ "ms": 600_000 }));
        assert!(schedule.tick(1).iter().all(|t| t.timeout.is_none()));
    }

    #[test]
    fn the_first_flaky_task_retries_and_one_in_eight_dies() {
        let mut schedule = Schedule::new(Types::new().unwrap(), fastrand::Rng::with_seed(5));
        let plans: Vec<i32> = (0..8 * FLAKY_EVERY)
            .flat_map(|n| schedule.tick(n))
            .filter(|t| t.task_type.as_str() == FLAKY_TYPE)
            .map(|t| {
                serde_json::from_value::<FlakyPayload>(t.payload)
                    .unwrap()
                    .fail_attempts
            })
            .collect();
        assert_eq!(plans.len(), 8);
        assert_eq!(plans[0], 1);
        assert_eq!(plans.iter().filter(|p| **p >= FLAKY_ATTEMPTS).count(), 1);
    }

    #[test]
    fn bursts_and_poison_come_now_and_then() {
        let mut schedule = Schedule::new(Types::new().unwrap(), fastrand::Rng::with_seed(3));
        let sizes: Vec<usize> = (0..31).map(|n| schedule.tick(n).len()).collect();
        assert!(sizes[10] >= BURST_SIZE + 2, "{sizes:?}");
        assert!(
            sizes.iter().enumerate().all(|(n, s)| n == 10 || *s < 10),
            "{sizes:?}"
        );
        let poison = schedule.tick(13);
        assert!(
            poison
                .iter()
                .any(|t| t.task_type.as_str() == "sleep" && t.payload == json!({"ms": "soon"}))
        );
    }

    #[test]
    fn payloads_fit_their_handlers() {
        let mut schedule = Schedule::new(Types::new().unwrap(), fastrand::Rng::with_seed(9));
        for n in 0..240 {
            for task in schedule.tick(n) {
                let p = task.payload.clone();
                let fits = match task.task_type.as_str() {
                    "noop" => {
                        serde_json::from_value::<leasehold_agent::handlers::NoopPayload>(p).is_ok()
                    }
                    "sleep" => {
                        serde_json::from_value::<leasehold_agent::handlers::SleepPayload>(p.clone())
                            .is_ok()
                            || p == json!({"ms": "soon"})
                    }
                    "fail" => {
                        serde_json::from_value::<leasehold_agent::handlers::FailPayload>(p).is_ok()
                    }
                    "exec" => {
                        serde_json::from_value::<leasehold_agent::handlers::ExecPayload>(p).is_ok()
                    }
                    LONG_TYPE => serde_json::from_value::<ProgressPayload>(p).is_ok(),
                    FLAKY_TYPE => serde_json::from_value::<FlakyPayload>(p).is_ok(),
                    other => panic!("unexpected type {other}"),
                };
                assert!(fits, "{task:?}");
            }
        }
    }

    #[test]
    fn the_demo_schedules_are_valid() {
        let cron = cron_schedules().unwrap();
        let names: Vec<&str> = cron.iter().map(|s| s.name().as_str()).collect();
        assert_eq!(names, ["demo.heartbeat", "demo.nightly-report"]);
    }
}
