//! [`Agent`]: one running agent process — its services, their start and stop order, and the
//! graceful shutdown of DESIGN §4.
//!
//! Start order: connect (main pool, heartbeat connection) → register in `agents` (the per-start
//! lease owner id) → gRPC (Watch aggregator and server) → completer → heartbeat → registry →
//! maintenance → keeper (locks, shards) → scheduler → metrics and backlog gauges (when
//! listening) → notifier (or the SQLite file watcher) → idle (`--exit-when-idle`) → claimer;
//! each in one supervised set.
//!
//! Stop order (SIGTERM, `--exit-when-idle`, the gRPC `Drain` call, or the library's shutdown
//! token):
//! ```text
//!   1. stop claiming (claimer, notifier); registry says `draining`, `/readyz` answers 503
//!   2. wait up to shutdown_timeout for executions, heartbeats still renewing
//!   3. ask the rest to stop (ctx.cancelled()); after stop_grace drop them
//!   4. completer writes the last completions and releases the unfinished leases, so another
//!      agent starts them at once instead of after the TTL
//!   5. close the Watch streams (a last `closing` update) and stop the gRPC server, bounded;
//!      stop heartbeat, maintenance (resign leadership) and registry; mark the agent stopped
//! ```
//! The force token (a second signal) skips the waits: executions are dropped at once and their
//! leases released in one statement, bounded by a short timeout.
//!
//! Supervision: the services run in one `JoinSet` ([`Services`]). One that returns or panics
//! before it was asked to stop has failed: the agent logs it, stops claiming, skips the drain,
//! asks its executions to stop (drops them at once if the heartbeat is the one that failed:
//! no lease can be proven any more), releases their leases, runs the rest of the stop order,
//! and `run` returns [`AgentError::Service`] (`leasehold-agent run` exits 1).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold_shared::store::postgres::{PgStore, PgStoreOptions, Pooler};
use leasehold_shared::store::sqlite::{SqliteStore, SqliteStoreOptions, is_sqlite_url};
use leasehold_shared::store::{AgentRegisterParams, AnyStore, ReleaseParams};
use leasehold_shared::{AgentId, InputLimits, Store};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::book::LeaseBook;
use super::claimer::Claimer;
use super::completer::Completer;
use super::core::{Core, Finished, PolicyCache, RunSummary, Stats};
use super::events::{LifecycleListener, Listeners};
use super::heartbeat::Heartbeat;
use super::idle::IdleWatcher;
use super::maintenance::Maintenance;
use super::metrics::{Metrics, Readiness, serve_metrics};
use super::notifier::Notifier;
use super::queue::StoreQueue;
use super::readiness::AgentReadiness;
use super::registry::Registry;
use super::renewal::Connect;
use super::scheduler::Scheduler;
use super::settings::RuntimeSettings;
pub use super::supervisor::ServiceFailed;
use super::supervisor::{COMPLETER, HEARTBEAT, Services};
use crate::error::{AgentError, Result};
use crate::grpc::GrpcOptions;
use crate::handler::{HandlerRegistry, StopReason};

/// Builds an [`Agent`].
pub struct AgentBuilder {
    settings: RuntimeSettings,
    handlers: HandlerRegistry,
    listeners: Listeners,
    metrics_listener: Option<TcpListener>,
    grpc: Option<GrpcOptions>,
    limits: InputLimits,
    pooler: Pooler,
    notify_url: Option<String>,
}

impl AgentBuilder {
    pub fn new(settings: RuntimeSettings, handlers: HandlerRegistry) -> Self {
        Self {
            settings,
            handlers,
            listeners: Listeners::default(),
            metrics_listener: None,
            grpc: None,
            limits: InputLimits::default(),
            pooler: Pooler::Auto,
            notify_url: None,
        }
    }

    /// Whether PostgreSQL is reached through a transaction pooler such as PgBouncer (by
    /// default recognised as the agent connects; see the README's "Running in production").
    pub fn pooler(mut self, pooler: Pooler) -> Self {
        self.pooler = pooler;
        self
    }

    /// LISTEN for wake-ups on this direct PostgreSQL connection rather than the database URL's
    /// (which, through a transaction pooler, cannot carry them: the agent polls without it).
    pub fn notify_database_url(mut self, url: impl Into<String>) -> Self {
        self.notify_url = Some(url.into());
        self
    }

    /// Adds a lifecycle listener.
    pub fn listener(mut self, listener: impl LifecycleListener) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Serves Prometheus metrics on this listener while the agent runs.
    pub fn metrics_listener(mut self, listener: TcpListener) -> Self {
        self.metrics_listener = Some(listener);
        self
    }

    /// Serves the gRPC API (Watch and the operator actions) while the agent runs; the
    /// listener's address is what the registry publishes.
    pub fn grpc(mut self, options: GrpcOptions) -> Self {
        self.grpc = Some(options);
        self
    }

    /// Connects to the database at `url` (`postgres://…`, or `sqlite://PATH`, created and
    /// migrated when new) and registers the agent.
    pub async fn connect(self, url: &str) -> Result<Agent> {
        self.settings.validate()?;
        if self.handlers.is_empty() {
            return Err(AgentError::NoHandlers);
        }
        let mut settings = self.settings;
        if let Some(grpc) = &self.grpc {
            let addr = grpc.local_addr()?;
            // A wildcard address is no use to a client on another host: publish the host name.
            settings.grpc_address = Some(if addr.ip().is_unspecified() {
                format!("{}:{}", super::settings::default_name(), addr.port())
            } else {
                addr.to_string()
            });
        }
        let server_timeout = (settings.lease_ttl / 2).max(Duration::from_secs(1));
        let database = if is_sqlite_url(url) {
            let store = SqliteStore::connect(
                url,
                SqliteStoreOptions {
                    max_connections: settings.max_connections,
                    busy_timeout: server_timeout,
                    acquire_timeout: server_timeout,
                    limits: self.limits,
                },
            )
            .await
            .map_err(|e| {
                AgentError::store_while(format!("opening the SQLite database {url}"), e)
            })?;
            // An embedded file is created on first use: give it its schema (safe when several
            // agents start on one file at once).
            store.migrate().await.map_err(|e| {
                AgentError::store_while("applying migrations to the SQLite database", e)
            })?;
            AnyStore::Sqlite(store)
        } else {
            let store = PgStore::connect(
                url,
                PgStoreOptions {
                    max_connections: settings.max_connections,
                    acquire_timeout: server_timeout,
                    limits: self.limits,
                    application_name: format!("leasehold-agent {}", settings.name),
                    statement_timeout: Some(server_timeout),
                    // A half-open transaction holding lease rows would block renewals: end it
                    // well within the TTL.
                    idle_in_transaction_timeout: server_timeout,
                    follow_failover: true,
                    pooler: self.pooler,
                    notify_url: self.notify_url.clone(),
                },
            )
            // The store's error says "cannot connect to the database: …" itself.
            .await?;
            AnyStore::Postgres(store)
        };
        let main = database.store();
        // The heartbeat's connection goes the same way as the pool's, without finding out again.
        let pooler = match &database {
            AnyStore::Postgres(store) if store.behind_pooler() => Pooler::Transaction,
            _ => Pooler::None,
        };
        let connect: Connect<Arc<dyn Store>> = {
            let url = url.to_string();
            let limits = self.limits;
            let name = settings.name.clone();
            let timeout = settings.renew_timeout();
            let sqlite = is_sqlite_url(&url);
            Arc::new(move || {
                let url = url.clone();
                let name = name.clone();
                Box::pin(async move {
                    if sqlite {
                        let options = SqliteStoreOptions {
                            max_connections: 1,
                            busy_timeout: timeout,
                            acquire_timeout: timeout,
                            limits,
                        };
                        let store = SqliteStore::connect(&url, options).await?;
                        return Ok(Arc::new(store) as Arc<dyn Store>);
                    }
                    let options = PgStoreOptions {
                        max_connections: 1,
                        acquire_timeout: timeout,
                        limits,
                        application_name: format!("leasehold-agent {name} heartbeat"),
                        statement_timeout: Some(timeout),
                        idle_in_transaction_timeout: timeout.max(Duration::from_millis(500)),
                        // Opened again after each failure, on the server usable then.
                        follow_failover: false,
                        pooler,
                        notify_url: None,
                    };
                    let store = PgStore::connect(&url, options).await?;
                    Ok(Arc::new(store) as Arc<dyn Store>)
                })
            })
        };
        const HEARTBEAT_CONN: &str = "opening the heartbeat connection";
        let heartbeat_conn = (connect)()
            .await
            .map_err(|e| AgentError::store_while(HEARTBEAT_CONN, e))?;
        let types = self.handlers.task_types();
        let record = main
            .agent_register(AgentRegisterParams {
                name: settings.name.clone(),
                host: super::settings::default_name(),
                pid: std::process::id(),
                grpc_address: settings.grpc_address.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                task_types: types.clone(),
                local_concurrency: settings.concurrency,
                alive_for: settings.alive_for(),
            })
            .await
            .map_err(|e| AgentError::store_while("registering the agent", e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let core = Arc::new(Core {
            book: Arc::new(LeaseBook::new(settings.concurrency)),
            settings,
            id: record.id,
            store: main,
            database,
            handlers: self.handlers,
            types,
            listeners: self.listeners,
            metrics: Arc::new(Metrics::new()),
            policies: PolicyCache::default(),
            history: Default::default(),
            wake: tokio::sync::Notify::new(),
            wakes: std::sync::atomic::AtomicU64::new(0),
            finished: tx,
            stats: Stats::default(),
            draining: std::sync::atomic::AtomicBool::new(false),
            feed: Arc::new(super::feed::Feed::default()),
            leading: std::sync::atomic::AtomicBool::new(false),
            leader_term: std::sync::atomic::AtomicI64::new(0),
            schedules_changed: tokio::sync::Notify::new(),
            drain: CancellationToken::new(),
            holdings: super::resources::Holdings::default(),
        });
        core.metrics
            .register_types(core.types.iter().map(|t| t.as_str()));
        core.metrics.database(true);
        if let Ok(policies) = core.store.policy_list().await {
            core.policies.replace(policies);
        }
        super::resources::join_groups(&core).await?;
        tracing::info!(agent.id = core.id.as_str(), types = ?core.types.iter().map(|t| t.as_str()).collect::<Vec<_>>(), concurrency = core.settings.concurrency, "agent registered");
        Ok(Agent {
            core,
            rx,
            connect,
            heartbeat_conn,
            metrics_listener: self.metrics_listener,
            grpc: self.grpc,
        })
    }
}

/// Changes a running agent: local concurrency, and what it reports.
#[derive(Clone)]
pub struct AgentControl {
    core: Arc<Core>,
}

impl AgentControl {
    /// The lease owner id of this process start.
    pub fn id(&self) -> &AgentId {
        &self.core.id
    }

    /// Takes lock `name` for this agent: renewed by its heartbeat (with the agent's lease TTL)
    /// until released or dropped, fenced by its token. `None` while someone else holds it.
    pub async fn lock(
        &self,
        name: &str,
        options: super::resources::LockOptions,
    ) -> Result<Option<super::resources::HeldLock>> {
        super::resources::lock(&self.core, name, options).await
    }

    /// The shards this agent owns now, updated at once at every change (acquired, given back,
    /// lost): `changed().await` on it to be told.
    pub fn shards(&self) -> tokio::sync::watch::Receiver<super::resources::ShardOwnership> {
        self.core.holdings.subscribe()
    }

    /// Resizes the local concurrency limit; takes effect at the next claim. Running
    /// executions above a lowered limit finish normally.
    pub fn set_concurrency(&self, limit: u32) -> Result<()> {
        use leasehold_shared::domain::policy::MAX_LOCAL_CONCURRENCY;
        if !(1..=MAX_LOCAL_CONCURRENCY).contains(&limit) {
            return Err(AgentError::Invalid(format!(
                "concurrency must be within 1..={MAX_LOCAL_CONCURRENCY}"
            )));
        }
        self.core.book.set_limit(limit);
        self.core.wake_claimers();
        Ok(())
    }

    /// The local concurrency limit.
    pub fn concurrency(&self) -> usize {
        self.core.book.limit()
    }

    /// Executions running now.
    pub fn executing(&self) -> usize {
        self.core.book.executing()
    }

    /// Leases held now (executing plus completing).
    pub fn held(&self) -> usize {
        self.core.book.len()
    }

    /// What this run has done so far (the counters of [`RunSummary`]).
    pub fn summary(&self) -> RunSummary {
        self.core.stats.summary(&self.core.id, "running")
    }

    /// The agent's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.core.metrics)
    }
}

/// A connected, registered agent, ready to run.
pub struct Agent {
    core: Arc<Core>,
    rx: mpsc::UnboundedReceiver<Finished>,
    connect: Connect<Arc<dyn Store>>,
    heartbeat_conn: Arc<dyn Store>,
    metrics_listener: Option<TcpListener>,
    grpc: Option<GrpcOptions>,
}

/// Tokens that end [`Agent::run`].
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    /// Graceful: drain, then release.
    pub graceful: CancellationToken,
    /// Forced: drop executions now and release their leases.
    pub force: CancellationToken,
}

impl Agent {
    pub fn control(&self) -> AgentControl {
        AgentControl {
            core: Arc::clone(&self.core),
        }
    }

    /// The lease owner id of this process start.
    pub fn id(&self) -> &AgentId {
        &self.core.id
    }

    /// Creates or updates the schedules declared in the configuration (a restart never
    /// re-enables one an operator disabled); the leader fires them once the agent runs.
    pub async fn declare_schedules(
        &self,
        schedules: &[leasehold_shared::domain::Schedule],
    ) -> Result<()> {
        super::scheduler::declare(&self.core, schedules)
            .await
            .map_err(|e| AgentError::store_while("declaring the configured schedules", e))
    }

    /// Runs until `shutdown` (or, with `exit_when_idle`, until nothing is left), then drains.
    pub async fn run(self, shutdown: Shutdown) -> Result<RunSummary> {
        let Agent {
            core,
            rx,
            connect,
            heartbeat_conn,
            metrics_listener,
            grpc,
        } = self;
        let completer_stop = CancellationToken::new();
        let heartbeat_stop = CancellationToken::new();
        let background_stop = CancellationToken::new();
        let claim_stop = CancellationToken::new();
        let keeper_stop = CancellationToken::new();
        let idle = CancellationToken::new();
        let run_started = Instant::now();
        // Cancelled by a second signal, or by a service failure.
        let forced = shutdown.force.child_token();
        let mut services = Services::new(forced.clone());
        let failed = services.failed();

        // First, so a server that cannot start leaves nothing running.
        let grpc = match grpc {
            Some(options) => Some(crate::grpc::start(&core, options)?),
            None => None,
        };
        let completer = Completer {
            core: Arc::clone(&core),
            rx,
            queue: StoreQueue::completions(&core.store),
        };
        services.spawn(
            COMPLETER,
            &[&completer_stop],
            completer.run(completer_stop.clone()),
        );
        let heartbeat = Heartbeat::service(
            Arc::clone(&core),
            StoreQueue::renew_connect(&connect),
            StoreQueue::renewals(&heartbeat_conn),
        );
        services.spawn(
            HEARTBEAT,
            &[&heartbeat_stop],
            heartbeat.run(heartbeat_stop.clone()),
        );
        let registry = Registry {
            core: Arc::clone(&core),
        };
        services.spawn(
            "registry",
            &[&background_stop],
            registry.run(background_stop.clone()),
        );
        let maintenance = Maintenance {
            core: Arc::clone(&core),
            queue: StoreQueue::maintenance(&core.store),
        };
        services.spawn(
            "maintenance",
            &[&background_stop],
            maintenance.run(background_stop.clone()),
        );
        let keeper = super::resources::Keeper::service(Arc::clone(&core), Arc::clone(&connect));
        services.spawn("keeper", &[&keeper_stop], keeper.run(keeper_stop.clone()));
        let scheduler = Scheduler {
            core: Arc::clone(&core),
        };
        services.spawn(
            "scheduler",
            &[&background_stop],
            scheduler.run(background_stop.clone()),
        );
        let sampler = super::sampler::Sampler {
            core: Arc::clone(&core),
        };
        services.spawn(
            "sampler",
            &[&background_stop],
            sampler.run(background_stop.clone()),
        );
        if let Some(listener) = metrics_listener {
            // `/readyz` turns 503 (draining) at step 1 of the stop order below; the listener
            // itself closes with the background services at step 5.
            let readiness = Arc::new(Readiness::new(Arc::new(AgentReadiness {
                core: Arc::clone(&core),
            })));
            let serve = serve_metrics(
                listener,
                Arc::clone(&core.metrics),
                readiness,
                background_stop.clone(),
            );
            services.spawn("metrics", &[&background_stop], async move {
                if let Err(error) = serve.await {
                    tracing::error!(%error, "the metrics listener failed");
                }
            });
            // The leader's backlog gauges (none on the other agents).
            let backlog = super::backlog::Backlog {
                core: Arc::clone(&core),
            };
            services.spawn(
                "backlog",
                &[&background_stop],
                backlog.run(background_stop.clone()),
            );
        }
        // LISTEN on PostgreSQL; SQLite has no NOTIFY: its stand-in watches the file's change
        // counter. The store's wake source owns either.
        let notifier = Notifier {
            core: Arc::clone(&core),
            source: core.database.wake_source(),
        };
        services.spawn("notifier", &[&claim_stop], notifier.run(claim_stop.clone()));
        // With --exit-when-idle the idle watcher ends the run when nothing of our types is
        // left (or the idle timeout passes); the claimer tells it when a claim came back short.
        let idle_check = core
            .settings
            .exit_when_idle
            .then(|| Arc::new(tokio::sync::Notify::new()));
        let timed_out = Arc::new(AtomicBool::new(false));
        if let Some(check) = &idle_check {
            let watcher = IdleWatcher {
                core: Arc::clone(&core),
                check: Arc::clone(check),
                idle: idle.clone(),
                timed_out: Arc::clone(&timed_out),
                started: run_started,
            };
            services.spawn(
                "idle",
                &[&claim_stop, &idle],
                watcher.run(claim_stop.clone()),
            );
        }
        let claimer = Claimer {
            core: Arc::clone(&core),
            queue: StoreQueue::claims(&core.store),
            idle_check,
        };
        services.spawn("claimer", &[&claim_stop], claimer.run(claim_stop.clone()));

        let ended_by = tokio::select! {
            biased;
            _ = failed.cancelled() => "failed",
            _ = shutdown.graceful.cancelled() => "signal",
            _ = shutdown.force.cancelled() => "forced",
            _ = idle.cancelled() => if timed_out.load(Ordering::SeqCst) { "idle_timeout" } else { "idle" },
            _ = core.drain.cancelled() => "drain",
        };
        let started = Instant::now();
        tracing::info!(
            ended_by,
            executing = core.book.executing(),
            held = core.book.len(),
            "stopping: no more claims"
        );

        // 1. Stop claiming.
        core.draining.store(true, Ordering::Relaxed);
        claim_stop.cancel();
        services.join(&["claimer", "notifier", "idle"]).await;
        Registry::beat(&core).await;

        // 2. Drain while heartbeating (not after a failure: `forced` is cancelled then).
        if !wait_for(&forced, core.settings.shutdown_timeout, || {
            core.book.executing() == 0
        })
        .await
            && !forced.is_cancelled()
        {
            tracing::warn!(executing = core.book.executing(), timeout = ?core.settings.shutdown_timeout, "shutdown timeout: stopping the remaining executions");
        }

        // 3. Ask what still runs to stop; handlers get stop_grace, then are dropped.
        // A failed heartbeat proves no lease any more: drop the executions at once. After any
        // other failure the heartbeat still renews while they get stop_grace.
        let heartbeat_failed = services.failure().is_some_and(|f| f.service == HEARTBEAT);
        let drop_now = heartbeat_failed || shutdown.force.is_cancelled();
        for stop in core.book.executing_stops() {
            if drop_now {
                stop.force(StopReason::Shutdown);
            } else {
                stop.stop(StopReason::Shutdown);
            }
        }
        let stop_wait = core.settings.stop_grace + Duration::from_secs(1);
        let stopped = if drop_now || !failed.is_cancelled() {
            wait_for(&forced, stop_wait, || core.book.executing() == 0).await
        } else {
            // `forced` is already cancelled by the failure: wait on the force signal alone.
            wait_for(&shutdown.force, stop_wait, || core.book.executing() == 0).await
        };
        if !stopped {
            for stop in core.book.executing_stops() {
                stop.force(StopReason::Shutdown);
            }
        }

        // 4. Last completions and releases. After a failure that left the heartbeat and the
        // completer running, `forced` is already cancelled but the leases are still proven:
        // wait on the force signal alone, so work that finished is completed, not released
        // to run again.
        let completer_failed = services.failure().is_some_and(|f| f.service == COMPLETER);
        if failed.is_cancelled() && !drop_now && !completer_failed {
            wait_for(&shutdown.force, core.settings.lease_ttl, || {
                core.book.len() == 0
            })
            .await;
        } else {
            let write_wait = if forced.is_cancelled() {
                Duration::from_secs(2)
            } else {
                core.settings.lease_ttl
            };
            wait_for(&forced, write_wait, || core.book.len() == 0).await;
        }
        completer_stop.cancel();
        services.join(&[COMPLETER]).await;
        let leftover = core.book.drain_all();
        if !leftover.is_empty() {
            for (_, lease) in &leftover {
                lease.stop.force(StopReason::Shutdown);
            }
            let leases = leftover.iter().map(|(id, l)| (*id, l.epoch)).collect();
            let released = tokio::time::timeout(
                Duration::from_secs(3),
                core.store.lease_release_many(ReleaseParams {
                    owner: core.id.clone(),
                    leases,
                }),
            )
            .await;
            match released {
                Ok(Ok(out)) => {
                    // Counted and reported as the completer's releases are.
                    for (id, lease) in &leftover {
                        if out.fenced.contains(id) {
                            core.fenced("release", *id, lease.epoch);
                            continue;
                        }
                        core.released(*id, lease.epoch, &lease.task_type, lease.started.elapsed());
                    }
                    tracing::info!(
                        released = out.released.len(),
                        fenced = out.fenced.len(),
                        "released the remaining leases"
                    );
                }
                _ => tracing::warn!(
                    leases = leftover.len(),
                    "could not release the remaining leases; they are recovered after their TTL"
                ),
            }
        }

        // The state of the run's types, now that this agent's completions and releases are in.
        let idle_summary = if core.settings.exit_when_idle {
            let read = tokio::time::timeout(
                Duration::from_secs(10),
                super::idle::final_summary(
                    &core,
                    run_started.elapsed(),
                    timed_out.load(Ordering::SeqCst),
                ),
            )
            .await;
            match read {
                Ok(Ok(summary)) => Some(summary),
                Ok(Err(error)) => {
                    tracing::error!(%error, "could not read the final state of our task types");
                    None
                }
                Err(_) => {
                    tracing::error!("reading the final state of our task types timed out");
                    None
                }
            }
        } else {
            None
        };

        // 5. Resource leases go back (so others take them at once), then the Watch streams
        // and the gRPC server, background services, then the registry row.
        keeper_stop.cancel();
        services.join(&["keeper"]).await;
        if let Some(grpc) = grpc {
            grpc.stop().await;
        }
        heartbeat_stop.cancel();
        background_stop.cancel();
        services
            .join(&[
                HEARTBEAT,
                "maintenance",
                "scheduler",
                "registry",
                "metrics",
                "backlog",
            ])
            .await;
        match tokio::time::timeout(
            Duration::from_secs(3),
            core.store.agent_mark_stopped(core.id.clone()),
        )
        .await
        {
            Ok(Ok(())) => {}
            _ => tracing::warn!("could not mark the agent stopped"),
        }
        core.database.close().await;
        let mut summary = core.stats.summary(&core.id, ended_by);
        summary.idle = idle_summary;
        if let Some(failure) = services.failure() {
            tracing::error!(took = ?started.elapsed(), summary = ?summary, service = failure.service, "agent stopped after a service failed");
            return Err(AgentError::from(failure));
        }
        tracing::info!(took = ?started.elapsed(), summary = ?summary, "agent stopped");
        Ok(summary)
    }
}

/// Polls `done` every 10 ms until it holds (true), `timeout` passes or `cancel` fires (false).
async fn wait_for(cancel: &CancellationToken, timeout: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline || cancel.is_cancelled() {
            return false;
        }
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
}
