//! The status line, the log of actions sent and the display settings.
//!
//! Invariant: the log keeps the last [`LOG_ENTRIES`] actions; an entry's number
//! ([`State::log_base`] + position) stays its own as older entries fall off, so a reply that
//! comes after its entry fell off changes nothing.

use super::State;

/// Entries kept in the action log.
pub const LOG_ENTRIES: usize = 200;

/// Display options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Colours on (off with NO_COLOR or `--no-color`).
    pub color: bool,
    /// Unicode symbols and gauges (off with `--ascii`).
    pub unicode: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            color: true,
            unicode: true,
        }
    }
}

/// The status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub text: String,
    pub error: bool,
    /// Local time it was set.
    pub at_ms: i64,
}

/// How long the status line shows a message (local ms).
pub const STATUS_SHOWN_MS: i64 = 15_000;

/// One action sent, with its answer once it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Database time (estimated) when it was sent.
    pub at_ms: i64,
    pub what: String,
    /// `None` while waiting; `Ok(summary)` or `Err(error)`.
    pub result: Option<Result<String, String>>,
}

impl State {
    pub fn set_status(&mut self, text: impl Into<String>, error: bool) {
        self.status = Some(Status {
            text: text.into(),
            error,
            at_ms: self.local_ms,
        });
    }

    /// Adds an action to the log; its log number.
    pub fn log_action(&mut self, what: String) -> u64 {
        if self.log.len() == LOG_ENTRIES {
            self.log.pop_front();
            self.log_base += 1;
        }
        self.log.push_back(LogEntry {
            at_ms: self.live.now_ms,
            what,
            result: None,
        });
        self.log_base + self.log.len() as u64 - 1
    }

    pub(super) fn log_result(&mut self, log: u64, result: Result<String, String>) {
        if let Some(i) = log.checked_sub(self.log_base)
            && let Some(entry) = self.log.get_mut(i as usize)
        {
            entry.result = Some(result);
        }
    }
}
