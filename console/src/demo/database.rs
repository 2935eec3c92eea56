//! The demo's database: a fresh SQLite file in the working directory, or the one
//! `--database-url` names.
//!
//! ```text
//!   no --database-url:  ./leasehold-demo.sqlite
//!       missing ───────────────────────────────▶ create, stamp, migrate
//!       empty, or a demo database (stamped) ────▶ delete it (and its -wal, -shm, -journal),
//!                                                 then as missing
//!       anything else ──────────────────────────▶ refuse (exit 2), nothing touched
//!   --database-url sqlite://… | postgres://…  ──▶ migrate, keep everything in it
//! ```
//!
//! The stamp is SQLite's own `application_id` header field set to [`APPLICATION_ID`] before
//! the migrations run; it is read back from the file's first 100 bytes without opening it as
//! a database, so a file that is not ours is never opened, locked or changed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leasehold_shared::Store;
use leasehold_shared::store::postgres::{PgStore, PgStoreOptions};
use leasehold_shared::store::sqlite::{self, SqliteStore, SqliteStoreOptions};
use sqlx::Connection;

use crate::error::{Error, Result};

/// The file the demo creates in the working directory.
pub const DEFAULT_FILE: &str = "leasehold-demo.sqlite";
/// The demo's log file, next to [`DEFAULT_FILE`].
pub const DEFAULT_LOG: &str = "leasehold-demo.log";
/// SQLite `application_id` of a demo database: "LHDM".
pub const APPLICATION_ID: u32 = 0x4C48_444D;
/// Connections of the demo's own store (the feeder and the final count).
const POOL_SIZE: u32 = 2;

/// Marks a new file as a demo database (one statement).
const STAMP_SQL: &str = include_str!("sql/stamp_demo_database.sql");
/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// Files SQLite keeps next to a database.
const SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Which database the demo runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// What the agents connect to.
    pub url: String,
    /// The SQLite file (absolute), when it is one.
    pub file: Option<PathBuf>,
    /// True for the demo's own fresh file (replaced at start); false for `--database-url`.
    pub fresh: bool,
}

impl Target {
    /// The database named by `--database-url`, or the fresh file in `cwd`.
    pub fn resolve(database_url: Option<&str>, cwd: &Path) -> Result<Target> {
        let Some(url) = database_url.map(str::trim) else {
            let file = cwd.join(DEFAULT_FILE);
            return Ok(Target {
                url: sqlite_url(&file)?,
                file: Some(file),
                fresh: true,
            });
        };
        if sqlite::is_sqlite_url(url) {
            // The store checks the rest (an empty path, `:memory:`).
            sqlite::connect_options(url).map_err(|e| usage_url(&e))?;
            let path = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:");
            let path = Path::new(path.split('?').next().unwrap_or_default());
            return Ok(Target {
                url: url.to_owned(),
                file: Some(cwd.join(path)),
                fresh: false,
            });
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Target {
                url: url.to_owned(),
                file: None,
                fresh: false,
            });
        }
        Err(Error::usage(format!(
            "--database-url {}: expected sqlite://PATH or postgres://…",
            crate::output::text::shown(&redacted(url), 80)
        )))
    }

    /// Where the demo logs: next to its SQLite file, else `None` (the console's default).
    pub fn log_file(&self) -> Option<PathBuf> {
        let file = self.file.as_ref()?;
        if self.fresh {
            return Some(file.with_file_name(DEFAULT_LOG));
        }
        let stem = file.file_stem()?.to_string_lossy().into_owned();
        Some(file.with_file_name(format!("{stem}.log")))
    }

    /// The URL without a password, for printing.
    pub fn shown_url(&self) -> String {
        redacted(&self.url)
    }

    /// Makes the fresh file's place free: refuses a file that is not a demo database and
    /// deletes one that is. Nothing to do for `--database-url`.
    pub fn clear(&self) -> Result<()> {
        let (true, Some(file)) = (self.fresh, &self.file) else {
            return Ok(());
        };
        match inspect(file)? {
            Existing::Missing => Ok(()),
            Existing::Replaceable => remove_database(file),
            Existing::NotOurs(why) => Err(Error::usage(format!(
                "{} exists and {why}, so the demo leaves it alone; move it away, or run the \
                 demo elsewhere or with --database-url",
                file.display()
            ))),
        }
    }
}

/// What is at the fresh file's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    Missing,
    /// Empty, or a database an earlier demo made.
    Replaceable,
    /// Something else, and why it is not ours.
    NotOurs(String),
}

/// Looks at `path` without opening it as a database.
pub fn inspect(path: &Path) -> Result<Existing> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Missing),
        Err(source) => {
            return Err(Error::Local {
                what: format!("looking at {}", path.display()),
                source,
            });
        }
    };
    if !meta.is_file() {
        return Ok(Existing::NotOurs("is not a regular file".into()));
    }
    if meta.len() == 0 {
        return Ok(Existing::Replaceable);
    }
    let mut header = [0u8; 100];
    let read = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .map(|()| true)
        .or_else(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Ok(false)
            } else {
                Err(e)
            }
        })
        .map_err(|source| Error::Local {
            what: format!("reading {}", path.display()),
            source,
        })?;
    if !read || &header[..16] != SQLITE_MAGIC {
        return Ok(Existing::NotOurs("is not a SQLite database".into()));
    }
    let id = u32::from_be_bytes([header[68], header[69], header[70], header[71]]);
    if id != APPLICATION_ID {
        return Ok(Existing::NotOurs(
            "is a SQLite database that `leasehold demo` did not make".into(),
        ));
    }
    Ok(Existing::Replaceable)
}

/// Deletes a database file and the files SQLite keeps next to it.
fn remove_database(file: &Path) -> Result<()> {
    let mut paths = vec![file.to_path_buf()];
    for suffix in SIDE_FILES {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        paths.push(PathBuf::from(name));
    }
    for path in paths {
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(path = %path.display(), "removed the previous demo database"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Local {
                    what: format!("removing the previous demo database {}", path.display()),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The demo's own connection to its database.
pub struct Opened {
    pub store: Arc<dyn Store>,
    closer: Closer,
}

enum Closer {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Opened {
    /// Closes the pool (SQLite then checkpoints its WAL into the file).
    pub async fn close(self) {
        match self.closer {
            Closer::Sqlite(s) => s.close().await,
            Closer::Postgres(s) => s.close().await,
        }
    }
}

/// Opens the database, creating and stamping the fresh file first, and migrates it.
pub async fn open(target: &Target) -> Result<Opened> {
    let opened = if sqlite::is_sqlite_url(&target.url) {
        if target.fresh {
            stamp(&target.url).await?;
        }
        let store = SqliteStore::connect(
            &target.url,
            SqliteStoreOptions {
                max_connections: POOL_SIZE,
                ..SqliteStoreOptions::default()
            },
        )
        .await
        .map_err(|e| store_error("opening the demo database", target, &e))?;
        Opened {
            store: Arc::new(store.clone()),
            closer: Closer::Sqlite(store),
        }
    } else {
        let store = PgStore::connect(
            &target.url,
            PgStoreOptions {
                max_connections: POOL_SIZE,
                application_name: "leasehold demo".into(),
                ..PgStoreOptions::default()
            },
        )
        .await
        .map_err(|e| store_error("opening the demo database", target, &e))?;
        Opened {
            store: Arc::new(store.clone()),
            closer: Closer::Postgres(store),
        }
    };
    let migrated = match &opened.closer {
        Closer::Sqlite(s) => s.migrate().await,
        Closer::Postgres(s) => s.migrate().await,
    };
    if let Err(e) = migrated {
        opened.close().await;
        return Err(store_error("applying the migrations", target, &e));
    }
    Ok(opened)
}

/// Creates the fresh file (mode 0600: only the demo's user can read its payloads) and sets
/// its `application_id` before anything else is in it.
async fn stamp(url: &str) -> Result<()> {
    sqlite::prepare_database_file(url).map_err(|e| Error::Database {
        what: "creating the demo database".into(),
        cause: crate::error::cause_chain(&e),
    })?;
    let options = sqlite::connect_options(url)
        .map_err(|e| usage_url(&e))?
        .create_if_missing(true);
    let failed = |e: sqlx::Error| Error::Database {
        what: "creating the demo database".into(),
        cause: e.to_string(),
    };
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .map_err(failed)?;
    sqlx::query(STAMP_SQL)
        .execute(&mut conn)
        .await
        .map_err(failed)?;
    conn.close().await.map_err(failed)
}

/// A store error met while doing `what`: bad input is a usage error (exit 2), the rest means
/// the database cannot be used (exit 3).
pub fn store_error(what: &str, target: &Target, e: &leasehold_shared::StoreError) -> Error {
    use leasehold_shared::StoreError;
    let what = format!("{what} {}", target.shown_url());
    match e {
        StoreError::Invalid(_) | StoreError::UnsupportedUrl(_) => {
            Error::usage(format!("{what}: {e}"))
        }
        _ => Error::Database {
            what,
            cause: crate::error::cause_chain(e),
        },
    }
}

fn usage_url(e: &leasehold_shared::StoreError) -> Error {
    Error::usage(format!("--database-url: {e}"))
}

/// `sqlite://` and an absolute path.
fn sqlite_url(file: &Path) -> Result<String> {
    let text = file.to_str().ok_or_else(|| {
        Error::usage(format!(
            "the working directory {} is not UTF-8; give --database-url",
            file.display()
        ))
    })?;
    if text.contains(['?', '#']) {
        return Err(Error::usage(format!(
            "the path {text} has a '?' or '#', which a SQLite URL cannot carry; give \
             --database-url"
        )));
    }
    Ok(format!("sqlite://{text}"))
}

/// `url` with the password of its user info replaced by `***`.
pub fn redacted(url: &str) -> String {
    leasehold_shared::store::redact_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("leasehold-demo-db-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_default_is_a_fresh_file_in_the_working_directory() {
        let t = Target::resolve(None, Path::new("/work/x")).unwrap();
        assert_eq!(t.url, "sqlite:///work/x/leasehold-demo.sqlite");
        assert_eq!(
            t.file.as_deref(),
            Some(Path::new("/work/x/leasehold-demo.sqlite"))
        );
        assert!(t.fresh);
        assert_eq!(
            t.log_file().unwrap(),
            Path::new("/work/x/leasehold-demo.log")
        );
    }

    #[test]
    fn a_given_url_is_kept() {
        let t = Target::resolve(Some("sqlite://data/q.db"), Path::new("/w")).unwrap();
        assert_eq!(t.url, "sqlite://data/q.db");
        assert_eq!(t.file.as_deref(), Some(Path::new("/w/data/q.db")));
        assert!(!t.fresh);
        assert_eq!(t.log_file().unwrap(), Path::new("/w/data/q.log"));
        let t = Target::resolve(Some("sqlite:///abs/q.db"), Path::new("/w")).unwrap();
        assert_eq!(t.file.as_deref(), Some(Path::new("/abs/q.db")));
        let t = Target::resolve(Some("postgres://u:secret@h:5432/db"), Path::new("/w")).unwrap();
        assert_eq!(t.file, None);
        assert_eq!(t.log_file(), None);
        assert_eq!(t.shown_url(), "postgres://u:***@h:5432/db");
    }

    #[test]
    fn other_urls_are_usage_errors() {
        for url in [
            "mysql://h/db",
            "sqlite://",
            "sqlite::memory:",
            "leasehold.db",
        ] {
            let e = Target::resolve(Some(url), Path::new("/w")).unwrap_err();
            assert!(matches!(e, Error::Usage(_)), "{url}: {e}");
        }
        let e = Target::resolve(Some("mysql://u:pw@h/db"), Path::new("/w")).unwrap_err();
        assert!(!e.to_string().contains("pw"), "{e}");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redacted("postgres://u:p@h/db"), "postgres://u:***@h/db");
        assert_eq!(redacted("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redacted("postgres://h/db?x=a@b"), "postgres://h/db?x=a@b");
        assert_eq!(redacted("sqlite:///a/b"), "sqlite:///a/b");
    }

    #[test]
    fn only_empty_and_stamped_files_are_replaceable() {
        let dir = scratch("inspect");
        let path = dir.join(DEFAULT_FILE);
        assert_eq!(inspect(&path).unwrap(), Existing::Missing);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(inspect(&path).unwrap(), Existing::Replaceable);
        std::fs::write(&path, b"my notes").unwrap();
        assert!(matches!(inspect(&path).unwrap(), Existing::NotOurs(_)));
        let mut header = vec![0u8; 4096];
        header[..16].copy_from_slice(SQLITE_MAGIC);
        std::fs::write(&path, &header).unwrap();
        assert!(
            matches!(inspect(&path).unwrap(), Existing::NotOurs(w) if w.contains("did not make"))
        );
        header[68..72].copy_from_slice(&APPLICATION_ID.to_be_bytes());
        std::fs::write(&path, &header).unwrap();
        assert_eq!(inspect(&path).unwrap(), Existing::Replaceable);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(inspect(&path).unwrap(), Existing::NotOurs(_)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn clearing_removes_a_demo_database_and_refuses_anything_else() {
        let dir = scratch("clear");
        let target = Target::resolve(None, &dir).unwrap();
        let file = target.file.clone().unwrap();
        let mut header = vec![0u8; 4096];
        header[..16].copy_from_slice(SQLITE_MAGIC);
        header[68..72].copy_from_slice(&APPLICATION_ID.to_be_bytes());
        std::fs::write(&file, &header).unwrap();
        let wal = dir.join(format!("{DEFAULT_FILE}-wal"));
        std::fs::write(&wal, b"wal").unwrap();
        target.clear().unwrap();
        assert!(!file.exists() && !wal.exists());

        std::fs::write(&file, b"precious").unwrap();
        let e = target.clear().unwrap_err();
        assert!(matches!(e, Error::Usage(_)), "{e}");
        assert!(e.to_string().contains("leaves it alone"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"precious");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_fresh_database_is_stamped_and_migrated() {
        let dir = scratch("open");
        let target = Target::resolve(None, &dir).unwrap();
        target.clear().unwrap();
        let opened = open(&target).await.unwrap();
        assert!(opened.store.policy_list().await.is_ok());
        opened.close().await;
        let file = target.file.clone().unwrap();
        assert_eq!(inspect(&file).unwrap(), Existing::Replaceable);
        for path in [file.clone(), dir.join(format!("{DEFAULT_FILE}-wal"))] {
            if path.exists() {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", path.display());
            }
        }
        // And the next demo replaces it.
        target.clear().unwrap();
        assert!(!file.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
