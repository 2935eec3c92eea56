//! Warnings about secret-bearing files other local users can read (DESIGN "Additions": files).
//!
//! At start the agent looks at the mode of the config file (`--config`), of every token
//! `secret_file` and of the TLS private key:
//!
//! ```text
//!   mode & 0o077 == 0            private                 nothing to say
//!   group or others have access  readable                warn, naming the file and `chmod 600 FILE`
//!     … a config file holding inline `secret = "…"` tokens: a louder warning (error level)
//!   others may write (0o002)     world-writable          TLS key or token file: refused (exit 2),
//!                                                         anyone could swap the key or the token;
//!                                                         config file: warned as readable
//! ```
//!
//! A readable file is not an error: an operator may share a file with a group on purpose. The
//! check runs before logging is set up, so it returns what it found and [`Report::log`] writes
//! the warnings once the subscriber is installed. A file that cannot be looked at is left to
//! the code that reads it (it reports the read error).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{ConfigError, TokenFile, invalid};

/// How a file's permission bits expose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Only the owner has access.
    Private,
    /// Group or others have some access, but others cannot write.
    Readable,
    /// Others may write it.
    WorldWritable,
}

/// Classifies permission bits (`st_mode`; the file type bits are ignored).
pub fn exposure(mode: u32) -> Exposure {
    if mode & 0o002 != 0 {
        Exposure::WorldWritable
    } else if mode & 0o077 != 0 {
        Exposure::Readable
    } else {
        Exposure::Private
    }
}

/// What a checked file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// The `--config` file.
    Config {
        /// It holds inline `secret = "…"` tokens.
        inline_secrets: bool,
    },
    /// A token's `secret_file` (or `--token-file`).
    TokenSecret,
    /// The TLS private key.
    TlsKey,
}

impl FileKind {
    fn describe(self) -> &'static str {
        match self {
            FileKind::Config { .. } => "config file",
            FileKind::TokenSecret => "token secret file",
            FileKind::TlsKey => "TLS private key",
        }
    }

    /// A world-writable file of this kind is refused.
    fn refused_when_world_writable(self) -> bool {
        matches!(self, FileKind::TokenSecret | FileKind::TlsKey)
    }
}

/// The secret-bearing files of one agent start.
#[derive(Debug, Default, Clone)]
pub struct SecretFiles {
    files: Vec<(FileKind, PathBuf)>,
}

impl SecretFiles {
    /// The config file at `path` (if any) and the token `secret_file`s of its `tokens`.
    pub fn of_config(path: Option<&Path>, tokens: &[TokenFile]) -> Self {
        let mut files = SecretFiles::default();
        if let Some(path) = path {
            let inline_secrets = tokens.iter().any(|t| t.secret.is_some());
            files.add(FileKind::Config { inline_secrets }, path);
        }
        for token in tokens {
            if let Some(secret_file) = &token.secret_file {
                files.add(FileKind::TokenSecret, secret_file);
            }
        }
        files
    }

    /// Adds one more file to check.
    pub fn add(&mut self, kind: FileKind, path: &Path) {
        self.files.push((kind, path.to_path_buf()));
    }

    /// Looks at every file's mode: refuses a world-writable TLS key or token file, and
    /// returns the warnings about the rest.
    pub fn check(&self) -> Result<Report, ConfigError> {
        let mut report = Report::default();
        for (kind, path) in &self.files {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o7777;
            match exposure(mode) {
                Exposure::Private => {}
                Exposure::WorldWritable if kind.refused_when_world_writable() => {
                    return Err(invalid(
                        "permissions",
                        format!(
                            "the {} {} is writable by every local user (mode {mode:04o}): anyone \
                             could replace it; fix it with chmod 600 {}",
                            kind.describe(),
                            path.display(),
                            path.display()
                        ),
                    ));
                }
                Exposure::Readable | Exposure::WorldWritable => report.findings.push(Finding {
                    kind: *kind,
                    path: path.clone(),
                    mode,
                }),
            }
        }
        Ok(report)
    }
}

/// One file group or others can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: FileKind,
    pub path: PathBuf,
    /// Its permission bits.
    pub mode: u32,
}

impl Finding {
    /// The warning, naming the file and the fix.
    pub fn message(&self) -> String {
        let path = self.path.display();
        let mode = self.mode;
        match self.kind {
            FileKind::Config {
                inline_secrets: true,
            } => format!(
                "the config file {path} holds token secrets (secret = \"…\") and other local \
                 users can read it (mode {mode:04o}): they can act with those tokens; fix it \
                 with chmod 600 {path}, or move the secrets to secret_file"
            ),
            kind => format!(
                "the {} {path} is readable by group or others (mode {mode:04o}); fix it with \
                 chmod 600 {path}",
                kind.describe()
            ),
        }
    }

    /// Inline secrets in a readable config file: the louder kind.
    pub fn is_exposed_secret(&self) -> bool {
        matches!(
            self.kind,
            FileKind::Config {
                inline_secrets: true
            }
        )
    }
}

/// What [`SecretFiles::check`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    /// Writes the findings to the log: a warning each, an error-level line for inline
    /// secrets others can read. Call it once the log subscriber is installed.
    pub fn log(&self) {
        for finding in &self.findings {
            let path = finding.path.display();
            let mode = format_args!("{:04o}", finding.mode);
            if finding.is_exposed_secret() {
                tracing::error!(path = %path, mode = %mode, "{}", finding.message());
            } else {
                tracing::warn!(path = %path, mode = %mode, "{}", finding.message());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("leasehold-perms-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn tokens_of(config: &Path) -> Vec<TokenFile> {
        let layers = crate::config::Layers::new().file(config).unwrap();
        layers.settings().unwrap().tokens
    }

    fn file_with_mode(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn modes_are_classified_by_group_and_other_bits() {
        let cases = [
            (0o600, Exposure::Private),
            (0o400, Exposure::Private),
            (0o700, Exposure::Private),
            (0o100_600, Exposure::Private),
            (0o640, Exposure::Readable),
            (0o604, Exposure::Readable),
            (0o644, Exposure::Readable),
            (0o620, Exposure::Readable),
            (0o610, Exposure::Readable),
            (0o602, Exposure::WorldWritable),
            (0o666, Exposure::WorldWritable),
            (0o777, Exposure::WorldWritable),
        ];
        for (mode, want) in cases {
            assert_eq!(exposure(mode), want, "{mode:o}");
        }
    }

    #[test]
    fn readable_files_are_warned_about_by_name_with_the_fix() {
        let dir = scratch("readable");
        let token = file_with_mode(&dir, "t.token", "0123456789abcdef-x", 0o644);
        let private = file_with_mode(&dir, "p.token", "0123456789abcdef-y", 0o600);
        let key = file_with_mode(&dir, "key.pem", "k", 0o640);
        let text = format!(
            "[[tokens]]\nname = \"a\"\nrole = \"viewer\"\nsecret_file = \"{}\"\n\
             [[tokens]]\nname = \"b\"\nrole = \"viewer\"\nsecret_file = \"{}\"\n",
            token.display(),
            private.display()
        );
        let config = file_with_mode(&dir, "agent.toml", &text, 0o600);
        let parsed = tokens_of(&config);
        let mut files = SecretFiles::of_config(Some(&config), &parsed);
        files.add(FileKind::TlsKey, &key);
        files.add(FileKind::TlsKey, &dir.join("missing.pem"));
        let report = files.check().unwrap();
        let paths: Vec<&Path> = report.findings.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths, [token.as_path(), key.as_path()]);
        let message = report.findings[0].message();
        assert!(message.contains("token secret file"), "{message}");
        assert!(message.contains("0644"), "{message}");
        assert!(
            message.contains(&format!("chmod 600 {}", token.display())),
            "{message}"
        );
        assert!(!report.findings.iter().any(Finding::is_exposed_secret));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn inline_secrets_in_a_readable_config_file_are_the_loud_kind() {
        let dir = scratch("inline");
        let text =
            "[[tokens]]\nname = \"a\"\nrole = \"operator\"\nsecret = \"0123456789abcdef-z\"\n";
        let config = file_with_mode(&dir, "agent.toml", text, 0o644);
        let parsed = tokens_of(&config);
        let report = SecretFiles::of_config(Some(&config), &parsed)
            .check()
            .unwrap();
        assert_eq!(report.findings.len(), 1);
        assert!(report.findings[0].is_exposed_secret());
        let message = report.findings[0].message();
        assert!(message.contains("holds token secrets"), "{message}");
        assert!(!message.contains("0123456789abcdef-z"), "{message}");
        // The same file without inline secrets is an ordinary warning.
        let plain = file_with_mode(&dir, "plain.toml", "concurrency = 3\n", 0o644);
        let parsed = tokens_of(&plain);
        let report = SecretFiles::of_config(Some(&plain), &parsed)
            .check()
            .unwrap();
        assert!(!report.findings[0].is_exposed_secret());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_world_writable_key_or_token_file_is_refused_but_a_config_file_is_warned() {
        let dir = scratch("writable");
        for kind in [FileKind::TlsKey, FileKind::TokenSecret] {
            let path = file_with_mode(&dir, "w", "x", 0o666);
            let mut files = SecretFiles::default();
            files.add(kind, &path);
            let e = files.check().unwrap_err().to_string();
            assert!(e.starts_with("permissions:"), "{e}");
            assert!(e.contains("writable by every local user"), "{e}");
            assert!(e.contains(&format!("chmod 600 {}", path.display())), "{e}");
        }
        let config = file_with_mode(&dir, "agent.toml", "", 0o666);
        let mut files = SecretFiles::default();
        files.add(
            FileKind::Config {
                inline_secrets: false,
            },
            &config,
        );
        assert_eq!(files.check().unwrap().findings.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
