//! The arguments of each headless command (clap derive). Their doc comments are the `--help`
//! text of each flag; the command's own help, with its output formats, is on [`super::Command`]
//! and the nested command enums here.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use leasehold_proto::wire::WireEnum;
use leasehold_shared::TaskStatus;
use leasehold_shared::domain::policy::MAX_BREAKER_FAILURES;
use leasehold_shared::domain::schedule::MAX_CATCH_UP;
use leasehold_shared::domain::validate::{MAX_ATTEMPTS_LIMIT, MAX_PAGE_SIZE};
use leasehold_shared::domain::{AuditResult, OnConflict, RateLimit};

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

    /// Most attempts, the first included (default: 25; no per-type setting exists).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(i32).range(1..=i64::from(MAX_ATTEMPTS_LIMIT))
    )]
    pub max_attempts: Option<i32>,

    /// Idempotency key: enqueueing the same key again returns the existing task (see
    /// --on-conflict and --unique-for).
    #[arg(long, value_name = "KEY", value_parser = values::idempotency_key)]
    pub idempotency_key: Option<String>,

    /// When the idempotency key is held by a task: `skip` returns it unchanged (the default);
    /// `replace` gives a waiting one this enqueue's payload, priority, delay, deadline,
    /// timeout, attempts and concurrency key; `debounce` moves a waiting one's start to now +
    /// --delay and gives it this payload. A running or finished task is never changed.
    #[arg(
        long,
        value_name = "MODE",
        value_parser = values::on_conflict,
        requires = "idempotency_key"
    )]
    pub on_conflict: Option<OnConflict>,

    /// The key blocks new tasks only while its task is unfinished or finished less than this
    /// long ago; after that a new task is created with the key (1ms to 365d, whole ms).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = values::unique_for,
        requires = "idempotency_key"
    )]
    pub unique_for: Option<Duration>,

    /// Concurrency key (a tenant, an account; 1-200 bytes, no control characters): tasks of
    /// the type sharing it run at most the type's per-key limit at a time (`concurrency set N
    /// --type TYPE --per-key`), and keys take turns.
    #[arg(long, value_name = "KEY", value_parser = values::concurrency_key)]
    pub concurrency_key: Option<String>,
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
    /// "result","progress","idempotency_key","concurrency_key"}; times are RFC 3339 UTC
    /// strings, and a time, key, owner, error, result or progress that is not set is null.
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
    /// Refuses (exit 2) when no filter and no --all is given. Audited: one row (requeue_dead,
    /// or requeue_dead_dry_run) with the filter and the count.
    /// --dry-run changes nothing: it counts the matching tasks and lists their ids, newest
    /// first, a page of at most --limit (default 100, max 1000) below --before.
    /// Output (table): `requeued 3 dead tasks`, or with --dry-run `would requeue 3 dead tasks
    /// (dry run)` ("1 dead task" when there is one), then `ids: 9 8 7` and, when there are
    /// more, `next page: --before 7`.
    /// Output (json): {"count":3,"dry_run":false}; with --dry-run also "ids":[9,8,7] and
    /// "next_before":7 or null.
    #[command(verbatim_doc_comment)]
    Requeue(DlqBulkArgs),

    /// Delete every dead task matching a filter, with its attempts, in one transaction
    ///
    /// The same filters as `dlq requeue`; refuses (exit 2) when no filter and no --all is
    /// given. Run it with --dry-run first: that changes nothing, counts the matching tasks and
    /// lists their ids (paged as `dlq requeue --dry-run`). Audited: one row (purge_dead, or
    /// purge_dead_dry_run) with the filter and the count; a viewer token is refused (exit 4).
    /// Output (table): `purged 3 dead tasks`, or with --dry-run `would purge 3 dead tasks (dry
    /// run)`, then `ids: 9 8 7` and, when there are more, `next page: --before 7`.
    /// Output (json): {"count":3,"dry_run":false}; with --dry-run also "ids":[9,8,7] and
    /// "next_before":7 or null.
    #[command(verbatim_doc_comment)]
    Purge(DlqBulkArgs),
}

/// `leasehold dlq ls`.
#[derive(Debug, Clone, Args)]
pub struct DlqLsArgs {
    #[command(flatten)]
    pub filter: ListFilter,
}

/// `leasehold dlq requeue` and `leasehold dlq purge`.
#[derive(Debug, Clone, Args)]
pub struct DlqBulkArgs {
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

    /// Every dead task (needed when no filter is given).
    #[arg(long, conflicts_with_all = ["task_type", "code", "since", "until"])]
    pub all: bool,

    /// Change nothing: count the matching tasks and list their ids.
    #[arg(long)]
    pub dry_run: bool,

    /// With --dry-run: list at most N ids (default 100).
    #[arg(
        long,
        value_name = "N",
        requires = "dry_run",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PAGE_SIZE))
    )]
    pub limit: Option<u32>,

    /// With --dry-run: list only ids below this one, the next page after a
    /// `next page: --before N` hint.
    #[arg(
        long,
        value_name = "ID",
        requires = "dry_run",
        value_parser = clap::value_parser!(i64).range(1..)
    )]
    pub before: Option<i64>,
}

/// `leasehold concurrency …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ConcurrencyCommand {
    /// Set a concurrency limit: global, per type, per key of a type, or local to the agent
    /// named by --agent
    ///
    /// Global, type and per-key limits hold for every agent from its next claim; the local
    /// one is applied by the agent at once. `unlimited` removes a global, type or per-key
    /// limit.
    /// With --type TYPE --per-key, LIMIT (1..=1000000) is the type's per-key limit: at most
    /// that many running tasks per concurrency key (`enqueue --concurrency-key`) of the type;
    /// tasks without a key are not held by it. --per-key needs --type (exit 2 otherwise).
    /// Output (table): `global limit: unlimited → 10`, `type noop limit: 3 → 5`,
    /// `type email.send per-key limit: unlimited → 2`, `local limit: 100 → 50`; a warning of
    /// the agent on stderr as `leasehold: warning: …` (e.g. no live agent handles the type;
    /// the limit is set anyway).
    /// Output (json): {"scope":"global"|"type"|"per_key"|"local","task_type":"noop" or null,
    /// "previous":N or null,"limit":N or null}; null means unlimited.
    #[command(verbatim_doc_comment)]
    Set(ConcurrencySetArgs),
}

/// `leasehold concurrency set`.
#[derive(Debug, Clone, Args)]
pub struct ConcurrencySetArgs {
    /// New limit: 0..=1000000 for --global and --type (0 stops claiming), 1..=1000000 with
    /// --per-key, 1..=100000 for --local; or `unlimited` (not for --local).
    #[arg(value_name = "LIMIT", value_parser = values::limit)]
    pub limit: Limit,

    #[command(flatten)]
    pub scope: ScopeArgs,

    /// With --type: set the type's per-key limit (running tasks per concurrency key) instead
    /// of its type limit.
    #[arg(long)]
    pub per_key: bool,
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

/// `leasehold ratelimit …`.
#[derive(Debug, Clone, Subcommand)]
pub enum RatelimitCommand {
    /// Set a rate limit: at most N task starts in any window of PERIOD, across every agent
    ///
    /// Give a task type, or --global for the starts of every type; both apply when both are
    /// set (a type's rate limit does not inherit the global one). N is 1..=1000000; PERIOD a
    /// duration of whole milliseconds from 1ms to 24h: 50/1s, 1000/1m, 10/250ms, 5/1h. It
    /// holds for every agent from its next claim. Operator token needed (exit 4 otherwise).
    /// Output (table): `rate limit of type email.send: 50/1s (was none)`,
    /// `global rate limit: 1000/1m (was 500/1m)`; `… (unchanged)` when it was already so.
    /// Output (json): {"scope":"global"|"type","task_type":"email.send" or null,
    /// "limit":LIMIT,"previous":LIMIT or null}, LIMIT is {"starts":50,"period_ms":1000,
    /// "text":"50/1s"}.
    #[command(
        verbatim_doc_comment,
        allow_missing_positional = true,
        override_usage = "leasehold ratelimit set [OPTIONS] <TYPE> <N/PERIOD>\n       \
                          leasehold ratelimit set [OPTIONS] --global <N/PERIOD>"
    )]
    Set(RatelimitSetArgs),

    /// Remove a rate limit: a task type's, or with --global the global one
    ///
    /// Output (table): `rate limit of type email.send cleared (was 50/1s)`, `global rate
    /// limit cleared (was 1000/1m)`, or `type email.send had no rate limit (nothing
    /// changed)`.
    /// Output (json): as `ratelimit set`, with "limit":null.
    #[command(
        verbatim_doc_comment,
        override_usage = "leasehold ratelimit clear [OPTIONS] <TYPE>\n       \
                          leasehold ratelimit clear [OPTIONS] --global"
    )]
    Clear(RatelimitClearArgs),

    /// List the rate limits in force and how full their current window is
    ///
    /// The global rate limit first, then every task type with one, by name (from the same
    /// overview as `leasehold types`, at most 1 s old).
    /// Output (table):
    ///   SCOPE   TYPE        LIMIT    USED
    ///   global  -           1000/1m  812/1000
    ///   type    email.send  50/1s    12/50
    /// USED is the starts in the window ending now, of those allowed; `no rate limits` when
    /// there are none.
    /// Output (json): one line, an array of {"scope":"global"|"type","task_type":"email.send"
    /// or null,"limit":LIMIT,"used":12,"full":false}, LIMIT as in `ratelimit set`; [] when
    /// there are none.
    #[command(verbatim_doc_comment)]
    Ls,
}

/// `leasehold ratelimit set`.
#[derive(Debug, Clone, Args)]
pub struct RatelimitSetArgs {
    /// The task type whose rate limit to set.
    #[arg(
        value_name = "TYPE",
        value_parser = values::task_type,
        required_unless_present = "global",
        conflicts_with = "global"
    )]
    pub task_type: Option<String>,

    /// At most N starts per PERIOD: 50/1s, 1000/1m, 10/250ms, 5/1h.
    #[arg(value_name = "N/PERIOD", value_parser = values::rate)]
    pub rate: RateLimit,

    /// The global rate limit: the starts of every type count against it.
    #[arg(long)]
    pub global: bool,
}

/// `leasehold ratelimit clear`.
#[derive(Debug, Clone, Args)]
pub struct RatelimitClearArgs {
    /// The task type whose rate limit to remove.
    #[arg(
        value_name = "TYPE",
        value_parser = values::task_type,
        required_unless_present = "global",
        conflicts_with = "global"
    )]
    pub task_type: Option<String>,

    /// The global rate limit.
    #[arg(long)]
    pub global: bool,
}

/// `leasehold shed …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ShedCommand {
    /// Shed a type's late tasks: a waiting task overdue by more than DURATION is cancelled
    ///
    /// Its waiting tasks (queued or retrying) due longer than DURATION ago are cancelled with
    /// reason `shed` by the leader instead of run late; they are counted (SHED/M in `leasehold
    /// types`). DURATION is whole milliseconds from 1ms to 7 days: 30s, 5m, 1h, 1h 30m.
    /// Operator token needed (exit 4 otherwise).
    /// Output (table): `type email.send sheds tasks waiting over 30s (was never)`,
    /// `… over 1m (was 30s)`, `… over 30s (unchanged)` when it was already so.
    /// Output (json): {"task_type":"email.send","shed_after_ms":30000,"previous_ms":null}
    /// (previous_ms null: it did not shed).
    #[command(verbatim_doc_comment)]
    Set(ShedSetArgs),

    /// Stop shedding a type: its late tasks wait and run again
    ///
    /// Output (table): `type email.send no longer sheds (was 30s)`, or `type email.send did
    /// not shed (nothing changed)`.
    /// Output (json): as `shed set`, with "shed_after_ms":null.
    #[command(verbatim_doc_comment)]
    Clear(TypeArgs),
}

/// `leasehold shed set`.
#[derive(Debug, Clone, Args)]
pub struct ShedSetArgs {
    /// The task type to shed.
    #[arg(value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: String,

    /// How overdue a waiting task may be before it is shed: 30s, 5m, 1h (1ms..=7 days).
    #[arg(value_name = "DURATION", value_parser = values::shed_after)]
    pub after: Duration,
}

/// `leasehold breaker …`.
#[derive(Debug, Clone, Subcommand)]
pub enum BreakerCommand {
    /// Set a type's circuit breaker: after N failures within a window, stop claiming it a while
    ///
    /// Once N attempts of the type failed (retried or final) within WITHIN, the leader opens
    /// the breaker: nothing of the type is claimed for COOLDOWN. Then one task at a time tries
    /// (half-open): a success closes the breaker, a failure opens it again. The leader audits
    /// each move (breaker_open, breaker_half_open, breaker_closed). N is 1..=1000000; WITHIN
    /// whole milliseconds from 1ms to 24h, COOLDOWN from 1ms to 7 days: 250ms, 30s, 1m, 1h.
    /// A breaker set (or changed) starts closed. Operator token needed (exit 4 otherwise).
    /// Output (table): `type payment.charge circuit breaker: 5 failures within 1m, cooldown
    /// 30s (was none)`, `… (was 3 failures within 1m, cooldown 30s)`, `… (unchanged)` when it
    /// was already so.
    /// Output (json): {"task_type":"payment.charge","breaker":BREAKER,"previous":BREAKER or
    /// null}, BREAKER is {"failures":5,"within_ms":60000,"cooldown_ms":30000,
    /// "text":"5 failures within 1m, cooldown 30s"}.
    #[command(verbatim_doc_comment)]
    Set(BreakerSetArgs),

    /// Remove a type's circuit breaker: its failures no longer stop it
    ///
    /// An open breaker cleared lets the type be claimed again at once.
    /// Output (table): `type payment.charge circuit breaker cleared (was 5 failures within 1m,
    /// cooldown 30s)`, or `type payment.charge had no circuit breaker (nothing changed)`.
    /// Output (json): as `breaker set`, with "breaker":null.
    #[command(verbatim_doc_comment)]
    Clear(TypeArgs),

    /// List the circuit breakers and where each stands
    ///
    /// Every task type with a breaker, by name (from the same overview as `leasehold types`,
    /// at most 1 s old).
    /// Output (table):
    ///   TYPE            FAILURES  WITHIN  COOLDOWN  STATE      UNTIL
    ///   payment.charge         5      1m       30s  open       12:00:42 (in 12s)
    ///   email.send             3     10s        1m  closed     -
    /// STATE is closed (claimed as usual), open (not claimed until UNTIL, database time, UTC)
    /// or half-open (one task at a time tries); `no circuit breakers` when there are none.
    /// Output (json): one line, an array of {"task_type":"payment.charge","failures":5,
    /// "within_ms":60000,"cooldown_ms":30000,"state":"open","since":"...Z" or null,
    /// "until":"...Z" or null} (state is closed, open or half_open; since: when it was set or
    /// last moved; until: when an open breaker half-opens, else null); [] when there are
    /// none.
    #[command(verbatim_doc_comment)]
    Ls,
}

/// `leasehold breaker set`.
#[derive(Debug, Clone, Args)]
pub struct BreakerSetArgs {
    /// The task type to guard.
    #[arg(value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: String,

    /// Failed attempts within the window that open the breaker (1..=1000000).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BREAKER_FAILURES))
    )]
    pub failures: u32,

    /// The window the failures must fall in: 10s, 1m, 1h (1ms..=24h).
    #[arg(long, value_name = "DURATION", value_parser = values::breaker_within)]
    pub within: Duration,

    /// How long an open breaker keeps the type from being claimed: 30s, 5m (1ms..=7 days).
    #[arg(long, value_name = "DURATION", value_parser = values::breaker_cooldown)]
    pub cooldown: Duration,
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
    /// An agent is listed until an hour after it stopped or, killed without stopping, went
    /// silent (its last registry heartbeat).
    ///
    /// Output (table): L (`*` for the maintenance leader), ID, STATE, ACTIVE (active/local
    /// limit), HEARTBEAT (age, database clock), VERSION, ADDRESS; then the leader lease,
    /// `leader web-1#3 · term 7 · elected 2m00s ago` (or `no leader`, with the last term when
    /// one led before), then `answered by ID`.
    /// Output (json): {"agents":[{"id","name","host","pid","state","leader","active",
    /// "local_concurrency","version","grpc_address","task_types","started_at",
    /// "heartbeat_at","heartbeat_age_ms","stopped_at"}...],"leader":{"owner","term",
    /// "held","elected_at","lease_until","heartbeat_at"} or null when no agent ever led,
    /// "answered_by":"...","now":"...Z"}; the leader's owner is null when it resigned.
    #[command(verbatim_doc_comment)]
    Ls,
}

/// `leasehold schedules …`.
#[derive(Debug, Clone, Subcommand)]
pub enum SchedulesCommand {
    /// List every cron schedule with its next and last fire and its last outcome
    ///
    /// Output (table): NAME, CRON, TZ (only when a schedule is not in UTC), TYPE, ON (enabled
    /// yes/no), NEXT (`in 3s`; `-` when disabled or never again), LAST (`5m00s ago`, `-`
    /// never fired), LAST OUTCOME (the status of the last tick's task, `error: MESSAGE` when
    /// the last firing could not enqueue, `-` when none). Times are the database's.
    /// Output (json): one line, an array of SCHEDULE: {"name","cron","description",
    /// "time_zone","task_type","payload","priority","max_attempts" (null: inherited from the
    /// type's policy at each firing),"max_attempts_in_force" (what a task fired now gets; null
    /// when the agent does not say),"enabled","missed","catch_up_max","next_fire_at","next_fire_at_ms","last_fired_at","last_fired_at_ms",
    /// "last_task_id","last_task_status","last_error","created_at","created_at_ms",
    /// "updated_at","updated_at_ms"}; times are RFC 3339 UTC strings next to the same time
    /// in ms, both null when none (a last task, status or error that is not set is null).
    #[command(verbatim_doc_comment)]
    Ls,

    /// Create a schedule, or with --replace overwrite one
    ///
    /// The same definition again is a no-op; a different one under an existing name is
    /// refused (already exists, exit 2) unless --replace. The agent checks the cron, the
    /// zone and the limits (invalid argument, exit 2, with its message).
    /// Output (table): `created schedule nightly: next fire 2026-12-02T02:00:00.000Z (in
    /// 13h59m)` (`replaced …`, `schedule nightly unchanged (same definition) …`; `next fire:
    /// none (disabled)`), and each warning of the agent on stderr as `leasehold: warning: …`
    /// (e.g. no live agent handles the type; the schedule is saved anyway).
    /// Output (json): {"outcome":"created"|"replaced"|"unchanged","schedule":SCHEDULE,
    /// "warnings":["..."]}.
    #[command(verbatim_doc_comment)]
    Add(ScheduleAddArgs),

    /// Delete a schedule; the tasks it enqueued stay
    ///
    /// Output (table): `removed schedule nightly`.
    /// Output (json): {"name":"nightly","removed":true,"schedule":SCHEDULE (as it was; null when its row was unreadable)}.
    #[command(verbatim_doc_comment)]
    Rm(ScheduleNameArgs),

    /// Enable a schedule: it fires from the next tick after now (missed ticks are not caught
    /// up)
    ///
    /// Output (table): `enabled schedule nightly: next fire … (in 3s)`, or `schedule nightly
    /// was already enabled (nothing changed)`.
    /// Output (json): {"name":"nightly","enabled":true,"changed":true,"schedule":SCHEDULE}.
    #[command(verbatim_doc_comment)]
    Enable(ScheduleNameArgs),

    /// Disable a schedule: it stops firing until enabled
    ///
    /// Output (table): `disabled schedule nightly`, or `schedule nightly was already disabled
    /// (nothing changed)`.
    /// Output (json): {"name":"nightly","enabled":false,"changed":true,"schedule":SCHEDULE}.
    #[command(verbatim_doc_comment)]
    Disable(ScheduleNameArgs),

    /// Fire a schedule once, now, outside its cron (enabled or not)
    ///
    /// Output (table): `triggered schedule nightly: task 42 (idempotency key
    /// schedule:nightly:manual:2026-12-01T12:00:00.000Z)`.
    /// Output (json): {"name":"nightly","task_id":42,"idempotency_key":"...","task":TASK
    /// (as in `tasks show`),"schedule":SCHEDULE}.
    #[command(verbatim_doc_comment)]
    Trigger(ScheduleNameArgs),
}

/// A schedule name argument.
#[derive(Debug, Clone, Args)]
pub struct ScheduleNameArgs {
    /// Schedule name.
    #[arg(value_name = "NAME", value_parser = values::schedule_name)]
    pub name: String,
}

/// What a schedule does with ticks that passed while no leader fired them (`--missed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Missed {
    /// Fire only the latest missed tick.
    #[default]
    Skip,
    /// Fire the latest --catch-up-max missed ticks, oldest first.
    #[value(name = "catch_up", alias = "catch-up")]
    CatchUp,
}

impl Missed {
    /// The wire's name: `skip` or `catch_up`.
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::CatchUp => "catch_up",
        }
    }
}

/// `leasehold schedules add`.
#[derive(Debug, Clone, Args)]
pub struct ScheduleAddArgs {
    /// Schedule name: 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit.
    #[arg(value_name = "NAME", value_parser = values::schedule_name)]
    pub name: String,

    /// Cron expression with seconds: `SEC MIN HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK`, e.g.
    /// `0 0 2 * * *` (every day at 02:00).
    #[arg(long, value_name = "EXPR")]
    pub cron: String,

    /// Type of the task each tick enqueues.
    #[arg(long = "type", value_name = "TYPE", value_parser = values::task_type)]
    pub task_type: String,

    /// Payload of each task, as JSON text (default `{}`).
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,

    /// IANA time zone the cron is read in, e.g. Europe/Berlin (default UTC).
    #[arg(long = "tz", value_name = "ZONE")]
    pub time_zone: Option<String>,

    /// Ticks missed while no leader fired them: `skip` fires only the latest, `catch_up` the
    /// latest --catch-up-max.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub missed: Option<Missed>,

    /// How many missed ticks `--missed catch_up` fires at most (default 10).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CATCH_UP))
    )]
    pub catch_up_max: Option<u32>,

    /// Priority of each task, -32768..=32767; higher runs first.
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub priority: i16,

    /// Most attempts of each task, the first included. Without it the schedule inherits: each
    /// task it fires takes the type's `policy set --max-attempts`, else the global one, else 25,
    /// as in force when it fires (with --replace too: a replaced schedule without it inherits).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(i32).range(1..=i64::from(MAX_ATTEMPTS_LIMIT))
    )]
    pub max_attempts: Option<i32>,

    /// Create it disabled (enable it later with `schedules enable`).
    #[arg(long)]
    pub disabled: bool,

    /// Overwrite an existing schedule of that name.
    #[arg(long)]
    pub replace: bool,
}

/// `leasehold shards …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ShardsCommand {
    /// Declare a shard group of --count shards; agents started with --shard-groups share them
    ///
    /// The same count again changes nothing; a different count is refused (failed
    /// precondition, exit 2): a group keeps the count it was created with.
    /// Output (table): `created shard group orders with 8 shards`, or `shard group orders
    /// already exists with 8 shards (nothing changed)`.
    /// Output (json): {"name":"orders","created":true,"group":GROUP}.
    #[command(verbatim_doc_comment)]
    Create(ShardsCreateArgs),

    /// List the shard groups, or with GROUP every shard of it with its owner and token
    ///
    /// Without GROUP, output (table): GROUP, SHARDS, OWNED (shards with a live owner),
    /// MEMBERS (live agents sharing it), MOVES/H (owner changes in the last hour), CREATED.
    /// Output (json): one line, an array of GROUP: {"name","shard_count","members","owned",
    /// "moves_last_hour","created_at","created_at_ms"}.
    /// With GROUP, output (table): a line `group orders: 8 shards, 7 owned, 2 members, 3
    /// moves in the last hour`, then SHARD, OWNER (`-` unowned), TOKEN, STATE (free, held,
    /// suspect, expired), LEFT, MOVES/H, one row per shard; then MEMBER, STATE (live,
    /// suspect, gone), SHARDS (owned now), HEARTBEAT (age), one row per member.
    /// Output (json): {"group":GROUP,"shards":[{"shard":0,"owner":"web-1#1" or null,
    /// "token":3,"state","lease_until","lease_until_ms","heartbeat_at","heartbeat_at_ms",
    /// "acquired_at","acquired_at_ms","time_left_ms","moves_last_hour"}...],
    /// "members":[{"agent","state","shards","joined_at","joined_at_ms","heartbeat_at",
    /// "heartbeat_at_ms","lease_until","lease_until_ms"}...],"now":"...Z"}, one entry per
    /// shard by number. An unknown group is not found (exit 2).
    #[command(verbatim_doc_comment)]
    Ls(ShardsLsArgs),
}

/// `leasehold shards create`.
#[derive(Debug, Clone, Args)]
pub struct ShardsCreateArgs {
    /// Shard group name: 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit.
    #[arg(value_name = "GROUP", value_parser = values::shard_group)]
    pub group: String,

    /// Number of shards, 1..=4096 (numbered from 0).
    #[arg(long, value_name = "N", value_parser = values::shard_count)]
    pub count: u32,
}

/// `leasehold shards ls`.
#[derive(Debug, Clone, Args)]
pub struct ShardsLsArgs {
    /// A shard group: list its shards and members (default: list the groups).
    #[arg(value_name = "GROUP", value_parser = values::shard_group)]
    pub group: Option<String>,
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

/// `leasehold audit …`.
#[derive(Debug, Clone, Subcommand)]
pub enum AuditCommand {
    /// List the audit log, newest first, one page at a time (operator token needed)
    ///
    /// Output (table): ID, AT (UTC, to the second), ACTOR, ACTION, RESULT, N (calls the row
    /// stands for), TARGET, then, when there is another page, a line
    /// `next page: --before-id N`.
    /// Output (json): {"entries":[ENTRY...],"next_before_id":N or null}, ENTRY is {"id",
    /// "at","at_ms","actor","role","action","target","params","result","detail","peer",
    /// "count"}; params is the JSON the row recorded (an enqueue's has "payload_sha256" and,
    /// for exec, "argv"), and params, detail and peer are null when not set.
    /// A viewer token is refused (exit 4); a bad filter is exit 2.
    #[command(verbatim_doc_comment)]
    Ls(AuditLsArgs),
}

/// `leasehold audit ls`.
#[derive(Debug, Clone, Args)]
pub struct AuditLsArgs {
    /// Only rows of this actor (exact, e.g. `uid:1000(alice)` or a token's name).
    #[arg(long, value_name = "ACTOR", value_parser = exact_filter)]
    pub actor: Option<String>,

    /// Only rows of this action (exact, e.g. `enqueue`, `cancel`, `policy_set`).
    #[arg(long, value_name = "ACTION", value_parser = exact_filter)]
    pub action: Option<String>,

    /// Only rows with this result.
    #[arg(long, value_name = "RESULT", value_parser = audit_results())]
    pub result: Option<String>,

    /// Only rows whose target contains this text (case-insensitive), e.g. `task:42`.
    #[arg(long, value_name = "TEXT", value_parser = values::text_filter)]
    pub target: Option<String>,

    /// Only rows written since then: an RFC 3339 time, or a duration back from now (`1h`).
    #[arg(long, value_name = "WHEN", value_parser = values::time_or_duration)]
    pub since: Option<TimeOrDuration>,

    /// Only rows written before then: an RFC 3339 time, or a duration back from now.
    #[arg(long, value_name = "WHEN", value_parser = values::time_or_duration)]
    pub until: Option<TimeOrDuration>,

    /// Page size.
    #[arg(
        long,
        default_value_t = DEFAULT_LIST_LIMIT,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub limit: u32,

    /// Only ids below this one: the next page after a `next page: --before-id N` hint.
    #[arg(
        long = "before-id",
        alias = "before",
        value_name = "ID",
        value_parser = clap::value_parser!(i64).range(1..)
    )]
    pub before_id: Option<i64>,
}

/// An exact-match filter: 1-200 bytes without control characters.
/// The words `--result` takes: those of the wire's audit results, so the list is not written
/// twice.
fn audit_results() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(AuditResult::all().into_iter().map(WireEnum::word))
}

fn exact_filter(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 200 || s.chars().any(char::is_control) {
        return Err("must be 1-200 bytes without control characters".into());
    }
    Ok(s.to_owned())
}
