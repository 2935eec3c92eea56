//! The policy RPCs (SetConcurrency, SetRateLimit, SetShedAfter, SetBreaker, PauseType,
//! ResumeType; GetPolicy and SetPolicy are in `policy_settings`): operators only. A global, type or per-key
//! change goes through the store, which writes its `policy_set` audit row in the same
//! transaction; this agent's local limit is audited here first, then applied at once.

use leasehold_proto::v1 as pb;
use leasehold_shared::domain::AuditResult;
use leasehold_shared::domain::policy::MAX_CONCURRENCY_LIMIT;
use leasehold_shared::domain::{BreakerPolicy, PolicyPatch, PolicyScope, RateLimit};
use leasehold_shared::store::{AuditEntry, PolicySetParams};
use tonic::{Request, Response, Status};

use super::convert::{invalid, task_type_from_wire};
use super::service::{Need, Service};
use super::status::from_store;

/// Largest local concurrency limit.
pub use leasehold_shared::domain::policy::MAX_LOCAL_CONCURRENCY;
/// Audit action of global and type policy changes (limits, pause, resume), as the store
/// writes it.
pub const POLICY_ACTION: &str = "policy_set";
/// Audit action of a change of an agent's local limit.
pub const LOCAL_LIMIT_ACTION: &str = "set_concurrency";

impl Service {
    /// The caller of a policy change of scope `key` (a type, `*`), who must be allowed to act;
    /// a refusal is audited against `policy:KEY`.
    pub(super) async fn policy_caller<T>(
        &self,
        request: &Request<T>,
        key: &str,
    ) -> Result<leasehold_shared::Actor, Status> {
        self.caller(
            request,
            Need::Act {
                action: POLICY_ACTION,
                target: format!("policy:{key}"),
            },
        )
        .await
    }

    pub(super) async fn set_concurrency_rpc(
        &self,
        request: Request<pb::SetConcurrencyRequest>,
    ) -> Result<Response<pb::SetConcurrencyResponse>, Status> {
        use pb::set_concurrency_request::Scope;
        let (action, target) = match &request.get_ref().scope {
            Some(Scope::Global(_)) => (POLICY_ACTION, "policy:*".to_string()),
            Some(Scope::TaskType(t)) => (POLICY_ACTION, format!("policy:{t}")),
            Some(Scope::AgentLocal(_)) => (LOCAL_LIMIT_ACTION, format!("agent:{}", self.core.id)),
            None => (POLICY_ACTION, "policy:?".to_string()),
        };
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action,
                    target: target.clone(),
                },
            )
            .await?;
        let r = request.into_inner();
        if r.unlimited && r.limit != 0 {
            return Err(Status::invalid_argument(
                "limit: give either a limit or unlimited, not both",
            ));
        }
        if r.per_key && !matches!(r.scope, Some(Scope::TaskType(_))) {
            return Err(Status::invalid_argument(
                "per_key: a per-key limit belongs to a task type; give the task_type scope \
                 (not global or agent_local)",
            ));
        }
        let scope = match r.scope {
            None => {
                return Err(Status::invalid_argument(
                    "scope: give global, task_type or agent_local",
                ));
            }
            Some(Scope::Global(false)) | Some(Scope::AgentLocal(false)) => {
                return Err(Status::invalid_argument(
                    "scope: global and agent_local must be true when given",
                ));
            }
            Some(Scope::AgentLocal(true)) => {
                if r.unlimited || !(1..=MAX_LOCAL_CONCURRENCY).contains(&r.limit) {
                    return Err(Status::invalid_argument(format!(
                        "limit: a local limit must be within 1..={MAX_LOCAL_CONCURRENCY}"
                    )));
                }
                let previous = u32::try_from(self.core.book.limit()).unwrap_or(u32::MAX);
                // The audit row first: if it cannot be written, nothing changes.
                self.audit(AuditEntry {
                    actor,
                    action: LOCAL_LIMIT_ACTION.into(),
                    target,
                    params: Some(serde_json::json!({ "limit": r.limit, "previous": previous })),
                    result: if previous == r.limit {
                        AuditResult::Noop
                    } else {
                        AuditResult::Applied
                    },
                    detail: Some(format!("local limit {previous} -> {}", r.limit)),
                })
                .await?;
                self.core.book.set_limit(r.limit);
                self.core.wake_claimers();
                tracing::info!(
                    previous,
                    limit = r.limit,
                    "local concurrency changed by an operator"
                );
                return Ok(Response::new(pb::SetConcurrencyResponse {
                    limit: Some(r.limit),
                    previous: Some(previous),
                    warnings: Vec::new(),
                }));
            }
            Some(Scope::Global(true)) => PolicyScope::Global,
            Some(Scope::TaskType(t)) => PolicyScope::Type(task_type_from_wire("task_type", &t)?),
        };
        if r.per_key {
            return self.set_per_key(scope, r.limit, r.unlimited, actor).await;
        }
        let patch = PolicyPatch {
            max_concurrency: Some((!r.unlimited).then_some(r.limit)),
            ..Default::default()
        };
        patch.validate(&scope).map_err(invalid)?;
        let change = self
            .core
            .store
            .policy_change(PolicySetParams {
                scope,
                patch,
                actor,
            })
            .await
            .map_err(|e| from_store("set_concurrency", e))?;
        Ok(Response::new(pb::SetConcurrencyResponse {
            limit: change.after.max_concurrency,
            previous: change.before.max_concurrency,
            warnings: Vec::new(),
        }))
    }

    /// SetConcurrency with `per_key`: a type's per-key limit, set (1..=[`MAX_CONCURRENCY_LIMIT`])
    /// or cleared (`unlimited`), through the one policy-change path (audited as `policy_set`,
    /// with the unserved-type warning). The reply's limits are the per-key ones.
    async fn set_per_key(
        &self,
        scope: PolicyScope,
        limit: u32,
        unlimited: bool,
        actor: leasehold_shared::Actor,
    ) -> Result<Response<pb::SetConcurrencyResponse>, Status> {
        if !unlimited && !(1..=MAX_CONCURRENCY_LIMIT).contains(&limit) {
            return Err(Status::invalid_argument(format!(
                "limit: a per-key limit must be within 1..={MAX_CONCURRENCY_LIMIT} \
                 ({limit} given; unlimited clears it)"
            )));
        }
        let patch = PolicyPatch {
            per_key_concurrency: Some((!unlimited).then_some(limit)),
            ..Default::default()
        };
        let (change, warnings) = self
            .change_policy(scope, patch, actor, "set_concurrency")
            .await?;
        Ok(Response::new(pb::SetConcurrencyResponse {
            limit: change.after.per_key_concurrency,
            previous: change.before.per_key_concurrency,
            warnings,
        }))
    }

    pub(super) async fn set_rate_limit_rpc(
        &self,
        request: Request<pb::SetRateLimitRequest>,
    ) -> Result<Response<pb::SetRateLimitResponse>, Status> {
        use pb::set_rate_limit_request::Scope;
        let key = match &request.get_ref().scope {
            Some(Scope::Global(_)) => "*".to_string(),
            Some(Scope::TaskType(t)) => t.clone(),
            None => "?".to_string(),
        };
        let actor = self.policy_caller(&request, &key).await?;
        let r = request.into_inner();
        let scope = match r.scope {
            None => return Err(Status::invalid_argument("scope: give global or task_type")),
            Some(Scope::Global(false)) => {
                return Err(Status::invalid_argument(
                    "scope: global must be true when given",
                ));
            }
            Some(Scope::Global(true)) => PolicyScope::Global,
            Some(Scope::TaskType(t)) => PolicyScope::Type(task_type_from_wire("task_type", &t)?),
        };
        let limit = match (r.clear, r.limit) {
            (true, Some(_)) => {
                return Err(Status::invalid_argument(
                    "limit: give either a limit or clear, not both",
                ));
            }
            (true, None) => None,
            (false, None) => {
                return Err(Status::invalid_argument(
                    "limit: give starts and period_ms, or clear",
                ));
            }
            (false, Some(l)) => Some(rate_from_wire(&l)?),
        };
        let patch = PolicyPatch {
            rate_limit: Some(limit),
            ..Default::default()
        };
        let (change, warnings) = self
            .change_policy(scope, patch, actor, "set_rate_limit")
            .await?;
        Ok(Response::new(pb::SetRateLimitResponse {
            limit: change.after.rate_limit.map(rate_to_wire),
            previous: change.before.rate_limit.map(rate_to_wire),
            warnings,
        }))
    }

    pub(super) async fn set_shed_after_rpc(
        &self,
        request: Request<pb::SetShedAfterRequest>,
    ) -> Result<Response<pb::SetShedAfterResponse>, Status> {
        let key = request.get_ref().task_type.clone();
        let actor = self.policy_caller(&request, &key).await?;
        let r = request.into_inner();
        let scope = PolicyScope::Type(task_type_from_wire("task_type", &r.task_type)?);
        let shed_after = match (r.clear, r.shed_after_ms) {
            (true, 0) => None,
            (true, _) => {
                return Err(Status::invalid_argument(
                    "shed_after_ms: give either a duration or clear, not both",
                ));
            }
            (false, ms) if !(1..=MAX_POLICY_MS).contains(&ms) => {
                return Err(Status::invalid_argument(format!(
                    "shed_after_ms: {ms} is not within 1..={MAX_POLICY_MS} (7 days)"
                )));
            }
            (false, ms) => Some(std::time::Duration::from_millis(ms)),
        };
        let patch = PolicyPatch {
            shed_after: Some(shed_after),
            ..Default::default()
        };
        let (change, warnings) = self
            .change_policy(scope, patch, actor, "set_shed_after")
            .await?;
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Ok(Response::new(pb::SetShedAfterResponse {
            shed_after_ms: change.after.shed_after.map(ms),
            previous_ms: change.before.shed_after.map(ms),
            warnings,
        }))
    }

    pub(super) async fn set_breaker_rpc(
        &self,
        request: Request<pb::SetBreakerRequest>,
    ) -> Result<Response<pb::SetBreakerResponse>, Status> {
        let key = request.get_ref().task_type.clone();
        let actor = self.policy_caller(&request, &key).await?;
        let r = request.into_inner();
        let scope = PolicyScope::Type(task_type_from_wire("task_type", &r.task_type)?);
        let breaker = if r.clear {
            if r.failures != 0 || r.within_ms != 0 || r.cooldown_ms != 0 {
                return Err(Status::invalid_argument(
                    "clear: give either a breaker (failures, within_ms, cooldown_ms) or clear, \
                     not both",
                ));
            }
            None
        } else {
            Some(breaker_from_wire(&r)?)
        };
        let patch = PolicyPatch {
            breaker: Some(breaker),
            ..Default::default()
        };
        let (change, warnings) = self
            .change_policy(scope, patch, actor, "set_breaker")
            .await?;
        Ok(Response::new(pb::SetBreakerResponse {
            breaker: change.after.breaker.map(breaker_to_wire),
            previous: change.before.breaker.map(breaker_to_wire),
            warnings,
        }))
    }

    /// Validates and applies one policy change (audited by the store as `policy_set`); with
    /// the warning that no live agent serves the type, when that is so (applied either way, as
    /// a pause is: a type nobody serves is likely misspelt).
    pub(super) async fn change_policy(
        &self,
        scope: PolicyScope,
        patch: PolicyPatch,
        actor: leasehold_shared::Actor,
        op: &'static str,
    ) -> Result<(leasehold_shared::store::PolicyChange, Vec<String>), Status> {
        patch.validate(&scope).map_err(invalid)?;
        let change = self
            .core
            .store
            .policy_change(PolicySetParams {
                scope,
                patch,
                actor,
            })
            .await
            .map_err(|e| from_store(op, e))?;
        let mut warnings = Vec::new();
        if let PolicyScope::Type(task_type) = &change.after.scope
            && let Some(w) =
                crate::runtime::scheduler::unserved_warning(&self.core, task_type).await
        {
            warnings.push(w);
        }
        Ok((change, warnings))
    }

    pub(super) async fn pause_type_rpc(
        &self,
        request: Request<pb::PauseTypeRequest>,
    ) -> Result<Response<pb::PauseTypeResponse>, Status> {
        let changed = self
            .set_paused(&request, request.get_ref().task_type.clone(), true)
            .await?;
        // Applied either way (as `schedules add` is); a type nobody serves is likely misspelt.
        let mut warnings = Vec::new();
        if let Ok(task_type) = leasehold_shared::TaskType::new(request.get_ref().task_type.as_str())
            && let Some(w) =
                crate::runtime::scheduler::unserved_warning(&self.core, &task_type).await
        {
            warnings.push(w);
        }
        Ok(Response::new(pb::PauseTypeResponse { changed, warnings }))
    }

    pub(super) async fn resume_type_rpc(
        &self,
        request: Request<pb::ResumeTypeRequest>,
    ) -> Result<Response<pb::ResumeTypeResponse>, Status> {
        let changed = self
            .set_paused(&request, request.get_ref().task_type.clone(), false)
            .await?;
        Ok(Response::new(pb::ResumeTypeResponse { changed }))
    }

    async fn set_paused<T>(
        &self,
        request: &Request<T>,
        task_type: String,
        paused: bool,
    ) -> Result<bool, Status> {
        let action = if paused { "pause" } else { "resume" };
        // Refusals are audited under the name the store gives the change it would have made.
        let actor = self.policy_caller(request, &task_type).await?;
        let scope = PolicyScope::Type(task_type_from_wire("task_type", &task_type)?);
        let change = self
            .core
            .store
            .policy_change(PolicySetParams {
                scope,
                patch: PolicyPatch {
                    paused: Some(paused),
                    ..Default::default()
                },
                actor,
            })
            .await
            .map_err(|e| from_store(action, e))?;
        Ok(change.before.paused != change.after.paused)
    }
}

/// Longest `shed_after` (and breaker cooldown) accepted, in milliseconds (7 days, as every
/// policy duration).
const MAX_POLICY_MS: u64 = 7 * 24 * 3600 * 1000;

/// A rate limit as it travels.
pub(super) fn rate_to_wire(r: RateLimit) -> pb::RateLimit {
    pb::RateLimit {
        starts: r.starts,
        period_ms: u64::try_from(r.period.as_millis()).unwrap_or(u64::MAX),
    }
}

/// A rate limit from the wire, within its bounds; a refusal names the wire field.
fn rate_from_wire(r: &pb::RateLimit) -> Result<RateLimit, Status> {
    use leasehold_shared::domain::policy::{MAX_RATE_PERIOD, MAX_RATE_STARTS};
    if !(1..=MAX_RATE_STARTS).contains(&r.starts) {
        return Err(Status::invalid_argument(format!(
            "limit.starts: {} is not within 1..={MAX_RATE_STARTS}",
            r.starts
        )));
    }
    let max_ms = u64::try_from(MAX_RATE_PERIOD.as_millis()).unwrap_or(u64::MAX);
    if !(1..=max_ms).contains(&r.period_ms) {
        return Err(Status::invalid_argument(format!(
            "limit.period_ms: {} is not within 1..={max_ms}",
            r.period_ms
        )));
    }
    RateLimit::new(r.starts, std::time::Duration::from_millis(r.period_ms)).map_err(invalid)
}

/// A circuit breaker's setting as it travels.
pub(super) fn breaker_to_wire(b: BreakerPolicy) -> pb::Breaker {
    pb::Breaker {
        failures: b.failures,
        within_ms: u64::try_from(b.within.as_millis()).unwrap_or(u64::MAX),
        cooldown_ms: u64::try_from(b.cooldown.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The breaker of a SetBreaker request, within its bounds; a refusal names the wire field.
fn breaker_from_wire(r: &pb::SetBreakerRequest) -> Result<BreakerPolicy, Status> {
    use leasehold_shared::domain::policy::{MAX_BREAKER_FAILURES, MAX_BREAKER_WINDOW};
    if !(1..=MAX_BREAKER_FAILURES).contains(&r.failures) {
        return Err(Status::invalid_argument(format!(
            "failures: {} is not within 1..={MAX_BREAKER_FAILURES}",
            r.failures
        )));
    }
    let max_within = u64::try_from(MAX_BREAKER_WINDOW.as_millis()).unwrap_or(u64::MAX);
    if !(1..=max_within).contains(&r.within_ms) {
        return Err(Status::invalid_argument(format!(
            "within_ms: {} is not within 1..={max_within} (24 h)",
            r.within_ms
        )));
    }
    if !(1..=MAX_POLICY_MS).contains(&r.cooldown_ms) {
        return Err(Status::invalid_argument(format!(
            "cooldown_ms: {} is not within 1..={MAX_POLICY_MS} (7 days)",
            r.cooldown_ms
        )));
    }
    let ms = std::time::Duration::from_millis;
    BreakerPolicy::new(r.failures, ms(r.within_ms), ms(r.cooldown_ms)).map_err(invalid)
}
