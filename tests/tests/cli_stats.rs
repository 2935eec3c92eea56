#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The backlog at a glance (issue 26), end to end on PostgreSQL and on SQLite: a real agent,
//! real gRPC, the `leasehold` binary. Known data in every state — waiting (due and not),
//! retrying (due and not), running, dead, and finished tasks whose `finished_at` is moved by
//! SQL into each window (1 min, 15 min, 1 h) and out of them, failed attempts retried and
//! final — then `leasehold types --output json` (OLDEST) and `leasehold stats --output json`
//! are compared, number by number, with counts the test computes in SQL of its own. Plus a
//! real failing task and a real success through the agent, so the attempts the agent itself
//! stores are counted too; and bad input and an unreachable agent exit as documented.

use std::time::Duration;

use leasehold_tests::calls::cli::{WAIT, fits, ok, refused};
use leasehold_tests::cli::Cli;
use leasehold_tests::fleet::{START_WAIT, spawn_agent, start_agent};
use leasehold_tests::{TestDb, scratch_dir, wait_until};
use serde_json::Value;
use sqlx::{AssertSqlSafe, SqlitePool};

/// The database of a test, PostgreSQL or SQLite, with the SQL that differs between them.
enum Db {
    Pg(sqlx::PgPool),
    Lite(SqlitePool),
}

/// SQLite's now, in µs (as the store writes times).
const LITE_NOW: &str =
    "(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)";

impl Db {
    /// A time `secs` seconds from now (negative: ago), as SQL.
    fn at(&self, secs: i64) -> String {
        match self {
            Db::Pg(_) => format!("now() + interval '{secs} seconds'"),
            Db::Lite(_) => format!("({LITE_NOW} + {secs} * 1000000)"),
        }
    }

    fn now(&self) -> String {
        self.at(0)
    }

    async fn exec(&self, sql: &str) {
        match self {
            Db::Pg(pool) => sqlx::query(AssertSqlSafe(sql.to_owned()))
                .execute(pool)
                .await
                .map(|_| ()),
            Db::Lite(pool) => sqlx::query(AssertSqlSafe(sql.to_owned()))
                .execute(pool)
                .await
                .map(|_| ()),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn count(&self, sql: &str) -> i64 {
        self.opt(sql).await.unwrap_or(0)
    }

    async fn opt(&self, sql: &str) -> Option<i64> {
        match self {
            Db::Pg(pool) => {
                sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(sql.to_owned()))
                    .fetch_one(pool)
                    .await
            }
            Db::Lite(pool) => {
                sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(sql.to_owned()))
                    .fetch_one(pool)
                    .await
            }
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Inserts a task of `task_type` in `status`, due `due` seconds from now, finished `ended`
    /// seconds from now (finished statuses), with `final_outcome` (PostgreSQL: the column; on
    /// SQLite an attempt row, as that store records every attempt there); returns its id.
    async fn task(
        &self,
        task_type: &str,
        status: &str,
        due: i64,
        ended: Option<i64>,
        final_outcome: Option<&str>,
    ) -> i64 {
        let leased = matches!(status, "running" | "cancel_requested");
        let lease = if leased {
            format!("'stats-test#1', {}, {}", self.at(3600), self.now())
        } else {
            "NULL, NULL, NULL".to_string()
        };
        let finished = ended.map_or("NULL".to_string(), |s| self.at(s));
        let started = if status == "queued" {
            "NULL".to_string()
        } else {
            self.at(ended.unwrap_or(0) - 1)
        };
        let attempt = i32::from(status != "queued");
        let pg_final = match (self, final_outcome) {
            (Db::Pg(_), Some(o)) => format!("'{o}'"),
            _ => "NULL".to_string(),
        };
        // PostgreSQL: a finished task lies in the partition of its day, as the store moves it.
        let (extra_col, extra_val) = match self {
            Db::Pg(_) => (
                ", final_outcome, done_on",
                format!(
                    ", {pg_final}, {}",
                    ended.map_or("'infinity'".to_string(), |_| format!(
                        "(({finished}) AT TIME ZONE 'UTC')::date"
                    ))
                ),
            ),
            Db::Lite(_) => ("", String::new()),
        };
        let sql = format!(
            "INSERT INTO tasks (task_type, status, available_at, attempt, lease_epoch, \
             lease_owner, lease_until, heartbeat_at, started_at, finished_at{extra_col}) \
             VALUES ('{task_type}', '{status}', {}, {attempt}, {attempt}, {lease}, {started}, \
             {finished}{extra_val}) RETURNING id",
            self.at(due)
        );
        let id = self.count(&sql).await;
        if let (Db::Lite(_), Some(outcome), Some(ended)) = (self, final_outcome, ended) {
            self.attempt(id, 1, outcome, ended).await;
        }
        id
    }

    /// An attempt row of task `id` at `epoch` that ended `ended` seconds from now.
    async fn attempt(&self, id: i64, epoch: i64, outcome: &str, ended: i64) {
        let table = match self {
            Db::Pg(_) => "task_attempt_rows",
            Db::Lite(_) => "task_attempts",
        };
        self.exec(&format!(
            "INSERT INTO {table} (task_id, epoch, attempt, agent, started_at, finished_at, \
             outcome) VALUES ({id}, {epoch}, {epoch}, 'stats-test#1', {}, {}, '{outcome}')",
            self.at(ended - 1),
            self.at(ended)
        ))
        .await;
    }

    /// Every attempt that ended `failed` within the last `secs` seconds, read the plain way:
    /// PostgreSQL's `task_attempts` view (attempt rows and final attempts in the task rows),
    /// SQLite's `task_attempts` table.
    async fn failed_attempts(&self, secs: i64) -> i64 {
        self.count(&format!(
            "SELECT count(*) FROM task_attempts WHERE outcome = 'failed' \
             AND finished_at >= {} AND finished_at <= {}",
            self.at(-secs),
            self.now()
        ))
        .await
    }

    /// Tasks in `statuses` that finished within the last `secs` seconds.
    async fn finished(&self, statuses: &str, secs: i64) -> i64 {
        self.count(&format!(
            "SELECT count(*) FROM tasks WHERE status IN ({statuses}) \
             AND finished_at >= {} AND finished_at <= {}",
            self.at(-secs),
            self.now()
        ))
        .await
    }

    /// How long (ms) the oldest waiting task (of `task_type`, or of any) has been due.
    async fn oldest_ms(&self, task_type: Option<&str>) -> Option<i64> {
        let of_type = task_type.map_or(String::new(), |t| format!("AND task_type = '{t}'"));
        let age = match self {
            Db::Pg(_) => "(extract(epoch FROM now() - min(available_at)) * 1000)::bigint",
            Db::Lite(_) => &format!("({LITE_NOW} - min(available_at)) / 1000"),
        };
        self.opt(&format!(
            "SELECT {age} FROM tasks WHERE status IN ('queued', 'retry_wait') \
             AND available_at <= {} {of_type}",
            self.now()
        ))
        .await
    }

    /// Tasks matching `filter` (SQL over `tasks`), of `task_type` or of any.
    async fn tasks(&self, filter: &str, task_type: Option<&str>) -> i64 {
        let of_type = task_type.map_or(String::new(), |t| format!("AND task_type = '{t}'"));
        self.count(&format!(
            "SELECT count(*) FROM tasks WHERE {} {of_type}",
            filter.replace("NOW", &self.now())
        ))
        .await
    }
}

const QUEUED: &str = "status = 'queued' AND available_at <= NOW";
const SCHEDULED: &str = "status = 'queued' AND available_at > NOW";
const RETRYING: &str = "status = 'retry_wait'";
const RUNNING: &str = "status IN ('running', 'cancel_requested')";
const DEAD: &str = "status = 'dead'";

/// The known data: no agent serves `stats.a`, `stats.b` or `stats.later`, so they stay as
/// written (leases end in an hour: no recovery moves them). Finished tasks sit inside a window
/// (5–25 s, 5–12 min, 30–50 min ago) or outside them all (over 1 h 23 min ago), far from every
/// edge the test's own run time could move them across; it is written just before the checks.
async fn build(db: &Db) {
    // Waiting: due two minutes and 30 s ago, and one due in an hour.
    db.task("stats.a", "queued", -120, None, None).await;
    db.task("stats.a", "queued", -30, None, None).await;
    db.task("stats.a", "queued", 3600, None, None).await;
    // Retrying: one due five minutes ago (the oldest of stats.b), one due in ten minutes.
    db.task("stats.b", "retry_wait", -300, None, None).await;
    db.task("stats.b", "retry_wait", 600, None, None).await;
    db.task("stats.b", "queued", -5, None, None).await;
    // Only later: nothing waits.
    db.task("stats.later", "queued", 7200, None, None).await;
    db.task("stats.a", "running", -10, None, None).await;
    db.task("stats.a", "running", -10, None, None).await;
    db.task("stats.b", "cancel_requested", -10, None, None)
        .await;
    // Finished, by window.
    for (status, ages, last) in [
        (
            "succeeded",
            &[
                -10, -10, -12, -300, -300, -1800, -1800, -1900, -2000, -7200, -9000,
            ][..],
            None,
        ),
        ("partially_succeeded", &[-20, -600][..], None),
        (
            "dead",
            &[-20, -600, -600, -2800, -10_000][..],
            Some("failed"),
        ),
        ("cancelled", &[-25, -700, -3000, -3000, -9000][..], None),
    ] {
        for &ended in ages {
            db.task("stats.a", status, -4000, Some(ended), last).await;
        }
    }
    // Failed attempts the tasks outlived (a retry followed), and attempts that are not
    // failures (a release, a lost lease): not counted.
    let host = db
        .task("stats.b", "succeeded", -4000, Some(-15), None)
        .await;
    for (epoch, (outcome, ended)) in [
        ("failed", -5),
        ("failed", -8),
        ("failed", -400),
        ("failed", -2000),
        ("failed", -2100),
        ("failed", -2200),
        ("failed", -5000),
        ("released", -6),
        ("lease_expired", -500),
    ]
    .into_iter()
    .enumerate()
    {
        db.attempt(host, 100 + epoch as i64, outcome, ended).await;
    }
}

fn num(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

/// An age read by the agent at most a little before the test's own (the agent caches its
/// answer for up to a second; the machine is slow at times).
#[track_caller]
fn age_close(what: &str, agent: &Value, sql: Option<i64>) {
    match (agent.as_i64(), sql) {
        (None, None) => assert!(agent.is_null(), "{what}: {agent}"),
        (Some(a), Some(s)) => assert!(
            a <= s + 50 && a >= s - 10_000,
            "{what}: the agent says {a} ms, SQL {s} ms"
        ),
        (a, s) => panic!("{what}: the agent says {a:?}, SQL {s:?}"),
    }
}

async fn check_types(db: &Db, cli: &Cli) {
    let o = cli.run(&["--output", "json", "types"]).await.unwrap();
    ok(&o);
    let types: Value = o.json().unwrap();
    let listed = types["types"].as_array().unwrap();
    for name in ["stats.a", "stats.b", "stats.later"] {
        let t = listed
            .iter()
            .find(|t| t["task_type"] == name)
            .unwrap_or_else(|| panic!("{name} not in {types}"));
        for (field, filter) in [
            ("queued", QUEUED),
            ("scheduled", SCHEDULED),
            ("retrying", RETRYING),
            ("running", RUNNING),
            ("dead", DEAD),
        ] {
            assert_eq!(
                num(t, field),
                db.tasks(filter, Some(name)).await,
                "{name} {field}: {t}"
            );
        }
        age_close(
            &format!("{name} oldest"),
            &t["oldest_waiting_ms"],
            db.oldest_ms(Some(name)).await,
        );
    }
    // The known ages: stats.a waits since two minutes, stats.b since five (its due retry),
    // stats.later not at all.
    let oldest = |name: &str| {
        listed.iter().find(|t| t["task_type"] == name).unwrap()["oldest_waiting_ms"].as_i64()
    };
    assert!(oldest("stats.a").is_some_and(|ms| (120_000..180_000).contains(&ms)));
    assert!(oldest("stats.b").is_some_and(|ms| (300_000..360_000).contains(&ms)));
    assert_eq!(oldest("stats.later"), None);

    // The table has the OLDEST column, within 80 columns.
    let o = cli.run(&["types"]).await.unwrap();
    ok(&o);
    fits(&o);
    let header: Vec<&str> = o
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert!(header.contains(&"OLDEST"), "{}", o.stdout);
    let later = o
        .stdout
        .lines()
        .find(|l| l.starts_with("stats.later"))
        .unwrap();
    let at = header.iter().position(|h| *h == "OLDEST").unwrap();
    assert_eq!(later.split_whitespace().nth(at), Some("-"), "{}", o.stdout);
}

async fn check_stats(db: &Db, cli: &Cli) {
    let o = cli.run(&["--output", "json", "stats"]).await.unwrap();
    ok(&o);
    let s: Value = o.json().unwrap();
    for (field, filter) in [
        ("queued", QUEUED),
        ("scheduled", SCHEDULED),
        ("retrying", RETRYING),
        ("running", RUNNING),
        ("dead", DEAD),
    ] {
        assert_eq!(num(&s, field), db.tasks(filter, None).await, "{field}: {s}");
    }
    age_close("oldest", &s["oldest_waiting_ms"], db.oldest_ms(None).await);
    let windows = s["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 3, "{s}");
    for (w, (name, secs)) in windows.iter().zip([("1m", 60), ("15m", 900), ("1h", 3600)]) {
        assert_eq!(w["window"], name, "{s}");
        assert_eq!(num(w, "window_ms"), secs * 1000, "{s}");
        let succeeded = db
            .finished("'succeeded', 'partially_succeeded'", secs)
            .await;
        let failed = db.failed_attempts(secs).await;
        assert_eq!(num(w, "succeeded"), succeeded, "{name}: {w}");
        assert_eq!(
            num(w, "dead_lettered"),
            db.finished("'dead'", secs).await,
            "{name}: {w}"
        );
        assert_eq!(
            num(w, "cancelled"),
            db.finished("'cancelled'", secs).await,
            "{name}: {w}"
        );
        assert_eq!(num(w, "failed_attempts"), failed, "{name}: {w}");
        let throughput = w["throughput_per_sec"].as_f64().unwrap();
        assert!(
            (throughput - succeeded as f64 / secs as f64).abs() < 1e-9,
            "{name}: {w}"
        );
        let rate = failed as f64 / (failed + succeeded) as f64;
        assert!(
            (w["failure_rate"].as_f64().unwrap() - rate).abs() < 1e-9,
            "{name}: {w}"
        );
    }
    // The data's own numbers, so the SQL above cannot agree with the agent on nothing: in the
    // last minute 3 + 1 succeeded (+ the host of the retries, + the real noop), 1 dead (+ the
    // real failure), 1 cancelled, 2 failed attempts (+ the dead task's final one, + the real
    // failure); in the hour 9 + 2 (+ 2), 4 (+ 1), 4, 6 + 4 (+ 1).
    let w1 = &windows[0];
    assert_eq!(
        (
            num(w1, "succeeded"),
            num(w1, "dead_lettered"),
            num(w1, "cancelled"),
            num(w1, "failed_attempts")
        ),
        (6, 2, 1, 4),
        "{w1}"
    );
    let h1 = &windows[2];
    assert_eq!(
        (
            num(h1, "succeeded"),
            num(h1, "dead_lettered"),
            num(h1, "cancelled"),
            num(h1, "failed_attempts")
        ),
        (13, 5, 4, 11),
        "{h1}"
    );

    // The text: compact, within 80 columns, the same numbers.
    let o = cli.run(&["stats"]).await.unwrap();
    ok(&o);
    fits(&o);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!("queued {} · later ", num(&s, "queued"))),
        "{}",
        o.stdout
    );
    assert!(
        lines[1].starts_with("oldest waiting: due for "),
        "{}",
        o.stdout
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        [
            "WINDOW",
            "SUCCEEDED",
            "DEAD",
            "CANCELLED",
            "FAILED",
            "PER",
            "SEC",
            "FAIL",
            "RATE"
        ]
    );
    let row: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(row[..5], ["1m", "6", "2", "1", "4"], "{}", o.stdout);
    assert_eq!(lines.len(), 6, "{}", o.stdout);
}

/// A real success and a real failure for good, through the agent (types `noop`, `fail`).
async fn run_real_tasks(db: &Db, cli: &Cli) {
    for args in [
        &["enqueue", "noop"][..],
        &["enqueue", "fail", "--max-attempts", "1"][..],
    ] {
        let o = cli.run(args).await.unwrap();
        assert_eq!(o.code, Some(0), "{}", o.describe());
    }
    wait_until("the real tasks finished", WAIT, || async {
        Ok(db
            .tasks(
                "task_type IN ('noop', 'fail') AND status IN ('succeeded', 'dead')",
                None,
            )
            .await
            == 2)
    })
    .await
    .unwrap();
}

async fn bad_input(cli: &Cli) {
    let o = cli.run(&["stats", "--bogus"]).await.unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, "", "{}", o.describe());
    assert!(o.stderr.contains("--bogus"), "{}", o.describe());
    let o = cli.run(&["stats", "extra"]).await.unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    // Nothing listens on port 1.
    let nowhere = cli.at("127.0.0.1:1");
    for args in [&["stats"][..], &["--output", "json", "stats"][..]] {
        let o = nowhere.run(args).await.unwrap();
        let line = refused(&o, 3);
        assert!(line.contains("127.0.0.1:1"), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_and_stats_agree_with_sql_on_postgres() {
    let test_db = TestDb::new().await.unwrap();
    let db = Db::Pg(test_db.pool.clone());
    let (_agent, addr) = start_agent(&test_db, "stats-pg", "noop,fail", &[], Vec::new())
        .await
        .unwrap();
    let cli = Cli::new(&addr).await.unwrap();
    run_real_tasks(&db, &cli).await;
    build(&db).await;
    // The real failure is in the task row (its final attempt), not an attempt row.
    assert_eq!(
        db.count(
            "SELECT count(*) FROM tasks WHERE task_type = 'fail' AND final_outcome = 'failed'"
        )
        .await,
        1
    );
    check_types(&db, &cli).await;
    check_stats(&db, &cli).await;
    bad_input(&cli).await;
}

/// The gRPC address a SQLite agent registered.
async fn lite_address(pool: &SqlitePool, name: &str) -> String {
    let deadline = std::time::Instant::now() + START_WAIT;
    loop {
        let found = sqlx::query_scalar::<_, String>(
            "SELECT grpc_address FROM agents WHERE name = ?1 AND state <> 'stopped' \
             AND grpc_address IS NOT NULL",
        )
        .bind(name)
        .fetch_optional(pool)
        .await;
        if let Ok(Some(addr)) = found {
            return addr;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "agent {name} registered no address: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_and_stats_agree_with_sql_on_sqlite() {
    let dir = scratch_dir("leasehold-cli-stats").unwrap();
    let url = format!("sqlite://{}", dir.join("queue.sqlite").display());
    // The agent creates and migrates the file; the test's rows go in once it has.
    let _agent = spawn_agent(
        "leasehold-agent",
        &url,
        "stats-lite",
        "noop,fail",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join("queue.sqlite"))
        .busy_timeout(Duration::from_secs(10));
    let deadline = std::time::Instant::now() + START_WAIT;
    let pool = loop {
        if dir.join("queue.sqlite").exists()
            && let Ok(pool) = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options.clone())
                .await
        {
            break pool;
        }
        assert!(std::time::Instant::now() < deadline, "no database file");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let addr = lite_address(&pool, "stats-lite").await;
    let db = Db::Lite(pool);
    let cli = Cli::new(&addr).await.unwrap();
    run_real_tasks(&db, &cli).await;
    build(&db).await;
    check_types(&db, &cli).await;
    check_stats(&db, &cli).await;
    bad_input(&cli).await;
}
