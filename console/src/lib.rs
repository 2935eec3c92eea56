//! `leasehold`, the Leasehold console: the headless, scriptable commands every CI pipeline and
//! on-call script uses, and the interactive console (`leasehold` without a command).
//!
//! ```text
//! main.rs ─▶ main_with_args ─▶ cli (clap) ─▶ commands::run ─▶ client (gRPC) ─▶ agent
//!                                                  │
//!                                   convert (wire → views) ─▶ output (table | JSON)
//!                   errors ─▶ exit (the one mapping to exit codes)
//! ```
//!
//! Modules: [`cli`] defines the flags and documents each command's output; [`client`] connects
//! (address, TLS, token, timeouts) and wraps each RPC; [`commands`] has one file per command
//! group; [`convert`] turns wire messages into printable views and refuses bad wire data;
//! [`output`] renders tables (80 columns, inert text) and JSON lines; [`exit`] maps every
//! error to an exit code. `demo` runs `leasehold demo`: agents in this process on a fresh
//! SQLite file, a mixed workload, and the console on them. It is the only module that links
//! the agent, behind the default-on cargo feature `demo`: `cargo build -p leasehold-console
//! --no-default-features` builds an operator's `leasehold` without the agent runtime.

// Only the agent's exec spawner may use unsafe (the workspace lint is `deny` for its sake).
#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod client;
pub mod commands;
pub mod convert;
#[cfg(feature = "demo")]
pub mod demo;
pub mod error;
pub mod event;
pub mod exit;
pub mod input;
pub mod output;
pub mod state;
pub mod tui;
pub mod view;

use std::ffi::OsString;
use std::process::ExitCode;

use crate::cli::Cli;
use crate::output::Out;

/// Parses `args` (the program name first) and runs the command; the process's exit code.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::parse_args(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version print on stdout and exit 0; usage errors on stderr, exit 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::USAGE));
        }
    };
    ExitCode::from(run(cli))
}

/// Runs a parsed command line; the exit code.
pub fn run(cli: Cli) -> u8 {
    let mut out = Out::stdio(cli.global.output);
    if let Some(cli::Command::Demo(args)) = &cli.command {
        #[cfg(feature = "demo")]
        return demo::run(&cli, args, &mut out);
        #[cfg(not(feature = "demo"))]
        {
            let _ = args;
            let err = error::Error::usage(
                "this build of leasehold has no demo (it was built without the cargo feature `demo`)",
            );
            out.error(&err);
            return exit::exit_code(&err);
        }
    }
    let Some(command) = cli.command else {
        return console(&cli, &mut out);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(source) => {
            let err = error::Error::Local {
                what: "starting the async runtime".into(),
                source,
            };
            out.error(&err);
            return exit::exit_code(&err);
        }
    };
    match runtime.block_on(commands::run(&cli.global, command, &mut out)) {
        Ok(code) => code,
        Err(err) => {
            out.error(&err);
            exit::exit_code(&err)
        }
    }
}

/// `leasehold` with no command: the interactive console.
fn console(cli: &Cli, out: &mut Out) -> u8 {
    let result = client::settings(&cli.global).and_then(|settings| {
        let no_color =
            cli.console.no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        tui::run(
            settings,
            tui::Options {
                display: state::Settings {
                    color: !no_color,
                    unicode: !cli.console.ascii,
                },
                read_only: cli.console.read_only,
                log_file: cli.console.log_file.clone(),
            },
        )
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            out.error(&err);
            exit::exit_code(&err)
        }
    }
}
