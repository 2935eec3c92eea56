//! Command-line definitions of `leasehold` (clap): global connection flags, then one
//! subcommand per headless command. The doc comments are the `--help` text and document each
//! command's output, table and JSON, so scripts can rely on it.
//!
//! Invariants: parsing does no I/O beyond reading the environment; a value clap accepts is
//! already checked for what is cheap to check (types, ranges, task-type names); the agent
//! remains the authority on everything else.

mod args;
mod demo;
mod locks;
mod policy;
pub mod values;

pub use args::{
    AgentsCommand, AuditCommand, AuditLsArgs, BreakerCommand, BreakerSetArgs, CancelArgs,
    ConcurrencyCommand, ConcurrencySetArgs, DlqBulkArgs, DlqCommand, DlqLsArgs, EnqueueArgs,
    IdsArgs, ListFilter, Missed, RatelimitClearArgs, RatelimitCommand, RatelimitSetArgs,
    ScheduleAddArgs, ScheduleNameArgs, SchedulesCommand, ScopeArgs, ShardsCommand,
    ShardsCreateArgs, ShardsLsArgs, ShedCommand, ShedSetArgs, ShowArgs, TasksCommand, TasksLsArgs,
    TypeArgs, WaitArgs,
};
pub use demo::{
    DEFAULT_DEMO_AGENTS, DEFAULT_HEADLESS_DURATION, DemoArgs, MAX_DEMO_AGENTS, MAX_DEMO_DURATION,
};
pub use locks::{LockAcquireArgs, LockReleaseArgs, LockRenewArgs, LocksCommand};
pub use policy::{PolicyCommand, PolicyField, PolicySetArgs, PolicyShowArgs};

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

/// `--agent` when neither the flag nor `LEASEHOLD_AGENT` is given.
pub const DEFAULT_AGENT: &str = "127.0.0.1:7070";
/// `--call-timeout` when not given.
pub const DEFAULT_CALL_TIMEOUT: &str = "10s";
/// `tasks ls --limit` when not given.
pub const DEFAULT_LIST_LIMIT: u32 = 50;
/// `wait --interval` when not given.
pub const DEFAULT_WAIT_INTERVAL: &str = "250ms";

const AFTER_HELP: &str = "\
Output: --output table (default) prints lines and tables that fit 80 columns, with control
and escape characters in untrusted text shown as escapes (\\u{1b}); --output json prints one
JSON object per line. Errors are one line on stderr, `leasehold: <what failed>: <why> (<code>)`,
with nothing on stdout.

Exit codes:
  0  ok
  1  a task failed; a wait ended with failures or timed out; a lock someone else holds
     (locks acquire, after any --wait) or that is no longer yours (locks renew, release)
  2  usage or bad input: bad flags, invalid argument, not found, already exists, failed
     precondition, out of range, resource exhausted; a local file that cannot be read
  3  cannot reach the agent or its database: connection or TLS failure, unavailable, deadline
     exceeded, an internal or unknown error, or an answer outside the contract
     (\"the agent sent ...\")
  4  permission denied: unauthenticated (missing or unknown token), permission denied (a
     viewer token calling an action)
When one command makes several calls (cancel 1 2 3), it exits with the highest code.

Environment: LEASEHOLD_AGENT, LEASEHOLD_TOKEN, LEASEHOLD_CA, LEASEHOLD_CERT, LEASEHOLD_KEY
stand in for the flags of the same name; a flag wins over its variable.";

/// The global flags `leasehold demo` keeps: the others say how to reach an agent, and the
/// demo starts its own.
const DEMO_GLOBALS: &[&str] = &["output", "call_timeout"];

/// The ids of the global connection flags, which `leasehold demo` neither lists nor accepts.
fn demo_refused(cmd: &clap::Command) -> Vec<clap::Arg> {
    cmd.get_arguments()
        .filter(|a| a.is_global_set() && !DEMO_GLOBALS.contains(&a.get_id().as_str()))
        .cloned()
        .collect()
}

impl Cli {
    /// The command line's definition: [`Cli`]'s, with the connection flags hidden from
    /// `leasehold demo --help` (clap lists a global flag under every command, so the demo gets
    /// hidden copies of them, which clap then does not add again).
    pub fn command_line() -> clap::Command {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let hidden = demo_refused(&cmd);
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        // `mut_subcommand` moves the command it changes to the end of the list, which is the
        // order `leasehold --help` lists them in: every one is taken out and put back in turn.
        names.iter().fold(cmd, |cmd, name| {
            cmd.mut_subcommand(name, |sub| {
                if name == "demo" {
                    hidden
                        .iter()
                        .fold(sub, |demo, arg| demo.arg(arg.clone().hide(true)))
                } else {
                    sub
                }
            })
        })
    }

    /// Parses `args` (the program name first) like `Cli::try_parse_from`, and refuses a
    /// connection flag given with `leasehold demo` (exit 2) rather than ignore it. The same
    /// flag's environment variable (LEASEHOLD_AGENT …) is not refused: it is there for the
    /// other commands.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::FromArgMatches;
        use clap::parser::ValueSource;
        let mut cmd = Cli::command_line();
        let matches = cmd.try_get_matches_from_mut(args)?;
        if let Some(("demo", sub)) = matches.subcommand() {
            let given = demo_refused(&cmd).into_iter().find(|a| {
                let id = a.get_id().as_str();
                [&matches, sub]
                    .iter()
                    .any(|m| m.value_source(id) == Some(ValueSource::CommandLine))
            });
            if let Some(arg) = given {
                let flag = arg.get_long().unwrap_or(arg.get_id().as_str());
                let message = format!(
                    "--{flag} does not apply to `leasehold demo`: the demo starts its own \
agents and its console talks to them; leave it out"
                );
                let mut demo = cmd
                    .find_subcommand_mut("demo")
                    .map(|demo| demo.clone())
                    .unwrap_or_else(|| cmd.clone());
                return Err(demo.error(clap::error::ErrorKind::ArgumentConflict, message));
            }
        }
        Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
    }
}

/// `leasehold`: the console and the headless commands of Leasehold.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Leasehold console: live leases, slow tasks, renewal failures and dead letters",
    long_about = "Leasehold console: live leases, slow tasks, renewal failures and dead \
letters.\n\nWithout a command, `leasehold` starts the interactive console: it connects to --agent, \
finds every other agent through the registry, merges their live lease streams and acts on \
them (`?` inside lists the keys). The commands below are the headless, scriptable client: each talks to the agent \
named by --agent over gRPC.",
    after_long_help = AFTER_HELP,
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub console: ConsoleArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Flags of the interactive console (no command).
#[derive(Debug, Clone, Default, Args)]
pub struct ConsoleArgs {
    /// No colours (also when NO_COLOR is set): emphasis by bold, reverse and underline only.
    #[arg(long)]
    pub no_color: bool,

    /// ASCII only: no Unicode gauges, sparklines, borders or symbols.
    #[arg(long)]
    pub ascii: bool,

    /// Never send an action, whatever the token allows.
    #[arg(long)]
    pub read_only: bool,

    /// Where the console logs (default: $XDG_STATE_HOME/leasehold/console.log, else
    /// ~/.local/state/leasehold/console.log). Nothing is ever logged to the screen.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<std::path::PathBuf>,
}

/// Connection and output flags, accepted before or after the command.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Agent to talk to: HOST:PORT (plaintext unless a TLS flag is given), http://HOST:PORT or
    /// https://HOST:PORT.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_AGENT",
        default_value = DEFAULT_AGENT,
        value_name = "ADDR"
    )]
    pub agent: String,

    /// Token sent with every call as `authorization: Bearer TOKEN`. Viewer tokens may watch
    /// and list; actions need an operator token.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,

    /// Read the token from this file (its content, trimmed). A file readable by group or
    /// others is warned about.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_TOKEN_FILE",
        hide_env_values = true,
        conflicts_with = "token",
        value_name = "FILE"
    )]
    pub token_file: Option<PathBuf>,

    /// Talk to the agent over this Unix socket only (fails if it cannot be reached). Without
    /// it, a loopback --agent without TLS prefers the agent's local socket when there is one.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_SOCKET",
        conflicts_with = "no_socket",
        value_name = "PATH"
    )]
    pub socket: Option<PathBuf>,

    /// Never use the agent's local Unix socket: always TCP.
    #[arg(long, global = true)]
    pub no_socket: bool,

    /// Allow sending a token in plaintext to a host that is not loopback (and following
    /// registry addresses that are not loopback with it).
    #[arg(long, global = true)]
    pub insecure: bool,

    /// Say on stderr how the agent was reached (Unix socket or TCP).
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,

    /// Output format: `table` for people, `json` for scripts (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = Format::Table, value_name = "FORMAT")]
    pub output: Format,

    /// PEM file of the CA that signed the agent's certificate. Implies TLS.
    #[arg(long, global = true, env = "LEASEHOLD_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// PEM certificate presented to the agent (mutual TLS); needs --key. Implies TLS.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_CERT",
        requires = "key",
        value_name = "FILE"
    )]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert. Implies TLS.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_KEY",
        hide_env_values = true,
        requires = "cert",
        value_name = "FILE"
    )]
    pub key: Option<PathBuf>,

    /// Use TLS. This build carries no system root certificates, so TLS needs --ca.
    #[arg(long, global = true)]
    pub tls: bool,

    /// Name checked in the agent's certificate (default: the host of --agent).
    #[arg(long, global = true, value_name = "NAME")]
    pub tls_server_name: Option<String>,

    /// Time allowed to connect and for each call (`watch`: until the stream starts).
    /// Named --call-timeout because `enqueue --timeout` and `wait --timeout` mean other things.
    #[arg(
        long,
        global = true,
        default_value = DEFAULT_CALL_TIMEOUT,
        value_parser = values::positive_duration,
        value_name = "DURATION"
    )]
    pub call_timeout: Duration,
}

/// The headless commands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Run a live demo: agents in this process, a mixed workload, and the console on them
    ///
    /// Creates a fresh SQLite file ./leasehold-demo.sqlite (or uses --database-url), applies
    /// the migrations, starts --agents agents in this process (gRPC on free 127.0.0.1 ports)
    /// and feeds them without end: quick successes (noop, sleep), long tasks reporting
    /// progress (demo.long, some ending partially succeeded), flaky tasks that fail and
    /// retry (demo.flaky, backoff 1 s doubling to 5 s, 4 attempts), poison tasks that go
    /// straight to the dead-letter queue (fail, and a payload that does not fit), a task that
    /// hangs past its 4 s timeout (sleep, once a minute), a program run by exec, and a burst
    /// of 40 every 15 s. Then it opens the console on the first agent; quitting the console
    /// (q) drains the agents and prints where the database is and how to reopen it. The
    /// console flags (--no-color, --ascii, --read-only, --log-file), --output and
    /// --call-timeout apply; the connection flags (agent, token, socket, TLS) do not: the
    /// console talks to the demo's own agents, so the demo refuses them (exit 2).
    ///
    /// The file: an existing ./leasehold-demo.sqlite is replaced only when an earlier
    /// `leasehold demo` made it (SQLite application_id 0x4C48444D, "LHDM"); any other file of
    /// that name is left alone and the demo exits 2. The agents' and the console's logs go to
    /// ./leasehold-demo.log (with --database-url sqlite://DIR/NAME.EXT: DIR/NAME.log; with
    /// PostgreSQL: the console's log file), or to --log-file; never to the terminal.
    ///
    /// --headless runs for --duration (default 20s) without a terminal, then stops feeding,
    /// drains the agents and prints one JSON line (whatever --output says), counted from the
    /// database after the agents stopped:
    ///   {"database":"/abs/leasehold-demo.sqlite","database_url":"sqlite:///abs/...",
    ///    "log":"/abs/leasehold-demo.log","duration_s":20.0,"enqueued":412,"finished":395,
    ///    "processed_per_s":19.7,"tasks":{"queued":3,"running":0,"retry_wait":2,
    ///    "cancel_requested":0,"succeeded":351,"partially_succeeded":6,"cancelled":0,
    ///    "dead":38},"by_type":{"noop":{"succeeded":120},...},"dead_by_code":{"poison":4,
    ///    "bad_payload":3,"timeout":1,...},"fired_by_schedules":2,"agents":[{"id":"demo-1#1",
    ///    "address":"127.0.0.1:40123","claimed":140,"succeeded":120,...}]}
    /// "finished" counts tasks in a terminal state (succeeded, partially_succeeded, cancelled,
    /// dead); "processed_per_s" is finished / duration_s; "fired_by_schedules" counts the
    /// tasks the demo's cron schedules (view 7, only in the demo's own file) enqueued. Tasks still running at the end are
    /// released by their agent and count as queued. SIGINT or SIGTERM ends the run early (a
    /// second one forces the agents to stop) and the summary is still printed.
    /// Exit codes: 0 ok; 2 bad flags, a file that is not a demo database, no terminal
    /// without --headless; 3 the database cannot be opened.
    #[command(verbatim_doc_comment)]
    Demo(DemoArgs),

    /// Enqueue one task
    ///
    /// Output (table): `enqueued task 42 (type noop, priority 0)` (with --concurrency-key:
    /// `enqueued task 42 (type noop, priority 0, concurrency key acme)`; with --unique-for,
    /// when a finished task gave the key up: `…, idempotency key "K" released by task 41)`),
    /// or, when the idempotency key matched an existing task:
    ///   skip      `task 42 already exists (idempotency key K)`
    ///   replace   `task 42 replaced (idempotency key "K")`
    ///   debounce  `task 42 debounced to 2026-12-08T10:00:30.000Z (in 30s; idempotency key "K")`
    ///   not waiting (replace, debounce)  `task 42 exists (running; idempotency key "K")`
    /// Output (json): the task as stored (the object `tasks show` prints under "task") plus
    /// "created" (false when the key matched an existing task), "outcome" (created,
    /// existing, replaced, debounced), "existing_status" (the status the key's task had when
    /// found, else null) and "released_from" (the task that gave the key up, else null).
    /// Exit codes: 0 whatever the outcome (a conflict that changed nothing is no failure);
    /// 2 bad input (--on-conflict or --unique-for without --idempotency-key, an unknown mode,
    /// --unique-for outside 1ms..=365d) with no call made; 3 and 4 as every command.
    #[command(verbatim_doc_comment)]
    Enqueue(EnqueueArgs),

    /// List and inspect tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),

    /// Cancel tasks: waiting ones at once, running ones through their holder
    ///
    /// By default each call waits for a running task to stop and reports its final status.
    /// Output (table), one line per task:
    ///   task 7: cancelled
    ///   task 8: cancel requested (status cancel_requested), holder web-1#3 will stop it
    ///   task 9: cancel already requested (status cancel_requested)
    ///   task 10: finished first: succeeded
    /// Output (json), one object per line: {"id":7,"outcome":"cancelled","status":"cancelled",
    /// "holder":null}. A task that finished before the cancel reached it is not an error.
    /// Errors (a finished task: failed precondition) go to stderr and the other ids still run;
    /// the exit code is the highest of all.
    #[command(verbatim_doc_comment)]
    Cancel(CancelArgs),

    /// Move finished tasks (dead, cancelled, succeeded, partially_succeeded) back to queued
    ///
    /// Output (table), one line per task: `task 7: requeued (was dead)`.
    /// Output (json), one object per line: {"id":7,"previous":"dead"}.
    /// Errors (a running task: failed precondition; an unknown id: not found; both exit 2; a
    /// viewer token: permission denied, exit 4) go to stderr and the other ids still run; the
    /// exit code is the highest of all.
    #[command(verbatim_doc_comment)]
    Requeue(IdsArgs),

    /// Make waiting tasks (not yet due, or waiting to retry) due now
    ///
    /// The next claim takes each in its turn (priority, limits, pauses and breakers still apply).
    /// Output (table), one line per task: `task 7: due now (queued)`, or
    /// `task 7: already due (queued)` when there was nothing to do.
    /// Output (json), one object per line: {"id":7,"status":"queued","moved":true}.
    /// Errors (a running or finished task: failed precondition; an unknown id: not found; both
    /// exit 2; a viewer token: permission denied, exit 4) go to stderr and the other ids still
    /// run; the exit code is the highest of all.
    #[command(verbatim_doc_comment)]
    RunNow(IdsArgs),

    /// Delete tasks no agent holds (any status but running), with their attempts
    ///
    /// Audited (action `delete`, naming each task's status and type). A running task is
    /// refused: cancel it first.
    /// Output (table), one line per task: `task 7: deleted (was dead)`.
    /// Output (json), one object per line: {"id":7,"previous":"dead"}.
    /// Errors (a running task: failed precondition; an unknown id: not found; both exit 2; a
    /// viewer token: permission denied, exit 4) go to stderr and the other ids still run; the
    /// exit code is the highest of all.
    #[command(verbatim_doc_comment)]
    Delete(IdsArgs),

    /// The dead-letter queue: list and requeue dead tasks.
    #[command(subcommand)]
    Dlq(DlqCommand),

    /// Task types: waiting, running against their limit, per-key limit, rate, dead, shed,
    /// circuit breaker, paused
    ///
    /// One row per type with waiting, running or dead tasks, a finish in the last minute or a
    /// policy, by name (counts at most 1 s old, from the database).
    /// Output (table), then the global limit, and the global rate limit when there is one:
    ///   TYPE     QUEUED  LATER  RETRY  OLDEST  RUNNING      RATE  DEAD  DONE/M  STATE
    ///   email.…      12      0      3   3m12s      5/5  12/50/1s     1      40  at limit
    ///   noop          0      0      0       -      0/-         -     0       0  active
    ///   PER-KEY left out to fit 80 columns; `leasehold types --output json` has it
    ///   global: unlimited
    ///   global rate limit: 1000/1m, 812 used
    /// LATER is queued but not yet due; OLDEST (only when some type has a waiting task) is how
    /// long the type's oldest waiting task (queued or retry_wait, due) has been due (`-`: none
    /// waits); PER-KEY (only when some type has a per-key limit) is
    /// the running tasks allowed per concurrency key (`-`: none); RATE (only when some type has
    /// a rate limit) is the
    /// starts in the type's rate window ending now over its rate limit as `ratelimit set`
    /// takes it (12 of 50/1s; `-`: none); DONE/M succeeded in the last minute; SHED/M (only
    /// when some type sheds or shed in the last minute) is the tasks shed in the last minute
    /// and, for a type that sheds, `>` its shed-after duration as `shed set` takes it (`-`:
    /// does not shed, none shed); BREAKER (only when some type has a circuit breaker) is
    /// closed, half-open, or open with the time left until it half-opens (`open 12s`; `open`
    /// once that passed; `-`: none); STATE is paused, at limit, rate limited (its rate window
    /// is full) or active, by the type's own policy (a global pause, limit or rate is on the
    /// last lines; `· rate limited` ends the global rate line when its window is full). The
    /// name gives way first on 80 columns, then the state; if the optional columns still do
    /// not fit whole, PER-KEY is left out, then RATE, then SHED/M, then BREAKER, then OLDEST,
    /// and a line says so (`ratelimit ls`, `breaker ls` and JSON have them); counts are not cut.
    /// Output (json): {"types":[{"task_type":"email.send","queued":12,"scheduled":0,
    /// "retrying":3,"running":5,"dead":1,"finished_last_minute":40,"dead_last_minute":0,
    /// "limit":5,"per_key_limit":2,"paused":false,"rate":{"starts":50,"period_ms":1000,
    /// "used":12},"shed_after_ms":30000,"shed_last_minute":4,"state":"at_limit",
    /// "breaker":{"state":"open","failures":5,"within_ms":60000,"cooldown_ms":30000,
    /// "since":"2026-12-06T11:59:48.000Z","until":"2026-12-06T12:00:18.000Z"},
    /// "oldest_waiting_ms":192000}],
    /// "global_limit":null,"global_paused":false,"global_rate":{"starts":1000,
    /// "period_ms":60000,"used":812},"truncated":false,"now":"2026-12-06T12:00:00.000Z"}
    /// (limits are null when unlimited, per_key_limit null when the type has none, rates null
    /// when none, shed_after_ms null when the type does not shed; state is paused, at_limit,
    /// rate_limited or active; breaker null when the type has none, else its state (closed,
    /// open, half_open), its setting (failures: how many failures within within_ms open it),
    /// since (when it was set or last moved) and until (when an open one half-opens, else
    /// null); oldest_waiting_ms null when none waits; truncated: more than the 1,000 types
    /// listed).
    #[command(verbatim_doc_comment)]
    Types,

    /// The whole queue at a glance: waiting, running, dead, the oldest waiting task's age, and
    /// per window (1m, 15m, 1h) succeeded, dead-lettered, cancelled, failed attempts,
    /// throughput and failure rate
    ///
    /// Every number is the database's (its clock, its indexes), at most 1 s old.
    /// Output (table):
    ///   queued 12 · later 4 · retrying 2 · running 3 · dead 7
    ///   oldest waiting: due for 1m35s
    ///   WINDOW  SUCCEEDED  DEAD  CANCELLED  FAILED  PER SEC  FAIL RATE
    ///   1m             60     1          0       2     1.00       3.2%
    ///   15m           900     3          1      20     1.00       2.2%
    ///   1h           3600     7          2      41     1.00       1.1%
    /// queued is due now, later not yet due; oldest waiting is how long the oldest task a
    /// claim could take now (queued or retry_wait, due) has been due (`none waiting`);
    /// SUCCEEDED counts partially succeeded too; FAILED is every attempt that ended in
    /// failure, retried or not; PER SEC is SUCCEEDED per second of the window; FAIL RATE is
    /// FAILED / (FAILED + SUCCEEDED), `-` when both are 0.
    /// Output (json): {"queued":12,"scheduled":4,"retrying":2,"running":3,"dead":7,
    /// "oldest_waiting_ms":95000,"windows":[{"window":"1m","window_ms":60000,
    /// "succeeded":60,"dead_lettered":1,"cancelled":0,"failed_attempts":2,
    /// "throughput_per_sec":1.0,"failure_rate":0.03225806451612903},{"window":"15m",...},
    /// {"window":"1h",...}],"now":"2026-12-06T12:00:00.000Z"}
    /// (oldest_waiting_ms null when none waits, failure_rate null when a window has neither
    /// a success nor a failed attempt).
    #[command(verbatim_doc_comment)]
    Stats,

    /// Change concurrency limits: global, per type, per concurrency key of a type, local.
    #[command(subcommand)]
    Concurrency(ConcurrencyCommand),

    /// Rate limits: at most N task starts per period, global or per type, across every agent.
    #[command(subcommand)]
    Ratelimit(RatelimitCommand),

    /// Load shedding: cancel a type's waiting tasks that are overdue by more than a duration.
    #[command(subcommand)]
    Shed(ShedCommand),

    /// Circuit breakers: stop claiming a type for a cooldown after N failures within a window.
    #[command(subcommand)]
    Breaker(BreakerCommand),

    /// Per-type policy: max attempts, backoff, timeout, slow threshold, max snoozes.
    #[command(subcommand)]
    Policy(PolicyCommand),

    /// Stop claiming tasks of a type on every agent; running ones finish
    ///
    /// Output (table): `paused type noop`, or `type noop was already paused (nothing changed)`.
    /// Output (json): {"task_type":"noop","paused":true,"changed":true}.
    #[command(verbatim_doc_comment)]
    Pause(TypeArgs),

    /// Resume claiming tasks of a paused type
    ///
    /// Output (table): `resumed type noop`, or `type noop was not paused (nothing changed)`.
    /// Output (json): {"task_type":"noop","paused":false,"changed":true}.
    #[command(verbatim_doc_comment)]
    Resume(TypeArgs),

    /// The agent registry.
    #[command(subcommand)]
    Agents(AgentsCommand),

    /// Cron schedules: list, add, remove, enable, disable, trigger.
    #[command(subcommand)]
    Schedules(SchedulesCommand),

    /// Named locks: list them, take, renew and give one back (for scripts), force one free.
    #[command(subcommand)]
    Locks(LocksCommand),

    /// Shard groups: create one, list the groups or one group's shards and members.
    #[command(subcommand)]
    Shards(ShardsCommand),

    /// The audit log of operator actions and refused calls (operator token needed).
    #[command(subcommand)]
    Audit(AuditCommand),

    /// Drain the agent named by --agent: stop claiming, finish or release its leases, exit
    ///
    /// The agent does what it does on SIGTERM.
    /// Output (table): `agent at ADDR is draining (3 leases held)`.
    /// Output (json): {"agent":"ADDR","held":3}.
    #[command(verbatim_doc_comment)]
    Drain,

    /// Follow the live lease state of the agent named by --agent
    ///
    /// Runs until interrupted (SIGINT or SIGTERM: exit 0), until the agent closes the stream
    /// (exit 0), or until the stream fails (exit 3, or 4 for a refused token; an agent that
    /// drops a watcher too slow to keep up ends it with resource exhausted: exit 2).
    ///
    /// Output (json): one line per event. Every line repeats the update it came from (seq:
    /// 0 for the snapshot then +1 per update; now_ms: database time in ms; agent_id;
    /// dropped_events: events the agent could not record) and names its event in "kind",
    /// with the event's fields under a key of the same name:
    ///   {"seq":0,"now_ms":1764588000000,"agent_id":"web-1#7","dropped_events":0,
    ///    "kind":"snapshot","snapshot":{"leases":[LEASE...],"stats":STATS,
    ///    "resources":[RESOURCE...]}}
    ///   {"seq":1,...,"kind":"lease_acquired","lease_acquired":LEASE}
    ///   {"seq":2,...,"kind":"lease_renewed","lease_renewed":{"task_id":42,"epoch":3,
    ///    "lease_until":"...Z","heartbeat_at":"...Z"}}
    /// Kinds: snapshot, lease_acquired, lease_renewed, renewal_failed {task_id, epoch, reason,
    /// consecutive}, lease_released {task_id, epoch, outcome}, lease_fenced {task_id, epoch,
    /// write}, progress {task_id, epoch, progress}, slow {task_id, epoch, running_ms}, stats,
    /// cancel_requested {task_id, epoch}, resource_change {resource: RESOURCE, held (true:
    /// taken, false: lost or released), reason (acquired, released, revoked, unprovable), at,
    /// at_ms (the agent's wall clock)}, closing (true: the agent is shutting down).
    /// LEASE: {task_id, task_type, epoch, owner, attempt, priority, started_at, lease_until,
    /// heartbeat_at, timeout_ms, progress {total, processed, succeeded, failed, skipped} or
    /// null, slow, cancel_requested, renewal_failures, renewal_failure_reason}.
    /// STATS: {state, leader, active, local_limit, held, claimed, succeeded, failed, retried,
    /// dead, cancelled, released, lease_lost, fenced_writes, renewal_failures}.
    /// RESOURCE: a lock or a shard this agent holds, {name (`<group>#<shard>` for a shard),
    /// group, shard (both null for a lock), token}.
    /// Times are RFC 3339 UTC strings, or null when none.
    ///
    /// Output (table): one short line per event, `HH:MM:SS.mmm #SEQ KIND details` (UTC).
    #[command(verbatim_doc_comment)]
    Watch,

    /// Wait until tasks finish (succeeded, partially_succeeded, cancelled or dead)
    ///
    /// Polls each task every --interval. Exit 0 when every task succeeded; 1 when any ended
    /// otherwise (partially_succeeded, cancelled, dead) or when --timeout passed first (stderr
    /// then names the tasks not finished); 2 for an unknown task; 3 when the agent cannot be
    /// reached.
    /// Output (table), one line per task: `task 42: succeeded`, `task 43: dead
    /// (smtp_timeout: connection timed out)`, `task 44: not finished: running`.
    /// Output (json), one object per line: {"id":42,"status":"succeeded","finished":true,
    /// "last_error":null}.
    #[command(verbatim_doc_comment)]
    Wait(WaitArgs),
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
