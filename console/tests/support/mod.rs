//! A fake agent for the `leasehold` binary's tests: a real tonic server of
//! `leasehold.v1.AgentService` on a loopback port (plaintext, TLS or mutual TLS) whose answers
//! are canned per task id, so each test can drive one path of the client over real gRPC.
//!
//! Canned tasks: 1 succeeded, 2 dead (smtp_timeout), 3 running for its first two reads then
//! succeeded, 4 running forever, 404 not found, 666 an unspecified status (bad wire data).
//! Canned schedules: `nightly` (enabled, last task succeeded) and `broken` (disabled, its last
//! firing failed); adding `taken` is ALREADY_EXISTS, a cron of `bad` INVALID_ARGUMENT, type
//! `orphan` comes with a warning; any other name is NOT_FOUND for rm, enable, disable, trigger.
//! Canned locks: `deploy/prod` (held by ci-job-17, token 7; a forced release frees it),
//! `cache:warm` (free: a release changes nothing); any other lock is NOT_FOUND. Canned shard
//! group: `orders` (4 shards: three owned, one free; two members); creating `orders` with 4
//! is a no-op, with another count FAILED_PRECONDITION; any other group is created; listing
//! another group's shards is NOT_FOUND.
//! Canned overview: types `email.send` (rate limit 50/1s, 12 used) and `noop` (none), global
//! rate limit 1000/1m (812 used). SetRateLimit answers with the limit asked for; the previous
//! limit of `email.send` is 20/1s, of anything else none; type `unknown` is INVALID_ARGUMENT.
//! `email.send` also sheds after 30s (4 shed in the last minute). SetShedAfter answers with
//! the setting asked for; the previous one of `email.send` is 1m, of anything else none; type
//! `unknown` is INVALID_ARGUMENT, type `lonely` comes with a warning. SetBreaker answers with
//! the breaker asked for; the previous one of `email.send` is 5 failures within 1m, cooldown
//! 30s, of anything else none; `unknown` and `lonely` as for SetShedAfter.
//! Tokens: when a token is configured, `operator` may do everything, `viewer` only reads.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Output;
use std::sync::{Arc, Mutex};

use leasehold_proto::v1;
use leasehold_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use tokio_stream::Stream;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

pub const NOW_MS: i64 = 1_764_588_000_000;

/// How the fake serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Plain,
    Tls,
    MutualTls,
}

/// How Watch behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WatchMode {
    /// Snapshot, one delta update, then a closing update; the stream ends OK.
    #[default]
    Closing,
    /// Snapshot, then nothing until the client goes away.
    Hang,
    /// Snapshot, then RESOURCE_EXHAUSTED (a watcher dropped for falling behind).
    Dropped,
}

#[derive(Default)]
struct State {
    /// Every call, as `method id-or-detail`, in order.
    calls: Vec<String>,
    /// Authorization header values seen.
    auth: Vec<Option<String>>,
    reads: HashMap<i64, usize>,
}

#[derive(Clone, Default)]
pub struct Fake {
    token: Option<String>,
    watch: WatchMode,
    state: Arc<Mutex<State>>,
}

pub struct Running {
    pub addr: SocketAddr,
    pub fake: Fake,
}

impl Fake {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    pub fn with_watch(mut self, mode: WatchMode) -> Self {
        self.watch = mode;
        self
    }

    pub fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn auth(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().auth.clone()
    }

    fn record<T>(&self, request: &Request<T>, call: String, action: bool) -> Result<(), Status> {
        let auth = request
            .metadata()
            .get(leasehold_proto::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut state = self.state.lock().unwrap();
        state.calls.push(call);
        state.auth.push(auth.clone());
        let Some(token) = &self.token else {
            return Ok(());
        };
        match auth.as_deref().and_then(|a| a.strip_prefix("Bearer ")) {
            Some(t) if t == token => Ok(()),
            Some("viewer") if action => Err(Status::permission_denied(
                "viewer token: operator role needed",
            )),
            Some("viewer") => Ok(()),
            _ => Err(Status::unauthenticated("missing or unknown token")),
        }
    }

    /// Serves on a fresh loopback port.
    pub async fn start(self, transport: Transport) -> Running {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut builder = Server::builder();
        if transport != Transport::Plain {
            let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(
                fixture("server.pem"),
                fixture("server.key"),
            ));
            if transport == Transport::MutualTls {
                tls = tls.client_ca_root(Certificate::from_pem(fixture("ca.pem")));
            }
            builder = builder.tls_config(tls).unwrap();
        }
        let router = builder.add_service(AgentServiceServer::new(self.clone()));
        tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
        Running { addr, fake: self }
    }
}

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap()
}

/// A task in a given state.
pub fn task(id: i64, status: v1::TaskStatus) -> v1::Task {
    let finished = matches!(
        status,
        v1::TaskStatus::Succeeded | v1::TaskStatus::Dead | v1::TaskStatus::Cancelled
    );
    v1::Task {
        id,
        task_type: "noop".into(),
        payload_json: "{}".into(),
        priority: 0,
        status: status as i32,
        attempt: 1,
        max_attempts: 3,
        lease_owner: "fake#1".into(),
        lease_epoch: 1,
        available_at_ms: NOW_MS - 60_000,
        created_at_ms: NOW_MS - 60_000,
        finished_at_ms: if finished { NOW_MS - 1_000 } else { 0 },
        last_error: (status == v1::TaskStatus::Dead).then(|| v1::TaskError {
            code: "smtp_timeout".into(),
            message: "connection timed out".into(),
            retryable: true,
        }),
        updated_at_ms: NOW_MS - 1_000,
        started_at_ms: NOW_MS - 50_000,
        ..Default::default()
    }
}

fn lease(task_id: i64) -> v1::Lease {
    v1::Lease {
        task_id,
        task_type: "noop".into(),
        epoch: 1,
        owner: "fake#1".into(),
        attempt: 1,
        started_at_ms: NOW_MS - 5_000,
        lease_until_ms: NOW_MS + 15_000,
        heartbeat_at_ms: NOW_MS - 1_000,
        ..Default::default()
    }
}

/// A canned schedule.
pub fn schedule(name: &str) -> v1::Schedule {
    let broken = name == "broken";
    v1::Schedule {
        name: name.into(),
        cron: "0 0 2 * * *".into(),
        time_zone: "UTC".into(),
        task_type: "noop".into(),
        payload_json: "{}".into(),
        priority: 0,
        max_attempts: 3,
        max_attempts_in_force: 3,
        enabled: !broken,
        missed: "skip".into(),
        catch_up_max: 1,
        next_fire_at_ms: if broken { 0 } else { NOW_MS + 30_000 },
        last_fired_at_ms: NOW_MS - 60_000,
        last_task_id: if broken { 0 } else { 41 },
        last_task_status: if broken {
            0
        } else {
            v1::TaskStatus::Succeeded as i32
        },
        last_error: if broken {
            "no agent handles type noop".into()
        } else {
            String::new()
        },
        created_at_ms: NOW_MS - 86_400_000,
        updated_at_ms: NOW_MS - 86_400_000,
        description: "at 02:00:00".into(),
    }
}

fn known_schedule(name: &str) -> Result<v1::Schedule, Status> {
    match name {
        "nightly" | "broken" => Ok(schedule(name)),
        _ => Err(Status::not_found(format!("no schedule {name}"))),
    }
}

fn update(seq: u64) -> v1::WatchUpdate {
    v1::WatchUpdate {
        now_ms: NOW_MS + seq as i64,
        seq,
        dropped_events: 0,
        agent_id: "fake#1".into(),
        ..Default::default()
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::WatchUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for Fake {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<v1::WatchRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        self.record(&request, "watch".into(), false)?;
        let mut snapshot = update(0);
        snapshot.snapshot = Some(v1::Snapshot {
            leases: vec![lease(4)],
            stats: Some(v1::AgentStats {
                active: 1,
                local_limit: 10,
                state: "running".into(),
                ..Default::default()
            }),
            resources: vec![],
        });
        let mut delta = update(1);
        delta.deltas = vec![
            v1::Delta {
                kind: Some(v1::delta::Kind::LeaseAcquired(lease(5))),
            },
            v1::Delta {
                kind: Some(v1::delta::Kind::LeaseReleased(v1::LeaseReleased {
                    task_id: 4,
                    epoch: 1,
                    outcome: "succeeded".into(),
                    ..Default::default()
                })),
            },
        ];
        let mut closing = update(2);
        closing.closing = true;
        let stream: WatchStream = match self.watch {
            WatchMode::Closing => Box::pin(tokio_stream::iter(vec![
                Ok(snapshot),
                Ok(delta),
                Ok(closing),
            ])),
            WatchMode::Hang => Box::pin(tokio_stream::StreamExt::chain(
                tokio_stream::iter(vec![Ok(snapshot)]),
                tokio_stream::pending(),
            )),
            WatchMode::Dropped => Box::pin(tokio_stream::iter(vec![
                Ok(snapshot),
                Err(Status::resource_exhausted("watcher fell behind")),
            ])),
        };
        Ok(Response::new(stream))
    }

    async fn list_tasks(
        &self,
        request: Request<v1::ListTasksRequest>,
    ) -> Result<Response<v1::ListTasksResponse>, Status> {
        let r = request.get_ref();
        let call = format!(
            "list_tasks statuses={:?} type={} before={} limit={}",
            r.statuses, r.task_type, r.before_id, r.limit
        );
        self.record(&request, call, false)?;
        Ok(Response::new(v1::ListTasksResponse {
            tasks: vec![
                task(2, v1::TaskStatus::Dead),
                task(1, v1::TaskStatus::Succeeded),
            ],
            next_before_id: 1,
            now_ms: NOW_MS,
        }))
    }

    async fn get_task(
        &self,
        request: Request<v1::GetTaskRequest>,
    ) -> Result<Response<v1::GetTaskResponse>, Status> {
        let id = request.get_ref().id;
        self.record(&request, format!("get_task {id}"), false)?;
        let reads = {
            let mut state = self.state.lock().unwrap();
            let n = state.reads.entry(id).or_default();
            *n += 1;
            *n
        };
        let t = match id {
            1 => task(1, v1::TaskStatus::Succeeded),
            2 => task(2, v1::TaskStatus::Dead),
            3 if reads <= 2 => task(3, v1::TaskStatus::Running),
            3 => task(3, v1::TaskStatus::Succeeded),
            4 => task(4, v1::TaskStatus::Running),
            // Its second attempt runs (no row for it yet), with progress and a long payload.
            5 => v1::Task {
                attempt: 2,
                lease_epoch: 2,
                payload_json: format!(r#"{{"note":"{}"}}"#, "n".repeat(150)),
                progress_json: r#"{"total":28,"processed":26,"succeeded":25,"failed":1}"#.into(),
                ..task(5, v1::TaskStatus::Running)
            },
            666 => task(666, v1::TaskStatus::Unspecified),
            _ => return Err(Status::not_found(format!("no task {id}"))),
        };
        Ok(Response::new(v1::GetTaskResponse {
            task: Some(t),
            attempts: vec![v1::Attempt {
                epoch: 1,
                attempt: 1,
                agent: "fake#1".into(),
                started_at_ms: NOW_MS - 50_000,
                finished_at_ms: if id == 5 { NOW_MS - 40_000 } else { 0 },
                outcome: if id == 5 {
                    "lease_expired".into()
                } else {
                    String::new()
                },
                ..Default::default()
            }],
            why_not_running: String::new(),
            blockers: vec![],
            now_ms: NOW_MS,
        }))
    }

    async fn list_agents(
        &self,
        request: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        self.record(&request, "list_agents".into(), false)?;
        Ok(Response::new(v1::ListAgentsResponse {
            agents: vec![v1::AgentInfo {
                id: "fake#1".into(),
                name: "fake".into(),
                state: "running".into(),
                heartbeat_at_ms: NOW_MS - 2_000,
                local_concurrency: 10,
                leader: true,
                version: "0.1.0".into(),
                grpc_address: "127.0.0.1:7070".into(),
                ..Default::default()
            }],
            now_ms: NOW_MS,
            answered_by: "fake#1".into(),
            caller_role: "operator".into(),
            // An older agent: the word alone.
            role: 0,
            stale_after_ms: 30_000,
            leader: Some(v1::LeaderInfo {
                owner: "fake#1".into(),
                term: 4,
                elected_at_ms: NOW_MS - 120_000,
                lease_until_ms: NOW_MS + 15_000,
                heartbeat_at_ms: NOW_MS - 1_000,
                held: true,
            }),
        }))
    }

    async fn get_overview(
        &self,
        request: Request<v1::GetOverviewRequest>,
    ) -> Result<Response<v1::GetOverviewResponse>, Status> {
        self.record(&request, "get_overview".into(), false)?;
        let fill = |starts, period_ms, used| v1::RateFill {
            limit: Some(v1::RateLimit { starts, period_ms }),
            used,
        };
        Ok(Response::new(v1::GetOverviewResponse {
            types: vec![
                v1::TypeSummary {
                    task_type: "email.send".into(),
                    queued: 12,
                    running: 3,
                    rate: Some(fill(50, 1_000, 12)),
                    shed_after_ms: Some(30_000),
                    shed_last_minute: 4,
                    per_key_limit: Some(2),
                    ..Default::default()
                },
                v1::TypeSummary {
                    task_type: "noop".into(),
                    ..Default::default()
                },
            ],
            global_rate: Some(fill(1000, 60_000, 812)),
            now_ms: NOW_MS,
            ..Default::default()
        }))
    }

    async fn enqueue(
        &self,
        request: Request<v1::EnqueueRequest>,
    ) -> Result<Response<v1::EnqueueResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "enqueue {} {} prio={}",
                r.task_type, r.payload_json, r.priority
            ),
            true,
        )?;
        if r.task_type == "unknown" {
            return Err(Status::invalid_argument(
                "task_type: no agent serves type unknown",
            ));
        }
        let created = r.idempotency_key != "seen";
        let mut t = task(42, v1::TaskStatus::Queued);
        t.task_type = r.task_type;
        t.payload_json = if r.payload_json.is_empty() {
            "{}".into()
        } else {
            r.payload_json
        };
        t.priority = r.priority;
        t.idempotency_key = r.idempotency_key;
        t.concurrency_key = r.concurrency_key;
        Ok(Response::new(v1::EnqueueResponse {
            id: 42,
            created,
            task: Some(t),
            ..Default::default()
        }))
    }

    async fn cancel(
        &self,
        request: Request<v1::CancelRequest>,
    ) -> Result<Response<v1::CancelResponse>, Status> {
        let r = *request.get_ref();
        self.record(
            &request,
            format!("cancel {} wait={} wait_ms={}", r.id, r.wait, r.wait_ms),
            true,
        )?;
        let (outcome, status) = match r.id {
            7 => ("cancelled", v1::TaskStatus::Cancelled),
            8 => ("succeeded", v1::TaskStatus::Succeeded),
            9 => {
                return Err(Status::failed_precondition(
                    "task 9 is already finished (dead)",
                ));
            }
            _ => return Err(Status::not_found(format!("no task {}", r.id))),
        };
        Ok(Response::new(v1::CancelResponse {
            outcome: outcome.into(),
            status: status as i32,
            holder: String::new(),
            ..Default::default()
        }))
    }

    async fn run_now(
        &self,
        request: Request<v1::RunNowRequest>,
    ) -> Result<Response<v1::RunNowResponse>, Status> {
        let id = request.get_ref().id;
        self.record(&request, format!("run_now {id}"), true)?;
        Err(Status::unimplemented(
            "the fake agent does not run tasks now",
        ))
    }

    async fn delete_task(
        &self,
        request: Request<v1::DeleteTaskRequest>,
    ) -> Result<Response<v1::DeleteTaskResponse>, Status> {
        let id = request.get_ref().id;
        self.record(&request, format!("delete {id}"), true)?;
        Err(Status::unimplemented(
            "the fake agent does not delete tasks",
        ))
    }

    async fn count_tasks(
        &self,
        _: Request<v1::CountTasksRequest>,
    ) -> Result<Response<v1::CountTasksResponse>, Status> {
        Err(Status::unimplemented("the fake agent does not count tasks"))
    }

    async fn requeue(
        &self,
        request: Request<v1::RequeueRequest>,
    ) -> Result<Response<v1::RequeueResponse>, Status> {
        let id = request.get_ref().id;
        self.record(&request, format!("requeue {id}"), true)?;
        match id {
            2 => Ok(Response::new(v1::RequeueResponse {
                previous: v1::TaskStatus::Dead as i32,
            })),
            _ => Err(Status::not_found(format!("no task {id}"))),
        }
    }

    async fn requeue_dead(
        &self,
        request: Request<v1::RequeueDeadRequest>,
    ) -> Result<Response<v1::RequeueDeadResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "requeue_dead type={} all={} dry_run={}",
                r.task_type, r.all, r.dry_run
            ),
            true,
        )?;
        Ok(Response::new(v1::RequeueDeadResponse {
            count: 3,
            dry_run: r.dry_run,
            ids: if r.dry_run { vec![9, 8, 7] } else { vec![] },
            next_before_id: 0,
        }))
    }

    async fn purge_dead(
        &self,
        request: Request<v1::PurgeDeadRequest>,
    ) -> Result<Response<v1::PurgeDeadResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "purge_dead type={} all={} dry_run={}",
                r.task_type, r.all, r.dry_run
            ),
            true,
        )?;
        Ok(Response::new(v1::PurgeDeadResponse {
            count: 3,
            dry_run: r.dry_run,
            ids: if r.dry_run { vec![9, 8, 7] } else { vec![] },
            next_before_id: 0,
        }))
    }

    async fn set_concurrency(
        &self,
        request: Request<v1::SetConcurrencyRequest>,
    ) -> Result<Response<v1::SetConcurrencyResponse>, Status> {
        use v1::set_concurrency_request::Scope;
        let r = request.get_ref().clone();
        let per_key = if r.per_key { " per_key" } else { "" };
        self.record(
            &request,
            format!(
                "set_concurrency {:?} {} {}{per_key}",
                r.scope, r.limit, r.unlimited
            ),
            true,
        )?;
        // A type's per-key limit: email.send has 2; a type nobody serves is warned about.
        let (previous, warnings) = match &r.scope {
            Some(Scope::TaskType(t)) if r.per_key && t == "email.send" => (Some(2), vec![]),
            Some(Scope::TaskType(t)) if r.per_key && t == "lonely" => {
                (None, vec!["no live agent handles type lonely".to_owned()])
            }
            _ => (None, vec![]),
        };
        Ok(Response::new(v1::SetConcurrencyResponse {
            limit: (!r.unlimited).then_some(r.limit),
            previous,
            warnings,
        }))
    }

    async fn set_rate_limit(
        &self,
        request: Request<v1::SetRateLimitRequest>,
    ) -> Result<Response<v1::SetRateLimitResponse>, Status> {
        use v1::set_rate_limit_request::Scope;
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "set_rate_limit {:?} {:?} clear={}",
                r.scope,
                r.limit.map(|l| (l.starts, l.period_ms)),
                r.clear
            ),
            true,
        )?;
        let previous = match &r.scope {
            Some(Scope::TaskType(t)) if t == "unknown" => {
                return Err(Status::invalid_argument(
                    "task_type: no agent serves type unknown",
                ));
            }
            Some(Scope::TaskType(t)) if t == "email.send" => Some(v1::RateLimit {
                starts: 20,
                period_ms: 1_000,
            }),
            _ => None,
        };
        Ok(Response::new(v1::SetRateLimitResponse {
            limit: r.limit,
            previous,
            warnings: Vec::new(),
        }))
    }

    async fn set_shed_after(
        &self,
        request: Request<v1::SetShedAfterRequest>,
    ) -> Result<Response<v1::SetShedAfterResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "set_shed_after {} {} clear={}",
                r.task_type, r.shed_after_ms, r.clear
            ),
            true,
        )?;
        let previous_ms = match r.task_type.as_str() {
            "unknown" => {
                return Err(Status::invalid_argument(
                    "task_type: no agent serves type unknown",
                ));
            }
            "email.send" => Some(60_000),
            _ => None,
        };
        let warnings = if r.task_type == "lonely" {
            vec!["no live agent handles type lonely".to_owned()]
        } else {
            vec![]
        };
        Ok(Response::new(v1::SetShedAfterResponse {
            shed_after_ms: (!r.clear).then_some(r.shed_after_ms),
            previous_ms,
            warnings,
        }))
    }

    async fn set_breaker(
        &self,
        request: Request<v1::SetBreakerRequest>,
    ) -> Result<Response<v1::SetBreakerResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "set_breaker {} {} {} {} clear={}",
                r.task_type, r.failures, r.within_ms, r.cooldown_ms, r.clear
            ),
            true,
        )?;
        let previous = match r.task_type.as_str() {
            "unknown" => {
                return Err(Status::invalid_argument(
                    "task_type: no agent serves type unknown",
                ));
            }
            "email.send" => Some(v1::Breaker {
                failures: 5,
                within_ms: 60_000,
                cooldown_ms: 30_000,
            }),
            _ => None,
        };
        let warnings = if r.task_type == "lonely" {
            vec!["no live agent handles type lonely".to_owned()]
        } else {
            vec![]
        };
        Ok(Response::new(v1::SetBreakerResponse {
            breaker: (!r.clear).then_some(v1::Breaker {
                failures: r.failures,
                within_ms: r.within_ms,
                cooldown_ms: r.cooldown_ms,
            }),
            previous,
            warnings,
        }))
    }

    async fn pause_type(
        &self,
        request: Request<v1::PauseTypeRequest>,
    ) -> Result<Response<v1::PauseTypeResponse>, Status> {
        self.record(
            &request,
            format!("pause {}", request.get_ref().task_type),
            true,
        )?;
        Ok(Response::new(v1::PauseTypeResponse {
            changed: true,
            warnings: vec![],
        }))
    }

    async fn resume_type(
        &self,
        request: Request<v1::ResumeTypeRequest>,
    ) -> Result<Response<v1::ResumeTypeResponse>, Status> {
        self.record(
            &request,
            format!("resume {}", request.get_ref().task_type),
            true,
        )?;
        Ok(Response::new(v1::ResumeTypeResponse { changed: false }))
    }

    async fn drain(
        &self,
        request: Request<v1::DrainRequest>,
    ) -> Result<Response<v1::DrainResponse>, Status> {
        self.record(&request, "drain".into(), true)?;
        Ok(Response::new(v1::DrainResponse { held: 3 }))
    }

    async fn list_schedules(
        &self,
        request: Request<v1::ListSchedulesRequest>,
    ) -> Result<Response<v1::ListSchedulesResponse>, Status> {
        self.record(&request, "list_schedules".into(), false)?;
        Ok(Response::new(v1::ListSchedulesResponse {
            schedules: vec![schedule("broken"), schedule("nightly")],
            now_ms: NOW_MS,
        }))
    }

    async fn add_schedule(
        &self,
        request: Request<v1::AddScheduleRequest>,
    ) -> Result<Response<v1::AddScheduleResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "add_schedule {} cron={} tz={} type={} payload={} missed={} max={} disabled={} \
                 replace={}",
                r.name,
                r.cron,
                r.time_zone,
                r.task_type,
                r.payload_json,
                r.missed,
                r.catch_up_max,
                r.disabled,
                r.replace
            ),
            true,
        )?;
        if r.cron == "bad" {
            return Err(Status::invalid_argument(
                "cron: \"bad\" is not a cron expression (6 fields)",
            ));
        }
        if r.name == "taken" && !r.replace {
            return Err(Status::already_exists(
                "schedule taken exists with another definition",
            ));
        }
        let mut s = schedule(&r.name);
        s.cron = r.cron;
        s.task_type = r.task_type.clone();
        s.enabled = !r.disabled;
        let warnings = if r.task_type == "orphan" {
            vec!["no live agent handles task type orphan".into()]
        } else {
            vec![]
        };
        Ok(Response::new(v1::AddScheduleResponse {
            schedule: Some(s),
            outcome: if r.replace { "replaced" } else { "created" }.into(),
            warnings,
            ..Default::default()
        }))
    }

    async fn remove_schedule(
        &self,
        request: Request<v1::RemoveScheduleRequest>,
    ) -> Result<Response<v1::RemoveScheduleResponse>, Status> {
        let name = request.get_ref().name.clone();
        self.record(&request, format!("remove_schedule {name}"), true)?;
        Ok(Response::new(v1::RemoveScheduleResponse {
            schedule: Some(known_schedule(&name)?),
        }))
    }

    async fn set_schedule_enabled(
        &self,
        request: Request<v1::SetScheduleEnabledRequest>,
    ) -> Result<Response<v1::SetScheduleEnabledResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!("set_schedule_enabled {} {}", r.name, r.enabled),
            true,
        )?;
        let mut s = known_schedule(&r.name)?;
        let changed = s.enabled != r.enabled;
        s.enabled = r.enabled;
        Ok(Response::new(v1::SetScheduleEnabledResponse {
            schedule: Some(s),
            changed,
        }))
    }

    async fn trigger_schedule(
        &self,
        request: Request<v1::TriggerScheduleRequest>,
    ) -> Result<Response<v1::TriggerScheduleResponse>, Status> {
        let name = request.get_ref().name.clone();
        self.record(&request, format!("trigger_schedule {name}"), true)?;
        let s = known_schedule(&name)?;
        let mut t = task(77, v1::TaskStatus::Queued);
        t.idempotency_key = format!("schedule:{name}:manual:2025-12-01T11:20:00.000Z");
        Ok(Response::new(v1::TriggerScheduleResponse {
            task: Some(t),
            schedule: Some(s),
        }))
    }

    async fn list_locks(
        &self,
        request: Request<v1::ListLocksRequest>,
    ) -> Result<Response<v1::ListLocksResponse>, Status> {
        self.record(&request, "list_locks".into(), false)?;
        Ok(Response::new(v1::ListLocksResponse {
            locks: vec![lock("cache:warm"), lock("deploy/prod")],
            now_ms: NOW_MS,
        }))
    }

    async fn acquire_lock(
        &self,
        request: Request<v1::AcquireLockRequest>,
    ) -> Result<Response<v1::AcquireLockResponse>, Status> {
        let name = request.get_ref().name.clone();
        self.record(&request, format!("acquire_lock {name}"), true)?;
        Err(Status::unimplemented("not canned"))
    }

    async fn renew_lock(
        &self,
        request: Request<v1::RenewLockRequest>,
    ) -> Result<Response<v1::RenewLockResponse>, Status> {
        let name = request.get_ref().name.clone();
        self.record(&request, format!("renew_lock {name}"), true)?;
        Err(Status::unimplemented("not canned"))
    }

    async fn release_lock(
        &self,
        request: Request<v1::ReleaseLockRequest>,
    ) -> Result<Response<v1::ReleaseLockResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!(
                "release_lock {} holder={:?} token={}",
                r.name, r.holder, r.token
            ),
            true,
        )?;
        match r.name.as_str() {
            "deploy/prod" => {
                let mut after = lock("deploy/prod");
                after.owner = String::new();
                after.state = "free".into();
                after.lease_until_ms = 0;
                Ok(Response::new(v1::ReleaseLockResponse {
                    released: true,
                    lock: Some(after),
                }))
            }
            "cache:warm" => Ok(Response::new(v1::ReleaseLockResponse {
                released: false,
                lock: Some(lock("cache:warm")),
            })),
            other => Err(Status::not_found(format!("no lock {other}"))),
        }
    }

    async fn create_shard_group(
        &self,
        request: Request<v1::CreateShardGroupRequest>,
    ) -> Result<Response<v1::CreateShardGroupResponse>, Status> {
        let r = request.get_ref().clone();
        self.record(
            &request,
            format!("create_shard_group {} {}", r.name, r.count),
            true,
        )?;
        if r.name == "orders" {
            if r.count != 4 {
                return Err(Status::failed_precondition(format!(
                    "shard group orders exists with 4 shards, not {}",
                    r.count
                )));
            }
            return Ok(Response::new(v1::CreateShardGroupResponse {
                group: Some(orders(4)),
                created: false,
            }));
        }
        Ok(Response::new(v1::CreateShardGroupResponse {
            group: Some(v1::ShardGroup {
                name: r.name,
                shard_count: r.count,
                created_at_ms: NOW_MS,
                ..Default::default()
            }),
            created: true,
        }))
    }

    async fn list_shard_groups(
        &self,
        request: Request<v1::ListShardGroupsRequest>,
    ) -> Result<Response<v1::ListShardGroupsResponse>, Status> {
        self.record(&request, "list_shard_groups".into(), false)?;
        Ok(Response::new(v1::ListShardGroupsResponse {
            groups: vec![orders(4)],
            now_ms: NOW_MS,
        }))
    }

    async fn list_shards(
        &self,
        request: Request<v1::ListShardsRequest>,
    ) -> Result<Response<v1::ListShardsResponse>, Status> {
        let group = request.get_ref().group.clone();
        self.record(&request, format!("list_shards {group}"), false)?;
        if group != "orders" {
            return Err(Status::not_found(format!("no shard group {group}")));
        }
        let shard = |n: u32, owner: &str| v1::Shard {
            shard: n,
            owner: owner.into(),
            token: i64::from(n) + 1,
            lease_until_ms: if owner.is_empty() { 0 } else { NOW_MS + 9_000 },
            heartbeat_at_ms: if owner.is_empty() { 0 } else { NOW_MS - 1_000 },
            acquired_at_ms: if owner.is_empty() { 0 } else { NOW_MS - 60_000 },
            state: if owner.is_empty() { "free" } else { "held" }.into(),
            moves_last_hour: 0,
            ..Default::default()
        };
        let member = |agent: &str, shards: u32| v1::ShardMember {
            agent: agent.into(),
            joined_at_ms: NOW_MS - 60_000,
            heartbeat_at_ms: NOW_MS - 1_000,
            lease_until_ms: NOW_MS + 14_000,
            state: "live".into(),
            shards,
            ..Default::default()
        };
        Ok(Response::new(v1::ListShardsResponse {
            group: Some(orders(4)),
            shards: vec![
                shard(0, "fake#1"),
                shard(1, "fake#2"),
                shard(2, "fake#1"),
                shard(3, ""),
            ],
            members: vec![member("fake#1", 2), member("fake#2", 1)],
            now_ms: NOW_MS,
        }))
    }

    async fn list_audit(
        &self,
        request: Request<v1::ListAuditRequest>,
    ) -> Result<Response<v1::ListAuditResponse>, Status> {
        self.record(&request, "list_audit".into(), true)?;
        Ok(Response::new(v1::ListAuditResponse {
            entries: vec![v1::AuditEntry {
                id: 7,
                at_ms: NOW_MS - 1_000,
                actor: "alice".into(),
                role: "operator".into(),
                action: "cancel".into(),
                target: "task:42".into(),
                result: "applied".into(),
                count: 1,
                ..Default::default()
            }],
            next_before_id: 0,
        }))
    }

    async fn list_suspect_leases(
        &self,
        request: Request<v1::ListSuspectLeasesRequest>,
    ) -> Result<Response<v1::ListSuspectLeasesResponse>, Status> {
        self.record(&request, "list_suspect_leases".into(), false)?;
        Ok(Response::new(v1::ListSuspectLeasesResponse {
            leases: Vec::new(),
            now_ms: NOW_MS,
            threshold_ms: 3_000,
            truncated: false,
        }))
    }

    async fn get_policy(
        &self,
        request: Request<v1::GetPolicyRequest>,
    ) -> Result<Response<v1::GetPolicyResponse>, Status> {
        self.record(&request, "get_policy".into(), false)?;
        Ok(Response::new(v1::GetPolicyResponse {
            task_type: request.into_inner().task_type,
            ..Default::default()
        }))
    }

    async fn set_policy(
        &self,
        request: Request<v1::SetPolicyRequest>,
    ) -> Result<Response<v1::SetPolicyResponse>, Status> {
        self.record(&request, "set_policy".into(), true)?;
        Ok(Response::new(v1::SetPolicyResponse::default()))
    }

    async fn get_stats(
        &self,
        request: Request<v1::GetStatsRequest>,
    ) -> Result<Response<v1::GetStatsResponse>, Status> {
        self.record(&request, "get_stats".into(), false)?;
        let window = |minutes: u64, succeeded, failed_attempts| v1::StatsWindow {
            window_ms: minutes * 60_000,
            succeeded,
            failed_attempts,
            ..Default::default()
        };
        Ok(Response::new(v1::GetStatsResponse {
            queued: 12,
            running: 3,
            oldest_waiting_ms: Some(95_000),
            windows: vec![window(1, 60, 2), window(15, 900, 20), window(60, 3600, 41)],
            now_ms: NOW_MS,
            ..Default::default()
        }))
    }

    async fn get_history(
        &self,
        request: Request<v1::GetHistoryRequest>,
    ) -> Result<Response<v1::GetHistoryResponse>, Status> {
        self.record(&request, "get_history".into(), false)?;
        Ok(Response::new(v1::GetHistoryResponse::default()))
    }
}

/// A canned lock.
pub fn lock(name: &str) -> v1::ResourceLease {
    let held = name == "deploy/prod";
    v1::ResourceLease {
        name: name.into(),
        owner: if held {
            "ci-job-17".into()
        } else {
            String::new()
        },
        token: if held { 7 } else { 3 },
        lease_until_ms: if held { NOW_MS + 12_000 } else { 0 },
        heartbeat_at_ms: if held { NOW_MS - 3_000 } else { 0 },
        acquired_at_ms: if held { NOW_MS - 60_000 } else { 0 },
        lock_at_least_until_ms: 0,
        lock_at_most_until_ms: 0,
        state: if held { "held" } else { "free" }.into(),
        moves_last_hour: if held { 2 } else { 0 },
        ..Default::default()
    }
}

fn orders(count: u32) -> v1::ShardGroup {
    v1::ShardGroup {
        name: "orders".into(),
        shard_count: count,
        members: 2,
        owned: count.saturating_sub(1),
        moves_last_hour: 1,
        created_at_ms: NOW_MS - 3_600_000,
    }
}

/// Runs the `leasehold` binary with `args` and `env` (and no LEASEHOLD_* from the test's own
/// environment), off the async runtime.
pub async fn leasehold(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        for var in [
            "LEASEHOLD_AGENT",
            "LEASEHOLD_TOKEN",
            "LEASEHOLD_CA",
            "LEASEHOLD_CERT",
            "LEASEHOLD_KEY",
        ] {
            cmd.env_remove(var);
        }
        cmd.args(&args).envs(env).output().unwrap()
    })
    .await
    .unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
