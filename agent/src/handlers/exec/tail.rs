//! The bounded tail of one output stream of an `exec` program.
//!
//! Invariant: memory stays below `2 × limit + READ_CHUNK` bytes whatever the program prints;
//! only the last `limit` bytes survive. Reading stops at end of file, on a read error, or when
//! the stop token fires (a background process that escaped the process group can keep a pipe
//! open forever, so the handler stops waiting for end of file after a grace).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

/// Bytes asked for per read (a Linux pipe holds 64 KiB).
const READ_CHUNK: usize = 16 * 1024;

/// The last `limit` bytes of a stream, and how many bytes it had in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tail {
    bytes: Vec<u8>,
    limit: usize,
    total: u64,
}

impl Tail {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            total: 0,
        }
    }

    /// Appends `chunk`, forgetting what falls out of the tail. Trimming waits until the
    /// buffer holds twice the limit, so each byte is moved at most once on average.
    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.total = self
            .total
            .saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        if chunk.len() >= self.limit {
            self.bytes.clear();
            self.bytes
                .extend_from_slice(&chunk[chunk.len() - self.limit..]);
            return;
        }
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.limit.saturating_mul(2) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        let excess = self.bytes.len().saturating_sub(self.limit);
        self.bytes.drain(..excess);
    }

    /// The tail as text, invalid UTF-8 replaced. When the front was cut off, the continuation
    /// bytes of a character split by the cut are dropped rather than shown as `�`.
    pub(super) fn into_text(mut self) -> String {
        self.trim();
        let cut = self.total > u64::try_from(self.bytes.len()).unwrap_or(u64::MAX);
        let skip = if cut {
            self.bytes
                .iter()
                .take(3)
                .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
                .count()
        } else {
            0
        };
        String::from_utf8_lossy(&self.bytes[skip..]).into_owned()
    }
}

/// Reads `reader` until end of file, an error or `stop`, keeping the last `limit` bytes; with
/// `lines`, each chunk also goes to the checkpoint line scanner.
pub(super) async fn read_tail<R>(
    mut reader: R,
    limit: usize,
    stop: CancellationToken,
    mut lines: Option<super::checkpoint::Lines>,
) -> Tail
where
    R: AsyncRead + Unpin,
{
    let mut tail = Tail::new(limit);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let read = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            read = read_some(&mut reader, &mut buf) => read,
        };
        match read {
            Ok(0) => {
                if let Some(lines) = lines.take() {
                    lines.finish();
                }
                break;
            }
            Ok(n) => {
                tail.push(&buf[..n]);
                if let Some(lines) = &mut lines {
                    lines.push(&buf[..n]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "reading program output failed; keeping what was read");
                break;
            }
        }
    }
    tail
}

/// One read into `buf`, returning the number of bytes read (0 at end of file).
async fn read_some<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    poll_fn(|cx| {
        let mut read_buf = ReadBuf::new(&mut *buf);
        Pin::new(&mut *reader)
            .poll_read(cx, &mut read_buf)
            .map_ok(|()| read_buf.filled().len())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail_of(limit: usize, chunks: &[&[u8]]) -> String {
        let mut tail = Tail::new(limit);
        for chunk in chunks {
            tail.push(chunk);
        }
        tail.into_text()
    }

    #[test]
    fn tail_keeps_the_last_bytes_across_chunks() {
        assert_eq!(tail_of(4, &[b"ab", b"cd", b"ef"]), "cdef");
        assert_eq!(tail_of(4, &[b"abcdefgh"]), "efgh");
        assert_eq!(tail_of(4, &[b"ab"]), "ab");
        assert_eq!(tail_of(0, &[b"ab"]), "");
        let many: Vec<&[u8]> = std::iter::repeat_n(&b"xy"[..], 1000).collect();
        assert_eq!(tail_of(5, &many), "yxyxy");
    }

    #[test]
    fn tail_stays_bounded() {
        let mut tail = Tail::new(10);
        for _ in 0..10_000 {
            tail.push(b"123");
            assert!(tail.bytes.len() <= 20);
        }
        assert_eq!(tail.total, 30_000);
    }

    #[test]
    fn tail_drops_a_character_split_by_the_cut() {
        // "é" is 0xC3 0xA9: a 3-byte tail of "aéb" starts in the middle of it.
        assert_eq!(tail_of(2, &["aéb".as_bytes()]), "b");
        assert_eq!(tail_of(3, &["aéb".as_bytes()]), "éb");
        // Invalid bytes that were not cut are still shown as replacement characters.
        assert_eq!(tail_of(8, &[&[0xA9, b'x']]), "\u{FFFD}x");
    }

    #[tokio::test]
    async fn read_tail_reads_to_the_end() {
        let data = vec![b'z'; 100_000];
        let tail = read_tail(&data[..], 3, CancellationToken::new(), None).await;
        assert_eq!(tail.total, 100_000);
        assert_eq!(tail.into_text(), "zzz");
    }
}
