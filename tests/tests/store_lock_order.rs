#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A batch renewal and a batch completion of the same agent's leases, given in opposite orders
//! and run at the same moment, must never deadlock or fail (PostgreSQL: both lock rows in id
//! order; SQLite: both wait their turn for the write lock). Found by the bench: with both in
//! flight, PostgreSQL's deadlock detector aborted one after a second. PostgreSQL only: the
//! query plans of the batch statements.

use std::time::Duration;

use leasehold_shared::store::{ClaimParams, CompleteParams, Completion, RenewParams};
use leasehold_shared::{AgentId, LeaseKey};
use leasehold_tests::helpers::tt;
use leasehold_tests::{StoreDb, TestDb, conformance};

conformance!(
    renewals_and_completions_of_the_same_leases_never_deadlock,
    worker_threads = 2
);
async fn renewals_and_completions_of_the_same_leases_never_deadlock(db: StoreDb) {
    db.insert_queued_bulk("lock.order", 4000, 0, 0.0)
        .await
        .unwrap();
    let store = db.store();
    let owner = AgentId::new("locker#1").unwrap();
    for round in 0..20 {
        let claimed = store
            .task_claim(ClaimParams {
                owner: owner.clone(),
                task_types: vec![tt("lock.order")],
                batch: 200,
                lease_ttl: Duration::from_secs(30),
            })
            .await
            .unwrap();
        assert_eq!(claimed.tasks.len(), 200, "round {round}");
        let mut leases: Vec<_> = claimed
            .tasks
            .iter()
            .map(|t| (t.id, t.lease_epoch))
            .collect();
        leases.sort();
        let renew = RenewParams {
            owner: owner.clone(),
            leases: leases.iter().rev().copied().collect(),
            lease_ttl: Duration::from_secs(30),
            alive_for: None,
        };
        // Completions arrive in the order handlers finish: interleave from both ends.
        let mut mixed = Vec::with_capacity(leases.len());
        let (mut lo, mut hi) = (0, leases.len());
        while lo < hi {
            hi -= 1;
            mixed.push(leases[hi]);
            if lo < hi {
                mixed.push(leases[lo]);
                lo += 1;
            }
        }
        let completes: Vec<CompleteParams> = mixed
            .iter()
            .map(|(id, epoch)| CompleteParams {
                key: LeaseKey {
                    id: *id,
                    owner: owner.clone(),
                    epoch: *epoch,
                },
                completion: Completion::Succeeded { result: None },
            })
            .collect();
        let (s1, s2) = (store.clone(), store.clone());
        let renewing = tokio::spawn(async move { s1.lease_renew_many(renew).await });
        let completing = tokio::spawn(async move { s2.task_complete_many(completes).await });
        let renewed = renewing.await.unwrap().expect("renewal must not deadlock");
        let completed = completing
            .await
            .unwrap()
            .expect("completion must not deadlock");
        // Every lease was either renewed before the completion or found finished after it.
        assert_eq!(
            renewed.renewed.len() + renewed.lost.len(),
            200,
            "round {round}"
        );
        assert!(
            completed
                .iter()
                .all(|c| matches!(c, leasehold_shared::store::CompleteOutcome::Applied { .. }))
        );
    }
    db.drop_db().await.unwrap();
}

// PostgreSQL only: checks PostgreSQL query plans (EXPLAIN) of the batch statements.
/// Batch statements look ids up by primary key whatever the statistics say. Found by the bench:
/// after an ANALYZE taken while nothing ran, completions scanned the whole leased partial index
/// (dead entries included) and ran 50× slower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_statements_use_the_primary_key_after_an_analyze() {
    let db = TestDb::new().await.unwrap();
    sqlx::query("INSERT INTO tasks (task_type, payload) SELECT 'plan.check', '{}' FROM generate_series(1, 20000)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE tasks")
        .execute(&db.pool)
        .await
        .unwrap();
    let statements = [
        (
            "task_complete_many",
            include_str!("../../shared/src/store/postgres/sql/task_complete_many.sql"),
            "",
            "('{1,2,3}', '{a#1,a#1,a#1}', '{1,1,1}', '{succeeded,succeeded,succeeded}', \
             '{succeeded,succeeded,succeeded}', '{NULL,NULL,NULL}', '{NULL,NULL,NULL}', \
             '{t,t,t}', '{NULL,NULL,NULL}', '{t,t,t}', '{f,f,f}')",
        ),
        (
            "task_complete_read",
            include_str!("../../shared/src/store/postgres/sql/task_complete_read.sql"),
            "",
            "('{1,2,3}', '{a#1,a#1,a#1}', '{1,1,1}')",
        ),
        (
            "lease_recover_expired",
            include_str!("../../shared/src/store/postgres/sql/lease_recover_expired.sql"),
            "",
            "('{1,2,3}', '{a#1,a#1,a#1}', '{1,1,1}', '{dead,dead,dead}', '{1,1,1}', \
             '{NULL,NULL,NULL}', '{\"{}\",\"{}\",\"{}\"}', '{t,t,t}')",
        ),
        (
            "lease_renew_many",
            include_str!("../../shared/src/store/postgres/sql/lease_renew_many.sql"),
            "($1::text, $2::bigint[], $3::bigint[], $4::float8, $5::float8)",
            "('a#1', '{1,2,3}', '{1,1,1}', 30, 35)",
        ),
        (
            "lease_release_many",
            include_str!("../../shared/src/store/postgres/sql/lease_release_many.sql"),
            "($1::text, $2::bigint[], $3::bigint[])",
            "('a#1', '{1,2,3}', '{1,1,1}')",
        ),
    ];
    for (name, sql, _, args) in statements {
        let mut conn = db.pool.acquire().await.unwrap();
        sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
        sqlx::query(include_str!(
            "../../shared/src/store/postgres/sql/plan_indexed.sql"
        ))
        .execute(&mut *conn)
        .await
        .unwrap();
        let prepared = format!("PREPARE {name} AS {sql}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(prepared))
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::raw_sql("SET LOCAL plan_cache_mode = force_generic_plan")
            .execute(&mut *conn)
            .await
            .unwrap();
        let explain = format!("EXPLAIN (COSTS OFF) EXECUTE {name}{args}");
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        let plan = plan.join("\n");
        sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
        assert!(
            plan.contains("tasks_pkey"),
            "{name} must look ids up by primary key:\n{plan}"
        );
        assert!(
            !plan.contains("tasks_leased_type_idx"),
            "{name} must not scan the leased index:\n{plan}"
        );
        assert!(
            !plan.contains("Seq Scan on tasks"),
            "{name} must not scan the table:\n{plan}"
        );
        if name == "task_complete_many" {
            // No row is locked before the UPDATE, so the UPDATE itself must take the rows in id
            // order: a nested loop whose outer side is the input sorted, the inner side the
            // primary-key lookup.
            let nodes: Vec<&str> = plan.lines().filter(|l| l.contains("->")).collect();
            let update = nodes
                .iter()
                .position(|l| l.contains("Update on tasks"))
                .unwrap_or_else(|| panic!("no update:\n{plan}"));
            assert!(
                nodes[update + 1].contains("Nested Loop"),
                "{name}: the update must join by nested loop:\n{plan}"
            );
            let sort = nodes.iter().position(|l| l.contains("Sort"));
            let input = nodes.iter().position(|l| l.contains("Function Scan"));
            let lookup = nodes
                .iter()
                .position(|l| l.contains("Index Scan using tasks_pkey"));
            assert!(
                matches!((sort, input, lookup), (Some(s), Some(f), Some(k)) if s < f && f < k),
                "{name}: sorted input outside, key lookup inside:\n{plan}"
            );
            assert!(
                !plan.contains("Hash") && !plan.contains("Merge"),
                "{name}: index nested loops only:\n{plan}"
            );
        }
    }
    db.drop_db().await.unwrap();
}
