//! Events in: what the network side learnt (Watch updates, connection changes, the polled
//! registry, overview and overdue leases) and the replies to the console's own requests.
//!
//! Invariant: a reply lands only where its request asked ([`Pending`]); a reply to a superseded
//! request (another dead-letter filter, another shard group, an older task read) is dropped.
//! Every event bumps the data's version, so a cached row order is recomputed.

use std::collections::BTreeSet;

use leasehold_proto::wire::Read;
use leasehold_shared::Role;

use super::fleet::{self, Conn, Health, Link, RenewalEvent};
use super::{Overlay, State, data};
use crate::event::{ConnEvent, Event, Reply};

/// What a request in flight is for, so its reply lands in the right place (a reply to a
/// superseded request is dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    DeadPage { filter: String, append: bool },
    TasksPage { append: bool },
    TaskCounts,
    Schedules,
    Locks,
    ShardGroups,
    Shards { group: String },
    Task { id: i64 },
    DryRun,
    Action { log: u64 },
}

impl State {
    /// A database time heard in an update or a reply. Only one at or past the clock moves it:
    /// an agent serves a slow read (a deep queue) from its cache, and that answer's older time
    /// would otherwise become the base the local clock advances from, holding the clock still
    /// until it caught up.
    fn heard_db_time(&mut self, db_ms: i64) {
        if db_ms > 0 && db_ms >= self.live.now_ms {
            self.db_heard = Some((db_ms, self.local_ms));
            self.live.now_ms = db_ms;
        }
    }

    /// Applies what the network side learnt.
    pub fn apply(&mut self, event: Event) {
        self.live.version += 1;
        match event {
            Event::Watch { addr, update } => {
                self.heard_db_time(update.now_ms);
                let local = self.local_ms;
                let conn = self
                    .live
                    .conns
                    .entry(addr.clone())
                    .or_insert_with(|| Conn::new(addr));
                let applied = conn.apply(update, local);
                self.push_renewals(applied.renewals);
            }
            Event::Conn { addr, conn } => {
                let local = self.local_ms;
                let now = self.live.now_ms;
                let c = self
                    .live
                    .conns
                    .entry(addr.clone())
                    .or_insert_with(|| Conn::new(addr));
                let gone = conn == ConnEvent::Gone;
                let mut lost = c.set_link(conn, local);
                for e in &mut lost {
                    e.at_ms = now;
                }
                self.push_renewals(lost);
                if gone {
                    // A stopped agent's row stays in the registry; its connection goes.
                    self.live.conns.retain(|_, c| c.link != Link::Gone);
                }
            }
            Event::Agents(agents) => {
                self.heard_db_time(agents.now_ms);
                let role = agents.read_caller_role();
                self.apply_role(&role);
                self.live.registry = fleet::Registry {
                    now_ms: agents.now_ms,
                    stale_after_ms: agents.stale_after_ms,
                    caller_role: role.word().into_owned(),
                    leader: agents.leader,
                    agents: agents.agents,
                    received_ms: Some(self.local_ms),
                };
                self.forget_dead_agents();
            }
            Event::Overview(overview) => {
                self.heard_db_time(overview.now_ms);
                self.live.overview = Some(overview);
            }
            Event::History(history) => {
                self.live.history = Some(history);
            }
            Event::Suspects(answer) => {
                self.heard_db_time(answer.now_ms);
                self.live.overdue = data::Overdue::from_wire(answer, &self.live.conns);
            }
            Event::Reply { id, reply } => self.apply_reply(id, reply),
        }
    }

    /// A lost agent the registry now calls down (stopped, or its heartbeat older than the
    /// agents' staleness rule) holds nothing any more: recovery has taken or will take its
    /// leases, so they leave the lease views.
    fn forget_dead_agents(&mut self) {
        let data = &mut self.live;
        let dead: Vec<String> = data
            .registry
            .agents
            .iter()
            .filter_map(|info| {
                let conn = data.conn_of(info)?;
                let lost = matches!(conn.link, Link::Lost { .. } | Link::Closing);
                (lost && data.registry.health(info, Some(&conn.link)) == Health::Down)
                    .then(|| conn.addr.clone())
            })
            .collect();
        for addr in dead {
            if let Some(conn) = data.conns.get_mut(&addr) {
                conn.leases.clear();
            }
        }
    }

    fn apply_role(&mut self, role: &Read<Role>) {
        if role.is(Role::Viewer) && self.read_only.is_none() {
            self.read_only = Some("a viewer token: actions are refused".into());
        }
    }

    fn push_renewals(&mut self, events: Vec<RenewalEvent>) {
        for e in events {
            if self.live.renewals.len() == data::RENEWAL_HISTORY {
                self.live.renewals.pop_front();
            }
            self.live.renewals.push_back(e);
        }
    }

    fn apply_reply(&mut self, id: u64, reply: Result<Reply, String>) {
        let Some(pending) = self.pending.remove(&id) else {
            return;
        };
        match (pending, reply) {
            (Pending::DeadPage { filter, append }, reply) => {
                let dead = &mut self.live.dead;
                if dead.filter != filter {
                    return; // superseded by a newer filter
                }
                dead.loading = false;
                match reply {
                    Ok(Reply::Page(page)) => {
                        self.heard_db_time(page.now_ms);
                        let dead = &mut self.live.dead;
                        if append {
                            let known: BTreeSet<i64> = dead.tasks.iter().map(|t| t.id).collect();
                            dead.tasks
                                .extend(page.tasks.into_iter().filter(|t| !known.contains(&t.id)));
                        } else {
                            dead.tasks = page.tasks;
                        }
                        dead.next_before_id = page.next_before_id;
                        dead.error = None;
                        dead.loaded = true;
                    }
                    Ok(_) => {}
                    Err(e) => self.live.dead.error = Some(e),
                }
            }
            (Pending::TasksPage { append }, reply) => {
                let tasks = &mut self.live.tasks;
                if tasks.asked != Some(id) {
                    return; // superseded: another tab, filter or reload
                }
                tasks.asked = None;
                match reply {
                    Ok(Reply::Page(page)) => {
                        self.heard_db_time(page.now_ms);
                        self.live.tasks.take_page(page, append);
                    }
                    Ok(_) => {}
                    Err(e) => self.live.tasks.error = Some(e),
                }
            }
            (Pending::TaskCounts, reply) => {
                let tasks = &mut self.live.tasks;
                if tasks.counts_asked != Some(id) {
                    return; // superseded: another filter, or counts asked again after an action
                }
                tasks.counts_asked = None;
                match reply {
                    Ok(Reply::Counts(counts)) => {
                        self.heard_db_time(counts.now_ms);
                        let tasks = &mut self.live.tasks;
                        tasks.counts = Some(counts);
                        tasks.counts_error = None;
                    }
                    Ok(_) => {}
                    Err(e) => self.live.tasks.counts_error = Some(e),
                }
            }
            (Pending::Schedules, reply) => match reply {
                Ok(Reply::Schedules(list)) => {
                    self.heard_db_time(list.now_ms);
                    self.live.schedules.apply(list);
                }
                Ok(_) => self.live.schedules.loading = false,
                Err(e) => self.live.schedules.failed(e),
            },
            (Pending::Locks, reply) => match reply {
                Ok(Reply::Locks(list)) => {
                    self.heard_db_time(list.now_ms);
                    self.live.resources.locks.apply(list);
                }
                Ok(_) => self.live.resources.locks.loading = false,
                Err(e) => self.live.resources.locks.failed(e),
            },
            (Pending::ShardGroups, reply) => match reply {
                Ok(Reply::ShardGroups(list)) => {
                    self.heard_db_time(list.now_ms);
                    self.live.resources.groups.apply(list);
                }
                Ok(_) => self.live.resources.groups.loading = false,
                Err(e) => self.live.resources.groups.failed(e),
            },
            (Pending::Shards { group }, reply) => {
                let res = &mut self.live.resources;
                if res.group != group {
                    return; // superseded: another group is shown now
                }
                match reply {
                    Ok(Reply::Shards(list)) => {
                        self.heard_db_time(list.now_ms);
                        self.live.resources.shards.apply(list);
                    }
                    Ok(_) => res.shards.loading = false,
                    Err(e) => res.shards.failed(e),
                }
            }
            (Pending::Task { id: task }, reply) => {
                for overlay in self.overlays.iter_mut() {
                    // Only the latest read's answer: an older one may predate an action.
                    if let Overlay::Detail(d) = overlay
                        && d.id == task
                        && d.asked == Some(id)
                    {
                        d.asked = None;
                        match &reply {
                            Ok(Reply::Task(t)) => {
                                d.reply = Some(t.clone());
                                d.error = None;
                            }
                            Ok(_) => {}
                            Err(e) => d.error = Some(e.clone()),
                        }
                    }
                }
                if let Ok(Reply::Task(t)) = reply {
                    self.heard_db_time(t.now_ms);
                }
            }
            (Pending::DryRun, reply) => {
                for overlay in self.overlays.iter_mut() {
                    if let Overlay::Confirm(c) = overlay
                        && c.count.is_none()
                    {
                        match &reply {
                            Ok(Reply::Count(n)) => c.count = Some(*n),
                            Ok(_) => {}
                            Err(e) => c.error = Some(e.clone()),
                        }
                    }
                }
            }
            (Pending::Action { log }, reply) => {
                let result = match reply {
                    Ok(Reply::Action { summary, failed }) => {
                        self.set_status(summary.clone(), failed > 0);
                        if failed > 0 {
                            Err(summary)
                        } else {
                            Ok(summary)
                        }
                    }
                    Ok(Reply::Count(n)) => {
                        let text = format!("{n} tasks");
                        self.set_status(text.clone(), false);
                        Ok(text)
                    }
                    Ok(_) => Ok("done".into()),
                    Err(e) => {
                        self.set_status(e.clone(), true);
                        Err(e)
                    }
                };
                self.log_result(log, result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use leasehold_proto::v1 as pb;

    use super::*;

    // An answer served from an agent's cache carries the older time it was read at: the clock
    // keeps advancing from the newest time heard.
    #[test]
    fn an_older_database_time_does_not_hold_the_clock_still() {
        let mut state = State::default();
        state.set_local_time(0);
        state.apply(Event::Overview(pb::GetOverviewResponse {
            now_ms: 100_000,
            ..Default::default()
        }));
        state.set_local_time(5_000);
        assert_eq!(state.live.now_ms, 105_000);
        state.apply(Event::Overview(pb::GetOverviewResponse {
            now_ms: 70_000,
            ..Default::default()
        }));
        state.set_local_time(6_000);
        assert_eq!(state.live.now_ms, 106_000);
        state.apply(Event::Overview(pb::GetOverviewResponse {
            now_ms: 110_000,
            ..Default::default()
        }));
        state.set_local_time(7_000);
        assert_eq!(state.live.now_ms, 111_000);
    }
}
