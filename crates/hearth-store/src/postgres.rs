//! The cluster's shared state in PostgreSQL: tenants, tokens, functions and
//! their versions, fallback modes, KV and logs — everything that must
//! outlive a node. The tape index is not here: it points into one node's
//! segment files, so it stays in that node's SQLite ([`SplitStore`]
//! joins the two behind [`Store`](crate::Store)).
//!
//! The schema is the SQLite one ported (`BLOB` → `bytea`, rowids →
//! `bigserial`), migration by migration (`crate::migrations`). Where
//! SQLite relies on its single writer, PostgreSQL gets a lock: version
//! numbering takes an advisory transaction lock on the function's name,
//! and migrating one of its own, so nodes starting together do not race
//! on `CREATE TABLE`.
//!
//! Calls are synchronous (the `postgres` crate), like SQLite's; callers
//! already run store calls on blocking threads. A few connections are kept
//! open; one that PostgreSQL closed is reopened on its next use.
//!
//! [`SplitStore`]: crate::SplitStore

use hearth_core::{Colocation, FunctionSpec, FunctionVersion};
use postgres::{Client, NoTls, Row};
use r2d2::Pool;
use r2d2_postgres::PostgresConnectionManager;

use crate::cluster::{Change, notify};
use crate::{
    FunctionMode, FunctionSummary, JournalKey, LogQuery, LogRecord, LogStream, Principal, Role,
    StoreError, parse_colocation, sha256_hex,
};

/// Connections a node or gateway keeps open to the cluster's database.
const CONNECTIONS: u32 = 4;
/// How long a store call waits for a free connection (or a new one).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The cluster's registry, KV and logs in PostgreSQL.
pub struct PgStore {
    /// `None` only while it is dropped (see `Drop`).
    pool: Option<Pool<PostgresConnectionManager<NoTls>>>,
    /// For connections of its own (the change listener's).
    pub(crate) config: postgres::Config,
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/db`) and brings its
    /// schema to this build's (`crate::migrations`).
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let config: postgres::Config = url.parse()?;
        // The first connection is made here, so an unreachable or refusing
        // server is the caller's error at once (the pool would retry it
        // for its whole timeout), and it migrates the schema; the pool then
        // opens connections as calls need them. One that broke is dropped
        // when it is given back (the pool asks the client whether it
        // closed), so no round trip is spent testing each as it is taken.
        let pool = tokio::task::block_in_place(|| -> Result<_, StoreError> {
            let mut first = config.connect(NoTls)?;
            crate::migrations::postgres(&mut first)?;
            Ok(Pool::builder()
                .max_size(CONNECTIONS)
                .min_idle(Some(0))
                .connection_timeout(CONNECT_TIMEOUT)
                .test_on_check_out(false)
                .build_unchecked(PostgresConnectionManager::new(config.clone(), NoTls)))
        })?;
        Ok(PgStore {
            pool: Some(pool),
            config,
        })
    }

    /// Runs `f` on a connection from the pool (r2d2: at most
    /// [`CONNECTIONS`], opened as needed, broken ones replaced).
    ///
    /// The `postgres` client runs its own small runtime, which must not be
    /// started on an async worker: `block_in_place` steps off it (and is a
    /// plain call on a blocking or non-Tokio thread).
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        tokio::task::block_in_place(|| {
            let pool = self
                .pool
                .as_ref()
                .expect("the pool lives until the store drops");
            let mut client = pool.get()?;
            Ok(f(&mut client)?)
        })
    }

    pub fn create_tenant(&self, name: &str) -> Result<(), StoreError> {
        let inserted = self.with(|c| {
            c.execute(
                "INSERT INTO tenants (name, created_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&name, &hearth_core::unix_time_ms()],
            )
        })?;
        if inserted == 0 {
            return Err(StoreError::TenantExists(name.to_string()));
        }
        Ok(())
    }

    pub fn tenant_exists(&self, name: &str) -> Result<bool, StoreError> {
        self.with(|c| {
            Ok(
                c.query_opt("SELECT 1 FROM tenants WHERE name = $1", &[&name])?
                    .is_some(),
            )
        })
    }

    pub fn tenant_colocation(&self, tenant: &str) -> Result<Option<Colocation>, StoreError> {
        let text: Option<String> = self.with(|c| {
            Ok(c.query_opt(
                "SELECT colocation FROM tenant_settings WHERE tenant = $1",
                &[&tenant],
            )?
            .and_then(|r| r.get(0)))
        })?;
        parse_colocation(text)
    }

    pub fn set_tenant_colocation(
        &self,
        tenant: &str,
        mode: Option<Colocation>,
    ) -> Result<(), StoreError> {
        let mode = mode.map(Colocation::as_str);
        let written = self.with(|c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "INSERT INTO tenant_settings (tenant, colocation)
                 SELECT name, $2 FROM tenants WHERE name = $1
                 ON CONFLICT (tenant) DO UPDATE SET colocation = excluded.colocation",
                &[&tenant, &mode],
            )?;
            notify(
                &mut tx,
                &Change::Tenant {
                    tenant: tenant.to_string(),
                },
            )?;
            tx.commit()?;
            Ok(n)
        })?;
        if written == 0 {
            return Err(StoreError::NoSuchTenant(tenant.to_string()));
        }
        Ok(())
    }

    pub fn add_token(&self, tenant: &str, role: Role, token: &str) -> Result<(), StoreError> {
        let hash = sha256_hex(token.as_bytes());
        let row = self.with(|c| {
            let mut tx = c.transaction()?;
            tx.execute(
                "INSERT INTO tokens (hash, tenant, role, created_ms)
                 SELECT $1, name, $3, $4 FROM tenants WHERE name = $2
                 ON CONFLICT (hash) DO NOTHING",
                &[&hash, &tenant, &role.as_str(), &hearth_core::unix_time_ms()],
            )?;
            let row = tx.query_opt("SELECT tenant, role FROM tokens WHERE hash = $1", &[&hash])?;
            tx.commit()?;
            Ok(row)
        })?;
        match row {
            None => Err(StoreError::NoSuchTenant(tenant.to_string())),
            Some(r) if r.get::<_, &str>(0) == tenant && r.get::<_, &str>(1) == role.as_str() => {
                Ok(())
            }
            Some(_) => Err(StoreError::TokenTaken),
        }
    }

    pub fn authenticate(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        let hash = sha256_hex(token.as_bytes());
        let row = self
            .with(|c| c.query_opt("SELECT tenant, role FROM tokens WHERE hash = $1", &[&hash]))?;
        Ok(row.map(|r| Principal {
            tenant: r.get(0),
            role: if r.get::<_, &str>(1) == "admin" {
                Role::Admin
            } else {
                Role::Member
            },
        }))
    }

    pub fn create_version(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        spec: &FunctionSpec,
    ) -> Result<FunctionVersion, StoreError> {
        let spec_json = serde_json::to_string(spec).expect("FunctionSpec always serializes");
        let created_at_ms = hearth_core::unix_time_ms();
        let key = format!("{tenant}/{name}");
        let version = self.with(|c| {
            let mut tx = c.transaction()?;
            // One deploy of a name at a time, across the cluster; the
            // numbering rule is SqliteStore::create_version's.
            tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key])?;
            let last: i64 = tx
                .query_one(
                    "SELECT GREATEST(
                        (SELECT COALESCE(MAX(version), 0) FROM versions WHERE tenant = $1 AND name = $2),
                        (SELECT COALESCE(MAX(latest), 0) FROM functions WHERE tenant = $1 AND name = $2))",
                    &[&tenant, &name],
                )?
                .get(0);
            let version = last + 1;
            tx.execute(
                "INSERT INTO versions (tenant, name, version, artifact, spec, created_ms)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[&tenant, &name, &version, &artifact, &spec_json, &created_at_ms],
            )?;
            tx.execute(
                "INSERT INTO functions (tenant, name, latest) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, name) DO UPDATE SET latest = excluded.latest",
                &[&tenant, &name, &version],
            )?;
            tx.execute(
                "DELETE FROM modes WHERE tenant = $1 AND name = $2",
                &[&tenant, &name],
            )?;
            notify(&mut tx, &function_changed(tenant, name))?;
            tx.commit()?;
            Ok(version)
        })?;
        Ok(FunctionVersion {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version: version as u32,
            artifact: artifact.to_string(),
            spec: spec.clone(),
            created_at_ms,
        })
    }

    pub fn get_version(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        let version = version.map(i64::from);
        let row = self.with(|c| {
            c.query_opt(
                "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms
                 FROM functions f JOIN versions v ON v.tenant = f.tenant AND v.name = f.name
                 WHERE f.tenant = $1 AND f.name = $2 AND v.version = COALESCE($3, f.latest)",
                &[&tenant, &name, &version],
            )
        })?;
        row.as_ref().map(row_to_version).transpose()
    }

    pub fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms,
                        (SELECT COUNT(*) FROM versions c WHERE c.tenant = f.tenant AND c.name = f.name),
                        COALESCE(m.bounces, 0), COALESCE(m.pinned, false)
                 FROM functions f JOIN versions v
                   ON v.tenant = f.tenant AND v.name = f.name AND v.version = f.latest
                 LEFT JOIN modes m ON m.tenant = f.tenant AND m.name = f.name
                 WHERE f.tenant = $1 ORDER BY f.name",
                &[&tenant],
            )
        })?;
        rows.iter()
            .map(|r| {
                let latest = row_to_version(r)?;
                Ok(FunctionSummary {
                    name: latest.name.clone(),
                    latest,
                    versions: r.get::<_, i64>(6) as u32,
                    mode: FunctionMode {
                        bounces: r.get::<_, i64>(7) as u32,
                        pinned: r.get(8),
                    },
                })
            })
            .collect()
    }

    pub fn list_versions(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Vec<FunctionVersion>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms
                 FROM versions v JOIN functions f ON f.tenant = v.tenant AND f.name = v.name
                 WHERE v.tenant = $1 AND v.name = $2 ORDER BY v.version",
                &[&tenant, &name],
            )
        })?;
        rows.iter().map(row_to_version).collect()
    }

    pub fn delete_function(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            // The last version row stays as a tombstone, invisible without
            // its functions row, so a re-created function continues the
            // count (as in SqliteStore).
            let existed = tx.execute(
                "DELETE FROM functions WHERE tenant = $1 AND name = $2",
                &[&tenant, &name],
            )? > 0;
            if existed {
                tx.execute(
                    "DELETE FROM versions WHERE tenant = $1 AND name = $2
                       AND version < (SELECT MAX(version) FROM versions WHERE tenant = $1 AND name = $2)",
                    &[&tenant, &name],
                )?;
                for table in ["kv", "logs", "log_usage"] {
                    tx.execute(
                        &format!("DELETE FROM {table} WHERE tenant = $1 AND function = $2"),
                        &[&tenant, &name],
                    )?;
                }
                tx.execute(
                    "DELETE FROM modes WHERE tenant = $1 AND name = $2",
                    &[&tenant, &name],
                )?;
                notify(&mut tx, &function_changed(tenant, name))?;
            }
            tx.commit()?;
            Ok(existed)
        })
    }

    pub fn function_mode(&self, tenant: &str, name: &str) -> Result<FunctionMode, StoreError> {
        let row = self.with(|c| {
            c.query_opt(
                "SELECT bounces, pinned FROM modes WHERE tenant = $1 AND name = $2",
                &[&tenant, &name],
            )
        })?;
        Ok(row.map(|r| mode_of(&r)).unwrap_or_default())
    }

    pub fn record_bounce(
        &self,
        tenant: &str,
        name: &str,
        pin_after: u32,
    ) -> Result<FunctionMode, StoreError> {
        let pin_after = i64::from(pin_after);
        let row = self.with(|c| {
            let mut tx = c.transaction()?;
            let row = tx.query_one(
                "INSERT INTO modes (tenant, name, bounces, pinned) VALUES ($1, $2, 1, $3::bigint <= 1)
                 ON CONFLICT (tenant, name) DO UPDATE
                   SET bounces = modes.bounces + 1, pinned = (modes.bounces + 1 >= $3)
                 RETURNING bounces, pinned",
                &[&tenant, &name, &pin_after],
            )?;
            notify(&mut tx, &function_changed(tenant, name))?;
            tx.commit()?;
            Ok(row)
        })?;
        Ok(mode_of(&row))
    }

    pub fn referenced_artifacts(&self) -> Result<Vec<String>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT DISTINCT v.artifact FROM versions v JOIN functions f
                   ON f.tenant = v.tenant AND f.name = v.name",
                &[],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub fn kv_get(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let row = self.with(|c| {
            c.query_opt(
                "SELECT value FROM kv WHERE tenant = $1 AND function = $2 AND key = $3",
                &[&tenant, &function, &key],
            )
        })?;
        Ok(row.map(|r| r.get(0)))
    }

    pub fn kv_exists(&self, tenant: &str, function: &str, key: &[u8]) -> Result<bool, StoreError> {
        let row = self.with(|c| {
            c.query_opt(
                "SELECT 1 FROM kv WHERE tenant = $1 AND function = $2 AND key = $3",
                &[&tenant, &function, &key],
            )
        })?;
        Ok(row.is_some())
    }

    pub fn kv_set(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        value: &[u8],
        max_tenant_bytes: u64,
    ) -> Result<(), StoreError> {
        let within = self.with(|c| {
            let mut tx = c.transaction()?;
            if !put_within_quota(&mut tx, tenant, function, key, value, max_tenant_bytes)? {
                return Ok(false);
            }
            tx.commit()?;
            Ok(true)
        })?;
        if !within {
            return Err(StoreError::KvQuota {
                tenant: tenant.to_string(),
                max_bytes: max_tenant_bytes,
            });
        }
        Ok(())
    }

    pub fn kv_increment(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        delta: u64,
        max_tenant_bytes: u64,
    ) -> Result<u64, StoreError> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            // Taking the row lock first makes concurrent increments queue;
            // an absent key is inserted as 0 so that there is a row to lock.
            tx.execute(
                "INSERT INTO kv (tenant, function, key, value) VALUES ($1, $2, $3, '0')
                 ON CONFLICT (tenant, function, key) DO NOTHING",
                &[&tenant, &function, &key],
            )?;
            let current: Vec<u8> = tx
                .query_one(
                    "SELECT value FROM kv WHERE tenant = $1 AND function = $2 AND key = $3
                     FOR UPDATE",
                    &[&tenant, &function, &key],
                )?
                .get(0);
            let next = match crate::kv_counter_next(Some(&current), delta) {
                Ok(next) => next,
                Err(e) => return Ok(Err(e)),
            };
            let text = next.to_string();
            if !put_within_quota(
                &mut tx,
                tenant,
                function,
                key,
                text.as_bytes(),
                max_tenant_bytes,
            )? {
                return Ok(Err(StoreError::KvQuota {
                    tenant: tenant.to_string(),
                    max_bytes: max_tenant_bytes,
                }));
            }
            tx.commit()?;
            Ok(Ok(next))
        })?
    }

    pub fn kv_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let row =
            self.with(|c| c.query_opt("SELECT bytes FROM kv_usage WHERE tenant = $1", &[&tenant]))?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0)) as u64)
    }

    pub fn kv_delete(&self, tenant: &str, function: &str, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.with(|c| {
            c.execute(
                "DELETE FROM kv WHERE tenant = $1 AND function = $2 AND key = $3",
                &[&tenant, &function, &key],
            )
        })? > 0)
    }

    pub fn kv_list(
        &self,
        tenant: &str,
        function: &str,
        prefix: &[u8],
        limit: u32,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        // bytea compares bytewise, as SQLite's blobs do (see SqliteStore).
        let limit = i64::from(limit);
        let rows = self.with(|c| {
            c.query(
                "SELECT key FROM kv WHERE tenant = $1 AND function = $2 AND key >= $3
                 ORDER BY key LIMIT $4",
                &[&tenant, &function, &prefix, &limit],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| r.get::<_, Vec<u8>>(0))
            .take_while(|k| k.starts_with(prefix))
            .collect())
    }

    pub fn journal_append(
        &self,
        key: &JournalKey<'_>,
        seq: u32,
        event: &[u8],
    ) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO journal (tenant, function, invocation, seq, event, created_ms)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                &[
                    &key.tenant,
                    &key.function,
                    &key.invocation,
                    &i64::from(seq),
                    &event,
                    &hearth_core::unix_time_ms(),
                ],
            )
        })?;
        Ok(())
    }

    pub fn journal_read(&self, key: &JournalKey<'_>) -> Result<Vec<Vec<u8>>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT event FROM journal
                 WHERE tenant = $1 AND function = $2 AND invocation = $3 ORDER BY seq",
                &[&key.tenant, &key.function, &key.invocation],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub fn journal_forget(&self, key: &JournalKey<'_>) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "DELETE FROM journal WHERE tenant = $1 AND function = $2 AND invocation = $3",
                &[&key.tenant, &key.function, &key.invocation],
            )
        })?;
        Ok(())
    }

    pub fn journal_sweep(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.with(|c| c.execute("DELETE FROM journal WHERE created_ms < $1", &[&before_ms]))
    }

    pub fn append_logs(&self, records: &[LogRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        self.with(|c| {
            let mut tx = c.transaction()?;
            let stmt = tx.prepare(
                "INSERT INTO logs (tenant, function, version, invocation, ts_ms, stream, level, message, trace_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )?;
            for r in records {
                tx.execute(
                    &stmt,
                    &[
                        &r.tenant,
                        &r.function,
                        &i64::from(r.version),
                        &r.invocation_id,
                        &r.ts_ms,
                        &r.stream.as_str(),
                        &r.level,
                        &r.message,
                        &r.trace_id,
                    ],
                )?;
            }
            tx.commit()
        })
    }

    pub fn log_usage(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT tenant, function, bytes FROM log_usage WHERE bytes > 0",
                &[],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get::<_, i64>(2).max(0) as u64))
            .collect())
    }

    pub fn trim_logs(&self, tenant: &str, function: &str, keep: u64) -> Result<u64, StoreError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.with(|c| {
            c.execute(
                "DELETE FROM logs WHERE tenant = $1 AND function = $2 AND id <= (
                     SELECT id FROM (
                         SELECT id, SUM(octet_length(message)) OVER (ORDER BY id DESC) AS newer
                         FROM logs WHERE tenant = $1 AND function = $2
                     ) AS t WHERE newer > $3 ORDER BY id DESC LIMIT 1
                 )",
                &[&tenant, &function, &keep],
            )
        })
    }

    pub fn expire_logs(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.with(|c| c.execute("DELETE FROM logs WHERE ts_ms < $1", &[&before_ms]))
    }

    pub fn read_logs(
        &self,
        tenant: &str,
        function: &str,
        query: &LogQuery,
    ) -> Result<Vec<LogRecord>, StoreError> {
        let limit = i64::from(if query.limit == 0 { 100 } else { query.limit });
        // Newest first, unless following: then the oldest after the cursor.
        let order = if query.after.is_some() { "ASC" } else { "DESC" };
        let rows = self.with(|c| {
            c.query(
                &format!(
                    "SELECT id, tenant, function, version, invocation, ts_ms, stream, level, message, trace_id
                     FROM logs WHERE tenant = $1 AND function = $2
                       AND ($3::text IS NULL OR invocation = $3)
                       AND ($5::bigint IS NULL OR id > $5)
                     ORDER BY id {order} LIMIT $4"
                ),
                &[
                    &tenant,
                    &function,
                    &query.invocation_id,
                    &limit,
                    &query.after,
                ],
            )
        })?;
        let record = |r: &postgres::Row| LogRecord {
            id: r.get(0),
            tenant: r.get(1),
            function: r.get(2),
            version: r.get::<_, i64>(3) as u32,
            invocation_id: r.get(4),
            ts_ms: r.get(5),
            stream: LogStream::parse(r.get(6)),
            level: r.get(7),
            message: r.get(8),
            trace_id: r.get(9),
        };
        Ok(if query.after.is_some() {
            rows.iter().map(record).collect()
        } else {
            rows.iter().rev().map(record).collect()
        })
    }
}

impl Drop for PgStore {
    /// A `postgres` client closes its connection by blocking on its own
    /// runtime, which panics on an async worker (where a daemon drops its
    /// store): close them on a plain thread instead.
    fn drop(&mut self) {
        let pool = self.pool.take();
        let _ = std::thread::spawn(move || drop(pool)).join();
    }
}

fn function_changed(tenant: &str, name: &str) -> Change {
    Change::Function {
        tenant: tenant.to_string(),
        name: name.to_string(),
    }
}

fn row_to_version(r: &Row) -> Result<FunctionVersion, StoreError> {
    Ok(FunctionVersion {
        tenant: r.get(0),
        name: r.get(1),
        version: r.get::<_, i64>(2) as u32,
        artifact: r.get(3),
        spec: serde_json::from_str(r.get(4)).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        created_at_ms: r.get(5),
    })
}

fn mode_of(r: &Row) -> FunctionMode {
    FunctionMode {
        bounces: r.get::<_, i64>(0) as u32,
        pinned: r.get(1),
    }
}

/// Writes `key` in `tx`: false if the tenant's KV would then pass its quota
/// (the caller drops `tx`, which rolls the write back).
fn put_within_quota(
    tx: &mut postgres::Transaction<'_>,
    tenant: &str,
    function: &str,
    key: &[u8],
    value: &[u8],
    max_tenant_bytes: u64,
) -> Result<bool, postgres::Error> {
    tx.execute(
        "INSERT INTO kv (tenant, function, key, value) VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant, function, key) DO UPDATE SET value = excluded.value",
        &[&tenant, &function, &key, &value],
    )?;
    let used: i64 = tx
        .query_one("SELECT bytes FROM kv_usage WHERE tenant = $1", &[&tenant])?
        .get(0);
    Ok(used as u64 <= max_tenant_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SplitStore, SqliteStore};
    use hearth_test_support::TempPostgres;

    /// One server for all of this; a database per scenario.
    #[test]
    fn postgres_passes_the_store_scenarios_and_numbers_concurrent_deploys() {
        hearth_test_support::require!(Postgres);
        let pg = TempPostgres::start().unwrap();
        let local = tempfile::tempdir().unwrap();
        for (i, (name, scenario)) in crate::conformance::SCENARIOS.iter().enumerate() {
            eprintln!("scenario {name}");
            let url = pg.create_database(&format!("s{i}")).unwrap();
            let s = SplitStore::new(
                std::sync::Arc::new(PgStore::open(&url).unwrap()),
                SqliteStore::open(local.path().join(format!("s{i}.db"))).unwrap(),
            );
            scenario(&s);
        }

        // Deploys of one name from many connections (as from several
        // nodes) each get their own number, with none skipped.
        let url = pg.create_database("race").unwrap();
        let stores: Vec<_> = (0..4).map(|_| PgStore::open(&url).unwrap()).collect();
        let spec = FunctionSpec::new(hearth_core::Runtime::Wasm);
        let mut got: Vec<u32> = std::thread::scope(|scope| {
            let handles: Vec<_> = stores
                .iter()
                .map(|s| {
                    let spec = &spec;
                    scope.spawn(move || {
                        (0..10)
                            .map(|_| s.create_version("t", "f", "aa", spec).unwrap().version)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        got.sort();
        assert_eq!(got, (1..=40).collect::<Vec<_>>());
        assert_eq!(
            stores[0]
                .get_version("t", "f", None)
                .unwrap()
                .unwrap()
                .version,
            40
        );

        // Increments of one counter from many connections: none is lost.
        std::thread::scope(|scope| {
            for s in &stores {
                scope.spawn(move || {
                    for _ in 0..25 {
                        s.kv_increment("t", "f", b"hits", 1, u64::MAX).unwrap();
                    }
                });
            }
        });
        assert_eq!(
            stores[0].kv_get("t", "f", b"hits").unwrap().unwrap(),
            b"100"
        );
    }

    #[test]
    fn an_unreachable_server_is_a_clear_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = PgStore::open(&format!("postgres://hearth@127.0.0.1:{port}/x"))
            .err()
            .expect("nothing listens there");
        assert!(err.to_string().contains("PostgreSQL"), "{err}");
    }
}
