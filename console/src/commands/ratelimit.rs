//! `leasehold ratelimit set|clear|ls`: SetRateLimit, and the rate limits of GetOverview.
//!
//! Checked locally before connecting (exit 2, no call): the scope (a task type or --global,
//! not both) and the limit, `N/PERIOD` within the agent's bounds ([`crate::cli::values::rate`]).
//! A viewer token is refused by the agent (permission denied, exit 4); whatever else the agent
//! refuses maps as every command's errors do ([`crate::exit`]).
//!
//! `ls` reads the same cached overview as `leasehold types`, so its fill is at most 1 s old;
//! past the overview's first 1,000 types a rate limit may go unlisted, and `ls` says so.

use leasehold_proto::v1;
use leasehold_proto::v1::set_rate_limit_request::Scope;
use serde::Serialize;

use crate::cli::{RatelimitClearArgs, RatelimitSetArgs};
use crate::client::Agent;
use crate::convert::WireError;
use crate::convert::overview::TypeList;
use crate::convert::rate::{FillView, RateView};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::shown;

/// The scope of a request: `--global` or a type, exactly one.
fn scope(command: &str, global: bool, task_type: Option<&String>) -> Result<Scope> {
    match (global, task_type) {
        (true, None) => Ok(Scope::Global(true)),
        (false, Some(t)) => Ok(Scope::TaskType(t.clone())),
        (true, Some(_)) => Err(Error::usage(format!(
            "ratelimit {command}: give a task type or --global, not both"
        ))),
        (false, None) => Err(Error::usage(format!(
            "ratelimit {command}: give a task type or --global"
        ))),
    }
}

/// The request of `ratelimit set` (the limit was checked when parsed).
pub fn prepare_set(args: &RatelimitSetArgs) -> Result<v1::SetRateLimitRequest> {
    let scope = scope("set", args.global, args.task_type.as_ref())?;
    Ok(v1::SetRateLimitRequest {
        scope: Some(scope),
        limit: Some(v1::RateLimit {
            starts: args.rate.starts,
            period_ms: u64::try_from(args.rate.period.as_millis()).unwrap_or(u64::MAX),
        }),
        clear: false,
    })
}

/// The request of `ratelimit clear`.
pub fn prepare_clear(args: &RatelimitClearArgs) -> Result<v1::SetRateLimitRequest> {
    let scope = scope("clear", args.global, args.task_type.as_ref())?;
    Ok(v1::SetRateLimitRequest {
        scope: Some(scope),
        limit: None,
        clear: true,
    })
}

/// The JSON of `ratelimit set` and `clear`; a `null` limit means none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    pub scope: &'static str,
    pub task_type: Option<String>,
    /// The limit now in force (`null` after a clear).
    pub limit: Option<RateView>,
    pub previous: Option<RateView>,
}

impl Changed {
    /// The change a reply reports for `request`: a set must come back with a limit, a clear
    /// without one.
    pub fn from_reply(
        request: &v1::SetRateLimitRequest,
        reply: &v1::SetRateLimitResponse,
    ) -> Result<Self, WireError> {
        let (scope, task_type) = match &request.scope {
            Some(Scope::TaskType(t)) => ("type", Some(t.clone())),
            Some(Scope::Global(_)) | None => ("global", None),
        };
        let limit = RateView::from_wire_opt(reply.limit.as_ref())?;
        match (request.clear, &limit) {
            (false, None) => return Err(WireError::MissingField("limit")),
            (true, Some(l)) => {
                return Err(WireError::Broken(format!(
                    "a rate limit of {} still in force after clearing it",
                    l.text
                )));
            }
            _ => {}
        }
        Ok(Self {
            scope,
            task_type,
            limit,
            previous: RateView::from_wire_opt(reply.previous.as_ref())?,
        })
    }
}

/// Runs `ratelimit set` or `ratelimit clear` (one RPC, SetRateLimit).
pub async fn run_set(agent: &Agent, request: v1::SetRateLimitRequest, out: &mut Out) -> Result<u8> {
    let reply = agent.set_rate_limit(request.clone()).await?;
    let changed = Changed::from_reply(&request, &reply)
        .map_err(|e| Error::bad_wire("set the rate limit", e))?;
    // On stderr in both output modes, as `pause` does: stdout stays the result.
    for w in &reply.warnings {
        out.note(&format!("warning: {w}"));
    }
    if out.json_mode() {
        out.json(&changed)?;
    } else {
        out.line(&line(&changed))?;
    }
    Ok(exit::OK)
}

/// `rate limit of type email.send: 50/1s (was none)`, `global rate limit cleared (was 1000/1m)`,
/// …
pub fn line(c: &Changed) -> String {
    let task_type = c.task_type.as_deref().map(|t| shown(t, 64));
    let name = match &task_type {
        Some(t) => format!("rate limit of type {t}"),
        None => "global rate limit".to_owned(),
    };
    let was = c.previous.as_ref().map_or("none", |l| l.text.as_str());
    match (&c.limit, &c.previous) {
        (Some(now), Some(before)) if now == before => format!("{name}: {} (unchanged)", now.text),
        (Some(now), _) => format!("{name}: {} (was {was})", now.text),
        (None, Some(before)) => format!("{name} cleared (was {})", before.text),
        (None, None) => match &task_type {
            Some(t) => format!("type {t} had no rate limit (nothing changed)"),
            None => "there was no global rate limit (nothing changed)".to_owned(),
        },
    }
}

/// One rate limit in force, as `ratelimit ls` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateRow {
    pub scope: &'static str,
    pub task_type: Option<String>,
    pub limit: RateView,
    /// Starts in the window ending at the overview's `now`.
    pub used: u64,
    /// The window holds as many starts as the limit allows.
    pub full: bool,
}

impl RateRow {
    fn new(scope: &'static str, task_type: Option<String>, fill: &FillView) -> Self {
        Self {
            scope,
            task_type,
            limit: RateView::of(fill.limit()),
            used: fill.used,
            full: fill.full(),
        }
    }
}

/// The rate limits of an overview: the global one first, then each type's, in the list's
/// order (by name).
pub fn rows(list: &TypeList) -> Vec<RateRow> {
    let global = list
        .global_rate
        .iter()
        .map(|f| RateRow::new("global", None, f));
    let types = list.types.iter().filter_map(|t| {
        t.rate
            .as_ref()
            .map(|f| RateRow::new("type", Some(t.task_type.clone()), f))
    });
    global.chain(types).collect()
}

/// What `ls` says when the overview was cut: a type past it may have a rate limit too.
fn cut_note(list: &TypeList) -> Option<String> {
    list.truncated.then(|| {
        format!(
            "only the first {} by name were read; later ones may have rate limits too",
            super::plural(list.types.len() as u64, "type", "types")
        )
    })
}

/// Runs `ratelimit ls`.
pub async fn run_ls(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.get_overview().await?;
    let list = TypeList::from_wire(&reply).map_err(|e| Error::bad_wire("get the overview", e))?;
    let rows = rows(&list);
    if out.json_mode() {
        out.json(&rows)?;
        // stdout stays the array; the cut is said on stderr.
        if let Some(note) = cut_note(&list) {
            out.note(&note);
        }
    } else {
        out.lines(ls_table(&rows))?;
        if let Some(note) = cut_note(&list) {
            out.line(&note)?;
        }
    }
    Ok(exit::OK)
}

/// The table of `ratelimit ls`. Only the type name gives way on 80 columns; the limit and
/// the fill are never cut.
pub fn ls_table(rows: &[RateRow]) -> Vec<String> {
    if rows.is_empty() {
        return vec!["no rate limits".to_owned()];
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.scope.to_owned(),
                r.task_type.clone().unwrap_or_else(|| "-".to_owned()),
                r.limit.text.clone(),
                format!("{}/{}", r.used, r.limit.starts),
            ]
        })
        .collect();
    let whole = |header: &'static str, i: usize| {
        let w = cells
            .iter()
            .map(|r| r[i].len())
            .max()
            .unwrap_or(0)
            .max(header.len());
        Column::new(header, w, w)
    };
    let mut table = Table::new(vec![
        Column::new("SCOPE", 6, 6),
        Column::new("TYPE", 4, 64),
        whole("LIMIT", 2),
        whole("USED", 3),
    ]);
    for row in cells {
        table.row(row);
    }
    table.render(WIDTH)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold_shared::domain::RateLimit;

    use super::*;

    fn rate(starts: u32, ms: u64) -> RateLimit {
        RateLimit::new(starts, Duration::from_millis(ms)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn wire(starts: u32, period_ms: u64) -> v1::RateLimit {
        v1::RateLimit { starts, period_ms }
    }

    fn set_args(task_type: Option<&str>, global: bool, r: RateLimit) -> RatelimitSetArgs {
        RatelimitSetArgs {
            task_type: task_type.map(str::to_owned),
            rate: r,
            global,
        }
    }

    fn clear_args(task_type: Option<&str>, global: bool) -> RatelimitClearArgs {
        RatelimitClearArgs {
            task_type: task_type.map(str::to_owned),
            global,
        }
    }

    #[test]
    fn set_requests_carry_the_scope_and_the_limit_in_milliseconds() {
        assert_eq!(
            prepare_set(&set_args(Some("email.send"), false, rate(50, 1_000))).ok(),
            Some(v1::SetRateLimitRequest {
                scope: Some(Scope::TaskType("email.send".into())),
                limit: Some(wire(50, 1_000)),
                clear: false,
            })
        );
        assert_eq!(
            prepare_set(&set_args(None, true, rate(1000, 60_000))).ok(),
            Some(v1::SetRateLimitRequest {
                scope: Some(Scope::Global(true)),
                limit: Some(wire(1000, 60_000)),
                clear: false,
            })
        );
    }

    #[test]
    fn clear_requests_carry_no_limit() {
        assert_eq!(
            prepare_clear(&clear_args(Some("noop"), false)).ok(),
            Some(v1::SetRateLimitRequest {
                scope: Some(Scope::TaskType("noop".into())),
                limit: None,
                clear: true,
            })
        );
        assert_eq!(
            prepare_clear(&clear_args(None, true)).ok(),
            Some(v1::SetRateLimitRequest {
                scope: Some(Scope::Global(true)),
                limit: None,
                clear: true,
            })
        );
    }

    #[test]
    fn a_scope_is_one_of_a_type_or_global() {
        assert!(matches!(
            prepare_set(&set_args(None, false, rate(1, 1))),
            Err(Error::Usage(m)) if m == "ratelimit set: give a task type or --global"
        ));
        assert!(matches!(
            prepare_set(&set_args(Some("noop"), true, rate(1, 1))),
            Err(Error::Usage(m)) if m.ends_with("not both")
        ));
        assert!(matches!(
            prepare_clear(&clear_args(None, false)),
            Err(Error::Usage(m)) if m == "ratelimit clear: give a task type or --global"
        ));
        assert!(matches!(
            prepare_clear(&clear_args(Some("noop"), true)),
            Err(Error::Usage(_))
        ));
    }

    fn changed(
        request: &v1::SetRateLimitRequest,
        limit: Option<v1::RateLimit>,
        previous: Option<v1::RateLimit>,
    ) -> Result<Changed, WireError> {
        Changed::from_reply(
            request,
            &v1::SetRateLimitResponse {
                limit,
                previous,
                warnings: Vec::new(),
            },
        )
    }

    #[test]
    fn set_and_clear_say_what_changed() {
        let set_type = prepare_set(&set_args(Some("email.send"), false, rate(50, 1_000)));
        let set_type = set_type.unwrap_or_else(|e| panic!("{e}"));
        let set_global = prepare_set(&set_args(None, true, rate(1000, 60_000)));
        let set_global = set_global.unwrap_or_else(|e| panic!("{e}"));
        let clear_type = prepare_clear(&clear_args(Some("email.send"), false));
        let clear_type = clear_type.unwrap_or_else(|e| panic!("{e}"));
        let clear_global = prepare_clear(&clear_args(None, true));
        let clear_global = clear_global.unwrap_or_else(|e| panic!("{e}"));
        let text = |c: Result<Changed, WireError>| c.map(|c| line(&c));
        assert_eq!(
            text(changed(&set_type, Some(wire(50, 1_000)), None)).as_deref(),
            Ok("rate limit of type email.send: 50/1s (was none)")
        );
        assert_eq!(
            text(changed(
                &set_global,
                Some(wire(1000, 60_000)),
                Some(wire(500, 60_000))
            ))
            .as_deref(),
            Ok("global rate limit: 1000/1m (was 500/1m)")
        );
        assert_eq!(
            text(changed(
                &set_global,
                Some(wire(1000, 60_000)),
                Some(wire(1000, 60_000))
            ))
            .as_deref(),
            Ok("global rate limit: 1000/1m (unchanged)")
        );
        assert_eq!(
            text(changed(&clear_type, None, Some(wire(50, 1_000)))).as_deref(),
            Ok("rate limit of type email.send cleared (was 50/1s)")
        );
        assert_eq!(
            text(changed(&clear_global, None, Some(wire(1000, 60_000)))).as_deref(),
            Ok("global rate limit cleared (was 1000/1m)")
        );
        assert_eq!(
            text(changed(&clear_type, None, None)).as_deref(),
            Ok("type email.send had no rate limit (nothing changed)")
        );
        assert_eq!(
            text(changed(&clear_global, None, None)).as_deref(),
            Ok("there was no global rate limit (nothing changed)")
        );
    }

    #[test]
    fn set_and_clear_json_name_the_scope_and_both_limits() {
        let set_type = prepare_set(&set_args(Some("email.send"), false, rate(50, 1_000)));
        let set_type = set_type.unwrap_or_else(|e| panic!("{e}"));
        let c = changed(&set_type, Some(wire(50, 1_000)), None);
        assert_eq!(
            c.ok().and_then(|c| serde_json::to_value(c).ok()),
            Some(serde_json::json!({
                "scope": "type",
                "task_type": "email.send",
                "limit": {"starts": 50, "period_ms": 1000, "text": "50/1s"},
                "previous": null
            }))
        );
        let clear_global = prepare_clear(&clear_args(None, true));
        let clear_global = clear_global.unwrap_or_else(|e| panic!("{e}"));
        let c = changed(&clear_global, None, Some(wire(1000, 60_000)));
        assert_eq!(
            c.ok()
                .and_then(|c| serde_json::to_string(&c).ok())
                .as_deref(),
            Some(
                r#"{"scope":"global","task_type":null,"limit":null,"previous":{"starts":1000,"period_ms":60000,"text":"1000/1m"}}"#
            )
        );
    }

    #[test]
    fn a_reply_that_contradicts_its_request_is_refused() {
        let set = prepare_set(&set_args(Some("noop"), false, rate(5, 1_000)));
        let set = set.unwrap_or_else(|e| panic!("{e}"));
        let clear = prepare_clear(&clear_args(Some("noop"), false));
        let clear = clear.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            changed(&set, None, None),
            Err(WireError::MissingField("limit"))
        );
        assert!(matches!(
            changed(&clear, Some(wire(5, 1_000)), None),
            Err(WireError::Broken(m)) if m.contains("5/1s still in force")
        ));
        assert!(matches!(
            changed(&set, Some(wire(0, 1_000)), None),
            Err(WireError::OutOfRange {
                field: "starts",
                ..
            })
        ));
        assert!(matches!(
            changed(&set, Some(wire(5, 1_000)), Some(wire(5, 0))),
            Err(WireError::OutOfRange {
                field: "period_ms",
                ..
            })
        ));
    }

    fn fill(starts: u32, period_ms: u64, used: u64) -> Option<v1::RateFill> {
        Some(v1::RateFill {
            limit: Some(wire(starts, period_ms)),
            used,
        })
    }

    fn overview(types: Vec<v1::TypeSummary>, global_rate: Option<v1::RateFill>) -> TypeList {
        TypeList::from_wire(&v1::GetOverviewResponse {
            types,
            global_rate,
            now_ms: 1_764_588_000_000,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn typed(name: &str, rate: Option<v1::RateFill>) -> v1::TypeSummary {
        v1::TypeSummary {
            task_type: name.into(),
            rate,
            ..Default::default()
        }
    }

    #[test]
    fn ls_lists_the_global_limit_then_each_type_with_one() {
        let list = overview(
            vec![
                typed("email.send", fill(50, 1_000, 12)),
                typed("noop", None),
                typed("report.build", fill(5, 3_600_000, 5)),
            ],
            fill(1000, 60_000, 812),
        );
        let rows = rows(&list);
        assert_eq!(
            ls_table(&rows),
            [
                "SCOPE   TYPE          LIMIT    USED",
                "global  -             1000/1m  812/1000",
                "type    email.send    50/1s    12/50",
                "type    report.build  5/1h     5/5",
            ]
        );
        assert_eq!(
            serde_json::to_value(&rows).ok(),
            Some(serde_json::json!([
                {"scope": "global", "task_type": null,
                 "limit": {"starts": 1000, "period_ms": 60000, "text": "1000/1m"},
                 "used": 812, "full": false},
                {"scope": "type", "task_type": "email.send",
                 "limit": {"starts": 50, "period_ms": 1000, "text": "50/1s"},
                 "used": 12, "full": false},
                {"scope": "type", "task_type": "report.build",
                 "limit": {"starts": 5, "period_ms": 3600000, "text": "5/1h"},
                 "used": 5, "full": true},
            ]))
        );
    }

    #[test]
    fn ls_without_rate_limits_says_so() {
        let list = overview(vec![typed("noop", None)], None);
        let rows = rows(&list);
        assert_eq!(ls_table(&rows), ["no rate limits"]);
        assert_eq!(serde_json::to_string(&rows).ok().as_deref(), Some("[]"));
        assert_eq!(cut_note(&list), None);
        let mut cut = list;
        cut.truncated = true;
        assert_eq!(
            cut_note(&cut).as_deref(),
            Some("only the first 1 type by name were read; later ones may have rate limits too")
        );
    }

    #[test]
    fn ls_fits_80_columns_and_never_cuts_a_limit_or_a_fill() {
        let long = format!("{}\u{1b}[2J", "t".repeat(70));
        let list = overview(
            vec![typed(&long, fill(1_000_000, 86_400_000, 123_456_789))],
            None,
        );
        let lines = ls_table(&rows(&list));
        for line in &lines {
            assert!(crate::output::text::width(line) <= WIDTH, "{line}");
            assert!(!line.contains('\u{1b}'), "{line}");
        }
        assert!(
            lines[1].ends_with("1000000/1d  123456789/1000000"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains('…'), "{}", lines[1]);
    }
}
