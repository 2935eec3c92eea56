//! Store conformance: agent registry (identity per process start), the leader lease (fenced by
//! term, taken over only after grace), task listing and detail, and migrations run twice and
//! concurrently by the real `leasehold-agent migrate`; on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::time::Duration;

use leasehold_shared::domain::AgentState;
use leasehold_shared::domain::TaskStatus;
use leasehold_shared::store::{
    AgentHeartbeatParams, AgentRegisterParams, ClaimParams, CompleteParams, Completion,
    HolderWrite, LeaderElectParams, LeaderOutcome, LeaderRenewParams, LeaderRenewal, NewTask,
    TaskListParams,
};
use leasehold_shared::{AgentId, LeaseKey, TaskError};
use leasehold_tests::helpers::tt;
use leasehold_tests::{Backend, Rows, StoreDb, TaskSpec, Val, binary, conformance};
use serde_json::json;

fn register(name: &str) -> AgentRegisterParams {
    AgentRegisterParams {
        name: name.into(),
        host: "host-a".into(),
        pid: 4242,
        grpc_address: Some("127.0.0.1:7070".into()),
        version: "0.1.0".into(),
        task_types: vec![tt("email"), tt("noop")],
        local_concurrency: 8,
        alive_for: Duration::from_secs(30),
    }
}

conformance!(every_process_start_gets_its_own_agent_id);
async fn every_process_start_gets_its_own_agent_id(db: StoreDb) {
    let store = db.store();
    let first = store.agent_register(register("web-1")).await.unwrap();
    let second = store.agent_register(register("web-1")).await.unwrap();
    assert_ne!(first.id, second.id);
    assert!(first.id.as_str().starts_with("web-1#") && second.id.as_str().starts_with("web-1#"));
    assert_eq!(first.state, AgentState::Running);
    assert_eq!(first.task_types, vec!["email", "noop"]);

    let beat = AgentHeartbeatParams {
        id: first.id.clone(),
        state: AgentState::Draining,
        active: 3,
        local_concurrency: 4,
    };
    assert!(store.agent_heartbeat(beat.clone()).await.unwrap());
    store.agent_mark_stopped(second.id.clone()).await.unwrap();
    assert!(
        !store
            .agent_heartbeat(AgentHeartbeatParams {
                id: second.id.clone(),
                ..beat.clone()
            })
            .await
            .unwrap()
    );
    assert!(
        !store
            .agent_heartbeat(AgentHeartbeatParams {
                id: AgentId::new("ghost#1").unwrap(),
                ..beat
            })
            .await
            .unwrap()
    );

    let agents = store.agent_list().await.unwrap();
    assert_eq!(agents.len(), 2);
    let a = agents.iter().find(|a| a.id == first.id).unwrap();
    assert_eq!(
        (a.state, a.active, a.local_concurrency),
        (AgentState::Draining, 3, 4)
    );
    assert!(a.now >= a.heartbeat_at);
    let b = agents.iter().find(|a| a.id == second.id).unwrap();
    assert_eq!(b.state, AgentState::Stopped);
    assert!(b.stopped_at.is_some());

    for bad in ["", "web#1", "has space", &"x".repeat(129)] {
        assert!(
            store.agent_register(register(bad)).await.is_err(),
            "{bad:?} accepted"
        );
    }
    assert_eq!(store.agent_list().await.unwrap().len(), 2);
    db.drop_db().await.unwrap();
}

conformance!(silent_and_stopped_agents_drop_out_of_the_list_after_an_hour);
async fn silent_and_stopped_agents_drop_out_of_the_list_after_an_hour(db: StoreDb) {
    // A crashed agent (kill -9) never marks itself stopped: its row stays `running` with an
    // old heartbeat. The registry shows it (as down) for an hour, then no more, as it does a
    // stopped one.
    let store = db.store();
    let mut ids = Vec::new();
    for name in [
        "live",
        "crashed-recently",
        "crashed-long-ago",
        "stopped-recently",
        "stopped-long-ago",
    ] {
        ids.push(store.agent_register(register(name)).await.unwrap().id);
    }
    let set = |secs: f64| [("heartbeat_at", Val::At(secs))];
    assert_eq!(
        db.update(Rows::Agent(ids[1].as_str()), &set(-50.0 * 60.0))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        db.update(Rows::Agent(ids[2].as_str()), &set(-61.0 * 60.0))
            .await
            .unwrap(),
        1
    );
    for id in &ids[3..] {
        store.agent_mark_stopped(id.clone()).await.unwrap();
    }
    let long_ago = [
        ("heartbeat_at", Val::At(-2.0 * 3600.0)),
        ("stopped_at", Val::At(-61.0 * 60.0)),
    ];
    assert_eq!(
        db.update(Rows::Agent(ids[4].as_str()), &long_ago)
            .await
            .unwrap(),
        1
    );

    let listed: HashSet<AgentId> = store
        .agent_list()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    let expected: HashSet<AgentId> = [&ids[0], &ids[1], &ids[3]].into_iter().cloned().collect();
    assert_eq!(listed, expected);
    // The row is kept: a silent agent that comes back (SIGCONT after an hour) is listed again.
    assert!(
        store
            .agent_heartbeat(AgentHeartbeatParams {
                id: ids[2].clone(),
                state: AgentState::Running,
                active: 0,
                local_concurrency: 8,
            })
            .await
            .unwrap()
    );
    assert_eq!(store.agent_list().await.unwrap().len(), 4);
    db.drop_db().await.unwrap();
}

conformance!(leadership_is_fenced_by_term_and_moves_only_after_grace);
async fn leadership_is_fenced_by_term_and_moves_only_after_grace(db: StoreDb) {
    let store = db.store();
    let a = AgentId::new("a#1").unwrap();
    let b = AgentId::new("b#1").unwrap();
    let elect = |owner: &AgentId| LeaderElectParams {
        owner: owner.clone(),
        ttl: Duration::from_secs(10),
        grace: Duration::from_secs(5),
    };

    let LeaderOutcome::Leader { term: t1, .. } =
        store.leader_attempt_elect(elect(&a)).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(t1, 1);
    let LeaderOutcome::Leader { term: again, .. } =
        store.leader_attempt_elect(elect(&a)).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(again, 1, "re-electing the holder keeps the term");
    match store.leader_attempt_elect(elect(&b)).await.unwrap() {
        LeaderOutcome::Follower { leader, term, .. } => {
            assert_eq!((leader, term), (Some(a.clone()), 1))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store
            .leader_renew(LeaderRenewParams {
                owner: a.clone(),
                term: 1,
                ttl: Duration::from_secs(10)
            })
            .await
            .unwrap(),
        LeaderRenewal::Held { .. }
    ));

    // Expired but within grace: a blip does not move leadership.
    db.update(Rows::Leader, &[("lease_until", Val::At(-2.0))])
        .await
        .unwrap();
    assert!(matches!(
        store.leader_attempt_elect(elect(&b)).await.unwrap(),
        LeaderOutcome::Follower { .. }
    ));
    // Past grace: taken over with a new term; the old leader is fenced.
    db.update(Rows::Leader, &[("lease_until", Val::At(-6.0))])
        .await
        .unwrap();
    let LeaderOutcome::Leader { term: t2, .. } =
        store.leader_attempt_elect(elect(&b)).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(t2, 2);
    assert_eq!(
        store
            .leader_renew(LeaderRenewParams {
                owner: a.clone(),
                term: 1,
                ttl: Duration::from_secs(10)
            })
            .await
            .unwrap(),
        LeaderRenewal::Fenced
    );
    assert_eq!(
        store.leader_resign(a.clone(), 1).await.unwrap(),
        HolderWrite::Fenced
    );
    assert_eq!(
        store.leader_resign(b.clone(), 2).await.unwrap(),
        HolderWrite::Held
    );
    let LeaderOutcome::Leader { term: t3, .. } =
        store.leader_attempt_elect(elect(&a)).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(
        t3, 3,
        "a resigned leadership is free at once, under a new term"
    );
    db.drop_db().await.unwrap();
}

conformance!(tasks_list_by_filter_in_keyset_pages_and_show_their_attempts);
async fn tasks_list_by_filter_in_keyset_pages_and_show_their_attempts(db: StoreDb) {
    let store = db.store();
    let tasks: Vec<NewTask> = (0..250)
        .map(|n| {
            NewTask::new(
                tt(if n % 2 == 0 { "even" } else { "odd" }),
                json!({ "n": n }),
            )
        })
        .collect();
    store.task_enqueue_many(tasks).await.unwrap();
    let mut seen = HashSet::new();
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .task_list(TaskListParams {
                before,
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        pages.push(page.tasks.len());
        assert!(
            page.tasks.windows(2).all(|w| w[0].id > w[1].id),
            "newest first"
        );
        for t in &page.tasks {
            assert!(seen.insert(t.id), "task {} on two pages", t.id);
        }
        match page.next_before {
            Some(cursor) => before = Some(cursor),
            None => break,
        }
    }
    assert_eq!(pages, vec![100, 100, 50]);

    let odd = store
        .task_list(TaskListParams {
            task_type: Some(tt("odd")),
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(odd.tasks.len(), 125);

    // A task that failed once then succeeded: detail shows both attempts; text search finds errors.
    let id = db
        .insert_task(TaskSpec::new("detail", "running"))
        .await
        .unwrap();
    let owner = AgentId::new(leasehold_tests::factory::FACTORY_OWNER).unwrap();
    store
        .task_complete(CompleteParams {
            key: LeaseKey {
                id: leasehold_shared::TaskId(id),
                owner: owner.clone(),
                epoch: leasehold_shared::LeaseEpoch(1),
            },
            completion: Completion::Failed {
                error: TaskError::retryable("SMTP_Timeout", "mail server slow"),
            },
        })
        .await
        .unwrap();
    db.update_task(id, &[("available_at", Val::At(0.0))])
        .await
        .unwrap();
    let claimed = store
        .task_claim(ClaimParams {
            owner: owner.clone(),
            task_types: vec![tt("detail")],
            batch: 1,
            lease_ttl: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let t = &claimed.tasks[0];
    store
        .task_complete(CompleteParams {
            key: LeaseKey {
                id: t.id,
                owner,
                epoch: t.lease_epoch,
            },
            completion: Completion::Succeeded {
                result: Some(json!({"sent": true})),
            },
        })
        .await
        .unwrap();
    let detail = store.task_get(t.id).await.unwrap().unwrap();
    assert_eq!(detail.task.status, TaskStatus::Succeeded);
    assert_eq!(detail.attempts.len(), 2);
    assert_eq!(
        detail.attempts[0].error.as_ref().unwrap().code,
        "SMTP_Timeout"
    );
    assert_eq!(
        (detail.attempts[0].attempt, detail.attempts[1].attempt),
        (1, 2)
    );
    assert_eq!(detail.task.result, Some(json!({"sent": true})));
    let found = store
        .task_list(TaskListParams {
            text: Some("smtp_timeout".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        found.tasks.iter().map(|t| t.id.0).collect::<Vec<_>>(),
        vec![id]
    );
    let succeeded = store
        .task_list(TaskListParams {
            statuses: vec![TaskStatus::Succeeded],
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(succeeded.tasks.len(), 1);
    assert!(
        store
            .task_get(leasehold_shared::TaskId(987_654))
            .await
            .unwrap()
            .is_none()
    );
    db.drop_db().await.unwrap();
}

conformance!(
    migrate_runs_twice_and_from_two_processes_at_once,
    by_backend
);
async fn migrate_runs_twice_and_from_two_processes_at_once(backend: Backend) {
    let db = StoreDb::new_empty(backend).await.unwrap();
    let agent = binary("leasehold-agent").await.unwrap();
    let run = || {
        tokio::process::Command::new(&agent)
            .args(["migrate", "--database-url", db.url()])
            .env_remove("LEASEHOLD_DATABASE_URL")
            .output()
    };
    let (one, two) = tokio::join!(run(), run());
    for out in [one.unwrap(), two.unwrap()] {
        assert!(
            out.status.success(),
            "migrate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let again = run().await.unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    // Every embedded migration applied exactly once.
    assert_eq!(
        db.count("SELECT count(*) FROM _sqlx_migrations WHERE success")
            .await
            .unwrap(),
        db.migrations_embedded() as i64
    );
    let at_least = match backend {
        Backend::Postgres => 2,
        Backend::Sqlite => 1,
    };
    assert!(db.migrations_embedded() >= at_least);
    assert_eq!(
        db.count("SELECT count(*) FROM policies WHERE scope = '*'")
            .await
            .unwrap(),
        1
    );
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn migrate_refuses_a_bad_url_and_reports_an_unreachable_server() {
    let agent = binary("leasehold-agent").await.unwrap();
    // A bad URL is a clear usage error, an unreachable server exit code 3.
    let bad = tokio::process::Command::new(&agent)
        .args(["migrate", "--database-url", "mysql://x"])
        .output()
        .await
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unsupported database URL"));
    let down = tokio::process::Command::new(&agent)
        .args([
            "migrate",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/none?connect_timeout=2",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(
        down.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
}
