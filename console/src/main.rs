//! `leasehold`: the operations console (TUI) and its headless commands. This first cut only
//! names what is coming; the console and commands land with their issues.

use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Leasehold console: live leases, slow tasks, renewal failures and dead letters"
)]
struct Cli {
    /// Headless command (enqueue, tasks, cancel, requeue, dlq, demo, …).
    command: Option<String>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let what = cli.command.as_deref().unwrap_or("the console");
    eprintln!(
        "leasehold: {what} is not available yet (it lands with the console and headless-command issues)"
    );
    ExitCode::from(2)
}
