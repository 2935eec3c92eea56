//! Scratch directories for tests: one fresh, empty directory per call, named after the test
//! process and a per-process counter, so tests running in parallel (threads of one process, or
//! several test binaries) never share one.
//!
//! A directory left by an earlier process that had the same pid is removed first. Directories
//! are not removed afterwards: a failed test's logs and files stay to be looked at.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new, empty `<temp>/<prefix>-<pid>-<n>` directory, as an absolute path without symlinks.
pub fn scratch_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("removing stale {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    dir.canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))
}

/// The socket directory (`LEASEHOLD_RUNTIME_DIR`) of the agents and CLIs this test process
/// starts through the harness: one private (0700) directory per process, so agents killed with
/// SIGKILL leave their stale sockets there rather than in `/run/leasehold`.
pub fn runtime_dir() -> anyhow::Result<PathBuf> {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir.clone());
    }
    let dir = std::env::temp_dir().join(format!("leasehold-run-{}", std::process::id()));
    leasehold_shared::local::ensure_private_dir(&dir)
        .with_context(|| format!("making the test runtime directory {}", dir.display()))?;
    Ok(DIR.get_or_init(|| dir).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_gets_a_new_empty_directory() {
        let a = scratch_dir("leasehold-scratch-test").unwrap();
        std::fs::write(a.join("left.txt"), "x").unwrap();
        let b = scratch_dir("leasehold-scratch-test").unwrap();
        assert_ne!(a, b);
        assert!(a.is_absolute() && b.is_absolute());
        assert_eq!(std::fs::read_dir(&b).unwrap().count(), 0);
        assert!(a.join("left.txt").exists(), "an earlier directory is kept");
        std::fs::remove_dir_all(a).unwrap();
        std::fs::remove_dir_all(b).unwrap();
    }
}
