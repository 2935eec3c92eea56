//! The soak's faults: the fleet (three agents behind their own fault proxies, one operator's
//! agent without), and one fault of each kind on it — an agent killed and restarted, frozen past
//! the TTL, cut off from PostgreSQL; PostgreSQL restarted or crashed; a storm of cancels or
//! requeues through the CLI.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_tests::cli::Cli;
use leasehold_tests::fleet::{GRACE, TTL, spawn_test_agent};
use leasehold_tests::operator::{Answer, Operator};
use leasehold_tests::scenario::spawn_proxied;
use leasehold_tests::{AgentHandle, PgCluster, ProxyMode, TcpProxy, wait_until};
use sqlx::PgPool;

use crate::{CONCURRENCY, FAULTED, HANDLERS, REGISTER, STORM};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    Kill9,
    Stop,
    Reset,
    PgFast,
    PgCrash,
    CancelStorm,
    RequeueStorm,
}

pub(crate) const KINDS: [Fault; 7] = [
    Fault::Kill9,
    Fault::Stop,
    Fault::Reset,
    Fault::PgFast,
    Fault::PgCrash,
    Fault::CancelStorm,
    Fault::RequeueStorm,
];

pub(crate) struct Member {
    pub(crate) name: &'static str,
    pub(crate) proxy: Option<TcpProxy>,
    pub(crate) agent: AgentHandle,
    pub(crate) id: String,
}

pub(crate) struct Fleet {
    pub(crate) url: String,
    pub(crate) members: Vec<Member>,
    /// Processes killed along the way, kept for their logs.
    pub(crate) retired: Vec<AgentHandle>,
}

impl Fleet {
    pub(crate) async fn spawn(
        url: &str,
        pool: &PgPool,
        name: &'static str,
        proxy: Option<&TcpProxy>,
    ) -> (AgentHandle, String) {
        let extra = ["--concurrency", CONCURRENCY];
        let agent = match proxy {
            Some(proxy) => spawn_proxied(url, proxy, name, HANDLERS, &extra, Vec::new()).await,
            None => spawn_test_agent(url, name, HANDLERS, &extra).await,
        }
        .unwrap();
        let id = agent.wait_registered(pool, name, REGISTER).await.unwrap();
        (agent, id)
    }

    pub(crate) fn all_agents(&self) -> impl Iterator<Item = &AgentHandle> {
        self.members.iter().map(|m| &m.agent).chain(&self.retired)
    }

    /// A faulted member, preferably one holding leases (so the fault has something to take).
    async fn victim(&self, pool: &PgPool, rng: &mut fastrand::Rng) -> usize {
        let mut holding = Vec::new();
        for (i, m) in self.members.iter().enumerate() {
            if m.proxy.is_some() && leases_of(pool, &m.id).await > 0 {
                holding.push(i);
            }
        }
        if holding.is_empty() {
            rng.usize(0..FAULTED.len())
        } else {
            holding[rng.usize(0..holding.len())]
        }
    }
}

async fn leases_of(pool: &PgPool, owner: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE lease_owner = $1 AND status IN ('running', 'cancel_requested')",
    )
    .bind(owner)
    .fetch_one(pool)
    .await
    .unwrap()
}

// Operator storms

/// Ledger task ids in one of `statuses`, in id order.
async fn ledger_ids(pool: &PgPool, statuses: &[&str]) -> Vec<i64> {
    let statuses: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
    sqlx::query_scalar(
        "SELECT t.id FROM test_ledger l JOIN tasks t ON t.id = l.task_id \
         WHERE t.status = ANY($1) ORDER BY t.id",
    )
    .bind(&statuses)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Up to `n` of `ids`, picked by `rng`, plus up to `odd` of `others` (which the action refuses).
fn pick(
    rng: &mut fastrand::Rng,
    mut ids: Vec<i64>,
    n: usize,
    mut others: Vec<i64>,
    odd: usize,
) -> Vec<i64> {
    rng.shuffle(&mut ids);
    rng.shuffle(&mut others);
    ids.truncate(n);
    ids.extend(others.into_iter().take(odd));
    ids
}

// ---------------------------------------------------------------------------------------------
// Faults

pub(crate) struct Soak {
    pub(crate) cluster: PgCluster,
    pub(crate) pool: PgPool,
    pub(crate) fleet: Fleet,
    pub(crate) cli: Cli,
    pub(crate) op: Operator,
    /// Tasks a cancel was accepted for, and requeues accepted.
    pub(crate) cancelled: Vec<i64>,
    pub(crate) requeued: u64,
    /// A queued task of a type no agent serves (outside the ledger): a requeue of it is
    /// always refused.
    pub(crate) parked: i64,
    pub(crate) rng: fastrand::Rng,
}

impl Soak {
    async fn storm(&mut self, action: &str, flags: &[&str], ids: &[i64]) {
        let answers = self.op.run(&self.cli, action, flags, ids).await.unwrap();
        for (id, answer) in answers {
            match (action, answer) {
                ("cancel", Answer::Done) => self.cancelled.push(id),
                (_, Answer::Done) => self.requeued += 1,
                _ => {}
            }
        }
    }

    /// Every kind once per round, in a seeded order, a few seconds apart, until `at_least` has
    /// passed and every kind fired; returns how often each fired.
    pub(crate) async fn faults(&mut self, at_least: Duration) -> BTreeMap<Fault, u64> {
        let started = Instant::now();
        let mut fired: BTreeMap<Fault, u64> = BTreeMap::new();
        let mut round: Vec<Fault> = Vec::new();
        while started.elapsed() < at_least || fired.len() < KINDS.len() {
            if round.is_empty() {
                round = KINDS.to_vec();
                self.rng.shuffle(&mut round);
            }
            let fault = round.pop().unwrap();
            // The schedule's pacing, not a wait for anything.
            tokio::time::sleep(Duration::from_millis(self.rng.u64(1000..3000))).await;
            self.inject(fault).await;
            *fired.entry(fault).or_default() += 1;
        }
        fired
    }

    async fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::Kill9 => {
                let i = self.fleet.victim(&self.pool, &mut self.rng).await;
                let m = &mut self.fleet.members[i];
                m.agent.kill9().unwrap();
                m.agent.wait_exit(Duration::from_secs(10)).await.unwrap();
                let (agent, id) =
                    Fleet::spawn(&self.fleet.url, &self.pool, m.name, m.proxy.as_ref()).await;
                m.id = id;
                let dead = std::mem::replace(&mut m.agent, agent);
                self.fleet.retired.push(dead);
            }
            Fault::Stop => {
                let i = self.fleet.victim(&self.pool, &mut self.rng).await;
                let m = &self.fleet.members[i];
                m.agent.stop().unwrap();
                // Frozen past TTL + grace, then until every lease it held is taken back. What
                // it held is read while it is frozen (a count taken before the signal races
                // its last completions); a lease may end as `lease_expired` or, when an
                // operator asked to cancel it, as `cancelled`, so the wait is for none left.
                tokio::time::sleep(TTL + GRACE + Duration::from_millis(500)).await;
                let what = format!("every lease of the frozen {} is taken back", m.id);
                wait_until(&what, Duration::from_secs(30), || {
                    let (pool, id) = (&self.pool, &m.id);
                    async move { Ok(leases_of(pool, id).await == 0) }
                })
                .await
                .unwrap();
                m.agent.cont().unwrap();
            }
            Fault::Reset => {
                let i = self.rng.usize(0..FAULTED.len());
                let proxy = self.fleet.members[i].proxy.as_ref().unwrap();
                proxy.set_mode(ProxyMode::Reset);
                tokio::time::sleep(Duration::from_millis(self.rng.u64(200..1500))).await;
                proxy.set_mode(ProxyMode::Pass);
            }
            Fault::PgFast => self.cluster.restart_fast().await.unwrap(),
            Fault::PgCrash => {
                self.cluster.stop_immediate().await.unwrap();
                self.cluster.start_again().await.unwrap();
            }
            Fault::CancelStorm => {
                let live = ledger_ids(
                    &self.pool,
                    &["queued", "running", "retry_wait", "cancel_requested"],
                )
                .await;
                let done = ledger_ids(&self.pool, &["succeeded"]).await;
                let ids = pick(&mut self.rng, live, STORM, done, 1);
                self.storm("cancel", &["--no-wait"], &ids).await;
            }
            Fault::RequeueStorm => {
                let ended = ledger_ids(&self.pool, &["cancelled", "dead"]).await;
                // A task that may still succeed is never aimed at: requeued after it
                // succeeded, it would run again. The parked task is always refused.
                let ids = pick(&mut self.rng, ended, STORM, vec![self.parked], 1);
                self.storm("requeue", &[], &ids).await;
            }
        }
    }
}
