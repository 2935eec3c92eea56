//! Starting real agents for end-to-end tests with test timings: a 2 s lease, 400 ms heartbeat,
//! 1 s grace and 200 ms polls, so a takeover happens within about 3.5 s.

use std::time::Duration;

use crate::agent::AgentHandle;
use crate::bin::binary;

/// Lease TTL of test agents.
pub const TTL: Duration = Duration::from_secs(2);
/// Grace of test agents.
pub const GRACE: Duration = Duration::from_secs(1);
/// Poll interval of test agents.
pub const POLL: Duration = Duration::from_millis(200);

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
