//! The arguments of each headless command (clap derive). Their doc comments are the `--help`
//! text of each flag; the command's own help, with its output formats, is on [`super::Command`]
//! and the nested command enums here.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use leasehold_shared::TaskStatus;
use leasehold_shared::domain::validate::{MAX_ATTEMPTS_LIMIT, MAX_PAGE_SIZE};

use super::values::{self, Limit, TimeOrDuration};
use super::{DEFAULT_LIST_LIMIT, DEFAULT_WAIT_INTERVAL};

/// `leasehold enqueue`.
#[derive(Debug, Clone, Args)]
pub struct EnqueueArgs {
    /// Task type: 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit.
    #[arg(value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: String,

    /// Payload as JSON text (default `{}`).
    #[arg(long, value_name = "JSON", conflicts_with = "payload_file")]
    pub payload: Option<String>,

    /// Read the payload from a file; `-` reads stdin.
    #[arg(long, value_name = "PATH")]
    pub payload_file: Option<PathBuf>,

    /// Priority, -32768..=32767; higher runs first.
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub priority: i16,

    /// Run no sooner than this long from now.
    #[arg(long, value_name = "DURATION", value_parser = values::duration, conflicts_with = "run_at")]
    pub delay: Option<Duration>,

    /// Run no sooner than this time (RFC 3339; sent as a delay from this host's clock).
    #[arg(long, value_name = "RFC3339", value_parser = values::rfc3339)]
    pub run_at: Option<DateTime<Utc>>,

    /// Dead-letter the task if it has not run by then: an RFC 3339 time, or a duration from
    /// now.
    #[arg(long, value_name = "WHEN", value_parser = values::time_or_duration)]
    pub deadline: Option<TimeOrDuration>,

    /// Longest run of one attempt (default: the type's).
    #[arg(long, value_name = "DURATION", value_parser = values::positive_duration)]
    pub timeout: Option<Duration>,

    /// Most attempts (default: the type's).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(i32).range(1..=i64::from(MAX_ATTEMPTS_LIMIT))
    )]
    pub max_attempts: Option<i32>,

    /// Idempotency key: enqueueing the same key again returns the existing task.
    #[arg(long, value_name = "KEY", value_parser = values::idempotency_key)]
    pub idempotency_key: Option<String>,
}

/// `leasehold tasks …`.
#[derive(Debug, Clone, Subcommand)]
pub enum TasksCommand {
    /// List tasks, newest first, one page at a time
    ///
    /// Output (table): ID, TYPE, STATUS, ATTEMPT (attempt/max), PRI, UPDATED (age), ERROR
    /// (last error code: message), then, when there is another page, a line
    /// `next page: --before N`.
    /// Output (json): {"tasks":[TASK...],"next_before_id":N or null,"now":"...Z"}, TASK as in
    /// `tasks show`.
    #[command(verbatim_doc_comment)]
    Ls(TasksLsArgs),

    /// Show one task: fields, payload, progress, last error, attempts, why it is not running
    ///
    /// Output (table): one `field  value` line per field, the payload as indented JSON
    /// (long lines cut, at most 40 lines), the attempts as a table, then "Why not running:"
    /// with one reason per line.
    /// Output (json): {"task":TASK,"attempts":[{"attempt","epoch","agent","started_at",
    /// "finished_at","outcome","error"}...],"why_not_running":"..." or null,
    /// "blockers":[{"kind","message"}...],"now":"...Z"}. TASK is {"id","task_type","status",
    /// "payload","priority","attempt","max_attempts","lease_owner","lease_epoch",
    /// "available_at","created_at","started_at","finished_at","deadline_at","lease_until",
    /// "heartbeat_at","updated_at","timeout_ms","last_error":{"code","message","retryable"},
    /// "result","progress","idempotency_key"}; times are RFC 3339 UTC strings, and a time,
    /// key, owner, error, result or progress that is not set is null.
    #[command(verbatim_doc_comment)]
    Show(ShowArgs),
}

/// `leasehold tasks ls`.
#[derive(Debug, Clone, Args)]
pub struct TasksLsArgs {
    /// Only these statuses (comma-separated): queued, running, retry_wait, cancel_requested,
    /// succeeded, partially_succeeded, cancelled, dead.
    #[arg(long, value_name = "STATUS", value_delimiter = ',')]
    pub status: Vec<TaskStatus>,

    #[command(flatten)]
    pub filter: ListFilter,

    /// Only tasks whose type, error code or error message contain this text.
    #[arg(long, value_name = "TEXT", value_parser = values::text_filter)]
    pub text: Option<String>,
}

/// Filters and paging shared by `tasks ls` and `dlq ls`.
#[derive(Debug, Clone, Args)]
pub struct ListFilter {
    /// Only this task type.
    #[arg(long = "type", value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: Option<String>,

    /// Only tasks whose last error has this code.
    #[arg(long, value_name = "CODE")]
    pub code: Option<String>,

    /// Only tasks finished (or, unfinished, updated) since then: an RFC 3339 time, or a
    /// duration back from now.
    #[arg(long, value_name = "WHEN", value_parser = values::time_or_duration)]
    pub since: Option<TimeOrDuration>,

    /// Page size.
    #[arg(
        long,
        default_value_t = DEFAULT_LIST_LIMIT,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PAGE_SIZE))
    )]
    pub limit: u32,

    /// Only ids below this one: the next page after a `next page: --before N` hint.
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub before: Option<i64>,
}

/// A single task id.
#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// Task id.
    #[arg(value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub id: i64,
}

/// One or more task ids.
#[derive(Debug, Clone, Args)]
pub struct IdsArgs {
    /// Task ids.
    #[arg(value_name = "ID", required = true, num_args = 1.., value_parser = clap::value_parser!(i64).range(1..))]
    pub ids: Vec<i64>,
}

/// `leasehold cancel`.
#[derive(Debug, Clone, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    pub ids: IdsArgs,

    /// Do not wait for running tasks to stop; report `cancel requested` at once.
    #[arg(long)]
    pub no_wait: bool,

    /// How long the agent waits for a running task to stop (default: two heartbeats plus the
    /// handler's stop grace, decided by the agent). The call may take this long on top of
    /// --call-timeout (60s on top when not given).
    #[arg(long, value_name = "DURATION", value_parser = values::positive_duration, conflicts_with = "no_wait")]
    pub wait_timeout: Option<Duration>,
}

/// `leasehold dlq …`.
#[derive(Debug, Clone, Subcommand)]
pub enum DlqCommand {
    /// List dead tasks, newest first
    ///
    /// Output (table): ID, TYPE, CODE, MESSAGE (cut), ATTEMPTS, DIED (age), then, when there is
    /// another page, `next page: --before N`.
    /// Output (json): as `tasks ls --status dead`.
    #[command(verbatim_doc_comment)]
    Ls(DlqLsArgs),

    /// Requeue every dead task matching a filter, in one transaction
    ///
    /// Refuses (exit 2) when no filter and no --all is given.
    /// Output (table): `requeued 3 dead tasks`, or with --dry-run `would requeue 3 dead tasks
    /// (dry run)` ("1 dead task" when there is one).
    /// Output (json): {"count":3,"dry_run":false}.
    #[command(verbatim_doc_comment)]
    Requeue(DlqRequeueArgs),
}

/// `leasehold dlq ls`.
#[derive(Debug, Clone, Args)]
pub struct DlqLsArgs {
    #[command(flatten)]
    pub filter: ListFilter,
}

/// `leasehold dlq requeue`.
#[derive(Debug, Clone, Args)]
pub struct DlqRequeueArgs {
    /// Only this task type.
    #[arg(long = "type", value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: Option<String>,

    /// Only tasks whose last error has this code.
    #[arg(long, value_name = "CODE")]
    pub code: Option<String>,

    /// Only tasks that died at or after then: an RFC 3339 time, or a duration back from now.
    #[arg(long, value_name = "WHEN", value_parser = values::time_or_duration)]
    pub since: Option<TimeOrDuration>,

    /// Only tasks that died before then: an RFC 3339 time, or a duration back from now.
    #[arg(long, value_name = "WHEN", value_parser = values::time_or_duration)]
    pub until: Option<TimeOrDuration>,

    /// Requeue every dead task (needed when no filter is given).
    #[arg(long, conflicts_with_all = ["task_type", "code", "since", "until"])]
    pub all: bool,

    /// Only count what would be requeued.
    #[arg(long)]
    pub dry_run: bool,
}

/// `leasehold concurrency …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ConcurrencyCommand {
    /// Set a concurrency limit: global, per type, or local to the agent named by --agent
    ///
    /// Global and type limits hold for every agent from its next claim; the local one is
    /// applied by the agent at once.
    /// Output (table): `global limit: unlimited → 10`, `type noop limit: 3 → 5`,
    /// `local limit: 100 → 50`.
    /// Output (json): {"scope":"global"|"type"|"local","task_type":"noop" or null,
    /// "previous":N or null,"limit":N or null}; null means unlimited.
    #[command(verbatim_doc_comment)]
    Set(ConcurrencySetArgs),
}

/// `leasehold concurrency set`.
#[derive(Debug, Clone, Args)]
pub struct ConcurrencySetArgs {
    /// New limit: 0..=100000 (0 stops claiming; not for --local), or `unlimited` (not for
    /// --local).
    #[arg(value_name = "LIMIT", value_parser = values::limit)]
    pub limit: Limit,

    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// Which limit `concurrency set` changes.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct ScopeArgs {
    /// The global limit over all agents.
    #[arg(long)]
    pub global: bool,

    /// The limit of one task type over all agents.
    #[arg(long = "type", value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: Option<String>,

    /// The local limit of the agent named by --agent.
    #[arg(long)]
    pub local: bool,
}

/// A task type argument.
#[derive(Debug, Clone, Args)]
pub struct TypeArgs {
    /// Task type.
    #[arg(value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: String,
}

/// `leasehold agents …`.
#[derive(Debug, Clone, Subcommand)]
pub enum AgentsCommand {
    /// List every agent of the registry, as the agent named by --agent sees it
    ///
    /// Output (table): L (`*` for the maintenance leader), ID, STATE, ACTIVE (active/local
    /// limit), HEARTBEAT (age, database clock), VERSION, ADDRESS; then `answered by ID`.
    /// Output (json): {"agents":[{"id","name","host","pid","state","leader","active",
    /// "local_concurrency","version","grpc_address","task_types","started_at",
    /// "heartbeat_at","heartbeat_age_ms","stopped_at"}...],"answered_by":"...","now":"...Z"}.
    #[command(verbatim_doc_comment)]
    Ls,
}

/// `leasehold wait`.
#[derive(Debug, Clone, Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pub ids: IdsArgs,

    /// Give up after this long (exit 1, naming the tasks not finished). Default: wait forever.
    #[arg(long, value_name = "DURATION", value_parser = values::positive_duration)]
    pub timeout: Option<Duration>,

    /// Time between two polls of a task.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = DEFAULT_WAIT_INTERVAL,
        value_parser = values::positive_duration
    )]
    pub interval: Duration,
}
