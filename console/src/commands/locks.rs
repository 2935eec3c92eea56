//! `leasehold locks ls|release`: named resource leases (DESIGN §4 "Resource leases"); a
//! holder's own `acquire`, `renew` and `release --holder --fencing-token` are in
//! [`super::lock_holder`].
//!
//! Checked locally before connecting (exit 2, no call): the lock name's alphabet and length.
//! `release` without `--holder` / `--fencing-token` is the operator's forced release — ReleaseLock with an empty holder and token 0 —
//! so it frees whoever holds the lock. To say whom it freed it first reads the locks
//! (ListLocks): the reply of a release carries the lock *after* it, whose owner is gone. The
//! freed token is the one the release reply names; the owner read before is shown only when
//! its token is that one (a holder that changed in between is not named as the one freed).
//! An unknown lock is NOT_FOUND (exit 2), whether the agent says so with a status or with an
//! answer that has no lock.
//!
//! Relative times are counted from the database `now` of the ListLocks reply.

use leasehold_proto::v1;
use serde::Serialize;

use crate::client::Agent;
use crate::convert::resource::{LockList, LockView};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::{inert, short_duration, shown, width};

/// Runs `locks ls`.
pub async fn run_ls(agent: &Agent, out: &mut Out) -> Result<u8> {
    let list = read(agent).await?;
    if out.json_mode() {
        out.json(&list.locks)?;
    } else {
        out.lines(ls_table(&list))?;
    }
    Ok(exit::OK)
}

async fn read(agent: &Agent) -> Result<LockList> {
    let reply = agent.list_locks().await?;
    LockList::from_wire(reply).map_err(|e| Error::bad_wire("list locks", e))
}

/// Time left as a table shows it: `12s`, `-3s` once past, `-` without a lease time.
pub fn left_cell(time_left_ms: Option<i64>) -> String {
    match time_left_ms {
        None => "-".to_owned(),
        Some(ms) if ms < 0 => format!("-{}", short_duration(ms)),
        Some(ms) => short_duration(ms),
    }
}

/// The table of `locks ls`.
///
/// What gives way first on 80 columns: the name (down to 20 columns) and the owner (down to
/// 12), the wider first; the token is never cut.
pub fn ls_table(list: &LockList) -> Vec<String> {
    if list.locks.is_empty() {
        return vec!["no locks".to_owned()];
    }
    let widest = list
        .locks
        .iter()
        .map(|l| width(&inert(&l.name)))
        .max()
        .unwrap_or(0);
    // A fencing token is never cut: an operator may need all of it.
    let token_w = list
        .locks
        .iter()
        .map(|l| l.token.to_string().len())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut table = Table::new(vec![
        Column::new("NAME", widest.min(20), 48),
        Column::new("OWNER", 12, 32),
        Column::new("TOKEN", token_w, token_w).right(),
        Column::new("STATE", 5, 12),
        Column::new("LEFT", 4, 8).right(),
        Column::new("MOVES/H", 7, 7).right(),
    ]);
    for l in &list.locks {
        table.row(vec![
            l.name.clone(),
            l.owner.clone().unwrap_or_else(|| "-".to_owned()),
            l.token.to_string(),
            l.state.clone(),
            left_cell(l.time_left_ms),
            l.moves_last_hour.to_string(),
        ]);
    }
    table.render(WIDTH)
}

/// The JSON of `locks release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Released {
    pub name: String,
    /// False when it was not held: nothing changed.
    pub released: bool,
    /// Who held it, when known; null when nothing was released.
    pub previous_owner: Option<String>,
    /// The fencing token of the holding freed; null when nothing was released.
    pub previous_token: Option<i64>,
    /// The lock after the release.
    pub lock: Option<LockView>,
}

/// Runs `locks release NAME`.
pub async fn run_release(agent: &Agent, name: String, out: &mut Out) -> Result<u8> {
    let before = read(agent).await?;
    let reply = agent.force_release_lock(name.clone()).await?;
    let r = released(name, &before, reply)?;
    if out.json_mode() {
        out.json(&r)?;
    } else {
        out.line(&release_line(&r, before.now.millis()))?;
    }
    Ok(exit::OK)
}

/// The reply of a forced ReleaseLock as shown, given the locks read just before it.
pub fn released(
    name: String,
    before: &LockList,
    reply: v1::ReleaseLockResponse,
) -> Result<Released> {
    let what = format!("release lock {name}");
    let now = before.now.millis();
    let lock = reply
        .lock
        .map(|l| LockView::from_wire(l, now))
        .transpose()
        .map_err(|e| Error::bad_wire(what.clone(), e))?;
    if !reply.released && lock.is_none() {
        let status = tonic::Status::not_found(format!("no lock {}", shown(&name, 128)));
        return Err(Error::Rpc {
            what,
            status,
            hint: Some("`leasehold locks ls` lists them".into()),
        });
    }
    let seen = before.locks.iter().find(|l| l.name == name);
    let (previous_owner, previous_token) = if reply.released {
        let token = lock.as_ref().or(seen).map(|l| l.token);
        let owner = seen
            .filter(|s| Some(s.token) == token)
            .and_then(|s| s.owner.clone())
            .or_else(|| lock.as_ref().and_then(|l| l.owner.clone()));
        (owner, token)
    } else {
        (None, None)
    };
    Ok(Released {
        name,
        released: reply.released,
        previous_owner,
        previous_token,
        lock,
    })
}

/// `released lock deploy/prod (held by ci-job-17, token 7)`, `lock deploy/prod was not held
/// (nothing changed)`, each followed by `; it stays held until … (lock_at_least_for)` when
/// the lock is held on until its lock_at_least_for.
pub fn release_line(r: &Released, now_ms: i64) -> String {
    let name = shown(&r.name, 128);
    let mut line = if r.released {
        let owner = r
            .previous_owner
            .as_deref()
            .map(|o| format!("held by {}, ", shown(o, 128)));
        let token = r
            .previous_token
            .map_or_else(|| "token unknown".to_owned(), |t| format!("token {t}"));
        format!(
            "released lock {name} ({}{token})",
            owner.unwrap_or_default()
        )
    } else {
        format!("lock {name} was not held (nothing changed)")
    };
    if let Some(until) = r
        .lock
        .as_ref()
        .and_then(|l| l.lock_at_least_until)
        .filter(|t| t.millis() > now_ms)
    {
        line.push_str(&format!(
            "; it stays held until {until} (lock_at_least_for)"
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::resource::tests::{NOW, wire_lock};

    fn list(locks: Vec<v1::ResourceLease>) -> LockList {
        LockList::from_wire(v1::ListLocksResponse { locks, now_ms: NOW }).unwrap()
    }

    fn after(name: &str, token: i64) -> v1::ResourceLease {
        v1::ResourceLease {
            name: name.into(),
            token,
            lease_state: v1::LeaseState::Free as i32,
            ..Default::default()
        }
    }

    #[test]
    fn ls_fits_80_columns_and_shows_every_state() {
        let mut suspect = wire_lock("billing/run-once");
        suspect.lease_state = v1::LeaseState::Suspect as i32;
        suspect.heartbeat_at_ms = NOW - 40_000;
        let mut expired = wire_lock("reports:nightly");
        expired.lease_state = v1::LeaseState::Expired as i32;
        expired.lease_until_ms = NOW - 3_000;
        let free = v1::ResourceLease {
            name: "idle".into(),
            lease_state: v1::LeaseState::Free as i32,
            token: 4,
            ..Default::default()
        };
        let mut hostile = wire_lock(&"n".repeat(128));
        hostile.owner = format!("\u{1b}[2J{}", "o".repeat(120));
        hostile.token = i64::MAX;
        let lines = ls_table(&list(vec![
            wire_lock("deploy/prod"),
            suspect,
            expired,
            free,
            hostile,
        ]));
        assert_eq!(lines.len(), 6);
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["NAME", "OWNER", "TOKEN", "STATE", "LEFT", "MOVES/H"]
        );
        let words = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(
            words(1),
            ["deploy/prod", "ci-job-17", "7", "held", "12s", "2"]
        );
        assert_eq!(words(2)[3], "suspect");
        assert_eq!(words(3)[3..5], ["expired", "-3s"]);
        assert_eq!(words(4), ["idle", "-", "4", "free", "-", "0"]);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
            assert!(!line.contains('\u{1b}'), "{line}");
        }
        assert!(lines[5].contains("9223372036854775807"), "{}", lines[5]);
        assert_eq!(ls_table(&list(vec![])), ["no locks"]);
    }

    #[test]
    fn ls_json_is_one_array_with_every_field() {
        let l = list(vec![wire_lock("a"), wire_lock("b")]);
        let text = crate::output::to_json(&l.locks).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json.as_array().map(Vec::len), Some(2));
        assert_eq!(json[0]["name"], "a");
        assert_eq!(json[0]["owner"], "ci-job-17");
        assert_eq!(json[0]["token"], 7);
        assert_eq!(json[0]["lease_until"], "2025-12-01T11:20:12.000Z");
        assert_eq!(json[0]["lease_until_ms"], NOW + 12_000);
        assert_eq!(json[0]["time_left_ms"], 12_000);
        assert_eq!(json[1]["lock_at_least_until"], serde_json::Value::Null);
        assert!(!text.contains('\n'));
    }

    #[test]
    fn a_release_names_the_owner_and_token_it_freed() {
        let before = list(vec![wire_lock("deploy/prod")]);
        let r = released(
            "deploy/prod".into(),
            &before,
            v1::ReleaseLockResponse {
                released: true,
                lock: Some(after("deploy/prod", 7)),
            },
        )
        .unwrap();
        assert_eq!(r.previous_owner.as_deref(), Some("ci-job-17"));
        assert_eq!(r.previous_token, Some(7));
        assert_eq!(
            release_line(&r, NOW),
            "released lock deploy/prod (held by ci-job-17, token 7)"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["released"], true);
        assert_eq!(json["previous_owner"], "ci-job-17");
        assert_eq!(json["previous_token"], 7);
        assert_eq!(json["lock"]["owner"], serde_json::Value::Null);
        assert_eq!(json["lock"]["state"], "free");
    }

    #[test]
    fn a_holder_that_changed_before_the_release_is_not_named() {
        let before = list(vec![wire_lock("deploy/prod")]);
        let r = released(
            "deploy/prod".into(),
            &before,
            v1::ReleaseLockResponse {
                released: true,
                lock: Some(after("deploy/prod", 8)),
            },
        )
        .unwrap();
        assert_eq!(r.previous_owner, None);
        assert_eq!(r.previous_token, Some(8));
        assert_eq!(release_line(&r, NOW), "released lock deploy/prod (token 8)");
    }

    #[test]
    fn nothing_held_is_said_and_lock_at_least_for_is_explained() {
        let mut stays = wire_lock("deploy/prod");
        stays.lease_state = v1::LeaseState::Released as i32;
        stays.owner = String::new();
        stays.lock_at_least_until_ms = NOW + 30_000;
        let before = list(vec![stays.clone()]);
        let r = released(
            "deploy/prod".into(),
            &before,
            v1::ReleaseLockResponse {
                released: false,
                lock: Some(stays),
            },
        )
        .unwrap();
        assert_eq!((r.previous_owner.clone(), r.previous_token), (None, None));
        assert_eq!(
            release_line(&r, NOW),
            "lock deploy/prod was not held (nothing changed); it stays held until \
             2025-12-01T11:20:30.000Z (lock_at_least_for)"
        );
    }

    #[test]
    fn an_unknown_lock_is_not_found_and_bad_wire_is_unreachable() {
        let before = list(vec![]);
        let err = released(
            "gone".into(),
            &before,
            v1::ReleaseLockResponse {
                released: false,
                lock: None,
            },
        )
        .err();
        assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::USAGE));
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("release lock gone: no lock gone; `leasehold locks ls` lists them (not found)")
        );
        let mut bad = after("x", 1);
        bad.token = -2;
        let err = released(
            "x".into(),
            &before,
            v1::ReleaseLockResponse {
                released: true,
                lock: Some(bad),
            },
        )
        .err();
        assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::UNREACHABLE));
    }

    #[test]
    fn left_cells() {
        assert_eq!(left_cell(None), "-");
        assert_eq!(left_cell(Some(12_000)), "12s");
        assert_eq!(left_cell(Some(-3_000)), "-3s");
        assert_eq!(left_cell(Some(0)), "0ms");
    }
}
