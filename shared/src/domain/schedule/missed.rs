//! The missed-tick policy, [`MissedTicks`]: what a leader does with ticks that passed while no
//! leader fired them, and its bounds. `due` applies it.

use crate::domain::validate::{ValidationError, check_range};

/// Most missed ticks a [`MissedTicks::CatchUp`] policy may fire in one go.
pub const MAX_CATCH_UP: u32 = 1000;
/// Default catch-up bound when a caller asks for `catch_up` without one.
pub const DEFAULT_CATCH_UP: u32 = 10;

/// What a leader does with ticks that passed while no leader fired them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MissedTicks {
    /// Fire only the latest due tick; older ones are dropped.
    #[default]
    Skip,
    /// Fire the latest `max` due ticks, oldest first; older ones are dropped. Build with
    /// [`MissedTicks::catch_up`], which bounds `max` to `1..=`[`MAX_CATCH_UP`].
    CatchUp { max: u32 },
}

impl MissedTicks {
    /// A catch-up policy, refused (field `catch_up_max`) unless `max` is in
    /// `1..=`[`MAX_CATCH_UP`].
    pub fn catch_up(max: u32) -> Result<Self, ValidationError> {
        check_range("catch_up_max", max, 1..=MAX_CATCH_UP).map(|max| Self::CatchUp { max })
    }

    /// Most ticks fired in one go: 1 for `Skip`, `max` (clamped to `1..=MAX_CATCH_UP`, in case
    /// the variant was built directly) for `CatchUp`.
    pub fn limit(self) -> u32 {
        match self {
            MissedTicks::Skip => 1,
            MissedTicks::CatchUp { max } => max.clamp(1, MAX_CATCH_UP),
        }
    }

    /// The stored and CLI name: `skip` or `catch_up`.
    pub fn as_str(self) -> &'static str {
        match self {
            MissedTicks::Skip => "skip",
            MissedTicks::CatchUp { .. } => "catch_up",
        }
    }
}
