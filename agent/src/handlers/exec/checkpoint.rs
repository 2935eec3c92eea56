//! Checkpoint lines of an `exec` program: `LEASEHOLD_CHECKPOINT <json>` on stdout.
//!
//! The stdout reader hands every chunk to [`Lines`], which keeps only a line that starts with
//! the prefix (at most the prefix and 64 KiB of JSON: memory stays bounded whatever the program
//! prints) and publishes each complete one. A [`Saver`] task saves them in order through
//! [`TaskContext::save_checkpoint`] (fenced); a line published while the previous one is being
//! saved replaces any line still waiting, so the newest wins. [`Saver::finish`] returns once
//! the reader is done and the last line is saved.

use leasehold_shared::store::MAX_CHECKPOINT_BYTES;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use super::CHECKPOINT_VAR;
use crate::handler::TaskContext;

/// Longest line kept: the prefix, the JSON and a `\r`.
const MAX_LINE: usize = CHECKPOINT_VAR.len() + 1 + MAX_CHECKPOINT_BYTES + 1;

/// Splits stdout into lines and publishes the checkpoint lines.
pub(super) struct Lines {
    line: Vec<u8>,
    /// The rest of the current line is ignored (not a checkpoint line, or too long).
    skip: bool,
    /// The current line is a checkpoint line that outgrew [`MAX_LINE`].
    too_long: bool,
    tx: watch::Sender<Option<Vec<u8>>>,
}

impl Lines {
    /// Takes the next chunk of output.
    pub(super) fn push(&mut self, mut chunk: &[u8]) {
        while let Some(end) = chunk.iter().position(|b| *b == b'\n') {
            self.take(&chunk[..end]);
            self.end_line();
            chunk = &chunk[end + 1..];
        }
        self.take(chunk);
    }

    fn take(&mut self, part: &[u8]) {
        if self.skip || part.is_empty() {
            return;
        }
        if self.line.len() + part.len() > MAX_LINE {
            self.too_long = self.line.starts_with(prefix_bytes().as_slice());
            self.skip = true;
            self.line.clear();
            return;
        }
        self.line.extend_from_slice(part);
        let prefix = prefix_bytes();
        let n = self.line.len().min(prefix.len());
        if self.line[..n] != prefix[..n] {
            self.skip = true;
            self.line.clear();
        }
    }

    fn end_line(&mut self) {
        let prefix = prefix_bytes();
        if self.too_long {
            tracing::warn!(
                limit = MAX_CHECKPOINT_BYTES,
                "a checkpoint line of the program is longer than the limit; skipped"
            );
        } else if !self.skip && self.line.starts_with(&prefix) {
            let mut json = self.line.split_off(prefix.len());
            if json.last() == Some(&b'\r') {
                json.pop();
            }
            self.tx.send_replace(Some(json));
        }
        self.line.clear();
        self.skip = false;
        self.too_long = false;
    }
}

impl Lines {
    /// The output ended (end of file): a last line without a newline counts too. Reading that
    /// stops early (the drain grace ran out) drops the scanner instead, so a line cut short is
    /// never saved.
    pub(super) fn finish(mut self) {
        if !self.line.is_empty() || self.too_long {
            self.end_line();
        }
    }
}

/// `LEASEHOLD_CHECKPOINT ` as bytes.
fn prefix_bytes() -> Vec<u8> {
    let mut prefix = CHECKPOINT_VAR.as_bytes().to_vec();
    prefix.push(b' ');
    prefix
}

/// Saves the published lines of one execution.
pub(super) struct Saver {
    task: AbortOnDropHandle<()>,
}

impl Saver {
    /// Waits until the reader is done and every line it published is saved (or skipped).
    pub(super) async fn finish(self) {
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the checkpoint saver stopped");
        }
    }
}

/// A line scanner for the stdout reader and the task that saves what it finds for `ctx`.
pub(super) fn saver(ctx: TaskContext) -> (Lines, Saver) {
    let (tx, mut rx) = watch::channel::<Option<Vec<u8>>>(None);
    let task = tokio::spawn(async move {
        // `changed` still reports a line published just before the reader closed the channel.
        while rx.changed().await.is_ok() {
            let Some(line) = rx.borrow_and_update().clone() else {
                continue;
            };
            let value = match serde_json::from_slice::<serde_json::Value>(&line) {
                Ok(value) => value,
                Err(e) => {
                    tracing::warn!(task.id = ctx.id().0, error = %e, "a checkpoint line of the program is not JSON; skipped");
                    continue;
                }
            };
            match ctx.save_checkpoint(&value).await {
                Ok(()) => tracing::debug!(task.id = ctx.id().0, "checkpoint saved"),
                Err(e) if e.code == "lease_lost" => break,
                Err(e) => {
                    tracing::warn!(task.id = ctx.id().0, error = %e, "checkpoint not saved")
                }
            }
        }
    });
    let lines = Lines {
        line: Vec::new(),
        skip: false,
        too_long: false,
        tx,
    };
    (
        lines,
        Saver {
            task: AbortOnDropHandle::new(task),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&[u8]]) -> Vec<String> {
        let (tx, mut rx) = watch::channel::<Option<Vec<u8>>>(None);
        let mut lines = Lines {
            line: Vec::new(),
            skip: false,
            too_long: false,
            tx,
        };
        let mut seen = Vec::new();
        let mut take = |rx: &mut watch::Receiver<Option<Vec<u8>>>| {
            let line = rx.borrow_and_update();
            if line.has_changed()
                && let Some(line) = line.as_ref()
            {
                seen.push(String::from_utf8_lossy(line).into_owned());
            }
        };
        for chunk in chunks {
            lines.push(chunk);
            take(&mut rx);
        }
        lines.finish();
        take(&mut rx);
        seen
    }

    #[test]
    fn checkpoint_lines_are_found_across_chunks_and_other_output() {
        assert_eq!(
            scan(&[
                b"hello\nLEASEHOLD_CHECK",
                b"POINT {\"page\":1}\nmore\n",
                b"LEASEHOLD_CHECKPOINT {\"page\":2}\r\n"
            ]),
            vec![r#"{"page":1}"#, r#"{"page":2}"#]
        );
    }

    #[test]
    fn only_lines_that_start_with_the_prefix_count() {
        assert_eq!(
            scan(&[
                b"echo LEASEHOLD_CHECKPOINT {}\n LEASEHOLD_CHECKPOINT {}\nLEASEHOLD_CHECKPOINT{}\n"
            ]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_last_line_without_newline_counts() {
        assert_eq!(scan(&[b"LEASEHOLD_CHECKPOINT [1]"]), vec!["[1]"]);
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_and_memory_stays_bounded() {
        let mut big = b"LEASEHOLD_CHECKPOINT \"".to_vec();
        big.extend(std::iter::repeat_n(b'x', MAX_CHECKPOINT_BYTES + 10));
        let (tx, _rx) = watch::channel::<Option<Vec<u8>>>(None);
        let mut lines = Lines {
            line: Vec::new(),
            skip: false,
            too_long: false,
            tx,
        };
        for chunk in big.chunks(1000) {
            lines.push(chunk);
            assert!(lines.line.len() <= MAX_LINE);
        }
        lines.finish();
        big.extend_from_slice(b"\"\nLEASEHOLD_CHECKPOINT 3\n");
        assert_eq!(scan(&[&big]), vec!["3"]);
    }
}
