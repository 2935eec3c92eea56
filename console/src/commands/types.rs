//! `leasehold types` (GetOverview): one row per task type — waiting, how long its oldest
//! waiting task has been due (OLDEST), running against its limit,
//! its per-key limit, starts against its rate limit, dead, shed, its circuit breaker, paused —
//! then the global limit and rate limit. The
//! same counts as the console's Types view, read by the agent from the database and served
//! from its cache: at most a second old, or ten times as long as the read took when that is
//! longer (a deep queue); the JSON's `now` is when they were read.

use crate::client::Agent;
use crate::convert::overview::{TypeList, TypeView};
use crate::convert::shed::after_text;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::short_duration;

/// Runs `types`.
pub async fn run(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.get_overview().await?;
    let list = TypeList::from_wire(&reply).map_err(|e| Error::bad_wire("get the overview", e))?;
    if out.json_mode() {
        out.json(&list)?;
    } else {
        out.lines(table(&list))?;
    }
    Ok(exit::OK)
}

/// The table of `types`, then one line on the global limit, one on the global rate limit
/// when there is one (and one when the list is cut).
///
/// The OLDEST column is there when some type has a waiting task: how long the type's oldest
/// waiting task (queued or retry_wait, due) has been due, `-` when none waits; it is the last
/// optional column to give way (the age of the backlog is what an operator looks for first).
///
/// The PER-KEY column is there when some type has a per-key limit, the RATE column when some
/// type has a rate limit, the SHED/M column when some type sheds, the BREAKER column when some
/// type has a circuit breaker. On 80 columns the type name gives way first (down to 4
/// columns), then the state word (to 6). A per-key, rate, shed or breaker cell is never cut
/// (`12/50/…` would mislead): when they still do not fit whole, PER-KEY (a setting, where the
/// others are live), then RATE, then SHED/M, then BREAKER (an open breaker stops the whole
/// type), then OLDEST are left out entirely, each with a line saying where it is. A count is
/// cut only when the counts alone no longer fit the line.
pub fn table(list: &TypeList) -> Vec<String> {
    let mut lines = if list.types.is_empty() {
        vec!["no task types".to_owned()]
    } else {
        type_table(list)
    };
    let limit = list
        .global_limit
        .map_or_else(|| "unlimited".to_owned(), |n| format!("limit {n}"));
    let paused = if list.global_paused {
        " · every claim paused"
    } else {
        ""
    };
    lines.push(format!("global: {limit}{paused}"));
    if let Some(rate) = &list.global_rate {
        let full = if rate.full() { " · rate limited" } else { "" };
        lines.push(format!(
            "global rate limit: {}, {} used{full}",
            rate.limit(),
            rate.used
        ));
    }
    if list.truncated {
        lines.push(format!(
            "only the first {} by name are listed",
            super::plural(list.types.len() as u64, "type", "types")
        ));
    }
    lines
}

/// Where the optional columns are: the cells of each row and the column list.
const OLDEST: usize = 4;
const PER_KEY: usize = 6;
const RATE: usize = 7;
const SHED: usize = 10;
const BREAKER: usize = 11;

/// The optional columns in the order they give way, each with the line that says where its
/// values are when it is left out.
const GIVE_WAY: [(usize, &str); 5] = [
    (
        PER_KEY,
        "PER-KEY left out to fit 80 columns; `leasehold types --output json` has it",
    ),
    (
        RATE,
        "RATE left out to fit 80 columns; `leasehold ratelimit ls` lists the rates",
    ),
    (
        SHED,
        "SHED/M left out to fit 80 columns; `leasehold types --output json` has it",
    ),
    (
        BREAKER,
        "BREAKER left out to fit 80 columns; `leasehold breaker ls` lists the breakers",
    ),
    (
        OLDEST,
        "OLDEST left out to fit 80 columns; `leasehold types --output json` has it",
    ),
];

/// A SHED/M cell: the tasks shed in the last minute, then `>` the shed-after duration of a
/// type that sheds (`4 >30s`); `-` when it neither sheds nor shed.
fn shed_cell(t: &TypeView) -> String {
    match (t.shed_after_ms, t.shed_last_minute) {
        (Some(ms), n) => format!("{n} >{}", after_text(ms)),
        (None, 0) => "-".to_owned(),
        (None, n) => n.to_string(),
    }
}

/// An OLDEST cell: how long the type's oldest waiting task has been due, in at most two units
/// (`42s`, `3m12s`, `2h05m`); `-` when none waits.
fn oldest_cell(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "-".to_owned(),
        |ms| short_duration(i64::try_from(ms).unwrap_or(i64::MAX)),
    )
}

fn type_table(list: &TypeList) -> Vec<String> {
    let now_ms = list.now.millis();
    let rows: Vec<Vec<String>> = list
        .types
        .iter()
        .map(|t| {
            let limit = t.limit.map_or_else(|| "-".to_owned(), |n| n.to_string());
            let per_key = t
                .per_key_limit
                .map_or_else(|| "-".to_owned(), |n| n.to_string());
            let rate = t.rate.as_ref().map_or_else(|| "-".to_owned(), |r| r.text());
            vec![
                t.task_type.clone(),
                t.queued.to_string(),
                t.scheduled.to_string(),
                t.retrying.to_string(),
                oldest_cell(t.oldest_waiting_ms),
                format!("{}/{limit}", t.running),
                per_key,
                rate,
                t.dead.to_string(),
                t.finished_last_minute.to_string(),
                shed_cell(t),
                t.breaker
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |b| b.cell(now_ms)),
                t.state.word().to_owned(),
            ]
        })
        .collect();
    // A count, a per-key, rate, shed or breaker cell is as wide as its widest cell: only the name and
    // the state give way.
    let whole = |header: &'static str, i: usize| {
        let widest = rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
        let w = widest.max(header.len());
        Column::new(header, w, w).right()
    };
    // A breaker cell is a word, left-aligned, and as whole as the counts.
    let breaker_width = rows
        .iter()
        .map(|r| r[BREAKER].len())
        .max()
        .unwrap_or(0)
        .max("BREAKER".len());
    let columns = vec![
        Column::new("TYPE", 4, 64),
        whole("QUEUED", 1),
        whole("LATER", 2),
        whole("RETRY", 3),
        whole("OLDEST", OLDEST),
        whole("RUNNING", 5),
        whole("PER-KEY", PER_KEY),
        whole("RATE", RATE),
        whole("DEAD", 8),
        whole("DONE/M", 9),
        whole("SHED/M", SHED),
        Column::new("BREAKER", breaker_width, breaker_width),
        Column::new("STATE", 6, 12),
    ];
    // The table with the optional columns in `shown`; the others left out whole.
    let table = |shown: &[usize]| {
        let keep = |i: usize| !GIVE_WAY.iter().any(|(c, _)| *c == i) || shown.contains(&i);
        let pick = |cells: &[String]| -> Vec<String> {
            let kept = cells.iter().enumerate().filter(|(i, _)| keep(*i));
            kept.map(|(_, c)| c.clone()).collect()
        };
        let kept = columns.iter().enumerate().filter(|(i, _)| keep(*i));
        let mut table = Table::new(kept.map(|(_, c)| c.clone()).collect());
        for row in &rows {
            table.row(pick(row));
        }
        table
    };
    // OLDEST is there when some type has a waiting task; PER-KEY when some type has a
    // per-key limit; RATE when some type has a rate limit; SHED/M when some type sheds or shed in the last minute (a type just cleared still
    // shows what it shed); BREAKER when some type has a circuit breaker.
    let wanted = |i: usize| match i {
        PER_KEY => list.types.iter().any(|t| t.per_key_limit.is_some()),
        RATE => list.types.iter().any(|t| t.rate.is_some()),
        BREAKER => list.types.iter().any(|t| t.breaker.is_some()),
        OLDEST => list.types.iter().any(|t| t.oldest_waiting_ms.is_some()),
        _ => list
            .types
            .iter()
            .any(|t| t.shed_after_ms.is_some() || t.shed_last_minute > 0),
    };
    let mut shown: Vec<usize> = GIVE_WAY
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| wanted(*i))
        .collect();
    // Give-way order on 80 columns: the name (down to 4), then the state word (to 6), both in
    // `Table::render`; then, when the optional columns still do not fit whole beside the
    // counts, PER-KEY is left out whole (a setting; the JSON has it), then RATE (`ratelimit
    // ls` has it), then SHED/M (the JSON has it), then BREAKER (`breaker ls` has it), then
    // OLDEST (the JSON has it), each with a line saying so; only then would a count be cut.
    let mut notes = Vec::new();
    for (column, note) in GIVE_WAY {
        if shown.contains(&column) && table(&shown).min_width() > WIDTH {
            shown.retain(|i| *i != column);
            notes.push(note.to_owned());
        }
    }
    let mut lines = table(&shown).render(WIDTH);
    lines.extend(notes);
    lines
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod breaker_tests;
