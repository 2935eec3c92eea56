//! Small constructors the store tests share: a task type from a literal, claim parameters, a
//! lease key. They panic with a clear message on a malformed literal, which in a test is the
//! right failure.
#![allow(clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::Store;
use leasehold_shared::domain::Task;
use leasehold_shared::store::{ClaimParams, CompleteOutcome, CompleteParams, Completion};

use crate::factory::FACTORY_OWNER;
use leasehold_shared::{AgentId, LeaseEpoch, LeaseKey, TaskId, TaskType};

/// Lease time the shared claim parameters ask for.
pub const TEST_LEASE_TTL: Duration = Duration::from_secs(30);

/// A task type from a literal known to be valid.
pub fn tt(name: &str) -> TaskType {
    TaskType::new(name).expect("test task type literal must be valid")
}

/// An agent id from a literal known to be valid.
pub fn agent(id: &str) -> AgentId {
    AgentId::new(id).expect("test agent id literal must be valid")
}

/// Claim up to `batch` tasks of `types` for `owner`, with a [`TEST_LEASE_TTL`] lease.
pub fn claim(owner: &str, types: &[&str], batch: u32) -> ClaimParams {
    ClaimParams {
        owner: agent(owner),
        task_types: types.iter().map(|t| tt(t)).collect(),
        batch,
        lease_ttl: TEST_LEASE_TTL,
    }
}

/// The lease key of task `id` held by `owner` under `epoch`.
pub fn key(id: i64, owner: &str, epoch: i64) -> LeaseKey {
    LeaseKey {
        id: TaskId(id),
        owner: agent(owner),
        epoch: LeaseEpoch(epoch),
    }
}

/// A completion of task `id` by the factory's lease owner under `epoch`.
pub fn by_factory(id: i64, epoch: i64, completion: Completion) -> CompleteParams {
    CompleteParams {
        key: key(id, FACTORY_OWNER, epoch),
        completion,
    }
}

/// Completes every task of a claim as succeeded under `owner`, asserting each completion
/// applied.
pub async fn complete_all(store: &dyn Store, owner: &str, tasks: &[Task]) {
    if tasks.is_empty() {
        return;
    }
    let batch = tasks
        .iter()
        .map(|t| CompleteParams {
            key: LeaseKey {
                id: t.id,
                owner: agent(owner),
                epoch: t.lease_epoch,
            },
            completion: Completion::Succeeded { result: None },
        })
        .collect();
    let outcomes = store
        .task_complete_many(batch)
        .await
        .expect("completing a claimed batch");
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, CompleteOutcome::Applied { .. })),
        "a completion of a held task did not apply: {outcomes:?}"
    );
}

/// The two plans a prepared statement can run with: the custom plans PostgreSQL makes for its
/// first executions and the generic plan it may settle on after five.
pub const PLAN_MODES: [&str; 2] = ["force_custom_plan", "force_generic_plan"];

/// A transaction on `pool` whose statements are planned in `mode` (one of [`PLAN_MODES`]), for
/// EXPLAINs of a statement as the store runs it.
pub async fn tx_planning(
    pool: &sqlx::PgPool,
    mode: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.expect("begin a transaction");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SET LOCAL plan_cache_mode = {mode}"
    )))
    .execute(&mut *tx)
    .await
    .expect("set plan_cache_mode");
    tx
}
