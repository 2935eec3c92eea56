//! A real terminal for end-to-end tests of the interactive console: a private tmux server per
//! test ([`Tmux`]) running one pane, keys sent to it with `send-keys`, and its screen read back
//! with `capture-pane`; and the console `leasehold` running in such a pane against a live agent
//! ([`Console`]).
//!
//! Invariants:
//! - every [`Tmux`] has a server of its own (`tmux -L <unique socket>`, no config file, no
//!   status line), killed when the value is dropped, on a failed assertion too;
//! - tests wait for what the screen shows ([`Tmux::wait_screen`], polling every
//!   [`SCREEN_POLL`]); the only fixed pause is [`ESC_SETTLE`] after an Escape, which is how a
//!   terminal tells a lone Escape from Alt+key, never a check;
//! - the console's command line ends with `; echo EXIT=$?; sleep …`, so its exit code can be
//!   read from the pane after it quits and the pane stays to be looked at.
//!
//! A timeout error quotes the last screen and, for a console, the end of its log file; the log
//! directory is kept (and its path printed) when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::bin::binary;
use crate::scratch::scratch_dir;

/// Columns of a test terminal (TESTING.md §4).
pub const WIDTH: u16 = 120;
/// Lines of a test terminal.
pub const HEIGHT: u16 = 35;
/// How often a wait re-reads the screen.
pub const SCREEN_POLL: Duration = Duration::from_millis(100);
/// How long a wait for the screen lasts by default: generous, the machines are noisy.
pub const SCREEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after an Escape, so the key after it is not read as Alt+key.
pub const ESC_SETTLE: Duration = Duration::from_millis(300);
/// The one window (and pane) of every test server.
const TARGET: &str = "main";
/// Lines of the console log quoted in errors.
const LOG_TAIL_LINES: usize = 30;
/// The variables the console reads; removed so the test's own environment cannot leak in.
const CONSOLE_ENV: [&str; 6] = [
    "LEASEHOLD_AGENT",
    "LEASEHOLD_TOKEN",
    "LEASEHOLD_CA",
    "LEASEHOLD_CERT",
    "LEASEHOLD_KEY",
    "NO_COLOR",
];

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A private tmux server with one detached session, `main`, running one command.
#[derive(Debug)]
pub struct Tmux {
    socket: String,
    /// The socket file, removed on drop (`kill-server` leaves it behind).
    socket_path: Option<PathBuf>,
}

impl Tmux {
    /// Starts a server on a fresh socket with a `width`×`height` session running the shell
    /// command `command` (given to tmux's default shell as one string).
    pub fn start(command: &str, width: u16, height: u16) -> anyhow::Result<Tmux> {
        let socket = format!(
            "leasehold-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut tmux = Tmux {
            socket,
            socket_path: None,
        };
        // The option is set before the session exists, so the pane starts at its final size.
        let (w, h) = (width.to_string(), height.to_string());
        tmux.run(&[
            "set-option",
            "-g",
            "status",
            "off",
            ";",
            "new-session",
            "-d",
            "-x",
            &w,
            "-y",
            &h,
            "-s",
            TARGET,
            command,
        ])
        .context("starting a tmux session (is tmux installed?)")?;
        let path = tmux.run(&["display-message", "-p", "#{socket_path}"])?;
        tmux.socket_path = Some(PathBuf::from(path.trim_end()));
        Ok(tmux)
    }

    /// The server's socket name (`tmux -L <name>`), to look at a kept session by hand.
    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// Runs `tmux -f /dev/null -L <socket> ARGS…` and returns its stdout.
    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = Command::new("tmux")
            .args(["-f", "/dev/null", "-L", &self.socket])
            .args(args)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running tmux {args:?}"))?;
        if !output.status.success() {
            bail!(
                "tmux {args:?} failed with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Sends tmux key names (`Enter`, `Escape`, `Up`, `Space`, `C-l`, a single letter…), each
    /// its own key. Use [`Tmux::type_text`] for text and for keys tmux would parse (`;`, `-`).
    pub fn keys(&self, keys: &[&str]) -> anyhow::Result<()> {
        let mut args = vec!["send-keys", "-t", TARGET];
        args.extend_from_slice(keys);
        self.run(&args).map(drop)
    }

    /// Types `text` literally, character by character.
    pub fn type_text(&self, text: &str) -> anyhow::Result<()> {
        self.run(&["send-keys", "-t", TARGET, "-l", "--", text])
            .map(drop)
    }

    /// Sends Escape on its own and lets it settle (see [`ESC_SETTLE`]).
    pub async fn escape(&self) -> anyhow::Result<()> {
        self.keys(&["Escape"])?;
        tokio::time::sleep(ESC_SETTLE).await;
        Ok(())
    }

    /// The visible screen as plain text, one line per row.
    pub fn screen(&self) -> anyhow::Result<String> {
        self.run(&["capture-pane", "-p", "-t", TARGET])
    }

    /// The visible screen with tmux's own SGR escapes for colours and attributes (`-e`).
    pub fn screen_with_escapes(&self) -> anyhow::Result<String> {
        self.run(&["capture-pane", "-p", "-e", "-t", TARGET])
    }

    /// A tmux format evaluated for the pane, e.g. `#{alternate_on}` (1 while the program
    /// shows the alternate screen) or `#{cursor_flag}` (1 while the cursor is visible).
    pub fn pane_format(&self, format: &str) -> anyhow::Result<String> {
        Ok(self
            .run(&["display-message", "-p", "-t", TARGET, format])?
            .trim_end()
            .to_string())
    }

    /// Re-reads the screen every [`SCREEN_POLL`] until `pred` holds, and returns that screen.
    /// Fails naming `what` and quoting the last screen when `timeout` passes first.
    pub async fn wait_screen<F>(
        &self,
        what: &str,
        timeout: Duration,
        mut pred: F,
    ) -> anyhow::Result<String>
    where
        F: FnMut(&str) -> bool,
    {
        let start = Instant::now();
        loop {
            let past_deadline = start.elapsed() >= timeout;
            let screen = self.screen()?;
            if pred(&screen) {
                return Ok(screen);
            }
            if past_deadline {
                bail!(
                    "timed out after {:.1?} waiting until the screen shows {what}; \
                     the screen:\n{screen}",
                    start.elapsed()
                );
            }
            tokio::time::sleep(SCREEN_POLL).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-f", "/dev/null", "-L", &self.socket, "kill-server"])
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The interactive console in a [`Tmux`] pane, logging to a file of its own.
#[derive(Debug)]
pub struct Console {
    tmux: Tmux,
    dir: PathBuf,
}

impl Console {
    /// Starts `leasehold --agent addr --log-file <dir>/console.log ARGS…` in a
    /// [`WIDTH`]×[`HEIGHT`] terminal, with the `LEASEHOLD_*` variables and `NO_COLOR` removed.
    pub async fn start(addr: &str, args: &[&str]) -> anyhow::Result<Console> {
        let bin = binary("leasehold").await?;
        let dir = scratch_dir("leasehold-console")?;
        let log = dir.join("console.log");
        let mut words = vec!["env".to_string()];
        for var in CONSOLE_ENV {
            words.push("-u".into());
            words.push(var.into());
        }
        words.push(path_text(&bin)?);
        words.extend(["--agent".into(), addr.into(), "--log-file".into()]);
        words.push(path_text(&log)?);
        words.extend(args.iter().map(|a| a.to_string()));
        let command = words
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ");
        let command = format!("{command}; echo EXIT=$?; sleep 120");
        let tmux = match Tmux::start(&command, WIDTH, HEIGHT) {
            Ok(tmux) => tmux,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        let console = Console { tmux, dir };
        // Keys typed before the console switches the terminal to raw mode would be echoed
        // onto the shell's screen: wait for its first frame on the alternate screen.
        console
            .wait_for("the console's first frame", |screen| {
                !screen.trim().is_empty()
                    && console
                        .tmux
                        .pane_format("#{alternate_on}")
                        .is_ok_and(|flag| flag == "1")
            })
            .await?;
        Ok(console)
    }

    /// The terminal it runs in.
    pub fn tmux(&self) -> &Tmux {
        &self.tmux
    }

    /// Sends tmux key names (see [`Tmux::keys`]).
    pub fn keys(&self, keys: &[&str]) -> anyhow::Result<()> {
        self.tmux.keys(keys)
    }

    /// Types text literally (see [`Tmux::type_text`]).
    pub fn type_text(&self, text: &str) -> anyhow::Result<()> {
        self.tmux.type_text(text)
    }

    /// Sends a lone Escape (see [`Tmux::escape`]).
    pub async fn escape(&self) -> anyhow::Result<()> {
        self.tmux.escape().await
    }

    /// The visible screen.
    pub fn screen(&self) -> anyhow::Result<String> {
        self.tmux.screen()
    }

    /// The end of the console's log file (or why it cannot be read).
    pub fn log_tail(&self) -> String {
        match std::fs::read(self.dir.join("console.log")) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
            }
            Err(error) => format!("(no log: {error})"),
        }
    }

    /// Waits up to [`SCREEN_TIMEOUT`] for `pred` to hold on the screen; the error also quotes
    /// the end of the console log.
    pub async fn wait_for<F>(&self, what: &str, pred: F) -> anyhow::Result<String>
    where
        F: FnMut(&str) -> bool,
    {
        self.tmux
            .wait_screen(what, SCREEN_TIMEOUT, pred)
            .await
            .with_context(|| format!("end of the console log:\n{}", self.log_tail()))
    }

    /// Waits until the screen contains `text`.
    pub async fn wait_text(&self, text: &str) -> anyhow::Result<String> {
        self.wait_for(&format!("{text:?}"), |s| s.contains(text))
            .await
    }

    /// The exit code the pane printed (`EXIT=<code>`), once the console has exited.
    pub async fn wait_exit(&self) -> anyhow::Result<i32> {
        let screen = self
            .wait_for("the console's exit code (EXIT=…)", |s| {
                exit_code(s).is_some()
            })
            .await?;
        exit_code(&screen).context("EXIT= line vanished")
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "leasehold-tests: console log kept in {} (tmux -L {})",
                self.dir.display(),
                self.tmux.socket()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The first line of `screen` whose first word is `word` (e.g. a task id in a table), trimmed
/// and without the selected row's marker (`>`) in front.
pub fn line_starting<'a>(screen: &'a str, word: &str) -> Option<&'a str> {
    screen
        .lines()
        .map(|line| {
            let line = line.trim();
            line.strip_prefix('>').map_or(line, str::trim_start)
        })
        .find(|line| line.split_whitespace().next() == Some(word))
}

/// The code of the `EXIT=<code>` the console's command line prints after it.
pub fn exit_code(screen: &str) -> Option<i32> {
    screen
        .lines()
        .find_map(|line| line.split_once("EXIT=").map(|(_, code)| code))
        .and_then(|code| code.trim().parse().ok())
}

/// `word` quoted for a POSIX shell.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn path_text(path: &Path) -> anyhow::Result<String> {
    path.to_str()
        .map(str::to_string)
        .with_context(|| format!("path {} is not UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn rows_and_exit_codes_are_found() {
        let screen = "  TASK TYPE\n  12   sleep  ok\n>  13  noop\n\nEXIT=0\n";
        assert_eq!(line_starting(screen, "12"), Some("12   sleep  ok"));
        assert_eq!(line_starting(screen, "13"), Some("13  noop"));
        assert_eq!(line_starting(screen, "1"), None);
        assert_eq!(exit_code(screen), Some(0));
        assert_eq!(exit_code("EXIT=\n"), None);
    }
}
