//! `leasehold shards create|ls`: shard groups, whose shards the agents started with
//! `--shard-groups` share evenly and stickily (DESIGN §4 "Resource leases").
//!
//! Checked locally before connecting (exit 2, no call): the group name's alphabet and length,
//! a count of 1..=4096. Creating a group again with its count changes nothing; with another
//! count the agent refuses (FAILED_PRECONDITION, exit 2) and the message says a group keeps its
//! count. `shards ls GROUP` for an unknown group is NOT_FOUND (exit 2).
//!
//! Relative times are counted from the database `now` of each reply.

use serde::Serialize;

use crate::client::Agent;
use crate::convert::resource::{GroupList, GroupShards, GroupView};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::{age, shown};

use super::locks::left_cell;
use super::plural;

/// The JSON of `shards create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Created {
    pub name: String,
    /// False when it existed with the same count.
    pub created: bool,
    pub group: GroupView,
}

/// Runs `shards create GROUP --count N`.
pub async fn run_create(agent: &Agent, name: String, count: u32, out: &mut Out) -> Result<u8> {
    let reply = agent.create_shard_group(name.clone(), count).await?;
    let what = format!("create shard group {name}");
    let group = GroupView::required(reply.group).map_err(|e| Error::bad_wire(what.clone(), e))?;
    let created = Created {
        name,
        created: reply.created,
        group,
    };
    check_count(&created, count, what)?;
    if out.json_mode() {
        out.json(&created)?;
    } else {
        out.line(&create_line(&created))?;
    }
    Ok(exit::OK)
}

/// An existing group with another count is the failed precondition the agent should have
/// answered: it is not reported as done.
pub fn check_count(c: &Created, asked: u32, what: String) -> Result<()> {
    if c.group.shard_count == asked {
        return Ok(());
    }
    Err(Error::Rpc {
        what,
        status: tonic::Status::failed_precondition(format!(
            "shard group {} exists with {}, not {asked}",
            shown(&c.group.name, 64),
            plural(u64::from(c.group.shard_count), "shard", "shards")
        )),
        hint: Some("a group keeps the count it was created with".into()),
    })
}

/// `created shard group orders with 8 shards`, `shard group orders already exists with 8
/// shards (nothing changed)`.
pub fn create_line(c: &Created) -> String {
    let name = shown(&c.name, 64);
    let shards = plural(u64::from(c.group.shard_count), "shard", "shards");
    if c.created {
        format!("created shard group {name} with {shards}")
    } else {
        format!("shard group {name} already exists with {shards} (nothing changed)")
    }
}

/// Runs `shards ls` without a group.
pub async fn run_ls_groups(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.list_shard_groups().await?;
    let list = GroupList::from_wire(reply).map_err(|e| Error::bad_wire("list shard groups", e))?;
    if out.json_mode() {
        out.json(&list.groups)?;
    } else {
        out.lines(groups_table(&list))?;
    }
    Ok(exit::OK)
}

/// The table of `shards ls`.
pub fn groups_table(list: &GroupList) -> Vec<String> {
    if list.groups.is_empty() {
        return vec![
            "no shard groups (create one with `leasehold shards create GROUP --count N`)"
                .to_owned(),
        ];
    }
    let mut table = Table::new(vec![
        Column::new("GROUP", 16, 40),
        Column::new("SHARDS", 6, 6).right(),
        Column::new("OWNED", 5, 6).right(),
        Column::new("MEMBERS", 7, 7).right(),
        Column::new("MOVES/H", 7, 7).right(),
        Column::new("CREATED", 7, 16),
    ]);
    let now = list.now.millis();
    for g in &list.groups {
        table.row(vec![
            g.name.clone(),
            g.shard_count.to_string(),
            g.owned.to_string(),
            g.members.to_string(),
            g.moves_last_hour.to_string(),
            g.created_at
                .map_or_else(|| "-".to_owned(), |t| age(now, t.millis())),
        ]);
    }
    table.render(WIDTH)
}

/// Runs `shards ls GROUP`.
pub async fn run_ls_group(agent: &Agent, group: String, out: &mut Out) -> Result<u8> {
    let what = format!("list the shards of group {group}");
    let reply = agent.list_shards(group).await?;
    let shards = GroupShards::from_wire(reply).map_err(|e| Error::bad_wire(what, e))?;
    if out.json_mode() {
        out.json(&shards)?;
    } else {
        out.lines(group_lines(&shards))?;
    }
    Ok(exit::OK)
}

/// `group orders: 8 shards, 7 owned, 2 members, 3 moves in the last hour`.
pub fn group_head(g: &GroupView) -> String {
    format!(
        "group {}: {}, {} owned, {}, {} in the last hour",
        shown(&g.name, 64),
        plural(u64::from(g.shard_count), "shard", "shards"),
        g.owned,
        plural(u64::from(g.members), "member", "members"),
        plural(u64::from(g.moves_last_hour), "move", "moves"),
    )
}

/// What `shards ls GROUP` prints: the head line, the shards table, then the members table.
pub fn group_lines(g: &GroupShards) -> Vec<String> {
    let mut lines = vec![group_head(&g.group)];
    // A fencing token is never cut.
    let token_w = g
        .shards
        .iter()
        .map(|s| s.token.to_string().len())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut shards = Table::new(vec![
        Column::new("SHARD", 5, 5).right(),
        Column::new("OWNER", 12, 40),
        Column::new("TOKEN", token_w, token_w).right(),
        Column::new("STATE", 5, 12),
        Column::new("LEFT", 4, 8).right(),
        Column::new("MOVES/H", 7, 7).right(),
    ]);
    for s in &g.shards {
        shards.row(vec![
            s.shard.to_string(),
            s.owner.clone().unwrap_or_else(|| "-".to_owned()),
            s.token.to_string(),
            s.state.clone(),
            left_cell(s.time_left_ms),
            s.moves_last_hour.to_string(),
        ]);
    }
    if shards.is_empty() {
        lines.push("no shards listed".to_owned());
    } else {
        lines.extend(shards.render(WIDTH));
    }
    lines.push(String::new());
    if g.members.is_empty() {
        lines.push(format!(
            "no members (agents join with --shard-groups {})",
            shown(&g.group.name, 64)
        ));
        return lines;
    }
    let now = g.now.millis();
    let mut members = Table::new(vec![
        Column::new("MEMBER", 12, 48),
        Column::new("STATE", 5, 12),
        Column::new("SHARDS", 6, 6).right(),
        Column::new("HEARTBEAT", 9, 16),
    ]);
    for m in &g.members {
        members.row(vec![
            m.agent.clone(),
            m.state.clone(),
            m.shards.to_string(),
            m.heartbeat_at
                .map_or_else(|| "-".to_owned(), |t| age(now, t.millis())),
        ]);
    }
    lines.extend(members.render(WIDTH));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::resource::tests::{NOW, wire_group, wire_shards};
    use crate::output::text::width;
    use leasehold_proto::v1;

    fn group(count: u32) -> GroupView {
        GroupView::from_wire(wire_group("orders", count)).unwrap()
    }

    #[test]
    fn create_lines_say_created_or_already_there() {
        let c = |created| Created {
            name: "orders".into(),
            created,
            group: group(8),
        };
        assert_eq!(
            create_line(&c(true)),
            "created shard group orders with 8 shards"
        );
        assert_eq!(
            create_line(&c(false)),
            "shard group orders already exists with 8 shards (nothing changed)"
        );
        assert_eq!(
            create_line(&Created {
                group: group(1),
                ..c(true)
            }),
            "created shard group orders with 1 shard"
        );
        let json = serde_json::to_value(c(false)).unwrap();
        assert_eq!(json["created"], false);
        assert_eq!(json["group"]["shard_count"], 8);
        assert!(check_count(&c(false), 8, "create".into()).is_ok());
    }

    #[test]
    fn another_count_is_a_failed_precondition() {
        let c = Created {
            name: "orders".into(),
            created: false,
            group: group(8),
        };
        let err = check_count(&c, 16, "create shard group orders".into()).err();
        assert_eq!(err.as_ref().map(exit::exit_code), Some(exit::USAGE));
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some(
                "create shard group orders: shard group orders exists with 8 shards, not 16; a \
                 group keeps the count it was created with (failed precondition)"
            )
        );
    }

    #[test]
    fn groups_table_fits_80_columns() {
        let mut long = wire_group(&"g".repeat(64), 4096);
        long.created_at_ms = 0;
        let list = GroupList::from_wire(v1::ListShardGroupsResponse {
            groups: vec![wire_group("orders", 8), long],
            now_ms: NOW,
        })
        .unwrap();
        let lines = groups_table(&list);
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["GROUP", "SHARDS", "OWNED", "MEMBERS", "MOVES/H", "CREATED"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["orders", "8", "7", "2", "3", "1d00h", "ago"]
        );
        assert!(lines[2].ends_with(" -"), "{}", lines[2]);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{line}");
        }
        let json = crate::output::to_json(&list.groups).unwrap();
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json[0]["name"], "orders");
        assert_eq!(json[0]["created_at"], "2025-11-30T11:20:00.000Z");
        assert_eq!(json[1]["created_at_ms"], serde_json::Value::Null);
        let empty = GroupList {
            groups: vec![],
            now: list.now,
        };
        assert!(groups_table(&empty)[0].starts_with("no shard groups"));
    }

    #[test]
    fn one_group_shows_every_shard_then_the_members() {
        let mut reply = wire_shards();
        reply.members[1].agent = "web-2#2\u{1b}[31m".into();
        let g = GroupShards::from_wire(reply).unwrap();
        let lines = group_lines(&g);
        assert_eq!(
            lines[0],
            "group orders: 4 shards, 3 owned, 2 members, 3 moves in the last hour"
        );
        let words = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(
            words(1),
            ["SHARD", "OWNER", "TOKEN", "STATE", "LEFT", "MOVES/H"]
        );
        assert_eq!(words(2), ["0", "web-1#1", "1", "held", "9s", "0"]);
        assert_eq!(words(4), ["2", "web-2#2", "3", "suspect", "9s", "0"]);
        assert_eq!(words(5), ["3", "-", "4", "free", "-", "1"]);
        assert_eq!(lines[6], "");
        assert_eq!(words(7), ["MEMBER", "STATE", "SHARDS", "HEARTBEAT"]);
        assert_eq!(words(8), ["web-1#1", "live", "2", "1s", "ago"]);
        assert!(lines[9].starts_with("web-2#2\\u{1b}[31m"), "{}", lines[9]);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{line}");
            assert!(!line.contains('\u{1b}'), "{line}");
        }
        let mut lonely = wire_shards();
        lonely.members.clear();
        let lines = group_lines(&GroupShards::from_wire(lonely).unwrap());
        assert_eq!(
            lines.last().map(String::as_str),
            Some("no members (agents join with --shard-groups orders)")
        );
    }

    #[test]
    fn one_group_json_has_one_entry_per_shard() {
        let g = GroupShards::from_wire(wire_shards()).unwrap();
        let text = crate::output::to_json(&g).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let shards = json["shards"].as_array().cloned().unwrap_or_default();
        assert_eq!(shards.len(), 4);
        for (i, s) in shards.iter().enumerate() {
            assert_eq!(s["shard"], i);
        }
        assert_eq!(shards[1]["owner"], "web-1#1");
        assert_eq!(shards[1]["token"], 2);
        assert_eq!(shards[2]["state"], "suspect");
        assert_eq!(json["members"].as_array().map(Vec::len), Some(2));
        assert_eq!(json["group"]["members"], 2);
        assert!(!text.contains('\n'));
    }
}
