//! Argument parsing: defaults, every command's flags, and bad input refused with clap's exit
//! code 2. Environment fallbacks are read by clap from the real environment, which a test
//! cannot change safely in-process; `tests/cli.rs` runs the binary with variables set.

use std::time::Duration;

use clap::CommandFactory;

use leasehold_shared::TaskStatus;

use super::values::{Limit, TimeOrDuration};
use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::parse_args(std::iter::once("leasehold").chain(args.iter().copied()))
}

fn ok(args: &[&str]) -> Cli {
    match parse(args) {
        Ok(cli) => cli,
        Err(e) => panic!("{args:?} should parse: {e}"),
    }
}

fn refused(args: &[&str]) -> clap::Error {
    match parse(args) {
        Ok(cli) => panic!("{args:?} should be refused, got {cli:?}"),
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{args:?}: clap exits 2 on bad usage");
            e
        }
    }
}

#[test]
fn the_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn no_command_is_allowed() {
    let cli = ok(&[]);
    assert!(cli.command.is_none());
}

#[test]
fn global_defaults() {
    let cli = ok(&["agents", "ls"]);
    // The defaults hold unless the test runner's environment sets LEASEHOLD_*.
    if std::env::var_os("LEASEHOLD_AGENT").is_none() {
        assert_eq!(cli.global.agent, DEFAULT_AGENT);
    }
    assert_eq!(cli.global.output, Format::Table);
    assert_eq!(cli.global.call_timeout, Duration::from_secs(10));
    assert!(!cli.global.tls);
}

#[test]
fn global_flags_go_before_or_after_the_command() {
    let before = ok(&["--agent", "h:1", "--output", "json", "tasks", "ls"]);
    let after = ok(&["tasks", "ls", "--agent", "h:1", "--output", "json"]);
    for cli in [before, after] {
        assert_eq!(cli.global.agent, "h:1");
        assert_eq!(cli.global.output, Format::Json);
    }
    let cli = ok(&[
        "drain",
        "--token",
        "t0k",
        "--ca",
        "/ca.pem",
        "--cert",
        "/c.pem",
        "--key",
        "/k.pem",
        "--tls-server-name",
        "agent.internal",
        "--call-timeout",
        "2s",
    ]);
    assert_eq!(cli.global.token.as_deref(), Some("t0k"));
    assert_eq!(
        cli.global.tls_server_name.as_deref(),
        Some("agent.internal")
    );
    assert_eq!(cli.global.call_timeout, Duration::from_secs(2));
}

#[test]
fn bad_global_flags_are_refused() {
    refused(&["--output", "xml", "drain"]);
    refused(&["--call-timeout", "0s", "drain"]);
    refused(&["--call-timeout", "soon", "drain"]);
    // A certificate without its key, and a key without its certificate.
    refused(&["--cert", "c.pem", "drain"]);
    refused(&["--key", "k.pem", "drain"]);
}

#[test]
fn enqueue_flags() {
    let cli = ok(&[
        "enqueue",
        "email.send",
        "--payload",
        "{\"to\":\"x\"}",
        "--priority",
        "-5",
        "--delay",
        "30s",
        "--deadline",
        "1h",
        "--timeout",
        "5m",
        "--max-attempts",
        "7",
        "--idempotency-key",
        "order-1",
        "--concurrency-key",
        "acme",
    ]);
    let Some(Command::Enqueue(a)) = cli.command else {
        panic!("enqueue expected");
    };
    assert_eq!(a.task_type, "email.send");
    assert_eq!(a.priority, -5);
    assert_eq!(a.delay, Some(Duration::from_secs(30)));
    assert_eq!(
        a.deadline,
        Some(TimeOrDuration::Relative(Duration::from_secs(3600)))
    );
    assert_eq!(a.timeout, Some(Duration::from_secs(300)));
    assert_eq!(a.max_attempts, Some(7));
    assert_eq!(a.idempotency_key.as_deref(), Some("order-1"));
    assert_eq!(a.concurrency_key.as_deref(), Some("acme"));
    let cli = ok(&["enqueue", "noop"]);
    let Some(Command::Enqueue(a)) = cli.command else {
        panic!("enqueue expected");
    };
    assert_eq!(a.concurrency_key, None);
}

#[test]
fn enqueue_bad_input_is_refused() {
    refused(&["enqueue"]);
    refused(&["enqueue", "Bad-Type"]);
    refused(&["enqueue", "noop", "--priority", "40000"]);
    refused(&["enqueue", "noop", "--priority", "-40000"]);
    refused(&["enqueue", "noop", "--priority", "high"]);
    refused(&[
        "enqueue",
        "noop",
        "--payload",
        "{}",
        "--payload-file",
        "p.json",
    ]);
    refused(&[
        "enqueue",
        "noop",
        "--delay",
        "1s",
        "--run-at",
        "2026-01-01T00:00:00Z",
    ]);
    refused(&["enqueue", "noop", "--run-at", "tomorrow"]);
    refused(&["enqueue", "noop", "--deadline", "later"]);
    refused(&["enqueue", "noop", "--timeout", "0s"]);
    refused(&["enqueue", "noop", "--max-attempts", "0"]);
    refused(&["enqueue", "noop", "--max-attempts", "1001"]);
    refused(&["enqueue", "noop", "--idempotency-key", ""]);
    refused(&["enqueue", "noop", "--concurrency-key", ""]);
    refused(&["enqueue", "noop", "--concurrency-key", &"k".repeat(201)]);
    refused(&["enqueue", "noop", "--concurrency-key", "a\u{1b}[2Jb"]);
    refused(&["enqueue", "noop", "--concurrency-key"]);
}

#[test]
fn tasks_ls_flags() {
    let cli = ok(&[
        "tasks",
        "ls",
        "--status",
        "dead,retry_wait",
        "--status",
        "queued",
        "--type",
        "noop",
        "--text",
        "smtp",
        "--code",
        "timeout",
        "--since",
        "2h",
        "--limit",
        "10",
        "--before",
        "99",
    ]);
    let Some(Command::Tasks(TasksCommand::Ls(a))) = cli.command else {
        panic!("tasks ls expected");
    };
    assert_eq!(
        a.status,
        [TaskStatus::Dead, TaskStatus::RetryWait, TaskStatus::Queued]
    );
    assert_eq!(a.filter.task_type.as_deref(), Some("noop"));
    assert_eq!(a.filter.limit, 10);
    assert_eq!(a.filter.before, Some(99));
    let cli = ok(&["tasks", "ls"]);
    let Some(Command::Tasks(TasksCommand::Ls(a))) = cli.command else {
        panic!("tasks ls expected");
    };
    assert_eq!(a.filter.limit, DEFAULT_LIST_LIMIT);
    assert!(a.status.is_empty());
}

#[test]
fn tasks_bad_input_is_refused() {
    refused(&["tasks", "ls", "--status", "zombie"]);
    refused(&["tasks", "ls", "--limit", "0"]);
    refused(&["tasks", "ls", "--limit", "1001"]);
    refused(&["tasks", "ls", "--before", "0"]);
    refused(&["tasks", "ls", "--text", &"x".repeat(201)]);
    refused(&["tasks", "show"]);
    refused(&["tasks", "show", "abc"]);
    refused(&["tasks", "show", "-3"]);
    refused(&["tasks"]);
}

#[test]
fn cancel_and_requeue_take_many_ids() {
    let cli = ok(&["cancel", "1", "2", "3", "--wait-timeout", "5s"]);
    let Some(Command::Cancel(a)) = cli.command else {
        panic!("cancel expected");
    };
    assert_eq!(a.ids.ids, [1, 2, 3]);
    assert!(!a.no_wait);
    assert_eq!(a.wait_timeout, Some(Duration::from_secs(5)));
    let cli = ok(&["cancel", "4", "--no-wait"]);
    assert!(matches!(
        cli.command,
        Some(Command::Cancel(CancelArgs { no_wait: true, .. }))
    ));
    refused(&["cancel"]);
    refused(&["cancel", "4", "--no-wait", "--wait-timeout", "1s"]);
    let cli = ok(&["requeue", "7", "8"]);
    assert!(matches!(cli.command, Some(Command::Requeue(IdsArgs { ref ids })) if ids == &[7, 8]));
    refused(&["requeue"]);
    refused(&["requeue", "x"]);
}

#[test]
fn dlq_flags() {
    let cli = ok(&[
        "dlq", "ls", "--type", "noop", "--code", "timeout", "--limit", "5",
    ]);
    assert!(matches!(cli.command, Some(Command::Dlq(DlqCommand::Ls(_)))));
    let cli = ok(&["dlq", "requeue", "--all", "--dry-run"]);
    let Some(Command::Dlq(DlqCommand::Requeue(a))) = cli.command else {
        panic!("dlq requeue expected");
    };
    assert!(a.all && a.dry_run);
    ok(&["dlq", "requeue", "--since", "1h", "--until", "10m"]);
    // No filter and no --all parses; the command itself refuses it (commands::dlq).
    ok(&["dlq", "requeue"]);
    refused(&["dlq", "requeue", "--all", "--type", "noop"]);
    refused(&["dlq", "requeue", "--until", "whenever"]);
    // The ids of a dry run are paged; --limit and --before need --dry-run.
    let cli = ok(&[
        "dlq",
        "requeue",
        "--all",
        "--dry-run",
        "--limit",
        "5",
        "--before",
        "40",
    ]);
    let Some(Command::Dlq(DlqCommand::Requeue(a))) = cli.command else {
        panic!("dlq requeue expected");
    };
    assert_eq!((a.limit, a.before), (Some(5), Some(40)));
    refused(&["dlq", "requeue", "--all", "--limit", "5"]);
    refused(&["dlq", "requeue", "--all", "--before", "5"]);
    refused(&["dlq", "requeue", "--all", "--dry-run", "--limit", "1001"]);
    refused(&["dlq", "requeue", "--all", "--dry-run", "--limit", "0"]);
    refused(&["dlq", "requeue", "--all", "--dry-run", "--before", "0"]);
    // purge: the same flags.
    let cli = ok(&[
        "dlq",
        "purge",
        "--code",
        "boom",
        "--dry-run",
        "--limit",
        "2",
    ]);
    let Some(Command::Dlq(DlqCommand::Purge(a))) = cli.command else {
        panic!("dlq purge expected");
    };
    assert!(a.dry_run && a.code.as_deref() == Some("boom") && a.limit == Some(2));
    ok(&["dlq", "purge"]);
    refused(&["dlq", "purge", "--all", "--type", "noop"]);
    refused(&["dlq", "purge", "--all", "--limit", "5"]);
}

#[test]
fn concurrency_set_needs_exactly_one_scope() {
    let cli = ok(&["concurrency", "set", "10", "--global"]);
    let Some(Command::Concurrency(ConcurrencyCommand::Set(a))) = cli.command else {
        panic!("concurrency set expected");
    };
    assert_eq!(a.limit, Limit::Max(10));
    assert!(a.scope.global);
    let cli = ok(&["concurrency", "set", "unlimited", "--type", "noop"]);
    let Some(Command::Concurrency(ConcurrencyCommand::Set(a))) = cli.command else {
        panic!("concurrency set expected");
    };
    assert_eq!(a.limit, Limit::Unlimited);
    assert_eq!(a.scope.task_type.as_deref(), Some("noop"));
    ok(&["concurrency", "set", "5", "--local"]);
    refused(&["concurrency", "set", "5"]);
    refused(&["concurrency", "set", "5", "--global", "--local"]);
    refused(&["concurrency", "set", "-1", "--global"]);
    refused(&["concurrency", "set", "lots", "--global"]);
    refused(&["concurrency", "set", "--global"]);
}

#[test]
fn concurrency_set_per_key_is_a_flag_beside_the_scope() {
    for args in [
        &[
            "concurrency",
            "set",
            "2",
            "--type",
            "email.send",
            "--per-key",
        ][..],
        &[
            "concurrency",
            "set",
            "--per-key",
            "unlimited",
            "--type",
            "email.send",
        ],
    ] {
        let cli = ok(args);
        let Some(Command::Concurrency(ConcurrencyCommand::Set(a))) = cli.command else {
            panic!("concurrency set expected");
        };
        assert!(a.per_key, "{args:?}");
        assert_eq!(a.scope.task_type.as_deref(), Some("email.send"));
    }
    let cli = ok(&["concurrency", "set", "2", "--type", "email.send"]);
    let Some(Command::Concurrency(ConcurrencyCommand::Set(a))) = cli.command else {
        panic!("concurrency set expected");
    };
    assert!(!a.per_key);
    // --per-key with --global or --local parses; the command refuses it before connecting
    // (commands::concurrency), with a message naming --type.
    ok(&["concurrency", "set", "2", "--global", "--per-key"]);
    refused(&["concurrency", "set", "2", "--per-key"]);
    refused(&[
        "concurrency",
        "set",
        "2",
        "--type",
        "email.send",
        "--per-key",
        "--per-key",
    ]);
}

#[test]
fn ratelimit_set_takes_a_type_or_global_and_a_rate() {
    let cli = ok(&["ratelimit", "set", "email.send", "50/1s"]);
    let Some(Command::Ratelimit(RatelimitCommand::Set(a))) = cli.command else {
        panic!("ratelimit set expected");
    };
    assert_eq!(a.task_type.as_deref(), Some("email.send"));
    assert!(!a.global);
    assert_eq!((a.rate.starts, a.rate.period), (50, Duration::from_secs(1)));
    for args in [
        &["ratelimit", "set", "--global", "1000/1m"][..],
        &["ratelimit", "set", "1000/1m", "--global"],
    ] {
        let cli = ok(args);
        let Some(Command::Ratelimit(RatelimitCommand::Set(a))) = cli.command else {
            panic!("ratelimit set expected");
        };
        assert_eq!(a.task_type, None, "{args:?}");
        assert!(a.global);
        assert_eq!(a.rate.to_string(), "1000/1m");
    }
    ok(&["ratelimit", "set", "noop", "10/250ms", "--output", "json"]);
    // Neither scope, both, no rate, a bad type, a rate out of bounds, an extra word.
    refused(&["ratelimit", "set", "50/1s"]);
    refused(&["ratelimit", "set", "--global", "email.send", "50/1s"]);
    refused(&["ratelimit", "set", "email.send"]);
    refused(&["ratelimit", "set", "--global"]);
    refused(&["ratelimit", "set", "Email", "50/1s"]);
    refused(&["ratelimit", "set", "email.send", "50/1s", "extra"]);
    for (rate, says) in [
        ("0/1s", "starts: 0"),
        ("1000001/1s", "starts: 1000001 is above 1000000"),
        ("50/0ms", "below 1ms"),
        ("50/25h", "above 24h"),
        ("50/1500us", "whole number of milliseconds"),
        ("50/soon", "period \"soon\""),
        ("50", "expected N/PERIOD"),
    ] {
        let e = refused(&["ratelimit", "set", "email.send", rate]).to_string();
        assert!(e.contains(says), "{rate}: {e}");
        assert!(e.contains("<N/PERIOD>"), "{rate}: names the argument: {e}");
    }
}

#[test]
fn ratelimit_clear_and_ls() {
    let cli = ok(&["ratelimit", "clear", "email.send"]);
    let Some(Command::Ratelimit(RatelimitCommand::Clear(a))) = cli.command else {
        panic!("ratelimit clear expected");
    };
    assert_eq!(a.task_type.as_deref(), Some("email.send"));
    assert!(!a.global);
    let cli = ok(&["ratelimit", "clear", "--global"]);
    let Some(Command::Ratelimit(RatelimitCommand::Clear(a))) = cli.command else {
        panic!("ratelimit clear expected");
    };
    assert!(a.global && a.task_type.is_none());
    refused(&["ratelimit", "clear"]);
    refused(&["ratelimit", "clear", "--global", "email.send"]);
    refused(&["ratelimit", "clear", "email.send", "50/1s"]);
    let cli = ok(&["ratelimit", "ls", "--output", "json"]);
    assert!(matches!(
        cli.command,
        Some(Command::Ratelimit(RatelimitCommand::Ls))
    ));
    refused(&["ratelimit", "ls", "extra"]);
    refused(&["ratelimit"]);
}

#[test]
fn shed_set_takes_a_type_and_a_duration_and_clear_a_type() {
    let cli = ok(&["shed", "set", "email.send", "30s"]);
    let Some(Command::Shed(ShedCommand::Set(a))) = cli.command else {
        panic!("shed set expected");
    };
    assert_eq!(a.task_type, "email.send");
    assert_eq!(a.after, Duration::from_secs(30));
    let cli = ok(&["shed", "set", "noop", "1h 30m", "--output", "json"]);
    let Some(Command::Shed(ShedCommand::Set(a))) = cli.command else {
        panic!("shed set expected");
    };
    assert_eq!(a.after, Duration::from_secs(5_400));
    let cli = ok(&["shed", "clear", "email.send"]);
    let Some(Command::Shed(ShedCommand::Clear(a))) = cli.command else {
        panic!("shed clear expected");
    };
    assert_eq!(a.task_type, "email.send");
    // No type, no duration, a bad type, an extra word, no subcommand.
    refused(&["shed", "set", "30s"]);
    refused(&["shed", "set", "email.send"]);
    refused(&["shed", "set", "Email", "30s"]);
    refused(&["shed", "set", "email.send", "30s", "extra"]);
    refused(&["shed", "clear"]);
    refused(&["shed", "clear", "email.send", "30s"]);
    refused(&["shed"]);
    for (after, says) in [
        ("0s", "must be more than 0"),
        ("500us", "below 1ms"),
        ("1500us", "whole number of milliseconds"),
        ("8d", "above 7 days"),
        ("30", "expected a duration"),
        ("soon", "expected a duration"),
    ] {
        let e = refused(&["shed", "set", "email.send", after]).to_string();
        assert!(e.contains(says), "{after}: {e}");
        assert!(e.contains("<DURATION>"), "{after}: names the argument: {e}");
    }
}

#[test]
fn breaker_set_takes_a_type_and_three_flags_clear_a_type_and_ls_nothing() {
    let set = [
        "breaker",
        "set",
        "payment.charge",
        "--failures",
        "5",
        "--within",
        "1m",
        "--cooldown",
        "30s",
    ];
    let cli = ok(&set);
    let Some(Command::Breaker(BreakerCommand::Set(a))) = cli.command else {
        panic!("breaker set expected");
    };
    assert_eq!(a.task_type, "payment.charge");
    assert_eq!(a.failures, 5);
    assert_eq!(a.within, Duration::from_secs(60));
    assert_eq!(a.cooldown, Duration::from_secs(30));
    let cli = ok(&[
        "breaker",
        "set",
        "noop",
        "--cooldown",
        "250ms",
        "--failures",
        "1000000",
        "--within",
        "24h",
    ]);
    let Some(Command::Breaker(BreakerCommand::Set(a))) = cli.command else {
        panic!("breaker set expected");
    };
    assert_eq!(
        (a.failures, a.within, a.cooldown),
        (
            1_000_000,
            Duration::from_secs(86_400),
            Duration::from_millis(250)
        )
    );
    let cli = ok(&["breaker", "clear", "payment.charge"]);
    let Some(Command::Breaker(BreakerCommand::Clear(a))) = cli.command else {
        panic!("breaker clear expected");
    };
    assert_eq!(a.task_type, "payment.charge");
    let cli = ok(&["breaker", "ls", "--output", "json"]);
    assert!(matches!(
        cli.command,
        Some(Command::Breaker(BreakerCommand::Ls))
    ));
    // A flag missing, no type, a bad type, an extra word, no subcommand.
    refused(&set[..set.len() - 2]);
    refused(&[
        "breaker",
        "set",
        "--failures",
        "5",
        "--within",
        "1m",
        "--cooldown",
        "30s",
    ]);
    let mut bad_type = set;
    bad_type[2] = "Payment";
    refused(&bad_type);
    refused(&[&set[..], &["extra"]].concat());
    refused(&["breaker", "clear"]);
    refused(&["breaker", "clear", "a", "b"]);
    refused(&["breaker", "ls", "extra"]);
    refused(&["breaker"]);
    for (flag, value, says) in [
        ("--failures", "0", "0 is not in 1..=1000000"),
        ("--failures", "1000001", "1000001 is not in 1..=1000000"),
        ("--failures", "-1", "unexpected argument"),
        ("--within", "0s", "must be more than 0"),
        ("--within", "25h", "above 24h"),
        ("--within", "1500us", "whole number of milliseconds"),
        ("--cooldown", "0", "must be more than 0"),
        ("--cooldown", "8d", "above 7 days"),
        ("--cooldown", "soon", "expected a duration"),
    ] {
        let mut args = set;
        let i = args.iter().position(|a| *a == flag).unwrap_or(0) + 1;
        args[i] = value;
        let e = refused(&args).to_string();
        assert!(e.contains(says), "{flag} {value}: {e}");
    }
}

#[test]
fn small_commands() {
    ok(&["pause", "noop"]);
    ok(&["resume", "noop"]);
    refused(&["pause"]);
    refused(&["pause", "NOOP"]);
    ok(&["agents", "ls"]);
    ok(&["types"]);
    refused(&["types", "extra"]);
    ok(&["drain"]);
    ok(&["watch"]);
    refused(&["watch", "extra"]);
    refused(&["frobnicate"]);
}

#[test]
fn schedules_add_flags() {
    let cli = ok(&[
        "schedules",
        "add",
        "nightly.report",
        "--cron",
        "0 0 2 * * *",
        "--type",
        "report.build",
        "--payload",
        "{\"kind\":\"daily\"}",
        "--tz",
        "Europe/Berlin",
        "--missed",
        "catch_up",
        "--catch-up-max",
        "5",
        "--priority",
        "-3",
        "--max-attempts",
        "4",
        "--disabled",
        "--replace",
    ]);
    let Some(Command::Schedules(SchedulesCommand::Add(a))) = cli.command else {
        panic!("schedules add expected");
    };
    assert_eq!(a.name, "nightly.report");
    assert_eq!(a.cron, "0 0 2 * * *");
    assert_eq!(a.task_type, "report.build");
    assert_eq!(a.payload.as_deref(), Some("{\"kind\":\"daily\"}"));
    assert_eq!(a.time_zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(a.missed, Some(Missed::CatchUp));
    assert_eq!(a.catch_up_max, Some(5));
    assert_eq!(a.priority, -3);
    assert_eq!(a.max_attempts, Some(4));
    assert!(a.disabled && a.replace);
    let cli = ok(&[
        "schedules",
        "add",
        "n",
        "--cron",
        "* * * * * *",
        "--type",
        "noop",
    ]);
    let Some(Command::Schedules(SchedulesCommand::Add(a))) = cli.command else {
        panic!("schedules add expected");
    };
    assert_eq!((a.missed, a.catch_up_max, a.priority), (None, None, 0));
    assert!(a.payload.is_none() && a.time_zone.is_none() && !a.disabled && !a.replace);
    let cli = ok(&[
        "schedules",
        "add",
        "n",
        "--cron",
        "@daily",
        "--type",
        "noop",
        "--missed",
        "catch-up",
    ]);
    assert!(matches!(
        cli.command,
        Some(Command::Schedules(SchedulesCommand::Add(ScheduleAddArgs {
            missed: Some(Missed::CatchUp),
            ..
        })))
    ));
}

#[test]
fn schedules_subcommands_take_one_name() {
    let cli = ok(&["schedules", "ls"]);
    assert!(matches!(
        cli.command,
        Some(Command::Schedules(SchedulesCommand::Ls))
    ));
    for (verb, check) in [
        (
            "rm",
            (|c| matches!(c, SchedulesCommand::Rm(_))) as fn(&SchedulesCommand) -> bool,
        ),
        ("enable", |c| matches!(c, SchedulesCommand::Enable(_))),
        ("disable", |c| matches!(c, SchedulesCommand::Disable(_))),
        ("trigger", |c| matches!(c, SchedulesCommand::Trigger(_))),
    ] {
        let cli = ok(&["schedules", verb, "nightly"]);
        let Some(Command::Schedules(c)) = &cli.command else {
            panic!("schedules {verb} expected");
        };
        assert!(check(c), "{verb}: {c:?}");
        let name = match c {
            SchedulesCommand::Rm(a)
            | SchedulesCommand::Enable(a)
            | SchedulesCommand::Disable(a)
            | SchedulesCommand::Trigger(a) => a.name.as_str(),
            _ => "",
        };
        assert_eq!(name, "nightly");
        refused(&["schedules", verb]);
        refused(&["schedules", verb, "Nightly"]);
        refused(&["schedules", verb, "a", "b"]);
    }
}

#[test]
fn schedules_bad_input_is_refused() {
    let add = |extra: &[&str]| {
        let mut args = vec![
            "schedules",
            "add",
            "n",
            "--cron",
            "* * * * * *",
            "--type",
            "noop",
        ];
        args.extend_from_slice(extra);
        refused(&args);
    };
    add(&["--missed", "later"]);
    add(&["--catch-up-max", "0"]);
    add(&["--catch-up-max", "1001"]);
    add(&["--priority", "40000"]);
    add(&["--max-attempts", "0"]);
    refused(&["schedules", "add", "n", "--type", "noop"]);
    refused(&["schedules", "add", "n", "--cron", "* * * * * *"]);
    refused(&[
        "schedules",
        "add",
        "n",
        "--cron",
        "* * * * * *",
        "--type",
        "Bad",
    ]);
    refused(&[
        "schedules",
        "add",
        "-bad",
        "--cron",
        "* * * * * *",
        "--type",
        "noop",
    ]);
    refused(&["schedules"]);
    refused(&["schedules", "ls", "extra"]);
    refused(&["schedules", "frobnicate"]);
}

#[test]
fn locks_commands() {
    let cli = ok(&["locks", "ls", "--output", "json"]);
    assert!(matches!(
        cli.command,
        Some(Command::Locks(LocksCommand::Ls))
    ));
    assert_eq!(cli.global.output, Format::Json);
    for name in ["deploy/prod", "ci:job-17.step_2", "0", &"l".repeat(128)] {
        let cli = ok(&["locks", "release", name]);
        let Some(Command::Locks(LocksCommand::Release(a))) = cli.command else {
            panic!("locks release expected");
        };
        assert_eq!(a.name, name);
    }
    let cli = ok(&["--agent", "h:1", "--token", "t", "locks", "release", "a/b"]);
    assert_eq!(cli.global.token.as_deref(), Some("t"));
    let Some(Command::Locks(LocksCommand::Release(a))) = cli.command else {
        panic!("locks release expected");
    };
    assert_eq!(
        (a.holder, a.fencing_token),
        (None, None),
        "a forced release"
    );
}

#[test]
fn locks_acquire_renew_and_release_by_the_holder() {
    let cli = ok(&["locks", "acquire", "deploy/prod", "--for", "10m"]);
    let Some(Command::Locks(LocksCommand::Acquire(a))) = cli.command else {
        panic!("locks acquire expected");
    };
    assert_eq!(a.name, "deploy/prod");
    assert_eq!(a.lease, Duration::from_secs(600));
    assert_eq!(
        (a.wait, a.holder, a.at_least_for, a.at_most_for),
        (None, None, None, None)
    );
    let cli = ok(&[
        "locks",
        "acquire",
        "deploy/prod",
        "--for",
        "1day",
        "--wait",
        "2m",
        "--holder",
        "ci job #17",
        "--at-least-for",
        "1s",
        "--at-most-for",
        "1h 30m",
        "--output",
        "json",
    ]);
    let Some(Command::Locks(LocksCommand::Acquire(a))) = cli.command else {
        panic!("locks acquire expected");
    };
    assert_eq!(a.lease, Duration::from_secs(86_400));
    assert_eq!(a.wait, Some(Duration::from_secs(120)));
    assert_eq!(a.holder.as_deref(), Some("ci job #17"));
    assert_eq!(a.at_least_for, Some(Duration::from_secs(1)));
    assert_eq!(a.at_most_for, Some(Duration::from_secs(5400)));
    assert_eq!(cli.global.output, Format::Json);

    let cli = ok(&[
        "locks",
        "renew",
        "a",
        "--holder",
        "h",
        "--fencing-token",
        "7",
        "--for",
        "30s",
    ]);
    let Some(Command::Locks(LocksCommand::Renew(r))) = cli.command else {
        panic!("locks renew expected");
    };
    assert_eq!(
        (r.name.as_str(), r.holder.as_str(), r.fencing_token, r.lease),
        ("a", "h", 7, Duration::from_secs(30))
    );

    let cli = ok(&[
        "locks",
        "release",
        "a",
        "--fencing-token",
        "9",
        "--holder",
        "h",
    ]);
    let Some(Command::Locks(LocksCommand::Release(r))) = cli.command else {
        panic!("locks release expected");
    };
    assert_eq!((r.holder.as_deref(), r.fencing_token), (Some("h"), Some(9)));
}

#[test]
fn locks_holder_bad_input_is_refused() {
    let long_holder = "h".repeat(129);
    for args in [
        // acquire: a name, --for, durations within 1s..=1day, a printable holder.
        &["locks", "acquire", "a"][..],
        &["locks", "acquire", "--for", "10m"],
        &["locks", "acquire", "Bad", "--for", "10m"],
        &["locks", "acquire", "a", "--for", "0s"],
        &["locks", "acquire", "a", "--for", "500ms"],
        &["locks", "acquire", "a", "--for", "2days"],
        &["locks", "acquire", "a", "--for", "soon"],
        &["locks", "acquire", "a", "--for", "10m", "--wait", "0s"],
        &["locks", "acquire", "a", "--for", "10m", "--wait", "2days"],
        &["locks", "acquire", "a", "--for", "10m", "--holder", ""],
        &[
            "locks", "acquire", "a", "--for", "10m", "--holder", "a\u{1b}b",
        ],
        &[
            "locks",
            "acquire",
            "a",
            "--for",
            "10m",
            "--holder",
            long_holder.as_str(),
        ],
        &[
            "locks",
            "acquire",
            "a",
            "--for",
            "10m",
            "--at-least-for",
            "0s",
        ],
        &[
            "locks",
            "acquire",
            "a",
            "--for",
            "10m",
            "--at-most-for",
            "25h",
        ],
        &[
            "locks",
            "acquire",
            "a",
            "--for",
            "10m",
            "--fencing-token",
            "1",
        ],
        // --token is the API token: never the fencing token.
        &["locks", "release", "a", "--holder", "h", "--token", "3"],
        // renew: holder, token and --for all needed; no --wait.
        &[
            "locks",
            "renew",
            "a",
            "--holder",
            "h",
            "--fencing-token",
            "1",
        ],
        &["locks", "renew", "a", "--holder", "h", "--for", "1m"],
        &["locks", "renew", "a", "--fencing-token", "1", "--for", "1m"],
        &[
            "locks",
            "renew",
            "a",
            "--holder",
            "h",
            "--fencing-token",
            "0",
            "--for",
            "1m",
        ],
        &[
            "locks",
            "renew",
            "a",
            "--holder",
            "h",
            "--fencing-token",
            "-3",
            "--for",
            "1m",
        ],
        &[
            "locks",
            "renew",
            "a",
            "--holder",
            "h",
            "--fencing-token",
            "1",
            "--for",
            "0s",
        ],
        &[
            "locks",
            "renew",
            "a",
            "--holder",
            "h",
            "--fencing-token",
            "1",
            "--for",
            "1m",
            "--wait",
            "1m",
        ],
        // release: --holder and --fencing-token together or neither; no --wait, no --for.
        &["locks", "release", "a", "--holder", "h"],
        &["locks", "release", "a", "--fencing-token", "3"],
        &[
            "locks",
            "release",
            "a",
            "--holder",
            "h",
            "--fencing-token",
            "x",
        ],
        &["locks", "release", "a", "--wait", "1m"],
        &[
            "locks",
            "release",
            "a",
            "--holder",
            "h",
            "--fencing-token",
            "3",
            "--for",
            "1m",
        ],
    ] {
        refused(args);
    }
    let err = refused(&["locks", "release", "a", "--holder", "h"]).to_string();
    assert!(err.contains("--fencing-token"), "{err}");
    let err = refused(&["locks", "acquire", "a", "--for", "0s"]).to_string();
    assert!(err.contains("1s to 1day"), "{err}");
}

#[test]
fn locks_bad_input_is_refused() {
    for args in [
        &["locks"][..],
        &["locks", "ls", "extra"],
        &["locks", "release"],
        &["locks", "release", "a", "b"],
        &["locks", "release", "Deploy/prod"],
        &["locks", "release", "/root"],
        &["locks", "release", "-dash"],
        &["locks", "release", "a b"],
        &["locks", "release", "a#1"],
        &["locks", "release", "a\u{1b}[2J"],
        &["locks", "release", ""],
        &["locks", "frobnicate"],
    ] {
        refused(args);
    }
    let long = "l".repeat(129);
    let err = refused(&["locks", "release", &long]).to_string();
    assert!(err.contains("invalid lock name"), "{err}");
    assert!(err.contains("1-128 characters"), "{err}");
}

#[test]
fn shards_commands() {
    let cli = ok(&["shards", "create", "orders", "--count", "8"]);
    let Some(Command::Shards(ShardsCommand::Create(a))) = cli.command else {
        panic!("shards create expected");
    };
    assert_eq!((a.group.as_str(), a.count), ("orders", 8));
    for count in ["1", "4096"] {
        ok(&["shards", "create", "eu-west.orders:v2", "--count", count]);
    }
    let cli = ok(&["shards", "ls"]);
    assert!(matches!(
        cli.command,
        Some(Command::Shards(ShardsCommand::Ls(ShardsLsArgs {
            group: None
        })))
    ));
    let cli = ok(&["shards", "ls", "orders", "--output", "json"]);
    let Some(Command::Shards(ShardsCommand::Ls(a))) = cli.command else {
        panic!("shards ls expected");
    };
    assert_eq!(a.group.as_deref(), Some("orders"));
}

#[test]
fn shards_bad_input_is_refused() {
    let long = "g".repeat(65);
    for args in [
        &["shards"][..],
        &["shards", "create", "orders"],
        &["shards", "create", "--count", "8"],
        &["shards", "create", "orders", "--count", "0"],
        &["shards", "create", "orders", "--count", "4097"],
        &["shards", "create", "orders", "--count", "-1"],
        &["shards", "create", "orders", "--count", "eight"],
        &["shards", "create", "Orders", "--count", "8"],
        &["shards", "create", "a/b", "--count", "8"],
        &["shards", "create", long.as_str(), "--count", "8"],
        &["shards", "ls", "orders", "billing"],
        &["shards", "ls", "Orders"],
        &["shards", "ls", "a#1"],
    ] {
        refused(args);
    }
    let err = refused(&["shards", "create", "orders", "--count", "5000"]).to_string();
    assert!(err.contains("from 1 to 4096"), "{err}");
    let err = refused(&["shards", "ls", "-x"]).to_string();
    assert!(!err.is_empty());
}

#[test]
fn wait_flags() {
    let cli = ok(&["wait", "1", "2", "--timeout", "30s", "--interval", "1s"]);
    let Some(Command::Wait(a)) = cli.command else {
        panic!("wait expected");
    };
    assert_eq!(a.ids.ids, [1, 2]);
    assert_eq!(a.timeout, Some(Duration::from_secs(30)));
    assert_eq!(a.interval, Duration::from_secs(1));
    let cli = ok(&["wait", "1"]);
    let Some(Command::Wait(a)) = cli.command else {
        panic!("wait expected");
    };
    assert_eq!(a.timeout, None);
    assert_eq!(a.interval, Duration::from_millis(250));
    refused(&["wait"]);
    refused(&["wait", "1", "--interval", "0ms"]);
}

#[test]
fn help_and_version_are_not_errors() {
    for args in [&["--help"][..], &["--version"], &["enqueue", "--help"]] {
        match parse(args) {
            Ok(_) => panic!("{args:?} should stop parsing"),
            Err(e) => assert_eq!(e.exit_code(), 0, "{args:?}"),
        }
    }
}

#[test]
fn help_documents_the_environment_and_exit_codes() {
    let help = Cli::command().render_long_help().to_string();
    assert!(help.contains("LEASEHOLD_TOKEN"));
    assert!(help.contains("Exit codes"));
}

#[test]
fn demo_defaults_and_bounds() {
    let cli = ok(&["demo"]);
    let Some(Command::Demo(args)) = cli.command else {
        panic!("not the demo: {cli:?}");
    };
    assert_eq!(args.agents, DEFAULT_DEMO_AGENTS);
    assert!(!args.headless);
    assert_eq!(args.database_url, None);
    let cli = ok(&[
        "demo",
        "--headless",
        "--duration",
        "10s",
        "--agents",
        "1",
        "--ascii",
    ]);
    let Some(Command::Demo(args)) = cli.command else {
        panic!("not the demo: {cli:?}");
    };
    assert_eq!(args.duration, Duration::from_secs(10));
    assert_eq!(args.agents, 1);
    assert!(args.console.ascii);
    let cli = ok(&["demo", "--headless"]);
    let Some(Command::Demo(args)) = cli.command else {
        panic!("not the demo: {cli:?}");
    };
    assert_eq!(args.duration, Duration::from_secs(20));

    refused(&["demo", "--agents", "0"]);
    refused(&["demo", "--agents", &(MAX_DEMO_AGENTS + 1).to_string()]);
    refused(&["demo", "--headless", "--duration", "abc"]);
    refused(&["demo", "--headless", "--duration", "0s"]);
    refused(&["demo", "--headless", "--duration", "2days"]);
    let e = refused(&["demo", "--duration", "5s"]);
    assert!(e.to_string().contains("--headless"), "{e}");
}

/// The long help of `path` (a command and its subcommands) in `cmd`.
fn long_help(cmd: &mut clap::Command, path: &[&str]) -> String {
    let mut at = cmd;
    for name in path {
        at = at
            .find_subcommand_mut(name)
            .unwrap_or_else(|| panic!("no command {path:?}"));
    }
    at.render_long_help().to_string()
}

/// Every command's path: `[]` for `leasehold`, then `["demo"]`, `["tasks", "ls"]` …
fn command_paths(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
    out.push(prefix.to_vec());
    for sub in cmd.get_subcommands() {
        let mut path = prefix.to_vec();
        path.push(sub.get_name().to_string());
        command_paths(sub, &path, out);
    }
}

#[test]
fn demo_help_lists_no_connection_flag_and_every_other_help_is_unchanged() {
    let mut plain = Cli::command();
    plain.build();
    let mut ours = Cli::command_line();
    ours.build();
    let mut paths = Vec::new();
    command_paths(&plain, &[], &mut paths);
    assert!(paths.len() > 20, "{paths:?}");
    for path in &paths {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let ours = long_help(&mut ours, &path);
        if path == ["demo"] {
            let flags: Vec<&str> = ours
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|w| w.starts_with("--"))
                .collect();
            for gone in [
                "--agent",
                "--token",
                "--token-file",
                "--socket",
                "--no-socket",
                "--insecure",
                "--verbose",
                "--ca",
                "--cert",
                "--key",
                "--tls",
                "--tls-server-name",
            ] {
                assert!(!flags.contains(&gone), "demo --help lists {gone}:\n{ours}");
            }
            for kept in ["--agents", "--output", "--call-timeout", "--read-only"] {
                assert!(flags.contains(&kept), "demo --help lacks {kept}:\n{ours}");
            }
        } else {
            assert_eq!(
                ours,
                long_help(&mut plain, &path),
                "help of {path:?} changed"
            );
        }
    }
}

#[test]
fn demo_refuses_connection_flags_given_before_or_after_it() {
    for args in [
        &["--agent", "127.0.0.1:9", "demo"][..],
        &["demo", "--agent", "127.0.0.1:9"],
        &["--token", "t", "demo", "--headless"],
        &["demo", "--tls"],
        &["demo", "-v"],
    ] {
        let e = refused(args);
        let text = e.to_string();
        assert!(
            text.contains("does not apply to `leasehold demo`"),
            "{args:?}: {text}"
        );
    }
    let e = refused(&["--agent", "x", "demo"]);
    assert!(e.to_string().contains("--agent does not apply"), "{e}");
    // The flags the demo uses still parse, and the connection flags elsewhere.
    let cli = ok(&["demo", "--output", "json", "--call-timeout", "3s"]);
    assert!(matches!(cli.command, Some(Command::Demo(_))));
    assert_eq!(cli.global.call_timeout, Duration::from_secs(3));
    ok(&["--agent", "127.0.0.1:9", "drain"]);
    ok(&["drain", "--agent", "127.0.0.1:9", "--token", "t"]);
}
