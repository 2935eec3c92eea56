//! `leasehold`: the Leasehold console binary. Everything lives in the library
//! (`leasehold_console`); this only hands it the command line and returns its exit code.

fn main() -> std::process::ExitCode {
    leasehold_console::main_with_args(std::env::args_os())
}
