//! Several servers in one URL (libpq's syntax), and following the writable one after a
//! failover without a restart.
//!
//! ```text
//!   postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write
//!        │
//!        ├─ connect: try h1, h2 in order; the first that answers (read-write: and is not in
//!        │           recovery) becomes the pool's server
//!        ├─ every new pool connection (read-write): refused if its server is in recovery
//!        └─ monitor (every second, one connection of its own):
//!               current server gone or in recovery ──▶ try every server in order again
//!                 └─ found another ──▶ the pool connects there from now on; connections
//!                                      opened before the switch are closed, not reused
//! ```
//!
//! Everything that connects later through the pool's options follows: the pool, the wake-up
//! listener and the heartbeat's connection of its own (they reconnect after the old server is
//! gone, or after a statement of theirs is refused by a server that became read-only).
//!
//! When things fail: with no usable server at connect, the store refuses to start and names the
//! servers it tried; later, the monitor keeps the current server and tries again each second
//! (statements fail meanwhile as in any outage, and the runtime handles that as it does today).

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{ConnectOptions, Connection};

use crate::store::{Result, StoreError};

/// How often the monitor checks the current server.
pub const FAILOVER_CHECK_EVERY: Duration = Duration::from_secs(1);
/// Longest a probe of one server may take (connect and ask).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the URL asks of the server (`target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Any server that answers (libpq's default).
    Any,
    /// A server that accepts writes (`read-write` or `primary`): not in recovery.
    ReadWrite,
}

/// The servers of a URL, in order, and what is asked of them.
#[derive(Debug, Clone)]
pub struct Targets {
    pub hosts: Vec<PgConnectOptions>,
    pub attrs: SessionAttrs,
    /// `host:port` of each, for messages.
    pub names: Vec<String>,
}

impl Targets {
    /// True when the URL names one server and asks nothing of it: the plain pool, no monitor.
    pub fn is_plain(&self) -> bool {
        self.hosts.len() == 1 && self.attrs == SessionAttrs::Any
    }
}

/// Parses a `postgres://` URL that may name several servers (`h1:5432,h2:5433`, libpq's
/// syntax) and may carry `target_session_attrs` (`any`, `read-write`, `primary`; the agent
/// writes, so `read-only`, `standby` and `prefer-standby` are refused).
pub fn parse_targets(url: &str) -> Result<Targets> {
    let bad = |why: &str| {
        StoreError::Invalid(crate::domain::ValidationError::Invalid {
            field: "database URL",
            detail: why.to_string(),
        })
    };
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(scheme, _)| matches!(*scheme, "postgres" | "postgresql"))
        .ok_or_else(|| StoreError::unsupported_url(url))?;
    // A fragment means nothing to a server (libpq ignores it too).
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    // The query without target_session_attrs (sqlx does not know it), and its value.
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let mut attrs = SessionAttrs::Any;
    let mut kept: Vec<&str> = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => {
                attrs = match value {
                    "any" => SessionAttrs::Any,
                    "read-write" | "primary" => SessionAttrs::ReadWrite,
                    other => {
                        return Err(bad(&format!(
                            "target_session_attrs={other} is not supported: the agent writes, \
                             so give read-write (or primary), or any"
                        )));
                    }
                }
            }
            _ if pair.is_empty() => {}
            _ => kept.push(pair),
        }
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    let hosts: Vec<&str> = split_hosts(hostlist);
    if hosts.iter().any(|h| h.is_empty()) {
        return Err(bad(
            "an empty server in the list (two commas, or a trailing one)",
        ));
    }
    let mut options = Vec::with_capacity(hosts.len().max(1));
    let mut names = Vec::with_capacity(hosts.len().max(1));
    for host in if hosts.is_empty() { vec![""] } else { hosts } {
        let one = format!("{scheme}://{userinfo}{host}{path}{query}");
        let parsed =
            PgConnectOptions::from_str(&one).map_err(StoreError::db("parse database URL"))?;
        names.push(format!("{}:{}", parsed.get_host(), parsed.get_port()));
        options.push(parsed);
    }
    Ok(Targets {
        hosts: options,
        attrs,
        names,
    })
}

/// `h1:5432,[::1]:5433` → its servers (commas inside brackets are not separators).
fn split_hosts(list: &str) -> Vec<&str> {
    if list.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

/// Whether the server behind `conn` is what `attrs` asks for.
async fn usable(
    conn: &mut PgConnection,
    attrs: SessionAttrs,
) -> std::result::Result<bool, sqlx::Error> {
    // The simple protocol: one message and one answer, which a transaction pooler in front of
    // the server cannot split over two of its server connections.
    match attrs {
        SessionAttrs::Any => sqlx::raw_sql("SELECT 1")
            .execute(&mut *conn)
            .await
            .map(|_| true),
        SessionAttrs::ReadWrite => {
            use sqlx::Row;
            let row = sqlx::raw_sql("SELECT pg_is_in_recovery()")
                .fetch_one(&mut *conn)
                .await?;
            let in_recovery: bool = row.try_get(0)?;
            Ok(!in_recovery)
        }
    }
}

/// Refuses a new pool connection to a server that does not (or no longer) accept writes.
pub(crate) async fn check_new_connection(
    conn: &mut PgConnection,
    attrs: SessionAttrs,
) -> std::result::Result<(), sqlx::Error> {
    if attrs == SessionAttrs::ReadWrite && !usable(conn, attrs).await? {
        return Err(sqlx::Error::Protocol(
            "the server is in recovery (read-only); looking for the writable one".into(),
        ));
    }
    Ok(())
}

/// The server each list of servers (by its `host:port` names) was last found usable on, by
/// any store of this process: a store opened later — the heartbeat's connection of its own,
/// opened again after each failure within a short budget — tries that one first rather than
/// spending its budget on a server that is gone.
static LAST_GOOD: Mutex<Vec<(Vec<String>, usize)>> = Mutex::new(Vec::new());

/// The order to try the servers `names` in: the one last found usable by this process
/// first, then the others as listed.
pub(crate) fn try_order(names: &[String]) -> Vec<usize> {
    let first = last_good(names).filter(|i| *i < names.len());
    first
        .into_iter()
        .chain((0..names.len()).filter(|i| Some(*i) != first))
        .collect()
}

fn last_good(names: &[String]) -> Option<usize> {
    LAST_GOOD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(n, _)| n.as_slice() == names)
        .map(|(_, i)| *i)
}

fn set_last_good(names: &[String], i: usize) {
    let mut all = LAST_GOOD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match all.iter_mut().find(|(n, _)| n.as_slice() == names) {
        Some(entry) => entry.1 = i,
        None => all.push((names.to_vec(), i)),
    }
}

/// The servers of one store and which one its pool uses (see the module doc).
#[derive(Debug)]
pub struct Failover {
    targets: Vec<PgConnectOptions>,
    names: Vec<String>,
    attrs: SessionAttrs,
    current: AtomicUsize,
    switched_at: Mutex<Option<Instant>>,
}

impl Failover {
    /// `targets` with the store's settings applied to each.
    pub fn new(targets: Vec<PgConnectOptions>, names: Vec<String>, attrs: SessionAttrs) -> Self {
        Self {
            targets,
            names,
            attrs,
            current: AtomicUsize::new(0),
            switched_at: Mutex::new(None),
        }
    }

    /// The options of the server in use.
    pub fn current(&self) -> PgConnectOptions {
        self.targets[self.current.load(Ordering::Relaxed)].clone()
    }

    /// `host:port` of every server, in URL order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// `host:port` of the server in use.
    pub fn current_name(&self) -> &str {
        &self.names[self.current.load(Ordering::Relaxed)]
    }

    /// True for a pool connection opened before the last switch (it may be on the old
    /// server, which could still be up, read-only).
    pub fn is_stale(&self, age: Duration) -> bool {
        self.switched_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| age > at.elapsed())
    }

    /// A connection to server `i` if it is usable, else why not.
    async fn probe(&self, i: usize) -> std::result::Result<PgConnection, String> {
        let attempt = async {
            let mut conn = self.targets[i].connect().await?;
            if usable(&mut conn, self.attrs).await? {
                Ok(Ok(conn))
            } else {
                let _ = conn.close().await;
                Ok(Err("in recovery".to_string()))
            }
        };
        match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
            Ok(Ok(found)) => found,
            Ok(Err(sqlx::Error::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                Err("connection refused".to_string())
            }
            Ok(Err(error)) => Err(StoreError::db("connect")(error)
                .to_string()
                .trim_start_matches("cannot connect to the database: ")
                .to_string()),
            Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
        }
    }

    /// The first usable server — the one last found usable by this process first, then the
    /// others in URL order — made current; its probe connection is returned (for the monitor
    /// to keep). None usable: an error naming each server and why.
    pub async fn find(&self) -> Result<PgConnection> {
        let order = try_order(&self.names);
        let mut why = Vec::with_capacity(self.targets.len());
        for i in order {
            match self.probe(i).await {
                Ok(conn) => {
                    self.current.store(i, Ordering::Relaxed);
                    set_last_good(&self.names, i);
                    return Ok(conn);
                }
                Err(reason) => {
                    tracing::debug!(server = %self.names[i], %reason, "server not usable");
                    why.push(format!("{} ({reason})", self.names[i]));
                }
            }
        }
        let wanted = match self.attrs {
            SessionAttrs::Any => "answering",
            SessionAttrs::ReadWrite => "writable",
        };
        Err(StoreError::Database {
            op: "connect",
            source: sqlx::Error::Io(std::io::Error::other(format!(
                "no {wanted} server among {}",
                why.join(", ")
            ))),
        })
    }

    /// Checks the current server every [`FAILOVER_CHECK_EVERY`] and moves `pool` to another
    /// when it is gone or read-only; ends when the pool is closed or `alive` is gone (every
    /// clone of the store dropped).
    pub fn spawn_monitor(self: Arc<Self>, pool: PgPool, probe: PgConnection, alive: Weak<()>) {
        tokio::spawn(async move {
            let mut conn = Some(probe);
            let mut warned = false;
            loop {
                tokio::time::sleep(FAILOVER_CHECK_EVERY).await;
                if pool.is_closed() || alive.strong_count() == 0 {
                    if let Some(c) = conn.take() {
                        let _ = c.close().await;
                    }
                    break;
                }
                if let Some(c) = conn.as_mut() {
                    let ok = tokio::time::timeout(PROBE_TIMEOUT, usable(c, self.attrs)).await;
                    if matches!(ok, Ok(Ok(true))) {
                        continue;
                    }
                }
                conn = None;
                let before = self.current.load(Ordering::Relaxed);
                match self.find().await {
                    Ok(found) => {
                        conn = Some(found);
                        warned = false;
                        let now = self.current.load(Ordering::Relaxed);
                        if now != before {
                            *self
                                .switched_at
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                                Some(Instant::now());
                            pool.set_connect_options(self.current());
                            tracing::warn!(
                                from = %self.names[before],
                                to = %self.names[now],
                                "database failover: now connecting to another server"
                            );
                        }
                    }
                    Err(error) if !warned => {
                        warned = true;
                        tracing::warn!(%error, "database failover: no usable server yet; trying every second");
                    }
                    Err(_) => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn one_server_is_plain() {
        let t = parse_targets("postgres://u:p@db.example:6543/app?sslmode=disable").unwrap();
        assert!(t.is_plain());
        assert_eq!(t.names, ["db.example:6543"]);
        assert_eq!(t.hosts[0].get_database(), Some("app"));
        assert_eq!(t.hosts[0].get_username(), "u");
    }

    #[test]
    fn several_servers_in_order_with_their_session_attrs() {
        let t = parse_targets(
            "postgresql://u:p@h1:5432,h2:5433,[::1]:5434/app?target_session_attrs=read-write&application_name=x",
        )
        .unwrap();
        assert!(!t.is_plain());
        assert_eq!(t.attrs, SessionAttrs::ReadWrite);
        assert_eq!(t.names, ["h1:5432", "h2:5433", "[::1]:5434"]);
        for h in &t.hosts {
            assert_eq!(h.get_database(), Some("app"));
            assert_eq!(h.get_username(), "u");
        }
        let t = parse_targets("postgres://h1,h2/app?target_session_attrs=primary").unwrap();
        assert_eq!(t.attrs, SessionAttrs::ReadWrite);
        assert_eq!(t.names, ["h1:5432", "h2:5432"]);
        let t = parse_targets("postgres://h1/app?target_session_attrs=any").unwrap();
        assert!(t.is_plain());
        let t = parse_targets("postgres://h1,h2/app?target_session_attrs=read-write#x").unwrap();
        assert_eq!(t.attrs, SessionAttrs::ReadWrite);
    }

    #[test]
    fn what_the_agent_cannot_use_is_refused() {
        for url in [
            "postgres://h1,h2/app?target_session_attrs=read-only",
            "postgres://h1,h2/app?target_session_attrs=standby",
            "postgres://h1,,h2/app",
            "postgres://h1,/app",
            "mysql://h1,h2/app",
        ] {
            assert!(parse_targets(url).is_err(), "{url}");
        }
    }

    #[test]
    fn a_connection_older_than_the_switch_is_stale() {
        let f = Failover::new(vec![], vec![], SessionAttrs::ReadWrite);
        assert!(!f.is_stale(Duration::from_secs(3600)));
        *f.switched_at.lock().unwrap() = Some(Instant::now() - Duration::from_secs(10));
        assert!(f.is_stale(Duration::from_secs(11)));
        assert!(!f.is_stale(Duration::from_secs(9)));
    }
}
