//! Entering and leaving the terminal's console mode, and the log file.
//!
//! [`Guard`] turns raw mode and the alternate screen on and, when dropped — on quit, on an
//! error, or while a panic unwinds — turns them off and shows the cursor again. The panic hook
//! restores the terminal before the panic message prints, so the message is readable.

use std::io::Write;
use std::path::PathBuf;

use crossterm::cursor::Show;
use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

use crate::error::{Error, Result};

/// Restores the terminal when dropped.
pub struct Guard(());

impl Guard {
    pub fn enter() -> Result<Self> {
        let local = |what: &str| {
            let what = what.to_string();
            move |source| Error::Local { what, source }
        };
        install_panic_hook();
        enable_raw_mode().map_err(local("switching the terminal to raw mode"))?;
        let guard = Guard(());
        execute!(
            std::io::stdout(),
            EnterAlternateScreen,
            EnableBracketedPaste
        )
        .map_err(local("switching to the alternate screen"))?;
        Ok(guard)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves console mode; safe to call more than once.
pub fn restore() {
    let mut out = std::io::stdout();
    let _ = execute!(out, DisableBracketedPaste, LeaveAlternateScreen, Show);
    let _ = disable_raw_mode();
    let _ = out.flush();
}

fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
}

/// Sends the console's logs to `path` (default: `$XDG_STATE_HOME/leasehold/console.log`, else
/// `~/.local/state/leasehold/console.log`, else the temporary directory); the path used.
pub fn log_to_file(path: Option<PathBuf>) -> Result<PathBuf> {
    let path = path.unwrap_or_else(default_log_path);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Logs name tasks, payload hashes and errors: a directory made here is the user's own.
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| Error::Local {
                what: format!("creating the log directory {}", dir.display()),
                source,
            })?;
    }
    // A new log file is 0600; an existing one keeps its mode.
    let mut options = std::fs::OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::mode(options.create(true).append(true), 0o600);
    let file = options.open(&path).map_err(|source| Error::Local {
        what: format!("opening the log file {}", path.display()),
        source,
    })?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEASEHOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
    Ok(path)
}

fn default_log_path() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local").join("state"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("leasehold").join("console.log")
}
