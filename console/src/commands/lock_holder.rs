//! `leasehold locks acquire|renew|release --holder --fencing-token`: a named lock held by a shell
//! script (ShedLock-style mutual exclusion without writing Rust), through AcquireLock,
//! RenewLock and ReleaseLock (operator role; a viewer is refused, exit 4).
//!
//! ```text
//! acquire ──taken──▶ print holder + token, exit 0 ──▶ … the script's work, within --for …
//!    │                                                 │ renew --holder H --fencing-token N --for D
//!    │ held by someone else                            ▼
//!    ├── no --wait, or the wait is over ──▶ exit 1 (nothing changed)
//!    └── --wait: sleep 200 ms, backing off to 1-2 s (never past the wait), try again
//!
//! release --holder H --fencing-token N ──▶ exit 0, or exit 1 when the holding is gone (fenced)
//! ```
//!
//! The command takes the lock for `--for` and exits: nothing renews it afterwards, so a
//! script holds it at most that long unless it renews it. The holder defaults to
//! `cli:USER@HOST:PID` (this process), printed with the token so the script can renew and
//! release; give `--holder` to choose a stable one (the same holder acquiring again extends
//! its lease with the same token, as AcquireLock does).
//!
//! Checked locally before connecting (exit 2, no call): the name, the holder, the token and
//! every duration (clap, [`crate::cli::values`]), and `--at-least-for` ≤ `--at-most-for`
//! ([`prepare_acquire`]). "Held by someone else" and "fenced" are answers, not errors: they
//! are printed on stdout like a success and exit [`exit::LOCK_NOT_HELD`] (1). A failed call
//! ends the command at once, a `--wait` included, with that call's exit code.
//!
//! When things fail: a reply lost after the agent took the lock leaves it held by this
//! holder until its lease ends (the script saw an error and did not run); a retry with the
//! same `--holder` gets it back with the same token. Timers are `tokio::time`.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use leasehold_proto::v1;
use serde::Serialize;
use tokio::time::Instant;

use crate::cli::{LockAcquireArgs, LockRenewArgs};
use crate::client::Agent;
use crate::convert::resource::HoldingView;
use crate::convert::{Timestamp, WireError};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::text::{inert, shown};

/// First pause between two tries of `acquire --wait`.
pub const FIRST_RETRY: Duration = Duration::from_millis(200);
/// Longest pause before jitter: with it a pause is at most twice this.
pub const MAX_RETRY: Duration = Duration::from_secs(1);

/// What `locks acquire` asks, and how long it may wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquirePlan {
    pub request: v1::AcquireLockRequest,
    pub wait: Option<Duration>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The plan of `locks acquire`; `default_holder` is asked only when `--holder` is not given.
pub fn prepare_acquire(
    args: &LockAcquireArgs,
    default_holder: impl FnOnce() -> String,
) -> Result<AcquirePlan> {
    if let (Some(least), Some(most)) = (args.at_least_for, args.at_most_for)
        && least > most
    {
        return Err(Error::usage(format!(
            "--at-most-for ({}) must be at least --at-least-for ({})",
            humantime::format_duration(most),
            humantime::format_duration(least)
        )));
    }
    Ok(AcquirePlan {
        request: v1::AcquireLockRequest {
            name: args.name.clone(),
            holder: args.holder.clone().unwrap_or_else(default_holder),
            ttl_ms: ms(args.lease),
            lock_at_least_for_ms: args.at_least_for.map_or(0, ms),
            lock_at_most_for_ms: args.at_most_for.map_or(0, ms),
        },
        wait: args.wait,
    })
}

/// The request of `locks renew`.
pub fn prepare_renew(args: &LockRenewArgs) -> v1::RenewLockRequest {
    v1::RenewLockRequest {
        name: args.name.clone(),
        holder: args.holder.clone(),
        token: args.fencing_token,
        ttl_ms: ms(args.lease),
    }
}

/// This process as a lock holder: `cli:USER@HOST:PID`, from the environment, `/etc/passwd`
/// and the kernel's host name.
pub fn default_holder() -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|u| !u.trim().is_empty())
        .or_else(|| {
            leasehold_shared::local::current_uid().ok().map(|uid| {
                leasehold_shared::local::user_name(uid).unwrap_or_else(|| format!("uid{uid}"))
            })
        });
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok());
    holder_id(user.as_deref(), host.as_deref(), std::process::id())
}

/// `cli:USER@HOST:PID` with control characters and blanks dropped, the user cut to 40 bytes
/// and the host to 64, so it is printable and within
/// [`crate::cli::values::MAX_LOCK_HOLDER_LEN`] bytes (at most 120).
pub fn holder_id(user: Option<&str>, host: Option<&str>, pid: u32) -> String {
    fn part(s: Option<&str>, max: usize, none: &str) -> String {
        let mut out = String::new();
        for c in s.unwrap_or_default().chars() {
            if c.is_control() || c.is_whitespace() {
                continue;
            }
            if out.len() + c.len_utf8() > max {
                break;
            }
            out.push(c);
        }
        if out.is_empty() { none.to_owned() } else { out }
    }
    format!(
        "cli:{}@{}:{pid}",
        part(user, 40, "unknown"),
        part(host, 64, "localhost")
    )
}

/// Pauses between the tries of `acquire --wait`: [`FIRST_RETRY`] doubling to [`MAX_RETRY`],
/// each with up to as much again of jitter (so 200 ms to 2 s), so waiting scripts spread out.
pub fn retry_pauses() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(FIRST_RETRY)
        .with_max_delay(MAX_RETRY)
        .with_jitter()
        .with_jitter_seed(fastrand::u64(..))
        .without_max_times()
        .build()
}

/// What `locks acquire` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Acquired {
    pub name: String,
    /// True when the holder holds it now.
    pub acquired: bool,
    /// This holder's holding when acquired, else the current one.
    #[serde(flatten)]
    pub lock: HoldingView,
}

/// What `locks renew` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Renewed {
    pub name: String,
    /// False: the holding is gone (fenced); nothing changed.
    pub renewed: bool,
    /// The lock after the call.
    #[serde(flatten)]
    pub lock: HoldingView,
}

/// What `locks release --holder --fencing-token` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GivenBack {
    pub name: String,
    /// False: the holding is gone (fenced); nothing changed.
    pub released: bool,
    /// The lock after the call.
    #[serde(flatten)]
    pub lock: HoldingView,
}

/// Runs `locks acquire`.
pub async fn run_acquire(agent: &Agent, plan: AcquirePlan, out: &mut Out) -> Result<u8> {
    let deadline = plan.wait.map(|w| Instant::now() + w);
    let mut pauses = retry_pauses();
    let mut said_waiting = false;
    let answer = loop {
        let reply = agent.acquire_lock(plan.request.clone()).await?;
        let answer = acquired(plan.request.name.clone(), reply)?;
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match left {
            Some(left) if !answer.acquired && !left.is_zero() => {
                if !said_waiting {
                    out.note(&format!("{}; waiting", held_line(&answer)));
                    said_waiting = true;
                }
                let pause = pauses.next().unwrap_or(MAX_RETRY);
                tokio::time::sleep(pause.min(left)).await;
            }
            _ => break answer,
        }
    };
    if out.json_mode() {
        out.json(&answer)?;
    } else if answer.acquired {
        out.line(&acquired_line(&answer))?;
    } else {
        out.line(&held_line(&answer))?;
    }
    Ok(if answer.acquired {
        exit::OK
    } else {
        exit::LOCK_NOT_HELD
    })
}

/// An AcquireLock reply as shown; it must carry the lock.
pub fn acquired(name: String, reply: v1::AcquireLockResponse) -> Result<Acquired> {
    let what = format!("acquire lock {name}");
    let lock = reply
        .lock
        .ok_or(WireError::MissingField("lock"))
        .and_then(HoldingView::from_wire)
        .map_err(|e| Error::bad_wire(what, e))?;
    Ok(Acquired {
        name,
        acquired: reply.acquired,
        lock,
    })
}

/// Runs `locks renew`.
pub async fn run_renew(agent: &Agent, request: v1::RenewLockRequest, out: &mut Out) -> Result<u8> {
    let (holder, token) = (request.holder.clone(), request.token);
    let name = request.name.clone();
    let reply = agent.renew_lock(request).await?;
    let renewed = renewed(name, reply)?;
    if out.json_mode() {
        out.json(&renewed)?;
    } else if renewed.renewed {
        out.line(&holding_line("renewed", &renewed.name, &renewed.lock))?;
    } else {
        out.line(&fenced_line(&renewed.name, &holder, token, &renewed.lock))?;
    }
    Ok(if renewed.renewed {
        exit::OK
    } else {
        exit::LOCK_NOT_HELD
    })
}

/// A RenewLock reply as shown; a reply without a lock says there is no such lock.
pub fn renewed(name: String, reply: v1::RenewLockResponse) -> Result<Renewed> {
    let lock = held_lock(format!("renew lock {name}"), &name, reply.lock)?;
    Ok(Renewed {
        name,
        renewed: reply.renewed,
        lock,
    })
}

/// Runs `locks release NAME --holder H --fencing-token N`.
pub async fn run_release(
    agent: &Agent,
    name: String,
    holder: String,
    token: i64,
    out: &mut Out,
) -> Result<u8> {
    let request = v1::ReleaseLockRequest {
        name: name.clone(),
        holder: holder.clone(),
        token,
    };
    let reply = agent.release_held_lock(request).await?;
    let given = given_back(name, reply)?;
    if out.json_mode() {
        out.json(&given)?;
    } else if given.released {
        out.line(&released_line(&given, &holder, token))?;
    } else {
        out.line(&fenced_line(&given.name, &holder, token, &given.lock))?;
    }
    Ok(if given.released {
        exit::OK
    } else {
        exit::LOCK_NOT_HELD
    })
}

/// A holder's ReleaseLock reply as shown; a reply without a lock says there is no such lock.
pub fn given_back(name: String, reply: v1::ReleaseLockResponse) -> Result<GivenBack> {
    let lock = held_lock(format!("release lock {name}"), &name, reply.lock)?;
    Ok(GivenBack {
        name,
        released: reply.released,
        lock,
    })
}

/// The lock of a renew or release reply; none means the agent has no lock of that name.
fn held_lock(what: String, name: &str, lock: Option<v1::ResourceLease>) -> Result<HoldingView> {
    let Some(lock) = lock else {
        let status = tonic::Status::not_found(format!("no lock {}", shown(name, 128)));
        return Err(Error::Rpc {
            what,
            status,
            hint: Some("`leasehold locks ls` lists them".into()),
        });
    };
    HoldingView::from_wire(lock).map_err(|e| Error::bad_wire(what, e))
}

fn until(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

fn holder_text(h: Option<&str>) -> String {
    h.map_or_else(|| "-".to_owned(), |h| inert(h).into_owned())
}

/// `acquired lock deploy/prod (holder H, token 7, until T)`.
pub fn acquired_line(a: &Acquired) -> String {
    holding_line("acquired", &a.name, &a.lock)
}

/// `VERB lock NAME (holder H, token N, until T)`.
fn holding_line(verb: &str, name: &str, l: &HoldingView) -> String {
    format!(
        "{verb} lock {} (holder {}, token {}, until {})",
        inert(name),
        holder_text(l.holder.as_deref()),
        l.token,
        until(l.lease_until)
    )
}

/// `lock deploy/prod is held by H (token N) until T`, and why it is not free yet when it was
/// given back or its lease ended.
pub fn held_line(a: &Acquired) -> String {
    let l = &a.lock;
    let by = l
        .holder
        .as_deref()
        .map(|h| format!(" by {}", inert(h)))
        .unwrap_or_default();
    let mut line = format!(
        "lock {} is held{by} (token {}) until {}",
        inert(&a.name),
        l.token,
        until(l.lease_until)
    );
    match l.state.as_str() {
        "released" => line.push_str(" (given back; held until its lock_at_least_for)"),
        "expired" => line.push_str(" (its lease ended; free once the agents' grace passes)"),
        _ => {}
    }
    line
}

/// `released lock deploy/prod (holder H, token 7)`, with `; it stays held until T
/// (lock_at_least_for)` when it does.
pub fn released_line(g: &GivenBack, holder: &str, token: i64) -> String {
    let mut line = format!(
        "released lock {} (holder {}, token {token})",
        inert(&g.name),
        inert(holder)
    );
    if g.lock.state == "released"
        && let Some(t) = g.lock.lock_at_least_until
    {
        line.push_str(&format!("; it stays held until {t} (lock_at_least_for)"));
    }
    line
}

/// `lock NAME is no longer held by H with token N (…); nothing changed`.
pub fn fenced_line(name: &str, holder: &str, token: i64, now: &HoldingView) -> String {
    let current = match (now.state.as_str(), now.holder.as_deref()) {
        ("free", _) | (_, None) => "it is free".to_owned(),
        ("released", _) => format!(
            "given back, held until {} by its lock_at_least_for",
            until(now.lease_until)
        ),
        (_, Some(h)) => format!(
            "held by {}, token {}, until {}",
            inert(h),
            now.token,
            until(now.lease_until)
        ),
    };
    format!(
        "lock {} is no longer held by {} with token {token} ({current}); nothing changed",
        inert(name),
        inert(holder)
    )
}

#[cfg(test)]
mod tests;
