//! GetPolicy and SetPolicy: a type's (or the global) retry, timeout and attempt settings, each
//! with where its value in force comes from (`type` > `global` > `default`), shown to viewers
//! and changed by operators through the one audited policy change (`policy_set`).
//!
//! Invariants: a SetPolicy request is checked whole before anything is written (a bad value,
//! a setting both given and cleared, an unknown name to clear: INVALID_ARGUMENT, no row, no
//! audit row — as the other policy RPCs); the reply's settings are read from the rows the
//! change returned, not recomputed from the request.

use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_shared::domain::policy::{
    DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_SNOOZES, DEFAULT_RETRY_BASE, DEFAULT_RETRY_JITTER,
    DEFAULT_RETRY_MAX, DEFAULT_RETRY_MULTIPLIER, DEFAULT_SLOW_THRESHOLD, DEFAULT_TIMEOUT,
    MAX_POLICY_DURATION,
};
use leasehold_shared::domain::{Policy, PolicyPatch, PolicyScope};
use tonic::{Request, Response, Status};

use super::convert::{invalid, task_type_from_wire};
use super::policy::{breaker_to_wire, rate_to_wire};
use super::service::{Need, Service};
use super::status::from_store;

/// The settings GetPolicy shows and SetPolicy sets or clears, in the order shown.
pub const SETTING_NAMES: [&str; 8] = [
    "max_attempts",
    "retry_base_ms",
    "retry_multiplier",
    "retry_max_ms",
    "retry_jitter",
    "timeout_ms",
    "slow_after_ms",
    "max_snoozes",
];

fn ms(d: Duration) -> f64 {
    d.as_millis() as f64
}

/// One row's value of setting `name`, as shown (`None`: the row does not set it).
fn own_value(p: &Policy, name: &str) -> Option<f64> {
    match name {
        "max_attempts" => p.max_attempts.map(f64::from),
        "retry_base_ms" => p.retry_base.map(ms),
        "retry_multiplier" => p.retry_multiplier,
        "retry_max_ms" => p.retry_max.map(ms),
        "retry_jitter" => p.retry_jitter,
        "timeout_ms" => p.timeout.map(ms),
        "slow_after_ms" => p.slow_threshold.map(ms),
        "max_snoozes" => p.max_snoozes.map(f64::from),
        _ => None,
    }
}

fn default_value(name: &str) -> f64 {
    match name {
        "max_attempts" => f64::from(DEFAULT_MAX_ATTEMPTS),
        "retry_base_ms" => ms(DEFAULT_RETRY_BASE),
        "retry_multiplier" => DEFAULT_RETRY_MULTIPLIER,
        "retry_max_ms" => ms(DEFAULT_RETRY_MAX),
        "retry_jitter" => DEFAULT_RETRY_JITTER,
        "timeout_ms" => ms(DEFAULT_TIMEOUT),
        "slow_after_ms" => ms(DEFAULT_SLOW_THRESHOLD),
        _ => f64::from(DEFAULT_MAX_SNOOZES),
    }
}

/// Every setting in force for `row` (the scope's row, or what a type without one inherits),
/// with `global` the global row: the row's own value, else the global row's, else the default.
pub fn settings(row: &Policy, global: &Policy) -> Vec<pb::PolicySetting> {
    SETTING_NAMES
        .iter()
        .map(|&name| {
            let (value, source) = match (own_value(row, name), own_value(global, name)) {
                (Some(v), _) if row.scope != PolicyScope::Global => (v, "type"),
                (Some(v), _) => (v, "global"),
                (None, Some(v)) => (v, "global"),
                (None, None) => (default_value(name), "default"),
            };
            pb::PolicySetting {
                name: name.to_string(),
                value,
                source: source.to_string(),
            }
        })
        .collect()
}

/// The patch of a SetPolicy request, checked whole (names the wire field on refusal).
pub fn patch_from_wire(r: &pb::SetPolicyRequest) -> Result<PolicyPatch, Status> {
    let max_ms = u64::try_from(MAX_POLICY_DURATION.as_millis()).unwrap_or(u64::MAX);
    let duration = |field: &str, v: Option<u64>, min: u64| -> Result<_, Status> {
        match v {
            Some(n) if !(min..=max_ms).contains(&n) => Err(Status::invalid_argument(format!(
                "{field}: {n} is not within {min}..={max_ms} (7 days)"
            ))),
            v => Ok(v.map(|n| Some(Duration::from_millis(n)))),
        }
    };
    let mut patch = PolicyPatch {
        max_attempts: r.max_attempts.map(Some),
        retry_base: duration("retry_base_ms", r.retry_base_ms, 0)?,
        retry_max: duration("retry_max_ms", r.retry_max_ms, 0)?,
        retry_multiplier: r.retry_multiplier.map(Some),
        retry_jitter: r.retry_jitter.map(Some),
        timeout: duration("timeout_ms", r.timeout_ms, 1)?,
        slow_threshold: duration("slow_after_ms", r.slow_after_ms, 1)?,
        max_snoozes: r.max_snoozes.map(Some),
        ..Default::default()
    };
    if let (Some(base), Some(max)) = (r.retry_base_ms, r.retry_max_ms)
        && base > max
    {
        return Err(Status::invalid_argument(format!(
            "retry_base_ms: {base} is above retry_max_ms {max}"
        )));
    }
    for name in &r.clear {
        let given = match name.as_str() {
            "max_attempts" => patch.max_attempts.replace(None).is_some(),
            "retry_base_ms" => patch.retry_base.replace(None).is_some(),
            "retry_multiplier" => patch.retry_multiplier.replace(None).is_some(),
            "retry_max_ms" => patch.retry_max.replace(None).is_some(),
            "retry_jitter" => patch.retry_jitter.replace(None).is_some(),
            "timeout_ms" => patch.timeout.replace(None).is_some(),
            "slow_after_ms" => patch.slow_threshold.replace(None).is_some(),
            "max_snoozes" => patch.max_snoozes.replace(None).is_some(),
            other => {
                return Err(Status::invalid_argument(format!(
                    "clear: unknown setting {other:?}; give one of {}",
                    SETTING_NAMES.join(", ")
                )));
            }
        };
        if given {
            return Err(Status::invalid_argument(format!(
                "clear: {name} is both given and cleared"
            )));
        }
    }
    if patch == PolicyPatch::default() {
        return Err(Status::invalid_argument(
            "give at least one setting to change or clear",
        ));
    }
    Ok(patch)
}

/// The scope of a request naming a type or (`global`) the global policy.
fn scope_from_wire(task_type: &str, global: bool) -> Result<PolicyScope, Status> {
    match (task_type.is_empty(), global) {
        (true, true) => Ok(PolicyScope::Global),
        (false, false) => Ok(PolicyScope::Type(task_type_from_wire(
            "task_type",
            task_type,
        )?)),
        (false, true) => Err(Status::invalid_argument(
            "task_type: give either a task type or global, not both",
        )),
        (true, false) => Err(Status::invalid_argument(
            "task_type: give a task type, or global for the global policy",
        )),
    }
}

impl Service {
    pub(super) async fn get_policy_rpc(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let r = request.into_inner();
        let scope = scope_from_wire(&r.task_type, r.task_type.is_empty())?;
        let rows = self
            .core
            .store
            .policy_list()
            .await
            .map_err(|e| from_store("get_policy", e))?;
        let find = |s: &PolicyScope| rows.iter().find(|p| p.scope == *s).cloned();
        let global =
            find(&PolicyScope::Global).unwrap_or_else(|| Policy::inherit(PolicyScope::Global));
        let row = find(&scope).unwrap_or_else(|| Policy::inherit(scope.clone()));
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Ok(Response::new(pb::GetPolicyResponse {
            task_type: r.task_type,
            settings: settings(&row, &global),
            concurrency: row.max_concurrency,
            per_key_limit: row.per_key_concurrency,
            rate_limit: row.rate_limit.map(rate_to_wire),
            shed_after_ms: row.shed_after.map(ms),
            breaker: row.breaker.map(breaker_to_wire),
            paused: row.paused,
        }))
    }

    pub(super) async fn set_policy_rpc(
        &self,
        request: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::SetPolicyResponse>, Status> {
        let key = match (
            request.get_ref().global,
            request.get_ref().task_type.as_str(),
        ) {
            (true, "") => "*".to_string(),
            (_, t) => t.to_string(),
        };
        let actor = self.policy_caller(&request, &key).await?;
        let r = request.into_inner();
        let scope = scope_from_wire(&r.task_type, r.global)?;
        let patch = patch_from_wire(&r)?;
        patch.validate(&scope).map_err(invalid)?;
        let global_before = match &scope {
            PolicyScope::Global => None,
            PolicyScope::Type(_) => self
                .core
                .store
                .policy_list()
                .await
                .map_err(|e| from_store("set_policy", e))?
                .into_iter()
                .find(|p| p.scope == PolicyScope::Global),
        };
        let (change, warnings) = self
            .change_policy(scope, patch, actor, "set_policy")
            .await?;
        let (before_global, after_global) = match global_before {
            Some(g) => (g.clone(), g),
            None => (change.before.clone(), change.after.clone()),
        };
        Ok(Response::new(pb::SetPolicyResponse {
            previous: settings(&change.before, &before_global),
            current: settings(&change.after, &after_global),
            warnings,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> pb::SetPolicyRequest {
        pb::SetPolicyRequest {
            task_type: "email".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_set_policy_request_becomes_one_patch() {
        let r = pb::SetPolicyRequest {
            max_attempts: Some(5),
            retry_base_ms: Some(2_000),
            retry_max_ms: Some(300_000),
            timeout_ms: Some(30_000),
            clear: vec!["max_snoozes".into()],
            ..request()
        };
        let p = patch_from_wire(&r).unwrap();
        assert_eq!(p.max_attempts, Some(Some(5)));
        assert_eq!(p.retry_base, Some(Some(Duration::from_secs(2))));
        assert_eq!(p.retry_max, Some(Some(Duration::from_secs(300))));
        assert_eq!(p.timeout, Some(Some(Duration::from_secs(30))));
        assert_eq!(p.max_snoozes, Some(None));
        assert_eq!(p.slow_threshold, None);
    }

    #[test]
    fn bad_set_policy_requests_are_refused_with_their_field() {
        let refused = |r: pb::SetPolicyRequest| match patch_from_wire(&r) {
            Err(s) => s.message().to_string(),
            Ok(p) => panic!("accepted {r:?} as {p:?}"),
        };
        assert!(refused(request()).contains("at least one"));
        assert!(
            refused(pb::SetPolicyRequest {
                clear: vec!["bogus".into()],
                ..request()
            })
            .contains("unknown setting")
        );
        assert!(
            refused(pb::SetPolicyRequest {
                max_attempts: Some(3),
                clear: vec!["max_attempts".into()],
                ..request()
            })
            .contains("both given and cleared")
        );
        assert!(
            refused(pb::SetPolicyRequest {
                timeout_ms: Some(0),
                ..request()
            })
            .starts_with("timeout_ms")
        );
        assert!(
            refused(pb::SetPolicyRequest {
                retry_base_ms: Some(10),
                retry_max_ms: Some(5),
                ..request()
            })
            .starts_with("retry_base_ms")
        );
        assert!(scope_from_wire("email", true).is_err());
        assert!(scope_from_wire("", false).is_err());
    }

    #[test]
    fn settings_say_where_each_value_comes_from() {
        let email = PolicyScope::Type(leasehold_shared::TaskType::new("email").unwrap());
        let mut global = Policy::inherit(PolicyScope::Global);
        global.max_attempts = Some(7);
        global.timeout = Some(Duration::from_secs(60));
        let mut row = Policy::inherit(email);
        row.timeout = Some(Duration::from_secs(5));
        let got: Vec<(String, f64, String)> = settings(&row, &global)
            .into_iter()
            .map(|s| (s.name, s.value, s.source))
            .collect();
        let find = |n: &str| got.iter().find(|s| s.0 == n).cloned().unwrap();
        assert_eq!(
            find("max_attempts"),
            ("max_attempts".into(), 7.0, "global".into())
        );
        assert_eq!(
            find("timeout_ms"),
            ("timeout_ms".into(), 5000.0, "type".into())
        );
        assert_eq!(
            find("max_snoozes"),
            ("max_snoozes".into(), 100.0, "default".into())
        );
        let of_global: Vec<String> = settings(&global, &global)
            .into_iter()
            .map(|s| s.source)
            .collect();
        assert_eq!(of_global[0], "global");
        assert_eq!(of_global[7], "default");
    }
}
