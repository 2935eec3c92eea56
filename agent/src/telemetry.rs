//! Logs: text or JSON lines to stderr, and optionally daily-rolling files (`--log-dir`) written
//! by a background thread. Keep the returned [`LogGuard`] alive until exit: dropping it flushes
//! the file writer.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Context;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

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
pub fn init(format: LogFormat, level: &str, dir: Option<&Path>) -> anyhow::Result<LogGuard> {
    let filter = || {
        std::env::var("RUST_LOG")
            .ok()
            .and_then(|v| EnvFilter::try_new(v).ok())
            .unwrap_or_else(|| EnvFilter::new(level))
    };
    let (file_writer, guard) = match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating log directory {}", dir.display()))?;
            let appender = tracing_appender::rolling::Builder::new()
                .rotation(tracing_appender::rolling::Rotation::DAILY)
                .filename_prefix("leasehold-agent")
                .filename_suffix("log")
                .max_log_files(14)
                .build(dir)
                .with_context(|| format!("opening log files in {}", dir.display()))?;
            let (writer, guard) = tracing_appender::non_blocking(appender);
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
        .context("installing the log subscriber")?;
    Ok(LogGuard { _guard: guard })
}
