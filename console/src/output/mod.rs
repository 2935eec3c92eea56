//! Where headless commands write: results on stdout (a table or JSON), errors and notes on
//! stderr, one line each.
//!
//! Invariants:
//! - JSON mode writes one compact JSON value per line (serde escapes every string); table
//!   mode writes lines made of inert text at most [`table::WIDTH`] columns wide when they are
//!   tables (free lines cut their untrusted parts with [`text::shown`]). A detail that is
//!   not a table (`tasks show`) is cut to the terminal's width, and not at all when stdout is
//!   a pipe or a file ([`Out::width`]).
//! - An error is one line on stderr, `leasehold: <what failed>: <why> (<code>)`, and nothing
//!   on stdout for it.
//! - A closed stdout (the reader of a pipe went away, `leasehold watch | head`) is not an
//!   error: writing stops quietly, [`Out::closed`] turns true, and the command's exit code
//!   stands. Any other write failure is [`Error::Local`].
//! - Every line is flushed as it is written, so a script reading `watch` sees each delta at
//!   once.

pub mod table;
pub mod text;

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;

use serde::Serialize;

use crate::error::{Error, Result};

/// Longest error or note line on stderr (a huge message from the agent stays one bounded line).
pub const MAX_NOTE_WIDTH: usize = 4000;

/// How results are printed (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Human-readable lines and tables fitting 80 columns.
    #[default]
    Table,
    /// JSON: one object per line.
    Json,
}

/// The command's stdout and stderr.
pub struct Out {
    format: Format,
    stdout: Box<dyn Write>,
    stderr: Box<dyn Write>,
    closed: bool,
    /// Columns of the terminal stdout is, `None` when it is a pipe or a file.
    width: Option<usize>,
}

impl Out {
    /// The process's stdout and stderr.
    pub fn stdio(format: Format) -> Self {
        use std::io::IsTerminal;
        let width = io::stdout().is_terminal().then(|| {
            crossterm::terminal::size()
                .map(|(columns, _)| usize::from(columns))
                .ok()
                .filter(|c| *c > 0)
                .unwrap_or(table::WIDTH)
        });
        Self {
            format,
            stdout: Box::new(io::stdout()),
            stderr: Box::new(io::stderr()),
            closed: false,
            width,
        }
    }

    /// In-memory stdout and stderr, for tests: read them back with [`Captured`].
    pub fn captured(format: Format) -> (Self, Captured) {
        let captured = Captured::default();
        let out = Self {
            format,
            stdout: Box::new(captured.stdout.clone()),
            stderr: Box::new(captured.stderr.clone()),
            closed: false,
            width: Some(table::WIDTH),
        };
        (out, captured)
    }

    /// The same, writing as to a pipe (`None`) or a terminal of `width` columns.
    pub fn with_width(mut self, width: Option<usize>) -> Self {
        self.width = width;
        self
    }

    /// Columns of the terminal stdout is; `None` when stdout is a pipe or a file, where
    /// free-form lines (`tasks show`) are not cut: a script gets every character.
    pub fn width(&self) -> Option<usize> {
        self.width
    }

    /// The output format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// True when JSON was asked for.
    pub fn json_mode(&self) -> bool {
        self.format == Format::Json
    }

    /// True once stdout's reader went away.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Writes one line on stdout.
    pub fn line(&mut self, line: &str) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let written = self
            .stdout
            .write_all(line.as_bytes())
            .and_then(|()| self.stdout.write_all(b"\n"))
            .and_then(|()| self.stdout.flush());
        match written {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(source) => Err(Error::Local {
                what: "writing to stdout".into(),
                source,
            }),
        }
    }

    /// Writes several lines on stdout.
    pub fn lines<I, S>(&mut self, lines: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for line in lines {
            self.line(line.as_ref())?;
        }
        Ok(())
    }

    /// Writes `value` as one line of compact JSON on stdout.
    pub fn json<T: Serialize>(&mut self, value: &T) -> Result<()> {
        let text = to_json(value)?;
        self.line(&text)
    }

    /// Writes an error on stderr: `leasehold: <error>`, made inert.
    pub fn error(&mut self, err: &Error) {
        self.note(&err.to_string());
    }

    /// Writes a note on stderr: `leasehold: <message>`, made inert and cut to
    /// [`MAX_NOTE_WIDTH`] columns. Nothing can be done when stderr itself fails, so that
    /// failure is ignored.
    pub fn note(&mut self, message: &str) {
        let line = format!("leasehold: {}\n", text::shown(message, MAX_NOTE_WIDTH));
        let _ = self
            .stderr
            .write_all(line.as_bytes())
            .and_then(|()| self.stderr.flush());
    }
}

/// `value` as compact JSON text.
pub fn to_json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Local {
        what: "encoding JSON output".into(),
        source: io::Error::other(e),
    })
}

/// What a captured [`Out`] wrote.
#[derive(Clone, Default)]
pub struct Captured {
    stdout: SharedBuf,
    stderr: SharedBuf,
}

impl Captured {
    /// Everything written on stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    /// Everything written on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }
}

#[derive(Clone, Default)]
struct SharedBuf(Rc<RefCell<Vec<u8>>>);

impl SharedBuf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.borrow()).into_owned()
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_stops_output_quietly() {
        let mut out = Out {
            format: Format::Table,
            stdout: Box::new(ClosedPipe),
            stderr: Box::new(io::sink()),
            closed: false,
            width: None,
        };
        assert!(out.line("one").is_ok());
        assert!(out.closed());
        assert!(out.line("two").is_ok());
    }

    #[test]
    fn errors_go_to_stderr_as_one_inert_line() {
        let (mut out, captured) = Out::captured(Format::Json);
        out.error(&Error::usage("bad\nthing\u{1b}[2J"));
        assert_eq!(captured.stderr(), "leasehold: bad\\nthing\\u{1b}[2J\n");
        assert_eq!(captured.stdout(), "");
    }

    #[test]
    fn json_is_one_line() {
        let (mut out, captured) = Out::captured(Format::Json);
        out.json(&serde_json::json!({"a": "x\ny"})).ok();
        assert_eq!(captured.stdout(), "{\"a\":\"x\\ny\"}\n");
    }
}
