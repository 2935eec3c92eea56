//! `leasehold policy show|set`: GetPolicy and SetPolicy.
//!
//! Checked locally before connecting (exit 2, no call): the flags' ranges (clap, see
//! [`crate::cli::PolicySetArgs`]), at least one change, nothing both set and cleared. The agent
//! checks everything again; a viewer token is refused (exit 4).

use leasehold_proto::v1;
use leasehold_shared::domain::policy::duration_text;
use serde_json::{Map, Value, json};

use crate::cli::{PolicySetArgs, PolicyShowArgs};
use crate::client::Agent;
use crate::convert::WireError;
use crate::error::{Error, Result};
use crate::output::Out;
use crate::output::text::shown;

/// The request of `policy show`.
pub fn prepare_show(args: &PolicyShowArgs) -> v1::GetPolicyRequest {
    v1::GetPolicyRequest {
        task_type: args.task_type.clone().unwrap_or_default(),
    }
}

/// The request of `policy set`; a setting both given and cleared is a usage error.
pub fn prepare_set(args: &PolicySetArgs) -> Result<v1::SetPolicyRequest> {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut r = v1::SetPolicyRequest {
        task_type: args.task_type.clone().unwrap_or_default(),
        global: args.global,
        max_attempts: args.max_attempts,
        retry_base_ms: args.backoff.map(|(base, _)| ms(base)),
        retry_max_ms: args.backoff.map(|(_, max)| ms(max)),
        retry_multiplier: args.backoff_multiplier,
        retry_jitter: args.jitter,
        timeout_ms: args.timeout.map(ms),
        slow_after_ms: args.slow_after.map(ms),
        max_snoozes: args.max_snoozes,
        clear: Vec::new(),
    };
    for field in &args.clear {
        let given = match field {
            crate::cli::PolicyField::MaxAttempts => r.max_attempts.is_some(),
            crate::cli::PolicyField::Backoff => r.retry_base_ms.is_some(),
            crate::cli::PolicyField::BackoffMultiplier => r.retry_multiplier.is_some(),
            crate::cli::PolicyField::Jitter => r.retry_jitter.is_some(),
            crate::cli::PolicyField::Timeout => r.timeout_ms.is_some(),
            crate::cli::PolicyField::SlowAfter => r.slow_after_ms.is_some(),
            crate::cli::PolicyField::MaxSnoozes => r.max_snoozes.is_some(),
        };
        if given {
            return Err(Error::usage(format!(
                "{} is both given and cleared (--clear {})",
                field.flag(),
                field.flag().trim_start_matches("--")
            )));
        }
        for name in field.wire_names() {
            if !r.clear.iter().any(|c| c == name) {
                r.clear.push((*name).to_string());
            }
        }
    }
    Ok(r)
}

/// The settings as `policy show --output json` gives them: name → {"value", "from"}.
fn settings_json(settings: &[v1::PolicySetting]) -> Result<Map<String, Value>, WireError> {
    let mut out = Map::new();
    for s in settings {
        if !matches!(s.source.as_str(), "type" | "global" | "default") {
            return Err(WireError::Broken(format!(
                "the setting {} comes from an unknown source {:?}",
                shown(&s.name, 40),
                shown(&s.source, 20)
            )));
        }
        if !s.value.is_finite() {
            return Err(WireError::Broken(format!(
                "the setting {} has no finite value",
                shown(&s.name, 40)
            )));
        }
        let value = if is_factor(&s.name) {
            json!(s.value)
        } else {
            json!(s.value.max(0.0).round() as u64)
        };
        out.insert(s.name.clone(), json!({"value": value, "from": s.source}));
    }
    Ok(out)
}

fn is_factor(name: &str) -> bool {
    matches!(name, "retry_multiplier" | "retry_jitter")
}

/// What a setting is called in the table and the change line.
fn label(name: &str) -> &str {
    match name {
        "max_attempts" => "max attempts",
        "retry_base_ms" => "backoff base",
        "retry_multiplier" => "backoff multiplier",
        "retry_max_ms" => "backoff max",
        "retry_jitter" => "jitter",
        "timeout_ms" => "timeout",
        "slow_after_ms" => "slow after",
        "max_snoozes" => "max snoozes",
        other => other,
    }
}

/// A setting's value as shown: `30s`, `5m`, `2`, `0.2`, `25`.
fn value_text(name: &str, value: f64) -> String {
    if is_factor(name) {
        format!("{value}")
    } else if name.ends_with("_ms") {
        duration_text(std::time::Duration::from_millis(value.max(0.0) as u64))
    } else {
        format!("{}", value.max(0.0) as u64)
    }
}

fn scope_name(task_type: &str) -> String {
    if task_type.is_empty() {
        "global policy".into()
    } else {
        format!("type {}", shown(task_type, 64))
    }
}

/// The table of `policy show` (fits 80 columns).
pub fn show_lines(r: &v1::GetPolicyResponse) -> Vec<String> {
    let mut lines = vec![
        format!("{}:", scope_name(&r.task_type)),
        format!("  {:<20}{:<14}{}", "SETTING", "VALUE", "FROM"),
    ];
    for s in &r.settings {
        lines.push(format!(
            "  {:<20}{:<14}{}",
            label(&s.name),
            value_text(&s.name, s.value),
            s.source
        ));
    }
    let own = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    let limits = [
        (
            "concurrency",
            r.concurrency
                .map(|n| n.to_string())
                .or(Some("unlimited".into())),
        ),
        ("per-key limit", r.per_key_limit.map(|n| n.to_string())),
        (
            "rate limit",
            r.rate_limit.as_ref().map(|l| {
                format!(
                    "{}/{}",
                    l.starts,
                    duration_text(std::time::Duration::from_millis(l.period_ms))
                )
            }),
        ),
        (
            "shed after",
            r.shed_after_ms
                .map(|ms| duration_text(std::time::Duration::from_millis(ms))),
        ),
        (
            "breaker",
            r.breaker.as_ref().map(|b| {
                format!(
                    "{} in {}, cool {}",
                    b.failures,
                    duration_text(std::time::Duration::from_millis(b.within_ms)),
                    duration_text(std::time::Duration::from_millis(b.cooldown_ms))
                )
            }),
        ),
        ("paused", Some(if r.paused { "yes" } else { "no" }.into())),
    ];
    for (name, value) in limits {
        lines.push(format!("  {name:<20}{}", own(value)));
    }
    lines
}

/// The JSON of `policy show`.
pub fn show_json(r: &v1::GetPolicyResponse) -> Result<Value, WireError> {
    let mut out = Map::new();
    out.insert(
        "task_type".into(),
        if r.task_type.is_empty() {
            Value::Null
        } else {
            json!(r.task_type)
        },
    );
    out.extend(settings_json(&r.settings)?);
    out.insert("concurrency".into(), json!(r.concurrency));
    out.insert("per_key_limit".into(), json!(r.per_key_limit));
    out.insert(
        "rate_limit".into(),
        json!(
            r.rate_limit
                .as_ref()
                .map(|l| json!({"starts": l.starts, "period_ms": l.period_ms}))
        ),
    );
    out.insert("shed_after_ms".into(), json!(r.shed_after_ms));
    out.insert(
        "breaker".into(),
        json!(r.breaker.as_ref().map(|b| json!({
            "failures": b.failures, "within_ms": b.within_ms, "cooldown_ms": b.cooldown_ms
        }))),
    );
    out.insert("paused".into(), json!(r.paused));
    Ok(Value::Object(out))
}

/// Runs `policy show` (one RPC, GetPolicy).
pub async fn run_show(agent: &Agent, request: v1::GetPolicyRequest, out: &mut Out) -> Result<u8> {
    let reply = agent.get_policy(request).await?;
    if out.json_mode() {
        let value = show_json(&reply).map_err(|e| Error::bad_wire("show the policy", e))?;
        out.json(&value)?;
    } else {
        out.lines(show_lines(&reply))?;
    }
    Ok(crate::exit::OK)
}

/// The change `policy set` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Changed {
    pub task_type: Option<String>,
    pub previous: Map<String, Value>,
    pub current: Map<String, Value>,
    #[serde(skip)]
    lines: Vec<String>,
}

impl Changed {
    pub fn from_reply(
        request: &v1::SetPolicyRequest,
        reply: &v1::SetPolicyResponse,
    ) -> Result<Self, WireError> {
        let mut lines = Vec::new();
        for now in &reply.current {
            let before = reply.previous.iter().find(|p| p.name == now.name);
            if before.is_some_and(|b| b.value == now.value && b.source == now.source) {
                continue;
            }
            let was = before.map_or_else(
                || "unknown".to_string(),
                |b| format!("{}, {}", value_text(&b.name, b.value), b.source),
            );
            let inherited = if now.source == "type" {
                String::new()
            } else {
                format!(" from {}", now.source)
            };
            lines.push(format!(
                "{} {}{inherited} (was {was})",
                label(&now.name),
                value_text(&now.name, now.value)
            ));
        }
        Ok(Self {
            task_type: (!request.task_type.is_empty()).then(|| request.task_type.clone()),
            previous: settings_json(&reply.previous)?,
            current: settings_json(&reply.current)?,
            lines,
        })
    }
}

/// `type email: max attempts 5 (was 25, default)` for one change; for several, `type email:`
/// then one indented line per change (each fits 80 columns); `type email: nothing changed`.
pub fn line(c: &Changed) -> String {
    let scope = scope_name(c.task_type.as_deref().unwrap_or_default());
    match c.lines.as_slice() {
        [] => format!("{scope}: nothing changed"),
        [one] => format!("{scope}: {one}"),
        many => format!("{scope}:\n  {}", many.join("\n  ")),
    }
}

/// Runs `policy set` (one RPC, SetPolicy).
pub async fn run_set(agent: &Agent, request: v1::SetPolicyRequest, out: &mut Out) -> Result<u8> {
    let reply = agent.set_policy(request.clone()).await?;
    let changed =
        Changed::from_reply(&request, &reply).map_err(|e| Error::bad_wire("set the policy", e))?;
    super::print_change(out, &reply.warnings, &changed, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(name: &str, value: f64, source: &str) -> v1::PolicySetting {
        v1::PolicySetting {
            name: name.into(),
            value,
            source: source.into(),
        }
    }

    #[test]
    fn the_show_table_fits_80_columns_and_says_where_values_come_from() {
        let r = v1::GetPolicyResponse {
            task_type: "email.send".into(),
            settings: vec![
                setting("max_attempts", 5.0, "type"),
                setting("retry_base_ms", 2000.0, "type"),
                setting("retry_multiplier", 2.0, "global"),
                setting("retry_jitter", 0.2, "default"),
                setting("timeout_ms", 1_800_000.0, "global"),
            ],
            concurrency: Some(4),
            ..Default::default()
        };
        let lines = show_lines(&r);
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{lines:#?}");
        assert_eq!(lines[2], "  max attempts        5             type");
        assert_eq!(lines[3], "  backoff base        2s            type");
        assert_eq!(lines[5], "  jitter              0.2           default");
        assert_eq!(lines[6], "  timeout             30m           global");
        let json = show_json(&r).unwrap();
        assert_eq!(json["max_attempts"], json!({"value": 5, "from": "type"}));
        assert_eq!(
            json["retry_jitter"],
            json!({"value": 0.2, "from": "default"})
        );
        assert_eq!(json["concurrency"], json!(4));
        assert_eq!(json["breaker"], Value::Null);
    }

    #[test]
    fn a_change_line_names_what_changed_and_what_it_was() {
        let request = v1::SetPolicyRequest {
            task_type: "email".into(),
            ..Default::default()
        };
        let reply = v1::SetPolicyResponse {
            previous: vec![
                setting("max_attempts", 25.0, "default"),
                setting("timeout_ms", 60_000.0, "global"),
            ],
            current: vec![
                setting("max_attempts", 5.0, "type"),
                setting("timeout_ms", 60_000.0, "global"),
            ],
            warnings: vec![],
        };
        let c = Changed::from_reply(&request, &reply).unwrap();
        assert_eq!(line(&c), "type email: max attempts 5 (was 25, default)");
        let same = v1::SetPolicyResponse {
            previous: reply.current.clone(),
            ..reply
        };
        let c = Changed::from_reply(&request, &same).unwrap();
        assert_eq!(line(&c), "type email: nothing changed");
        let bad = v1::SetPolicyResponse {
            current: vec![setting("max_attempts", 5.0, "elsewhere")],
            ..Default::default()
        };
        assert!(Changed::from_reply(&request, &bad).is_err());
    }
}
