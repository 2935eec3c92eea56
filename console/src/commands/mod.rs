//! The headless commands, one file per command group. Each command works in two steps:
//!
//! ```text
//! args ──prepare (pure: checks, request)──▶ request ──connect──▶ agent ──call──▶ render ──▶ Out
//!        bad input: exit 2, no connection         exit 3 when unreachable
//! ```
//!
//! so bad input is refused before anything touches the network, and rendering is a pure
//! function of the reply (unit-tested without an agent). A command returns the exit code of
//! its outcome (0, or 1 when a task failed or a lock is not the caller's); failures are
//! errors mapped by [`crate::exit`].

pub mod agents;
pub mod audit;
pub mod breaker;
pub mod cancel;
pub mod concurrency;
pub mod dlq;
pub mod enqueue;
pub mod lock_holder;
pub mod locks;
pub mod pause;
pub mod policy;
pub mod ratelimit;
pub mod requeue;
pub mod schedules;
pub mod shards;
pub mod shed;
pub mod stats;
pub mod task_actions;
pub mod tasks;
pub mod types;
pub mod wait;
pub mod watch;

use chrono::Utc;

use crate::cli::{
    AgentsCommand, AuditCommand, BreakerCommand, Command, ConcurrencyCommand, DlqCommand,
    GlobalArgs, LocksCommand, PolicyCommand, RatelimitCommand, SchedulesCommand, ShardsCommand,
    ShedCommand, TasksCommand,
};
use crate::client::{self, Agent};
use crate::error::Result;
use crate::output::Out;

/// Runs one command and returns its exit code.
pub async fn run(global: &GlobalArgs, command: Command, out: &mut Out) -> Result<u8> {
    let settings = client::settings(global)?;
    let now = Utc::now();
    match command {
        // Run by `crate::demo` before any connection is made; never reaches here.
        Command::Demo(_) => Ok(crate::exit::USAGE),
        Command::Enqueue(args) => {
            let request = enqueue::prepare(&args, now)?;
            enqueue::run(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Tasks(TasksCommand::Ls(args)) => {
            let request = tasks::prepare_ls(&args, now)?;
            tasks::run_ls(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Tasks(TasksCommand::Show(args)) => {
            tasks::run_show(&Agent::connect(&settings).await?, args.id, out).await
        }
        Command::Cancel(args) => {
            let requests = cancel::prepare(&args)?;
            cancel::run(&settings, Agent::connect(&settings).await?, requests, out).await
        }
        Command::Requeue(args) => {
            let ids = unique(&args.ids);
            requeue::run(&Agent::connect(&settings).await?, ids, out).await
        }
        Command::RunNow(args) => {
            let ids = unique(&args.ids);
            task_actions::run_now(&Agent::connect(&settings).await?, ids, out).await
        }
        Command::Delete(args) => {
            let ids = unique(&args.ids);
            task_actions::delete(&Agent::connect(&settings).await?, ids, out).await
        }
        Command::Dlq(DlqCommand::Ls(args)) => {
            let request = dlq::prepare_ls(&args, now)?;
            dlq::run_ls(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Dlq(DlqCommand::Requeue(args)) => {
            let request = dlq::prepare_requeue(&args, now)?;
            dlq::run_requeue(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Dlq(DlqCommand::Purge(args)) => {
            let request = dlq::prepare_purge(&args, now)?;
            dlq::run_purge(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Types => types::run(&Agent::connect(&settings).await?, out).await,
        Command::Stats => stats::run(&Agent::connect(&settings).await?, out).await,
        Command::Concurrency(ConcurrencyCommand::Set(args)) => {
            let request = concurrency::prepare(&args)?;
            concurrency::run(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Ratelimit(RatelimitCommand::Set(args)) => {
            let request = ratelimit::prepare_set(&args)?;
            ratelimit::run_set(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Ratelimit(RatelimitCommand::Clear(args)) => {
            let request = ratelimit::prepare_clear(&args)?;
            ratelimit::run_set(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Ratelimit(RatelimitCommand::Ls) => {
            ratelimit::run_ls(&Agent::connect(&settings).await?, out).await
        }
        Command::Shed(ShedCommand::Set(args)) => {
            let request = shed::prepare_set(&args);
            shed::run(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Shed(ShedCommand::Clear(args)) => {
            let request = shed::prepare_clear(&args);
            shed::run(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Breaker(BreakerCommand::Set(args)) => {
            let request = breaker::prepare_set(&args);
            breaker::run_set(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Breaker(BreakerCommand::Clear(args)) => {
            let request = breaker::prepare_clear(&args);
            breaker::run_set(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Breaker(BreakerCommand::Ls) => {
            breaker::run_ls(&Agent::connect(&settings).await?, out).await
        }
        Command::Policy(PolicyCommand::Show(args)) => {
            let request = policy::prepare_show(&args);
            policy::run_show(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Policy(PolicyCommand::Set(args)) => {
            let request = policy::prepare_set(&args)?;
            policy::run_set(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Pause(args) => {
            pause::run_pause(&Agent::connect(&settings).await?, args.task_type, out).await
        }
        Command::Resume(args) => {
            pause::run_resume(&Agent::connect(&settings).await?, args.task_type, out).await
        }
        Command::Agents(AgentsCommand::Ls) => {
            agents::run_ls(&Agent::connect(&settings).await?, out).await
        }
        Command::Schedules(SchedulesCommand::Ls) => {
            schedules::run_ls(&Agent::connect(&settings).await?, out).await
        }
        Command::Schedules(SchedulesCommand::Add(args)) => {
            let request = schedules::prepare_add(&args)?;
            schedules::run_add(&Agent::connect(&settings).await?, request, now, out).await
        }
        Command::Schedules(SchedulesCommand::Rm(args)) => {
            schedules::run_rm(&Agent::connect(&settings).await?, args.name, out).await
        }
        Command::Schedules(SchedulesCommand::Enable(args)) => {
            let agent = Agent::connect(&settings).await?;
            schedules::run_enable(&agent, args.name, true, now, out).await
        }
        Command::Schedules(SchedulesCommand::Disable(args)) => {
            let agent = Agent::connect(&settings).await?;
            schedules::run_enable(&agent, args.name, false, now, out).await
        }
        Command::Schedules(SchedulesCommand::Trigger(args)) => {
            schedules::run_trigger(&Agent::connect(&settings).await?, args.name, out).await
        }
        Command::Locks(LocksCommand::Ls) => {
            locks::run_ls(&Agent::connect(&settings).await?, out).await
        }
        Command::Locks(LocksCommand::Acquire(args)) => {
            let plan = lock_holder::prepare_acquire(&args, lock_holder::default_holder)?;
            lock_holder::run_acquire(&Agent::connect(&settings).await?, plan, out).await
        }
        Command::Locks(LocksCommand::Renew(args)) => {
            let request = lock_holder::prepare_renew(&args);
            lock_holder::run_renew(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Locks(LocksCommand::Release(args)) => {
            let agent = Agent::connect(&settings).await?;
            // clap lets --holder and --fencing-token through together or not at all.
            match (args.holder, args.fencing_token) {
                (Some(holder), Some(token)) => {
                    lock_holder::run_release(&agent, args.name, holder, token, out).await
                }
                _ => locks::run_release(&agent, args.name, out).await,
            }
        }
        Command::Shards(ShardsCommand::Create(args)) => {
            let agent = Agent::connect(&settings).await?;
            shards::run_create(&agent, args.group, args.count, out).await
        }
        Command::Shards(ShardsCommand::Ls(args)) => {
            let agent = Agent::connect(&settings).await?;
            match args.group {
                Some(group) => shards::run_ls_group(&agent, group, out).await,
                None => shards::run_ls_groups(&agent, out).await,
            }
        }
        Command::Audit(AuditCommand::Ls(args)) => {
            let request = audit::prepare_ls(&args, now)?;
            audit::run_ls(&Agent::connect(&settings).await?, request, out).await
        }
        Command::Drain => agents::run_drain(&Agent::connect(&settings).await?, out).await,
        Command::Watch => watch::run(&settings, out).await,
        Command::Wait(args) => {
            let plan = wait::prepare(&args);
            wait::run(&Agent::connect(&settings).await?, plan, out).await
        }
    }
}

/// Ids in the order given, each once.
pub fn unique(ids: &[i64]) -> Vec<i64> {
    let mut seen = std::collections::HashSet::new();
    ids.iter().copied().filter(|id| seen.insert(*id)).collect()
}

/// `n thing` or `n things`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Writes the result of a policy change: the agent's warnings on stderr in both output modes
/// (as `pause` does, so stdout stays the result), then the change as JSON or as its line.
pub(crate) fn print_change<T: serde::Serialize>(
    out: &mut Out,
    warnings: &[String],
    changed: &T,
    line: impl FnOnce(&T) -> String,
) -> Result<u8> {
    for w in warnings {
        out.note(&format!("warning: {w}"));
    }
    if out.json_mode() {
        out.json(changed)?;
    } else {
        out.line(&line(changed))?;
    }
    Ok(crate::exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deduplicated_in_order() {
        assert_eq!(unique(&[3, 1, 3, 2, 1]), [3, 1, 2]);
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "dead task", "dead tasks"), "1 dead task");
        assert_eq!(plural(0, "dead task", "dead tasks"), "0 dead tasks");
    }
}
