//! Logs: text or JSON lines to stderr, and optionally daily-rolling files (`--log-dir`) written
//! by a background thread. Keep the returned [`LogGuard`] alive until exit: dropping it flushes
//! the file writer.
//!
//! Log files are private: logs name tasks, agents, errors and peers. A log directory the agent
//! creates is 0700 (every missing component); an existing one keeps its mode and is warned
//! about when group or others can read it. `tracing-appender` opens its files with the
//! process's default mode (0644 less the umask) and has no option for another, so the agent
//! creates each day's file itself, 0600, before the appender opens it: today's and tomorrow's
//! at start, and the next day's whenever a new UTC day begins (the appender rolls over at UTC
//! midnight and then opens, not creates, that file). An existing file keeps its mode.

use std::io::IsTerminal;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{AgentError, Result};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

/// The mode of a log directory the agent creates.
pub const LOG_DIR_MODE: u32 = 0o700;
/// The mode of a log file the agent creates.
pub const LOG_FILE_MODE: u32 = 0o600;
/// Log file names: `leasehold-agent.YYYY-MM-DD.log` (UTC dates, as the appender names them).
const FILE_PREFIX: &str = "leasehold-agent";
const FILE_SUFFIX: &str = "log";
/// Daily files kept.
const MAX_FILES: usize = 14;
const SECONDS_PER_DAY: i64 = 86_400;

/// Flushes file logs when dropped.
#[must_use = "file logs are flushed when this guard is dropped"]
pub struct LogGuard {
    _guard: Option<tracing_appender::non_blocking::WorkerGuard>,
}

impl std::fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogGuard")
    }
}

/// Installs the global subscriber. `RUST_LOG`, when set, overrides `level`.
pub fn init(format: LogFormat, level: &str, dir: Option<&Path>) -> Result<LogGuard> {
    let filter = || {
        std::env::var("RUST_LOG")
            .ok()
            .and_then(|v| EnvFilter::try_new(v).ok())
            .unwrap_or_else(|| EnvFilter::new(level))
    };
    let mut exposed_dir = None;
    let (file_writer, guard) = match dir {
        Some(dir) => {
            exposed_dir = prepare_dir(dir)?;
            let files = PrivateDays::new(dir)?;
            let appender = tracing_appender::rolling::Builder::new()
                .rotation(tracing_appender::rolling::Rotation::DAILY)
                .filename_prefix(FILE_PREFIX)
                .filename_suffix(FILE_SUFFIX)
                .max_log_files(MAX_FILES)
                .build(dir)
                .map_err(|e| {
                    AgentError::logs(format!("opening log files in {}", dir.display()), e)
                })?;
            let (writer, guard) = tracing_appender::non_blocking(PrivateFiles { appender, files });
            (Some(writer), Some(guard))
        }
        None => (None, None),
    };
    let registry = tracing_subscriber::registry().with(filter());
    let stderr_text = (format == LogFormat::Text).then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
    });
    let stderr_json = (format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_writer(std::io::stderr)
    });
    // Files always get JSON lines: they are read by machines.
    let file = file_writer.map(|w| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_ansi(false)
            .with_writer(w)
    });
    registry
        .with(stderr_text)
        .with(stderr_json)
        .with(file)
        .try_init()
        .map_err(|e| AgentError::logs("installing the log subscriber", e))?;
    if let (Some(dir), Some(mode)) = (dir, exposed_dir) {
        tracing::warn!(
            path = %dir.display(),
            mode = format_args!("{mode:04o}"),
            "the log directory is open to other users (group or others); logs name tasks, \
             agents and errors: chmod 700 {}",
            dir.display()
        );
    }
    Ok(LogGuard { _guard: guard })
}

/// Creates `dir` (0700, with its missing parents) or checks an existing one; the mode of an
/// existing directory that group or others can use, to warn about once logging runs.
fn prepare_dir(dir: &Path) -> Result<Option<u32>> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {
            let mode = meta.permissions().mode() & 0o777;
            Ok((mode & 0o077 != 0).then_some(mode))
        }
        Ok(_) => Err(AgentError::Logs {
            doing: format!("the log directory {} is not a directory", dir.display()),
            source: None,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(LOG_DIR_MODE)
                .create(dir)
                .map_err(|e| {
                    AgentError::logs(format!("creating log directory {}", dir.display()), e)
                })?;
            // The umask may have taken bits from the mode; it can only have taken, never
            // added, but set the leaf exactly.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(LOG_DIR_MODE)).map_err(
                |e| AgentError::logs(format!("setting the mode of {}", dir.display()), e),
            )?;
            Ok(None)
        }
        Err(e) => Err(AgentError::logs(
            format!("looking at log directory {}", dir.display()),
            e,
        )),
    }
}

/// Creates each day's log file, 0600, before the appender opens it.
#[derive(Debug)]
struct PrivateDays {
    dir: PathBuf,
    /// The UTC day (days since the epoch) whose next day's file exists.
    prepared: i64,
}

impl PrivateDays {
    /// Creates today's and tomorrow's files.
    fn new(dir: &Path) -> Result<Self> {
        let today = utc_day();
        for day in [today, today + 1] {
            create_private(&dir.join(file_name(day)))?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            prepared: today,
        })
    }

    /// On the first write of a new UTC day, creates the next day's file.
    fn tick(&mut self) {
        let today = utc_day();
        if today == self.prepared {
            return;
        }
        self.prepared = today;
        for day in [today, today + 1] {
            // Best effort: a failure here must not stop logging; the appender still opens
            // (or creates) the file.
            let _ = create_private(&self.dir.join(file_name(day)));
        }
    }
}

/// Creates `path` empty with [`LOG_FILE_MODE`] unless it exists (an existing file keeps its
/// mode).
fn create_private(path: &Path) -> Result<()> {
    let created = std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(LOG_FILE_MODE)
        .open(path);
    match created {
        Ok(file) => file
            .set_permissions(std::fs::Permissions::from_mode(LOG_FILE_MODE))
            .map_err(|e| AgentError::logs(format!("setting the mode of {}", path.display()), e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(AgentError::logs(
            format!("creating log file {}", path.display()),
            e,
        )),
    }
}

/// Days since the Unix epoch, UTC (the appender's daily rotation is by UTC date).
fn utc_day() -> i64 {
    chrono::Utc::now().timestamp().div_euclid(SECONDS_PER_DAY)
}

/// The appender's file name for a UTC day: `leasehold-agent.YYYY-MM-DD.log`.
fn file_name(day: i64) -> String {
    let date = chrono::DateTime::from_timestamp(day * SECONDS_PER_DAY, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    format!("{FILE_PREFIX}.{date}.{FILE_SUFFIX}")
}

/// The rolling appender behind [`PrivateDays`]: each write first makes sure the day's file
/// was created private.
struct PrivateFiles {
    appender: tracing_appender::rolling::RollingFileAppender,
    files: PrivateDays,
}

impl std::io::Write for PrivateFiles {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.files.tick();
        self.appender.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.appender.flush()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("leasehold-logs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn file_names_are_the_appenders_daily_names() {
        assert_eq!(file_name(0), "leasehold-agent.1970-01-01.log");
        assert_eq!(file_name(20_000), "leasehold-agent.2024-10-04.log");
    }

    #[test]
    fn a_new_directory_is_0700_and_the_appender_writes_to_0600_files() {
        use std::io::Write;
        let root = scratch("new");
        let dir = root.join("a/b");
        assert_eq!(prepare_dir(&dir).unwrap(), None);
        assert_eq!(mode(&dir), LOG_DIR_MODE);
        assert_eq!(mode(&root.join("a")), LOG_DIR_MODE);
        let mut files = PrivateFiles {
            files: PrivateDays::new(&dir).unwrap(),
            appender: tracing_appender::rolling::Builder::new()
                .rotation(tracing_appender::rolling::Rotation::DAILY)
                .filename_prefix(FILE_PREFIX)
                .filename_suffix(FILE_SUFFIX)
                .build(&dir)
                .unwrap(),
        };
        files.write_all(b"line\n").unwrap();
        files.flush().unwrap();
        let today = dir.join(file_name(utc_day()));
        assert_eq!(std::fs::read(&today).unwrap(), b"line\n");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), LOG_FILE_MODE, "{}", path.display());
        }
        // A new day: the next day's file is made before the appender would roll to it.
        files.files.prepared -= 1;
        std::fs::remove_file(dir.join(file_name(utc_day() + 1))).unwrap();
        files.write_all(b"more\n").unwrap();
        assert_eq!(mode(&dir.join(file_name(utc_day() + 1))), LOG_FILE_MODE);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_existing_directory_and_file_keep_their_modes_and_an_open_directory_is_reported() {
        let dir = scratch("existing");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        assert_eq!(prepare_dir(&dir).unwrap(), Some(0o750));
        assert_eq!(mode(&dir), 0o750);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(prepare_dir(&dir).unwrap(), None);
        let file = dir.join(file_name(utc_day()));
        std::fs::write(&file, b"").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        PrivateDays::new(&dir).unwrap();
        assert_eq!(mode(&file), 0o640);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
