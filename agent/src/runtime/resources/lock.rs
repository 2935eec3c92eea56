//! Locks taken through the library API ([`crate::runtime::AgentControl::lock`]): [`lock`]
//! takes one (ShedLock bounds in [`LockOptions`]), [`HeldLock`] is the holder's handle (its
//! token, whether it is still held, its release — in the background when dropped).

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_shared::StoreError;
use leasehold_shared::store::{LockAcquireParams, LockName};
use tokio::sync::watch;

use super::holdings::{LossReason, lease_left};
use crate::runtime::core::Core;

/// ShedLock bounds of a lock taken through [`crate::runtime::AgentControl::lock`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// Released earlier than this after acquiring, the lock stays held until then (a run-once
    /// job that finished quickly does not run again on another agent at once).
    pub lock_at_least_for: Option<Duration>,
    /// Never held longer than this after acquiring, renewed or not: a holder that hangs or
    /// crashes frees it then.
    pub lock_at_most_for: Option<Duration>,
}

/// A lock this agent holds, renewed by its heartbeat until released (or dropped: then it is
/// released in the background). Check [`HeldLock::is_held`] (or await [`HeldLock::lost`])
/// before acting on it, and pass [`HeldLock::token`] to whatever you write, so a store that
/// compares tokens refuses a stale holder.
pub struct HeldLock {
    core: Arc<Core>,
    name: String,
    token: i64,
    lost: watch::Receiver<Option<LossReason>>,
    done: bool,
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLock")
            .field("name", &self.name)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl HeldLock {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this holding: higher than every earlier holding's.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// False once the lock was lost (revoked, or not provable in time).
    pub fn is_held(&self) -> bool {
        self.lost.borrow().is_none()
    }

    /// Waits until the lock is lost and says why. By then the loss has been logged, counted,
    /// streamed to watchers and emitted to the lifecycle listeners.
    pub async fn lost(&mut self) -> LossReason {
        loop {
            if let Some(reason) = *self.lost.borrow() {
                return reason;
            }
            if self.lost.changed().await.is_err() {
                return LossReason::Released;
            }
        }
    }

    /// Gives the lock back (fenced; with `lock_at_least_for` it stays held until then).
    /// False when it had already been lost.
    pub async fn release(mut self) -> crate::error::Result<bool> {
        self.done = true;
        Ok(release(&self.core, &self.name, self.token).await?)
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let core = Arc::clone(&self.core);
        let (name, token) = (self.name.clone(), self.token);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(error) = release(&core, &name, token).await {
                    tracing::warn!(lock = name, %error, "could not release a dropped lock; it expires by itself");
                }
            });
        } else {
            core.holdings
                .to_release
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((name, token));
        }
    }
}

async fn release(core: &Arc<Core>, name: &str, token: i64) -> Result<bool, StoreError> {
    let now = Instant::now();
    if !core.drop_holding(name, token, LossReason::Released, now) {
        return Ok(false);
    }
    let given = core.give_back(core.store.as_ref(), name, token).await;
    if given.is_err() {
        core.retry_give_back(name, token);
    }
    given
}

/// The refusal of a second `lock` of a name this agent holds: the name as written, never the
/// newtype's Debug form.
fn already_held(name: &LockName) -> String {
    format!("this agent already holds lock {:?}", name.as_str())
}

/// Takes lock `name` for this agent (renewed by its heartbeat); `None` while someone else
/// holds it.
pub(crate) async fn lock(
    core: &Arc<Core>,
    name: &str,
    options: LockOptions,
) -> crate::error::Result<Option<HeldLock>> {
    use crate::error::AgentError;
    // A bad name is a bad argument (its text is the validation's own).
    let name = LockName::new(name).map_err(|e| AgentError::Invalid(e.to_string()))?;
    if core.holdings.lock().contains_key(name.as_str()) {
        return Err(AgentError::Invalid(already_held(&name)));
    }
    let sent = Instant::now();
    let out = core
        .store
        .lock_acquire(LockAcquireParams {
            name: name.clone(),
            holder: core.id.clone(),
            ttl: core.settings.lease_ttl,
            grace: core.settings.grace,
            lock_at_least_for: options.lock_at_least_for,
            lock_at_most_for: options.lock_at_most_for,
            actor: None,
        })
        .await?;
    if !out.acquired {
        return Ok(None);
    }
    let (tx, rx) = watch::channel(None);
    let token = out.lock.token;
    // The database's lease_until (capped by lock_at_most_for) bounds the local deadline.
    let left = (out.lock.lease_until).map_or(Duration::ZERO, |until| lease_left(until, out.now));
    core.hold(
        name.as_str().to_string(),
        None,
        token,
        sent,
        Some(left),
        Some(tx),
    );
    Ok(Some(HeldLock {
        core: Arc::clone(core),
        name: name.as_str().to_string(),
        token,
        lost: rx,
        done: false,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_lock_held_twice_is_refused_naming_the_lock_as_written() {
        let name = LockName::new("deploy/prod").unwrap();
        assert_eq!(
            already_held(&name),
            "this agent already holds lock \"deploy/prod\""
        );
    }
}
