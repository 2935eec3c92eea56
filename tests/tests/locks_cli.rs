#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold locks acquire|renew|release --holder --fencing-token` end to end (issue 26): locks held
//! by shell scripts, through the real `leasehold` binary, a real agent, gRPC and PostgreSQL.
//! Two acquires of one name: the second exits 1 naming the first's holder and token; a
//! `--wait`ing acquire gets the lock once another process releases it mid-wait, and one whose
//! wait runs out exits 1 after about the wait, naming the holder, the row unchanged; a release or
//! renew with a wrong token or holder exits 1 and changes nothing in `resource_leases`; a
//! renew moves `lease_until`; the JSON parses; a viewer is refused (exit 4) and bad input
//! exits 2, each with nothing changed; the forced release still frees anyone's lock.

use leasehold_tests::TestDb;
use leasehold_tests::calls::cli::{WAIT, start};
use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::{ConfigToken, tokens_config};
use serde_json::Value;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};

const OPERATOR: &str = "olga-operator-secret-0123456789ab";
const VIEWER: &str = "vera-viewer-secret-fedcba98765432";
const LOCK: &str = "deploy/prod";

/// `resource_leases`' whole row of a lock as JSON text; `None` when there is no row.
async fn row(pool: &PgPool, name: &str) -> Option<String> {
    sqlx::query_scalar("SELECT to_jsonb(r)::text FROM resource_leases r WHERE name = $1")
        .bind(name)
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// The owner and token of a lock's row.
async fn holding(pool: &PgPool, name: &str) -> (Option<String>, i64) {
    sqlx::query_as("SELECT owner, token FROM resource_leases WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `lease_until` of a lock's row, in whole ms (cut, as the agent sends it).
async fn lease_until_ms(pool: &PgPool, name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT floor(extract(epoch FROM lease_until) * 1000)::bigint FROM resource_leases \
         WHERE name = $1",
    )
    .bind(name)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[track_caller]
fn code(o: &CliOutput, want: i32) {
    assert_eq!(o.code, Some(want), "{}", o.describe());
}

/// Exit `want`, one `leasehold: …` line on stderr containing `needle`, nothing on stdout.
#[track_caller]
fn refused(o: &CliOutput, want: i32, needle: &str) {
    code(o, want);
    assert_eq!(o.stdout, "", "{}", o.describe());
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.describe());
    assert!(o.stderr.starts_with("leasehold: "), "{}", o.describe());
    assert!(o.stderr.contains(needle), "{needle:?}: {}", o.describe());
}

/// `locks acquire NAME --for 2m --output json` and its JSON line.
async fn acquire_json(cli: &Cli, extra: &[&str]) -> (CliOutput, Value) {
    let mut args = vec!["--output", "json", "locks", "acquire", LOCK, "--for", "2m"];
    args.extend_from_slice(extra);
    let o = cli.run(&args).await.unwrap();
    let json = o.json().unwrap_or_else(|e| panic!("{e}: {}", o.describe()));
    (o, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_take_renew_and_give_back_locks_through_the_cli() {
    let db = TestDb::new().await.unwrap();
    let config = tokens_config(
        "leasehold-locks-cli",
        &[
            ConfigToken::operator("olga", OPERATOR),
            ConfigToken::viewer("vera", VIEWER),
        ],
    )
    .unwrap();
    let f = start(
        &db,
        "locks-cli",
        "noop",
        &["--config", config.to_str().unwrap()],
    )
    .await
    .unwrap();
    let cli = f.cli.with_token(OPERATOR);
    let viewer = f.cli.with_token(VIEWER);
    let pool = &db.pool;

    // --- the first script takes it: exit 0, JSON with its default holder and the token.
    let (first, a) = acquire_json(&cli, &[]).await;
    code(&first, 0);
    assert_eq!(first.stderr, "", "{}", first.describe());
    assert_eq!(a["name"], LOCK, "{a}");
    assert_eq!(a["acquired"], true, "{a}");
    assert_eq!(a["state"], "held", "{a}");
    let holder_a = a["holder"].as_str().unwrap().to_owned();
    let token_a = a["token"].as_i64().unwrap();
    let (user_host, pid) = holder_a
        .strip_prefix("cli:")
        .and_then(|rest| rest.rsplit_once(':'))
        .unwrap_or_else(|| panic!("holder {holder_a:?} is not cli:USER@HOST:PID"));
    assert!(user_host.contains('@'), "{holder_a}");
    assert!(pid.parse::<u32>().is_ok(), "{holder_a}");
    assert!(token_a >= 1, "{a}");
    let until_ms = a["lease_until_ms"].as_i64().unwrap();
    assert_eq!(until_ms, lease_until_ms(pool, LOCK).await, "{a}");
    assert!(a["lease_until"].as_str().unwrap().ends_with('Z'), "{a}");
    assert_eq!(holding(pool, LOCK).await, (Some(holder_a.clone()), token_a));

    // --- a second script: refused with exit 1, naming the holder, token and until; no change.
    let before = row(pool, LOCK).await;
    let second = cli
        .run(&["locks", "acquire", LOCK, "--for", "60s"])
        .await
        .unwrap();
    code(&second, 1);
    assert_eq!(second.stderr, "", "{}", second.describe());
    let line = second.stdout.trim_end();
    assert!(
        line.starts_with(&format!(
            "lock {LOCK} is held by {holder_a} (token {token_a}) until "
        )),
        "{}",
        second.describe()
    );
    let (o, b) = acquire_json(&cli, &[]).await;
    code(&o, 1);
    assert_eq!(b["acquired"], false, "{b}");
    assert_eq!(b["holder"], holder_a.as_str(), "{b}");
    assert_eq!(b["token"], token_a, "{b}");
    assert_eq!(b["lease_until_ms"], until_ms, "{b}");
    assert_eq!(
        row(pool, LOCK).await,
        before,
        "a refused acquire changed the row"
    );

    // --- bad input: exit 2 before any call, nothing changed.
    for (args, needle) in [
        (
            vec!["locks", "acquire", "Deploy/Prod", "--for", "1m"],
            "invalid lock name",
        ),
        (
            vec!["locks", "acquire", "fresh", "--for", "0s"],
            "1s to 1day",
        ),
        (
            vec!["locks", "acquire", "fresh", "--for", "2days"],
            "1s to 1day",
        ),
        (
            vec!["locks", "acquire", "fresh", "--for", "1m", "--wait", "0s"],
            "--wait",
        ),
        (
            vec![
                "locks",
                "acquire",
                "fresh",
                "--for",
                "1m",
                "--at-least-for",
                "5m",
                "--at-most-for",
                "1m",
            ],
            "--at-most-for (1m) must be at least --at-least-for (5m)",
        ),
        (
            vec!["locks", "release", LOCK, "--holder", holder_a.as_str()],
            "--fencing-token",
        ),
        (
            vec![
                "locks",
                "renew",
                LOCK,
                "--holder",
                holder_a.as_str(),
                "--fencing-token",
                "0",
                "--for",
                "1m",
            ],
            "invalid token",
        ),
        (
            vec![
                "locks",
                "renew",
                LOCK,
                "--holder",
                holder_a.as_str(),
                "--fencing-token",
                "1",
                "--for",
                "1m",
                "--wait",
                "1m",
            ],
            "--wait",
        ),
    ] {
        let o = cli.run(&args).await.unwrap();
        code(&o, 2);
        assert!(o.stderr.contains(needle), "{needle:?}: {}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
    }
    assert_eq!(row(pool, "fresh").await, None, "bad input created a lock");
    assert_eq!(row(pool, LOCK).await, before, "bad input changed the lock");

    // --- a viewer: every lock action refused (exit 4), nothing changed.
    let t = token_a.to_string();
    for args in [
        vec!["locks", "acquire", "fresh", "--for", "1m"],
        vec![
            "locks",
            "renew",
            LOCK,
            "--holder",
            holder_a.as_str(),
            "--fencing-token",
            t.as_str(),
            "--for",
            "5m",
        ],
        vec![
            "locks",
            "release",
            LOCK,
            "--holder",
            holder_a.as_str(),
            "--fencing-token",
            t.as_str(),
        ],
        vec!["locks", "release", LOCK],
    ] {
        let o = viewer.run(&args).await.unwrap();
        refused(&o, 4, "(permission denied)");
    }
    assert_eq!(row(pool, "fresh").await, None, "a viewer created a lock");
    assert_eq!(row(pool, LOCK).await, before, "a viewer changed the lock");
    let denied: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE actor = 'vera' AND result = 'denied' \
         AND action IN ('lock_acquire', 'lock_renew', 'lock_release')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(denied >= 1, "the viewer's refusals are audited");

    // --- a third script waits; the first gives the lock back from another process
    // mid-wait, and the waiting one takes it with the next token.
    let mut waiting = cli
        .spawn(&[
            "--output", "json", "locks", "acquire", LOCK, "--for", "2m", "--wait", "60s",
        ])
        .unwrap();
    let stderr = waiting.stderr.take().unwrap();
    let mut notes = BufReader::new(stderr).lines();
    let note = tokio::time::timeout(WAIT, notes.next_line())
        .await
        .expect("the waiting acquire says it waits")
        .unwrap()
        .unwrap_or_default();
    assert!(
        note.starts_with(&format!("leasehold: lock {LOCK} is held by {holder_a}"))
            && note.ends_with("; waiting"),
        "{note}"
    );
    // Still waiting, still not its lock.
    assert_eq!(holding(pool, LOCK).await, (Some(holder_a.clone()), token_a));
    assert!(waiting.try_wait().unwrap().is_none(), "it gave up early");

    // A wrong token and a wrong holder are refused (exit 1) and change nothing.
    let stale = (token_a + 5).to_string();
    for (holder, token) in [
        (holder_a.as_str(), stale.as_str()),
        ("someone-else", t.as_str()),
    ] {
        let o = cli
            .run(&[
                "locks",
                "release",
                LOCK,
                "--holder",
                holder,
                "--fencing-token",
                token,
            ])
            .await
            .unwrap();
        code(&o, 1);
        assert_eq!(
            o.stdout.trim_end(),
            format!(
                "lock {LOCK} is no longer held by {holder} with token {token} (held by \
                 {holder_a}, token {token_a}, until {}); nothing changed",
                a["lease_until"].as_str().unwrap()
            ),
            "{}",
            o.describe()
        );
        assert_eq!(
            row(pool, LOCK).await,
            before,
            "a fenced release changed the lock"
        );
    }

    let released = cli
        .run(&[
            "locks",
            "release",
            LOCK,
            "--holder",
            &holder_a,
            "--fencing-token",
            &t,
        ])
        .await
        .unwrap();
    code(&released, 0);
    assert_eq!(
        released.stdout.trim_end(),
        format!("released lock {LOCK} (holder {holder_a}, token {t})"),
        "{}",
        released.describe()
    );
    let done = tokio::time::timeout(WAIT, waiting.wait_with_output())
        .await
        .expect("the waiting acquire ends once the lock is free")
        .unwrap();
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    let c: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(c["acquired"], true, "{c}");
    let holder_c = c["holder"].as_str().unwrap().to_owned();
    let token_c = c["token"].as_i64().unwrap();
    assert_ne!(holder_c, holder_a, "each process is its own holder");
    assert_eq!(token_c, token_a + 1, "a new holding, the next token");
    assert_eq!(holding(pool, LOCK).await, (Some(holder_c.clone()), token_c));

    // --- the first script's renew is fenced now: exit 1, nothing changed.
    let before = row(pool, LOCK).await;
    let o = cli
        .run(&[
            "locks",
            "renew",
            LOCK,
            "--holder",
            &holder_a,
            "--fencing-token",
            &t,
            "--for",
            "5m",
        ])
        .await
        .unwrap();
    code(&o, 1);
    assert!(
        o.stdout
            .contains(&format!("no longer held by {holder_a} with token {t}")),
        "{}",
        o.describe()
    );
    assert_eq!(
        row(pool, LOCK).await,
        before,
        "a fenced renew changed the lock"
    );

    // --- the holder's renew extends lease_until (2 min → 10 min from now).
    let tc = token_c.to_string();
    let until_before = lease_until_ms(pool, LOCK).await;
    let o = cli
        .run(&[
            "--output",
            "json",
            "locks",
            "renew",
            LOCK,
            "--holder",
            &holder_c,
            "--fencing-token",
            &tc,
            "--for",
            "10m",
        ])
        .await
        .unwrap();
    code(&o, 0);
    let r = o.json().unwrap();
    assert_eq!(r["renewed"], true, "{r}");
    assert_eq!(r["token"], token_c, "{r}");
    assert_eq!(r["holder"], holder_c.as_str(), "{r}");
    let until_after = lease_until_ms(pool, LOCK).await;
    assert_eq!(r["lease_until_ms"], until_after, "{r}");
    assert!(
        until_after > until_before + 300_000,
        "renew for 10m moved lease_until from {until_before} to {until_after}"
    );
    let o = cli
        .run(&[
            "locks",
            "renew",
            LOCK,
            "--holder",
            &holder_c,
            "--fencing-token",
            &tc,
            "--for",
            "5m",
        ])
        .await
        .unwrap();
    code(&o, 0);
    assert!(
        o.stdout.starts_with(&format!(
            "renewed lock {LOCK} (holder {holder_c}, token {tc}, until "
        )),
        "{}",
        o.describe()
    );

    // --- its own release, in JSON: free at once.
    let o = cli
        .run(&[
            "--output",
            "json",
            "locks",
            "release",
            LOCK,
            "--holder",
            &holder_c,
            "--fencing-token",
            &tc,
        ])
        .await
        .unwrap();
    code(&o, 0);
    let g = o.json().unwrap();
    assert_eq!(g["released"], true, "{g}");
    assert_eq!(g["state"], "free", "{g}");
    assert_eq!(holding(pool, LOCK).await, (None, token_c));

    // --- a chosen holder, held until its lock_at_least_for after the release.
    let (o, d) = acquire_json(&cli, &["--holder", "nightly job", "--at-least-for", "30s"]).await;
    code(&o, 0);
    assert_eq!(d["holder"], "nightly job", "{d}");
    let td = d["token"].as_i64().unwrap().to_string();
    let o = cli
        .run(&[
            "locks",
            "release",
            LOCK,
            "--holder",
            "nightly job",
            "--fencing-token",
            &td,
        ])
        .await
        .unwrap();
    code(&o, 0);
    assert!(
        o.stdout.contains("; it stays held until ") && o.stdout.contains("(lock_at_least_for)"),
        "{}",
        o.describe()
    );
    let o = cli
        .run(&["locks", "acquire", LOCK, "--for", "10s"])
        .await
        .unwrap();
    code(&o, 1);
    assert!(
        o.stdout
            .contains("(given back; held until its lock_at_least_for)"),
        "{}",
        o.describe()
    );

    // --- the operator's forced release still frees whoever holds it.
    let o = cli
        .run(&[
            "locks",
            "acquire",
            "reports/nightly",
            "--for",
            "1m",
            "--holder",
            "cron-7",
        ])
        .await
        .unwrap();
    code(&o, 0);
    let o = cli
        .run(&["locks", "release", "reports/nightly"])
        .await
        .unwrap();
    code(&o, 0);
    assert!(
        o.stdout
            .starts_with("released lock reports/nightly (held by cron-7, token 1)"),
        "{}",
        o.describe()
    );
    assert_eq!(holding(pool, "reports/nightly").await, (None, 1));

    // The acquires and releases the agent answered were audited as the operator's.
    for action in ["lock_acquire", "lock_release"] {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM audit_log WHERE actor = 'olga' AND action = $1",
        )
        .bind(action)
        .fetch_one(pool)
        .await
        .unwrap();
        assert!(n >= 1, "no {action} audit row of the operator");
    }
}

/// `locks acquire --wait D` on a lock someone else holds for longer: it tries for about D
/// (not once and out, not on and on), says on stderr that it waits, then exits 1 naming the
/// holder, and the lock's row is as the holder left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_exits_1_naming_the_holder_and_changes_nothing() {
    const WAIT_FOR: std::time::Duration = std::time::Duration::from_secs(3);
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "locks-wait", "noop", &[]).await.unwrap();
    let name = "deploy/wait";
    let o = f
        .cli
        .run(&[
            "--output", "json", "locks", "acquire", name, "--for", "2m", "--holder", "ci-job-1",
        ])
        .await
        .unwrap();
    code(&o, 0);
    let token = o.json().unwrap()["token"].as_i64().unwrap();
    let before = row(&db.pool, name).await;
    assert!(before.is_some());

    let started = std::time::Instant::now();
    let o = f
        .cli
        .run(&[
            "locks", "acquire", name, "--for", "1m", "--holder", "ci-job-2", "--wait", "3s",
        ])
        .await
        .unwrap();
    let took = started.elapsed();
    code(&o, 1);
    assert!(
        o.stdout.starts_with(&format!(
            "lock {name} is held by ci-job-1 (token {token}) until "
        )),
        "{}",
        o.describe()
    );
    assert!(
        o.stderr.contains("held by ci-job-1") && o.stderr.contains("waiting"),
        "{}",
        o.describe()
    );
    // About the wait: it did not give up at the first refusal, and its last try is within the
    // wait (a pause never runs past it); the rest is a process start and one call on a shared
    // machine.
    assert!(took >= WAIT_FOR, "gave up after {took:?}");
    assert!(
        took < WAIT_FOR + std::time::Duration::from_secs(5),
        "waited {took:?}"
    );
    assert_eq!(
        row(&db.pool, name).await,
        before,
        "a wait that ran out changed the row"
    );
    assert_eq!(
        holding(&db.pool, name).await,
        (Some("ci-job-1".into()), token)
    );
    db.drop_db().await.unwrap();
}
