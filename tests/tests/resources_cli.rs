#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold shards …` and `leasehold locks …` end to end (issue 8): the real `leasehold`
//! binary against real agents and database — a group created (again: a no-op; another count:
//! refused), bad input refused with exit 2 and nothing saved, an agent started with
//! `--shard-groups` owning every shard as `shards ls GROUP --output json` shows, a lock taken
//! through gRPC listed and force-released, and the audit rows of it all.

use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::{agent_address, connect};
use leasehold_tests::{TestDb, count, wait_until};

const WAIT: Duration = Duration::from_secs(60);

fn ok(o: &CliOutput) {
    assert_eq!(o.code, Some(0), "{}", o.describe());
}

fn usage(o: &CliOutput, needle: &str) {
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert!(
        o.stderr.contains(needle),
        "stderr should name {needle:?}: {}",
        o.describe()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_and_locks_through_the_cli() {
    let db = TestDb::new().await.unwrap();
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "cli-res",
        "noop",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    agent
        .wait_registered(&db.pool, "cli-res", WAIT)
        .await
        .unwrap();
    let addr = agent_address(&db.pool, "cli-res", WAIT).await.unwrap();
    let cli = Cli::new(&addr).await.unwrap();

    // Create; the same again is a no-op; another count is refused and changes nothing.
    ok(&cli
        .run(&["shards", "create", "orders", "--count", "8"])
        .await
        .unwrap());
    let again = cli
        .run(&["shards", "create", "orders", "--count", "8"])
        .await
        .unwrap();
    ok(&again);
    assert!(
        again.stdout.contains("already exists"),
        "{}",
        again.describe()
    );
    let other = cli
        .run(&["shards", "create", "orders", "--count", "9"])
        .await
        .unwrap();
    assert_ne!(other.code, Some(0), "{}", other.describe());
    assert!(other.stderr.contains("8 shards"), "{}", other.describe());
    for bad in [
        vec!["shards", "create", "Bad Name", "--count", "4"],
        vec!["shards", "create", "fine", "--count", "0"],
        vec!["shards", "create", "fine", "--count", "5000"],
    ] {
        let out = cli.run(&bad).await.unwrap();
        assert_eq!(out.code, Some(2), "{bad:?}: {}", out.describe());
    }
    usage(
        &cli.run(&["locks", "release", "No/Such"]).await.unwrap(),
        "name",
    );
    let groups = count(&db.pool, "SELECT count(*) FROM shard_groups")
        .await
        .unwrap();
    assert_eq!(groups, 1, "bad input saved nothing");
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM resource_leases WHERE group_name = 'orders'"
        )
        .await
        .unwrap(),
        8
    );

    // A member: it owns all eight, as `shards ls` shows.
    let member = spawn_agent(
        "leasehold-agent",
        &db.url,
        "cli-member",
        "noop",
        &["--shard-groups", "orders"],
        Vec::new(),
    )
    .await
    .unwrap();
    let member_id = member
        .wait_registered(&db.pool, "cli-member", WAIT)
        .await
        .unwrap();
    wait_until("the member owns every shard", WAIT, || {
        let pool = db.pool.clone();
        let id = member_id.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM resource_leases WHERE group_name = 'orders' AND owner = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await?;
            Ok(n == 8)
        }
    })
    .await
    .unwrap();
    let listed = cli
        .run(&["shards", "ls", "orders", "--output", "json"])
        .await
        .unwrap();
    ok(&listed);
    let json = listed.json().unwrap();
    let shards = json["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 8, "{json}");
    for (n, s) in shards.iter().enumerate() {
        assert_eq!(s["shard"], n, "{s}");
        assert_eq!(s["owner"], member_id.as_str(), "{s}");
        assert_eq!(s["token"], 1, "{s}");
        assert_eq!(s["state"], "held", "{s}");
    }
    assert_eq!(json["group"]["shard_count"], 8, "{json}");
    assert_eq!(json["members"].as_array().unwrap().len(), 1, "{json}");
    let table = cli.run(&["shards", "ls", "orders"]).await.unwrap();
    ok(&table);
    assert!(
        table.stdout.contains(member_id.as_str()),
        "{}",
        table.describe()
    );
    let all = cli.run(&["shards", "ls"]).await.unwrap();
    ok(&all);
    assert!(all.stdout.contains("orders"), "{}", all.describe());
    usage(
        &cli.run(&["shards", "ls", "nosuch"]).await.unwrap(),
        "nosuch",
    );

    // A lock a CI job took through gRPC: listed, then taken from it by an operator.
    let mut client = connect(&addr).await.unwrap();
    let taken = client
        .acquire_lock(pb::AcquireLockRequest {
            name: "nightly-report".into(),
            holder: "ci-job-17".into(),
            ttl_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(taken.acquired);
    let token = taken.lock.unwrap().token;
    let ls = cli.run(&["locks", "ls", "--output", "json"]).await.unwrap();
    ok(&ls);
    let locks = ls.json().unwrap();
    let lock = &locks.as_array().unwrap()[0];
    assert_eq!(lock["name"], "nightly-report", "{locks}");
    assert_eq!(lock["owner"], "ci-job-17", "{locks}");
    assert_eq!(lock["token"], token, "{locks}");
    assert_eq!(lock["state"], "held", "{locks}");
    let table = cli.run(&["locks", "ls"]).await.unwrap();
    ok(&table);
    assert!(table.stdout.contains("ci-job-17"), "{}", table.describe());

    let released = cli
        .run(&["locks", "release", "nightly-report"])
        .await
        .unwrap();
    ok(&released);
    assert!(
        released.stdout.contains("ci-job-17"),
        "{}",
        released.describe()
    );
    let renewed = client
        .renew_lock(pb::RenewLockRequest {
            name: "nightly-report".into(),
            holder: "ci-job-17".into(),
            token,
            ttl_ms: 60_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!renewed.renewed, "the old holder's renew is fenced");
    let after = cli.run(&["locks", "ls", "--output", "json"]).await.unwrap();
    assert_eq!(after.json().unwrap()[0]["state"], "free");
    let missing = cli
        .run(&["locks", "release", "no-such-lock"])
        .await
        .unwrap();
    assert_eq!(missing.code, Some(2), "{}", missing.describe());
    assert!(missing.stderr.contains("not"), "{}", missing.describe());

    // Audited: the group's creation (and the refused one), the acquire and the release.
    for (action, result) in [
        ("shard_group_create", "applied"),
        ("shard_group_create", "noop"),
        ("shard_group_create", "failed"),
        ("lock_acquire", "applied"),
        ("lock_release", "applied"),
    ] {
        let (n,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM audit_log WHERE action = $1 AND result = $2")
                .bind(action)
                .bind(result)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert!(n >= 1, "no {action}/{result} audit row");
    }
}
