//! Starting real agents for end-to-end tests with test timings: a 2 s lease, 400 ms heartbeat,
//! 1 s grace and 200 ms polls, so a takeover happens within about 3.5 s. [`start_agent`] also
//! waits for the agent to register and returns its gRPC address; [`tokens_config`] writes the
//! config file of an agent with tokens.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::agent::AgentHandle;
use crate::bin::binary;
use crate::db::TestDb;
use crate::grpc::agent_address;
use crate::scratch::scratch_dir;

/// Lease TTL of test agents.
pub const TTL: Duration = Duration::from_secs(2);
/// Grace of test agents.
pub const GRACE: Duration = Duration::from_secs(1);
/// Poll interval of test agents.
pub const POLL: Duration = Duration::from_millis(200);
/// Longest [`start_agent`] waits for an agent to register its gRPC address.
pub const START_WAIT: Duration = Duration::from_secs(60);

/// The flags every test agent gets (later flags given by a test win).
pub fn fast_args() -> Vec<String> {
    [
        "--lease-ttl",
        "2s",
        "--heartbeat",
        "400ms",
        "--grace",
        "1s",
        "--poll-interval",
        "200ms",
        "--shutdown-timeout",
        "5s",
        "--stop-grace",
        "1s",
        "--unserved-after",
        "off",
        // A free port per agent; tests find it in the registry (`agents.grpc_address`).
        "--listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Spawns `bin` (`leasehold-agent` or `leasehold-test-agent`) as `run --database-url url
/// --id name --handlers handlers` with [`fast_args`] and then `extra`.
pub async fn spawn_agent(
    bin: &str,
    url: &str,
    name: &str,
    handlers: &str,
    extra: &[&str],
    envs: Vec<(String, String)>,
) -> anyhow::Result<AgentHandle> {
    let path = binary(bin).await?;
    let mut args: Vec<String> = vec![
        "run".into(),
        "--database-url".into(),
        url.into(),
        "--id".into(),
        name.into(),
        "--handlers".into(),
        handlers.into(),
    ];
    args.extend(fast_args());
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut envs = envs;
    if !envs.iter().any(|(k, _)| k == "RUST_LOG") {
        envs.push(("RUST_LOG".into(), "info,sqlx=warn".into()));
    }
    AgentHandle::spawn(&path, args, envs)
}

/// Spawns the test agent (built-ins plus `ledger`, `hog`, `panic`).
pub async fn spawn_test_agent(
    url: &str,
    name: &str,
    handlers: &str,
    extra: &[&str],
) -> anyhow::Result<AgentHandle> {
    spawn_agent(
        "leasehold-test-agent",
        url,
        name,
        handlers,
        extra,
        Vec::new(),
    )
    .await
}

/// Spawns `leasehold-agent` on `db` (see [`spawn_agent`], no extra environment) and waits up
/// to [`START_WAIT`] until this very process registered: the handle and its agent id.
pub async fn spawn_registered(
    db: &TestDb,
    name: &str,
    handlers: &str,
    extra: &[&str],
) -> anyhow::Result<(AgentHandle, String)> {
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        name,
        handlers,
        extra,
        Vec::new(),
    )
    .await?;
    let id = agent.wait_registered(&db.pool, name, START_WAIT).await?;
    Ok((agent, id))
}

/// Spawns `leasehold-agent` on `db` (see [`spawn_agent`]) and waits until this very process
/// registered and published its gRPC address: the handle and the address.
pub async fn start_agent(
    db: &TestDb,
    name: &str,
    handlers: &str,
    extra: &[&str],
    envs: Vec<(String, String)>,
) -> anyhow::Result<(AgentHandle, String)> {
    let agent = spawn_agent("leasehold-agent", &db.url, name, handlers, extra, envs).await?;
    agent.wait_registered(&db.pool, name, START_WAIT).await?;
    let addr = agent_address(&db.pool, name, START_WAIT).await?;
    Ok((agent, addr))
}

/// A token of an agent's config file: its name, role (`operator` or `viewer`) and secret.
#[derive(Debug, Clone, Copy)]
pub struct ConfigToken<'a> {
    pub name: &'a str,
    pub role: &'a str,
    pub secret: &'a str,
}

impl<'a> ConfigToken<'a> {
    /// An operator token.
    pub fn operator(name: &'a str, secret: &'a str) -> Self {
        Self {
            name,
            role: "operator",
            secret,
        }
    }

    /// A viewer token.
    pub fn viewer(name: &'a str, secret: &'a str) -> Self {
        Self {
            name,
            role: "viewer",
            secret,
        }
    }
}

/// Writes `agent.toml` (mode 0600) giving `tokens` into a new scratch directory named after
/// `prefix`; its path, for `--config`.
pub fn tokens_config(prefix: &str, tokens: &[ConfigToken<'_>]) -> anyhow::Result<PathBuf> {
    let path = scratch_dir(prefix)?.join("agent.toml");
    let text: Vec<String> = tokens
        .iter()
        .map(|t| {
            format!(
                "[[tokens]]\nname = {:?}\nrole = {:?}\nsecret = {:?}\n",
                t.name, t.role, t.secret
            )
        })
        .collect();
    std::fs::write(&path, text.join("\n"))
        .with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", path.display()))?;
    Ok(path)
}
