//! Tests of `exec` against real processes. Tests that look for leftover processes mark them
//! with a `sleep` duration unique to the test and this test process (`sleep 301.<pid>`), so
//! parallel tests and concurrent test runs cannot see each other's processes.

use std::time::{Duration, Instant};

use leasehold_shared::TaskType;
use serde_json::{Value, json};

use super::policy::{TASK_VARS, env_name_problem, normalise, resolve_program};
use super::*;
use crate::handler::{ContextStopper, HandlerRegistry, StopReason};
use crate::handlers::{DEFAULT_EXEC_OUTPUT_TAIL, register};

fn context(stop_after: Option<Duration>) -> (TaskContext, ContextStopper) {
    TaskContext::standalone(TaskType::new("exec").unwrap(), stop_after)
}

/// Options that allow any program.
fn anything() -> BuiltinOptions {
    BuiltinOptions {
        exec_allow: vec!["*".to_owned()],
        ..BuiltinOptions::default()
    }
}

fn handler(kill_after: Duration) -> ExecHandler {
    ExecHandler::new(&BuiltinOptions {
        exec_kill_after: kill_after,
        ..anything()
    })
}

/// Deserialises, validates and runs `payload` the way the runtime does.
async fn call(payload: Value) -> Result<Outcome, HandlerError> {
    call_with(&anything(), payload).await
}

/// As [`call`], with the handler made from `opts`.
async fn call_with(opts: &BuiltinOptions, payload: Value) -> Result<Outcome, HandlerError> {
    let mut registry = HandlerRegistry::new();
    register(&mut registry, "exec", opts).unwrap();
    let exec = registry.get(&TaskType::new("exec").unwrap()).unwrap();
    let (ctx, _stopper) = context(None);
    exec.call(ctx, payload).await
}

fn payload(argv: &[&str]) -> ExecPayload {
    ExecPayload {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        ..ExecPayload::default()
    }
}

/// A `sleep` argument no other test or test run uses.
fn marker(n: u32) -> String {
    format!("{}.{}", 300 + n, std::process::id())
}

/// How many live processes have `marker` in their command line.
async fn count_processes(marker: &str) -> usize {
    let out = tokio::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Waits (up to 2 s) until `want(count)` holds; returns the last count.
async fn wait_for_processes(marker: &str, want: impl Fn(usize) -> bool) -> usize {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let count = count_processes(marker).await;
        if want(count) || Instant::now() > until {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn exec_echo_succeeds_with_its_output() {
    let outcome = call(json!({"argv": ["echo", "hi"]})).await.unwrap();
    let Outcome::Succeeded(Some(result)) = outcome else {
        panic!("unexpected outcome {outcome:?}");
    };
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["stdout_tail"], "hi\n");
    assert_eq!(result["stderr_tail"], "");
    assert!(result["duration_ms"].as_u64().unwrap() < 2000);
}

#[tokio::test]
async fn exec_passes_env_and_cwd() {
    let outcome = call(json!({
        "argv": ["sh", "-c", "echo \"$EXEC_TEST_VAR\"; pwd; echo warn >&2"],
        "env": {"EXEC_TEST_VAR": "from payload"},
        "cwd": "/",
        "timeout": "10s",
    }))
    .await
    .unwrap();
    let Outcome::Succeeded(Some(result)) = outcome else {
        panic!("unexpected outcome {outcome:?}");
    };
    assert_eq!(result["stdout_tail"], "from payload\n/\n");
    assert_eq!(result["stderr_tail"], "warn\n");
}

#[tokio::test]
async fn exec_nonzero_exit_is_retryable_with_the_last_stderr_line() {
    let err = call(json!({"argv": ["sh", "-c", "echo first >&2; echo 'it broke' >&2; exit 3"]}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        HandlerError::retryable("exit_code", "exited with code 3: it broke")
    );

    let err = call(json!({"argv": ["sh", "-c", "exit 4"]}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        HandlerError::retryable("exit_code", "exited with code 4")
    );

    let long = "x".repeat(2000);
    let err = call(json!({"argv": ["sh", "-c", format!("echo {long} >&2; exit 1")]}))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        format!("exited with code 1: {}", &long[..MAX_ERROR_LINE_BYTES])
    );
}

#[tokio::test]
async fn exec_death_by_signal_is_retryable() {
    let err = call(json!({"argv": ["sh", "-c", "kill -KILL $$"]}))
        .await
        .unwrap_err();
    assert_eq!(err, HandlerError::retryable("signal", "killed by SIGKILL"));
}

#[tokio::test]
async fn exec_keeps_only_the_tail_of_huge_output() {
    let outcome =
        call(json!({"argv": ["sh", "-c", "yes | head -c 10000000; yes e | head -c 10000000 >&2"]}))
            .await
            .unwrap();
    let Outcome::Succeeded(Some(result)) = outcome else {
        panic!("unexpected outcome {outcome:?}");
    };
    assert_eq!(
        result["stdout_tail"],
        "y\n".repeat(DEFAULT_EXEC_OUTPUT_TAIL / 2)
    );
    assert_eq!(
        result["stderr_tail"],
        "e\n".repeat(DEFAULT_EXEC_OUTPUT_TAIL / 2)
    );
}

#[tokio::test]
async fn exec_refuses_bad_payloads_permanently() {
    let bad = [
        json!({"argv": []}),
        json!({"argv": [""]}),
        json!({"argv": ["echo", "a\u{0}b"]}),
        json!({"argv": ["echo"], "env": {"": "x"}}),
        json!({"argv": ["echo"], "env": {"A=B": "x"}}),
        json!({"argv": ["echo"], "env": {"LD_PRELOAD": "/tmp/x.so"}}),
        json!({"argv": ["echo"], "env": {"LEASEHOLD_DATABASE_URL": "x"}}),
        json!({"argv": ["echo"], "env": {"DATABASE_URL": "x"}}),
        json!({"argv": ["echo"], "cwd": "tmp"}),
        json!({"argv": ["./echo"]}),
        json!({"argv": ["echo"], "env": {"A": "x\u{0}"}}),
        json!({"argv": ["echo"], "cwd": "/\u{0}"}),
        json!({"argv": ["echo"], "timeout": "soon"}),
        json!({"argv": ["echo"], "timeout": "0s"}),
        json!({"argv": ["echo"], "timout": "1s"}),
        json!({"args": ["echo"]}),
        json!({"argv": "echo hi"}),
    ];
    for payload in bad {
        let err = call(payload.clone()).await.unwrap_err();
        assert_eq!(err.code, "bad_payload", "{payload}: {err}");
        assert!(!err.retryable, "{payload}");
    }
    let err = call(json!({"argv": ["echo"], "timeout": "soon"}))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("timeout \"soon\" is not a duration"),
        "{err}"
    );
}

#[tokio::test]
async fn exec_spawn_failure_is_permanent() {
    let err = call(json!({"argv": ["/nonexistent/leasehold-no-such-program"]}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "spawn_failed");
    assert!(!err.retryable);
    assert!(err.message.contains("No such file"), "{err}");

    let err = call(json!({"argv": ["true"], "cwd": "/nonexistent/leasehold-dir"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "spawn_failed");
    assert!(err.message.contains("/nonexistent/leasehold-dir"), "{err}");
}

#[tokio::test]
async fn exec_timeout_stops_with_sigterm() {
    let (ctx, _stopper) = context(None);
    let started = Instant::now();
    let mut p = payload(&["sleep", "30"]);
    p.timeout = Some("200ms".to_owned());
    let err = handler(Duration::from_secs(5))
        .run(ctx, p)
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(err.code, "timeout");
    assert!(err.retryable);
    assert!(
        err.message
            .starts_with("ran past its timeout of 200ms; stopped with sigterm after "),
        "{err}"
    );
}

#[tokio::test]
async fn exec_time_left_caps_the_timeout() {
    let (ctx, _stopper) = context(Some(Duration::from_millis(150)));
    let mut p = payload(&["sleep", "30"]);
    p.timeout = Some("1h".to_owned());
    let err = handler(Duration::from_secs(5))
        .run(ctx, p)
        .await
        .unwrap_err();
    assert_eq!(err.code, "stopped");
    assert!(err.message.contains("stopped with sigterm"), "{err}");
}

#[tokio::test]
async fn exec_needs_sigkill_when_the_program_ignores_sigterm() {
    let mark = marker(1);
    let (ctx, stopper) = context(None);
    let script = format!("trap '' TERM; sleep {mark}");
    let run = tokio::spawn(async move {
        handler(Duration::from_millis(300))
            .run(ctx, payload(&["sh", "-c", &script]))
            .await
    });
    // The inner sleep runs after the trap is set: stopping now must need SIGKILL.
    assert!(wait_for_processes(&format!("^sleep {mark}"), |n| n == 1).await == 1);
    let started = Instant::now();
    stopper.stop(StopReason::Timeout);
    let err = run.await.unwrap().unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(err.code, "stopped");
    assert!(err.message.contains("stopped with sigkill after "), "{err}");
    assert_eq!(wait_for_processes(&mark, |n| n == 0).await, 0);
}

#[tokio::test]
async fn exec_cancel_stops_the_program_and_leaves_no_process_behind() {
    let mark = marker(2);
    let (ctx, stopper) = context(None);
    let script = format!("sleep {mark} & sleep {mark} & wait");
    let run = tokio::spawn(async move {
        handler(Duration::from_secs(5))
            .run(ctx, payload(&["sh", "-c", &script]))
            .await
    });
    let sleeps = format!("^sleep {mark}");
    assert_eq!(wait_for_processes(&sleeps, |n| n == 2).await, 2);
    stopper.stop(StopReason::Cancelled);
    let err = run.await.unwrap().unwrap_err();
    assert_eq!(err.code, "stopped");
    assert!(
        err.message
            .starts_with("asked to stop; stopped with sigterm after "),
        "{err}"
    );
    assert_eq!(wait_for_processes(&mark, |n| n == 0).await, 0);
}

#[tokio::test]
async fn exec_dropped_mid_run_leaves_no_process_behind() {
    let mark = marker(3);
    let (ctx, _stopper) = context(None);
    let script = format!("trap '' TERM; sleep {mark} & sleep {mark} & wait");
    let exec = handler(Duration::from_secs(5));
    let run = exec.run(ctx, payload(&["sh", "-c", &script]));
    let sleeps = format!("^sleep {mark}");
    // Once both sleeps run, `select!` drops the unfinished run future, as the runtime does
    // when the lease is lost. SIGTERM is ignored, so only the guard's SIGKILL can end them.
    let running = tokio::select! {
        outcome = run => panic!("the run ended by itself: {outcome:?}"),
        running = wait_for_processes(&sleeps, |n| n == 2) => running,
    };
    assert_eq!(running, 2);
    assert_eq!(wait_for_processes(&mark, |n| n == 0).await, 0);
}

#[tokio::test]
async fn exec_kills_background_children_after_a_normal_exit() {
    let mark = marker(4);
    let started = Instant::now();
    // The background sleep keeps stdout open; killing the group lets the reader finish.
    let outcome = call(json!({"argv": ["sh", "-c", format!("sleep {mark} & echo started")]}))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    let Outcome::Succeeded(Some(result)) = outcome else {
        panic!("unexpected outcome {outcome:?}");
    };
    assert_eq!(result["stdout_tail"], "started\n");
    assert_eq!(wait_for_processes(&mark, |n| n == 0).await, 0);
}

#[tokio::test]
async fn exec_already_stopped_does_not_start() {
    let (ctx, stopper) = context(None);
    stopper.stop(StopReason::Shutdown);
    let err = handler(Duration::from_secs(5))
        .run(ctx, payload(&["sh", "-c", "exit 1"]))
        .await
        .unwrap_err();
    assert_eq!(err.code, "stopped");
}

// ---- The policy: allow list, environment, cwd, enqueue checks ----

/// A fresh directory under the system temp dir, unique to this test and process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leasehold-exec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn allowing(patterns: &[&str]) -> BuiltinOptions {
    BuiltinOptions {
        exec_allow: patterns.iter().map(|p| (*p).to_owned()).collect(),
        ..BuiltinOptions::default()
    }
}

fn stdout_of(outcome: Outcome) -> String {
    let Outcome::Succeeded(Some(result)) = outcome else {
        panic!("unexpected outcome {outcome:?}");
    };
    result["stdout_tail"].as_str().unwrap().to_owned()
}

/// `NAME=value` lines of `env` output as a map.
fn env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn env_program() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap();
    resolve_program("env", Some(&path)).unwrap()
}

#[tokio::test]
async fn exec_child_gets_a_cleared_environment_plus_passthrough_payload_and_task_vars() {
    // The test process has many variables (CARGO_*, RUST_*, ...): none may reach the child.
    assert!(std::env::vars_os().count() > 5);
    let outcome = call(json!({"argv": ["env"], "env": {"FROM_PAYLOAD": "yes"}}))
        .await
        .unwrap();
    let env = env_lines(&stdout_of(outcome));
    let mut allowed: Vec<&str> = vec!["PATH", "HOME", "LANG", "FROM_PAYLOAD"];
    allowed.extend(TASK_VARS);
    for name in env.keys() {
        assert!(allowed.contains(&name.as_str()), "{name} leaked: {env:?}");
    }
    assert_eq!(env["FROM_PAYLOAD"], "yes");
    assert_eq!(env.get("PATH"), std::env::var("PATH").ok().as_ref());
    // TaskContext::standalone: task 1, attempt 1, epoch 1.
    assert_eq!(env["LEASEHOLD_TASK_ID"], "1");
    assert_eq!(env["LEASEHOLD_ATTEMPT"], "1");
    assert_eq!(env["LEASEHOLD_EPOCH"], "1");
    assert_eq!(env["LEASEHOLD_IDEMPOTENCY_KEY"], "1:1");
    assert_eq!(env["LEASEHOLD_TASK_TYPE"], "exec");
}

#[tokio::test]
async fn exec_passthrough_follows_exec_env_and_the_payload_wins() {
    let opts = BuiltinOptions {
        exec_env: vec!["HOME".to_owned()],
        ..anything()
    };
    let program = env_program();
    let outcome = call_with(&opts, json!({"argv": [program]})).await.unwrap();
    let env = env_lines(&stdout_of(outcome));
    assert!(
        !env.contains_key("PATH"),
        "PATH is not in exec_env: {env:?}"
    );
    assert_eq!(env.get("HOME"), std::env::var("HOME").ok().as_ref());

    let outcome = call_with(
        &opts,
        json!({"argv": [program], "env": {"HOME": "/elsewhere"}}),
    )
    .await
    .unwrap();
    assert_eq!(env_lines(&stdout_of(outcome))["HOME"], "/elsewhere");

    // Without PATH a bare name cannot be found.
    let err = call_with(&opts, json!({"argv": ["env"]}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "spawn_failed");
    assert!(err.message.contains("no PATH"), "{err}");
}

#[tokio::test]
async fn exec_refuses_programs_outside_the_allow_list_without_running_them() {
    let dir = scratch("allow");
    let marker = dir.join("ran");
    let script = format!("touch {}", marker.display());
    let opts = allowing(&[env_program().to_str().unwrap()]);
    let err = call_with(&opts, json!({"argv": ["sh", "-c", script]}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "not_allowed");
    assert!(!err.retryable);
    assert!(err.message.contains("exec_allow"), "{err}");
    assert!(
        err.message.contains("/sh"),
        "names the resolved program: {err}"
    );
    assert!(!marker.exists(), "the refused program ran");

    // `..` cannot walk out of an allowed directory.
    let opts = allowing(&["/usr/bin/*"]);
    let err = call_with(
        &opts,
        json!({"argv": ["/usr/bin/../../bin/sh", "-c", script]}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, "not_allowed", "{err}");
    assert!(!marker.exists());

    // An empty list allows nothing, and says so.
    let err = call_with(&BuiltinOptions::default(), json!({"argv": ["true"]}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "not_allowed");
    assert!(err.message.contains("exec_allow is empty"), "{err}");

    // The allowed program runs, found through PATH.
    let outcome = call_with(
        &allowing(&[env_program().to_str().unwrap()]),
        json!({"argv": ["env"]}),
    )
    .await
    .unwrap();
    assert!(stdout_of(outcome).contains("LEASEHOLD_TASK_ID=1"));
}

#[tokio::test]
async fn exec_root_confines_cwd_lexically_and_through_symlinks() {
    let root = scratch("root");
    std::fs::create_dir_all(root.join("job")).unwrap();
    std::os::unix::fs::symlink("/", root.join("escape")).unwrap();
    let opts = BuiltinOptions {
        exec_root: Some(root.clone()),
        ..anything()
    };
    // The default cwd is the root.
    let outcome = call_with(&opts, json!({"argv": ["pwd"]})).await.unwrap();
    assert_eq!(stdout_of(outcome).trim_end(), root.to_str().unwrap());
    let inside = root.join("job");
    let outcome = call_with(&opts, json!({"argv": ["pwd"], "cwd": inside}))
        .await
        .unwrap();
    assert_eq!(stdout_of(outcome).trim_end(), inside.to_str().unwrap());

    for cwd in [
        "/".to_owned(),
        format!("{}/job/../..", root.display()),
        format!("{}/escape", root.display()),
        format!("{}/escape/tmp", root.display()),
    ] {
        let err = call_with(&opts, json!({"argv": ["pwd"], "cwd": cwd}))
            .await
            .unwrap_err();
        assert_eq!(err.code, "not_allowed", "{cwd}: {err}");
        assert!(err.message.contains("exec_root"), "{err}");
    }
}

#[test]
fn check_enqueue_applies_structure_always_and_the_policy_when_given() {
    let policy = ExecPolicy::new(
        &["/usr/bin/env".to_owned(), "/opt/jobs/*".to_owned()],
        &["PATH".to_owned()],
        Some(std::path::Path::new("/srv/jobs")),
    )
    .unwrap();
    let structural = [
        (
            json!({"argv": ["env"], "env": {"LD_PRELOAD": "x"}}),
            "LD_PRELOAD",
        ),
        (
            json!({"argv": ["env"], "env": {"ld_library_path": "x"}}),
            "ld_library_path",
        ),
        (
            json!({"argv": ["env"], "env": {"LEASEHOLD_SECRET": "x"}}),
            "LEASEHOLD_SECRET",
        ),
        (
            json!({"argv": ["env"], "env": {"DATABASE_URL": "x"}}),
            "DATABASE_URL",
        ),
        (json!({"argv": ["env"], "env": {"1A": "x"}}), "1A"),
        (json!({"argv": ["env"], "cwd": "relative"}), "absolute"),
        (json!({"argv": ["bin/env"]}), "relative"),
        (json!({"argv": []}), "argv"),
        (json!({"argv": ["env"], "shell": true}), "unknown field"),
    ];
    for (payload, want) in &structural {
        for p in [None, Some(&policy)] {
            let err = check_enqueue(payload, p).unwrap_err();
            assert!(err.contains(want), "{payload}: {err}");
        }
    }
    let by_policy = [
        (json!({"argv": ["/bin/sh", "-c", "id"]}), "exec_allow"),
        (json!({"argv": ["/opt/jobs/sub/x"]}), "exec_allow"),
        (json!({"argv": ["/opt/jobs/../x"]}), "exec_allow"),
        (
            json!({"argv": ["/usr/bin/env"], "cwd": "/tmp"}),
            "exec_root",
        ),
        (
            json!({"argv": ["/usr/bin/env"], "cwd": "/srv/jobs/../x"}),
            "exec_root",
        ),
    ];
    for (payload, want) in &by_policy {
        assert_eq!(check_enqueue(payload, None), Ok(()), "{payload}");
        let err = check_enqueue(payload, Some(&policy)).unwrap_err();
        assert!(err.contains(want), "{payload}: {err}");
    }
    for ok in [
        json!({"argv": ["/usr/bin/env"]}),
        json!({"argv": ["/opt/jobs/report", "--day", "1"], "cwd": "/srv/jobs/a/./b"}),
        json!({"argv": ["/usr/bin/env"], "env": {"PATH": "/x", "LANG": "C"}, "timeout": "5s"}),
    ] {
        assert_eq!(check_enqueue(&ok, Some(&policy)), Ok(()), "{ok}");
    }
}

#[test]
fn check_enqueue_uses_the_agents_own_exec_policy_and_structure_without_one() {
    let exec = TaskType::new("exec").unwrap();
    let refused = json!({"argv": ["/bin/sh"]});
    let mut registry = HandlerRegistry::new();
    // No exec handler here: structure only.
    assert_eq!(
        crate::handlers::check_enqueue(&registry, &exec, &refused),
        Ok(())
    );
    let bad = json!({"argv": ["x"], "cwd": "y"});
    assert!(crate::handlers::check_enqueue(&registry, &exec, &bad).is_err());
    register(&mut registry, "exec", &allowing(&["/usr/bin/env"])).unwrap();
    let err = crate::handlers::check_enqueue(&registry, &exec, &refused).unwrap_err();
    assert!(err.message.contains("exec_allow"), "{err}");
    assert_eq!(err.code, "bad_payload");
    let ok = json!({"argv": ["/usr/bin/env"]});
    assert_eq!(
        crate::handlers::check_enqueue(&registry, &exec, &ok),
        Ok(())
    );
}

#[test]
fn bad_settings_are_refused_with_their_name() {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    type Case<'a> = (Vec<String>, Vec<String>, Option<&'a str>, &'a str);
    let cases: [Case; 6] = [
        (s(&["bin/*"]), s(&[]), None, "exec_allow"),
        (s(&["**/x", "/ok"]), s(&[]), None, "exec_allow"),
        (s(&["*"]), s(&["LD_PRELOAD"]), None, "exec_env"),
        (s(&["*"]), s(&["LEASEHOLD_DATABASE_URL"]), None, "exec_env"),
        (s(&["*"]), s(&["DATABASE_URL"]), None, "exec_env"),
        (s(&["*"]), s(&[]), Some("srv/jobs"), "exec_root"),
    ];
    for (allow, env, root, want) in cases {
        let (setting, _) =
            ExecPolicy::new(&allow, &env, root.map(std::path::Path::new)).unwrap_err();
        assert_eq!(setting, want, "{allow:?} {env:?} {root:?}");
    }
    // A handler made from bad settings runs nothing.
    let h = ExecHandler::new(&allowing(&["relative"]));
    assert!(h.policy().allow().is_empty());
}

#[test]
fn normalise_removes_dots_and_never_climbs_above_root() {
    let cases = [
        ("/a/./b/../c", "/a/c"),
        ("/../../etc", "/etc"),
        ("/a//b/", "/a/b"),
        ("/", "/"),
    ];
    for (raw, want) in cases {
        assert_eq!(
            normalise(std::path::Path::new(raw)),
            PathBuf::from(want),
            "{raw}"
        );
    }
}

proptest::proptest! {
    #[test]
    fn normalised_absolute_paths_have_no_dot_components(
        parts in proptest::collection::vec("(\\.|\\.\\.|[a-z]{1,3})", 0..8),
    ) {
        let raw = format!("/{}", parts.join("/"));
        let out = normalise(std::path::Path::new(&raw));
        proptest::prop_assert!(out.is_absolute());
        proptest::prop_assert!(out.components().all(|c| matches!(
            c,
            std::path::Component::RootDir | std::path::Component::Normal(_)
        )), "{raw} -> {}", out.display());
    }

    #[test]
    fn env_names_are_refused_exactly_by_the_rules(name in "[A-Za-z_0-9=.-]{0,12}") {
        let shape = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let upper = name.to_ascii_uppercase();
        let reserved = upper.starts_with("LD_") || upper.starts_with("LEASEHOLD_")
            || upper == "DATABASE_URL";
        proptest::prop_assert_eq!(env_name_problem(&name).is_none(), shape && !reserved);
    }
}
