//! Connecting to an agent: the address, TLS (rustls, CA from a file, optional client identity
//! for mutual TLS), the token interceptor, message-size limits and timeouts; then one method
//! per RPC that turns every failure into an [`Error`] saying what was being done.
//!
//! ```text
//! GlobalArgs ──settings()──▶ Settings ──Agent::connect()──▶ Agent ──get_task(..)──▶ reply
//!   (flags/env)   files read,            Unix socket or           per-call deadline,
//!                 checked                TCP + TLS, HTTP/2        grpc-timeout header
//!                                        within --call-timeout
//! ```
//!
//! A loopback `--agent` without TLS prefers the agent's local Unix socket ([`socket`]), where
//! the agent knows the caller's uid; `--socket PATH` uses that socket only, `--no-socket`
//! TCP only. [`Agent::route`] says which was used.
//!
//! When things fail: a bad flag combination or unreadable file is found by [`settings()`]
//! before any I/O on the network (exit 2); a connection that cannot be made is
//! [`Error::Connect`] (exit 3, "cannot reach agent at ADDR: …"); a call that gets no answer
//! within its deadline is DEADLINE_EXCEEDED (exit 3). A status tonic made on the client from a
//! transport failure keeps the failure as its source, and the message shows it, with a hint
//! ([`diagnose`]) when TLS on one side only is the likely cause. The token is never printed.

mod diagnose;
pub mod fleet;
pub mod holders;
mod settings;
mod socket;

pub use diagnose::Security;
pub use settings::{
    AgentAddr, Settings, TlsSettings, Transport, is_loopback_host, settings,
    token_plaintext_refusal,
};

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold_proto::v1;
use leasehold_proto::v1::agent_service_client::AgentServiceClient;
use leasehold_proto::{AUTHORIZATION, MAX_MESSAGE_BYTES};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Response, Status, Streaming};

use crate::error::{Error, Result, cause_chain};

/// TCP and HTTP/2 keepalive: a dead or half-open connection (a long `watch`) is noticed
/// within about this plus [`KEEPALIVE_TIMEOUT`].
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long an HTTP/2 ping may go unanswered.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Extra time a waiting `cancel` call gets when the agent decides how long to wait.
pub const CANCEL_WAIT_ALLOWANCE: Duration = Duration::from_secs(60);

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone)]
pub struct TokenInterceptor(Option<MetadataValue<Ascii>>);

impl Interceptor for TokenInterceptor {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert(AUTHORIZATION, value.clone());
        }
        Ok(request)
    }
}

type Client = AgentServiceClient<InterceptedService<Channel, TokenInterceptor>>;

/// A connected agent.
#[derive(Clone)]
pub struct Agent {
    client: Client,
    call_timeout: Duration,
    security: Security,
    addr: String,
    route: Route,
    /// Set once any call got an answer: a transport failure after that is not a TLS mismatch.
    answered: Arc<AtomicBool>,
}

/// How a connection reached its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// TCP (plaintext or TLS) to the `--agent` address.
    Tcp,
    /// The agent's local Unix socket at this path.
    Socket(PathBuf),
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Tcp => f.write_str("tcp"),
            Route::Socket(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl Agent {
    /// Connects within the call timeout: over the agent's Unix socket when [`Transport`]
    /// says so (or, for [`Transport::Auto`], when one answers), else TCP (+ TLS), then HTTP/2.
    pub async fn connect(settings: &Settings) -> Result<Self> {
        let endpoint = endpoint(settings)?;
        let mut security = match &settings.tls {
            None => Security::Plaintext,
            Some(t) if t.identity.is_some() => Security::MutualTls,
            Some(_) => Security::Tls,
        };
        let socket = match &settings.transport {
            Transport::Socket(path) => {
                let channel =
                    socket::connect(&endpoint, path)
                        .await
                        .map_err(|e| Error::Connect {
                            addr: format!("unix:{}", path.display()),
                            cause: diagnose::connect_cause(&e, settings.call_timeout, security),
                        })?;
                Some((channel, path.clone()))
            }
            Transport::Auto => {
                let candidates = leasehold_shared::local::socket_candidates(settings.addr.port);
                socket::first_answering(&endpoint, candidates).await
            }
            Transport::Tcp => None,
        };
        let (channel, route) = match socket {
            Some((channel, path)) => {
                security = Security::Socket;
                (channel, Route::Socket(path))
            }
            None => {
                if let Some(why) = settings::token_plaintext_refusal(settings) {
                    return Err(Error::usage(why));
                }
                let channel = endpoint.connect().await.map_err(|e| Error::Connect {
                    addr: settings.addr.given.clone(),
                    cause: diagnose::connect_cause(&e, settings.call_timeout, security),
                })?;
                (channel, Route::Tcp)
            }
        };
        tracing::debug!(agent = %settings.addr.given, %route, "connected");
        if settings.verbose {
            // stderr only: stdout may be JSON for a script.
            eprintln!(
                "leasehold: connected to {} via {route}",
                crate::output::text::shown(&settings.addr.given, 100)
            );
        }
        let client =
            AgentServiceClient::with_interceptor(channel, TokenInterceptor(settings.token.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Self {
            client,
            call_timeout: settings.call_timeout,
            security,
            addr: settings.addr.given.clone(),
            route,
            answered: Arc::new(AtomicBool::new(false)),
        })
    }

    /// How this connection reached the agent.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The per-call timeout (`--call-timeout`).
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The address as given, for messages.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Runs one unary call with a deadline of `timeout`, sent to the agent as `grpc-timeout`
    /// and enforced here too.
    async fn unary<Req, Resp, F, Fut>(
        &self,
        what: String,
        timeout: Duration,
        message: Req,
        call: F,
    ) -> Result<Resp>
    where
        F: FnOnce(Client, Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<Response<Resp>, Status>>,
    {
        let mut request = Request::new(message);
        request.set_timeout(timeout);
        // tonic enforces the grpc-timeout on the client too (as CANCELLED "Timeout
        // expired"); the local timer is the backstop. Either way it is a deadline exceeded.
        let answer = tokio::time::timeout(timeout, call(self.client.clone(), request)).await;
        match answer {
            Ok(Ok(response)) => {
                self.answered.store(true, Ordering::Relaxed);
                Ok(response.into_inner())
            }
            Ok(Err(status)) if diagnose::is_timeout(&status) => {
                Err(diagnose::no_answer(what, timeout))
            }
            Ok(Err(status)) => Err(self.status_error(what, status)),
            Err(_) => Err(diagnose::no_answer(what, timeout)),
        }
    }

    /// An error for a failed call, with a hint when the failure points at a TLS mismatch or
    /// at something that is not a (matching) agent.
    pub fn status_error(&self, what: String, status: Status) -> Error {
        if std::error::Error::source(&status).is_none() {
            // A status decoded from the agent's trailers: the agent answered.
            self.answered.store(true, Ordering::Relaxed);
        }
        let hint = diagnose::status_hint(
            &status,
            &self.addr,
            self.security,
            self.answered.load(Ordering::Relaxed),
        );
        Error::Rpc { what, status, hint }
    }

    pub async fn list_tasks(&self, r: v1::ListTasksRequest) -> Result<v1::ListTasksResponse> {
        self.unary(
            "list tasks".into(),
            self.call_timeout,
            r,
            |mut c, r| async move { c.list_tasks(r).await },
        )
        .await
    }

    pub async fn get_task(&self, id: i64) -> Result<v1::GetTaskResponse> {
        let r = v1::GetTaskRequest { id };
        self.unary(
            format!("get task {id}"),
            self.call_timeout,
            r,
            |mut c, r| async move { c.get_task(r).await },
        )
        .await
    }

    pub async fn list_agents(&self) -> Result<v1::ListAgentsResponse> {
        let r = v1::ListAgentsRequest {};
        self.unary(
            "list agents".into(),
            self.call_timeout,
            r,
            |mut c, r| async move { c.list_agents(r).await },
        )
        .await
    }

    pub async fn get_overview(&self) -> Result<v1::GetOverviewResponse> {
        self.unary(
            "get the overview".into(),
            self.call_timeout,
            v1::GetOverviewRequest {},
            |mut c, r| async move { c.get_overview(r).await },
        )
        .await
    }

    pub async fn get_history(&self, task_type: String) -> Result<v1::GetHistoryResponse> {
        self.unary(
            "get the queue history".into(),
            self.call_timeout,
            v1::GetHistoryRequest {
                task_type,
                minutes: 60,
            },
            |mut c, r| async move { c.get_history(r).await },
        )
        .await
    }

    pub async fn enqueue(&self, r: v1::EnqueueRequest) -> Result<v1::EnqueueResponse> {
        let what = format!("enqueue {}", r.task_type);
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.enqueue(r).await
        })
        .await
    }

    /// Cancel, allowed the call timeout plus the wait (or [`CANCEL_WAIT_ALLOWANCE`] when the
    /// agent decides the wait).
    pub async fn cancel(&self, r: v1::CancelRequest) -> Result<v1::CancelResponse> {
        let what = format!("cancel task {}", r.id);
        let wait = match (r.wait, u64::try_from(r.wait_ms)) {
            (false, _) => Duration::ZERO,
            (true, Ok(ms)) if ms > 0 => Duration::from_millis(ms),
            (true, _) => CANCEL_WAIT_ALLOWANCE,
        };
        let timeout = self.call_timeout.saturating_add(wait);
        self.unary(
            what,
            timeout,
            r,
            |mut c, r| async move { c.cancel(r).await },
        )
        .await
    }

    pub async fn requeue(&self, id: i64) -> Result<v1::RequeueResponse> {
        let r = v1::RequeueRequest { id };
        self.unary(
            format!("requeue task {id}"),
            self.call_timeout,
            r,
            |mut c, r| async move { c.requeue(r).await },
        )
        .await
    }

    pub async fn run_now(&self, id: i64) -> Result<v1::RunNowResponse> {
        let r = v1::RunNowRequest { id };
        self.unary(
            format!("run task {id} now"),
            self.call_timeout,
            r,
            |mut c, r| async move { c.run_now(r).await },
        )
        .await
    }

    pub async fn delete_task(&self, id: i64) -> Result<v1::DeleteTaskResponse> {
        let r = v1::DeleteTaskRequest { id };
        self.unary(
            format!("delete task {id}"),
            self.call_timeout,
            r,
            |mut c, r| async move { c.delete_task(r).await },
        )
        .await
    }

    pub async fn count_tasks(&self, r: v1::CountTasksRequest) -> Result<v1::CountTasksResponse> {
        self.unary(
            "count tasks".into(),
            self.call_timeout,
            r,
            |mut c, r| async move { c.count_tasks(r).await },
        )
        .await
    }

    pub async fn requeue_dead(&self, r: v1::RequeueDeadRequest) -> Result<v1::RequeueDeadResponse> {
        self.unary(
            "requeue dead tasks".into(),
            self.call_timeout,
            r,
            |mut c, r| async move { c.requeue_dead(r).await },
        )
        .await
    }

    pub async fn purge_dead(&self, r: v1::PurgeDeadRequest) -> Result<v1::PurgeDeadResponse> {
        self.unary(
            "purge dead tasks".into(),
            self.call_timeout,
            r,
            |mut c, r| async move { c.purge_dead(r).await },
        )
        .await
    }

    pub async fn set_concurrency(
        &self,
        r: v1::SetConcurrencyRequest,
    ) -> Result<v1::SetConcurrencyResponse> {
        self.unary(
            "set concurrency".into(),
            self.call_timeout,
            r,
            |mut c, r| async move { c.set_concurrency(r).await },
        )
        .await
    }

    /// SetRateLimit; an agent older than rate limits says so.
    pub async fn set_rate_limit(
        &self,
        r: v1::SetRateLimitRequest,
    ) -> Result<v1::SetRateLimitResponse> {
        let verb = if r.clear { "clear" } else { "set" };
        let what = match &r.scope {
            Some(v1::set_rate_limit_request::Scope::TaskType(t)) => {
                format!("{verb} the rate limit of type {t}")
            }
            _ => format!("{verb} the global rate limit"),
        };
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.set_rate_limit(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::Unimplemented,
                "this agent is older than rate limits; upgrade it",
            )
        })
    }

    /// SetShedAfter; an agent older than load shedding says so.
    pub async fn set_shed_after(
        &self,
        r: v1::SetShedAfterRequest,
    ) -> Result<v1::SetShedAfterResponse> {
        let what = if r.clear {
            format!("stop shedding type {}", r.task_type)
        } else {
            format!("set load shedding of type {}", r.task_type)
        };
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.set_shed_after(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::Unimplemented,
                "this agent is older than load shedding; upgrade it",
            )
        })
    }

    /// SetBreaker; an agent older than circuit breakers says so.
    pub async fn set_breaker(&self, r: v1::SetBreakerRequest) -> Result<v1::SetBreakerResponse> {
        let what = if r.clear {
            format!("clear the circuit breaker of type {}", r.task_type)
        } else {
            format!("set the circuit breaker of type {}", r.task_type)
        };
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.set_breaker(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::Unimplemented,
                "this agent is older than circuit breakers; upgrade it",
            )
        })
    }

    /// GetPolicy; an agent older than per-type policies says so.
    pub async fn get_policy(&self, r: v1::GetPolicyRequest) -> Result<v1::GetPolicyResponse> {
        let what = policy_what("show", &r.task_type);
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.get_policy(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::Unimplemented,
                "this agent is older than `leasehold policy`; upgrade it",
            )
        })
    }

    /// SetPolicy; an agent older than per-type policies says so.
    pub async fn set_policy(&self, r: v1::SetPolicyRequest) -> Result<v1::SetPolicyResponse> {
        let what = policy_what("set", &r.task_type);
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.set_policy(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::Unimplemented,
                "this agent is older than `leasehold policy`; upgrade it",
            )
        })
    }

    pub async fn pause_type(&self, task_type: String) -> Result<v1::PauseTypeResponse> {
        let what = format!("pause type {task_type}");
        let r = v1::PauseTypeRequest { task_type };
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.pause_type(r).await
        })
        .await
    }

    pub async fn resume_type(&self, task_type: String) -> Result<v1::ResumeTypeResponse> {
        let what = format!("resume type {task_type}");
        let r = v1::ResumeTypeRequest { task_type };
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.resume_type(r).await
        })
        .await
    }

    pub async fn drain(&self) -> Result<v1::DrainResponse> {
        let what = format!("drain agent at {}", self.addr);
        self.unary(
            what,
            self.call_timeout,
            v1::DrainRequest {},
            |mut c, r| async move { c.drain(r).await },
        )
        .await
    }

    pub async fn list_schedules(&self) -> Result<v1::ListSchedulesResponse> {
        self.unary(
            "list schedules".into(),
            self.call_timeout,
            v1::ListSchedulesRequest {},
            |mut c, r| async move { c.list_schedules(r).await },
        )
        .await
    }

    /// AddSchedule; a name taken by another definition says how to overwrite it.
    pub async fn add_schedule(&self, r: v1::AddScheduleRequest) -> Result<v1::AddScheduleResponse> {
        let what = format!("add schedule {}", r.name);
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.add_schedule(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::AlreadyExists,
                "give --replace to overwrite it",
            )
        })
    }

    pub async fn remove_schedule(&self, name: String) -> Result<v1::RemoveScheduleResponse> {
        let what = format!("remove schedule {name}");
        let r = v1::RemoveScheduleRequest { name };
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.remove_schedule(r).await
        })
        .await
    }

    pub async fn set_schedule_enabled(
        &self,
        name: String,
        enabled: bool,
    ) -> Result<v1::SetScheduleEnabledResponse> {
        let verb = if enabled { "enable" } else { "disable" };
        let what = format!("{verb} schedule {name}");
        let r = v1::SetScheduleEnabledRequest { name, enabled };
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.set_schedule_enabled(r).await
        })
        .await
    }

    pub async fn trigger_schedule(&self, name: String) -> Result<v1::TriggerScheduleResponse> {
        let what = format!("trigger schedule {name}");
        let r = v1::TriggerScheduleRequest { name };
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.trigger_schedule(r).await
        })
        .await
    }

    /// ListAudit: one page of the audit log (operator role).
    pub async fn list_audit(&self, r: v1::ListAuditRequest) -> Result<v1::ListAuditResponse> {
        self.unary(
            "list audit".into(),
            self.call_timeout,
            r,
            |mut c, r| async move { c.list_audit(r).await },
        )
        .await
    }

    pub async fn list_locks(&self) -> Result<v1::ListLocksResponse> {
        self.unary(
            "list locks".into(),
            self.call_timeout,
            v1::ListLocksRequest {},
            |mut c, r| async move { c.list_locks(r).await },
        )
        .await
    }

    /// ReleaseLock with an empty holder and token 0: an operator's forced release of whoever
    /// holds `name`.
    pub async fn force_release_lock(&self, name: String) -> Result<v1::ReleaseLockResponse> {
        let what = format!("release lock {name}");
        let r = v1::ReleaseLockRequest {
            name,
            holder: String::new(),
            token: 0,
        };
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.release_lock(r).await
            })
            .await;
        answer.map_err(|e| with_hint(e, tonic::Code::NotFound, "`leasehold locks ls` lists them"))
    }

    /// AcquireLock: take (or, for the same holder, extend) a lock.
    pub async fn acquire_lock(&self, r: v1::AcquireLockRequest) -> Result<v1::AcquireLockResponse> {
        let what = format!("acquire lock {}", r.name);
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.acquire_lock(r).await
        })
        .await
    }

    /// RenewLock: extend a holding, fenced by (holder, token).
    pub async fn renew_lock(&self, r: v1::RenewLockRequest) -> Result<v1::RenewLockResponse> {
        let what = format!("renew lock {}", r.name);
        self.unary(what, self.call_timeout, r, |mut c, r| async move {
            c.renew_lock(r).await
        })
        .await
    }

    /// ReleaseLock by its holder, fenced by (holder, token).
    pub async fn release_held_lock(
        &self,
        r: v1::ReleaseLockRequest,
    ) -> Result<v1::ReleaseLockResponse> {
        let what = format!("release lock {}", r.name);
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.release_lock(r).await
            })
            .await;
        answer.map_err(|e| with_hint(e, tonic::Code::NotFound, "`leasehold locks ls` lists them"))
    }

    /// CreateShardGroup; a group that exists with another count says it cannot change.
    pub async fn create_shard_group(
        &self,
        name: String,
        count: u32,
    ) -> Result<v1::CreateShardGroupResponse> {
        let what = format!("create shard group {name}");
        let r = v1::CreateShardGroupRequest { name, count };
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.create_shard_group(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::FailedPrecondition,
                "a group keeps the count it was created with (`leasehold shards ls` shows it)",
            )
        })
    }

    /// Leases whose renewal is overdue in the database; `threshold_ms` 0 = the agent's revoke
    /// threshold.
    pub async fn list_suspect_leases(
        &self,
        threshold_ms: i64,
    ) -> Result<v1::ListSuspectLeasesResponse> {
        self.unary(
            "list suspect leases".into(),
            self.call_timeout,
            v1::ListSuspectLeasesRequest {
                threshold_ms,
                limit: 0,
            },
            |mut c, r| async move { c.list_suspect_leases(r).await },
        )
        .await
    }

    pub async fn list_shard_groups(&self) -> Result<v1::ListShardGroupsResponse> {
        self.unary(
            "list shard groups".into(),
            self.call_timeout,
            v1::ListShardGroupsRequest {},
            |mut c, r| async move { c.list_shard_groups(r).await },
        )
        .await
    }

    pub async fn list_shards(&self, group: String) -> Result<v1::ListShardsResponse> {
        let what = format!("list the shards of group {group}");
        let r = v1::ListShardsRequest { group };
        let answer = self
            .unary(what, self.call_timeout, r, |mut c, r| async move {
                c.list_shards(r).await
            })
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::NotFound,
                "`leasehold shards ls` lists the groups",
            )
        })
    }

    /// Opens the Watch stream. Only the opening has a deadline; the stream itself runs until
    /// either side ends it (no `grpc-timeout` is sent, or the agent would cut the stream).
    pub async fn watch(&self) -> Result<Streaming<v1::WatchUpdate>> {
        let what = "watch".to_owned();
        let mut client = self.client.clone();
        let opened =
            tokio::time::timeout(self.call_timeout, client.watch(v1::WatchRequest {})).await;
        match opened {
            Ok(Ok(response)) => {
                self.answered.store(true, Ordering::Relaxed);
                Ok(response.into_inner())
            }
            Ok(Err(status)) if diagnose::is_timeout(&status) => {
                Err(diagnose::no_answer(what, self.call_timeout))
            }
            Ok(Err(status)) => Err(self.status_error(what, status)),
            Err(_) => Err(Error::rpc(
                what,
                Status::deadline_exceeded(format!(
                    "the stream did not start within {}",
                    humantime::format_duration(self.call_timeout)
                )),
            )),
        }
    }

    /// GetStats; an agent older than `leasehold stats` says so.
    pub async fn get_stats(&self) -> Result<v1::GetStatsResponse> {
        let answer = self
            .unary(
                "get the queue stats".into(),
                self.call_timeout,
                v1::GetStatsRequest {},
                |mut c, r| async move { c.get_stats(r).await },
            )
            .await;
        answer.map_err(|e| {
            with_hint(
                e,
                tonic::Code::Unimplemented,
                "this agent is older than `leasehold stats`; upgrade it",
            )
        })
    }
}

/// `err` with `hint` added when it is a status of `code` that has no hint yet.
fn with_hint(err: Error, code: tonic::Code, hint: &str) -> Error {
    match err {
        Error::Rpc {
            what,
            status,
            hint: None,
        } if status.code() == code => Error::Rpc {
            what,
            status,
            hint: Some(hint.to_owned()),
        },
        other => other,
    }
}

/// The endpoint for `settings`: address, timeouts, keepalive, TLS.
fn endpoint(settings: &Settings) -> Result<Endpoint> {
    let uri = settings.addr.uri(settings.tls.is_some());
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|e| {
            Error::usage(format!(
                "--agent {}: {}",
                crate::output::text::shown(&settings.addr.given, 100),
                cause_chain(&e)
            ))
        })?
        .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")))
        .map_err(|e| Error::usage(format!("user agent: {}", cause_chain(&e))))?
        .connect_timeout(settings.call_timeout)
        .tcp_keepalive(Some(KEEPALIVE_INTERVAL))
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
    let Some(tls) = &settings.tls else {
        return Ok(endpoint);
    };
    let mut config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&tls.ca_pem))
        .timeout(settings.call_timeout);
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    endpoint
        .tls_config(config)
        .map_err(|e| Error::usage(format!("TLS settings: {}", cause_chain(&e))))
}

/// `show the policy of type email`, `set the global policy`.
fn policy_what(verb: &str, task_type: &str) -> String {
    if task_type.is_empty() {
        format!("{verb} the global policy")
    } else {
        format!("{verb} the policy of type {task_type}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interceptor_adds_the_header() {
        let value: Option<MetadataValue<Ascii>> = "Bearer t".parse().ok();
        let mut interceptor = TokenInterceptor(value);
        let request = interceptor.call(Request::new(())).ok();
        let header = request
            .as_ref()
            .and_then(|r| r.metadata().get(AUTHORIZATION))
            .and_then(|v| v.to_str().ok());
        assert_eq!(header, Some("Bearer t"));
        let mut none = TokenInterceptor(None);
        let request = none.call(Request::new(())).ok();
        assert!(request.is_some_and(|r| r.metadata().get(AUTHORIZATION).is_none()));
    }
}
