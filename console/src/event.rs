//! The messages between the console's network side and its state: [`Event`]s flow from the
//! connections into [`State`](crate::state::State); [`Request`]s flow from the app to the
//! connections. Both are plain data, so the state and the app are tested without a network
//! and a fixture is a list of events.
//!
//! ```text
//!   client::fleet ──Event──▶ app ──▶ state ◀── view (reads only)
//!        ▲                    │
//!        └─────Request────────┘   (actions, pages, details)
//! ```

use leasehold_proto::v1 as pb;

/// Something the network side learnt.
#[derive(Debug, Clone)]
pub enum Event {
    /// An update of the Watch stream of the agent at `addr`.
    Watch {
        addr: String,
        update: pb::WatchUpdate,
    },
    /// The connection to the agent at `addr` changed.
    Conn { addr: String, conn: ConnEvent },
    /// The registry as an agent reported it.
    Agents(pb::ListAgentsResponse),
    /// Counts per type and the global policy.
    Overview(pb::GetOverviewResponse),
    /// The queue history of every type summed (GetHistory), read every [`HISTORY_EVERY`](crate::client::fleet::HISTORY_EVERY).
    History(pb::GetHistoryResponse),
    /// Leases whose renewal is overdue, as the database sees them (ListSuspectLeases).
    Suspects(pb::ListSuspectLeasesResponse),
    /// The answer to the request with this id.
    Reply {
        id: u64,
        reply: Result<Reply, String>,
    },
}

/// A change of one agent connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnEvent {
    /// Connecting (first time or again).
    Connecting,
    /// The stream is open.
    Live,
    /// The stream or the connection failed; the next attempt is in `retry_in_ms`.
    Lost { reason: String, retry_in_ms: u64 },
    /// The agent left the registry (stopped); the console no longer connects to it.
    Gone,
    /// How the connection reached the agent, sent before [`ConnEvent::Live`]: `tcp`, or
    /// `unix:PATH` for the agent's local socket.
    Route(String),
}

/// Something the app asks of the network side; answered by an [`Event::Reply`] with its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: u64,
    pub kind: RequestKind,
}

/// What is asked.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestKind {
    /// A page of dead letters: newest first, before `before_id` (0: the first page).
    DeadPage {
        filter: TaskFilter,
        before_id: i64,
        limit: u32,
    },
    /// A page of the Tasks view: `statuses` (and `due`) newest first, before `before_id` (0:
    /// the first page).
    TasksPage {
        statuses: Vec<i32>,
        due: Option<bool>,
        filter: TaskFilter,
        before_id: i64,
        limit: u32,
    },
    /// The Tasks view's counts of every state under the filter (CountTasks).
    TaskCounts { filter: TaskFilter },
    /// Every schedule (ListSchedules).
    Schedules,
    /// Every lock (ListLocks).
    Locks,
    /// Every shard group (ListShardGroups).
    ShardGroups,
    /// One group's shards and members (ListShards).
    Shards { group: String },
    /// A task with its attempts and why it is not running.
    Task { id: i64 },
    /// Cancel these tasks (queued: at once; running: the holder stops).
    Cancel { ids: Vec<i64> },
    /// Requeue these tasks.
    Requeue { ids: Vec<i64> },
    /// Make these waiting tasks due now (RunNow).
    RunNow { ids: Vec<i64> },
    /// Delete these tasks (DeleteTask).
    Delete { ids: Vec<i64> },
    /// Requeue every dead letter matching the filter; `dry_run` only counts.
    RequeueDead { filter: TaskFilter, dry_run: bool },
    /// Set a concurrency limit (`None`: unlimited).
    SetConcurrency {
        scope: LimitScope,
        limit: Option<u32>,
    },
    /// Pause (true) or resume (false) a task type.
    Pause { task_type: String, pause: bool },
    /// Drain the agent at this address.
    Drain { addr: String },
    /// Enable (true) or disable (false) a schedule.
    SetScheduleEnabled { name: String, enabled: bool },
    /// Fire a schedule once, now.
    TriggerSchedule { name: String },
    /// Free a lock from whoever holds it (ReleaseLock with an empty holder and token 0);
    /// `owner` and `token` are the holding the operator confirmed, for the summary.
    ReleaseLock {
        name: String,
        owner: String,
        token: i64,
    },
    /// Read the registry and the overview now rather than at the next poll (ctrl-l). Not
    /// answered: what it reads arrives as [`Event::Agents`] and [`Event::Overview`].
    Poll,
    /// Read the history of this type from now on (empty: every type summed), at once and then
    /// every [`HISTORY_EVERY`](crate::client::fleet::HISTORY_EVERY). Not answered: it arrives
    /// as [`Event::History`].
    HistoryFor { task_type: String },
}

/// The filter pushed to the agent for database-backed views.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Words matched against type, payload and error (the agent's `text` filter).
    pub text: Option<String>,
    /// `type:NAME`
    pub task_type: Option<String>,
    /// `code:CODE`
    pub error_code: Option<String>,
}

impl TaskFilter {
    /// Parses what the operator typed after `/`: `type:NAME` and `code:CODE` terms, the rest
    /// as text.
    pub fn parse(typed: &str) -> Self {
        let mut filter = TaskFilter::default();
        let mut words = Vec::new();
        for word in typed.split_whitespace() {
            if let Some(t) = word.strip_prefix("type:").filter(|t| !t.is_empty()) {
                filter.task_type = Some(t.to_string());
            } else if let Some(c) = word.strip_prefix("code:").filter(|c| !c.is_empty()) {
                filter.error_code = Some(c.to_string());
            } else {
                words.push(word);
            }
        }
        if !words.is_empty() {
            filter.text = Some(words.join(" "));
        }
        filter
    }

    /// True when it matches everything.
    pub fn is_empty(&self) -> bool {
        self.text.is_none() && self.task_type.is_none() && self.error_code.is_none()
    }
}

/// Which limit a [`RequestKind::SetConcurrency`] changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitScope {
    Global,
    Type(String),
    /// The local limit of the agent at this address.
    Agent {
        addr: String,
        agent_id: String,
    },
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A page of tasks.
    Page(pb::ListTasksResponse),
    /// The counts of every state.
    Counts(pb::CountTasksResponse),
    /// Every schedule.
    Schedules(pb::ListSchedulesResponse),
    /// Every lock.
    Locks(pb::ListLocksResponse),
    /// Every shard group.
    ShardGroups(pb::ListShardGroupsResponse),
    /// One group's shards and members.
    Shards(pb::ListShardsResponse),
    /// A task in detail.
    Task(Box<pb::GetTaskResponse>),
    /// An action finished: what it did, in words, and how many of its targets failed.
    Action { summary: String, failed: usize },
    /// The count a dry run found.
    Count(u64),
}
