#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Secrets stay secret (issue 19): the files an agent creates are private, secret-bearing files
//! other users can read are warned about at start (a world-writable key or token file is
//! refused), and `--help` never prints a database password taken from the environment.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::{binary, scratch_dir, wait_until};

const PASSWORD: &str = "hunter2";

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Positive control: in this environment a file created the ordinary way is readable by
/// others, so a private file proves the agent chose its mode.
fn assert_ordinary_files_are_readable_by_others(dir: &Path) {
    let control = dir.join("control");
    std::fs::write(&control, b"").unwrap();
    assert_ne!(
        mode(&control) & 0o044,
        0,
        "the umask already hides files from others: this test could not fail"
    );
    std::fs::remove_file(&control).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_sqlite_creates_its_database_and_logs_private() {
    let dir = scratch_dir("leasehold-private-files").unwrap();
    assert_ordinary_files_are_readable_by_others(&dir);
    let db = dir.join("queue.sqlite");
    let url = format!("sqlite://{}", db.display());
    // Two missing levels: every directory the agent creates is 0700.
    let logs = dir.join("logs").join("agent");
    let logs_arg = logs.to_string_lossy().to_string();
    let mut agent = spawn_agent(
        "leasehold-agent",
        &url,
        "private-files",
        "noop",
        &["--listen", "off", "--log-dir", &logs_arg],
        Vec::new(),
    )
    .await
    .unwrap();
    let (wal, shm) = (with_suffix(&db, "-wal"), with_suffix(&db, "-shm"));
    wait_until(
        "the database, its WAL and a log line",
        Duration::from_secs(30),
        || {
            let (db, wal, shm, logs) = (db.clone(), wal.clone(), shm.clone(), logs.clone());
            async move {
                let logged = std::fs::read_dir(&logs).is_ok_and(|entries| {
                    entries
                        .flatten()
                        .any(|e| e.metadata().is_ok_and(|m| m.len() > 0))
                });
                Ok(db.exists() && wal.exists() && shm.exists() && logged)
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", agent.log_tail(40)));
    for file in [&db, &wal, &shm] {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    assert_eq!(mode(&logs), 0o700, "{}", logs.display());
    assert_eq!(mode(&dir.join("logs")), 0o700);
    let mut log_files = 0;
    for entry in std::fs::read_dir(&logs).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        log_files += 1;
    }
    assert!(log_files >= 1, "no log file in {}", logs.display());
    agent.sigterm().unwrap();
    let status = agent.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert_eq!(status.code(), Some(0), "{}", agent.log_tail(40));
    assert_eq!(mode(&db), 0o600, "still private after the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_database_file_keeps_its_mode_and_is_warned_about() {
    let dir = scratch_dir("leasehold-open-db").unwrap();
    let db = dir.join("queue.sqlite");
    std::fs::write(&db, b"").unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_agent(
        &dir,
        &[
            "--database-url",
            &format!("sqlite://{}", db.display()),
            "--listen",
            "off",
        ],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("WARN"), "{err}");
    assert!(
        err.contains(&format!("chmod 600 {}", db.display())),
        "{err}"
    );
    assert_eq!(mode(&db), 0o644, "an existing file keeps its mode");
}

/// Runs `leasehold-agent run --handlers noop --exit-when-idle ARGS` to its end (no tasks: it
/// exits at once), with its own runtime directory.
async fn run_agent(dir: &Path, args: &[&str]) -> Output {
    let bin = binary("leasehold-agent").await.unwrap();
    let runtime = dir.join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut command = Command::new(bin);
    command
        .args(["run", "--handlers", "noop", "--exit-when-idle"])
        .args(args)
        .env("LEASEHOLD_RUNTIME_DIR", &runtime)
        .env("RUST_LOG", "info,sqlx=warn")
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("DATABASE_URL");
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn write_with_mode(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_files_others_can_read_are_warned_about_and_world_writable_ones_refused() {
    let dir = scratch_dir("leasehold-secret-files").unwrap();
    let url = format!("sqlite://{}", dir.join("q.sqlite").display());
    let token = dir.join("ops.token");
    write_with_mode(&token, "0123456789abcdef-token-secret\n", 0o644);
    let config = dir.join("agent.toml");
    write_with_mode(
        &config,
        &format!(
            "[[tokens]]\nname = \"ops\"\nrole = \"operator\"\nsecret_file = \"{}\"\n",
            token.display()
        ),
        0o600,
    );
    let config_arg = config.to_string_lossy().to_string();
    let logs = dir.join("logs");
    let logs_arg = logs.to_string_lossy().to_string();
    let args = [
        "--database-url",
        &url,
        "--config",
        &config_arg,
        "--listen",
        "127.0.0.1:0",
        "--log-dir",
        &logs_arg,
    ];

    // Readable by others: started, with a warning naming the file and the fix.
    let out = run_agent(&dir, &args).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let warning = err
        .lines()
        .find(|l| l.contains(&token.display().to_string()))
        .unwrap_or_else(|| panic!("no warning about {}:\n{err}", token.display()));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("readable by group or others"), "{warning}");
    assert!(
        warning.contains(&format!("chmod 600 {}", token.display())),
        "{warning}"
    );
    assert!(
        !err.contains("token-secret"),
        "the secret itself is never logged: {err}"
    );
    let file_log: String = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        file_log.contains("readable by group or others"),
        "the log file has the warning too:\n{file_log}"
    );

    // Private: no warning.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run_agent(&dir, &args).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("chmod 600"), "{err}");

    // World-writable: refused before anything starts.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run_agent(&dir, &args).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("writable by every local user"), "{err}");
    assert!(
        err.contains(&format!("chmod 600 {}", token.display())),
        "{err}"
    );

    // Inline secrets in a config file others can read: the loud kind.
    write_with_mode(
        &config,
        "[[tokens]]\nname = \"ops\"\nrole = \"operator\"\nsecret = \"0123456789abcdef-inline\"\n",
        0o644,
    );
    let out = run_agent(&dir, &args).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("holds token secrets"))
        .unwrap_or_else(|| panic!("no warning about inline secrets:\n{err}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains(&format!("chmod 600 {}", config.display())),
        "{line}"
    );
    assert!(!err.contains("0123456789abcdef-inline"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_and_errors_never_print_the_database_password() {
    let bin = binary("leasehold-agent").await.unwrap();
    let secret_url = format!("postgres://leasehold:{PASSWORD}@127.0.0.1:1/leasehold");
    let refused_url = format!("mysql://root:{PASSWORD}@h/db");
    // (arguments, LEASEHOLD_DATABASE_URL when not the PostgreSQL one)
    let cases: [(&[&str], Option<&str>); 8] = [
        (&["--help"], None),
        (&["run", "--help"], None),
        (&["migrate", "--help"], None),
        (&["bench", "--help"], None),
        (&["help", "run"], None),
        // Errors: a refused scheme and an unreachable database.
        (&["migrate"], Some(&refused_url)),
        (&["migrate"], None),
        (
            &["run", "--handlers", "noop", "--listen", "off"],
            Some(&refused_url),
        ),
    ];
    for (args, url) in cases {
        let mut command = Command::new(&bin);
        command
            .args(args)
            .env("LEASEHOLD_DATABASE_URL", url.unwrap_or(&secret_url))
            .env("DATABASE_URL", &secret_url);
        let out = tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains(PASSWORD),
            "{args:?} printed the password:\n{text}"
        );
        if args.len() == 2 && args[1] == "--help" {
            // The variable is named, its value is not.
            assert!(text.contains("LEASEHOLD_DATABASE_URL"), "{args:?}:\n{text}");
        }
    }
}
