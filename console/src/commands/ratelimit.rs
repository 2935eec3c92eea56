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
    super::print_change(out, &reply.warnings, &changed, line)
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
mod tests;
