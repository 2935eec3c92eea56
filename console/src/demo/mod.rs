//! `leasehold demo`: a database, agents in this process, a mixed workload, and the console
//! on them — one binary, nothing else to start.
//!
//! ```text
//!   Target::resolve ─▶ clear (refuse a file that is not ours) ─▶ log to a file
//!   database::open (create, stamp, migrate) ─▶ workload::set_policies
//!   Fleet::start (N agents, gRPC on 127.0.0.1:0) ─▶ Feeder (a bulk enqueue every 500 ms)
//!        │
//!        ├─ interactive: tui::run on the first agent (blocks this thread; the agents and the
//!        │  feeder run on the demo's own runtime meanwhile) until q (asked first while its
//!        │  agents run) / SIGTERM / SIGHUP / ^C
//!        └─ headless: --duration, or until SIGINT / SIGTERM
//!        ▼
//!   stop feeding ─▶ drain the agents (a signal meanwhile forces them) ─▶ count from the
//!   database ─▶ close it ─▶ the JSON summary, or where the file is and how to reopen it
//! ```
//!
//! Invariants: nothing is logged to the terminal (the agents' and the console's logs go to
//! one file); the agents are always drained before the process exits, on an error of the
//! console too; a file at the demo's place that an earlier demo did not make is never
//! touched (see [`database`]).

mod database;
mod fleet;
mod handlers;
mod summary;
mod workload;

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use database::{APPLICATION_ID, DEFAULT_FILE, DEFAULT_LOG};
pub use handlers::{FLAKY_TYPE, LONG_TYPE};

use crate::cli::{Cli, DemoArgs, GlobalArgs};
use crate::error::{Error, Result};
use crate::output::Out;
use database::{Opened, Target};
use fleet::{Ended, Fleet};
use summary::{AgentLine, Counts, Summary};
use workload::{FeedStats, Feeder, Schedule, Types};

/// Worker threads of the runtime the agents and the feeder run on.
const WORKER_THREADS: usize = 2;
/// How long the runtime may take to end what is left after the demo stopped.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

/// Runs `leasehold demo`; the exit code.
pub fn run(cli: &Cli, args: &DemoArgs, out: &mut Out) -> u8 {
    match run_demo(cli, args, out) {
        Ok(code) => code,
        Err(err) => {
            out.error(&err);
            crate::exit::exit_code(&err)
        }
    }
}

fn run_demo(cli: &Cli, args: &DemoArgs, out: &mut Out) -> Result<u8> {
    let cwd = std::env::current_dir().map_err(|source| Error::Local {
        what: "reading the working directory".into(),
        source,
    })?;
    let target = Target::resolve(args.database_url.as_deref(), &cwd)?;
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if !args.headless && !terminal {
        return Err(Error::usage(
            "the demo opens the console, which needs a terminal (stdin and stdout); \
             `leasehold demo --headless` runs it without one",
        ));
    }
    target.clear()?;
    let log_file = args
        .console
        .log_file
        .clone()
        .or_else(|| cli.console.log_file.clone())
        .or_else(|| target.log_file());
    let log = crate::tui::terminal::log_to_file(log_file)?;
    tracing::info!(database = %target.shown_url(), agents = args.agents, headless = args.headless, "demo starting");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .thread_name("leasehold-demo")
        .enable_all()
        .build()
        .map_err(|source| Error::Local {
            what: "starting the async runtime".into(),
            source,
        })?;
    let result = if args.headless {
        runtime.block_on(headless(&target, args, &log, out))
    } else {
        interactive(&runtime, cli, args, &target, &log, out)
    };
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result
}

/// `--headless`: run for `--duration` (or until a signal), then print the summary.
async fn headless(target: &Target, args: &DemoArgs, log: &Path, out: &mut Out) -> Result<u8> {
    let running = Running::start(target, args.agents).await?;
    let count = running.fleet.members.len();
    out.note(&format!(
        "demo: {count} agent{} ({}) on {}, feeding work for {}; log {}",
        if count == 1 { "" } else { "s" },
        running
            .fleet
            .members
            .iter()
            .map(|m| m.address.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        target.shown_url(),
        humantime::format_duration(args.duration),
        log.display()
    ));
    let signalled = tokio::select! {
        () = tokio::time::sleep(args.duration) => false,
        () = signalled() => true,
    };
    if signalled {
        out.note("demo: signal received, stopping (send it again to force)");
    }
    let stopped = running.stop().await;
    let code = stopped.code();
    let counts = stopped.counts?;
    let fed = stopped.fed.as_secs_f64();
    let finished = counts.finished();
    let summary = Summary {
        database: target.file.as_ref().map(|f| f.display().to_string()),
        database_url: target.shown_url(),
        log: Some(log.display().to_string()),
        duration_s: summary::round3(fed),
        enqueued: stopped.stats.enqueued.load(Ordering::Relaxed),
        enqueue_failures: stopped.stats.failures.load(Ordering::Relaxed),
        finished,
        processed_per_s: if fed > 0.0 {
            summary::round3(finished as f64 / fed)
        } else {
            0.0
        },
        counts,
        agents: stopped.ended.iter().map(AgentLine::of).collect(),
    };
    out.json(&summary)?;
    Ok(code)
}

/// The console on the demo's agents, until the operator quits.
fn interactive(
    runtime: &tokio::runtime::Runtime,
    cli: &Cli,
    args: &DemoArgs,
    target: &Target,
    log: &Path,
    out: &mut Out,
) -> Result<u8> {
    let running = runtime.block_on(Running::start(target, args.agents))?;
    let agents: Vec<String> = running.fleet.members.iter().map(|m| m.id.clone()).collect();
    let console = running
        .fleet
        .seed()
        .ok_or_else(|| Error::usage("the demo started no agent"))
        .and_then(|seed| crate::client::settings(&seed_args(&cli.global, seed)))
        .and_then(|settings| {
            let no_color = cli.console.no_color
                || args.console.no_color
                || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            crate::tui::run_demo(
                settings,
                crate::tui::Options {
                    display: crate::state::Settings {
                        color: !no_color,
                        unicode: !(cli.console.ascii || args.console.ascii),
                    },
                    read_only: cli.console.read_only || args.console.read_only,
                    log_file: Some(log.to_path_buf()),
                },
                agents,
            )
        });
    if let Err(err) = &console {
        out.error(err);
    }
    out.note("demo: stopping the agents (press ^C to force)");
    let stopped = runtime.block_on(running.stop());
    let mut code = stopped.code();
    let counts = stopped.counts.unwrap_or_else(|err| {
        out.error(&err);
        code = code.max(crate::exit::exit_code(&err));
        Counts::default()
    });
    out.lines(summary::farewell(
        target,
        Some(log),
        &counts,
        &stopped.ended,
    ))?;
    match console {
        Ok(console) => Ok(console.max(code)),
        Err(err) => Ok(crate::exit::exit_code(&err).max(code)),
    }
}

/// The console's connection flags: the demo's first agent, plaintext, no token.
fn seed_args(global: &GlobalArgs, seed: &str) -> GlobalArgs {
    GlobalArgs {
        agent: seed.to_owned(),
        token: None,
        output: global.output,
        ca: None,
        cert: None,
        key: None,
        tls: false,
        tls_server_name: None,
        call_timeout: global.call_timeout,
        token_file: None,
        // A loopback seed: the agent's Unix socket when it serves one, else TCP.
        socket: None,
        no_socket: false,
        insecure: false,
        verbose: false,
    }
}

/// The demo while it runs.
struct Running {
    opened: Opened,
    fleet: Fleet,
    feeder: JoinHandle<()>,
    stop_feeding: CancellationToken,
    stats: Arc<FeedStats>,
    started: Instant,
}

/// The demo after it stopped.
struct Stopped {
    /// How long work was fed.
    fed: Duration,
    ended: Vec<Ended>,
    /// The tasks by status, or why they could not be counted.
    counts: Result<Counts>,
    stats: Arc<FeedStats>,
}

impl Stopped {
    /// 0, or 3 when an agent ended with an error.
    fn code(&self) -> u8 {
        if self.ended.iter().any(|e| e.outcome.is_err()) {
            crate::exit::UNREACHABLE
        } else {
            crate::exit::OK
        }
    }
}

impl Running {
    /// Opens the database, sets the policies, starts the agents and the feeder.
    async fn start(target: &Target, agents: u32) -> Result<Running> {
        let opened = database::open(target).await?;
        let started = async {
            let types = Types::new()?;
            workload::set_policies(&*opened.store, &types).await?;
            let fleet = Fleet::start(&target.url, agents).await?;
            Ok::<_, Error>((types, fleet))
        }
        .await;
        let (types, fleet) = match started {
            Ok(started) => started,
            Err(e) => {
                opened.close().await;
                return Err(e);
            }
        };
        let stats = Arc::new(FeedStats::default());
        let stop_feeding = CancellationToken::new();
        let feeder = tokio::spawn(
            Feeder {
                store: Arc::clone(&opened.store),
                schedule: Schedule::new(types, fastrand::Rng::new()),
                stats: Arc::clone(&stats),
                // Only in the demo's own file: a shared database keeps no demo schedules.
                cron: if target.fresh {
                    workload::cron_schedules()?
                } else {
                    Vec::new()
                },
            }
            .run(stop_feeding.clone()),
        );
        tracing::info!(
            agents = fleet.members.len(),
            seed = fleet.seed().unwrap_or_default(),
            "demo running"
        );
        Ok(Running {
            opened,
            fleet,
            feeder,
            stop_feeding,
            stats,
            started: Instant::now(),
        })
    }

    /// Stops feeding, drains the agents (forced by a signal meanwhile), counts the tasks and
    /// closes the database.
    async fn stop(self) -> Stopped {
        self.stop_feeding.cancel();
        if let Err(e) = self.feeder.await {
            tracing::warn!(error = %e, "the demo feeder failed");
        }
        let fed = self.started.elapsed();
        if !self.fleet.all_running() {
            tracing::warn!("a demo agent stopped before the demo did");
        }
        let force = self.fleet.force();
        let forcer = tokio::spawn(async move {
            signalled().await;
            tracing::warn!("signal while draining: forcing the agents to stop");
            force.cancel();
        });
        let ended = self.fleet.stop().await;
        forcer.abort();
        let counts = summary::count(&*self.opened.store, self.stats.first_id()).await;
        self.opened.close().await;
        tracing::info!(fed = ?fed, "demo stopped");
        Stopped {
            fed,
            ended,
            counts,
            stats: self.stats,
        }
    }
}

/// Waits for SIGINT or SIGTERM; forever when the handlers cannot be installed (logged), so
/// the demo then ends by its duration or its console only.
async fn signalled() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        (Err(error), _) | (_, Err(error)) => {
            tracing::warn!(%error, "cannot install the signal handlers");
            std::future::pending::<()>().await;
        }
    }
}

/// `word` as one word for a POSIX shell: as it is when that is safe, else single-quoted.
pub(crate) fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._:@%+=,-".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("sqlite:///a/b.sqlite"), "sqlite:///a/b.sqlite");
        assert_eq!(shell_word("sqlite:///a b"), "'sqlite:///a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
