//! Whole-screen snapshots of the console (ratatui TestBackend + insta): every view, the task
//! detail pane, the confirm dialog and help, at 80×24 and 160×48, from the fixed cluster of
//! `fixture` (so no filter is needed for times, ids or ports), plus the no-colour ASCII and
//! read-only variants. Review a change with `cargo insta review` or by reading the `.snap`
//! diff; `INSTA_UPDATE=always` rewrites them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
    for _ in 0..44 {
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
