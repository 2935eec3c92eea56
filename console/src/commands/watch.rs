//! `leasehold watch`: follows the Watch stream of the agent named by `--agent`, printing one
//! line per event (JSON lines with `--output json`, short human lines otherwise).
//!
//! ```text
//! install SIGINT/SIGTERM ─▶ connect ─▶ open stream ─▶ update ─▶ lines ─▶ stdout
//!                                                        │ closing / end of stream: exit 0
//!                                                        │ SIGINT, SIGTERM, stdout closed: exit 0
//!                                                        └ stream error: exit as mapped (3, 4, …)
//! ```
//!
//! The signal handlers are installed before connecting, so an interrupt at any point ends the
//! command with 0. There is no reconnect: a script that wants one loops, and each new stream
//! starts with a fresh snapshot (seq 0).

use leasehold_proto::v1;

use crate::client::{Agent, Settings};
use crate::convert::watch::{HeldResourceView, LeaseView, WatchEvent, WatchLine, lines};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::WIDTH;
use crate::output::text::{short_duration, shown};

/// Runs `watch` until interrupted or the stream ends.
pub async fn run(settings: &Settings, out: &mut Out) -> Result<u8> {
    let mut stop = Stop::install()?;
    let session = async {
        let agent = Agent::connect(settings).await?;
        let mut stream = agent.watch().await?;
        let mut table = TableState::default();
        loop {
            match stream.message().await {
                Ok(Some(update)) => {
                    if print_update(update, out, &mut table)? || out.closed() {
                        return Ok(exit::OK);
                    }
                }
                Ok(None) => return Ok(exit::OK),
                Err(status) => return Err(agent.status_error("watch".into(), status)),
            }
        }
    };
    tokio::select! {
        result = session => result,
        () = stop.wait() => Ok(exit::OK),
    }
}

/// Prints one update; true when it was the agent's last (`closing`).
fn print_update(update: v1::WatchUpdate, out: &mut Out, table: &mut TableState) -> Result<bool> {
    let closing = update.closing;
    let lines = lines(update).map_err(|e| Error::bad_wire("watch", e))?;
    for line in &lines {
        if out.json_mode() {
            out.json(line)?;
        } else {
            out.lines(table.lines(line))?;
        }
    }
    Ok(closing)
}

/// What table mode remembers between updates: the dropped-events count last shown.
#[derive(Debug, Default)]
pub struct TableState {
    dropped: u64,
}

impl TableState {
    /// The human lines of one event (a snapshot gives one line per lease too).
    pub fn lines(&mut self, l: &WatchLine) -> Vec<String> {
        let at = crate::convert::time("now_ms", l.now_ms)
            .map(|t| t.time_of_day())
            .unwrap_or_default();
        let head = format!("{at} #{}", l.seq);
        let mut out = Vec::new();
        if l.dropped_events > self.dropped {
            out.push(format!(
                "{head} dropped events: {} so far (the view may be stale)",
                l.dropped_events
            ));
            self.dropped = l.dropped_events;
        }
        let tail = match &l.event {
            WatchEvent::Snapshot(s) => {
                let stats = s.stats.as_ref().map_or_else(String::new, |st| {
                    let leader = if st.leader { ", leader" } else { "" };
                    format!(
                        ", active {}/{}, {}{leader}",
                        st.active, st.local_limit, st.state
                    )
                });
                let resources = if s.resources.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {}",
                        super::plural(s.resources.len() as u64, "resource", "resources")
                    )
                };
                out.push(fit(&format!(
                    "{head} snapshot of {}: {}{resources}{stats}",
                    l.agent_id,
                    super::plural(s.leases.len() as u64, "lease", "leases")
                )));
                for lease in &s.leases {
                    out.push(fit(&format!("{head} lease {}", lease_text(lease))));
                }
                for r in &s.resources {
                    out.push(fit(&format!("{head} holds {}", resource_text(r))));
                }
                return out;
            }
            WatchEvent::LeaseAcquired(lease) => format!("acquired {}", lease_text(lease)),
            WatchEvent::LeaseRenewed(r) => format!(
                "renewed task {} epoch {}, until {}",
                r.task_id,
                r.epoch,
                r.lease_until
                    .map_or_else(|| "-".into(), |t| t.time_of_day())
            ),
            WatchEvent::RenewalFailed(f) => format!(
                "renewal failed task {} epoch {} ({} in a row): {}",
                f.task_id, f.epoch, f.consecutive, f.reason
            ),
            WatchEvent::LeaseReleased(r) => {
                format!(
                    "released task {} epoch {}: {}",
                    r.task_id, r.epoch, r.outcome
                )
            }
            WatchEvent::LeaseFenced(f) => format!(
                "fenced task {} epoch {}: {} refused",
                f.task_id, f.epoch, f.write
            ),
            WatchEvent::Progress(p) => format!(
                "progress task {} epoch {}: {}",
                p.task_id,
                p.epoch,
                p.progress.map_or_else(
                    || "none".to_owned(),
                    |p| format!(
                        "{}/{} (ok {}, failed {}, skipped {})",
                        p.processed, p.total, p.succeeded, p.failed, p.skipped
                    )
                )
            ),
            WatchEvent::Slow(s) => format!(
                "slow task {} epoch {}: running {}{}",
                s.task_id,
                s.epoch,
                short_duration(s.running_ms),
                s.rule
                    .map(|r| format!(", {}", r.text()))
                    .unwrap_or_default()
            ),
            WatchEvent::Stats(s) => format!(
                "stats {} active {}/{} held {} claimed {} ok {} failed {} dead {}",
                s.state, s.active, s.local_limit, s.held, s.claimed, s.succeeded, s.failed, s.dead
            ),
            WatchEvent::CancelRequested(c) => {
                format!("cancel requested task {} epoch {}", c.task_id, c.epoch)
            }
            WatchEvent::ResourceChange(c) => format!(
                "{} {}: {}",
                if c.held { "took" } else { "lost" },
                resource_text(&c.resource),
                c.reason
            ),
            WatchEvent::Closing(_) => "closing: the agent is shutting down".to_owned(),
        };
        out.push(fit(&format!("{head} {tail}")));
        out
    }
}

fn lease_text(l: &LeaseView) -> String {
    let mut text = format!(
        "task {} {} epoch {} attempt {} by {}",
        l.task_id, l.task_type, l.epoch, l.attempt, l.owner
    );
    if l.slow {
        text.push_str(", slow");
        if let Some(rule) = l.slow_rule {
            text.push_str(&format!(" ({})", rule.short()));
        }
    }
    if l.cancel_requested {
        text.push_str(", cancel requested");
    }
    if l.renewal_failures > 0 {
        text.push_str(&format!(", {} renewal failures", l.renewal_failures));
    }
    text
}

/// `lock deploy/prod token 7`, `shard orders#3 token 12`.
fn resource_text(r: &HeldResourceView) -> String {
    let what = if r.group.is_some() { "shard" } else { "lock" };
    format!("{what} {} token {}", r.name, r.token)
}

fn fit(line: &str) -> String {
    shown(line, WIDTH)
}

/// SIGINT and SIGTERM.
struct Stop {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Stop {
    fn install() -> Result<Self> {
        #[cfg(unix)]
        {
            let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|source| Error::Local {
                    what: "installing the SIGTERM handler".into(),
                    source,
                })?;
            Ok(Self { term })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    async fn wait(&mut self) {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = self.term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use leasehold_proto::v1::delta::Kind;

    use super::*;
    use crate::convert::watch::tests::lease;
    use crate::output::{Format, text::width};

    fn update(seq: u64, dropped: u64, kinds: Vec<Kind>) -> v1::WatchUpdate {
        v1::WatchUpdate {
            now_ms: 1_764_588_001_234,
            seq,
            dropped_events: dropped,
            agent_id: "web-1#7".into(),
            snapshot: None,
            deltas: kinds
                .into_iter()
                .map(|k| v1::Delta { kind: Some(k) })
                .collect(),
            closing: false,
        }
    }

    #[test]
    fn json_mode_prints_one_line_per_delta() {
        let (mut out, captured) = Out::captured(Format::Json);
        let mut table = TableState::default();
        let u = update(
            3,
            0,
            vec![
                Kind::LeaseAcquired(lease()),
                Kind::Slow(v1::SlowTask {
                    task_id: 42,
                    epoch: 3,
                    running_ms: 300_000,
                    rule: v1::SlowRule::History.into(),
                    limit_ms: 240_000,
                    history_runs: 200,
                }),
            ],
        );
        assert!(matches!(print_update(u, &mut out, &mut table), Ok(false)));
        let text = captured.stdout();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        for l in &lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
            assert_eq!(v["seq"], 3);
            assert_eq!(v["now_ms"], 1_764_588_001_234_i64);
        }
        assert!(
            lines[1]
                .contains(r#""kind":"slow","slow":{"task_id":42,"epoch":3,"running_ms":300000,"rule":{"name":"history","limit_ms":240000,"history_runs":200}}"#),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn closing_ends_the_watch() {
        let (mut out, _) = Out::captured(Format::Json);
        let mut u = update(9, 0, vec![]);
        u.closing = true;
        assert!(matches!(
            print_update(u, &mut out, &mut TableState::default()),
            Ok(true)
        ));
    }

    #[test]
    fn table_lines_are_short_inert_and_report_drops() {
        let mut bad = lease();
        bad.task_type = "x\u{1b}[2J".repeat(30);
        bad.owner = "o".repeat(200);
        let mut snapshot = update(0, 0, vec![]);
        snapshot.snapshot = Some(v1::Snapshot {
            leases: vec![lease(), bad.clone()],
            stats: Some(v1::AgentStats {
                active: 2,
                local_limit: 10,
                agent_state: v1::AgentState::Running as i32,
                leader: true,
                ..Default::default()
            }),
            resources: vec![],
        });
        let mut table = TableState::default();
        let mut all = Vec::new();
        for u in [
            snapshot,
            update(
                1,
                5,
                vec![
                    Kind::RenewalFailed(v1::RenewalFailed {
                        task_id: 42,
                        epoch: 3,
                        reason: "statement timeout\n".repeat(20),
                        consecutive: 2,
                    }),
                    Kind::LeaseAcquired(bad),
                ],
            ),
        ] {
            for l in lines(u).unwrap_or_default() {
                all.extend(table.lines(&l));
            }
        }
        assert_eq!(
            all[0],
            "11:20:01.234 #0 snapshot of web-1#7: 2 leases, active 2/10, running, leader"
        );
        assert_eq!(
            all[1],
            "11:20:01.234 #0 lease task 42 noop epoch 3 attempt 1 by web-1#7"
        );
        assert_eq!(
            all[3],
            "11:20:01.234 #1 dropped events: 5 so far (the view may be stale)"
        );
        assert!(
            all[4].starts_with(
                "11:20:01.234 #1 renewal failed task 42 epoch 3 (2 in a row): statement timeout"
            ),
            "{}",
            all[4]
        );
        for line in &all {
            assert!(width(line) <= WIDTH, "{line}");
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }

    #[test]
    fn slow_lines_say_which_rule_fired() {
        let slow = |rule: v1::SlowRule, limit_ms, history_runs| {
            Kind::Slow(v1::SlowTask {
                task_id: 42,
                epoch: 3,
                running_ms: 302_000,
                rule: rule.into(),
                limit_ms,
                history_runs,
            })
        };
        let mut flagged = lease();
        flagged.slow = true;
        flagged.slow_rule = v1::SlowRule::History.into();
        flagged.slow_limit_ms = 1_260;
        flagged.slow_history_runs = 24;
        let mut snapshot = update(0, 0, vec![]);
        snapshot.snapshot = Some(v1::Snapshot {
            leases: vec![flagged],
            stats: None,
            resources: vec![],
        });
        let mut table = TableState::default();
        let mut all = Vec::new();
        for u in [
            snapshot,
            update(
                1,
                0,
                vec![
                    slow(v1::SlowRule::History, 250_000, 200),
                    slow(v1::SlowRule::Threshold, 60_000, 0),
                    // An agent that does not say which rule.
                    slow(v1::SlowRule::Unspecified, 0, 0),
                ],
            ),
        ] {
            for l in lines(u).unwrap_or_default() {
                all.extend(table.lines(&l));
            }
        }
        let text = all.join("\n");
        for want in [
            "lease task 42 noop epoch 3 attempt 1 by web-1#7, slow (p95 1.3s)",
            "slow task 42 epoch 3: running 5m02s, past p95 4m10s of 200 runs",
            "slow task 42 epoch 3: running 5m02s, past threshold 1m00s",
            "#1 slow task 42 epoch 3: running 5m02s\n",
        ] {
            assert!(format!("{text}\n").contains(want), "{want}\n{text}");
        }
    }

    #[test]
    fn resources_held_and_changed_are_table_lines() {
        use crate::convert::watch::tests::{lock_held, shard_held};
        let mut snapshot = update(0, 0, vec![]);
        snapshot.snapshot = Some(v1::Snapshot {
            leases: vec![],
            stats: None,
            resources: vec![lock_held()],
        });
        let mut hostile = shard_held();
        hostile.name = "orders#3\u{1b}[2J".into();
        let changes = update(
            1,
            0,
            vec![Kind::ResourceChange(v1::ResourceChange {
                resource: Some(hostile),
                held: false,
                reason: "revoked".into(),
                at_ms: 1_764_588_001_000,
            })],
        );
        let mut table = TableState::default();
        let mut all = Vec::new();
        for u in [snapshot, changes] {
            for l in lines(u).unwrap_or_default() {
                all.extend(table.lines(&l));
            }
        }
        assert_eq!(
            all,
            [
                "11:20:01.234 #0 snapshot of web-1#7: 0 leases, 1 resource",
                "11:20:01.234 #0 holds lock deploy/prod token 7",
                "11:20:01.234 #1 lost shard orders#3\\u{1b}[2J token 12: revoked",
            ]
        );
    }
}
