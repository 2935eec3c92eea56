//! The interactive console: the terminal loop around the [`App`].
//!
//! ```text
//!  keys (crossterm EventStream) ──▶ app.on_key ──▶ draw now (a key shows at once)
//!  fleet events (bounded channel) ─▶ app.on_event (a batch) ─▶ draw at most every 50 ms
//!  tick (250 ms) ──▶ clock, reloads ──▶ draw
//!  app requests ──▶ fleet
//! ```
//!
//! Invariants: the terminal is restored (raw mode off, main screen, cursor shown) on quit, on
//! error, on SIGTERM / SIGHUP / SIGINT and on panic (the hook restores before the message
//! prints). Logs go to a file, never the screen.

pub mod terminal;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossterm::event::{Event as TermEvent, EventStream};
use futures_util::StreamExt;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::app::App;
use crate::client::{Settings, fleet};
use crate::error::{Error, Result};
use crate::input::key_of;
use crate::state::{Settings as Display, State};

/// Shortest time between two frames drawn for network events.
pub const FRAME_EVERY: Duration = Duration::from_millis(50);
/// How often the clock ticks (ages and lease gauges move).
pub const TICK_EVERY: Duration = Duration::from_millis(250);
/// Events buffered from the network before the streams are slowed down.
pub const EVENT_BUFFER: usize = 4096;

/// How the console was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub display: Display,
    /// Force read-only, whatever the token.
    pub read_only: bool,
    pub log_file: Option<PathBuf>,
}

/// Runs the console until the operator quits; the process exit code.
pub fn run(settings: Settings, options: Options) -> Result<u8> {
    run_with_agents(settings, options, Vec::new())
}

/// Runs the console inside `leasehold demo`, whose agents (`demo_agents`, their ids) stop when
/// it quits: `q` asks first while any of them runs.
pub fn run_demo(settings: Settings, options: Options, demo_agents: Vec<String>) -> Result<u8> {
    run_with_agents(settings, options, demo_agents)
}

fn run_with_agents(settings: Settings, options: Options, demo_agents: Vec<String>) -> Result<u8> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::usage(
            "the console needs a terminal (stdin and stdout); for scripts use the headless \
             commands, `leasehold --help`",
        ));
    }
    let log = terminal::log_to_file(options.log_file.clone())?;
    tracing::info!(agent = %settings.addr.given, log = %log.display(), "console starting");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Local {
            what: "starting the async runtime".into(),
            source,
        })?;
    let mut state = State::new(options.display);
    if options.read_only {
        state.read_only = Some("--read-only".into());
    }
    state.demo_agents = demo_agents;
    let result = runtime.block_on(async move {
        let _guard = terminal::Guard::enter()?;
        run_loop(settings, App::new(state)).await
    });
    // Background tasks (streams) end with the runtime.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

async fn run_loop(settings: Settings, mut app: App) -> Result<u8> {
    let backend = CrosstermBackend::new(std::io::stdout());
    let mut term = Terminal::new(backend).map_err(|source| Error::Local {
        what: "opening the terminal".into(),
        source,
    })?;
    let (event_tx, mut events) = mpsc::channel(EVENT_BUFFER);
    let (request_tx, requests) = mpsc::unbounded_channel();
    let _fleet = fleet::start(settings, event_tx, requests);
    let mut keys = EventStream::new();
    let mut sigterm = signal(SignalKind::terminate()).map_err(|source| Error::Local {
        what: "installing the SIGTERM handler".into(),
        source,
    })?;
    let mut sighup = signal(SignalKind::hangup()).map_err(|source| Error::Local {
        what: "installing the SIGHUP handler".into(),
        source,
    })?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|source| Error::Local {
        what: "installing the SIGINT handler".into(),
        source,
    })?;
    let started = Instant::now();
    let local_ms = || i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(TICK_EVERY);
    let mut dirty = true;
    let mut last_frame: Option<Instant> = None;
    loop {
        if dirty && last_frame.is_none_or(|t| t.elapsed() >= FRAME_EVERY) {
            app.on_tick(local_ms());
            frame(&mut term, &mut app)?;
            last_frame = Some(Instant::now());
            dirty = false;
        }
        for r in app.take_requests() {
            if request_tx.send(r).is_err() {
                return Err(Error::usage("the network side of the console stopped"));
            }
        }
        if app.state.quit {
            return Ok(crate::exit::OK);
        }
        tokio::select! {
            key = keys.next() => match key {
                Some(Ok(TermEvent::Key(k))) => {
                    if let Some(k) = key_of(k) {
                        app.state.set_local_time(local_ms());
                        app.on_key(k);
                        // A key shows at once, whatever the frame pacing.
                        frame(&mut term, &mut app)?;
                        last_frame = Some(Instant::now());
                        dirty = false;
                    }
                }
                Some(Ok(TermEvent::Paste(text))) => {
                    app.on_paste(&text);
                    dirty = true;
                }
                Some(Ok(TermEvent::Resize(_, _))) => {
                    let _ = term.autoresize();
                    dirty = true;
                    last_frame = None;
                }
                Some(Ok(_)) => {}
                Some(Err(source)) => return Err(Error::Local { what: "reading the terminal".into(), source }),
                None => return Ok(crate::exit::OK),
            },
            event = events.recv() => {
                let Some(event) = event else {
                    return Err(Error::usage("the network side of the console stopped"));
                };
                app.on_event(event);
                // Take what else is waiting, so a burst costs one frame.
                let mut n = 0;
                while n < EVENT_BUFFER {
                    match events.try_recv() {
                        Ok(e) => app.on_event(e),
                        Err(_) => break,
                    }
                    n += 1;
                }
                dirty = true;
            }
            _ = tick.tick() => dirty = true,
            _ = sigterm.recv() => return Ok(crate::exit::OK),
            _ = sighup.recv() => return Ok(crate::exit::OK),
            _ = sigint.recv() => return Ok(crate::exit::OK),
        }
    }
}

fn frame(term: &mut Terminal<CrosstermBackend<std::io::Stdout>>, app: &mut App) -> Result<()> {
    if std::mem::take(&mut app.redraw) {
        term.clear().map_err(|source| Error::Local {
            what: "clearing the terminal".into(),
            source,
        })?;
    }
    let mut drawn = None;
    term.draw(|f| drawn = Some(crate::view::draw(f, &app.state)))
        .map_err(|source| Error::Local {
            what: "drawing the console".into(),
            source,
        })?;
    if let Some(d) = drawn
        && d.page_rows != app.state.page_rows
    {
        app.state.page_rows = d.page_rows.max(1);
        app.state.sync_selection();
    }
    Ok(())
}
