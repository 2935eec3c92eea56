//! The process group an `exec` program leads, and the guard that kills it.
//!
//! The program is spawned with `process_group(0)`, so its pid is its group id and everything it
//! starts (unless it moves itself to another group or session) shares that group. Signals go to
//! the whole group with `killpg`. The guard sends SIGKILL to the group when dropped — when the
//! handler's future is dropped mid-run because the lease was lost, or at the end of a normal run
//! to catch background children — so no process outlives its execution.
//!
//! When things fail: ESRCH (the group is already gone) is expected and ignored; any other error
//! is logged and ignored, since there is nothing better to do from a destructor. The group id is
//! safe to signal while the leader is unreaped or any member lives (Linux does not reuse a pid
//! that is still a process group id); after the leader is reaped and the group is empty the
//! final SIGKILL finds nobody, unless the pid was recycled within the same instant.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A process group to signal, SIGKILLed on drop.
#[derive(Debug)]
pub(super) struct ProcessGroup {
    pgid: Option<Pid>,
}

impl ProcessGroup {
    /// The group led by the process `pid` (`None` once the process is reaped: nothing to do).
    pub(super) fn led_by(pid: Option<u32>) -> Self {
        Self {
            pgid: pid
                .and_then(|pid| i32::try_from(pid).ok())
                .filter(|pid| *pid > 0)
                .map(Pid::from_raw),
        }
    }

    /// Sends `signal` to every process of the group.
    pub(super) fn signal(&self, signal: Signal) {
        let Some(pgid) = self.pgid else { return };
        match killpg(pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(pgid = pgid.as_raw(), signal = signal.as_str(), error = %e, "cannot signal process group");
            }
        }
    }

    /// SIGKILLs the group now; the guard does nothing more when dropped.
    pub(super) fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.pgid = None;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}
