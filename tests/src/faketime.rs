//! A database clock the test can step: libfaketime (Debian `libfaketime`, installed with the
//! `faketime` package) preloaded into a private PostgreSQL server ([`crate::PgCluster`]),
//! reading its offset from a file the test rewrites at run time (TESTING T21).
//!
//! ```text
//!   FakeClock::new()  ──▶ rc file "+0"          PgCluster::start_with_env(&[], clock.env())
//!   clock.set_offset(600)  ──▶ "+600": every backend's now() is 10 minutes ahead at once
//! ```
//!
//! `FAKETIME_NO_CACHE=1` makes libfaketime read the file on every time call, so every backend
//! sees a change at once; `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves the server's monotonic clock
//! (its timeouts and latches) alone: only wall-clock time jumps, as in an NTP step. The file is
//! replaced by a rename, so no reader sees it half-written. The agents' own clocks are not
//! touched.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::scratch::scratch_dir;

/// Where Debian and a source install put the preload library.
const LIBRARY_CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The offset file of a faked clock, and the environment that makes a process follow it.
/// The directory is deleted on drop.
#[derive(Debug)]
pub struct FakeClock {
    library: PathBuf,
    dir: PathBuf,
    file: PathBuf,
}

impl FakeClock {
    /// Finds libfaketime and writes an offset of zero. Fails, saying what to install, when the
    /// library is missing.
    pub fn new() -> anyhow::Result<FakeClock> {
        let library = LIBRARY_CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .with_context(|| {
                format!(
                    "libfaketime not found (looked at {LIBRARY_CANDIDATES:?}): \
                     install it with `apt-get install faketime`"
                )
            })?;
        let dir = scratch_dir("leasehold-faketime")?;
        // The server runs as `postgres` when the tests run as root: let it read the file.
        set_mode(&dir, 0o755)?;
        let clock = FakeClock {
            library,
            file: dir.join("offset.rc"),
            dir,
        };
        clock.set_offset(0)?;
        Ok(clock)
    }

    /// The environment of a process whose wall clock follows this offset.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", self.library.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Sets the clock to real time plus `seconds` (negative: behind), at once for every process
    /// following it.
    pub fn set_offset(&self, seconds: i64) -> anyhow::Result<()> {
        let next = self.dir.join("offset.rc.next");
        std::fs::write(&next, format!("{seconds:+}\n"))
            .with_context(|| format!("writing {}", next.display()))?;
        set_mode(&next, 0o644)?;
        std::fs::rename(&next, &self.file)
            .with_context(|| format!("replacing {}", self.file.display()))?;
        let written = std::fs::read_to_string(&self.file)?;
        if written.trim() != format!("{seconds:+}") {
            bail!("{} holds {written:?}", self.file.display());
        }
        Ok(())
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}
