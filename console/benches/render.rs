//! What the console costs under load (a benchmark, not a test: it prints figures and asserts
//! nothing). Run with `cargo bench -p leasehold-console --bench render [-- --seconds 20]`.
//!
//! The console's own pipeline, in process: 10 agents' Watch snapshots of 1,000 leases each
//! (10,000 live leases), then for `--seconds` of wall time 2,000 deltas a second — renewals,
//! with a tenth of them a lease released and a new one acquired — delivered as the agents'
//! 50 ms batches through `App::on_event`, a frame drawn after each batch (ratatui TestBackend
//! at 160×48: the terminal's own writing is not counted), and a key every 200 ms (moves,
//! view switches, a filter, the detail pane) timed from the key to its frame drawn. Reports
//! frame and key-to-frame p50 / p99 / max in ms (wall time: run it on a quiet machine), the
//! row order alone and a frame with nothing changed, the Types view with an hour of queue
//! history (line charts at 160×48, sparklines at 80×24), and the process's RSS (now and peak),
//! as one JSON object.
//!
//! Then the Tasks view (`tasks_view` in the report): at 80×24 and at 160×48, PageDown from the
//! first row through 100,000 queued tasks, each page of 200 answered as the view asks for it
//! (the app's own requests, answered in process), a frame drawn after every key: the frame
//! alone and key-to-frame (the key, the pages it asked for taken in, the frame), p50 / p99 /
//! max, and the rows loaded at the end.

// The fixtures build agent messages with the words, as agents before the enums did.
#![allow(deprecated)]

use std::time::{Duration, Instant};

use leasehold_console::app::App;
use leasehold_console::event::{ConnEvent, Event};
use leasehold_console::input::Key;
use leasehold_console::state::{Settings, SortKey, State, View};
use leasehold_proto::v1 as pb;
use leasehold_proto::v1::delta::Kind;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const AGENTS: i64 = 10;
const LEASES_PER_AGENT: i64 = 1_000;
const DELTAS_PER_S: i64 = 2_000;
const BATCH_EVERY: Duration = Duration::from_millis(50);
const KEY_EVERY: Duration = Duration::from_millis(200);
const NOW: i64 = 1_796_126_400_000;

fn addr(agent: i64) -> String {
    format!("10.0.0.{agent}:7070")
}

fn lease(task_id: i64, agent: i64, now: i64) -> pb::Lease {
    pb::Lease {
        task_id,
        task_type: format!("type-{}", task_id % 12),
        epoch: 1,
        owner: format!("agent-{agent}#1"),
        attempt: 1,
        started_at_ms: now - (task_id % 600) * 1000,
        lease_until_ms: now + 20_000 - (task_id % 19) * 1000,
        heartbeat_at_ms: now - (task_id % 19) * 1000,
        priority: 0,
        ..Default::default()
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(|a, b| a.total_cmp(b));
    serde_json::json!({
        "n": v.len(),
        "p50_ms": (percentile(&v, 0.50) * 1000.0).round() / 1000.0,
        "p99_ms": (percentile(&v, 0.99) * 1000.0).round() / 1000.0,
        "max_ms": (v.last().copied().unwrap_or(0.0) * 1000.0).round() / 1000.0,
    })
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn draw(terminal: &mut Terminal<TestBackend>, app: &mut App) -> f64 {
    let started = Instant::now();
    let mut drawn = None;
    let _ = terminal.draw(|f| drawn = Some(leasehold_console::view::draw(f, &app.state)));
    if let Some(d) = drawn {
        app.state.page_rows = d.page_rows.max(1);
    }
    started.elapsed().as_secs_f64() * 1000.0
}

/// Tasks in the database the Tasks view pages through.
const TASKS: i64 = 100_000;

/// The page a TasksPage asks for, from [`TASKS`] queued tasks with ids `TASKS..=1`.
fn tasks_page(before_id: i64, limit: u32) -> pb::ListTasksResponse {
    let top = if before_id == 0 { TASKS } else { before_id - 1 };
    let tasks: Vec<pb::Task> = (1..=top)
        .rev()
        .take(limit as usize)
        .map(|id| pb::Task {
            id,
            task_type: format!("type-{}", id % 12),
            status: pb::TaskStatus::Queued as i32,
            priority: (id % 3) as i32,
            max_attempts: 25,
            available_at_ms: NOW - (id % 600) * 1000,
            last_error: (id % 5 == 0).then(|| pb::TaskError {
                code: "smtp_timeout".into(),
                message: format!("relay said 421 for message {id}, try again later"),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let next_before_id = tasks.last().map_or(0, |t| if t.id > 1 { t.id } else { 0 });
    pb::ListTasksResponse {
        tasks,
        next_before_id,
        now_ms: NOW,
    }
}

/// Answers the app's Tasks view requests (pages and counts) in process.
fn answer_tasks(app: &mut App) {
    use leasehold_console::event::{Reply, RequestKind};
    for r in app.take_requests() {
        let reply = match r.kind {
            RequestKind::TasksPage {
                before_id, limit, ..
            } => Reply::Page(tasks_page(before_id, limit)),
            RequestKind::TaskCounts { .. } => Reply::Counts(pb::CountTasksResponse {
                queued: TASKS as u64,
                finished_cap: 100_000,
                now_ms: NOW,
                ..Default::default()
            }),
            _ => continue,
        };
        app.on_event(Event::Reply {
            id: r.id,
            reply: Ok(reply),
        });
    }
}

/// PageDown through the Tasks view's 100,000 tasks on a `width`×`height` terminal.
fn tasks_view(width: u16, height: u16) -> serde_json::Value {
    let mut terminal = match Terminal::new(TestBackend::new(width, height)) {
        Ok(t) => t,
        Err(e) => return serde_json::json!({ "error": e.to_string() }),
    };
    let mut app = App::new(State::new(Settings::default()));
    app.on_tick(0);
    app.on_key(Key::Char('8'));
    answer_tasks(&mut app);
    app.on_tick(0);
    draw(&mut terminal, &mut app);
    let mut frames = Vec::new();
    let mut key_latency = Vec::new();
    let mut last = usize::MAX;
    loop {
        let t = Instant::now();
        app.on_key(Key::PageDown);
        answer_tasks(&mut app);
        app.on_tick(0);
        frames.push(draw(&mut terminal, &mut app));
        key_latency.push(t.elapsed().as_secs_f64() * 1000.0);
        let at = app.state.table().index;
        if at == last {
            break;
        }
        last = at;
    }
    serde_json::json!({
        "terminal": format!("{width}x{height}"),
        "rows_loaded": app.state.row_count(),
        "selected_row": last + 1,
        "keys": key_latency.len(),
        "frame": summary(frames),
        "key_to_frame": summary(key_latency),
    })
}

fn main() {
    let mut seconds = 20u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--seconds" {
            seconds = args.next().and_then(|v| v.parse().ok()).unwrap_or(seconds);
        }
    }
    let started = Instant::now();
    let local = |at: Instant| i64::try_from(at.duration_since(started).as_millis()).unwrap_or(0);
    let mut app = App::new(State::new(Settings::default()));
    app.on_tick(0);
    for agent in 1..=AGENTS {
        app.on_event(Event::Conn {
            addr: addr(agent),
            conn: ConnEvent::Live,
        });
        let leases = (0..LEASES_PER_AGENT)
            .map(|i| lease(agent * 1_000_000 + i, agent, NOW))
            .collect();
        app.on_event(Event::Watch {
            addr: addr(agent),
            update: pb::WatchUpdate {
                now_ms: NOW,
                agent_id: format!("agent-{agent}#1"),
                snapshot: Some(pb::Snapshot {
                    leases,
                    stats: Some(pb::AgentStats {
                        active: 1000,
                        local_limit: 1000,
                        state: "running".into(),
                        ..Default::default()
                    }),
                    resources: vec![],
                }),
                ..Default::default()
            },
        });
    }
    let mut terminal = match Terminal::new(TestBackend::new(160, 48)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot make the test terminal: {e}");
            std::process::exit(1);
        }
    };
    let keys = [
        Key::Char('j'),
        Key::Char('j'),
        Key::PageDown,
        Key::Char('k'),
        Key::Char('2'),
        Key::Char('3'),
        Key::Char('1'),
        Key::Char('s'),
        Key::Char('S'),
        Key::Char('s'),
        Key::Char('/'),
        Key::Char('7'),
        Key::Enter,
        Key::Esc,
        Key::Char('e'),
        Key::Char('g'),
        Key::Char(' '),
        Key::Char('u'),
    ];
    let mut frames = Vec::new();
    let mut key_latency = Vec::new();
    let mut applied = 0i64;
    let mut next_batch = Instant::now();
    let mut next_key = Instant::now() + KEY_EVERY;
    let mut key_i = 0usize;
    let mut seq = 1u64;
    let mut next_id = 100_000_000i64;
    let end = Instant::now() + Duration::from_secs(seconds);
    let per_batch = DELTAS_PER_S * i64::try_from(BATCH_EVERY.as_millis()).unwrap_or(50) / 1000;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move |n: i64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        i64::try_from(rng % u64::try_from(n).unwrap_or(1)).unwrap_or(0)
    };
    let mut live: Vec<Vec<i64>> = (1..=AGENTS)
        .map(|a| (0..LEASES_PER_AGENT).map(|i| a * 1_000_000 + i).collect())
        .collect();
    while Instant::now() < end {
        let now_instant = Instant::now();
        if now_instant >= next_batch {
            let elapsed =
                i64::try_from(now_instant.duration_since(started).as_millis()).unwrap_or(0);
            let db_now = NOW + elapsed;
            // One update per agent, with its share of the batch.
            for agent in 1..=AGENTS {
                let mut deltas = Vec::new();
                let book = &mut live[usize::try_from(agent - 1).unwrap_or(0)];
                for _ in 0..per_batch / AGENTS {
                    let i = usize::try_from(rand(book.len() as i64)).unwrap_or(0);
                    let id = book[i];
                    if rand(10) == 0 {
                        deltas.push(pb::Delta {
                            kind: Some(Kind::LeaseReleased(pb::LeaseReleased {
                                task_id: id,
                                epoch: 1,
                                outcome: "succeeded".into(),
                                ..Default::default()
                            })),
                        });
                        next_id += 1;
                        book[i] = next_id;
                        deltas.push(pb::Delta {
                            kind: Some(Kind::LeaseAcquired(lease(next_id, agent, db_now))),
                        });
                    } else {
                        deltas.push(pb::Delta {
                            kind: Some(Kind::LeaseRenewed(pb::LeaseRenewed {
                                task_id: id,
                                epoch: 1,
                                lease_until_ms: db_now + 20_000,
                                heartbeat_at_ms: db_now,
                            })),
                        });
                    }
                }
                applied += deltas.len() as i64;
                seq += 1;
                app.on_event(Event::Watch {
                    addr: addr(agent),
                    update: pb::WatchUpdate {
                        now_ms: db_now,
                        seq,
                        agent_id: format!("agent-{agent}#1"),
                        deltas,
                        ..Default::default()
                    },
                });
            }
            let t = Instant::now();
            app.on_tick(local(t));
            draw(&mut terminal, &mut app);
            frames.push(t.elapsed().as_secs_f64() * 1000.0);
            next_batch += BATCH_EVERY;
        }
        if Instant::now() >= next_key {
            let t = Instant::now();
            app.state.set_local_time(local(t));
            app.on_key(keys[key_i % keys.len()]);
            let _ = app.take_requests();
            draw(&mut terminal, &mut app);
            key_latency.push(t.elapsed().as_secs_f64() * 1000.0);
            key_i += 1;
            next_key += KEY_EVERY;
        }
        let wake = next_batch.min(next_key);
        if let Some(d) = wake.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    // The row order alone (what a frame pays when the data changed), 50 times.
    let mut order_ms = Vec::new();
    for sort in [SortKey::TimeLeft, SortKey::Type] {
        for _ in 0..25 {
            let t = Instant::now();
            let order = app.state.data().lease_order(View::Leases, "", sort, false);
            order_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            std::hint::black_box(order);
        }
    }
    // A frame when nothing changed since the last one (the order is cached): drawing alone.
    let mut draw_only = Vec::new();
    app.on_key(Key::Char('1'));
    app.on_tick(local(Instant::now()));
    for _ in 0..50 {
        draw_only.push(draw(&mut terminal, &mut app));
    }
    // The Types view with the history pane (issue 26): line charts at 160x48, sparklines at
    // 80x24, drawn from a full hour of history.
    app.on_key(Key::Char('5'));
    app.on_event(leasehold_console::event::Event::History(history_hour()));
    let mut types_wide = Vec::new();
    for _ in 0..50 {
        types_wide.push(draw(&mut terminal, &mut app));
    }
    let mut narrow = match Terminal::new(TestBackend::new(80, 24)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot make the test terminal: {e}");
            std::process::exit(1);
        }
    };
    let mut types_narrow = Vec::new();
    for _ in 0..50 {
        types_narrow.push(draw(&mut narrow, &mut app));
    }
    let report = serde_json::json!({
        "agents": AGENTS,
        "leases": app.state.live.lease_count(),
        "terminal": "160x48",
        "seconds": seconds,
        "deltas_applied": applied,
        "deltas_per_s": (applied as f64 / wall).round(),
        "frame": summary(frames),
        "key_to_frame": summary(key_latency),
        "lease_order": summary(order_ms),
        "draw_only": summary(draw_only),
        "types_history_160x48": summary(types_wide),
        "types_history_80x24": summary(types_narrow),
        "rss_mb": (rss_kib("VmRSS:") as f64 / 1024.0 * 10.0).round() / 10.0,
        "peak_rss_mb": (rss_kib("VmHWM:") as f64 / 1024.0 * 10.0).round() / 10.0,
        "tasks_view": [tasks_view(80, 24), tasks_view(160, 48)],
    });
    println!("{report}");
}

/// An hour of queue history, every minute counted, depths known.
fn history_hour() -> pb::GetHistoryResponse {
    let start = 1_796_000_000_000_i64;
    pb::GetHistoryResponse {
        points: (0..60u64)
            .map(|i| pb::HistoryPoint {
                minute_ms: start + i as i64 * 60_000,
                enqueued: 500 + i * 7 % 50,
                succeeded: 480 + i * 13 % 70,
                failed: i * 3 % 11,
                dead_lettered: i % 2,
                cancelled: 0,
                waiting: Some(1_000 + i * 17 % 300),
                running: Some(100),
                counted: true,
            })
            .collect(),
        now_ms: start + 60 * 60_000,
        task_type: String::new(),
    }
}
