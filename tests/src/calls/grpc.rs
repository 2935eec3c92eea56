//! What the bad-request tests share (TESTING.md T30, T31; DESIGN §10: "bad input changes
//! nothing"): an agent started on a test database, the rows of every state a refused call must
//! leave as they were ([`Fixture`]), and [`refusal`], the check that a call was refused with an
//! allowed code and a message naming the offending field.
//!
//! A case table runs every case, collects the failures each named after its case and fails
//! once with all of them ([`Failures`]), so one broken validation shows every case it breaks.

use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Context, ensure};
use leasehold_proto::v1 as pb;
use sqlx::PgPool;
use tonic::Code;

use crate::agent::AgentHandle;
use crate::db::TestDb;
use crate::factory::{TaskSpec, insert_task};
use crate::fleet::spawn_agent;
use crate::grpc::{Client, agent_address};

/// How long an agent gets to start, answer and stop.
pub const WAIT: Duration = Duration::from_secs(30);
/// The operator token of the agents that take tokens.
pub const OPERATOR: &str = "fuzz-operator-secret-0123456789";
/// The viewer token of the agents that take tokens.
pub const VIEWER: &str = "fuzz-viewer-secret-0123456789ab";
/// The one code a bad field is refused with.
pub const INVALID: &[Code] = &[Code::InvalidArgument];

/// Spawns `leasehold-agent` (handler `noop`) as `name` on `db` and waits until it registered
/// and published its address: the handle and the address.
pub async fn start(
    db: &TestDb,
    name: &str,
    extra: &[&str],
) -> anyhow::Result<(AgentHandle, String)> {
    let agent = spawn_agent("leasehold-agent", &db.url, name, "noop", extra, Vec::new()).await?;
    agent.wait_registered(&db.pool, name, WAIT).await?;
    let addr = agent_address(&db.pool, name, WAIT).await?;
    Ok((agent, addr))
}

/// The agent's local concurrency limit, from the first message of a Watch stream.
pub async fn local_limit(client: &mut Client) -> anyhow::Result<u32> {
    let mut stream = client
        .watch(pb::WatchRequest {})
        .await
        .context("opening a Watch stream")?
        .into_inner();
    let first = stream
        .message()
        .await
        .context("reading the first Watch message")?
        .context("the Watch stream ended before its snapshot")?;
    let stats = first
        .snapshot
        .and_then(|s| s.stats)
        .context("the first Watch message has no snapshot with stats")?;
    Ok(stats.local_limit)
}

/// The agent still runs and still answers.
pub async fn alive(agent: &mut AgentHandle, client: &mut Client) -> anyhow::Result<()> {
    ensure!(agent.is_running(), "the agent is no longer running");
    client
        .list_agents(pb::ListAgentsRequest {})
        .await
        .context("the agent no longer answers")?;
    Ok(())
}

/// Stops the agent with SIGTERM; it must exit cleanly within [`WAIT`].
pub async fn stop(mut agent: AgentHandle) -> anyhow::Result<()> {
    agent.sigterm()?;
    let status = agent.wait_exit(WAIT).await?;
    ensure!(status.success(), "agent exit: {status}");
    Ok(())
}

/// Tasks of type `bad.kind` in every state (one queued, dead, succeeded, running for an hour,
/// cancelled), a `bad.kind` limit of 4 and a global one of 500: the rows a refused call must
/// not touch. The ids a test aims at are kept.
#[derive(Debug, Clone, Copy)]
pub struct Fixture {
    pub queued: i64,
    pub dead: i64,
    pub succeeded: i64,
}

impl Fixture {
    /// Writes the rows into `pool`.
    pub async fn insert(pool: &PgPool) -> anyhow::Result<Fixture> {
        let queued = insert_task(pool, TaskSpec::new("bad.kind", "queued")).await?;
        let dead = insert_task(pool, TaskSpec::new("bad.kind", "dead")).await?;
        let succeeded = insert_task(pool, TaskSpec::new("bad.kind", "succeeded")).await?;
        let running = TaskSpec {
            lease_ttl_secs: Some(3600.0),
            ..TaskSpec::new("bad.kind", "running")
        };
        insert_task(pool, running).await?;
        insert_task(pool, TaskSpec::new("bad.kind", "cancelled")).await?;
        sqlx::query("INSERT INTO policies (scope, max_concurrency) VALUES ('bad.kind', 4)")
            .execute(pool)
            .await
            .context("inserting the bad.kind policy")?;
        sqlx::query("UPDATE policies SET max_concurrency = 500 WHERE scope = '*'")
            .execute(pool)
            .await
            .context("setting the global limit")?;
        Ok(Fixture {
            queued,
            dead,
            succeeded,
        })
    }
}

/// `Ok` when the call failed with one of `codes` and a message containing `field` (`""`
/// matches any message); else what it answered instead.
pub fn refusal<T: Debug>(
    answer: Result<T, tonic::Status>,
    codes: &[Code],
    field: &str,
) -> Result<(), String> {
    let status = match answer {
        Ok(response) => return Err(format!("the call succeeded: {response:?}")),
        Err(status) => status,
    };
    if !codes.contains(&status.code()) {
        return Err(format!(
            "{:?} not in {codes:?}: {}",
            status.code(),
            status.message()
        ));
    }
    if !status.message().contains(field) {
        return Err(format!(
            "the message does not name {field:?}: {}",
            status.message()
        ));
    }
    Ok(())
}

/// Asserts [`refusal`], naming the call `what` when it fails.
#[track_caller]
pub fn assert_refused<T: Debug>(
    what: &str,
    answer: Result<T, tonic::Status>,
    codes: &[Code],
    field: &str,
) {
    let outcome = refusal(answer, codes, field);
    assert!(
        outcome.is_ok(),
        "{what}: {}",
        outcome.err().unwrap_or_default()
    );
}

/// The failed cases of a case table, each named after its case.
#[derive(Debug, Default)]
pub struct Failures {
    checked: usize,
    failed: Vec<String>,
}

impl Failures {
    /// Records the outcome of the case `what`.
    pub fn check(&mut self, what: &str, outcome: Result<(), String>) {
        self.checked += 1;
        if let Err(why) = outcome {
            let what: String = what.chars().take(200).collect();
            self.failed.push(format!("{what}: {why}"));
        }
    }

    /// How many cases were checked.
    pub fn checked(&self) -> usize {
        self.checked
    }

    /// Asserts that no case failed, listing every one that did.
    #[track_caller]
    pub fn assert_none(&self) {
        assert!(
            self.failed.is_empty(),
            "{} of {} cases failed:\n{}",
            self.failed.len(),
            self.checked,
            self.failed.join("\n")
        );
    }
}
