//! The schema, as versioned migrations: `migrations/sqlite/V*.sql` and
//! `migrations/postgres/V*.sql`, embedded at build time and applied by
//! refinery in order, each database keeping what it has applied in
//! [`HISTORY`]. A change to the schema is a new file in both directories
//! with the same version and name (a test holds them to that, and to the
//! same columns in the tables both have); an applied file never changes
//! (refinery refuses a database whose history disagrees with its files).
//!
//! The two dialects differ where SQLite and PostgreSQL do (`BLOB` and
//! `bytea`, rowids and `bigserial`, triggers and trigger functions). The
//! tape index is SQLite's alone (it points into the node's own segment
//! files); the cluster's tables are PostgreSQL's alone.
//!
//! Every version's statements are idempotent, so a database from before
//! migrations (no history) runs them all to fill in what it lacks, and
//! only SQLite's `ADD COLUMN` (V2), which cannot be, is recorded without
//! running where the column is there. V5's `ADD COLUMN`s are to V4's
//! tables, which no database from before migrations has. V6 moves V1's
//! `tokens` into `access_tokens` and drops it.

use refinery::Target;

use crate::StoreError;

mod sqlite_files {
    refinery::embed_migrations!("migrations/sqlite");
}

mod postgres_files {
    refinery::embed_migrations!("migrations/postgres");
}

/// Where each database records the migrations it has applied.
pub(crate) const HISTORY: &str = "hearth_migrations";

/// Taken while PostgreSQL's schema is migrated, so that nodes and
/// gateways starting together do not race (an arbitrary constant:
/// "hearth").
const POSTGRES_LOCK: i64 = 0x6865_6172_7468;

/// Brings a SQLite database to the newest schema, all of it in one
/// transaction.
pub(crate) fn sqlite(conn: &mut rusqlite::Connection) -> Result<(), StoreError> {
    let run = |target: Target, conn: &mut rusqlite::Connection| {
        let mut runner = sqlite_files::migrations::runner()
            .set_grouped(true)
            .set_target(target);
        runner.set_migration_table_name(HISTORY);
        runner.run(conn)
    };
    if sqlite_predates_history_with_traces(conn)? {
        run(Target::Version(1), conn)?;
        run(Target::FakeVersion(2), conn)?;
    }
    run(Target::Latest, conn)?;
    Ok(())
}

/// Whether `conn` is a database from before migrations whose logs have
/// V2's column already.
fn sqlite_predates_history_with_traces(
    conn: &rusqlite::Connection,
) -> Result<bool, rusqlite::Error> {
    let has_history: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [HISTORY],
        |r| r.get(0),
    )?;
    if has_history {
        return Ok(false);
    }
    conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('logs') WHERE name = 'trace_id'",
        [],
        |r| r.get(0),
    )
}

/// How long a member whose role may not migrate waits for one that may.
const SCHEMA_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Brings the cluster's PostgreSQL database to the newest schema, in one
/// transaction, under a lock that members starting together queue on. A
/// database already there is only read. A member whose role may not
/// change the schema (a node's: `PgStore::grant_node_role`) waits, up to
/// [`SCHEMA_WAIT`], for a gateway to migrate it and grant the role.
pub(crate) async fn postgres(client: &mut tokio_postgres::Client) -> Result<(), StoreError> {
    let latest = postgres_latest();
    let may_migrate: bool = client
        .query_one(
            "SELECT has_schema_privilege(current_schema(), 'CREATE')",
            &[],
        )
        .await?
        .get(0);
    if !may_migrate {
        return until_migrated(client, latest).await;
    }
    if postgres_applied(client).await? == Some(latest) {
        return Ok(());
    }
    client
        .execute("SELECT pg_advisory_lock($1)", &[&POSTGRES_LOCK])
        .await?;
    let mut runner = postgres_files::migrations::runner().set_grouped(true);
    runner.set_migration_table_name(HISTORY);
    let migrated = runner.run_async(client).await;
    // A failed migration's error is the one to report, whatever the
    // unlock says (the lock goes with the session anyway).
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&POSTGRES_LOCK])
        .await;
    migrated?;
    unlocked?;
    Ok(())
}

/// Waits until the schema is at `latest` and this role may read it.
async fn until_migrated(client: &tokio_postgres::Client, latest: i32) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        let applied = match postgres_applied(client).await {
            Ok(v) => v,
            // Not granted yet: no gateway has started with this role.
            Err(StoreError::Postgres(e))
                if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) =>
            {
                None
            }
            Err(e) => return Err(e),
        };
        match applied {
            Some(v) if v == latest => return Ok(()),
            Some(v) if v > latest => {
                return Err(StoreError::Schema(format!(
                    "the store's schema is at version {v}, newer than this build's {latest}: \
                     run this member's newer build"
                )));
            }
            _ if started.elapsed() >= SCHEMA_WAIT => {
                return Err(StoreError::Schema(format!(
                    "after {} s the store's schema is {} and this build needs version {latest}; \
                     this member's role may not migrate it (a node's role): start a gateway of \
                     this build, with --store-node-role naming this role",
                    SCHEMA_WAIT.as_secs(),
                    applied.map_or("not readable by this role".to_string(), |v| format!(
                        "at version {v}"
                    )),
                )));
            }
            _ => {
                if !said {
                    tracing::info!(
                        "waiting for a gateway to migrate the store's schema to version {latest} \
                         and grant this role (it may not migrate)"
                    );
                    said = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
    }
}

/// The newest version this build's PostgreSQL migrations reach.
fn postgres_latest() -> i32 {
    postgres_files::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| m.version())
        .max()
        .unwrap_or(0)
}

/// The newest version `client`'s database has applied, if it keeps a
/// history.
async fn postgres_applied(client: &tokio_postgres::Client) -> Result<Option<i32>, StoreError> {
    let kept: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&HISTORY])
        .await?
        .get(0);
    if !kept {
        return Ok(None);
    }
    let row = client
        .query_one(&format!("SELECT max(version) FROM {HISTORY}"), &[])
        .await?;
    Ok(row.get(0))
}

/// PostgreSQL's migrations' SQL, in version order.
#[cfg(test)]
pub(crate) fn postgres_sql() -> Vec<String> {
    let mut all: Vec<(i32, String)> = postgres_files::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| (m.version(), m.sql().unwrap_or_default().to_string()))
        .collect();
    all.sort();
    all.into_iter().map(|(_, sql)| sql).collect()
}

/// Each dialect's migrations as (version, name).
#[cfg(test)]
pub(crate) fn versions() -> [Vec<(i32, String)>; 2] {
    // In version order (the embedded list is in file-name order, V10
    // before V2; refinery applies them by version).
    let list = |runner: refinery::Runner| {
        let mut all = runner
            .get_migrations()
            .iter()
            .map(|m| (m.version(), m.name().to_string()))
            .collect::<Vec<_>>();
        all.sort();
        all
    };
    [
        list(sqlite_files::migrations::runner()),
        list(postgres_files::migrations::runner()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn columns(conn: &Connection, table: &str) -> Vec<String> {
        let mut st = conn
            .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
            .unwrap();
        st.query_map([table], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn history(conn: &Connection) -> Vec<i64> {
        let mut st = conn
            .prepare(&format!("SELECT version FROM {HISTORY} ORDER BY version"))
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn both_dialects_have_the_same_migrations() {
        let [sqlite, postgres] = versions();
        assert!(!sqlite.is_empty());
        assert_eq!(
            sqlite, postgres,
            "each migration needs a file in both directories"
        );
        let numbers: Vec<i32> = sqlite.iter().map(|(v, _)| *v).collect();
        let expected: Vec<i32> = (1..=numbers.len() as i32).collect();
        assert_eq!(numbers, expected, "versions count up from 1 without gaps");
    }

    #[test]
    fn a_new_database_gets_every_migration_once() {
        let mut conn = Connection::open_in_memory().unwrap();
        sqlite(&mut conn).unwrap();
        sqlite(&mut conn).unwrap();
        assert_eq!(history(&conn), (1..=10).collect::<Vec<_>>());
        assert!(columns(&conn, "logs").contains(&"trace_id".to_string()));
        assert!(!columns(&conn, "log_usage").is_empty());
    }

    /// The schema as `SqliteStore::open` created it before migrations, at
    /// its last state (traces and log quotas included) and before traces.
    const BEFORE_MIGRATIONS: &str = "
        CREATE TABLE tenants (name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL);
        CREATE TABLE kv (tenant TEXT NOT NULL, function TEXT NOT NULL, key BLOB NOT NULL,
            value BLOB NOT NULL, PRIMARY KEY (tenant, function, key)) WITHOUT ROWID;
        CREATE TABLE kv_usage (tenant TEXT PRIMARY KEY, bytes INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE logs (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL,
            function TEXT NOT NULL, version INTEGER NOT NULL, invocation TEXT NOT NULL,
            ts_ms INTEGER NOT NULL, stream TEXT NOT NULL, level TEXT NOT NULL,
            message TEXT NOT NULL);
        INSERT INTO tenants VALUES ('t', 1);
        INSERT INTO kv VALUES ('t', 'f', x'6b', x'76616c7565');
        INSERT INTO kv_usage VALUES ('t', 6);
        INSERT INTO logs (tenant, function, version, invocation, ts_ms, stream, level, message)
            VALUES ('t', 'f', 1, 'i', 1, 'stdout', 'info', 'four');
    ";

    #[test]
    fn a_database_from_before_traces_gains_the_column_and_its_usage() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(BEFORE_MIGRATIONS).unwrap();
        sqlite(&mut conn).unwrap();
        assert_eq!(history(&conn), (1..=10).collect::<Vec<_>>());
        assert!(columns(&conn, "logs").contains(&"trace_id".to_string()));
        // Counted once, not again over what was counted.
        assert_eq!(count(&conn, "SELECT bytes FROM kv_usage"), 6);
        assert_eq!(count(&conn, "SELECT bytes FROM log_usage"), 4);
        assert_eq!(count(&conn, "SELECT count(*) FROM logs"), 1);
    }

    #[test]
    fn a_database_from_before_migrations_with_traces_keeps_what_it_has() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(BEFORE_MIGRATIONS).unwrap();
        conn.execute_batch(
            "ALTER TABLE logs ADD COLUMN trace_id TEXT;
             CREATE TABLE log_usage (tenant TEXT NOT NULL, function TEXT NOT NULL,
                 bytes INTEGER NOT NULL, PRIMARY KEY (tenant, function)) WITHOUT ROWID;
             INSERT INTO log_usage VALUES ('t', 'f', 4);",
        )
        .unwrap();
        sqlite(&mut conn).unwrap();
        assert_eq!(history(&conn), (1..=10).collect::<Vec<_>>());
        assert_eq!(count(&conn, "SELECT bytes FROM log_usage"), 4);
        // The triggers V1 and V3 create are there and count.
        conn.execute_batch(
            "INSERT INTO logs (tenant, function, version, invocation, ts_ms, stream, level, message)
                 VALUES ('t', 'f', 1, 'j', 2, 'stdout', 'info', 'sixsix');
             INSERT INTO kv VALUES ('t', 'g', x'6b', x'76');",
        )
        .unwrap();
        assert_eq!(count(&conn, "SELECT bytes FROM log_usage"), 10);
        assert_eq!(count(&conn, "SELECT bytes FROM kv_usage"), 8);
    }

    #[test]
    fn a_database_migrated_by_a_newer_hearth_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        sqlite(&mut conn).unwrap();
        conn.execute(
            &format!(
                "INSERT INTO {HISTORY} (version, name, applied_on, checksum) \
                 VALUES (99, 'from_the_future', '2027-01-01T00:00:00Z', '1')"
            ),
            [],
        )
        .unwrap();
        let err = sqlite(&mut conn).unwrap_err().to_string();
        assert!(err.contains("99"), "{err}");
    }

    #[test]
    fn an_applied_migration_that_changed_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        sqlite(&mut conn).unwrap();
        conn.execute(
            &format!("UPDATE {HISTORY} SET checksum = '1' WHERE version = 2"),
            [],
        )
        .unwrap();
        assert!(sqlite(&mut conn).is_err());
    }

    /// The tables both dialects have, with their columns in order, after
    /// every migration: SQLite's and PostgreSQL's agree. A database from
    /// before migrations (the old schema, with data) comes through too.
    /// A client whose connection runs on the test's runtime.
    async fn connect(url: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    #[tokio::test]
    async fn postgres_migrates_to_the_columns_sqlite_has() {
        hearth_test_support::require!(Postgres);
        let pg = hearth_test_support::TempPostgres::start().unwrap();
        let url = pg.create_database("migrations").unwrap();
        let mut client = connect(&url).await;
        postgres(&mut client).await.unwrap();
        postgres(&mut client).await.unwrap();
        let mut lite = Connection::open_in_memory().unwrap();
        sqlite(&mut lite).unwrap();

        let rows = client
            .query(
                "SELECT table_name::text, column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
                &[],
            )
            .await
            .unwrap();
        let mut pg_tables: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for r in rows {
            pg_tables.entry(r.get(0)).or_default().push(r.get(1));
        }
        let mut shared = 0;
        for (table, cols) in &pg_tables {
            let lite_cols = columns(&lite, table);
            if !lite_cols.is_empty() {
                shared += 1;
                assert_eq!(&lite_cols, cols, "table {table}");
            }
        }
        assert!(shared >= 10, "only {shared} tables in both: {pg_tables:?}");
        let applied: Vec<i32> = client
            .query(
                &format!("SELECT version FROM {HISTORY} ORDER BY version"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(applied, (1..=10).collect::<Vec<_>>());

        // The old schema, with a tenant's KV and logs in it.
        let url = pg.create_database("before").unwrap();
        let mut old = connect(&url).await;
        old.batch_execute(
            "CREATE TABLE tenants (name TEXT PRIMARY KEY, created_ms BIGINT NOT NULL);
             CREATE TABLE kv (tenant TEXT NOT NULL, function TEXT NOT NULL, key BYTEA NOT NULL,
                 value BYTEA NOT NULL, PRIMARY KEY (tenant, function, key));
             CREATE TABLE logs (id BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL,
                 function TEXT NOT NULL, version BIGINT NOT NULL, invocation TEXT NOT NULL,
                 ts_ms BIGINT NOT NULL, stream TEXT NOT NULL, level TEXT NOT NULL,
                 message TEXT NOT NULL);
             INSERT INTO tenants VALUES ('t', 1);
             INSERT INTO kv VALUES ('t', 'f', 'k', 'value');
             INSERT INTO logs (tenant, function, version, invocation, ts_ms, stream, level, message)
                 VALUES ('t', 'f', 1, 'i', 1, 'stdout', 'info', 'four');",
        )
        .await
        .unwrap();
        postgres(&mut old).await.unwrap();
        for (sql, want) in [
            ("SELECT bytes FROM kv_usage", 6),
            ("SELECT bytes FROM log_usage", 4),
            ("SELECT count(*) FROM logs WHERE trace_id IS NULL", 1),
        ] {
            let got: i64 = old.query_one(sql, &[]).await.unwrap().get(0);
            assert_eq!(got, want, "{sql}");
        }
    }
}
