//! `leasehold locks …`: list the named locks, take one from a shell script, renew and give it
//! back, or force one free. Values clap accepts are within the agent's bounds (names,
//! holders, tokens, 1 s..=1 day lease times); that `--at-least-for` is not longer than
//! `--at-most-for` is checked by [`crate::commands::lock_holder::prepare_acquire`] (exit 2, no
//! call), and `--holder` / `--fencing-token` of `release` go together or not at all (clap, exit 2).

use std::time::Duration;

use clap::{Args, Subcommand};

use super::values;

/// `leasehold locks …`.
#[derive(Debug, Clone, Subcommand)]
pub enum LocksCommand {
    /// List every named lock with its holder, fencing token and time left
    ///
    /// Output (table): NAME, OWNER (`-` when free), TOKEN (fencing token of the current or
    /// last holding; 0 never held), STATE (free, held, suspect: renewal overdue, expired: past
    /// its lease but not yet takeable, released: given back but held until its
    /// lock_at_least_for), LEFT (lease_until minus the database's now: `12s`, `-3s` past it,
    /// `-` none), MOVES/H (owner changes in the last hour).
    /// Output (json): one line, an array of LOCK: {"name","owner","token","state",
    /// "lease_until","lease_until_ms","heartbeat_at","heartbeat_at_ms","acquired_at",
    /// "acquired_at_ms","lock_at_least_until","lock_at_least_until_ms","lock_at_most_until",
    /// "lock_at_most_until_ms","time_left_ms","moves_last_hour"}; times are RFC 3339 UTC
    /// strings next to the same time in ms, both null when none; owner is null when free;
    /// time_left_ms is lease_until_ms minus the database's now (negative past it), null when
    /// there is no lease time.
    #[command(verbatim_doc_comment)]
    Ls,

    /// Take a lock for --for (mutual exclusion for shell scripts); exit 1 when someone holds it
    ///
    /// The lease lasts --for and is not renewed by this command: finish within it, or renew
    /// it with `locks renew`, then give it back with `locks release NAME --holder H --fencing-token
    /// N`. The same holder acquiring again extends its lease (same token). With --wait, tries
    /// again (every 200 ms at first, backing off to 1-2 s) until the lock is taken or the wait
    /// is over; a failed call (unreachable, denied) ends it at once. Operator role.
    /// Exit 0 when taken; 1 when someone else holds it (after --wait, if given): nothing
    /// changed; 2, 3, 4 as every command.
    /// Output (table): `acquired lock deploy/prod (holder cli:ops@web-1:4242, token 7, until
    /// 2026-12-01T11:30:00.000Z)`, or `lock deploy/prod is held by ci-job-17 (token 6) until
    /// 2026-12-01T11:25:00.000Z`.
    /// Output (json): {"name":"deploy/prod","acquired":true,"holder":"cli:ops@web-1:4242",
    /// "token":7,"state":"held","lease_until":"2026-12-01T11:30:00.000Z",
    /// "lease_until_ms":1764588600000,"lock_at_least_until","lock_at_least_until_ms",
    /// "lock_at_most_until","lock_at_most_until_ms"}; when not acquired, holder, token and
    /// the times are the current holding's (holder null when it has none).
    #[command(verbatim_doc_comment)]
    Acquire(LockAcquireArgs),

    /// Extend a lock's lease by --for from now; exit 1 when the holding is gone (fenced)
    ///
    /// Fenced by (--holder, --fencing-token): once the lock was released, forced free or taken by
    /// someone else the renew changes nothing and exits 1. A lease never passes its
    /// lock_at_most_for. Operator role.
    /// Output (table): `renewed lock deploy/prod (holder H, token 7, until T)`, or `lock
    /// deploy/prod is no longer held by H with token 7 (held by ci-job-17, token 8, until T);
    /// nothing changed` (`(it is free)` when nobody holds it).
    /// Output (json): {"name","renewed":true,"holder","token","state","lease_until",
    /// "lease_until_ms","lock_at_least_until","lock_at_least_until_ms","lock_at_most_until",
    /// "lock_at_most_until_ms"}: the lock after the call.
    #[command(verbatim_doc_comment)]
    Renew(LockRenewArgs),

    /// Give a lock back (--holder and --fencing-token), or force it free from whoever holds it
    ///
    /// With --holder and --fencing-token: the holder's own release, fenced — when that holding is
    /// gone (released, forced free, taken by someone else) nothing changes and it exits 1.
    /// Output (table): `released lock deploy/prod (holder H, token 7)`, or `lock deploy/prod
    /// is no longer held by H with token 7 (held by ci-job-17, token 8, until T); nothing
    /// changed`.
    /// Output (json): {"name","released":true,"holder","token","state","lease_until",
    /// "lease_until_ms","lock_at_least_until","lock_at_least_until_ms","lock_at_most_until",
    /// "lock_at_most_until_ms"}: the lock after the call.
    ///
    /// Without them: an operator's forced release (audited); the holder's next renew is
    /// refused.
    /// Output (table): `released lock deploy/prod (held by ci-job-17, token 7)`, `lock
    /// deploy/prod was not held (nothing changed)`.
    /// Output (json): {"name":"deploy/prod","released":true,"previous_owner":"ci-job-17" or
    /// null,"previous_token":7 or null,"lock":LOCK (after the release) or null}.
    ///
    /// Either way a lock taken with lock_at_least_for stays held until then (the table line
    /// then ends `; it stays held until 2026-12-01T12:00:30.000Z (lock_at_least_for)`), and an
    /// unknown lock is not found (exit 2). Operator role.
    #[command(verbatim_doc_comment)]
    Release(LockReleaseArgs),
}

/// `leasehold locks acquire`.
#[derive(Debug, Clone, Args)]
pub struct LockAcquireArgs {
    /// Lock name: 1-128 characters of a-z 0-9 _ . : / - starting with a letter or digit.
    #[arg(value_name = "NAME", value_parser = values::lock_name)]
    pub name: String,

    /// How long it is held (its lease), 1s to 1day: `30s`, `10m`, `1h 30m`.
    #[arg(long = "for", value_name = "DURATION", value_parser = values::lock_duration)]
    pub lease: Duration,

    /// While someone else holds it, try again for up to this long (more than 0, up to 1day).
    #[arg(long, value_name = "DURATION", value_parser = values::lock_wait)]
    pub wait: Option<Duration>,

    /// Who holds it: a printable id of 1-128 bytes (default `cli:USER@HOST:PID`, this
    /// process's; pass your own, e.g. a CI job id, to renew or release it by that name).
    #[arg(long, value_name = "ID", value_parser = values::lock_holder)]
    pub holder: Option<String>,

    /// Given back before this long after it was taken, it stays held until then (ShedLock's
    /// lock_at_least_for; 1s to 1day).
    #[arg(long, value_name = "DURATION", value_parser = values::lock_duration)]
    pub at_least_for: Option<Duration>,

    /// Never held longer than this after it was taken, renewed or not (ShedLock's
    /// lock_at_most_for; 1s to 1day, at least --at-least-for).
    #[arg(long, value_name = "DURATION", value_parser = values::lock_duration)]
    pub at_most_for: Option<Duration>,
}

/// `leasehold locks renew`.
#[derive(Debug, Clone, Args)]
pub struct LockRenewArgs {
    /// Lock name.
    #[arg(value_name = "NAME", value_parser = values::lock_name)]
    pub name: String,

    /// The holder `locks acquire` printed.
    #[arg(long, value_name = "ID", value_parser = values::lock_holder)]
    pub holder: String,

    /// The fencing token `locks acquire` printed (its JSON's "token"). Not `--token`, which
    /// is the agent's API token.
    #[arg(long, value_name = "N", value_parser = values::lock_token)]
    pub fencing_token: i64,

    /// The new lease, counted from now: 1s to 1day.
    #[arg(long = "for", value_name = "DURATION", value_parser = values::lock_duration)]
    pub lease: Duration,
}

/// `leasehold locks release`.
#[derive(Debug, Clone, Args)]
pub struct LockReleaseArgs {
    /// Lock name: 1-128 characters of a-z 0-9 _ . : / - starting with a letter or digit.
    #[arg(value_name = "NAME", value_parser = values::lock_name)]
    pub name: String,

    /// The holder giving it back (with --fencing-token); without both, a forced release.
    #[arg(
        long,
        value_name = "ID",
        value_parser = values::lock_holder,
        requires = "fencing_token"
    )]
    pub holder: Option<String>,

    /// The fencing token of that holding (with --holder; `locks acquire` printed it).
    #[arg(long, value_name = "N", value_parser = values::lock_token, requires = "holder")]
    pub fencing_token: Option<i64>,
}
