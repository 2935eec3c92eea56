//! Locating the project's binaries for end-to-end tests. Integration tests in this crate cannot
//! use `CARGO_BIN_EXE_*` of other packages, so the first call builds them (`cargo build --bins`
//! with the profile this test binary was built with; a no-op when fresh) and every call returns
//! the path next to this test binary's target directory.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};
use tokio::sync::OnceCell;

static BUILT: OnceCell<PathBuf> = OnceCell::const_new();

/// Path of the project binary `name` (`leasehold-agent`, `leasehold` or the test agent
/// `leasehold-test-agent`), built if needed.
pub async fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let dir = BUILT.get_or_try_init(build).await?;
    let path = dir.join(name);
    if !path.exists() {
        bail!("binary {} was not built", path.display());
    }
    Ok(path)
}

async fn build() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test binary")?;
    // target/<profile>/deps/<test> → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .context("test binary is not inside target/<profile>/deps")?
        .to_path_buf();
    let profile = profile_dir
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug")
        .to_string();
    let target_dir = profile_dir
        .parent()
        .context("no target directory")?
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let status = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "--quiet",
            "--bins",
            "-p",
            "leasehold-agent",
            "-p",
            "leasehold-console",
            "-p",
            "leasehold-tests",
        ])
        .arg("--manifest-path")
        .arg(manifest)
        .env("CARGO_TARGET_DIR", &target_dir);
        // What cargo set for this test (its package, its manifest) must not reach the inner
        // build: build scripts that watch such variables (ring's) would re-run, and the outer
        // and inner builds would rebuild each other's dependencies on every run.
        for (key, _) in std::env::vars_os() {
            let Some(key) = key.to_str() else { continue };
            let set_by_cargo_for_the_test = [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
            ]
            .iter()
            .any(|p| key.starts_with(p))
                || matches!(
                    key,
                    "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR"
                );
            if set_by_cargo_for_the_test {
                cmd.env_remove(key);
            }
        }
        if profile == "release" {
            cmd.arg("--release");
        } else if profile != "debug" {
            cmd.args(["--profile", &profile]);
        }
        cmd.status()
    })
    .await
    .context("joining the build")?
    .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of the binaries failed: {status}");
    }
    Ok(profile_dir)
}
