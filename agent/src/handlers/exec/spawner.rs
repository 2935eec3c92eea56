//! Starting `exec` programs so that they die with their agent.
//!
//! A program is started with a parent-death signal: `prctl(PR_SET_PDEATHSIG, SIGKILL)` in the
//! child between `fork` and `exec`. When the agent dies — even by `kill -9`, which runs no code
//! of ours — the kernel SIGKILLs the program, so a task recovered by another agent never runs
//! twice at once because an orphaned program kept going.
//!
//! ```text
//!   handler ──request──▶ spawner thread (one per process, never exits)
//!                          fork ─▶ child: setpgid(0,0) · prctl(PDEATHSIG, SIGKILL)
//!                                         · getppid() == agent pid? ─▶ exec the program
//!                                                            └ no ──▶ _exit (agent already gone)
//!   handler ◀──Child──────┘
//! ```
//!
//! Invariants: the parent-death signal fires when the *thread* that forked exits, not only the
//! process. Runtime worker threads live as long as their runtime, but blocking-pool threads
//! (and workers handed over by `block_in_place`) come and go, and a library user may run the
//! agent on a runtime of their own. So every program is forked by one dedicated thread that is
//! started on first use and never exits: the signal fires only when the agent process dies.
//!
//! When things fail: a program whose agent died between `fork` and `prctl` is not started
//! (the parent check). Only the program itself gets the signal: processes it starts do not
//! inherit it (the kernel clears it at `fork`); they stay in the program's process group, which
//! the handler SIGKILLs at every normal end, but a `kill -9` of the agent leaves them to the
//! service manager (systemd's `KillMode=control-group` kills the whole unit). A spawn whose
//! handler went away meanwhile (lease lost) is killed here, group and all.

use std::io;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;
use nix::unistd::{Pid, getpid, getppid};
use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::group::ProcessGroup;

/// A program to start, the runtime whose process driver will reap it, and where to answer.
struct Request {
    command: Command,
    runtime: Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The spawner thread's queue; the sender lives here for the life of the process, so the
/// thread never ends.
static SPAWNER: Mutex<Option<Sender<Request>>> = Mutex::new(None);

/// Starts `command` (which must already be set up: argv, env, pipes, process group) on the
/// spawner thread, with SIGKILL as its parent-death signal.
pub(super) async fn spawn(mut command: Command) -> io::Result<Child> {
    die_with_agent(&mut command, getpid());
    let (reply, answer) = oneshot::channel();
    let request = Request {
        command,
        runtime: Handle::current(),
        reply,
    };
    sender()?
        .send(request)
        .map_err(|_| io::Error::other("the exec spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| io::Error::other("the exec spawner thread dropped the request"))?
}

/// The spawner thread's queue, starting the thread on first use.
fn sender() -> io::Result<Sender<Request>> {
    let mut spawner = SPAWNER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(sender) = spawner.as_ref() {
        return Ok(sender.clone());
    }
    let (sender, requests) = channel();
    std::thread::Builder::new()
        .name("leasehold-exec-spawner".into())
        .spawn(move || serve(requests))
        .map_err(|e| io::Error::other(format!("cannot start the exec spawner thread: {e}")))?;
    *spawner = Some(sender.clone());
    Ok(sender)
}

/// The spawner thread: forks every program, for as long as the process lives.
fn serve(requests: Receiver<Request>) {
    for Request {
        mut command,
        runtime,
        reply,
    } in requests
    {
        // The child is registered with the requester's runtime, which reaps it.
        let _entered = runtime.enter();
        if let Err(Ok(child)) = reply.send(command.spawn()) {
            // Nobody waits for it any more: it must not run on unsupervised.
            ProcessGroup::led_by(child.id()).kill();
            drop(child); // kill_on_drop: SIGKILLed and reaped by the runtime
        }
    }
}

/// Sets SIGKILL as the parent-death signal of the program `command` starts, and refuses to
/// start it if `agent` (this process's pid, read before the fork) is already gone.
#[allow(unsafe_code)]
fn die_with_agent(command: &mut Command, agent: Pid) {
    // SAFETY: the closure runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed. It makes exactly two system calls — `prctl`
    // (through nix's `set_pdeathsig`) and `getppid` — compares two integers, and builds an
    // `io::Error` from a raw errno, which does not allocate. It touches no lock, no allocator
    // and no state shared with other threads. Returning an error makes the child `_exit`
    // without running the program (std reports the errno to the parent through its pipe).
    unsafe {
        command.pre_exec(move || {
            set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            // The agent may have died between fork and prctl: then the signal never comes.
            if getppid() != agent {
                return Err(io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
}
