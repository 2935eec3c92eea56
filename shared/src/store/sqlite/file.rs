//! The SQLite database file on disk: private from its first byte.
//!
//! The store creates a missing database file itself, mode 0600 (owner read/write only),
//! before SQLite opens it: SQLite would create it with 0644 less the umask, readable by every
//! local user, and the file holds every payload, error and audit row. SQLite gives the `-wal`
//! and `-shm` files it creates next to the database the database file's own mode, so they are
//! private too. An existing file keeps its mode (an operator may share it with a group on
//! purpose), but one that group or others can read is warned about, naming the fix. The store
//! creates no directories: a missing parent directory is an error, as it is for SQLite.

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::connect_options;
use crate::store::{Result, StoreError};

/// The mode of a database file the store creates.
pub const DATABASE_FILE_MODE: u32 = 0o600;

/// What [`prepare_database_file`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// The file did not exist: it was created empty with [`DATABASE_FILE_MODE`].
    Created,
    /// The file exists with no group or other access.
    Private,
    /// The file exists and group or others have some access (`mode & 0o077 != 0`): warned.
    Exposed {
        /// The file's permission bits.
        mode: u32,
    },
}

/// Whether permission bits give group or others any access.
pub fn exposed(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// Creates the database file of `url` (`sqlite://PATH`) with mode 0600 when it does not exist,
/// or warns when an existing one is open to group or others. Call it before SQLite opens
/// the file.
pub fn prepare_database_file(url: &str) -> Result<FileState> {
    let options = connect_options(url)?;
    let path = options.get_filename();
    let state = prepare_path(path).map_err(|e| {
        StoreError::db("create the database file")(sqlx::Error::Io(io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        )))
    })?;
    if let FileState::Exposed { mode } = state {
        tracing::warn!(
            path = %path.display(),
            mode = format_args!("{mode:04o}"),
            "the database file is readable by other users (group or others); it holds every \
             payload and audit row: chmod 600 {}",
            path.display()
        );
    }
    Ok(state)
}

/// [`prepare_database_file`] on a path.
fn prepare_path(path: &Path) -> io::Result<FileState> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(DATABASE_FILE_MODE)
        .open(path);
    match created {
        Ok(file) => {
            // The umask can only take bits away from 0600; set it anyway so the mode is
            // exactly 0600 whatever the umask.
            file.set_permissions(std::fs::Permissions::from_mode(DATABASE_FILE_MODE))?;
            Ok(FileState::Created)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
            Ok(if exposed(mode) {
                FileState::Exposed { mode }
            } else {
                FileState::Private
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-sqlite-file-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_missing_file_is_created_0600_and_an_existing_one_keeps_its_mode() {
        let dir = scratch("modes");
        let path = dir.join("q.sqlite");
        let url = format!("sqlite://{}", path.display());
        assert_eq!(prepare_database_file(&url).unwrap(), FileState::Created);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(prepare_database_file(&url).unwrap(), FileState::Private);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(
            prepare_database_file(&url).unwrap(),
            FileState::Exposed { mode: 0o640 }
        );
        assert_eq!(mode(&path), 0o640, "an existing file keeps its mode");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_file() {
        let dir = scratch("nodir");
        let path = dir.join("absent/q.sqlite");
        let e = prepare_database_file(&format!("sqlite://{}", path.display())).unwrap_err();
        assert!(e.to_string().contains("absent/q.sqlite"), "{e}");
        assert!(!dir.join("absent").exists(), "no directory is created");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_group_or_other_bits_count_as_exposed() {
        for m in [0o600, 0o700, 0o400, 0o200] {
            assert!(!exposed(m), "{m:o}");
        }
        for m in [0o640, 0o604, 0o602, 0o620, 0o666, 0o601] {
            assert!(exposed(m), "{m:o}");
        }
    }
}
