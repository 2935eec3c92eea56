//! `leasehold-agent`: runs workers against the shared database (`run`), applies migrations
//! (`migrate`), and measures the store (`bench`).

use std::process::ExitCode as ProcessExit;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use leasehold_agent::bench::{self, BenchConfig};
use leasehold_agent::exit::ExitCode;
use leasehold_shared::store::postgres::{PgStore, PgStoreOptions};

#[derive(Debug, Parser)]
#[command(
    name = "leasehold-agent",
    version,
    about = "Leasehold agent: claims, runs and heartbeats tasks from a shared database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct DatabaseArgs {
    /// Database URL (postgres://user@host:port/db). Also LEASEHOLD_DATABASE_URL or DATABASE_URL.
    #[arg(long, env = "LEASEHOLD_DATABASE_URL", value_name = "URL")]
    database_url: Option<String>,
}

/// Bad input on the command line: reported plainly, exit code 2.
fn usage_error(field: &'static str, detail: &str) -> anyhow::Error {
    anyhow::Error::new(leasehold_shared::StoreError::Invalid(
        leasehold_shared::ValidationError::Invalid {
            field,
            detail: detail.to_string(),
        },
    ))
}

impl DatabaseArgs {
    fn url(&self) -> Result<String> {
        self.database_url
            .clone()
            .or_else(|| std::env::var("DATABASE_URL").ok())
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                usage_error(
                    "database_url",
                    "give --database-url, LEASEHOLD_DATABASE_URL or DATABASE_URL",
                )
            })
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent (arrives with the agent runtime).
    Run {
        #[command(flatten)]
        db: DatabaseArgs,
    },
    /// Apply database migrations. Safe to run twice and from several hosts at once.
    Migrate {
        #[command(flatten)]
        db: DatabaseArgs,
    },
    /// Measure enqueue and claim+complete throughput and pickup latency on a real database.
    Bench {
        #[command(flatten)]
        db: DatabaseArgs,
        /// Tasks to enqueue and drain.
        #[arg(long, default_value_t = 100_000)]
        tasks: u64,
        /// Concurrent claimers.
        #[arg(long, default_value_t = 2)]
        agents: u32,
        /// Most tasks one claimer holds at once.
        #[arg(long, default_value_t = 100)]
        concurrency: u32,
        /// Tasks per claim statement.
        #[arg(long, default_value_t = 100)]
        batch: u32,
        /// Also drain with batch 1, 10, 100 from 1, 2, 4 claimers.
        #[arg(long)]
        matrix: bool,
        /// Idle pickup samples (one task at a time).
        #[arg(long, default_value_t = 200)]
        latency_samples: u32,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
}

#[tokio::main]
async fn main() -> ProcessExit {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::Usage.into()
            } else {
                ExitCode::Ok.into()
            };
        }
    };
    match run(cli).await {
        Ok(()) => ExitCode::Ok.into(),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::for_error(&error).into()
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run { db: _ } => Err(usage_error(
            "command",
            "`leasehold-agent run` is not available yet: the agent runtime lands next",
        )),
        Command::Migrate { db } => {
            let url = db.url()?;
            let store = PgStore::connect(
                &url,
                PgStoreOptions {
                    max_connections: 1,
                    ..Default::default()
                },
            )
            .await
            .context("connecting to the database")?;
            store.migrate().await.context("applying migrations")?;
            println!("migrations applied");
            Ok(())
        }
        Command::Bench {
            db,
            tasks,
            agents,
            concurrency,
            batch,
            matrix,
            latency_samples,
            output,
        } => {
            let config = BenchConfig {
                database_url: db.url()?,
                tasks,
                agents,
                concurrency,
                batch,
                matrix,
                latency_samples,
            };
            let report = bench::run(&config).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string(&report)?),
                Output::Text => print!("{}", bench::render_text(&report)),
            }
            Ok(())
        }
    }
}
