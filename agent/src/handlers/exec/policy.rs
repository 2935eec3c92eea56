//! What `exec` may run and with what: the allow list (`exec_allow`), the environment passed
//! through from the agent (`exec_env`), the directory `cwd` is confined to (`exec_root`), and
//! the checks an `exec` payload must pass — at enqueue ([`check_enqueue`]) and again at run
//! time on the agent that executes it.
//!
//! Rules:
//! - `exec_allow` entries are absolute program paths with `*` / `?` globs that stay within one
//!   path segment (see [`glob`](super::glob)), or the lone entry `*`, which allows any program.
//!   An empty list allows nothing.
//! - The program is `argv[0]`: an absolute path, or a bare name looked up in the child's
//!   `PATH` (the payload's `PATH`, else the agent's when `PATH` is in `exec_env`; relative
//!   `PATH` entries are skipped). A relative path with a `/` is refused. The path is
//!   normalised lexically (`.` and `..` removed), matched against the list, and exactly that
//!   path is executed, so the check and the exec cannot disagree. Symlinks are not resolved
//!   for the match: allowing `/usr/local/bin/*` allows whatever the links there point to,
//!   so only trusted users may write to an allowed directory. Allowing an interpreter
//!   (`/bin/sh`, `/usr/bin/python3`) allows any code.
//! - Environment names must match `[A-Za-z_][A-Za-z0-9_]*`; names starting with `LD_` or
//!   `LEASEHOLD_` and `DATABASE_URL` (all compared without regard to case) are refused in a
//!   payload and never passed through, even if listed in `exec_env`.
//! - `cwd` must be absolute. With `exec_root` it must lie inside the root after lexical
//!   normalisation and, at run time, after both are canonicalised (symlinks resolved); the
//!   program then starts in the canonical directory. Without `cwd` the program starts in
//!   `exec_root` when set, else in the agent's working directory.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::ExecPayload;
use super::glob;

/// The configuration key (and flag, with dashes) of the allow list, as messages name it.
pub const ALLOW_KEY: &str = "exec_allow";
/// The environment variables an `exec` child gets from the agent by default.
pub const DEFAULT_EXEC_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];
/// The variables that tell the child who it is, set after everything else.
pub const TASK_VARS: [&str; 5] = [
    "LEASEHOLD_TASK_ID",
    "LEASEHOLD_ATTEMPT",
    "LEASEHOLD_EPOCH",
    "LEASEHOLD_IDEMPOTENCY_KEY",
    "LEASEHOLD_TASK_TYPE",
];

/// The validated `exec_allow`, `exec_env` and `exec_root` of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPolicy {
    allow: Vec<String>,
    env: Vec<String>,
    root: Option<PathBuf>,
}

impl Default for ExecPolicy {
    /// Allows nothing; passes [`DEFAULT_EXEC_ENV`] through; no root.
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            env: DEFAULT_EXEC_ENV.iter().map(|n| (*n).to_owned()).collect(),
            root: None,
        }
    }
}

impl ExecPolicy {
    /// Checks the three settings; the error names the setting and what is wrong with it.
    pub fn new(
        allow: &[String],
        env: &[String],
        root: Option<&Path>,
    ) -> Result<Self, (&'static str, String)> {
        let mut patterns = Vec::new();
        for raw in allow {
            let pattern = raw.trim();
            if pattern.is_empty() {
                continue;
            }
            if pattern != "*" && !pattern.starts_with('/') {
                return Err((
                    ALLOW_KEY,
                    format!(
                        "{pattern:?} is neither an absolute program path (globs * and ? allowed, \
                         e.g. '/usr/local/bin/*') nor '*' (any program)"
                    ),
                ));
            }
            if pattern.contains('\0') {
                return Err((ALLOW_KEY, format!("{pattern:?} contains a NUL byte")));
            }
            patterns.push(pattern.to_owned());
        }
        let mut names = Vec::new();
        for raw in env {
            let name = raw.trim();
            if name.is_empty() {
                continue;
            }
            if let Some(problem) = env_name_problem(name) {
                return Err((
                    "exec_env",
                    format!("{name:?} {problem}: it is never passed to a program"),
                ));
            }
            names.push(name.to_owned());
        }
        let root = match root {
            None => None,
            Some(dir) if !dir.is_absolute() => {
                return Err((
                    "exec_root",
                    format!("{} is not an absolute directory", dir.display()),
                ));
            }
            Some(dir) => Some(normalise(dir)),
        };
        Ok(Self {
            allow: patterns,
            env: names,
            root,
        })
    }

    /// The allow list as configured.
    pub fn allow(&self) -> &[String] {
        &self.allow
    }

    /// The names passed through from the agent's environment.
    pub fn passthrough(&self) -> &[String] {
        &self.env
    }

    /// The directory `cwd` is confined to, normalised.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// True when the allow list has the lone entry `*`.
    pub fn allows_anything(&self) -> bool {
        self.allow.iter().any(|p| p == "*")
    }

    /// Whether the absolute, normalised `program` may run.
    pub fn allows(&self, program: &Path) -> bool {
        if self.allows_anything() {
            return true;
        }
        let Some(text) = program.to_str() else {
            return false;
        };
        self.allow.iter().any(|p| glob::matches(p, text))
    }

    /// Why `program` may not run, naming the program and the setting.
    pub(super) fn refusal(&self, program: &Path) -> String {
        if self.allow.is_empty() {
            format!(
                "program {} is not allowed: {ALLOW_KEY} is empty, so this agent runs no program",
                program.display()
            )
        } else {
            format!(
                "program {} is not allowed by {ALLOW_KEY} ({})",
                program.display(),
                self.allow.join(", ")
            )
        }
    }

    /// The passed-through variables, read from this process's environment now.
    pub(super) fn inherited_env(&self) -> BTreeMap<OsString, OsString> {
        self.env
            .iter()
            .filter(|name| env_name_problem(name).is_none())
            .filter_map(|name| std::env::var_os(name).map(|v| (OsString::from(name), v)))
            .collect()
    }

    /// The child's `PATH`: the payload's, else the passed-through one.
    pub(super) fn child_path(&self, payload: &ExecPayload) -> Option<OsString> {
        match payload.env.get("PATH") {
            Some(path) => Some(OsString::from(path)),
            None => self.inherited_env().remove(OsStr::new("PATH")),
        }
    }

    /// The checks that need no file system: the program (when absolute) and `cwd` against the
    /// root, lexically.
    fn check_static(&self, payload: &ExecPayload) -> Result<(), String> {
        if let Some(program) = payload.argv.first().filter(|p| p.starts_with('/')) {
            let program = normalise(Path::new(program));
            if !self.allows(&program) {
                return Err(self.refusal(&program));
            }
        }
        if let Some(cwd) = &payload.cwd {
            self.cwd_inside_root(Path::new(cwd))?;
        }
        Ok(())
    }

    /// `cwd` (absolute) normalised, refused when outside the root.
    pub(super) fn cwd_inside_root(&self, cwd: &Path) -> Result<PathBuf, String> {
        let cwd = normalise(cwd);
        match &self.root {
            Some(root) if !cwd.starts_with(root) => Err(format!(
                "cwd {} is outside exec_root {}",
                cwd.display(),
                root.display()
            )),
            _ => Ok(cwd),
        }
    }
}

/// What is wrong with an environment variable name given to a program, if anything.
pub fn env_name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Some("is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
    }
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("LD_") {
        return Some("is refused (LD_* changes how every program is loaded)");
    }
    if upper.starts_with("LEASEHOLD_") {
        return Some("is refused (LEASEHOLD_* belongs to the agent)");
    }
    if upper == "DATABASE_URL" {
        return Some("is refused (the agent's database)");
    }
    None
}

/// `path` with `.` removed and `..` applied lexically (never above `/`), without touching the
/// file system.
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() && !path.is_absolute() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The absolute, normalised program `argv0` names: itself when it is absolute, else the first
/// executable file of that name in an absolute entry of `path`.
pub fn resolve_program(argv0: &str, path: Option<&OsStr>) -> Result<PathBuf, String> {
    if argv0.starts_with('/') {
        return Ok(normalise(Path::new(argv0)));
    }
    if argv0.contains('/') {
        return Err(relative_program(argv0));
    }
    let Some(path) = path else {
        return Err(format!(
            "cannot find {argv0:?}: the program has no PATH (give an absolute path, or PATH in \
             exec_env or in the payload's env)"
        ));
    };
    for dir in std::env::split_paths(path).filter(|d| d.is_absolute()) {
        let candidate = normalise(&dir.join(argv0));
        let executable = std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return Ok(candidate);
        }
    }
    Err(format!(
        "cannot find {argv0:?} in PATH {}",
        path.to_string_lossy()
    ))
}

fn relative_program(argv0: &str) -> String {
    format!(
        "argv[0] {argv0:?} is a relative path: give an absolute path or a bare name looked up in PATH"
    )
}

/// The checks of every `exec` payload that need nothing but the payload: it fits
/// [`ExecPayload`], `argv` names a program (absolute, or a bare name), env names are allowed,
/// `cwd` is absolute, `timeout` is a duration.
pub(super) fn check_structure(payload: &ExecPayload) -> Result<(), String> {
    if let Some(program) = payload.argv.first()
        && !program.starts_with('/')
        && program.contains('/')
    {
        return Err(relative_program(program));
    }
    for name in payload.env.keys() {
        if let Some(problem) = env_name_problem(name) {
            return Err(format!("env name {name:?} {problem}"));
        }
    }
    if let Some(cwd) = &payload.cwd
        && !cwd.starts_with('/')
    {
        return Err(format!("cwd {cwd:?} must be an absolute path"));
    }
    Ok(())
}

/// Checks an `exec` payload before it is enqueued: the structural rules always, and with
/// `policy` (the receiving agent runs `exec` itself) the allow list — resolving a bare name in
/// the child's `PATH` as this agent would — and `exec_root` (lexically). The agent that runs the
/// task checks again at run time, since any agent or a plain INSERT may enqueue; there a refusal
/// is a permanent failure (`bad_payload` or `not_allowed`), dead-lettered with that reason.
pub fn check_enqueue(
    payload: &serde_json::Value,
    policy: Option<&ExecPolicy>,
) -> Result<(), String> {
    let payload: ExecPayload =
        serde_json::from_value(payload.clone()).map_err(|e| format!("not an exec payload: {e}"))?;
    admit(&payload, policy)
}

/// [`check_enqueue`] of a payload that already fits [`ExecPayload`]: what the `exec` handler's
/// [`validate_enqueue`](crate::handler::Handler::validate_enqueue) runs, with its own policy.
pub fn admit(payload: &ExecPayload, policy: Option<&ExecPolicy>) -> Result<(), String> {
    payload.checked().map_err(|e| e.message)?;
    let Some(policy) = policy else {
        return Ok(());
    };
    policy.check_static(payload)?;
    if let Some(program) = payload.argv.first().filter(|p| !p.contains('/'))
        && !policy.allows_anything()
    {
        let resolved = resolve_program(program, policy.child_path(payload).as_deref())?;
        if !policy.allows(&resolved) {
            return Err(policy.refusal(&resolved));
        }
    }
    Ok(())
}
