//! The soak's load: a mixed batch of ledger tasks every [`BATCH_EVERY`], each payload saying
//! how its task should end (`expect`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use leasehold_tests::ledger::{self, Columns};
use serde_json::json;
use sqlx::PgPool;

use crate::{BATCH_EVERY, LIMITED};

/// Enqueues one mixed batch; `expect` in the payload says how a task should end.
async fn enqueue_batch(pool: &PgPool, rng: &mut fastrand::Rng) -> anyhow::Result<u64> {
    let p = Columns::default();
    let timed = Columns {
        timeout_ms: Some(300),
        max_attempts: Some(2),
        ..p
    };
    let roomy = Columns {
        timeout_ms: Some(5000),
        ..p
    };
    let soon = Columns {
        deadline_in_ms: Some(1000),
        ..p
    };
    let later = Columns {
        deadline_in_ms: Some(900_000),
        ..p
    };
    let slow = usize::from(rng.f32() < 0.7);
    let timeouts = usize::from(rng.f32() < 0.25);
    let deadlines = usize::from(rng.f32() < 0.15);
    // (type, how many, ms of work, attempts that fail, how it should end, columns)
    let batch = [
        ("ledger", rng.usize(4..=8), rng.u64(5..60), 0, "succeed", p),
        ("ledger", 1, 20, 1, "succeed", p),
        (
            LIMITED,
            rng.usize(2..=3),
            rng.u64(150..500),
            0,
            "succeed",
            p,
        ),
        ("ledger", slow, rng.u64(800..2500), 0, "succeed", p),
        ("ledger", timeouts, 1500, 0, "dead", timed),
        ("ledger", timeouts, 50, 0, "succeed", roomy),
        ("ledger", deadlines, 3000, 0, "dead", soon),
        ("ledger", deadlines, 30, 0, "succeed", later),
    ];
    let mut n = 0;
    for (task_type, k, ms, fail, expect, columns) in batch {
        if k > 0 {
            let extra = json!({"ms": ms, "fail_attempts": fail, "expect": expect});
            n += ledger::enqueue_with(pool, task_type, k, extra, &columns)
                .await?
                .len() as u64;
        }
    }
    Ok(n)
}

/// Enqueues a batch every [`BATCH_EVERY`] until `stop`; a batch the database refused (it is
/// being restarted) is skipped and counted.
pub(crate) fn spawn_enqueuer(
    pool: PgPool,
    seed: u64,
    stop: Arc<AtomicBool>,
    skipped: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut tick = tokio::time::interval(BATCH_EVERY);
        let mut enqueued = 0;
        while !stop.load(Ordering::SeqCst) {
            tick.tick().await;
            match enqueue_batch(&pool, &mut rng).await {
                Ok(n) => enqueued += n,
                Err(_) => {
                    skipped.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        enqueued
    })
}
