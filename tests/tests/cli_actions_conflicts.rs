#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! T27 end to end through the `leasehold` binary: two operators issuing conflicting actions,
//! viewers denied. Two CLI processes race cancel against requeue, pause against resume and
//! two concurrency limits; the audit log is replayed through the state machine and must agree
//! with every answer and with the final rows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use leasehold_tests::calls::cli::{AuditRow, WAIT, audit, digest, ok, refused, start};
use leasehold_tests::cli::CliOutput;
use leasehold_tests::inspect::{counted_audit_rows, last_audit_id, policy_row as policy};
use leasehold_tests::{TaskSpec, TestDb, count, insert_task, scratch_dir, task_row};
use serde_json::{Value, json};
use sqlx::PgPool;

// -------------------------------------------------------------------------------------------
// T27: two operators issuing conflicting actions; viewers denied
// -------------------------------------------------------------------------------------------

const ALICE: &str = "alice-operator-secret-0123456789";
const BOB: &str = "bob-operator-secret-9876543210ab";
const VIEWER: &str = "val-viewer-secret-fedcba987654321";
const T27_TYPE: &str = "t27.job";

fn t27_config() -> PathBuf {
    let path = scratch_dir("leasehold-cli-t27").unwrap().join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "[[tokens]]\nname = \"alice\"\nrole = \"operator\"\nsecret = {ALICE:?}\n\n\
             [[tokens]]\nname = \"bob\"\nrole = \"operator\"\nsecret = {BOB:?}\n\n\
             [[tokens]]\nname = \"val\"\nrole = \"viewer\"\nsecret = {VIEWER:?}\n"
        ),
    )
    .unwrap();
    path
}

/// Audit rows with their ids, after `after`, of `actions` on `target_prefix…`.
async fn audit_since(pool: &PgPool, after: i64) -> Vec<(i64, AuditRow)> {
    let rows: Vec<(i64, String, String, String, String, String)> = sqlx::query_as(
        "SELECT id, actor, role, action, target, result FROM audit_log WHERE id > $1 ORDER BY id",
    )
    .bind(after)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(id, a, r, ac, t, res)| (id, (a, r, ac, t, res)))
        .collect()
}

/// Per task id: `Some(json line)` for an accepted call, `None` for a refused one (its stderr
/// line), from one `cancel`/`requeue` process over `ids`. Every id must be answered once.
fn answers(o: &CliOutput, verb: &str, ids: &[i64]) -> BTreeMap<i64, Option<Value>> {
    let mut out = BTreeMap::new();
    for line in o.json_lines().unwrap() {
        let id = line["id"].as_i64().unwrap();
        // "Already finished" / "already waiting": the agent refused (audited `failed`) and the
        // CLI said why without calling it a failure.
        let refused = line["outcome"]
            .as_str()
            .is_some_and(|o| o.starts_with("already_"));
        let answer = (!refused).then_some(line);
        assert!(
            out.insert(id, answer).is_none(),
            "{id} twice: {}",
            o.describe()
        );
    }
    for line in o.stderr.lines() {
        let id: i64 = line
            .strip_prefix(&format!("leasehold: {verb} task "))
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("an unexpected error line {line:?}: {}", o.describe()));
        assert!(
            line.ends_with("(failed precondition)"),
            "{line}: {}",
            o.describe()
        );
        assert!(
            out.insert(id, None).is_none(),
            "{id} twice: {}",
            o.describe()
        );
    }
    assert_eq!(
        out.keys().copied().collect::<Vec<_>>(),
        {
            let mut sorted = ids.to_vec();
            sorted.sort_unstable();
            sorted
        },
        "every id answered once: {}",
        o.describe()
    );
    // "Already finished / waiting" answers are said on stdout and are not failures.
    let refused_any = !o.stderr.trim().is_empty();
    assert_eq!(
        o.code,
        Some(if refused_any { 2 } else { 0 }),
        "{}",
        o.describe()
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t27_conflicting_operators_make_only_legal_transitions_and_viewers_are_denied() {
    let db = TestDb::new().await.unwrap();
    let config = t27_config();
    let mut f = start(&db, "t27", "noop", &["--config", config.to_str().unwrap()])
        .await
        .unwrap();
    let alice = f.cli.with_token(ALICE);
    let bob = f.cli.with_token(BOB);
    let val = f.cli.with_token(VIEWER);

    // --- cancel against requeue on dead and queued tasks of a type nobody runs.
    let mut initial: BTreeMap<i64, &str> = BTreeMap::new();
    for i in 0..16 {
        let status = if i % 2 == 0 { "dead" } else { "queued" };
        let id = insert_task(&db.pool, TaskSpec::new(T27_TYPE, status))
            .await
            .unwrap();
        initial.insert(id, status);
    }
    let ids: Vec<i64> = initial.keys().copied().collect();
    let forward: Vec<String> = ids.iter().map(i64::to_string).collect();
    let backward: Vec<String> = forward.iter().rev().cloned().collect();
    let mark = last_audit_id(&db.pool).await.unwrap();
    // Per (operator, task): the answers in call order.
    let mut said: BTreeMap<(&str, i64), Vec<Option<Value>>> = BTreeMap::new();
    for _round in 0..3 {
        let mut cancel_args = vec!["--output", "json", "cancel", "--no-wait"];
        cancel_args.extend(forward.iter().map(String::as_str));
        let mut requeue_args = vec!["--output", "json", "requeue"];
        requeue_args.extend(backward.iter().map(String::as_str));
        let (c, r) = tokio::join!(alice.run(&cancel_args), bob.run(&requeue_args));
        let (c, r) = (c.unwrap(), r.unwrap());
        for (id, answer) in answers(&c, "cancel", &ids) {
            if let Some(line) = &answer {
                assert_eq!(line["outcome"], "cancelled", "{line}");
                assert_eq!(line["status"], "cancelled", "{line}");
            }
            said.entry(("alice", id)).or_default().push(answer);
        }
        for (id, answer) in answers(&r, "requeue", &ids) {
            said.entry(("bob", id)).or_default().push(answer);
        }
    }
    // Replay each task's audit rows through the state machine, in commit order (each action
    // locks the row, so its audit row is written after the previous one committed).
    let rows = audit_since(&db.pool, mark).await;
    assert_eq!(rows.len(), 2 * 3 * ids.len(), "one audit row per call");
    for id in &ids {
        let target = format!("task:{id}");
        let mut state = initial[id].to_string();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, (actor, role, action, row_target, result)) in
            rows.iter().filter(|r| r.1.3 == target)
        {
            assert_eq!(role, "operator");
            assert_eq!(row_target, &target);
            let who = match (actor.as_str(), action.as_str()) {
                ("alice", "cancel") => "alice",
                ("bob", "requeue") => "bob",
                other => panic!("an unexpected audit row {other:?} on {target}"),
            };
            let k = seen.entry(who).or_default();
            let answer = &said[&(who, *id)][*k];
            *k += 1;
            let before = state.clone();
            match (action.as_str(), result.as_str()) {
                ("cancel", "applied") => {
                    assert_eq!(before, "queued", "cancel applied to a {before} task {id}");
                    state = "cancelled".into();
                }
                ("cancel", "failed") => {
                    assert!(
                        before == "dead" || before == "cancelled",
                        "cancel of a {before} task {id} failed"
                    );
                }
                ("requeue", "applied") => {
                    assert!(
                        before == "dead" || before == "cancelled",
                        "requeue applied to a {before} task {id}"
                    );
                    state = "queued".into();
                }
                ("requeue", "failed") => {
                    assert_eq!(before, "queued", "requeue of a {before} task {id} failed");
                }
                other => panic!("result {other:?} on {target}"),
            }
            // The answer each operator got matches the row.
            match answer {
                Some(line) => {
                    assert_eq!(result, "applied", "{who} was told {line} on {id}");
                    if who == "bob" {
                        assert_eq!(line["previous"], before.as_str(), "{line}");
                    }
                }
                None => assert_eq!(result, "failed", "{who} was refused on {id}"),
            }
        }
        assert_eq!(seen.get("alice"), Some(&3), "task {id}");
        assert_eq!(seen.get("bob"), Some(&3), "task {id}");
        let row = task_row(&db.pool, *id).await.unwrap();
        assert_eq!(row["status"], state.as_str(), "task {id}");
        match state.as_str() {
            "cancelled" => assert!(!row["finished_at"].is_null(), "{row}"),
            "queued" => assert!(row["finished_at"].is_null() && row["attempt"] == 0, "{row}"),
            "dead" => assert_eq!(initial[id], "dead", "{row}"),
            other => panic!("task {id} ended {other}"),
        }
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM task_attempts")
            .await
            .unwrap(),
        0
    );

    // --- pause against resume, and two different limits, from two concurrent operators.
    // Answers that disagree with the audit row of their call, reported at the end.
    let mut disagreements: Vec<String> = Vec::new();
    const CALLS: usize = 8;
    let scope = format!("policy:{T27_TYPE}");
    let mark = last_audit_id(&db.pool).await.unwrap();
    let (paused_said, resumed_said) = tokio::join!(
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    alice
                        .run(&["--output", "json", "pause", T27_TYPE])
                        .await
                        .unwrap(),
                );
            }
            out
        },
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    bob.run(&["--output", "json", "resume", T27_TYPE])
                        .await
                        .unwrap(),
                );
            }
            out
        }
    );
    let rows = audit_since(&db.pool, mark).await;
    assert_eq!(rows.len(), 2 * CALLS, "one audit row per call: {rows:?}");
    let mut paused = false;
    let (mut ai, mut bi) = (0, 0);
    for (_, (actor, role, action, target, result)) in &rows {
        assert_eq!(
            (role.as_str(), action.as_str(), target),
            ("operator", "policy_set", &scope)
        );
        let (o, to) = match actor.as_str() {
            "alice" => {
                ai += 1;
                (&paused_said[ai - 1], true)
            }
            "bob" => {
                bi += 1;
                (&resumed_said[bi - 1], false)
            }
            other => panic!("an audit row by {other}"),
        };
        if result == "failed" {
            // The change was refused (the policy guard timed out): a definite error, nothing
            // changed.
            assert_ne!(o.code, Some(0), "{}", o.describe());
            refused(o, o.code.unwrap());
            continue;
        }
        assert_eq!(o.code, Some(0), "{}", o.describe());
        // No live agent serves the t27 type: a pause succeeds and warns about that.
        assert!(
            o.stderr
                .lines()
                .all(|l| l.starts_with("leasehold: warning: ")),
            "{}",
            o.describe()
        );
        let changed = paused != to;
        assert_eq!(
            result,
            if changed { "applied" } else { "noop" },
            "{actor} set paused {to} over {paused}"
        );
        let answer = o.json().unwrap();
        let expected = json!({"task_type": T27_TYPE, "paused": to, "changed": changed});
        if answer != expected {
            disagreements.push(format!(
                "`{}` by {actor}: audit row {result} (paused {paused} -> {to}), answer {answer}",
                o.args.join(" ")
            ));
        }
        paused = to;
    }
    assert_eq!(
        policy(&db.pool, T27_TYPE).await.unwrap().map(|p| p.1),
        Some(paused)
    );

    let mark = last_audit_id(&db.pool).await.unwrap();
    let (three_said, five_said) = tokio::join!(
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    alice
                        .run(&[
                            "--output",
                            "json",
                            "concurrency",
                            "set",
                            "--type",
                            T27_TYPE,
                            "3",
                        ])
                        .await
                        .unwrap(),
                );
            }
            out
        },
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    bob.run(&[
                        "--output",
                        "json",
                        "concurrency",
                        "set",
                        "--type",
                        T27_TYPE,
                        "5",
                    ])
                    .await
                    .unwrap(),
                );
            }
            out
        }
    );
    let rows = audit_since(&db.pool, mark).await;
    assert_eq!(rows.len(), 2 * CALLS, "one audit row per call: {rows:?}");
    let mut limit: Option<u64> = None;
    let (mut ai, mut bi) = (0, 0);
    for (_, (actor, role, action, target, result)) in &rows {
        assert_eq!(
            (role.as_str(), action.as_str(), target),
            ("operator", "policy_set", &scope)
        );
        let (o, to) = match actor.as_str() {
            "alice" => {
                ai += 1;
                (&three_said[ai - 1], 3)
            }
            "bob" => {
                bi += 1;
                (&five_said[bi - 1], 5)
            }
            other => panic!("an audit row by {other}"),
        };
        if result == "failed" {
            assert_ne!(o.code, Some(0), "{}", o.describe());
            refused(o, o.code.unwrap());
            continue;
        }
        ok(o);
        let changed = limit != Some(to);
        assert_eq!(result, if changed { "applied" } else { "noop" });
        let answer = o.json().unwrap();
        let expected =
            json!({"scope": "type", "task_type": T27_TYPE, "previous": limit, "limit": to});
        if answer != expected {
            disagreements.push(format!(
                "`{}` by {actor}: audit row {result} (limit {limit:?} -> {to}), answer {answer}",
                o.args.join(" ")
            ));
        }
        limit = Some(to);
    }
    assert_eq!(
        policy(&db.pool, T27_TYPE).await.unwrap(),
        Some((limit.map(|l| i32::try_from(l).unwrap()), paused))
    );

    // --- a viewer: every action exit 4, audited as denied, nothing changed. Denials are
    // aggregated (DESIGN §10, issue 19): the first of each (peer address, actor, action) is a
    // row at once, the rest of its minute one counted row, written when the window closes or
    // the agent stops.
    let before = digest(&db.pool).await.unwrap();
    let mark = last_audit_id(&db.pool).await.unwrap();
    let queued = *ids.iter().find(|id| initial[*id] == "queued").unwrap();
    let (q, agent) = (queued.to_string(), format!("agent:{}", f.id));
    let task = format!("task:{queued}");
    let calls: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["enqueue", T27_TYPE], "enqueue", "type:t27.job"),
        (vec!["cancel", q.as_str()], "cancel", task.as_str()),
        (vec!["requeue", q.as_str()], "requeue", task.as_str()),
        (
            vec!["dlq", "requeue", "--all"],
            "requeue_dead",
            "dead-letter queue",
        ),
        (
            vec!["dlq", "requeue", "--dry-run", "--type", T27_TYPE],
            "requeue_dead",
            "dead-letter queue",
        ),
        (
            vec!["concurrency", "set", "--global", "1"],
            "policy_set",
            "policy:*",
        ),
        (
            vec!["concurrency", "set", "--type", T27_TYPE, "1"],
            "policy_set",
            scope.as_str(),
        ),
        (
            vec!["concurrency", "set", "--local", "2"],
            "set_concurrency",
            agent.as_str(),
        ),
        (vec!["pause", T27_TYPE], "policy_set", scope.as_str()),
        (vec!["resume", T27_TYPE], "policy_set", scope.as_str()),
        (vec!["drain"], "drain", agent.as_str()),
    ];
    // Every refused call's row, were each written.
    let mut denied_calls = Vec::new();
    for (args, action, target) in &calls {
        for output in ["table", "json"] {
            let mut full = vec!["--output", output];
            full.extend(args.iter().copied());
            let o = val.run(&full).await.unwrap();
            let line = refused(&o, 4);
            assert!(line.ends_with("(permission denied)"), "{}", o.describe());
            denied_calls.push(audit("val", "viewer", action, target, "denied"));
        }
    }
    // No token at all over TCP: unauthenticated, exit 4, audited too. (Through the agent's
    // Unix socket, the CLI's default on loopback, this test's own user is an operator.)
    let o = f.cli.run(&["--no-socket", "cancel", &q]).await.unwrap();
    assert!(
        refused(&o, 4).ends_with("(unauthenticated)"),
        "{}",
        o.describe()
    );
    denied_calls.push(audit(
        "unauthenticated",
        "viewer",
        "cancel",
        &task,
        "denied",
    ));
    // At once: the first call of each key.
    let mut keys = BTreeSet::new();
    let expected: Vec<AuditRow> = denied_calls
        .iter()
        .filter(|r| keys.insert((r.0.clone(), r.2.clone())))
        .cloned()
        .collect();
    // Viewers may read: no audit rows for that.
    for args in [
        &["tasks", "ls"][..],
        &["agents", "ls"],
        &["tasks", "show", &q],
        &["dlq", "ls"],
    ] {
        let o = val.run(args).await.unwrap();
        ok(&o);
    }
    let rows: Vec<AuditRow> = audit_since(&db.pool, mark)
        .await
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    assert_eq!(rows, expected);
    assert_eq!(digest(&db.pool).await.unwrap(), before);
    let first_rows = counted_audit_rows(&db.pool, mark).await.unwrap();
    for r in &first_rows {
        assert_eq!(r.count, 1, "a first row stands for one call: {r:?}");
        let peer = r.peer.as_deref().unwrap_or_default();
        if r.actor == "val" {
            // The CLI went through the agent's socket: the row names the caller's uid.
            assert!(peer.starts_with("unix:uid:"), "{r:?}");
        } else {
            let port = peer.strip_prefix("127.0.0.1:").map(str::parse::<u16>);
            assert!(matches!(port, Some(Ok(_))), "{r:?}");
        }
    }
    // The viewer's drain did not stop the agent.
    assert!(f.agent.is_running());
    let o = alice
        .run(&["--output", "json", "agents", "ls"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap()["agents"][0]["state"], "running");
    // A clean stop writes the counted rest of each key: per key the counts sum to the refused
    // calls, the first row then one for the rest.
    f.agent.sigterm().unwrap();
    let status = f.agent.wait_exit(WAIT).await.unwrap();
    assert!(status.success(), "agent exit: {status}");
    let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
    for c in &denied_calls {
        *want.entry((c.0.clone(), c.2.clone())).or_default() += 1;
    }
    let mut got: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for r in counted_audit_rows(&db.pool, mark).await.unwrap() {
        assert_eq!(r.result, "denied", "{r:?}");
        got.entry((r.actor.clone(), r.action.clone()))
            .or_default()
            .push(r.count);
    }
    let expected_counts: BTreeMap<(String, String), Vec<i64>> = want
        .iter()
        .map(|(k, n)| (k.clone(), if *n == 1 { vec![1] } else { vec![1, n - 1] }))
        .collect();
    assert_eq!(
        got, expected_counts,
        "per (actor, action): the first denial, then one row counting the rest ({want:?} calls)"
    );
    if let Some(dir) = config.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    db.drop_db().await.unwrap();
    // Each answer must say what its audit row says (DESIGN §10: the row is written with the
    // change; the caller is told the same).
    assert!(
        disagreements.is_empty(),
        "answers that disagree with their audit rows:\n{}",
        disagreements.join("\n")
    );
}
