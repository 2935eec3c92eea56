//! What a process and the database server hold, for the soak's "no growth" checks (TESTING.md
//! T34): a process's resident memory (`VmRSS` in `/proc/PID/status`) and open descriptors
//! (entries of `/proc/PID/fd`), and the server's client connections to one database
//! (`pg_stat_activity`). Linux only, like the rest of the fault tools.

use anyhow::Context;
use sqlx::PgPool;

/// A process's resident memory and open descriptors at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub pid: u32,
    /// Resident set size in KiB.
    pub rss_kib: u64,
    /// Open file descriptors (sockets included).
    pub fds: u64,
}

impl Usage {
    /// Reads both figures of process `pid`.
    pub fn of(pid: u32) -> anyhow::Result<Usage> {
        Ok(Usage {
            pid,
            rss_kib: rss_kib(pid)?,
            fds: open_fds(pid)?,
        })
    }

    /// Whether `later`, read from the same process after this, grew without bound: more than
    /// `fd_slack` descriptors above this, or more than twice this memory plus `rss_slack_kib`.
    pub fn grew(&self, later: &Usage, fd_slack: u64, rss_slack_kib: u64) -> bool {
        later.fds > self.fds + fd_slack || later.rss_kib > 2 * self.rss_kib + rss_slack_kib
    }
}

/// `VmRSS` of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .with_context(|| format!("no VmRSS line in {path}"))?;
    let kib = line.trim().trim_end_matches("kB").trim();
    kib.parse()
        .with_context(|| format!("bad VmRSS value {line:?} in {path}"))
}

/// Entries of `/proc/PID/fd`: the process's open descriptors.
pub fn open_fds(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&path).with_context(|| format!("listing {path}"))?;
    Ok(entries.filter(Result::is_ok).count() as u64)
}

/// Client backends connected to database `datname`, the asking connection excluded.
pub async fn server_connections(pool: &PgPool, datname: &str) -> anyhow::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
    )
    .bind(datname)
    .fetch_one(pool)
    .await
    .with_context(|| format!("counting the connections to {datname}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read() {
        let usage = Usage::of(std::process::id());
        assert!(
            usage.is_ok_and(|u| u.rss_kib > 0 && u.fds >= 3),
            "reading /proc/self"
        );
    }
}
