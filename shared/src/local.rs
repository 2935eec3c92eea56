//! Who runs this process, and where an agent's local Unix socket lives (DESIGN "Local access").
//!
//! The agent serves its API on `<dir>/agent-<port>.sock`, `<port>` being its TCP port, so the
//! console given `--agent 127.0.0.1:<port>` finds the socket of that very agent. `<dir>` is the
//! first that applies of:
//!
//! 1. `$LEASEHOLD_RUNTIME_DIR` (explicit; tests and unusual setups);
//! 2. `$RUNTIME_DIRECTORY` (systemd's `RuntimeDirectory=leasehold` sets it to `/run/leasehold`);
//! 3. `/run/leasehold` when running as root;
//! 4. `$XDG_RUNTIME_DIR/leasehold` (a login session's private directory);
//! 5. `/tmp/leasehold-<uid>`.
//!
//! The console looks in the same places (its own user's), and also in `/run/leasehold`, where
//! a systemd agent's socket is: a user it does not belong to cannot connect (mode 0600).
//!
//! Invariants: the directory is created 0700 and must be a real directory (not a symlink)
//! owned by the current user with no group or other access, or it is refused — another local
//! user cannot plant a socket or a symlink where this user's agent or console looks.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Overrides the socket directory.
pub const RUNTIME_DIR_ENV: &str = "LEASEHOLD_RUNTIME_DIR";
/// The directory systemd's `RuntimeDirectory=` provides.
pub const SYSTEMD_RUNTIME_DIR_ENV: &str = "RUNTIME_DIRECTORY";
/// Root's socket directory.
pub const SYSTEM_RUNTIME_DIR: &str = "/run/leasehold";

/// The effective uid of this process (the owner of `/proc/self`).
pub fn current_uid() -> io::Result<u32> {
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// The user name of `uid` from `/etc/passwd`, if it has one there.
pub fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let _password = fields.next()?;
        let id: u32 = fields.next()?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_string())
    })
}

/// How a local user is named in the audit log: `uid:1000(alice)`, or `uid:1000` without a
/// passwd entry.
pub fn uid_label(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("uid:{uid}({name})"),
        None => format!("uid:{uid}"),
    }
}

fn env_dir(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// The socket directory of this process's user (see the module docs), without creating it.
pub fn runtime_dir() -> io::Result<PathBuf> {
    if let Some(dir) = env_dir(RUNTIME_DIR_ENV) {
        return Ok(dir);
    }
    if let Some(dir) = env_dir(SYSTEMD_RUNTIME_DIR_ENV) {
        return Ok(dir);
    }
    let uid = current_uid()?;
    if uid == 0 {
        return Ok(PathBuf::from(SYSTEM_RUNTIME_DIR));
    }
    if let Some(dir) = env_dir("XDG_RUNTIME_DIR") {
        return Ok(dir.join("leasehold"));
    }
    Ok(PathBuf::from(format!("/tmp/leasehold-{uid}")))
}

/// The socket file name of the agent serving TCP `port`.
pub fn socket_name(port: u16) -> String {
    format!("agent-{port}.sock")
}

/// Where this user's agent on TCP `port` puts its socket.
pub fn socket_path(port: u16) -> io::Result<PathBuf> {
    Ok(runtime_dir()?.join(socket_name(port)))
}

/// Where the console looks for the socket of the agent on TCP `port`, in order: this user's
/// runtime directory, then the system one. Paths are unique.
pub fn socket_candidates(port: u16) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(p) = socket_path(port) {
        out.push(p);
    }
    let system = Path::new(SYSTEM_RUNTIME_DIR).join(socket_name(port));
    if !out.contains(&system) {
        out.push(system);
    }
    out
}

/// Creates `dir` (mode 0700) if missing and checks it is a private directory of this user:
/// not a symlink, owned by the current uid, no group or other permission bits.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("creating {}: {e}", dir.display()),
            ));
        }
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", dir.display())))?;
    if !meta.file_type().is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory (a symlink or a file is refused)",
            dir.display()
        )));
    }
    let uid = current_uid()?;
    if meta.uid() != uid {
        return Err(io::Error::other(format!(
            "{} belongs to uid {}, not to this user (uid {uid}); refusing to use it",
            dir.display(),
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} is open to other users (mode {:o}); it must be 0700",
            dir.display(),
            meta.permissions().mode() & 0o777
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn labels_name_the_uid_and_the_user() {
        assert_eq!(uid_label(0), "uid:0(root)");
        assert_eq!(uid_label(4_000_000_000), "uid:4000000000");
        assert_eq!(socket_name(7070), "agent-7070.sock");
    }

    #[test]
    fn a_private_dir_is_made_and_an_open_one_refused() {
        let base = std::env::temp_dir().join(format!("lh-local-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let private = base.join("private");
        ensure_private_dir(&private).unwrap();
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        ensure_private_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = ensure_private_dir(&private).unwrap_err();
        assert!(e.to_string().contains("0700"), "{e}");
        let link = base.join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        let e = ensure_private_dir(&link).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
