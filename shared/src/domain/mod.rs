//! Domain types shared by every part of Leasehold: ids, task types, statuses and the state
//! machine, tasks and attempts, policies, cron schedules, the words agents report (outcomes and
//! states), and input validation.

pub mod ids;
pub mod outcome;
pub mod policy;
pub mod schedule;
pub mod shard;
pub mod status;
pub mod task;
pub mod unique;
pub mod validate;

#[cfg(test)]
mod decode_props;

pub use ids::{AgentId, LeaseEpoch, LeaseKey, TaskId, TaskType};
pub use outcome::{
    AgentState, AuditResult, BreakerState, LeaseOutcome, MemberState, ResourceState,
    ScheduleAddOutcome, UnknownWord,
};
pub use policy::{BreakerPolicy, Policy, PolicyPatch, PolicyScope, RateLimit, RetryPolicy};
pub use schedule::{CronExpr, MissedTicks, Schedule, ScheduleBuilder, ScheduleName};
pub use status::{TaskAction, TaskStatus, TransitionError};
pub use task::{Actor, Attempt, AttemptOutcome, Progress, Role, Task, TaskError};
pub use unique::OnConflict;
pub use validate::{InputLimits, ValidationError};
