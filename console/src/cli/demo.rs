//! The flags of `leasehold demo`. What the demo does, and the JSON it prints with
//! `--headless`, is documented on [`super::Command::Demo`].

use std::time::Duration;

use clap::Args;

use super::ConsoleArgs;
use super::values;

/// Agents the demo starts unless `--agents` says otherwise.
pub const DEFAULT_DEMO_AGENTS: u32 = 3;
/// Most agents `--agents` accepts (each is a full runtime with its own connections).
pub const MAX_DEMO_AGENTS: u32 = 16;
/// How long `--headless` runs unless `--duration` says otherwise.
pub const DEFAULT_HEADLESS_DURATION: &str = "20s";
/// Longest `--duration` accepted.
pub const MAX_DEMO_DURATION: Duration = Duration::from_secs(24 * 3600);

/// `leasehold demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Agents to start, each a full agent in this process serving gRPC on a free loopback port.
    #[arg(long, default_value_t = DEFAULT_DEMO_AGENTS, value_name = "N", value_parser = agents)]
    pub agents: u32,

    /// Use this database instead of a fresh ./leasehold-demo.sqlite: sqlite://PATH or
    /// postgres://…; it is migrated and kept as it is (never deleted).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,

    /// Run without a terminal and print a JSON summary at the end instead of opening the
    /// console.
    #[arg(long)]
    pub headless: bool,

    /// How long --headless feeds work before it stops the agents and prints the summary.
    #[arg(
        long,
        requires = "headless",
        default_value = DEFAULT_HEADLESS_DURATION,
        value_parser = duration,
        value_name = "DURATION"
    )]
    pub duration: Duration,

    #[command(flatten)]
    pub console: ConsoleArgs,
}

/// `1..=16`.
fn agents(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of agents, 1 to {MAX_DEMO_AGENTS}"))?;
    if !(1..=MAX_DEMO_AGENTS).contains(&n) {
        return Err(format!("must be 1 to {MAX_DEMO_AGENTS}"));
    }
    Ok(n)
}

/// A duration above zero and at most a day.
fn duration(s: &str) -> Result<Duration, String> {
    let d = values::positive_duration(s)?;
    if d > MAX_DEMO_DURATION {
        return Err("must be at most 1 day".into());
    }
    Ok(d)
}
