//! The agent runtime (DESIGN §4–§7): services that claim, execute, heartbeat, complete,
//! recover and drain. Each service is a `run(self, CancellationToken)` future with a documented
//! place in the start and stop order (see [`agent`]).

pub mod agent;
mod backlog;
mod book;
mod claimer;
mod completer;
pub(crate) mod core;
mod db_clock;
pub mod events;
mod executor;
pub(crate) mod feed;
mod heartbeat;
pub(crate) mod history;
pub mod idle;
mod maintenance;
#[cfg(test)]
mod memory;
pub mod metrics;
mod notifier;
pub mod progress;
mod queue;
mod readiness;
mod registry;
mod renewal;
pub mod resources;
pub(crate) mod sampler;
pub(crate) mod scheduler;
pub mod settings;
mod supervisor;

pub use agent::{Agent, AgentBuilder, AgentControl, Shutdown};
pub use core::RunSummary;
pub use events::{LifecycleEvent, LifecycleListener, SlowRule};
pub use metrics::Metrics;
pub use resources::{HeldLock, LockOptions, LossReason, ShardOwnership};
pub use settings::RuntimeSettings;
