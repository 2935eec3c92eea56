//! `leasehold`: the Leasehold console binary. Everything lives in the library
//! (`leasehold_console`); this only hands it the command line and returns its exit code.

// Only the agent's exec spawner may use unsafe (the workspace lint is `deny` for its sake).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    leasehold_console::main_with_args(std::env::args_os())
}
