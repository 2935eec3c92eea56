//! `leasehold audit ls` (ListAudit, one page): the audit log, newest first, filtered.
//!
//! Table mode fits 80 columns and shows untrusted text (actors, targets) inert; JSON mode
//! prints every field, the recorded params as JSON. The agent refuses a viewer token
//! (PERMISSION_DENIED, exit 4): the log names exec argv and the peers of refused calls.

use chrono::{DateTime, Utc};
use leasehold_proto::v1;
use leasehold_proto::wire::WireEnum;
use leasehold_shared::domain::AuditResult;
use serde::Serialize;

use crate::cli::AuditLsArgs;
use crate::cli::values::{TimeOrDuration, epoch_ms};
use crate::client::Agent;
use crate::convert::{Timestamp, WireError, opt_json, opt_string, time};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};

/// One audit row as `audit ls` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditView {
    pub id: i64,
    /// When it was written (database time).
    pub at: Timestamp,
    pub at_ms: i64,
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: String,
    /// The parameters the row recorded; `null` when none.
    pub params: Option<serde_json::Value>,
    pub result: String,
    pub detail: Option<String>,
    /// The connection the call came from; `null` when not known.
    pub peer: Option<String>,
    /// How many calls the row stands for.
    pub count: i64,
}

impl AuditView {
    /// Converts a wire row, refusing what breaks the contract.
    pub fn from_wire(e: v1::AuditEntry) -> Result<Self, WireError> {
        if e.id <= 0 {
            return Err(WireError::OutOfRange {
                field: "id",
                value: e.id,
            });
        }
        if e.count < 1 {
            return Err(WireError::OutOfRange {
                field: "count",
                value: e.count,
            });
        }
        Ok(Self {
            id: e.id,
            at: time("at_ms", e.at_ms)?,
            at_ms: e.at_ms,
            role: e.read_role().word().into_owned(),
            result: e.read_result().word().into_owned(),
            actor: e.actor,
            action: e.action,
            target: e.target,
            params: opt_json("params_json", &e.params_json)?,
            detail: opt_string(e.detail),
            peer: opt_string(e.peer),
            count: e.count,
        })
    }
}

/// One page of `audit ls`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditPage {
    pub entries: Vec<AuditView>,
    /// Give this as `--before-id` for the next page; `null` on the last page.
    pub next_before_id: Option<i64>,
}

impl AuditPage {
    /// Converts a `ListAudit` reply.
    pub fn from_wire(r: v1::ListAuditResponse) -> Result<Self, WireError> {
        let entries = r
            .entries
            .into_iter()
            .map(AuditView::from_wire)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            entries,
            next_before_id: (r.next_before_id > 0).then_some(r.next_before_id),
        })
    }
}

fn when(flag: &str, value: Option<TimeOrDuration>, now: DateTime<Utc>) -> Result<i64> {
    let Some(value) = value else { return Ok(0) };
    let at = value
        .before(now)
        .map_err(|e| Error::usage(format!("{flag}: {e}")))?;
    epoch_ms(flag, at).map_err(Error::Usage)
}

/// The request of `audit ls` (bad input: a usage error, exit 2, before any connection).
pub fn prepare_ls(args: &AuditLsArgs, now: DateTime<Utc>) -> Result<v1::ListAuditRequest> {
    let since_ms = when("--since", args.since, now)?;
    let until_ms = when("--until", args.until, now)?;
    if since_ms != 0 && until_ms != 0 && since_ms >= until_ms {
        return Err(Error::usage("--since must be before --until"));
    }
    let result =
        match args.result.as_deref() {
            None => None,
            Some(word) => Some(AuditResult::from_word(word).ok_or_else(|| {
                Error::usage(format!("--result: {word:?} is not an audit result"))
            })?),
        };
    let mut request = v1::ListAuditRequest {
        actor: args.actor.clone().unwrap_or_default(),
        action: args.action.clone().unwrap_or_default(),
        target: args.target.clone().unwrap_or_default(),
        since_ms,
        until_ms,
        before_id: args.before_id.unwrap_or(0),
        limit: args.limit,
        ..Default::default()
    };
    // Both the enum and the word: an older agent reads only the word.
    request.set_result_filter(result);
    Ok(request)
}

/// Runs `audit ls`.
pub async fn run_ls(agent: &Agent, request: v1::ListAuditRequest, out: &mut Out) -> Result<u8> {
    let reply = agent.list_audit(request).await?;
    let page = AuditPage::from_wire(reply).map_err(|e| Error::bad_wire("list audit", e))?;
    if out.json_mode() {
        out.json(&page)?;
    } else {
        out.lines(ls_table(&page))?;
    }
    Ok(exit::OK)
}

/// The table of `audit ls`.
pub fn ls_table(page: &AuditPage) -> Vec<String> {
    if page.entries.is_empty() {
        return vec!["no audit rows".to_owned()];
    }
    let mut table = Table::new(vec![
        Column::new("ID", 2, 10).right(),
        Column::new("AT", 19, 19),
        Column::new("ACTOR", 5, 24),
        Column::new("ACTION", 6, 20),
        Column::new("RESULT", 6, 7),
        Column::new("N", 1, 6).right(),
        Column::new("TARGET", 6, 200),
    ]);
    for e in &page.entries {
        let at = e.at.rfc3339();
        table.row(vec![
            e.id.to_string(),
            at.get(..19).unwrap_or(&at).replace('T', " "),
            e.actor.clone(),
            e.action.clone(),
            e.result.clone(),
            e.count.to_string(),
            e.target.clone(),
        ]);
    }
    let mut lines = table.render(WIDTH);
    lines.extend(
        page.next_before_id
            .map(|id| format!("next page: --before-id {id}")),
    );
    lines
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{AuditCommand, Cli, Command};
    use crate::output::text::width;

    fn parse(args: &[&str]) -> std::result::Result<Cli, clap::Error> {
        Cli::try_parse_from(
            ["leasehold", "audit", "ls"]
                .into_iter()
                .chain(args.iter().copied()),
        )
    }

    fn ls(args: &[&str]) -> AuditLsArgs {
        match parse(args).map(|c| c.command) {
            Ok(Some(Command::Audit(AuditCommand::Ls(a)))) => a,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn now() -> DateTime<Utc> {
        "2026-12-03T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn defaults_ask_for_the_newest_page() {
        let r = prepare_ls(&ls(&[]), now()).unwrap();
        assert_eq!(
            r,
            v1::ListAuditRequest {
                limit: crate::cli::DEFAULT_LIST_LIMIT,
                ..Default::default()
            }
        );
    }

    #[test]
    fn every_filter_reaches_the_request() {
        let args = ls(&[
            "--actor",
            "uid:1000(alice)",
            "--action",
            "enqueue",
            "--result",
            "denied",
            "--target",
            "task:4",
            "--since",
            "1h",
            "--until",
            "2026-12-03T11:30:00Z",
            "--limit",
            "7",
            "--before-id",
            "99",
        ]);
        let r = prepare_ls(&args, now()).unwrap();
        assert_eq!(r.actor, "uid:1000(alice)");
        assert_eq!(r.action, "enqueue");
        assert_eq!(r.read_result(), Ok(Some(AuditResult::Denied)));
        assert_eq!(r.audit_result, v1::AuditResult::Denied as i32);
        assert_eq!(r.target, "task:4");
        assert_eq!(r.since_ms, now().timestamp_millis() - 3_600_000);
        assert_eq!(r.until_ms, now().timestamp_millis() - 1_800_000);
        assert_eq!((r.limit, r.before_id), (7, 99));
        // `--before` is the same flag, as `tasks ls` spells it.
        assert_eq!(ls(&["--before", "5"]).before_id, Some(5));
    }

    #[test]
    fn bad_filters_exit_2() {
        for bad in [
            &["--result", "maybe"][..],
            &["--limit", "0"],
            &["--limit", "1001"],
            &["--before-id", "0"],
            &["--since", "yesterday"],
            &["--actor", ""],
            &["--action", "a\u{7}"],
            &["--output", "yaml"],
        ] {
            match parse(bad) {
                Ok(cli) => panic!("{bad:?} should be refused, got {cli:?}"),
                Err(e) => assert_eq!(e.exit_code(), 2, "{bad:?}"),
            }
        }
        let backwards = ls(&["--since", "1h", "--until", "2h"]);
        let e = prepare_ls(&backwards, now()).unwrap_err();
        assert_eq!(crate::exit::exit_code(&e), 2, "{e}");
    }

    fn entry(id: i64, actor: &str, target: &str) -> v1::AuditEntry {
        v1::AuditEntry {
            id,
            at_ms: now().timestamp_millis(),
            actor: actor.into(),
            actor_role: v1::Role::Operator as i32,
            action: "enqueue".into(),
            target: target.into(),
            params_json: r#"{"payload_sha256":"ab","argv":["/bin/echo"]}"#.into(),
            audit_result: v1::AuditResult::Applied as i32,
            detail: String::new(),
            peer: "uid:1000(alice) pid:7".into(),
            count: 3,
            ..Default::default()
        }
    }

    #[test]
    fn the_table_fits_80_columns_and_is_inert() {
        let page = AuditPage::from_wire(v1::ListAuditResponse {
            entries: vec![
                entry(12, "uid:1000(alice)", "task:42"),
                entry(11, "evil\u{1b}[31mred", &"t".repeat(300)),
            ],
            next_before_id: 11,
        })
        .unwrap();
        let lines = ls_table(&page);
        assert!(lines.iter().all(|l| width(l) <= WIDTH), "{lines:#?}");
        assert!(lines.iter().all(|l| !l.contains('\u{1b}')), "{lines:#?}");
        assert!(lines[0].starts_with("ID"), "{lines:#?}");
        assert!(lines[1].contains("2026-12-03 12:00:00"), "{lines:#?}");
        assert_eq!(lines.last().unwrap(), "next page: --before-id 11");
    }

    #[test]
    fn json_carries_every_field() {
        let page = AuditPage::from_wire(v1::ListAuditResponse {
            entries: vec![entry(12, "alice", "task:42")],
            next_before_id: 0,
        })
        .unwrap();
        let v = serde_json::to_value(&page).unwrap();
        assert_eq!(v["next_before_id"], serde_json::Value::Null);
        let e = &v["entries"][0];
        assert_eq!(e["params"]["argv"][0], "/bin/echo");
        assert_eq!(e["peer"], "uid:1000(alice) pid:7");
        assert_eq!(e["detail"], serde_json::Value::Null);
        assert_eq!(
            (e["role"].as_str(), e["result"].as_str()),
            (Some("operator"), Some("applied"))
        );
        assert_eq!(
            (e["count"].as_i64(), e["at"].as_str()),
            (Some(3), Some("2026-12-03T12:00:00.000Z"))
        );
    }

    #[test]
    #[allow(deprecated)] // an older agent fills only the words
    fn an_older_agent_words_and_unknown_enum_numbers_are_shown_as_sent() {
        let mut old = entry(1, "a", "t");
        (old.actor_role, old.role) = (0, "system".into());
        (old.audit_result, old.result) = (0, "denied".into());
        let v = AuditView::from_wire(old).unwrap();
        assert_eq!((v.role.as_str(), v.result.as_str()), ("system", "denied"));
        let mut newer = entry(2, "a", "t");
        newer.actor_role = 8;
        (newer.audit_result, newer.result) = (12, "deferred".into());
        let v = AuditView::from_wire(newer).unwrap();
        assert_eq!(
            (v.role.as_str(), v.result.as_str()),
            ("unknown(8)", "deferred")
        );
    }

    #[test]
    fn a_broken_reply_is_refused() {
        let mut bad = entry(1, "a", "t");
        bad.count = 0;
        assert!(AuditView::from_wire(bad).is_err());
        let mut bad = entry(1, "a", "t");
        bad.params_json = "{".into();
        assert!(AuditView::from_wire(bad).is_err());
    }
}
