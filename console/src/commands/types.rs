//! `leasehold types` (GetOverview): one row per task type — waiting, running against its limit,
//! dead, paused — then the global limit. The same counts as the console's Types view, at most
//! `OVERVIEW_MAX_AGE` (1 s) old, read by the agent from the database.

use crate::client::Agent;
use crate::convert::overview::TypeList;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};

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

/// The table of `types`, then one line on the global limit (and one when the list is cut).
///
/// On 80 columns the type name gives way first (down to 4 columns), then the state word (to
/// 6); a count is cut only when the counts alone no longer fit the line.
pub fn table(list: &TypeList) -> Vec<String> {
    let mut lines = if list.types.is_empty() {
        vec!["no task types".to_owned()]
    } else {
        let rows: Vec<Vec<String>> = list
            .types
            .iter()
            .map(|t| {
                let limit = t.limit.map_or_else(|| "-".to_owned(), |n| n.to_string());
                vec![
                    t.task_type.clone(),
                    t.queued.to_string(),
                    t.scheduled.to_string(),
                    t.retrying.to_string(),
                    format!("{}/{limit}", t.running),
                    t.dead.to_string(),
                    t.finished_last_minute.to_string(),
                    t.state.word().to_owned(),
                ]
            })
            .collect();
        // A count is as wide as its widest cell: only the name gives way.
        let count = |header: &'static str, i: usize| {
            let widest = rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
            let w = widest.max(header.len());
            Column::new(header, w, w).right()
        };
        let mut table = Table::new(vec![
            Column::new("TYPE", 4, 64),
            count("QUEUED", 1),
            count("LATER", 2),
            count("RETRY", 3),
            count("RUNNING", 4),
            count("DEAD", 5),
            count("DONE/M", 6),
            Column::new("STATE", 6, 8),
        ]);
        for row in rows {
            table.row(row);
        }
        table.render(WIDTH)
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
    if list.truncated {
        lines.push(format!(
            "only the first {} by name are listed",
            super::plural(list.types.len() as u64, "type", "types")
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use leasehold_proto::v1;

    use super::*;
    use crate::output::text::width;

    fn list(types: Vec<v1::TypeSummary>, global_limit: Option<u32>, paused: bool) -> TypeList {
        TypeList::from_wire(&v1::GetOverviewResponse {
            types,
            global_limit,
            global_paused: paused,
            truncated: false,
            now_ms: 1_764_588_000_000,
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_table_fits_80_columns_and_never_cuts_a_count() {
        let busy = v1::TypeSummary {
            task_type: "email.send".into(),
            queued: 12,
            scheduled: 0,
            retrying: 3,
            running: 5,
            dead: 1,
            finished_last_minute: 40,
            dead_last_minute: 0,
            limit: Some(5),
            paused: false,
        };
        let huge = v1::TypeSummary {
            task_type: format!("{}\u{1b}[2J", "x".repeat(70)),
            queued: 123_456_789,
            scheduled: 9_876_543,
            retrying: 1_000_000,
            running: 100_000,
            dead: 99_999_999,
            finished_last_minute: 1_234_567,
            paused: true,
            ..Default::default()
        };
        let lines = table(&list(vec![busy, huge], Some(10), true));
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            [
                "TYPE", "QUEUED", "LATER", "RETRY", "RUNNING", "DEAD", "DONE/M", "STATE"
            ]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "email.send",
                "12",
                "0",
                "3",
                "5/5",
                "1",
                "40",
                "at",
                "limit"
            ],
            "{}",
            lines[1]
        );
        for count in [
            "123456789",
            "9876543",
            "1000000",
            "100000/-",
            "99999999",
            "1234567",
        ] {
            assert!(lines[2].contains(count), "{count} cut: {}", lines[2]);
        }
        assert!(lines[2].ends_with("paused"), "{}", lines[2]);
        assert!(lines[2].starts_with("xxx"), "{}", lines[2]);
        assert_eq!(lines[3], "global: limit 10 · every claim paused");
        assert_eq!(lines.len(), 4);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{line}");
            assert!(!line.contains('\u{1b}'), "{line}");
        }
    }

    #[test]
    fn with_wider_counts_the_name_and_the_state_give_way_first() {
        let t = v1::TypeSummary {
            task_type: "report.build".into(),
            queued: 1_234_567_890,
            scheduled: 123_456_789,
            retrying: 12_345_678,
            running: 10_000,
            dead: 123_456_789,
            finished_last_minute: 12_345_678,
            limit: Some(10_000),
            ..Default::default()
        };
        let lines = table(&list(vec![t], None, false));
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells[1..6],
            [
                "1234567890",
                "123456789",
                "12345678",
                "10000/10000",
                "123456789"
            ],
            "{}",
            lines[1]
        );
        assert!(
            cells[0].starts_with("rep") && cells[0].ends_with('…'),
            "{}",
            lines[1]
        );
        assert!(cells.len() >= 7 && cells[6] == "12345678", "{}", lines[1]);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{line}");
        }
    }

    #[test]
    fn no_types_and_a_cut_list_say_so() {
        assert_eq!(
            table(&list(vec![], None, false)),
            ["no task types", "global: unlimited"]
        );
        let mut cut = list(
            vec![v1::TypeSummary {
                task_type: "a".into(),
                ..Default::default()
            }],
            None,
            false,
        );
        cut.truncated = true;
        assert_eq!(
            table(&cut).last().map(String::as_str),
            Some("only the first 1 type by name are listed")
        );
    }

    #[test]
    fn json_names_every_count_and_says_unlimited_with_null() {
        let l = list(
            vec![v1::TypeSummary {
                task_type: "noop".into(),
                queued: 2,
                running: 1,
                ..Default::default()
            }],
            None,
            false,
        );
        let json = serde_json::to_value(&l).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "types": [{
                    "task_type": "noop", "queued": 2, "scheduled": 0, "retrying": 0,
                    "running": 1, "dead": 0, "finished_last_minute": 0, "dead_last_minute": 0,
                    "limit": null, "paused": false, "state": "active"
                }],
                "global_limit": null,
                "global_paused": false,
                "truncated": false,
                "now": "2025-12-01T11:20:00.000Z"
            })
        );
    }
}
