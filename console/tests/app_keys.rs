//! The console's key paths, end to end through the app with the fixture cluster: what each
//! key sends (or refuses to send), confirm rules, typed counts, read-only, selection that
//! follows the task id, filters pushed to the agent, freezing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// The fixtures build agent messages as an agent older than the state and outcome enums did
// (words only): the screens must read the same from them.
#![allow(deprecated)]

mod fixture;

use leasehold_console::app::App;
use leasehold_console::event::{Event, LimitScope, Reply, RequestKind, TaskFilter};
use leasehold_console::input::Key;
use leasehold_console::state::{Overlay, Settings, View};
use leasehold_proto::v1 as pb;

fn app() -> App {
    fixture::app(Settings::default())
}

fn keys(app: &mut App, keys: &[Key]) {
    for k in keys {
        app.on_key(*k);
    }
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        app.on_key(Key::Char(c));
    }
}

fn kinds(app: &mut App) -> Vec<RequestKind> {
    app.take_requests().into_iter().map(|r| r.kind).collect()
}

#[test]
fn cancel_asks_first_with_the_focus_on_cancel_and_y_sends_it() {
    let mut app = app();
    app.take_requests();
    let first = app.state.selected().unwrap().to_string();
    app.on_key(Key::Char('x'));
    assert!(matches!(app.state.top(), Some(Overlay::Confirm(_))));
    // Enter on the default focus (Cancel) closes without sending.
    app.on_key(Key::Enter);
    assert!(app.state.top().is_none());
    assert!(kinds(&mut app).is_empty());
    keys(&mut app, &[Key::Char('x'), Key::Char('y')]);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::Cancel {
            ids: vec![first.parse().unwrap()]
        }]
    );
    assert_eq!(app.state.log.len(), 1, "the action is in the log");
}

#[test]
fn marked_rows_are_what_an_action_applies_to() {
    let mut app = app();
    app.take_requests();
    keys(&mut app, &[Key::Char(' '), Key::Char('j'), Key::Char(' ')]);
    assert_eq!(app.state.marks.len(), 2);
    keys(&mut app, &[Key::Char('x'), Key::Tab, Key::Enter]);
    let sent = kinds(&mut app);
    assert!(
        matches!(sent.as_slice(), [RequestKind::Cancel { ids }] if ids.len() == 2),
        "expected one cancel of 2 ids: {sent:?}"
    );
    assert!(app.state.marks.is_empty(), "marks clear once acted on");
}

#[test]
fn above_fifty_tasks_the_count_must_be_typed() {
    let mut app = app();
    app.take_requests();
    app.state.marks.extend(1000..1060);
    app.on_key(Key::Char('x'));
    app.on_key(Key::Char('y'));
    assert!(
        kinds(&mut app).is_empty(),
        "y alone does not confirm 60 tasks"
    );
    assert!(app.state.status.as_ref().unwrap().text.contains("type 60"));
    typed(&mut app, "6");
    app.on_key(Key::Char('y'));
    assert!(kinds(&mut app).is_empty(), "a wrong count does not confirm");
    typed(&mut app, "0");
    app.on_key(Key::Char('y'));
    assert!(matches!(kinds(&mut app).as_slice(), [RequestKind::Cancel { ids }] if ids.len() == 60));
}

#[test]
fn requeue_all_matching_counts_first_and_wants_the_count_typed() {
    let mut app = app();
    app.on_key(Key::Char('4'));
    fixture::answer_dead_page(&mut app);
    keys(&mut app, &[Key::Char('/')]);
    typed(&mut app, "type:mail code:timeout");
    app.on_key(Key::Enter);
    let filter = TaskFilter {
        text: None,
        task_type: Some("mail".into()),
        error_code: Some("timeout".into()),
    };
    assert!(matches!(kinds(&mut app).as_slice(),
        [RequestKind::DeadPage { filter: f, before_id: 0, .. }] if *f == filter));
    app.on_key(Key::Char('R'));
    let requests = app.take_requests();
    assert_eq!(
        requests.iter().map(|r| r.kind.clone()).collect::<Vec<_>>(),
        vec![RequestKind::RequeueDead {
            filter: filter.clone(),
            dry_run: true
        }]
    );
    app.on_key(Key::Char('y'));
    assert!(
        kinds(&mut app).is_empty(),
        "nothing is sent before the count is known"
    );
    app.on_event(Event::Reply {
        id: requests[0].id,
        reply: Ok(Reply::Count(3)),
    });
    app.on_key(Key::Char('y'));
    assert!(
        kinds(&mut app).is_empty(),
        "\"all matching\" always wants the count typed"
    );
    typed(&mut app, "3");
    app.on_key(Key::Char('y'));
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::RequeueDead {
            filter,
            dry_run: false
        }]
    );
}

#[test]
fn free_text_is_not_a_bulk_requeue_filter() {
    let mut app = app();
    app.on_key(Key::Char('4'));
    fixture::answer_dead_page(&mut app);
    app.on_key(Key::Char('/'));
    typed(&mut app, "mailbox");
    app.on_key(Key::Enter);
    app.take_requests();
    app.on_key(Key::Char('R'));
    assert!(kinds(&mut app).is_empty());
    assert!(app.state.top().is_none());
    assert!(app.state.status.as_ref().unwrap().error);
}

#[test]
fn read_only_sends_nothing_and_says_why() {
    // An older agent names the caller's role by its word, a current one by the enum (alone here).
    let older = pb::ListAgentsResponse {
        caller_role: "viewer".into(),
        now_ms: fixture::NOW,
        ..Default::default()
    };
    let current = pb::ListAgentsResponse {
        role: pb::Role::Viewer as i32,
        now_ms: fixture::NOW,
        ..Default::default()
    };
    for agents in [older, current] {
        refuses_every_action(agents);
    }
}

fn refuses_every_action(agents: pb::ListAgentsResponse) {
    let mut app = app();
    app.on_event(Event::Agents(agents));
    app.take_requests();
    for (view, key) in [
        ('1', 'x'),
        ('4', 'r'),
        ('4', 'R'),
        ('5', '+'),
        ('5', 'p'),
        ('5', '='),
        ('6', 'D'),
        ('1', 'C'),
        ('7', 'e'),
        ('7', 'd'),
        ('7', 't'),
    ] {
        keys(&mut app, &[Key::Char(view), Key::Char(key)]);
        let sent: Vec<RequestKind> = kinds(&mut app)
            .into_iter()
            .filter(|k| !matches!(k, RequestKind::DeadPage { .. } | RequestKind::Schedules))
            .collect();
        assert!(sent.is_empty(), "{view}{key} sent {sent:?}");
        assert!(app.state.top().is_none(), "{view}{key} opened a dialog");
        let status = app.state.status.clone().unwrap();
        assert!(
            status.error && status.text.contains("read-only"),
            "{status:?}"
        );
    }
}

/// The app on the Schedules view with the fixture's schedules loaded.
fn on_schedules() -> App {
    let mut app = app();
    app.on_key(Key::Char('7'));
    fixture::answer_schedules(&mut app);
    app.on_tick(0);
    app.take_requests();
    app
}

#[test]
fn schedule_actions_ask_first_and_y_sends_them() {
    let mut app = on_schedules();
    assert_eq!(app.state.selected(), Some("billing.invoices"));
    app.on_key(Key::Char('e'));
    let Some(Overlay::Confirm(c)) = app.state.top() else {
        panic!("e opens a confirm dialog: {:?}", app.state.top());
    };
    assert_eq!(c.what(), "schedule billing.invoices");
    // Enter on the default focus (No) closes without sending.
    app.on_key(Key::Enter);
    assert!(app.state.top().is_none());
    assert!(kinds(&mut app).is_empty());
    keys(&mut app, &[Key::Char('e'), Key::Char('y')]);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::SetScheduleEnabled {
            name: "billing.invoices".into(),
            enabled: true
        }]
    );
    keys(&mut app, &[Key::Char('d'), Key::Esc]);
    assert!(kinds(&mut app).is_empty(), "esc sends nothing");
    keys(&mut app, &[Key::Char('d'), Key::Tab, Key::Enter]);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::SetScheduleEnabled {
            name: "billing.invoices".into(),
            enabled: false
        }]
    );
    keys(&mut app, &[Key::Char('j'), Key::Char('t'), Key::Char('y')]);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::TriggerSchedule {
            name: "cleanup".into()
        }]
    );
    let logged: Vec<&str> = app.state.log.iter().map(|e| e.what.as_str()).collect();
    assert_eq!(
        logged,
        [
            "enable schedule billing.invoices",
            "disable schedule billing.invoices",
            "trigger schedule cleanup"
        ]
    );
    // End still goes to the last row; e does not.
    app.on_key(Key::End);
    assert_eq!(app.state.selected(), Some("reports.monthly"));
}

#[test]
fn a_schedule_action_reply_flashes_and_reloads_the_schedules() {
    let mut app = on_schedules();
    keys(&mut app, &[Key::Char('t'), Key::Char('y')]);
    let r = app.take_requests().pop().unwrap();
    app.on_event(Event::Reply {
        id: r.id,
        reply: Ok(Reply::Action {
            summary: "triggered schedule billing.invoices: task 5040".into(),
            failed: 0,
        }),
    });
    let status = app.state.status.clone().unwrap();
    assert!(
        !status.error && status.text.contains("task 5040"),
        "{status:?}"
    );
    assert_eq!(kinds(&mut app), vec![RequestKind::Schedules]);
    keys(&mut app, &[Key::Char('d'), Key::Char('y')]);
    let r = app.take_requests().pop().unwrap();
    app.on_event(Event::Reply {
        id: r.id,
        reply: Err("disable schedule billing.invoices: no schedule (not found)".into()),
    });
    let status = app.state.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("not found"),
        "{status:?}"
    );
}

#[test]
fn schedules_are_read_about_once_a_second_while_shown() {
    let mut app = app();
    app.take_requests();
    app.on_key(Key::Char('7'));
    let requests = app.take_requests();
    assert_eq!(
        requests.iter().map(|r| r.kind.clone()).collect::<Vec<_>>(),
        vec![RequestKind::Schedules]
    );
    app.on_tick(900);
    assert!(kinds(&mut app).is_empty(), "one read on its way at a time");
    app.on_event(Event::Reply {
        id: requests[0].id,
        reply: Err("list schedules: connection refused (unavailable)".into()),
    });
    assert!(app.state.live.schedules.error.is_some());
    app.on_tick(950);
    assert!(kinds(&mut app).is_empty(), "not due yet");
    app.on_tick(1_000);
    let requests = app.take_requests();
    assert_eq!(
        requests.iter().map(|r| r.kind.clone()).collect::<Vec<_>>(),
        vec![RequestKind::Schedules]
    );
    app.on_event(Event::Reply {
        id: requests[0].id,
        reply: Ok(Reply::Schedules(fixture::schedules())),
    });
    assert!(app.state.live.schedules.error.is_none());
    assert_eq!(app.state.row_keys(View::Schedules).len(), 6);
    app.on_key(Key::Char('1'));
    app.on_tick(10_000);
    assert!(
        kinds(&mut app).is_empty(),
        "no reads while another view is shown"
    );
    // ctrl-r reads at once.
    app.on_key(Key::Char('7'));
    fixture::answer_schedules(&mut app);
    app.on_key(Key::Ctrl('r'));
    assert_eq!(kinds(&mut app), vec![RequestKind::Schedules]);
}

#[test]
fn schedules_filter_and_sort_locally() {
    let mut app = on_schedules();
    app.on_key(Key::Char('/'));
    typed(&mut app, "mail");
    app.on_key(Key::Enter);
    assert_eq!(
        app.state.row_keys(View::Schedules),
        ["billing.invoices", "digest.weekly"]
    );
    app.on_key(Key::Esc);
    app.on_key(Key::Char('s'));
    // Next fire, soonest first; the disabled one last.
    assert_eq!(
        app.state.row_keys(View::Schedules),
        [
            "heartbeat",
            "cleanup",
            "billing.invoices",
            "digest.weekly",
            "reports.monthly",
            "export.hourly"
        ]
    );
}

#[test]
fn the_selection_follows_the_task_not_the_row() {
    let mut app = app();
    keys(&mut app, &[Key::Char('j'), Key::Char('j')]);
    let chosen = app.state.selected().unwrap().to_string();
    // A new lease with less time left arrives at the top.
    let mut lease = fixture::lease(999, "sleep", "web-1#1", 1, 0);
    lease.lease_until_ms = fixture::NOW - 10_000;
    app.on_event(Event::Watch {
        addr: fixture::WEB1.into(),
        update: pb::WatchUpdate {
            now_ms: fixture::NOW,
            seq: 9,
            agent_id: "web-1#1".into(),
            deltas: vec![pb::Delta {
                kind: Some(pb::delta::Kind::LeaseAcquired(lease)),
            }],
            ..Default::default()
        },
    });
    app.on_tick(0);
    assert_eq!(app.state.selected(), Some(chosen.as_str()));
    assert_eq!(app.state.row_keys(View::Leases)[0], "999");
}

#[test]
fn limits_step_by_one_and_typed_limits_are_checked() {
    let mut app = app();
    app.on_key(Key::Char('5'));
    // Types sorted by name: export:csv (2), mail (20), report.nightly (none), sleep (none).
    app.on_key(Key::Char('j'));
    app.take_requests();
    app.on_key(Key::Char('+'));
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::SetConcurrency {
            scope: LimitScope::Type("mail".into()),
            limit: Some(21)
        }]
    );
    app.on_key(Key::Char('='));
    typed(&mut app, "lots");
    app.on_key(Key::Enter);
    assert!(kinds(&mut app).is_empty());
    assert!(
        matches!(app.state.top(), Some(Overlay::Prompt(_))),
        "a bad limit keeps the prompt"
    );
    keys(&mut app, &[Key::Ctrl('u')]);
    typed(&mut app, "none");
    app.on_key(Key::Enter);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::SetConcurrency {
            scope: LimitScope::Type("mail".into()),
            limit: None
        }]
    );
    // An unlimited type cannot be stepped.
    keys(&mut app, &[Key::Char('j'), Key::Char('-')]);
    assert!(kinds(&mut app).is_empty());
    // p pauses an active type and resumes a paused one.
    app.on_key(Key::Char('p'));
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::Pause {
            task_type: "report.nightly".into(),
            pause: false
        }]
    );
}

#[test]
fn agent_limits_and_drain_go_to_that_agent() {
    let mut app = app();
    app.on_key(Key::Char('6'));
    app.on_key(Key::Char('j')); // web-1#1
    app.take_requests();
    app.on_key(Key::Char('-'));
    let scope = LimitScope::Agent {
        addr: fixture::WEB1.into(),
        agent_id: "web-1#1".into(),
    };
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::SetConcurrency {
            scope,
            limit: Some(49)
        }]
    );
    keys(&mut app, &[Key::Char('D'), Key::Char('y')]);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::Drain {
            addr: fixture::WEB1.into()
        }]
    );
}

#[test]
fn filters_narrow_live_views_as_typed_and_esc_clears_them() {
    let mut app = app();
    app.on_key(Key::Char('/'));
    typed(&mut app, "report");
    assert_eq!(
        app.state.row_keys(View::Leases).len(),
        4,
        "filtered while typing"
    );
    app.on_key(Key::Enter);
    assert_eq!(app.state.row_keys(View::Leases).len(), 4);
    app.on_key(Key::Esc);
    assert_eq!(app.state.row_keys(View::Leases).len(), 20);
}

#[test]
fn freezing_keeps_the_screen_while_updates_continue() {
    let mut app = app();
    app.on_key(Key::Char('Z'));
    app.on_event(Event::Watch {
        addr: fixture::WEB1.into(),
        update: pb::WatchUpdate {
            now_ms: fixture::NOW,
            seq: 10,
            agent_id: "web-1#1".into(),
            deltas: vec![pb::Delta {
                kind: Some(pb::delta::Kind::LeaseReleased(pb::LeaseReleased {
                    task_id: 101,
                    epoch: 3,
                    outcome: "succeeded".into(),
                    ..Default::default()
                })),
            }],
            ..Default::default()
        },
    });
    assert_eq!(app.state.row_keys(View::Leases).len(), 20, "frozen");
    app.on_key(Key::Char('Z'));
    assert_eq!(app.state.row_keys(View::Leases).len(), 19, "live again");
}

#[test]
fn commands_switch_views_and_unknown_ones_say_so() {
    let mut app = app();
    app.on_key(Key::Char(':'));
    typed(&mut app, "dlq");
    app.on_key(Key::Enter);
    assert_eq!(app.state.view, View::Dead);
    app.on_key(Key::Char(':'));
    typed(&mut app, "schedules");
    app.on_key(Key::Enter);
    assert_eq!(app.state.view, View::Schedules);
    // Tab goes round all eight views.
    app.on_key(Key::Tab);
    assert_eq!(app.state.view, View::Tasks);
    app.on_key(Key::Tab);
    assert_eq!(app.state.view, View::Leases);
    app.on_key(Key::BackTab);
    assert_eq!(app.state.view, View::Tasks);
    app.on_key(Key::BackTab);
    assert_eq!(app.state.view, View::Schedules);
    app.on_key(Key::Char(':'));
    typed(&mut app, "frobnicate\u{1b}[2J");
    app.on_key(Key::Enter);
    let status = app.state.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("unknown command :frobnicate[2J"),
        "{status:?}"
    );
    app.on_key(Key::Char('q'));
    assert!(app.state.quit);
}

#[test]
fn action_replies_land_in_the_status_line_and_the_log() {
    let mut app = app();
    app.take_requests();
    keys(&mut app, &[Key::Char('x'), Key::Char('y')]);
    let r = app.take_requests().pop().unwrap();
    app.on_event(Event::Reply {
        id: r.id,
        reply: Err("cancel task 301: permission denied".into()),
    });
    let status = app.state.status.clone().unwrap();
    assert!(status.error && status.text.contains("permission denied"));
    assert!(matches!(&app.state.log[0].result, Some(Err(e)) if e.contains("permission denied")));
}

#[test]
fn a_paste_types_into_a_prompt_and_never_acts_on_a_view() {
    let mut app = app();
    app.take_requests();
    app.on_paste("xyxy");
    assert!(app.state.top().is_none(), "no dialog from pasted text");
    assert!(kinds(&mut app).is_empty());
    app.on_key(Key::Char('/'));
    app.on_paste("rep\u{1b}[2Jort");
    app.on_key(Key::Enter);
    assert_eq!(app.state.table().filter, "rep[2Jort");
}

/// The app on the Locks tab with the fixture's locks loaded.
fn on_locks() -> App {
    let mut app = app();
    app.take_requests();
    app.on_key(Key::Tab);
    assert_eq!(app.state.view, View::Locks);
    fixture::answer_resources(&mut app);
    app.on_tick(0);
    app.take_requests();
    app
}

#[test]
fn tab_goes_through_the_lease_tabs_then_the_other_views() {
    let mut app = app();
    app.take_requests();
    app.on_key(Key::Tab);
    assert_eq!(app.state.view, View::Locks);
    assert_eq!(kinds(&mut app), vec![RequestKind::Locks]);
    app.on_key(Key::Tab);
    assert_eq!(app.state.view, View::Shards);
    assert_eq!(kinds(&mut app), vec![RequestKind::ShardGroups]);
    app.on_key(Key::Tab);
    assert_eq!(app.state.view, View::Slow);
    app.on_key(Key::BackTab);
    assert_eq!(app.state.view, View::Shards);
    app.on_key(Key::Char('1'));
    assert_eq!(app.state.view, View::Leases, "1 is the Tasks tab");
    app.on_key(Key::BackTab);
    assert_eq!(app.state.view, View::Tasks);
    app.on_key(Key::BackTab);
    assert_eq!(app.state.view, View::Schedules);
    for (command, view) in [("locks", View::Locks), ("shards", View::Shards)] {
        app.on_key(Key::Char(':'));
        typed(&mut app, command);
        app.on_key(Key::Enter);
        assert_eq!(app.state.view, view);
    }
}

#[test]
fn locks_are_read_about_once_a_second_while_shown() {
    let mut app = app();
    app.take_requests();
    app.on_key(Key::Tab);
    let requests = app.take_requests();
    assert_eq!(requests.len(), 1);
    app.on_tick(900);
    assert!(kinds(&mut app).is_empty(), "one read on its way at a time");
    app.on_event(Event::Reply {
        id: requests[0].id,
        reply: Err("list locks: connection refused (unavailable)".into()),
    });
    assert!(app.state.live.resources.locks.error.is_some());
    app.on_tick(950);
    assert!(kinds(&mut app).is_empty(), "not due yet");
    app.on_tick(1_000);
    let requests = app.take_requests();
    assert_eq!(
        requests.iter().map(|r| r.kind.clone()).collect::<Vec<_>>(),
        vec![RequestKind::Locks]
    );
    app.on_event(Event::Reply {
        id: requests[0].id,
        reply: Ok(Reply::Locks(fixture::locks())),
    });
    assert!(app.state.live.resources.locks.error.is_none());
    assert_eq!(app.state.row_keys(View::Locks).len(), 6);
    app.on_key(Key::Char('1'));
    app.on_tick(10_000);
    assert!(
        kinds(&mut app).is_empty(),
        "no reads while another tab is shown"
    );
    app.on_key(Key::Tab);
    fixture::answer_resources(&mut app);
    app.on_key(Key::Ctrl('r'));
    assert_eq!(kinds(&mut app), vec![RequestKind::Locks]);
}

#[test]
fn a_forced_release_asks_first_and_y_sends_it() {
    let mut app = on_locks();
    assert_eq!(app.state.selected(), Some("billing/run-once"));
    app.on_key(Key::Char('x'));
    let Some(Overlay::Confirm(c)) = app.state.top() else {
        panic!("x opens a confirm dialog: {:?}", app.state.top());
    };
    assert_eq!(c.what(), "lock billing/run-once held by web-2#2 (token 31)");
    app.on_key(Key::Enter);
    assert!(kinds(&mut app).is_empty(), "enter on No sends nothing");
    keys(&mut app, &[Key::Char('x'), Key::Char('y')]);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::ReleaseLock {
            name: "billing/run-once".into(),
            owner: "web-2#2".into(),
            token: 31,
        }]
    );
    assert_eq!(
        app.state.log.back().map(|e| e.what.as_str()),
        Some("release lock billing/run-once held by web-2#2 (token 31)")
    );
    // A free lock has nothing to release: said, not asked.
    app.on_key(Key::Char('j'));
    assert_eq!(app.state.selected(), Some("cache:warm"));
    app.on_key(Key::Char('x'));
    assert!(app.state.top().is_none());
    assert!(kinds(&mut app).is_empty());
    let status = app.state.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("is free"),
        "{status:?}"
    );
}

#[test]
fn a_release_reply_flashes_and_reloads_the_locks() {
    let mut app = on_locks();
    keys(&mut app, &[Key::Char('x'), Key::Char('y')]);
    let r = app.take_requests().pop().unwrap();
    app.on_event(Event::Reply {
        id: r.id,
        reply: Ok(Reply::Action {
            summary: "released lock billing/run-once (held by web-2#2, token 31)".into(),
            failed: 0,
        }),
    });
    let status = app.state.status.clone().unwrap();
    assert!(
        !status.error && status.text.contains("token 31"),
        "{status:?}"
    );
    assert_eq!(kinds(&mut app), vec![RequestKind::Locks]);
}

#[test]
fn viewers_cannot_release_and_the_shards_tab_sends_no_action() {
    let mut app = on_locks();
    app.state.read_only = Some("a viewer token: actions are refused".into());
    app.on_key(Key::Char('x'));
    assert!(app.state.top().is_none());
    assert!(kinds(&mut app).is_empty());
    let status = app.state.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("read-only"),
        "{status:?}"
    );
    app.state.read_only = None;
    app.on_key(Key::Tab);
    fixture::answer_resources(&mut app);
    for key in ['x', 'r', 'R', 'D', 'p', '+', 'e', 'd', 't', ' ', 'a'] {
        app.on_key(Key::Char(key));
        app.on_key(Key::Esc);
    }
    app.on_key(Key::Enter);
    let sent: Vec<RequestKind> = kinds(&mut app)
        .into_iter()
        .filter(|k| !matches!(k, RequestKind::ShardGroups | RequestKind::Shards { .. }))
        .collect();
    assert!(sent.is_empty(), "{sent:?}");
    assert!(app.state.log.is_empty());
}

#[test]
fn the_shards_tab_follows_the_chosen_group() {
    let mut app = app();
    app.take_requests();
    app.on_key(Key::Char(':'));
    typed(&mut app, "shards");
    app.on_key(Key::Enter);
    let groups = app.take_requests();
    assert_eq!(groups.len(), 1);
    app.on_event(Event::Reply {
        id: groups[0].id,
        reply: Ok(Reply::ShardGroups(fixture::shard_groups())),
    });
    // The groups are known: the first by name is shown and its shards asked for.
    assert_eq!(app.state.current_group_name(), Some("orders"));
    let first = app.take_requests();
    assert_eq!(
        first.iter().map(|r| r.kind.clone()).collect::<Vec<_>>(),
        vec![RequestKind::Shards {
            group: "orders".into()
        }]
    );
    app.on_key(Key::Char(']'));
    assert_eq!(app.state.current_group_name(), Some("payments"));
    let second = app.take_requests();
    assert_eq!(
        second.iter().map(|r| r.kind.clone()).collect::<Vec<_>>(),
        vec![RequestKind::Shards {
            group: "payments".into()
        }]
    );
    // The late answer for orders is dropped: payments is shown.
    app.on_event(Event::Reply {
        id: first[0].id,
        reply: Ok(Reply::Shards(fixture::shards("orders"))),
    });
    assert!(app.state.row_keys(View::Shards).is_empty());
    app.on_tick(500);
    assert!(
        kinds(&mut app).is_empty(),
        "the payments read is on its way"
    );
    app.on_event(Event::Reply {
        id: second[0].id,
        reply: Ok(Reply::Shards(fixture::shards("payments"))),
    });
    assert_eq!(app.state.row_keys(View::Shards), ["0", "1"]);
    app.on_tick(1_000);
    let again = app.take_requests();
    assert_eq!(
        again.iter().map(|r| r.kind.clone()).collect::<Vec<_>>(),
        vec![
            RequestKind::ShardGroups,
            RequestKind::Shards {
                group: "payments".into()
            }
        ],
        "both are re-read each second"
    );
    // ] goes round; the selection starts again at the first shard.
    app.on_key(Key::Char('j'));
    assert_eq!(app.state.selected(), Some("1"));
    app.on_key(Key::Char(']'));
    assert_eq!(app.state.current_group_name(), Some("orders"));
    fixture::answer_resources(&mut app);
    app.on_tick(1_100);
    assert_eq!(app.state.row_keys(View::Shards).len(), 8);
    assert_eq!(app.state.selected(), Some("0"));
    app.on_key(Key::Char('/'));
    typed(&mut app, "suspect");
    app.on_key(Key::Enter);
    assert_eq!(app.state.row_keys(View::Shards), ["5"]);
}

// -------------------------------------------------------------------------------------------
// Issue 20: the task pane refreshes, dialogs have no traps, marks follow their rows, the
// limit prompt says why it refused.
// -------------------------------------------------------------------------------------------

/// A watch update of web-1 with one delta.
fn web1_delta(seq: u64, kind: pb::delta::Kind) -> Event {
    Event::Watch {
        addr: fixture::WEB1.into(),
        update: pb::WatchUpdate {
            now_ms: fixture::NOW,
            seq,
            agent_id: "web-1#1".into(),
            deltas: vec![pb::Delta { kind: Some(kind) }],
            ..Default::default()
        },
    }
}

/// Task `id` of web-1 ended (its lease released).
fn released(seq: u64, id: i64) -> Event {
    web1_delta(
        seq,
        pb::delta::Kind::LeaseReleased(pb::LeaseReleased {
            task_id: id,
            epoch: 1 + id % 3,
            outcome: "succeeded".into(),
            ..Default::default()
        }),
    )
}

/// The Task reads asked for since the last call: (request id, task id).
fn task_reads(app: &mut App) -> Vec<(u64, i64)> {
    app.take_requests()
        .into_iter()
        .filter_map(|r| match r.kind {
            RequestKind::Task { id } => Some((r.id, id)),
            _ => None,
        })
        .collect()
}

/// The detail reply of task `id` with status `status`.
fn detail_with(id: i64, status: pb::TaskStatus) -> Reply {
    let mut detail = fixture::detail_reply(id);
    if let Some(t) = detail.task.as_mut() {
        t.status = status as i32;
    }
    Reply::Task(Box::new(detail))
}

/// The status the open task pane shows, if it has a reply.
fn pane_status(app: &App) -> Option<i32> {
    app.state.overlays.iter().find_map(|o| match o {
        Overlay::Detail(d) => d.reply.as_ref()?.task.as_ref().map(|t| t.status),
        _ => None,
    })
}

#[test]
fn the_task_pane_is_read_again_every_second_after_an_action_and_on_ctrl_l() {
    let mut app = app_on_dead();
    assert_eq!(app.state.selected(), Some("905"));
    app.on_key(Key::Enter);
    let first = task_reads(&mut app);
    assert_eq!(first.iter().map(|r| r.1).collect::<Vec<_>>(), [905]);
    app.on_event(Event::Reply {
        id: first[0].0,
        reply: Ok(detail_with(905, pb::TaskStatus::Dead)),
    });
    assert_eq!(pane_status(&app), Some(pb::TaskStatus::Dead as i32));

    // Every second while open, one read at a time.
    app.on_tick(500);
    assert!(task_reads(&mut app).is_empty(), "not due yet");
    app.on_tick(1_000);
    let periodic = task_reads(&mut app);
    assert_eq!(periodic.iter().map(|r| r.1).collect::<Vec<_>>(), [905]);
    app.on_tick(2_500);
    assert!(task_reads(&mut app).is_empty(), "a read is on its way");

    // `r` `y` from the pane: the action's reply reads the task again at once, and the
    // periodic read asked before the action cannot overwrite the answer from after it.
    keys(&mut app, &[Key::Char('r'), Key::Char('y')]);
    let action = app.take_requests().pop().unwrap();
    assert_eq!(action.kind, RequestKind::Requeue { ids: vec![905] });
    app.on_event(Event::Reply {
        id: action.id,
        reply: Ok(Reply::Action {
            summary: "requeue 1: 1 requeued".into(),
            failed: 0,
        }),
    });
    let requests = app.take_requests();
    let after: Vec<(u64, i64)> = requests
        .iter()
        .filter_map(|r| match r.kind {
            RequestKind::Task { id } => Some((r.id, id)),
            _ => None,
        })
        .collect();
    assert_eq!(after.iter().map(|r| r.1).collect::<Vec<_>>(), [905]);
    // The dead letters are read again too (they were before this issue).
    let page = requests
        .iter()
        .find(|r| matches!(r.kind, RequestKind::DeadPage { .. }))
        .expect("the dead letters are read again after an action");
    app.on_event(Event::Reply {
        id: page.id,
        reply: Ok(Reply::Page(fixture::dead_page())),
    });
    app.on_event(Event::Reply {
        id: after[0].0,
        reply: Ok(detail_with(905, pb::TaskStatus::Queued)),
    });
    assert_eq!(pane_status(&app), Some(pb::TaskStatus::Queued as i32));
    app.on_event(Event::Reply {
        id: periodic[0].0,
        reply: Ok(detail_with(905, pb::TaskStatus::Dead)),
    });
    assert_eq!(
        pane_status(&app),
        Some(pb::TaskStatus::Queued as i32),
        "a read from before the action is dropped"
    );
    assert_eq!(
        app.state.status.as_ref().map(|s| s.text.as_str()),
        Some("requeue 1: 1 requeued")
    );

    // ctrl-l reads everything again now: the pane, the dead letters, the registry.
    app.on_key(Key::Ctrl('l'));
    assert!(app.redraw);
    let sent = kinds(&mut app);
    assert!(sent.contains(&RequestKind::Task { id: 905 }), "{sent:?}");
    assert!(sent.contains(&RequestKind::Poll), "{sent:?}");
    assert!(
        sent.iter()
            .any(|k| matches!(k, RequestKind::DeadPage { .. })),
        "{sent:?}"
    );
    // Closed: no more reads.
    app.on_key(Key::Esc);
    app.on_tick(60_000);
    assert!(task_reads(&mut app).is_empty());
}

#[test]
fn enter_confirms_a_typed_count_that_matches() {
    let mut app = app();
    app.on_key(Key::Char('4'));
    fixture::answer_dead_page(&mut app);
    app.on_key(Key::Char('R'));
    let dry = app.take_requests().pop().unwrap();
    app.on_event(Event::Reply {
        id: dry.id,
        reply: Ok(Reply::Count(3)),
    });
    // A wrong count and Enter: nothing sent, the dialog stays and says what to type.
    typed(&mut app, "4");
    app.on_key(Key::Enter);
    assert!(kinds(&mut app).is_empty());
    assert!(matches!(app.state.top(), Some(Overlay::Confirm(_))));
    assert!(
        app.state
            .status
            .as_ref()
            .is_some_and(|s| s.error && s.text.contains("type 3 to confirm")),
        "{:?}",
        app.state.status
    );
    // The right count and Enter, with the focus still on No: sent.
    app.on_key(Key::Backspace);
    typed(&mut app, "3");
    app.on_key(Key::Enter);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::RequeueDead {
            filter: TaskFilter::default(),
            dry_run: false
        }]
    );
    assert!(app.state.top().is_none());

    // Above fifty marked tasks too.
    app.on_key(Key::Char('1'));
    app.take_requests();
    let shown: Vec<i64> = app
        .state
        .row_keys(View::Leases)
        .iter()
        .map(|k| k.parse().unwrap())
        .collect();
    app.state.marks.extend(shown.iter().copied());
    app.state.marks.extend(1000..1060);
    app.on_key(Key::Char('x'));
    let Some(Overlay::Confirm(c)) = app.state.top() else {
        panic!("x opens the dialog: {:?}", app.state.top());
    };
    let n = c.count.unwrap();
    assert!(c.needs_typed_count());
    typed(&mut app, &n.to_string());
    app.on_key(Key::Enter);
    assert!(
        matches!(kinds(&mut app).as_slice(), [RequestKind::Cancel { ids }] if ids.len() as u64 == n)
    );
    // Nothing typed: Enter on No still just closes.
    app.state.marks.extend(1000..1060);
    app.on_key(Key::Char('x'));
    app.on_key(Key::Enter);
    assert!(app.state.top().is_none());
    assert!(kinds(&mut app).is_empty());
}

#[test]
fn q_in_a_dialog_or_a_pane_only_closes_it() {
    let mut app = app();
    app.take_requests();
    for open in [Key::Char('x'), Key::Enter, Key::Char('?'), Key::Char('@')] {
        app.on_key(open);
        assert!(app.state.top().is_some(), "{open:?} opens something");
        app.on_key(Key::Char('q'));
        assert!(!app.state.quit, "q after {open:?} quit the console");
        assert!(app.state.top().is_none(), "q after {open:?} closes it");
    }
    // A confirm dialog over the task pane: q closes the dialog, then the pane.
    keys(&mut app, &[Key::Enter, Key::Char('x')]);
    assert_eq!(app.state.overlays.len(), 2);
    app.on_key(Key::Char('q'));
    assert!(matches!(app.state.top(), Some(Overlay::Detail(_))));
    app.on_key(Key::Char('q'));
    assert!(app.state.top().is_none());
    // In a prompt it is a letter.
    app.on_key(Key::Char('/'));
    app.on_key(Key::Char('q'));
    assert!(!app.state.quit);
    assert!(matches!(app.state.top(), Some(Overlay::Prompt(p)) if p.input.text() == "q"));
    app.on_key(Key::Esc);
    let sent: Vec<RequestKind> = kinds(&mut app)
        .into_iter()
        .filter(|k| !matches!(k, RequestKind::Task { .. }))
        .collect();
    assert!(sent.is_empty(), "{sent:?}");
    // With nothing open, q quits (outside the demo, at once).
    app.on_key(Key::Char('q'));
    assert!(app.state.quit);
}

#[test]
fn quitting_the_demo_asks_first_while_its_agents_run() {
    let mut app = app();
    app.take_requests();
    // web-3#0 is stopped: two of the demo's three agents run.
    app.state.demo_agents = vec!["web-1#1".into(), "web-2#2".into(), "web-3#0".into()];
    assert_eq!(app.state.demo_agents_running(), 2);
    for keep_going in [Key::Esc, Key::Char('n'), Key::Char('q'), Key::Enter] {
        app.on_key(Key::Char('q'));
        let Some(Overlay::Confirm(c)) = app.state.top() else {
            panic!("q asks first: {:?}", app.state.top());
        };
        assert_eq!(
            format!("{} {}?", c.verb.word(), c.what()),
            "Stop the demo's 2 agents?"
        );
        app.on_key(keep_going);
        assert!(!app.state.quit, "{keep_going:?} keeps the demo going");
        assert!(
            app.state.top().is_none(),
            "{keep_going:?} closes the question"
        );
    }
    // `:q` asks too; `:q!` does not.
    app.on_key(Key::Char(':'));
    typed(&mut app, "q");
    app.on_key(Key::Enter);
    assert!(matches!(app.state.top(), Some(Overlay::Confirm(_))));
    assert!(!app.state.quit);
    app.on_key(Key::Char('y'));
    assert!(app.state.quit, "y stops the demo");
    assert!(kinds(&mut app).is_empty(), "nothing is sent to an agent");
    assert!(app.state.log.is_empty());

    let mut app = fixture::app(Settings::default());
    app.state.demo_agents = vec!["web-1#1".into()];
    app.on_key(Key::Char(':'));
    typed(&mut app, "q!");
    app.on_key(Key::Enter);
    assert!(app.state.quit);

    // Once the demo's agents are all stopped there is nothing to ask.
    let mut app = fixture::app(Settings::default());
    app.state.demo_agents = vec!["web-3#0".into()];
    app.on_key(Key::Char('q'));
    assert!(app.state.quit);
}

#[test]
fn marks_are_dropped_when_their_task_leaves_the_view() {
    let mut app = app();
    app.take_requests();
    let rows = app.state.row_keys(View::Leases);
    let (first, second): (i64, i64) = (rows[1].parse().unwrap(), rows[2].parse().unwrap());
    // Rows 1 and 2 of web-1 (row 0 is batch-1's expired lease).
    keys(&mut app, &[Key::Char('j'), Key::Char(' '), Key::Char(' ')]);
    assert_eq!(
        app.state.marks.iter().copied().collect::<Vec<_>>(),
        [first, second]
    );
    // The first finishes: its mark goes with it, at once.
    app.on_event(released(20, first));
    app.on_tick(100);
    assert_eq!(
        app.state.marks.iter().copied().collect::<Vec<_>>(),
        [second]
    );
    app.on_key(Key::Char('x'));
    let Some(Overlay::Confirm(c)) = app.state.top() else {
        panic!("x opens the dialog: {:?}", app.state.top());
    };
    assert_eq!(
        c.targets,
        leasehold_console::state::Targets::Tasks(vec![second])
    );
    app.on_key(Key::Esc);
    // A filter that hides a marked row drops its mark too: what is marked is what is shown.
    app.on_key(Key::Char('/'));
    typed(&mut app, "report.nightly");
    app.on_key(Key::Enter);
    assert!(app.state.marks.is_empty(), "{:?}", app.state.marks);

    // Dead letters: a requeued task leaves the page, and its mark with it.
    let mut app = app_on_dead();
    app.on_key(Key::Char(' '));
    assert_eq!(app.state.marks.iter().copied().collect::<Vec<_>>(), [905]);
    app.on_key(Key::Ctrl('r'));
    let page = app.take_requests().pop().unwrap();
    let mut without = fixture::dead_page();
    without.tasks.retain(|t| t.id != 905);
    app.on_event(Event::Reply {
        id: page.id,
        reply: Ok(Reply::Page(without)),
    });
    app.on_tick(200);
    assert!(app.state.marks.is_empty(), "{:?}", app.state.marks);
}

fn app_on_dead() -> App {
    let mut app = app();
    app.on_key(Key::Char('4'));
    fixture::answer_dead_page(&mut app);
    app.on_tick(0);
    app.take_requests();
    app
}

#[test]
fn space_marks_the_task_under_the_cursor_and_the_cursor_stays_on_its_task() {
    let mut app = app();
    app.take_requests();
    keys(&mut app, &[Key::Char('j'), Key::Char('j')]);
    let rows = app.state.row_keys(View::Leases);
    let chosen: i64 = rows[2].parse().unwrap();
    let after: i64 = rows[3].parse().unwrap();
    let next_after: i64 = rows[4].parse().unwrap();
    assert_eq!(app.state.selected(), Some(rows[2].as_str()));
    // The task under the cursor renews and re-sorts to the bottom: the cursor goes with it.
    app.on_event(web1_delta(
        21,
        pb::delta::Kind::LeaseRenewed(pb::LeaseRenewed {
            task_id: chosen,
            epoch: 1 + chosen % 3,
            lease_until_ms: fixture::NOW + 3_600_000,
            heartbeat_at_ms: fixture::NOW,
        }),
    ));
    app.on_tick(100);
    assert_eq!(app.state.row_keys(View::Leases).last(), Some(&rows[2]));
    assert_eq!(app.state.selected(), Some(rows[2].as_str()));
    // Space marks it, not the row now where it was.
    app.on_key(Key::Char(' '));
    assert_eq!(
        app.state.marks.iter().copied().collect::<Vec<_>>(),
        [chosen]
    );

    // The row under the cursor leaves before the next frame: `j` goes to the row that
    // followed it, not one further.
    app.on_key(Key::Char('g'));
    for _ in 0..2 {
        app.on_key(Key::Char('j'));
    }
    assert_eq!(app.state.selected(), Some(after.to_string().as_str()));
    app.on_event(released(22, after));
    app.on_key(Key::Char('j'));
    assert_eq!(app.state.selected(), Some(next_after.to_string().as_str()));
}

#[test]
fn a_refused_limit_says_why_on_the_prompt_and_an_empty_one_means_unlimited() {
    let mut app = app();
    app.on_key(Key::Char('5'));
    app.on_key(Key::Char('j')); // mail, limit 20
    app.take_requests();
    app.on_key(Key::Char('='));
    let prompt = |app: &App| match app.state.top() {
        Some(Overlay::Prompt(p)) => Some((p.input.text(), p.error.clone())),
        _ => None,
    };
    assert_eq!(
        prompt(&app),
        Some(("20".to_string(), None)),
        "the prompt starts with the limit in force"
    );
    app.on_key(Key::Ctrl('u'));
    typed(&mut app, "lots");
    app.on_key(Key::Enter);
    assert!(kinds(&mut app).is_empty());
    let (text, error) = prompt(&app).expect("the prompt stays open");
    assert_eq!(text, "lots");
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("not a limit") && e.contains("or unlimited")),
        "{error:?}"
    );
    // The next edit clears it.
    app.on_key(Key::Backspace);
    assert_eq!(prompt(&app).and_then(|p| p.1), None);
    // Empty: unlimited, as the help says.
    app.on_key(Key::Ctrl('u'));
    app.on_key(Key::Enter);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::SetConcurrency {
            scope: LimitScope::Type("mail".into()),
            limit: None
        }]
    );
    assert!(app.state.top().is_none());

    // An agent's own limit is always a number: empty is refused, and the prompt says why.
    app.on_key(Key::Char('6'));
    app.on_key(Key::Char('j')); // web-1#1
    app.take_requests();
    app.on_key(Key::Char('='));
    assert_eq!(prompt(&app).map(|p| p.0), Some("50".to_string()));
    app.on_key(Key::Ctrl('u'));
    app.on_key(Key::Enter);
    assert!(kinds(&mut app).is_empty());
    let (_, error) = prompt(&app).expect("the prompt stays open");
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("a number from 1 to 100000")),
        "{error:?}"
    );
}

// -------------------------------------------------------------------------------------------
// Issue 20 item 6: the action log's entries open to their full answer.
// -------------------------------------------------------------------------------------------

/// Sends a cancel of the selected row (x, y) and answers it with `reply`.
fn cancel_answered(app: &mut App, reply: Result<Reply, String>) {
    keys(app, &[Key::Char('x'), Key::Char('y')]);
    let r = app.take_requests().pop().unwrap();
    app.on_event(Event::Reply { id: r.id, reply });
}

fn log_pane(app: &App) -> (usize, bool) {
    match app.state.top() {
        Some(Overlay::Log { selected, expanded }) => (*selected, *expanded),
        other => panic!("the action log is open: {other:?}"),
    }
}

#[test]
fn enter_expands_the_selected_log_entry_and_j_k_move_the_selection() {
    let mut app = app();
    app.take_requests();
    cancel_answered(&mut app, Err("cancel task 301: permission denied".into()));
    cancel_answered(
        &mut app,
        Ok(Reply::Action {
            summary: "cancel 1: 1 cancel requested".into(),
            failed: 0,
        }),
    );
    app.on_key(Key::Char('@'));
    // The newest entry is selected, one line.
    assert_eq!(log_pane(&app), (0, false));
    app.on_key(Key::Enter);
    assert_eq!(log_pane(&app), (0, true), "enter expands");
    app.on_key(Key::Enter);
    assert_eq!(log_pane(&app), (0, false), "enter again collapses");
    keys(&mut app, &[Key::Enter, Key::Esc]);
    assert_eq!(
        log_pane(&app),
        (0, false),
        "esc collapses and keeps the log open"
    );
    app.on_key(Key::Char('j'));
    assert_eq!(log_pane(&app), (1, false), "j selects the older entry");
    app.on_key(Key::Char('j'));
    assert_eq!(log_pane(&app), (1, false), "no entry past the oldest");
    app.on_key(Key::Enter);
    assert_eq!(log_pane(&app), (1, true));
    app.on_key(Key::Char('k'));
    assert_eq!(
        log_pane(&app),
        (0, false),
        "k selects the newer one, collapsed"
    );
    app.on_key(Key::Esc);
    assert!(
        app.state.top().is_none(),
        "esc on a collapsed entry closes the log"
    );
    assert!(kinds(&mut app).is_empty(), "the log sends nothing");
    // An empty log has nothing to expand.
    let mut empty = self::app();
    empty.on_key(Key::Char('@'));
    keys(&mut empty, &[Key::Enter, Key::Char('j')]);
    assert_eq!(log_pane(&empty), (0, false));
}

/// The pane offers only the actions its task's status allows, and a key for one it does not
/// offer says so instead of opening a dialog the agent would refuse (`x` on a dead task).
#[test]
fn a_pane_key_for_an_action_the_status_does_not_allow_opens_no_dialog() {
    let mut app = app_on_dead();
    app.on_key(Key::Enter);
    let read = task_reads(&mut app);
    app.on_event(Event::Reply {
        id: read[0].0,
        reply: Ok(detail_with(905, pb::TaskStatus::Dead)),
    });
    app.on_key(Key::Char('x'));
    assert!(
        matches!(app.state.top(), Some(Overlay::Detail(_))),
        "x on a dead task opened {:?}",
        app.state.top()
    );
    assert_eq!(
        app.state.status.as_ref().map(|s| s.text.as_str()),
        Some("task 905 is dead: it cannot be cancelled")
    );
    // What it offers still opens its dialog.
    app.on_key(Key::Char('r'));
    assert!(matches!(app.state.top(), Some(Overlay::Confirm(_))));
    app.on_key(Key::Esc);

    // A running task can be cancelled but not requeued.
    app.on_tick(1_000);
    let again = task_reads(&mut app);
    assert_eq!(again.iter().map(|r| r.1).collect::<Vec<_>>(), [905]);
    app.on_event(Event::Reply {
        id: again[0].0,
        reply: Ok(detail_with(905, pb::TaskStatus::Running)),
    });
    assert_eq!(pane_status(&app), Some(pb::TaskStatus::Running as i32));
    app.on_key(Key::Char('r'));
    assert!(matches!(app.state.top(), Some(Overlay::Detail(_))));
    assert_eq!(
        app.state.status.as_ref().map(|s| s.text.as_str()),
        Some("task 905 is running: it cannot be requeued")
    );
    app.on_key(Key::Char('x'));
    assert!(matches!(app.state.top(), Some(Overlay::Confirm(_))));
}

/// The Tasks view asks for its first page and its counts; `]` and `[` step through the
/// states, each asking for its own page (the queued tab the due ones, the later tab the others);
/// a page that answers a state no longer shown is dropped.
#[test]
fn the_tasks_view_pages_each_state_and_drops_a_superseded_page() {
    let mut app = app();
    app.take_requests();
    app.on_key(Key::Char('8'));
    assert_eq!(app.state.view, View::Tasks);
    let asked = kinds(&mut app);
    assert!(
        asked.contains(&RequestKind::TasksPage {
            statuses: vec![pb::TaskStatus::Queued as i32],
            due: Some(true),
            filter: TaskFilter::default(),
            before_id: 0,
            limit: 200,
        }),
        "{asked:?}"
    );
    assert!(asked.contains(&RequestKind::TaskCounts {
        filter: TaskFilter::default()
    }));
    // A later page, asked, then the operator moves on before it arrives.
    app.on_key(Key::Char('8'));
    app.on_key(Key::Char(']'));
    let requests = app.take_requests();
    let later = requests
        .iter()
        .find(|r| {
            matches!(
                &r.kind,
                RequestKind::TasksPage {
                    due: Some(false),
                    ..
                }
            )
        })
        .expect("the later tab's page");
    app.on_key(Key::Char(']'));
    let retrying = kinds(&mut app);
    assert!(
        retrying.iter().any(
            |k| matches!(k, RequestKind::TasksPage { statuses, due: None, .. }
            if *statuses == vec![pb::TaskStatus::RetryWait as i32])
        ),
        "{retrying:?}"
    );
    app.on_event(Event::Reply {
        id: later.id,
        reply: Ok(Reply::Page(fixture::tasks_page(
            &[pb::TaskStatus::Queued as i32],
            Some(false),
            0,
            200,
            50,
        ))),
    });
    assert!(
        app.state.row_keys(View::Tasks).is_empty(),
        "the later tab's page is not the retrying tab's rows"
    );
    keys(&mut app, &[Key::Char('['), Key::Char('['), Key::Char('[')]);
    assert_eq!(
        app.state.task_tab,
        leasehold_console::state::tasks::TaskTab::Dead
    );
}

/// Paging down through 100,000 tasks: the next page is asked while two pages are still below
/// the selection, once at a time, from the last id loaded; every row comes once.
#[test]
fn paging_down_the_tasks_view_loads_ahead_of_the_selection() {
    let mut app = app();
    app.state.page_rows = 20;
    app.on_key(Key::Char('8'));
    assert_eq!(fixture::answer_tasks(&mut app, 100_000), 1);
    app.on_tick(0);
    let mut pages = 1;
    for _ in 0..600 {
        app.on_key(Key::PageDown);
        pages += fixture::answer_tasks(&mut app, 100_000);
        let rows = app.state.row_count();
        let at = app.state.table().index;
        assert!(
            rows - at > 20 || rows == 100_000,
            "at {at} of {rows}: no page ahead"
        );
    }
    // 600 pages of 20 rows: at row 12,000, with the page holding rows to 12,199 loaded.
    assert_eq!(app.state.table().index, 12_000);
    assert_eq!(app.state.row_count(), 12_200);
    assert_eq!(pages, 61);
    let keys = app.state.row_keys(View::Tasks);
    assert_eq!(keys.first().map(String::as_str), Some("100000"));
    let ids: std::collections::BTreeSet<&String> = keys.iter().collect();
    assert_eq!(ids.len(), keys.len(), "a task listed twice");
}

/// Run now, delete, cancel and requeue go through the confirm dialog, only where the state
/// allows them; the filter is pushed to the agent with the counts.
#[test]
fn tasks_view_actions_fit_the_state_shown() {
    let mut app = app();
    app.on_key(Key::Char('8'));
    fixture::answer_tasks(&mut app, 30);
    app.on_tick(0);
    // Queued tasks are due already; finished-only actions are refused too.
    for key in ['n', 'r'] {
        app.on_key(Key::Char(key));
        assert!(app.state.top().is_none());
        assert!(app.state.status.as_ref().unwrap().error, "{key}");
    }
    app.on_key(Key::Char(']'));
    fixture::answer_tasks(&mut app, 30);
    app.on_tick(0);
    keys(&mut app, &[Key::Char('n'), Key::Char('y')]);
    assert_eq!(kinds(&mut app), vec![RequestKind::RunNow { ids: vec![30] }]);
    keys(&mut app, &[Key::Char('d'), Key::Char('y')]);
    assert_eq!(kinds(&mut app), vec![RequestKind::Delete { ids: vec![30] }]);
    keys(&mut app, &[Key::Char('x'), Key::Char('y')]);
    assert_eq!(kinds(&mut app), vec![RequestKind::Cancel { ids: vec![30] }]);
    // Finished tasks: requeue, not run now nor cancel.
    keys(&mut app, &[Key::Char('['), Key::Char('['), Key::Char('[')]);
    fixture::answer_tasks(&mut app, 30);
    app.on_tick(0);
    for key in ['n', 'x'] {
        app.on_key(Key::Char(key));
        assert!(app.state.top().is_none(), "{key}");
    }
    keys(&mut app, &[Key::Char('r'), Key::Char('y')]);
    assert_eq!(
        kinds(&mut app),
        vec![RequestKind::Requeue { ids: vec![30] }]
    );
    // The filter goes to the agent, for the rows and the counts.
    app.on_key(Key::Char('/'));
    typed(&mut app, "type:mail code:smtp_timeout relay");
    app.on_key(Key::Enter);
    let asked = kinds(&mut app);
    let filter = TaskFilter {
        text: Some("relay".into()),
        task_type: Some("mail".into()),
        error_code: Some("smtp_timeout".into()),
    };
    assert!(
        asked.iter().any(
            |k| matches!(k, RequestKind::TasksPage { filter: f, before_id: 0, .. } if *f == filter)
        ),
        "{asked:?}"
    );
    assert!(
        asked.contains(&RequestKind::TaskCounts { filter }),
        "{asked:?}"
    );
}

/// The Tasks view never moves rows under an operator reading below its first screen: the
/// 2 s reload of the first page happens only at the top with nothing marked, and coming back
/// to the view keeps the pages loaded. Frozen on one tab, another tab's keys act on nothing.
#[test]
fn the_tasks_view_keeps_the_operators_place_and_acts_only_on_rows_shown() {
    let mut app = app();
    app.state.page_rows = 20;
    app.on_key(Key::Char('8'));
    fixture::answer_tasks(&mut app, 1_000);
    app.on_tick(0);
    // At the top: read again every 2 s.
    app.on_tick(2_500);
    let requests = app.take_requests();
    assert!(
        requests
            .iter()
            .any(|r| matches!(r.kind, RequestKind::TasksPage { before_id: 0, .. })),
        "the first page is read again at the top"
    );
    fixture::answer_task_requests(&mut app, requests, 1_000);
    // On row 150 of the first page: only the counts.
    for _ in 0..150 {
        app.on_key(Key::Down);
    }
    app.take_requests();
    app.on_tick(5_000);
    let asked = kinds(&mut app);
    assert!(
        !asked
            .iter()
            .any(|k| matches!(k, RequestKind::TasksPage { before_id: 0, .. })),
        "{asked:?}"
    );
    assert!(
        asked
            .iter()
            .any(|k| matches!(k, RequestKind::TaskCounts { .. }))
    );
    assert_eq!(app.state.selected(), Some("850"));
    // Away and back: the same rows and place.
    app.on_key(Key::Char('1'));
    app.on_key(Key::Char('8'));
    assert!(
        !kinds(&mut app)
            .iter()
            .any(|k| matches!(k, RequestKind::TasksPage { before_id: 0, .. })),
        "coming back reloaded the first page"
    );
    assert_eq!(app.state.selected(), Some("850"));
    // Frozen on the queued tab, then the later tab (its page not taken while frozen shows):
    // no row is selected, marked or acted on.
    app.on_key(Key::Char('Z'));
    app.on_key(Key::Char(']'));
    fixture::answer_tasks(&mut app, 1_000);
    app.on_tick(6_000);
    assert!(app.state.row_keys(View::Tasks).is_empty());
    keys(&mut app, &[Key::Char('a'), Key::Char('n'), Key::Char('y')]);
    assert!(app.state.marks.is_empty());
    assert!(
        !kinds(&mut app)
            .iter()
            .any(|k| matches!(k, RequestKind::RunNow { .. })),
        "a run-now of rows not shown"
    );
}
