//! Whole-screen snapshots of the console (ratatui TestBackend + insta): every view, the task
//! detail pane, the confirm dialog and help, at 80×24 and 160×48, from the fixed cluster of
//! `fixture` (so no filter is needed for times, ids or ports), plus the no-colour ASCII and
//! read-only variants. Review a change with `cargo insta review` or by reading the `.snap`
//! diff; `INSTA_UPDATE=always` rewrites them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// The fixtures build agent messages as an agent older than the state and outcome enums did
// (words only): the screens must read the same from them.
#![allow(deprecated)]

mod fixture;

use leasehold_console::app::App;
use leasehold_console::input::Key;
use leasehold_console::state::{Settings, View};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const SIZES: [(u16, u16); 2] = [(80, 24), (160, 48)];

/// The screen as text, one line per row (trailing spaces kept out).
fn screen(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    // Two frames: the first tells the app its page size, the second is what a user sees.
    for _ in 0..2 {
        let mut drawn = None;
        terminal
            .draw(|f| drawn = Some(leasehold_console::view::draw(f, &app.state)))
            .unwrap();
        app.state.page_rows = drawn.unwrap().page_rows;
        app.state.sync_selection();
    }
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let mut line = String::new();
        for x in 0..width {
            line.push_str(buffer[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn check(name: &str, build: impl Fn() -> App) {
    for (w, h) in SIZES {
        let mut app = build();
        let text = screen(&mut app, w, h);
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), text);
    }
}

fn at(view: View) -> App {
    let mut app = fixture::app(Settings::default());
    app.act(leasehold_console::input::Action::Show(view));
    if view == View::Dead {
        fixture::answer_dead_page(&mut app);
    }
    if view == View::Schedules {
        fixture::answer_schedules(&mut app);
    }
    if matches!(view, View::Locks | View::Shards) {
        fixture::answer_resources(&mut app);
    }
    if view == View::Tasks {
        fixture::answer_tasks(&mut app, 100_000);
    }
    app.on_tick(0);
    app
}

#[test]
fn leases() {
    check("leases", || {
        let mut app = at(View::Leases);
        // A marked row and a selection below the first row.
        app.on_key(Key::Char('j'));
        app.on_key(Key::Char(' '));
        app
    });
}

#[test]
fn slow() {
    check("slow", || at(View::Slow));
}

#[test]
fn renewals() {
    check("renewals", || at(View::Renewals));
}

#[test]
fn dead_letters() {
    check("dead", || at(View::Dead));
}

#[test]
fn types() {
    check("types", || at(View::Types));
}

/// Narrower than the counts and the rates need whole: the name and the state give way, then
/// the RATE column goes; every count stays whole. Without any rate limit there is no RATE
/// column at all.
#[test]
fn types_without_room_for_the_rates_leave_the_column_out() {
    let mut app = at(View::Types);
    let text = screen(&mut app, 60, 24);
    let header = text.lines().nth(4).unwrap();
    assert!(
        header.contains("RUNNING") && !header.contains("RATE"),
        "{text}"
    );
    for cell in ["1250", "125", "10/-", "4/20", "DONE/M"] {
        assert!(text.contains(cell), "{cell} cut:\n{text}");
    }
    assert!(!text.contains("50/50/1s"), "{text}");
    insta::assert_snapshot!("types_narrow_60x24", text);
    let text = screen(&mut app, 80, 24);
    assert!(text.lines().nth(4).unwrap().contains("RATE"), "{text}");

    let mut app = at(View::Types);
    let mut overview = app.state.live.overview.clone().unwrap();
    for t in &mut overview.types {
        t.rate = None;
    }
    overview.global_rate = None;
    app.on_event(leasehold_console::event::Event::Overview(overview));
    let text = screen(&mut app, 160, 48);
    assert!(!text.contains("RATE"), "{text}");
    assert!(!text.contains("global rate"), "{text}");
    assert!(!text.contains("rate limited"), "{text}");
}

/// An overview the agent kept serving for a while (a slow read, a deep queue: it serves one
/// ten times as long as it took) says in the title how old its counts are; fresh ones do not.
#[test]
fn types_say_how_old_their_counts_are() {
    let mut app = at(View::Types);
    let text = screen(&mut app, 80, 24);
    assert!(!text.contains(" old"), "{text}");
    let mut overview = app.state.live.overview.clone().unwrap();
    overview.now_ms = app.state.live.now_ms - 34_000;
    app.on_event(leasehold_console::event::Event::Overview(overview.clone()));
    let text = screen(&mut app, 80, 24);
    assert!(text.contains("counts 34s old"), "{text}");
    insta::assert_snapshot!("types_old_counts_80x24", text);
    overview.now_ms = app.state.live.now_ms - 4_000;
    app.on_event(leasehold_console::event::Event::Overview(overview));
    let text = screen(&mut app, 80, 24);
    assert!(!text.contains(" old"), "{text}");
}

/// A shedding type (`mail`: over 5m, 6 shed in the last minute) brings the SHED/M column;
/// narrower, RATE gives way first, then SHED/M, and the counts stay whole. Without any
/// shedding there is no SHED/M column; a type that no longer sheds but shed in the last
/// minute keeps its count.
#[test]
fn types_show_shedding_and_it_gives_way_after_the_rates() {
    let mut app = at(View::Types);
    let header = |text: &str| text.lines().nth(4).unwrap().to_string();
    let text = screen(&mut app, 80, 24);
    assert!(header(&text).contains("RATE"), "{text}");
    assert!(header(&text).contains("SHED/M"), "{text}");
    assert!(text.contains("6 >5m"), "{text}");
    let text = screen(&mut app, 70, 24);
    assert!(
        !header(&text).contains("RATE") && header(&text).contains("SHED/M"),
        "{text}"
    );
    for cell in ["1250", "125", "10/-", "4/20", "6 >5m"] {
        assert!(text.contains(cell), "{cell} cut:\n{text}");
    }
    insta::assert_snapshot!("types_shed_without_rate_70x24", text);
    let text = screen(&mut app, 60, 24);
    assert!(!header(&text).contains("SHED/M"), "{text}");
    assert!(!text.contains(">5m"), "{text}");

    let mut overview = app.state.live.overview.clone().unwrap();
    for t in &mut overview.types {
        t.shed_after_ms = None;
    }
    app.on_event(leasehold_console::event::Event::Overview(overview.clone()));
    let text = screen(&mut app, 160, 48);
    assert!(header(&text).contains("SHED/M"), "{text}");
    let mail = text.lines().find(|l| l.contains(" mail ")).unwrap();
    assert!(mail.contains(" 6 ") && !mail.contains('>'), "{mail}");
    for t in &mut overview.types {
        t.shed_last_minute = 0;
    }
    app.on_event(leasehold_console::event::Event::Overview(overview));
    let text = screen(&mut app, 160, 48);
    assert!(!text.contains("SHED"), "{text}");
}

/// A type with a per-key limit (`mail`: 2 per key) brings the PER-KEY column, which fits on
/// 80 columns beside the rates and shedding; narrower, PER-KEY (a setting) gives way first,
/// then RATE and SHED/M, and the counts stay whole. Without any per-key limit there is no
/// PER-KEY column.
#[test]
fn types_show_the_per_key_limit_and_it_gives_way_first() {
    let mut app = at(View::Types);
    let header = |text: &str| text.lines().nth(4).unwrap().to_string();
    let text = screen(&mut app, 80, 24);
    for column in ["PER-KEY", "RATE", "SHED/M"] {
        assert!(header(&text).contains(column), "{column}:\n{text}");
    }
    let mail = text.lines().find(|l| l.contains(" mail ")).unwrap();
    assert!(mail.contains(" 4/20    2 "), "{mail}");
    let text = screen(&mut app, 75, 24);
    assert!(
        !header(&text).contains("PER-KEY")
            && header(&text).contains("RATE")
            && header(&text).contains("SHED/M"),
        "{text}"
    );
    for cell in ["1250", "125", "10/-", "4/20", "12/50/1s", "6 >5m"] {
        assert!(text.contains(cell), "{cell} cut:\n{text}");
    }

    let mut overview = app.state.live.overview.clone().unwrap();
    for t in &mut overview.types {
        t.per_key_limit = None;
    }
    app.on_event(leasehold_console::event::Event::Overview(overview));
    let text = screen(&mut app, 160, 48);
    assert!(!text.contains("PER-KEY"), "{text}");
}

/// The fixture's types with circuit breakers: `mail` open (half-opens in 12 s), `sleep`
/// half-open, `export:csv` closed.
fn with_breakers() -> App {
    let mut app = at(View::Types);
    let mut overview = app.state.live.overview.clone().unwrap();
    let breaker = |state: &str, until_ms: i64| leasehold_proto::v1::BreakerSummary {
        failures: 5,
        within_ms: 60_000,
        cooldown_ms: 30_000,
        state: state.into(),
        since_ms: fixture::NOW - 18_000,
        until_ms,
    };
    for t in &mut overview.types {
        t.breaker = match t.task_type.as_str() {
            "mail" => Some(breaker("open", fixture::NOW + 12_000)),
            "sleep" => Some(breaker("half_open", 0)),
            "export:csv" => Some(breaker("closed", 0)),
            _ => None,
        };
    }
    app.on_event(leasehold_console::event::Event::Overview(overview));
    app
}

/// Circuit breakers bring the BREAKER column (`open 12s`, `half-open`, `closed`, `-`), and the
/// header names the open and half-open ones (on 80 columns, where the names do not fit, it
/// counts the open ones: they stop their type). On 80
/// columns BREAKER stays whole while PER-KEY and RATE give way before it; without any breaker
/// there is no column and the header says nothing.
#[test]
fn types_show_circuit_breakers_and_the_header_names_the_open_ones() {
    check("types_breakers", with_breakers);
    let header = |text: &str| text.lines().nth(4).unwrap().to_string();
    let mut app = with_breakers();
    let text = screen(&mut app, 80, 24);
    assert!(header(&text).contains("BREAKER"), "{text}");
    assert!(
        !header(&text).contains("PER-KEY") && !header(&text).contains("RATE"),
        "{text}"
    );
    for cell in ["open 12s", "half-open", "closed", "1250", "4/20", "6 >5m"] {
        assert!(text.contains(cell), "{cell} cut:\n{text}");
    }
    let tabs = text.lines().nth(1).unwrap();
    // Eight view tabs leave 13 columns: the open ones counted in the narrow abbreviation.
    assert!(tabs.ends_with("│ 1 brk open"), "{text}");
    let text = screen(&mut app, 160, 48);
    let tabs = text.lines().nth(1).unwrap();
    assert!(
        tabs.contains("breaker open: mail · half-open: sleep"),
        "{text}"
    );
    for view in [View::Leases, View::Agents] {
        app.act(leasehold_console::input::Action::Show(view));
        let text = screen(&mut app, 80, 24);
        assert!(text.lines().nth(1).unwrap().contains("brk open"), "{text}");
    }

    let mut app = with_breakers();
    let mut overview = app.state.live.overview.clone().unwrap();
    for t in &mut overview.types {
        t.breaker = None;
    }
    app.on_event(leasehold_console::event::Event::Overview(overview));
    let text = screen(&mut app, 160, 48);
    assert!(!text.contains("BREAKER"), "{text}");
    assert!(!text.contains("breaker"), "{text}");
}

/// The Tasks view: the state tabs with their counts (compact; `100k+` past a finished
/// state's cap; `?` for one not counted in time), the queued tasks newest first with their
/// waiting time, error code and inert message, `more below` while pages remain.
#[test]
fn tasks() {
    check("tasks", || at(View::Tasks));
}

/// Counts the agent kept serving for a while (a slow count, a deep queue) say in the title how
/// old they are.
#[test]
fn tasks_say_how_old_their_counts_are() {
    let mut app = at(View::Tasks);
    let text = screen(&mut app, 80, 24);
    assert!(!text.contains(" old"), "{text}");
    let now = app.state.live.now_ms;
    app.state.live.tasks.counts.as_mut().unwrap().now_ms = now - 34_000;
    let text = screen(&mut app, 80, 24);
    assert!(text.contains("counts 34s old"), "{text}");
    insta::assert_snapshot!("tasks_old_counts_80x24", text);
}

/// The dead tab after `[`, a row marked, and the delete to confirm: the verb, the count, the
/// ids and what it does.
#[test]
fn tasks_dead_with_a_delete_to_confirm() {
    check("tasks_dead_delete", || {
        let mut app = at(View::Tasks);
        app.on_key(Key::Char('['));
        fixture::answer_tasks(&mut app, 40);
        app.on_tick(0);
        app.on_key(Key::Char(' '));
        app.on_key(Key::Char('d'));
        app
    });
}

/// A filter typed in the Tasks view is pushed to the agent, and the tabs count what it
/// matches; the later tab's time column counts down to the task's due time.
#[test]
fn tasks_later_filtered() {
    check("tasks_later_filtered", || {
        let mut app = at(View::Tasks);
        app.on_key(Key::Char(']'));
        app.on_key(Key::Char('/'));
        for c in "type:mail".chars() {
            app.on_key(Key::Char(c));
        }
        app.on_key(Key::Enter);
        fixture::answer_tasks(&mut app, 30);
        app
    });
}

#[test]
fn agents() {
    check("agents", || at(View::Agents));
}

#[test]
fn schedules() {
    check("schedules", || at(View::Schedules));
}

#[test]
fn schedules_sorted_by_next_fire_with_a_trigger_to_confirm() {
    check("schedules_confirm_trigger", || {
        let mut app = at(View::Schedules);
        app.on_key(Key::Char('s'));
        app.on_key(Key::Char('j'));
        app.on_key(Key::Char('t'));
        app
    });
}

#[test]
fn schedules_that_cannot_be_read() {
    let mut app = fixture::app(Settings::default());
    app.act(leasehold_console::input::Action::Show(View::Schedules));
    for r in app.take_requests() {
        app.on_event(leasehold_console::event::Event::Reply {
            id: r.id,
            reply: Err(
                "list schedules: unimplemented: \u{1b}[2Jno such method (unimplemented)".into(),
            ),
        });
    }
    app.on_tick(0);
    insta::assert_snapshot!("schedules_error_80x24", screen(&mut app, 80, 24));
}

#[test]
fn locks() {
    check("locks", || at(View::Locks));
}

#[test]
fn locks_sorted_by_time_left_with_a_release_to_confirm() {
    check("locks_confirm_release", || {
        let mut app = at(View::Locks);
        app.on_key(Key::Char('s'));
        app.on_key(Key::Char('j'));
        app.on_key(Key::Char('x'));
        app
    });
}

#[test]
fn shards() {
    check("shards", || {
        let mut app = at(View::Shards);
        app.on_key(Key::Char('j'));
        app
    });
}

#[test]
fn shards_of_the_next_group() {
    let mut app = at(View::Shards);
    app.on_key(Key::Char(']'));
    fixture::answer_resources(&mut app);
    insta::assert_snapshot!("shards_next_group_80x24", screen(&mut app, 80, 24));
}

#[test]
fn locks_that_cannot_be_read() {
    let mut app = fixture::app(Settings::default());
    app.act(leasehold_console::input::Action::Show(View::Locks));
    for r in app.take_requests() {
        app.on_event(leasehold_console::event::Event::Reply {
            id: r.id,
            reply: Err("list locks: unimplemented: \u{1b}[2Jno such method (unimplemented)".into()),
        });
    }
    app.on_tick(0);
    insta::assert_snapshot!("locks_error_80x24", screen(&mut app, 80, 24));
}

#[test]
fn detail() {
    check("detail", || {
        let mut app = at(View::Dead);
        app.on_key(Key::Enter);
        fixture::answer_detail(&mut app);
        app
    });
}

#[test]
fn confirm_dialog() {
    check("confirm", || {
        let mut app = at(View::Leases);
        app.on_key(Key::Char(' '));
        app.on_key(Key::Char(' '));
        app.on_key(Key::Char('x'));
        app
    });
}

#[test]
fn confirm_typed_count() {
    check("confirm_requeue_all", || {
        let mut app = at(View::Dead);
        app.on_key(Key::Char('R'));
        // The dry run's answer: more than 50, so the count must be typed.
        for r in app.take_requests() {
            app.on_event(leasehold_console::event::Event::Reply {
                id: r.id,
                reply: Ok(leasehold_console::event::Reply::Count(212)),
            });
        }
        app.on_key(Key::Char('2'));
        app.on_key(Key::Char('1'));
        app
    });
}

#[test]
fn help() {
    check("help", || {
        let mut app = at(View::Leases);
        app.on_key(Key::Char('?'));
        app
    });
}

#[test]
fn help_of_the_lease_tabs() {
    // The help is one list for every view; scrolled to the Leases tabs' keys.
    let mut app = at(View::Locks);
    app.on_key(Key::Char('?'));
    for _ in 0..42 {
        app.on_key(Key::Char('j'));
    }
    insta::assert_snapshot!("help_lease_tabs_80x24", screen(&mut app, 80, 24));
}

#[test]
fn locks_in_ascii_without_colour() {
    let mut app = fixture::app(Settings {
        color: false,
        unicode: false,
    });
    app.act(leasehold_console::input::Action::Show(View::Locks));
    fixture::answer_resources(&mut app);
    app.on_tick(0);
    let text = screen(&mut app, 80, 24);
    assert!(text.is_ascii(), "the ASCII mode drew non-ASCII:\n{text}");
    insta::assert_snapshot!("locks_ascii_80x24", text);
}

#[test]
fn ascii_without_colour_and_read_only() {
    let mut app = fixture::app(Settings {
        color: false,
        unicode: false,
    });
    app.state.read_only = Some("a viewer token: actions are refused".into());
    app.on_key(Key::Char('x'));
    let text = screen(&mut app, 80, 24);
    assert!(text.is_ascii(), "the ASCII mode drew non-ASCII:\n{text}");
    insta::assert_snapshot!("leases_ascii_read_only_80x24", text);
}

#[test]
fn frozen_and_filtered() {
    let mut app = at(View::Leases);
    app.on_key(Key::Char('/'));
    for c in "mail".chars() {
        app.on_key(Key::Char(c));
    }
    app.on_key(Key::Enter);
    app.on_key(Key::Char('Z'));
    insta::assert_snapshot!("leases_filtered_frozen_80x24", screen(&mut app, 80, 24));
}

// -------------------------------------------------------------------------------------------
// Issue 20: sort words, layout, the detail pane's actions and running attempt, unreachable.
// -------------------------------------------------------------------------------------------

use leasehold_console::event::{ConnEvent, Event, Reply};
use leasehold_console::state::Pending;
use leasehold_proto::v1 as pb;

/// The words after `sort:` in the title of the app's view.
fn sort_words(app: &mut App) -> String {
    let text = screen(app, 160, 48);
    let title = text.lines().nth(3).unwrap();
    let at = title.find("sort: ").unwrap() + "sort: ".len();
    // The Types view's title goes on with the global rate after a `│`.
    let words = title[at..].split(" ─").next().unwrap();
    words.split(" │").next().unwrap().trim().to_string()
}

fn is_sorted_by<T: Ord + Copy + std::fmt::Debug>(values: &[T], descending: bool) -> bool {
    values.windows(2).all(|w| {
        if descending {
            w[0] >= w[1]
        } else {
            w[0] <= w[1]
        }
    })
}

#[test]
fn sort_labels_name_the_order_shown() {
    // Types by queued: the most first, and the title says so; `S` turns both round.
    let mut app = at(View::Types);
    app.on_key(Key::Char('s'));
    assert_eq!(sort_words(&mut app), "queued, most first");
    let overview = app.state.live.overview.clone().unwrap();
    let queued = |app: &App| -> Vec<u64> {
        app.state
            .row_keys(View::Types)
            .iter()
            .map(|k| {
                overview
                    .types
                    .iter()
                    .find(|t| &t.task_type == k)
                    .unwrap()
                    .queued
            })
            .collect()
    };
    assert_eq!(queued(&app), [1250, 340, 12, 0]);
    app.on_key(Key::Char('S'));
    assert_eq!(sort_words(&mut app), "queued, fewest first");
    assert!(is_sorted_by(&queued(&app), false));

    // Slow by age: the longest running (the oldest) first.
    let mut app = at(View::Slow);
    assert_eq!(sort_words(&mut app), "age, oldest first");
    let started = |app: &App, view: View| -> Vec<i64> {
        app.state
            .row_keys(view)
            .iter()
            .map(|k| {
                let id: i64 = k.parse().unwrap();
                app.state
                    .live
                    .conns
                    .values()
                    .find_map(|c| c.leases.get(&id))
                    .unwrap()
                    .lease
                    .started_at_ms
            })
            .collect()
    };
    let s = started(&app, View::Slow);
    assert!(s.len() > 1 && is_sorted_by(&s, false), "{s:?}");

    // Leases by time left: the least first.
    let mut app = at(View::Leases);
    assert_eq!(sort_words(&mut app), "time left, least first");

    // Dead letters: the newest death first.
    let mut app = at(View::Dead);
    assert_eq!(sort_words(&mut app), "died, newest first");
    let died: Vec<i64> = app
        .state
        .row_keys(View::Dead)
        .iter()
        .map(|k| {
            let id: i64 = k.parse().unwrap();
            let t = app.state.live.dead.tasks.iter().find(|t| t.id == id);
            t.unwrap().finished_at_ms
        })
        .collect();
    assert!(is_sorted_by(&died, true), "{died:?}");

    // Agents by state: the worst (down) first.
    let mut app = at(View::Agents);
    app.on_key(Key::Char('s'));
    assert_eq!(sort_words(&mut app), "state, worst first");
    assert_eq!(app.state.row_keys(View::Agents)[0], "web-3#0");
}

#[test]
fn at_120_columns_text_gets_the_room_it_needs() {
    // Dead letters: every message whole, not cut at a fixed width while TYPE and CODE idle.
    let mut app = at(View::Dead);
    let text = screen(&mut app, 120, 35);
    for message in [
        "550 mailbox unavailable",
        "attempt timed out after 30s",
        "handler panicked: index out of bounds",
        "deadline passed before a claim",
        r"\u{1b}[2J\u{1b}[31mred alert\u{202e}txt.exe",
    ] {
        assert!(text.contains(message), "{message} cut:\n{text}");
    }
    insta::assert_snapshot!("dead_120x35", text);

    // Schedules: the last outcome's header and words whole at 120 as at 80.
    let mut app = at(View::Schedules);
    let text = screen(&mut app, 120, 35);
    assert!(text.contains("LAST OUTCOME"), "{text}");
    assert!(text.contains("succeeded (task 5012)"), "{text}");
    assert!(!text.contains("succeede…"), "{text}");
    insta::assert_snapshot!("schedules_120x35", text);
}

#[test]
fn panes_at_80_columns_leave_no_cut_table_text_beside_them() {
    for open in [Key::Char('?'), Key::Enter] {
        let mut app = at(View::Leases);
        app.on_key(open);
        fixture::answer_detail(&mut app);
        let text = screen(&mut app, 80, 24);
        // The pane spans rows 4..22 of the screen; nothing of the table beside it.
        for line in text.lines().skip(5).take(17) {
            let outside: String = line
                .chars()
                .rev()
                .take_while(|c| *c != '│' && *c != '╮' && *c != '╯')
                .collect();
            assert!(outside.trim().is_empty(), "beside the pane: {line:?}");
        }
    }
}

/// The reply to GetTask for the first lease of the Leases view (task 301, export:csv): its
/// second attempt runs on batch-1#3 at epoch 2 (the first lost its lease), with progress.
fn running_reply(id: i64) -> pb::GetTaskResponse {
    let mut task = fixture::dead_task(id, "export:csv", "x", "x", 0);
    task.status = pb::TaskStatus::Running as i32;
    task.last_error = None;
    task.finished_at_ms = 0;
    task.attempt = 2;
    task.lease_owner = "batch-1#3".into();
    task.lease_epoch = 2;
    task.started_at_ms = fixture::NOW - 95_000;
    task.lease_until_ms = fixture::NOW - 3_000;
    task.progress_json = r#"{"total":28,"processed":26,"succeeded":25,"failed":1}"#.into();
    pb::GetTaskResponse {
        task: Some(task),
        attempts: vec![pb::Attempt {
            epoch: 1,
            attempt: 1,
            agent: "web-2#2".into(),
            started_at_ms: fixture::NOW - 600_000,
            finished_at_ms: fixture::NOW - 540_000,
            outcome: "lease_expired".into(),
            error: None,
            ..Default::default()
        }],
        why_not_running: String::new(),
        blockers: vec![],
        now_ms: fixture::NOW,
    }
}

fn answer_with(app: &mut App, reply: impl Fn(i64) -> pb::GetTaskResponse) {
    for r in app.take_requests() {
        if let Some(Pending::Task { id }) = app.state.pending.get(&r.id).cloned() {
            app.on_event(Event::Reply {
                id: r.id,
                reply: Ok(Reply::Task(Box::new(reply(id)))),
            });
        }
    }
}

#[test]
fn a_running_task_shows_its_attempt_its_progress_and_only_cancel() {
    check("detail_running", || {
        let mut app = at(View::Leases);
        app.on_key(Key::Enter);
        answer_with(&mut app, running_reply);
        app
    });
    let mut app = at(View::Leases);
    app.on_key(Key::Enter);
    answer_with(&mut app, running_reply);
    let text = screen(&mut app, 160, 48);
    assert!(
        text.contains("progress 26/28 (25 succeeded, 1 failed)"),
        "{text}"
    );
    assert!(!text.contains(r#"{"total""#), "{text}");
    assert!(!text.contains("none yet"), "{text}");
    assert!(
        text.contains("#2 epoch 2 batch-1#3 11:58:25 (1m35s ago) → running"),
        "{text}"
    );
    assert!(text.contains("x cancel"), "{text}");
    assert!(!text.contains("r requeue"), "{text}");
}

/// A queued task of `mail` held back by its key: at most 2 run per concurrency key, and 2 with
/// key `acme` run.
fn key_limit_reply(id: i64) -> pb::GetTaskResponse {
    let mut task = fixture::dead_task(id, "mail", "x", "x", 0);
    task.status = pb::TaskStatus::Queued as i32;
    task.last_error = None;
    task.finished_at_ms = 0;
    task.attempt = 0;
    task.lease_owner = String::new();
    task.lease_epoch = 0;
    task.concurrency_key = "acme".into();
    let why = "per-key limit reached: 2/2 running with key \"acme\" (type mail)";
    pb::GetTaskResponse {
        task: Some(task),
        attempts: vec![],
        why_not_running: why.into(),
        blockers: vec![pb::Blocker {
            kind: "key_limit".into(),
            message: why.into(),
        }],
        now_ms: fixture::NOW,
    }
}

#[test]
fn a_task_held_back_by_its_key_shows_the_key_and_why() {
    check("detail_key_limit", || {
        let mut app = at(View::Dead);
        app.on_key(Key::Enter);
        answer_with(&mut app, key_limit_reply);
        app
    });
    let mut app = at(View::Dead);
    app.on_key(Key::Enter);
    answer_with(&mut app, key_limit_reply);
    let text = screen(&mut app, 80, 24);
    assert!(text.contains("concurrency key acme"), "{text}");
    assert!(
        text.contains("per-key limit reached: 2/2 running with key \"acme\""),
        "{text}"
    );
    // A task without a key has no such line.
    let mut app = at(View::Dead);
    app.on_key(Key::Enter);
    fixture::answer_detail(&mut app);
    assert!(!screen(&mut app, 160, 48).contains("concurrency key"));
}

#[test]
fn a_dead_task_offers_requeue_not_cancel() {
    let mut app = at(View::Dead);
    app.on_key(Key::Enter);
    fixture::answer_detail(&mut app);
    let text = screen(&mut app, 160, 48);
    assert!(text.contains("esc back · j/k scroll · r requeue"), "{text}");
    assert!(!text.contains("x cancel"), "{text}");
}

#[test]
fn the_leases_view_shows_progress_as_processed_of_total() {
    let mut app = at(View::Leases);
    let text = screen(&mut app, 160, 48);
    // Task 101 reported 84 of 200, 4 failed.
    let row = text.lines().find(|l| l.contains(" 101 ")).unwrap();
    assert!(row.contains("84/200 4 failed"), "{row}");
}

#[test]
fn g_goes_to_the_last_row_and_c_asks_for_the_global_limit() {
    let mut app = at(View::Leases);
    app.on_key(Key::Char('G'));
    let last = app.state.row_keys(View::Leases).last().cloned();
    assert_eq!(app.state.selected().map(str::to_string), last);
    assert!(app.state.top().is_none(), "G opened {:?}", app.state.top());
    app.on_key(Key::Char('C'));
    let text = screen(&mut app, 80, 24);
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("global limit (number or unlimited):"),
        "{text}"
    );
    let mut app = at(View::Types);
    let text = screen(&mut app, 80, 24);
    assert!(text.contains("C global limit"), "{text}");
    assert!(!text.contains("G global"), "{text}");
}

/// A console whose only agent cannot be reached: it tried, failed, and retries.
fn unreachable_app(view: View) -> App {
    let mut app = App::new(leasehold_console::state::State::new(Settings::default()));
    app.on_tick(0);
    let addr = "127.0.0.1:7070";
    app.on_event(Event::Conn {
        addr: addr.into(),
        conn: ConnEvent::Connecting,
    });
    app.on_event(Event::Conn {
        addr: addr.into(),
        conn: ConnEvent::Lost {
            reason: "cannot reach agent at 127.0.0.1:7070: connection refused".into(),
            retry_in_ms: 4000,
        },
    });
    app.act(leasehold_console::input::Action::Show(view));
    // What the requests of the view get back: the same failure.
    for r in app.take_requests() {
        app.on_event(Event::Reply {
            id: r.id,
            reply: Err("cannot reach agent at 127.0.0.1:7070: connection refused".into()),
        });
    }
    app.on_tick(1000);
    app
}

#[test]
fn every_view_says_no_agent_is_reachable_and_why() {
    for view in View::EVERY {
        let mut app = unreachable_app(view);
        let text = screen(&mut app, 80, 24);
        // The banner wraps at 80 columns: read it as one line.
        let joined = text.lines().collect::<Vec<_>>().join(" ");
        assert!(
            joined.contains(
                "no agent reachable (retry in 3s): cannot reach agent at 127.0.0.1:7070: \
                 connection refused"
            ),
            "{view:?}:\n{text}"
        );
        for wrong in [
            "no live leases",
            "loading…",
            "every lease is renewing on time",
        ] {
            assert!(!text.contains(wrong), "{view:?} says {wrong:?}:\n{text}");
        }
    }
    for view in [View::Leases, View::Types] {
        let mut app = unreachable_app(view);
        let name = format!("unreachable_{}_80x24", view.command());
        insta::assert_snapshot!(name, screen(&mut app, 80, 24));
    }
}

// -------------------------------------------------------------------------------------------
// Issue 20 (dialogs and prompts): the demo's quit question, a refused limit on its prompt.
// -------------------------------------------------------------------------------------------

#[test]
fn quitting_the_demo_asks_first() {
    check("demo_quit", || {
        let mut app = at(View::Leases);
        app.state.demo_agents = vec!["web-1#1".into(), "web-2#2".into(), "batch-1#3".into()];
        app.on_key(Key::Char('q'));
        app
    });
}

#[test]
fn a_refused_limit_says_why_on_its_prompt() {
    let mut app = at(View::Types);
    app.on_key(Key::Char('j'));
    app.on_key(Key::Char('='));
    app.on_key(Key::Ctrl('u'));
    for c in "lots".chars() {
        app.on_key(Key::Char(c));
    }
    app.on_key(Key::Enter);
    insta::assert_snapshot!("limit_prompt_error_80x24", screen(&mut app, 80, 24));
}

// -------------------------------------------------------------------------------------------
// Issue 20 item 4: a frozen agent must not look healthy. Its stream goes silent (no failure of
// its own), so the database's list of overdue renewals (ListSuspectLeases) marks its leases.
// -------------------------------------------------------------------------------------------

/// The database's answer: web-1's task 110 (epoch 3, its stream quiet since its last renewal
/// 8 s ago) and task 401 of an agent the console does not follow.
fn overdue_answer() -> leasehold_proto::v1::ListSuspectLeasesResponse {
    use leasehold_proto::v1 as pb;
    pb::ListSuspectLeasesResponse {
        leases: vec![
            pb::SuspectLease {
                task_id: 401,
                task_type: "cron.rollup".into(),
                owner: "cron-9#4".into(),
                epoch: 5,
                heartbeat_at_ms: fixture::NOW - 11_000,
                lease_until_ms: fixture::NOW + 19_000,
                overdue_ms: 11_000,
            },
            pb::SuspectLease {
                task_id: 110,
                task_type: "sleep".into(),
                owner: "web-1#1".into(),
                epoch: 3,
                heartbeat_at_ms: fixture::NOW - 8_000,
                lease_until_ms: fixture::NOW + 12_000,
                overdue_ms: 8_000,
            },
        ],
        now_ms: fixture::NOW,
        threshold_ms: 3_000,
        truncated: false,
    }
}

fn with_overdue(view: View) -> App {
    let mut app = at(view);
    app.on_event(leasehold_console::event::Event::Suspects(overdue_answer()));
    app.on_tick(0);
    app
}

#[test]
fn renewals_list_leases_the_database_says_are_overdue() {
    check("renewals_overdue", || with_overdue(View::Renewals));
    for (w, h) in SIZES {
        let text = screen(&mut with_overdue(View::Renewals), w, h);
        // The followed agent's lease and the unfollowed one, each with its agent.
        let row_110 = text.lines().find(|l| l.contains(" 110 ")).unwrap_or("");
        assert!(
            row_110.contains("web-1#1") && row_110.contains("overdue"),
            "{w}x{h}:\n{text}"
        );
        let row_401 = text.lines().find(|l| l.contains(" 401 ")).unwrap_or("");
        assert!(
            row_401.contains("cron-9#4") && row_401.contains("overdue"),
            "{w}x{h}:\n{text}"
        );
        assert!(
            text.contains("2 overdue") || text.contains("2 late"),
            "{text}"
        );
    }
    let wide = screen(&mut with_overdue(View::Renewals), 160, 48);
    assert!(wide.contains("overdue (db): no renewal for 8s"), "{wide}");
}

#[test]
fn a_renewal_streamed_after_the_poll_clears_the_overdue_mark() {
    use leasehold_proto::v1 as pb;
    let mut app = with_overdue(View::Renewals);
    let order = |app: &App| -> Vec<i64> {
        app.state
            .lease_order(View::Renewals)
            .iter()
            .map(|r| r.task_id)
            .collect()
    };
    assert!(order(&app).contains(&110));
    assert_eq!(app.state.data().overdue_count(), 2);
    // web-1's stream reports a renewal of task 110 newer than the database's answer.
    app.on_event(leasehold_console::event::Event::Watch {
        addr: fixture::WEB1.into(),
        update: pb::WatchUpdate {
            now_ms: fixture::NOW + 500,
            seq: 2,
            agent_id: "web-1#1".into(),
            deltas: vec![pb::Delta {
                kind: Some(pb::delta::Kind::LeaseRenewed(pb::LeaseRenewed {
                    task_id: 110,
                    epoch: 3,
                    lease_until_ms: fixture::NOW + 30_500,
                    heartbeat_at_ms: fixture::NOW + 500,
                })),
            }],
            ..Default::default()
        },
    });
    app.on_tick(0);
    assert!(!order(&app).contains(&110));
    assert!(order(&app).contains(&401));
    assert_eq!(app.state.data().overdue_count(), 1);
    // Without the database's list nothing of this is suspect.
    app.on_event(leasehold_console::event::Event::Suspects(
        pb::ListSuspectLeasesResponse {
            now_ms: fixture::NOW + 1_000,
            threshold_ms: 3_000,
            ..Default::default()
        },
    ));
    app.on_tick(0);
    assert!(!order(&app).contains(&401));
    assert_eq!(app.state.data().overdue_count(), 0);
}

// -------------------------------------------------------------------------------------------
// Issue 20 item 6: an action log entry expanded to its full answer, inert and wrapped.
// -------------------------------------------------------------------------------------------

/// The whole error of a refused cancel: longer than a line, with an escape sequence and a
/// newline from the agent's message.
const LONG_ERROR: &str = "cancel task 301: permission denied: the token's role is \
    viewer\u{1b}[2J and cancelling needs operator\nask the fleet's owner for an operator \
    token or run without --read-only; END-OF-CHAIN (permission denied)";

fn log_expanded() -> App {
    use leasehold_console::event::{Event, Reply};
    let mut app = at(View::Leases);
    app.take_requests();
    for reply in [
        Err(LONG_ERROR.to_string()),
        Ok(Reply::Action {
            summary: "cancel 1: 1 cancel requested".into(),
            failed: 0,
        }),
    ] {
        app.on_key(Key::Char('x'));
        app.on_key(Key::Char('y'));
        let r = app.take_requests().pop().unwrap();
        app.on_event(Event::Reply { id: r.id, reply });
    }
    app.on_key(Key::Char('@'));
    app.on_key(Key::Char('j'));
    app.on_key(Key::Enter);
    app.on_tick(0);
    app
}

#[test]
fn an_expanded_log_entry_shows_its_whole_answer() {
    let mut app = log_expanded();
    let text = screen(&mut app, 80, 24);
    insta::assert_snapshot!("log_expanded_80x24", text);
    assert!(text.contains("END-OF-CHAIN"), "{text}");
    assert!(text.contains(r"viewer\u{1b}[2J"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    // Collapsed again, the entry is one line, cut.
    app.on_key(Key::Enter);
    let text = screen(&mut app, 80, 24);
    assert!(!text.contains("END-OF-CHAIN"), "{text}");
}

/// The queue's last hour under the Types table: sparklines with the latest value and the
/// hour's max at 80×24, line charts with labelled axes at 160×48. The newest minute is not
/// written yet (its zeros are not the latest value), and the oldest depths are unknown.
#[test]
fn types_show_the_queue_history() {
    let mut app = at(View::Types);
    // The pane follows the cursor: the app asks for the selected type's history (once, until
    // the selection changes).
    let _ = app.take_requests();
    screen(&mut app, 80, 24);
    let selected = app.state.table().selected.clone().unwrap();
    app.on_tick(1);
    let asked: Vec<_> = app
        .take_requests()
        .into_iter()
        .filter_map(|r| match r.kind {
            leasehold_console::event::RequestKind::HistoryFor { task_type } => Some(task_type),
            _ => None,
        })
        .collect();
    assert_eq!(asked, vec![selected.clone()]);
    app.on_tick(2);
    assert!(
        app.take_requests().is_empty(),
        "asked again without a change"
    );
    let mut history = history_fixture();
    history.task_type = selected.clone();
    app.on_event(leasehold_console::event::Event::History(history));
    let text = screen(&mut app, 80, 24);
    assert!(text.contains(&format!("of type {selected}")), "{text}");
    assert!(text.contains("throughput"), "{text}");
    assert!(text.contains("failures"), "{text}");
    assert!(text.contains("depth"), "{text}");
    assert!(text.contains("58/min max     58"), "{text}");
    insta::assert_snapshot!("types_history_80x24", text);
    let text = screen(&mut app, 160, 48);
    assert!(text.contains("throughput 58/min (max 58)"), "{text}");
    assert!(text.contains("-59m") && text.contains("now"), "{text}");
    insta::assert_snapshot!("types_history_160x48", text);
}

fn history_fixture() -> leasehold_proto::v1::GetHistoryResponse {
    use leasehold_proto::v1 as pb;
    let start = 1_796_000_000_000_i64;
    let points = (0..60u64)
        .map(|i| pb::HistoryPoint {
            minute_ms: start + i as i64 * 60_000,
            enqueued: i + 3,
            succeeded: if i == 59 { 0 } else { i },
            failed: i % 7,
            dead_lettered: u64::from(i % 20 == 0),
            cancelled: 0,
            waiting: (i >= 10).then_some(100 - i),
            running: (i >= 10).then_some(4),
            counted: i < 59,
        })
        .collect();
    pb::GetHistoryResponse {
        points,
        now_ms: start + 60 * 60_000 + 5_000,
        task_type: String::new(),
    }
}
