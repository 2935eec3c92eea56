//! Keeping `exec` programs out of their agent: the agent process is made non-dumpable.
//!
//! A program runs with a cleared environment, but as the agent's uid and as the agent's child.
//! Without more, it could read `/proc/$PPID/environ` (the agent's whole environment: the
//! database URL with its password, tokens) or `/proc/$PPID/mem`, or `ptrace` the agent. So the
//! first `exec` handler of a process calls `prctl(PR_SET_DUMPABLE, 0)` on it. The kernel then
//! makes the agent's `/proc/<pid>/*` files owned by root and refuses same-uid `ptrace` and
//! `/proc/<pid>/{environ,mem,maps,fd,…}` access to anyone but root (`CAP_SYS_PTRACE`); the
//! `/proc/<pid>` directory itself keeps the process's uid, which
//! `leasehold_shared::local::current_uid` reads, so the socket's owner checks still work. The
//! attribute belongs to the whole process, however many runtimes or threads it has; it is
//! reset to dumpable at `execve`, so the programs themselves are ordinary processes.
//!
//! ```text
//!   ExecHandler::new ─▶ once per process: prctl(PR_SET_DUMPABLE, 0)
//!                         ok ──▶ /proc/<agent>/environ, mem: root only; ptrace: root only
//!                         err ─▶ warn, carry on (the program could read the agent's secrets)
//! ```
//!
//! Side effects, for the operator: a process with `exec` enabled (an agent, or the console's
//! `leasehold demo`) writes no core dump, and tools of its own user that read its `/proc`
//! entries (`gdb -p`, `strace -p`, `lsof`, `/proc/<pid>/environ`) need root. `/proc/<pid>/cmdline`
//! stays readable by every user: secrets belong in the environment or a file, never in flags.
//! A root agent gains nothing from this: its programs run as root and may read anything.
//!
//! When things fail: `prctl` failing (it cannot for this option, unless a seccomp filter
//! forbids the call) is logged as a warning once and the agent runs on unprotected; it never
//! stops the agent.

use std::sync::Once;

use nix::sys::prctl::set_dumpable;

/// Makes this process non-dumpable, the first time it is called; later calls do nothing.
pub(super) fn protect_agent() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| match set_dumpable(false) {
        Ok(()) => tracing::debug!(
            "exec enabled: this process is now non-dumpable (no core dumps; exec programs \
             cannot read its /proc files or ptrace it)"
        ),
        Err(errno) => tracing::warn!(
            error = %errno,
            "exec enabled, but prctl(PR_SET_DUMPABLE, 0) failed: exec programs running as this \
             user may read this process's environment (/proc/<pid>/environ) and memory"
        ),
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use nix::sys::prctl::get_dumpable;

    use super::*;
    use crate::handlers::ExecHandler;

    #[test]
    fn an_exec_handler_makes_its_process_non_dumpable_for_good() {
        let _handler = ExecHandler::default();
        assert!(!get_dumpable().unwrap());
        protect_agent();
        assert!(!get_dumpable().unwrap());
    }
}
