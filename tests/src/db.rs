//! A fresh PostgreSQL database per test, so tests run in parallel without seeing each other.
//!
//! Each database is a copy (`CREATE DATABASE … TEMPLATE`) of a template database that holds
//! the migrated schema. The template is named after a hash of `migrations/postgres/`, so a
//! changed migration gets a new template, and it is built once for all test processes: under an
//! advisory lock, as `<name>_building`, renamed to its final name only once migrated (a template
//! half-built by a crashed run is never used, just rebuilt). Once complete it refuses
//! connections, since a copy fails while anyone is connected to the template.
//!
//! Dropping a [`TestDb`] does nothing; tests end with [`TestDb::drop_db`].

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use leasehold_shared::InputLimits;
use leasehold_shared::store::postgres::{MIGRATOR, PgStore};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Row};
use tokio::sync::OnceCell;

use crate::server;

/// Connections in [`TestDb::pool`].
pub const DEFAULT_POOL_SIZE: u32 = 8;
/// How long a pool waits for a connection before failing.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// `application_name` of the harness's connections.
pub const APPLICATION_NAME: &str = "leasehold-tests";

/// Key of the advisory lock (on the admin database) held while a template is built.
const TEMPLATE_LOCK_KEY: i64 = 0x6c68_7470_6c62_6c64; // "lhtplbld"
/// SQLSTATE `object_in_use`: the template is being accessed by other users.
const OBJECT_IN_USE: &str = "55006";

static TEMPLATE: OnceCell<String> = OnceCell::const_new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A database of the test's own, migrated to the current schema.
#[derive(Debug)]
pub struct TestDb {
    /// URL of this test's database.
    pub url: String,
    /// A pool of [`DEFAULT_POOL_SIZE`] connections to it.
    pub pool: PgPool,
    name: String,
    admin: PgConnectOptions,
}

impl TestDb {
    /// Creates a fresh database from the migrated template, finding or starting the server and
    /// building the template first if this process has not yet.
    pub async fn new() -> anyhow::Result<TestDb> {
        let admin_url = server::admin_url().await?;
        let admin = connect_options(&admin_url)?;
        let template = TEMPLATE
            .get_or_try_init(|| ensure_template(&admin))
            .await
            .context("preparing the template database")?
            .clone();
        Self::create(&admin_url, admin, Some(&template)).await
    }

    /// Creates a fresh, empty database (no schema): for testing migrations themselves.
    pub async fn new_empty() -> anyhow::Result<TestDb> {
        let admin_url = server::admin_url().await?;
        let admin = connect_options(&admin_url)?;
        Self::create(&admin_url, admin, None).await
    }

    async fn create(
        admin_url: &str,
        admin: PgConnectOptions,
        template: Option<&str>,
    ) -> anyhow::Result<TestDb> {
        let name = format!(
            "lh_t_{}_{}_{:08x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            RandomState::new().hash_one(std::time::SystemTime::now()) & 0xffff_ffff
        );
        let mut conn = PgConnection::connect_with(&admin)
            .await
            .context("connecting to the admin database")?;
        let created = match template {
            Some(template) => create_from_template(&mut conn, &name, template).await,
            None => sqlx::raw_sql(AssertSqlSafe(format!(
                "CREATE DATABASE {}",
                quote_ident(&name)
            )))
            .execute(&mut conn)
            .await
            .map(drop)
            .with_context(|| format!("creating empty database {name}")),
        };
        let _ = conn.close().await;
        created?;

        let options = admin.clone().database(&name);
        let pool = pool_options(DEFAULT_POOL_SIZE)
            .connect_with(options)
            .await
            .with_context(|| format!("connecting to test database {name}"))?;
        Ok(TestDb {
            url: url_with_database(admin_url, &name),
            pool,
            name,
            admin,
        })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connection options for this test's database.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.admin.clone().database(&self.name)
    }

    /// A store over [`TestDb::pool`] with the default input limits.
    pub fn store(&self) -> PgStore {
        PgStore::from_pool(self.pool.clone(), InputLimits::default())
    }

    /// A new, separate pool of up to `max` connections to this test's database.
    pub async fn pool_with(&self, max: u32) -> anyhow::Result<PgPool> {
        pool_options(max)
            .connect_with(self.connect_options())
            .await
            .with_context(|| format!("connecting a pool of {max} to {}", self.name))
    }

    /// Closes the pool and drops the database, disconnecting anyone still connected (pools
    /// from [`TestDb::pool_with`] included).
    pub async fn drop_db(self) -> anyhow::Result<()> {
        self.pool.close().await;
        let mut conn = PgConnection::connect_with(&self.admin)
            .await
            .context("connecting to the admin database")?;
        let dropped = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote_ident(&self.name)
        )))
        .execute(&mut conn)
        .await
        .with_context(|| format!("dropping test database {}", self.name));
        let _ = conn.close().await;
        dropped.map(drop)
    }
}

fn connect_options(url: &str) -> anyhow::Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)
        .with_context(|| format!("bad PostgreSQL URL {url}"))?
        .application_name(APPLICATION_NAME)
        .disable_statement_logging())
}

fn pool_options(max: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max.max(1))
        .acquire_timeout(ACQUIRE_TIMEOUT)
}

/// `CREATE DATABASE name TEMPLATE template`, retried while the template is busy.
async fn create_from_template(
    conn: &mut PgConnection,
    name: &str,
    template: &str,
) -> anyhow::Result<()> {
    let statement = format!(
        "CREATE DATABASE {} TEMPLATE {}",
        quote_ident(name),
        quote_ident(template)
    );
    retry_in_use(conn, &statement)
        .await
        .with_context(|| format!("creating test database {name} from {template}"))
}

/// Runs `statement`, retrying for a while when it fails with `object_in_use` (a database it
/// needs to itself is still in use, typically by a backend that is just exiting).
async fn retry_in_use(conn: &mut PgConnection, statement: &str) -> anyhow::Result<()> {
    const ATTEMPTS: u32 = 50;
    for attempt in 1..=ATTEMPTS {
        match sqlx::raw_sql(AssertSqlSafe(statement.to_string()))
            .execute(&mut *conn)
            .await
        {
            Ok(_) => return Ok(()),
            Err(sqlx::Error::Database(error))
                if error.code().as_deref() == Some(OBJECT_IN_USE) && attempt < ATTEMPTS =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
    bail!("`{statement}` kept failing: database in use")
}

/// Makes sure the complete template for the current migrations exists; returns its name.
async fn ensure_template(admin: &PgConnectOptions) -> anyhow::Result<String> {
    let name = format!("lh_tpl_{:016x}", migrations_hash()?);
    let mut conn = PgConnection::connect_with(admin)
        .await
        .context("connecting to the admin database")?;
    let result = ensure_template_on(&mut conn, admin, &name).await;
    // Once per process: drop databases left by test processes that died before dropping them
    // (a failed assertion skips `drop_db`), so the long-lived throwaway server does not fill up.
    if let Err(error) = drop_orphans(&mut conn).await {
        eprintln!("leasehold-tests: could not drop leftover test databases: {error:#}");
    }
    // Closing the session also releases the advisory lock, on success and error alike.
    let _ = conn.close().await;
    result.map(|()| name)
}

/// Drops `lh_t_<pid>_…` databases whose test process is gone, on the harness's own throwaway
/// server only: that server lives in this host's temporary directory, so its test processes
/// share this PID namespace. A server given by `DATABASE_URL` may be shared with other hosts
/// and is left alone, as are templates (another checkout may be using its own). A database
/// with a connection is never dropped (no FORCE).
async fn drop_orphans(conn: &mut PgConnection) -> anyhow::Result<()> {
    let own_server = std::env::var("DATABASE_URL").map_or(true, |url| url.is_empty());
    if !own_server || !std::path::Path::new("/proc/self").exists() {
        return Ok(());
    }
    let rows = sqlx::query(
        "SELECT d.datname FROM pg_database d
         WHERE d.datname LIKE 'lh\\_t\\_%'
           AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)",
    )
    .fetch_all(&mut *conn)
    .await
    .context("listing test databases")?;
    for row in rows {
        let name: String = row.try_get("datname")?;
        let pid = name
            .strip_prefix("lh_t_")
            .and_then(|rest| rest.split('_').next())
            .and_then(|p| p.parse::<u32>().ok());
        let gone = pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if gone {
            // Fails harmlessly if someone connected since the listing.
            let _ = sqlx::raw_sql(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {}",
                quote_ident(&name)
            )))
            .execute(&mut *conn)
            .await;
        }
    }
    Ok(())
}

async fn ensure_template_on(
    conn: &mut PgConnection,
    admin: &PgConnectOptions,
    name: &str,
) -> anyhow::Result<()> {
    if database_exists(conn, name).await? {
        return Ok(());
    }
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(TEMPLATE_LOCK_KEY)
        .execute(&mut *conn)
        .await
        .context("taking the template lock")?;
    // Another process may have built it while this one waited.
    if database_exists(conn, name).await? {
        return Ok(());
    }

    let building = format!("{name}_building");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        quote_ident(&building)
    )))
    .execute(&mut *conn)
    .await
    .with_context(|| format!("dropping leftover {building}"))?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE DATABASE {}",
        quote_ident(&building)
    )))
    .execute(&mut *conn)
    .await
    .with_context(|| format!("creating {building}"))?;

    let pool = pool_options(2)
        .connect_with(admin.clone().database(&building))
        .await
        .with_context(|| format!("connecting to {building}"))?;
    let migrated = MIGRATOR.run(&pool).await;
    pool.close().await;
    migrated.with_context(|| format!("migrating {building}"))?;

    retry_in_use(
        conn,
        &format!(
            "ALTER DATABASE {} RENAME TO {}",
            quote_ident(&building),
            quote_ident(name)
        ),
    )
    .await
    .with_context(|| format!("renaming {building} to {name}"))?;
    // Nobody may connect to it from now on, so copying it never finds it busy.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
        quote_ident(name)
    )))
    .execute(&mut *conn)
    .await
    .with_context(|| format!("closing {name} to connections"))?;

    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(TEMPLATE_LOCK_KEY)
        .execute(&mut *conn)
        .await
        .context("releasing the template lock")?;
    Ok(())
}

async fn database_exists(conn: &mut PgConnection, name: &str) -> anyhow::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut *conn)
        .await
        .with_context(|| format!("looking up database {name}"))
}

/// The directory of the PostgreSQL migrations.
pub fn migrations_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("migrations")
        .join("postgres")
}

/// FNV-1a (64-bit) of the names and contents of the migration files, in name order.
pub fn migrations_hash() -> anyhow::Result<u64> {
    let dir = migrations_dir();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.file_type()?.is_file() {
            files.push(entry.path());
        }
    }
    if files.is_empty() {
        bail!("no migrations in {}", dir.display());
    }
    files.sort();
    let mut hash = Fnv1a::new();
    for path in files {
        let contents =
            std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        hash.write(file_name.unwrap_or_default().as_bytes());
        hash.write(&[0]);
        hash.write(&contents);
        hash.write(&[0]);
    }
    Ok(hash.finish())
}

/// 64-bit FNV-1a: a small, stable hash (std's hashers are neither).
struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Self(Self::OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Quotes an SQL identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `url` with its database (path) replaced by `database`, query string kept.
pub fn url_with_database(url: &str, database: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let after_authority = &rest[authority_end..];
    let path_end = if after_authority.starts_with('/') {
        after_authority
            .find(['?', '#'])
            .unwrap_or(after_authority.len())
    } else {
        0
    };
    format!(
        "{}{}/{}{}",
        &url[..scheme_end],
        &rest[..authority_end],
        database,
        &after_authority[path_end..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_database_is_replaced() {
        assert_eq!(
            url_with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            url_with_database("postgres://u:p@h:1/test?sslmode=disable", "x"),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(url_with_database("postgres://h:1", "x"), "postgres://h:1/x");
        assert_eq!(
            url_with_database("postgres://h?host=/tmp", "x"),
            "postgres://h/x?host=/tmp"
        );
    }

    #[test]
    fn fnv1a_matches_reference() {
        let mut hash = Fnv1a::new();
        hash.write(b"a");
        assert_eq!(hash.finish(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
