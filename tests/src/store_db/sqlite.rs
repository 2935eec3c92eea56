//! The SQLite side of [`super::StoreDb`]: a fresh database file per test, in a directory of
//! its own under [`std::env::temp_dir`] (the WAL and shared-memory files sit beside it), so
//! tests never see each other. The directory goes when the fixture is removed or dropped;
//! directories left by test processes that were killed are removed by the next process.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use leasehold_shared::store::sqlite::{MIGRATOR, SqliteStore, SqliteStoreOptions};
use leasehold_shared::{InputLimits, Store};
use sqlx::SqlitePool;

/// Prefix of the per-test directories: `leasehold-sqlite-<pid>-<n>-<random>`.
const DIR_PREFIX: &str = "leasehold-sqlite-";
/// The database file inside a test's directory.
const FILE_NAME: &str = "leasehold.db";

static COUNTER: AtomicU64 = AtomicU64::new(0);
static ORPHANS_REMOVED: std::sync::Once = std::sync::Once::new();

/// One test's SQLite database.
#[derive(Debug)]
pub(super) struct SqliteDb {
    dir: PathBuf,
    url: String,
    base: SqliteStore,
}

impl SqliteDb {
    /// Creates the file (migrated when `migrate`) and connects a store of
    /// [`super::POOL_SIZE`] connections to it.
    pub(super) async fn new(migrate: bool) -> anyhow::Result<SqliteDb> {
        ORPHANS_REMOVED.call_once(remove_orphans);
        let dir = std::env::temp_dir().join(format!(
            "{DIR_PREFIX}{}-{}-{:08x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            RandomState::new().hash_one(std::time::SystemTime::now()) & 0xffff_ffff
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let url = format!("sqlite://{}", dir.join(FILE_NAME).display());
        let base = match connect(&url, super::POOL_SIZE, InputLimits::default()).await {
            Ok(store) => store,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        let db = SqliteDb { dir, url, base };
        if migrate {
            db.base
                .migrate()
                .await
                .with_context(|| format!("migrating {}", db.url))?;
        }
        Ok(db)
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }

    pub(super) fn pool(&self) -> &SqlitePool {
        self.base.pool()
    }

    /// The fixture's own store (default limits, shared pool), or a new store of its own pool
    /// of `max` connections enforcing `limits`.
    pub(super) async fn store(
        &self,
        max: u32,
        limits: InputLimits,
    ) -> anyhow::Result<Arc<dyn Store>> {
        if max == super::POOL_SIZE && limits == InputLimits::default() {
            return Ok(Arc::new(self.base.clone()));
        }
        Ok(Arc::new(connect(&self.url, max, limits).await?))
    }

    /// Closes the fixture's pool and deletes the directory.
    pub(super) async fn remove(self) -> anyhow::Result<()> {
        self.base.close().await;
        match tokio::fs::remove_dir_all(&self.dir).await {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                Err(error).with_context(|| format!("removing {}", self.dir.display()))
            }
            _ => Ok(()),
        }
    }
}

impl Drop for SqliteDb {
    fn drop(&mut self) {
        // After `remove` this finds nothing; after a panic it is the only cleanup.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn connect(url: &str, max: u32, limits: InputLimits) -> anyhow::Result<SqliteStore> {
    SqliteStore::connect(
        url,
        SqliteStoreOptions {
            max_connections: max,
            limits,
            ..Default::default()
        },
    )
    .await
    .with_context(|| format!("connecting to {url}"))
}

/// How many migrations the SQLite migrator embeds.
pub(super) fn migrations_embedded() -> usize {
    MIGRATOR.iter().count()
}

/// Removes `leasehold-sqlite-<pid>-…` directories whose process is gone (Linux only: needs
/// `/proc`). Directories of live processes are never touched.
fn remove_orphans() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
