//! Resource leases held by this agent (DESIGN §4 "Resource leases"): locks taken through the
//! library API ([`super::AgentControl::lock`]) and the shards of the groups it joined
//! (`--shard-groups`), kept by the keeper ([`keeper`]) through the same renewal loop as the
//! task leases ([`crate::runtime::renewal`]), on a connection of its own.
//!
//! ```text
//!   every heartbeat:  renew every held lease and membership (one statement)
//!                       renewed ──▶ safe_until = sent + min(ttl, lease_until − db now) − margin
//!                       lost    ──▶ dropped at once, the holder told (revoked)
//!                     then, per group: read shards + members, plan (plan_shards: even ±1,
//!                       sticky by agent name), take free shards planned for us, give back
//!                       ours planned for another live member
//!   every check:      a holding past safe_until ──▶ try one renewal, else drop it (unprovable)
//!   shutdown:         release every holding (fenced); memberships stay until they expire,
//!                     so a restarted agent of the same name gets its shards back
//! ```
//!
//! A member counts until its membership's `lease_until + grace`, and a shard is taken from
//! its owner only after the shard's `lease_until + grace`: a pause or a network blip shorter
//! than TTL + grace moves nothing. The local deadline (`safe_until`) is earlier than any
//! takeover, so this agent stops believing it owns a lease before anyone else can own it.
//!
//! When things fail: a renewal that errors or times out is counted and logged, and the
//! connection replaced; holdings keep their last local deadline; give-backs that were due wait
//! for the next renewal. A rebalance that fails is
//! retried at the next heartbeat. Every change is logged, sent to lifecycle listeners and the
//! Watch stream, and published on the [`ShardOwnership`] channel.

mod holdings;
mod keeper;
mod lock;
mod shards;

pub use holdings::LossReason;
pub use lock::{HeldLock, LockOptions};
pub use shards::ShardOwnership;

/// For the holding bookkeeping on [`super::core::Core`] (`hold`, `drop_holding`).
pub(super) use holdings::{Held, resource};
pub(crate) use holdings::{Holdings, lease_left};
pub(crate) use keeper::Keeper;
pub(crate) use lock::lock;
pub(crate) use shards::join_groups;
