//! Built-in handlers, each enabled by name (`--handlers exec,sleep`): `exec` runs a program,
//! `sleep` waits, `noop` does nothing, `fail` fails on purpose — for demos, tests and benchmarks.
//!
//! Each one is registered under the task type of its own name. Payloads are typed and refuse
//! unknown fields, so a typo in a payload is a permanent `bad_payload` failure rather than a
//! silently ignored setting.
//!
//! `exec` runs only what [`BuiltinOptions::exec_allow`] allows; its default (empty) allows
//! nothing, and `leasehold-agent run` refuses to enable `exec` without an allow list.
//!
//! [`check_enqueue`] is what the Enqueue and AddSchedule calls check a payload with before
//! anything is saved: the receiving agent's own handler of the type when it has one, else the
//! built-in of that name (whose payload is known to every agent; `exec` without its allow list),
//! else nothing (a type this agent does not run may be run by another).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use leasehold_shared::TaskType;

use crate::handler::{HandlerError, HandlerRegistry, check_with};

pub mod exec;
pub mod fail;
pub mod noop;
pub mod sleep;

#[cfg(test)]
mod payload_props;

pub use exec::{ExecHandler, ExecPayload, ExecPolicy};
pub use fail::{FailHandler, FailPayload};
pub use noop::{NoopHandler, NoopPayload};
pub use sleep::{SleepHandler, SleepPayload};

/// The names of the built-in handlers, which are also their task types.
pub const BUILTIN: [&str; 4] = ["exec", "sleep", "noop", "fail"];

/// Default grace between SIGTERM and SIGKILL when `exec` stops a program.
pub const DEFAULT_EXEC_KILL_AFTER: Duration = Duration::from_secs(5);
/// Default number of bytes `exec` keeps of the end of stdout, and of stderr.
pub const DEFAULT_EXEC_OUTPUT_TAIL: usize = 4096;

/// Settings of the built-in handlers. The `exec_allow`, `exec_env` and `exec_root` rules are
/// those of [`ExecPolicy`] (module [`exec::policy`]).
#[derive(Debug, Clone)]
pub struct BuiltinOptions {
    /// How long `exec` waits after SIGTERM before it sends SIGKILL to the process group.
    pub exec_kill_after: Duration,
    /// Bytes `exec` keeps of the end of stdout, and the same again of stderr.
    pub exec_output_tail: usize,
    /// The programs `exec` may run: absolute paths with `*`/`?` globs that do not cross `/`,
    /// or the lone `"*"` for any program. Empty (the default) allows nothing.
    pub exec_allow: Vec<String>,
    /// Variables passed from the agent's environment to `exec` programs (default `PATH`,
    /// `HOME`, `LANG`); `LD_*`, `LEASEHOLD_*` and `DATABASE_URL` never are.
    pub exec_env: Vec<String>,
    /// The absolute directory an `exec` program's `cwd` must lie in, and its default `cwd`.
    pub exec_root: Option<PathBuf>,
}

impl Default for BuiltinOptions {
    fn default() -> Self {
        Self {
            exec_kill_after: DEFAULT_EXEC_KILL_AFTER,
            exec_output_tail: DEFAULT_EXEC_OUTPUT_TAIL,
            exec_allow: Vec::new(),
            exec_env: exec::policy::DEFAULT_EXEC_ENV
                .iter()
                .map(|n| (*n).to_owned())
                .collect(),
            exec_root: None,
        }
    }
}

/// A handler name that is not one of [`BUILTIN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown built-in handler {name:?} (known: {})", BUILTIN.join(", "))]
pub struct UnknownHandler {
    /// The name asked for.
    pub name: String,
}

/// Registers the built-in handler `name` under the task type of the same name.
pub fn register(
    registry: &mut HandlerRegistry,
    name: &str,
    opts: &BuiltinOptions,
) -> Result<(), UnknownHandler> {
    let unknown = || UnknownHandler {
        name: name.to_owned(),
    };
    if !BUILTIN.contains(&name) {
        return Err(unknown());
    }
    // Every built-in name is a valid task type; the mapping only keeps this free of `expect`.
    let task_type = TaskType::new(name).map_err(|_| unknown())?;
    match name {
        "exec" => registry.register(task_type, ExecHandler::new(opts)),
        "sleep" => registry.register(task_type, SleepHandler),
        "noop" => registry.register(task_type, NoopHandler),
        "fail" => registry.register(task_type, FailHandler),
        _ => return Err(unknown()),
    };
    Ok(())
}

/// Checks a payload about to be enqueued as `task_type`, without running it: with this
/// registry's handler of the type when there is one ([`HandlerRegistry::check_payload`]), else
/// with the built-in of that name (`exec`: the structural rules only, since another agent's
/// allow list decides), else not at all. The error is a permanent `bad_payload` whose message
/// says what does not fit (serde's words for a payload of the wrong shape).
pub fn check_enqueue(
    handlers: &HandlerRegistry,
    task_type: &TaskType,
    payload: &serde_json::Value,
) -> Result<(), HandlerError> {
    if let Some(checked) = handlers.check_payload(task_type, payload) {
        return checked;
    }
    let bad = |message: String| HandlerError::permanent("bad_payload", message);
    match task_type.as_str() {
        "exec" => {
            let payload = ExecPayload::deserialize(payload).map_err(|e| bad(e.to_string()))?;
            exec::policy::admit(&payload, None).map_err(bad)
        }
        "sleep" => check_with(&SleepHandler, payload),
        "noop" => check_with(&NoopHandler, payload),
        "fail" => check_with(&FailHandler, payload),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(registry: &HandlerRegistry, task_type: &str, payload: serde_json::Value) -> String {
        match check_enqueue(registry, &TaskType::new(task_type).unwrap(), &payload) {
            Ok(()) => "ok".into(),
            Err(e) => {
                assert_eq!(e.code, "bad_payload");
                assert!(!e.retryable);
                e.message
            }
        }
    }

    /// Issue 20 item 7: the payloads that used to be accepted and dead-lettered at once are
    /// refused, whether or not this agent runs the built-in; good ones pass.
    #[test]
    fn builtin_payloads_are_checked_with_or_without_the_handler() {
        let mut with = HandlerRegistry::new();
        for name in ["sleep", "noop", "fail"] {
            register(&mut with, name, &BuiltinOptions::default()).unwrap();
        }
        let without = HandlerRegistry::new();
        for registry in [&with, &without] {
            assert_eq!(check(registry, "exec", json!({})), "missing field `argv`");
            assert_eq!(
                check(registry, "exec", json!({"argv": "ls"})),
                r#"invalid type: string "ls", expected a sequence"#
            );
            assert_eq!(
                check(registry, "exec", json!({"argv": []})),
                "argv must name a program"
            );
            assert_eq!(
                check(registry, "noop", json!([1, 2])),
                "invalid length 2, expected fewer elements in array"
            );
            assert_eq!(
                check(registry, "noop", json!({"ms": 1})),
                "unknown field `ms`, there are no fields"
            );
            assert_eq!(check(registry, "sleep", json!({})), "missing field `ms`");
            assert!(check(registry, "sleep", json!({"ms": u64::MAX})).contains("at most"));
            assert!(check(registry, "fail", json!({"code": ""})).contains("code must be"));
            for (task_type, good) in [
                ("exec", json!({"argv": ["/usr/bin/env"]})),
                ("noop", json!({})),
                ("sleep", json!({"ms": 5})),
                ("fail", json!({"retryable": false})),
                // A type this agent does not run: another agent may; not checked here.
                ("report.build", json!([1, 2])),
            ] {
                assert_eq!(check(registry, task_type, good.clone()), "ok", "{good}");
            }
        }
    }

    /// A library handler's own payload type and `validate` decide for its type.
    #[test]
    fn a_registered_handler_checks_its_own_type() {
        use crate::handler::{Handler, Outcome, TaskContext};

        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Report {
            day: u8,
        }
        struct Reports;
        #[async_trait::async_trait]
        impl Handler for Reports {
            type Payload = Report;
            fn validate(&self, p: &Report) -> Result<(), HandlerError> {
                if p.day == 0 || p.day > 31 {
                    return Err(HandlerError::permanent("bad_payload", "day must be 1..=31"));
                }
                Ok(())
            }
            async fn run(&self, _: TaskContext, _: Report) -> Result<Outcome, HandlerError> {
                Ok(Outcome::done())
            }
        }
        let mut registry = HandlerRegistry::new();
        registry.register(TaskType::new("report.build").unwrap(), Reports);
        assert_eq!(check(&registry, "report.build", json!({"day": 3})), "ok");
        assert_eq!(
            check(&registry, "report.build", json!({"day": 0})),
            "day must be 1..=31"
        );
        assert_eq!(
            check(&registry, "report.build", json!({"day": "3"})),
            r#"invalid type: string "3", expected u8"#
        );
    }

    #[test]
    fn registers_every_builtin_under_its_own_name() {
        let mut registry = HandlerRegistry::new();
        for name in BUILTIN {
            register(&mut registry, name, &BuiltinOptions::default()).unwrap();
        }
        let mut types: Vec<String> = registry
            .task_types()
            .iter()
            .map(|t| t.as_str().to_owned())
            .collect();
        types.sort();
        assert_eq!(types, ["exec", "fail", "noop", "sleep"]);
    }

    #[test]
    fn unknown_handler_names_itself_and_the_known_ones() {
        let mut registry = HandlerRegistry::new();
        let err = register(&mut registry, "exex", &BuiltinOptions::default()).unwrap_err();
        assert_eq!(err.name, "exex");
        assert_eq!(
            err.to_string(),
            r#"unknown built-in handler "exex" (known: exec, sleep, noop, fail)"#
        );
        assert!(registry.is_empty());
    }

    #[test]
    fn default_options_use_the_named_constants() {
        let opts = BuiltinOptions::default();
        assert_eq!(opts.exec_kill_after, DEFAULT_EXEC_KILL_AFTER);
        assert_eq!(opts.exec_output_tail, DEFAULT_EXEC_OUTPUT_TAIL);
    }
}
