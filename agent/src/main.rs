//! `leasehold-agent`: runs workers against the shared database (`run`), applies migrations
//! (`migrate`), and measures the runtime (`bench`). See [`leasehold_agent::cli`].

fn main() -> std::process::ExitCode {
    leasehold_agent::cli::main_with(None)
}
