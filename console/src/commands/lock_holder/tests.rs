use std::time::Duration;

use leasehold_shared::domain::ResourceState;

use super::*;
use crate::cli::values;
use crate::convert::resource::tests::{NOW, sent, wire_lock};

fn acquire_args(holder: Option<&str>) -> LockAcquireArgs {
    LockAcquireArgs {
        name: "deploy/prod".into(),
        lease: Duration::from_secs(600),
        wait: Some(Duration::from_secs(120)),
        holder: holder.map(str::to_owned),
        at_least_for: None,
        at_most_for: None,
    }
}

#[allow(deprecated)] // `state` is sent for consoles older than `lease_state`
fn with_state(mut l: v1::ResourceLease, word: &str) -> v1::ResourceLease {
    let (lease_state, state) = sent::<ResourceState>(word);
    l.state = state;
    l.lease_state = lease_state;
    l
}

fn mine(token: i64) -> v1::ResourceLease {
    let mut l = wire_lock("deploy/prod");
    l.owner = "cli:ops@web-1:4242".into();
    l.token = token;
    l
}

#[test]
fn an_acquire_sends_milliseconds_and_asks_for_a_holder_only_without_one() {
    let mut asked = false;
    let plan = prepare_acquire(&acquire_args(None), || {
        asked = true;
        "cli:me@here:1".into()
    })
    .unwrap();
    assert!(asked);
    assert_eq!(
        plan.request,
        v1::AcquireLockRequest {
            name: "deploy/prod".into(),
            holder: "cli:me@here:1".into(),
            ttl_ms: 600_000,
            lock_at_least_for_ms: 0,
            lock_at_most_for_ms: 0,
        }
    );
    assert_eq!(plan.wait, Some(Duration::from_secs(120)));

    let mut args = acquire_args(Some("ci-job-17"));
    args.at_least_for = Some(Duration::from_secs(60));
    args.at_most_for = Some(Duration::from_secs(60));
    let plan = prepare_acquire(&args, || unreachable!("--holder was given")).unwrap();
    assert_eq!(plan.request.holder, "ci-job-17");
    assert_eq!(plan.request.lock_at_least_for_ms, 60_000);
    assert_eq!(plan.request.lock_at_most_for_ms, 60_000);
}

#[test]
fn at_most_shorter_than_at_least_is_refused_before_any_call() {
    let mut args = acquire_args(Some("ci"));
    args.at_least_for = Some(Duration::from_secs(300));
    args.at_most_for = Some(Duration::from_secs(60));
    let err = prepare_acquire(&args, String::new).err();
    assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::USAGE));
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("--at-most-for (1m) must be at least --at-least-for (5m)")
    );
}

#[test]
fn a_renew_sends_holder_token_and_lease() {
    let args = LockRenewArgs {
        name: "deploy/prod".into(),
        holder: "ci-job-17".into(),
        fencing_token: 7,
        lease: Duration::from_secs(90),
    };
    assert_eq!(
        prepare_renew(&args),
        v1::RenewLockRequest {
            name: "deploy/prod".into(),
            holder: "ci-job-17".into(),
            token: 7,
            ttl_ms: 90_000,
        }
    );
}

#[test]
fn the_default_holder_names_user_host_and_pid_printably() {
    assert_eq!(
        holder_id(Some("ops"), Some("web-1\n"), 4242),
        "cli:ops@web-1:4242"
    );
    assert_eq!(holder_id(None, None, 1), "cli:unknown@localhost:1");
    assert_eq!(
        holder_id(Some("a b\u{1b}[2J"), Some(" \t"), 7),
        "cli:ab[2J@localhost:7"
    );
    let long = holder_id(Some(&"é".repeat(100)), Some(&"h".repeat(300)), u32::MAX);
    assert!(long.len() <= values::MAX_LOCK_HOLDER_LEN, "{long}");
    assert!(
        long.starts_with(&format!("cli:{}@", "é".repeat(20))),
        "{long}"
    );
    assert!(
        long.ends_with(&format!("@{}:{}", "h".repeat(64), u32::MAX)),
        "{long}"
    );
    // What this process would use is a holder the CLI itself accepts.
    let own = default_holder();
    assert_eq!(values::lock_holder(&own).as_deref(), Ok(own.as_str()));
    assert!(own.ends_with(&format!(":{}", std::process::id())), "{own}");
}

#[test]
fn waits_back_off_from_200ms_to_at_most_2s() {
    let pauses: Vec<Duration> = retry_pauses().take(40).collect();
    assert_eq!(pauses.len(), 40, "the pauses never run out");
    assert!(
        (FIRST_RETRY..=FIRST_RETRY * 2).contains(&pauses[0]),
        "{pauses:?}"
    );
    for p in &pauses {
        assert!((FIRST_RETRY..=MAX_RETRY * 2).contains(p), "{pauses:?}");
    }
    assert!(pauses[39] >= MAX_RETRY, "it backs off: {pauses:?}");
}

#[test]
fn an_acquired_lock_prints_holder_token_and_until() {
    let a = acquired(
        "deploy/prod".into(),
        v1::AcquireLockResponse {
            acquired: true,
            lock: Some(mine(8)),
        },
    )
    .unwrap();
    assert_eq!(
        acquired_line(&a),
        "acquired lock deploy/prod (holder cli:ops@web-1:4242, token 8, until \
         2025-12-01T11:20:12.000Z)"
    );
    let text = crate::output::to_json(&a).unwrap();
    assert!(!text.contains('\n'));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "name": "deploy/prod",
            "acquired": true,
            "holder": "cli:ops@web-1:4242",
            "token": 8,
            "state": "held",
            "lease_until": "2025-12-01T11:20:12.000Z",
            "lease_until_ms": NOW + 12_000,
            "lock_at_least_until": null,
            "lock_at_least_until_ms": null,
            "lock_at_most_until": "2025-12-01T12:20:00.000Z",
            "lock_at_most_until_ms": NOW + 3_600_000,
        })
    );
}

#[test]
fn a_lock_held_elsewhere_names_its_holder_token_and_until() {
    let held = |lock: v1::ResourceLease| {
        let a = acquired(
            "deploy/prod".into(),
            v1::AcquireLockResponse {
                acquired: false,
                lock: Some(lock),
            },
        )
        .unwrap();
        assert!(!a.acquired);
        held_line(&a)
    };
    assert_eq!(
        held(wire_lock("deploy/prod")),
        "lock deploy/prod is held by ci-job-17 (token 7) until 2025-12-01T11:20:12.000Z"
    );
    assert!(
        held(with_state(wire_lock("deploy/prod"), "released"))
            .ends_with("(given back; held until its lock_at_least_for)")
    );
    assert!(
        held(with_state(wire_lock("deploy/prod"), "expired"))
            .ends_with("(its lease ended; free once the agents' grace passes)")
    );
    let mut hostile = wire_lock("deploy/prod");
    hostile.owner = "\u{1b}[2Jevil".into();
    let line = held(hostile);
    assert!(!line.contains('\u{1b}'), "{line}");
    assert!(line.contains("held by \\u{1b}[2Jevil"), "{line}");
}

#[test]
fn a_reply_outside_the_contract_is_unreachable() {
    let err = acquired(
        "x".into(),
        v1::AcquireLockResponse {
            acquired: true,
            lock: None,
        },
    )
    .err();
    assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::UNREACHABLE));
    let mut bad = mine(1);
    bad.token = -1;
    let err = renewed(
        "x".into(),
        v1::RenewLockResponse {
            renewed: true,
            lock: Some(bad),
        },
    )
    .err();
    assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::UNREACHABLE));
}

#[test]
fn a_renew_or_release_of_an_unknown_lock_is_not_found() {
    let err = renewed(
        "gone".into(),
        v1::RenewLockResponse {
            renewed: false,
            lock: None,
        },
    )
    .err();
    assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::USAGE));
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("renew lock gone: no lock gone; `leasehold locks ls` lists them (not found)")
    );
    let err = given_back(
        "gone".into(),
        v1::ReleaseLockResponse {
            released: false,
            lock: None,
        },
    )
    .err();
    assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::USAGE));
}

#[test]
fn a_fenced_renew_or_release_says_where_the_lock_is_now() {
    let r = renewed(
        "deploy/prod".into(),
        v1::RenewLockResponse {
            renewed: false,
            lock: Some(wire_lock("deploy/prod")),
        },
    )
    .unwrap();
    assert_eq!(
        fenced_line(&r.name, "cli:ops@web-1:4242", 6, &r.lock),
        "lock deploy/prod is no longer held by cli:ops@web-1:4242 with token 6 (held by \
         ci-job-17, token 7, until 2025-12-01T11:20:12.000Z); nothing changed"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["renewed"], false);
    assert_eq!(json["holder"], "ci-job-17");
    let free = v1::ResourceLease {
        name: "deploy/prod".into(),
        token: 7,
        ..with_state(v1::ResourceLease::default(), "free")
    };
    let g = given_back(
        "deploy/prod".into(),
        v1::ReleaseLockResponse {
            released: false,
            lock: Some(free),
        },
    )
    .unwrap();
    assert_eq!(
        fenced_line(&g.name, "ci", 7, &g.lock),
        "lock deploy/prod is no longer held by ci with token 7 (it is free); nothing changed"
    );
    let json = serde_json::to_value(&g).unwrap();
    assert_eq!(json["released"], false);
    assert_eq!(json["holder"], serde_json::Value::Null);
    assert_eq!(json["lease_until"], serde_json::Value::Null);
}

#[test]
fn a_release_says_when_lock_at_least_for_keeps_it_held() {
    let mut stays = with_state(mine(8), "released");
    stays.lock_at_least_until_ms = NOW + 30_000;
    stays.lease_until_ms = NOW + 30_000;
    let g = given_back(
        "deploy/prod".into(),
        v1::ReleaseLockResponse {
            released: true,
            lock: Some(stays),
        },
    )
    .unwrap();
    assert_eq!(
        released_line(&g, "cli:ops@web-1:4242", 8),
        "released lock deploy/prod (holder cli:ops@web-1:4242, token 8); it stays held until \
         2025-12-01T11:20:30.000Z (lock_at_least_for)"
    );
    let free = with_state(
        v1::ResourceLease {
            name: "deploy/prod".into(),
            token: 8,
            ..Default::default()
        },
        "free",
    );
    let g = given_back(
        "deploy/prod".into(),
        v1::ReleaseLockResponse {
            released: true,
            lock: Some(free),
        },
    )
    .unwrap();
    assert_eq!(
        released_line(&g, "ci", 8),
        "released lock deploy/prod (holder ci, token 8)"
    );
}

#[test]
fn not_held_is_its_own_exit_code() {
    assert_eq!(exit::LOCK_NOT_HELD, 1);
    for other in [exit::OK, exit::USAGE, exit::UNREACHABLE, exit::DENIED] {
        assert_ne!(exit::LOCK_NOT_HELD, other);
    }
}
