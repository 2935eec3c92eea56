//! Built-in handlers, each enabled by name (`--handlers exec,sleep`): `exec` runs a program,
//! `sleep` waits, `noop` does nothing, `fail` fails on purpose — for demos, tests and benchmarks.
//!
//! Each one is registered under the task type of its own name. Payloads are typed and refuse
//! unknown fields, so a typo in a payload is a permanent `bad_payload` failure rather than a
//! silently ignored setting.

use std::time::Duration;

use leasehold_shared::TaskType;

use crate::handler::HandlerRegistry;

pub mod exec;
pub mod fail;
pub mod noop;
pub mod sleep;

pub use exec::{ExecHandler, ExecPayload};
pub use fail::{FailHandler, FailPayload};
pub use noop::{NoopHandler, NoopPayload};
pub use sleep::{SleepHandler, SleepPayload};

/// The names of the built-in handlers, which are also their task types.
pub const BUILTIN: [&str; 4] = ["exec", "sleep", "noop", "fail"];

/// Default grace between SIGTERM and SIGKILL when `exec` stops a program.
pub const DEFAULT_EXEC_KILL_AFTER: Duration = Duration::from_secs(5);
/// Default number of bytes `exec` keeps of the end of stdout, and of stderr.
pub const DEFAULT_EXEC_OUTPUT_TAIL: usize = 4096;

/// Settings of the built-in handlers.
#[derive(Debug, Clone)]
pub struct BuiltinOptions {
    /// How long `exec` waits after SIGTERM before it sends SIGKILL to the process group.
    pub exec_kill_after: Duration,
    /// Bytes `exec` keeps of the end of stdout, and the same again of stderr.
    pub exec_output_tail: usize,
}

impl Default for BuiltinOptions {
    fn default() -> Self {
        Self {
            exec_kill_after: DEFAULT_EXEC_KILL_AFTER,
            exec_output_tail: DEFAULT_EXEC_OUTPUT_TAIL,
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

#[cfg(test)]
mod tests {
    use super::*;

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
