//! The console's key paths, end to end through the app with the fixture cluster: what each
//! key sends (or refuses to send), confirm rules, typed counts, read-only, selection that
//! follows the task id, filters pushed to the agent, freezing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
    let mut app = app();
    app.on_event(Event::Agents(pb::ListAgentsResponse {
        caller_role: "viewer".into(),
        now_ms: fixture::NOW,
        ..Default::default()
    }));
    app.take_requests();
    for (view, key) in [
        ('1', 'x'),
        ('4', 'r'),
        ('4', 'R'),
        ('5', '+'),
        ('5', 'p'),
        ('5', '='),
        ('6', 'D'),
        ('1', 'G'),
    ] {
        keys(&mut app, &[Key::Char(view), Key::Char(key)]);
        let sent: Vec<RequestKind> = kinds(&mut app)
            .into_iter()
            .filter(|k| !matches!(k, RequestKind::DeadPage { .. }))
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
