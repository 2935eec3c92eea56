//! Tests of `exec` against real processes. Tests that look for leftover processes mark them
//! with a `sleep` duration unique to the test and this test process (`sleep 301.<pid>`), so
//! parallel tests and concurrent test runs cannot see each other's processes.

use std::time::{Duration, Instant};

use leasehold_shared::TaskType;
use serde_json::{Value, json};

use super::*;
use crate::handler::{ContextStopper, HandlerRegistry, StopReason};
use crate::handlers::{DEFAULT_EXEC_OUTPUT_TAIL, register};

fn context(stop_after: Option<Duration>) -> (TaskContext, ContextStopper) {
    TaskContext::standalone(TaskType::new("exec").unwrap(), stop_after)
}

fn handler(kill_after: Duration) -> ExecHandler {
    ExecHandler::new(&BuiltinOptions {
        exec_kill_after: kill_after,
        ..BuiltinOptions::default()
    })
}

/// Deserialises, validates and runs `payload` the way the runtime does.
async fn call(payload: Value) -> Result<Outcome, HandlerError> {
    let mut registry = HandlerRegistry::new();
    register(&mut registry, "exec", &BuiltinOptions::default()).unwrap();
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
        "argv": ["sh", "-c", "echo \"$LEASEHOLD_TEST_VAR\"; pwd; echo warn >&2"],
        "env": {"LEASEHOLD_TEST_VAR": "from payload"},
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
