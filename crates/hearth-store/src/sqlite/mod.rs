//! The single-node [`Store`]: one SQLite database in WAL mode.
//!
//! Writes go through one connection (SQLite allows one writer at a time
//! anyway); reads use a small set of separate connections so that KV reads
//! and listings do not queue behind a write. `synchronous = NORMAL` in WAL
//! mode keeps every committed transaction across a process crash (`kill -9`);
//! only an OS crash or power loss can drop the last commits.
//!
//! SQLite's calls block, so the store's own methods are synchronous (what
//! the recorder's writer thread and tests call); its [`Store`] impl runs
//! each of them on a blocking thread.

use parking_lot::{Mutex, MutexGuard};
use std::path::Path;
use std::sync::Arc;

use hearth_core::{Colocation, FunctionSpec, FunctionVersion};
use rusqlite::{Connection, OptionalExtension, params};

mod aliases;
mod events;
mod secrets;
mod store;
mod tapes;
mod tokens;
mod triggers;

use crate::{
    Alias, AliasMove, BlobEntry, BlockQuery, FunctionMode, FunctionSummary, JournalKey, LIVE,
    LogQuery, LogRecord, LogStream, Split, StoreError, TapeBlock, TapeIndex, TapePin,
    parse_colocation,
};

const READERS: usize = 4;

/// SQLite-backed [`Store`] and [`TapeIndex`]. A clone is another handle
/// to the same connections.
#[derive(Clone)]
pub struct SqliteStore {
    writer: Arc<Mutex<Connection>>,
    readers: Arc<[Mutex<Connection>]>,
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while holding the lock cannot leave SQLite inconsistent (an
    // open transaction is rolled back when its guard drops), so the
    // connection is safe to keep using after one (locks do not poison).
    conn.lock()
}

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    // A new database gives deleted pages back to the file system when
    // told to (`reclaim_space`): logs trimmed or removed do not keep the
    // file at its largest. This takes only before the database's first
    // write (the WAL switch included); on an older one it does nothing.
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

impl SqliteStore {
    /// Every tape block this node's index holds (what a leaving node hands
    /// to the cluster's store).
    pub fn all_blocks(&self) -> Result<Vec<TapeBlock>, StoreError> {
        tapes::all(&self.reader())
    }

    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let mut writer = open_connection(path)?;
        crate::migrations::sqlite(&mut writer)?;
        let readers = (0..READERS)
            .map(|_| open_connection(path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?
            .into();
        Ok(SqliteStore {
            writer: Arc::new(Mutex::new(writer)),
            readers,
        })
    }

    /// Forgets the tape index rows of one function (a cluster member's
    /// share of removing it; see `SplitStore`).
    pub fn forget_tapes(&self, tenant: &str, name: &str) -> Result<(), StoreError> {
        tapes::forget_function(&self.writer(), tenant, name)
    }

    fn reader(&self) -> MutexGuard<'_, Connection> {
        for r in self.readers.iter() {
            if let Some(guard) = r.try_lock() {
                return guard;
            }
        }
        lock(&self.readers[rand::random_range(0..self.readers.len())])
    }

    fn writer(&self) -> MutexGuard<'_, Connection> {
        lock(&self.writer)
    }
}

fn row_to_version(row: &rusqlite::Row<'_>) -> rusqlite::Result<FunctionVersion> {
    let spec_json: String = row.get(4)?;
    let spec = serde_json::from_str(&spec_json).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Text, Box::new(e))
    })?;
    Ok(FunctionVersion {
        tenant: row.get(0)?,
        name: row.get(1)?,
        version: row.get(2)?,
        artifact: row.get(3)?,
        spec,
        created_at_ms: row.get(5)?,
    })
}

const VERSION_COLUMNS: &str = "tenant, name, version, artifact, spec, created_ms";

impl SqliteStore {
    pub fn create_tenant(&self, name: &str) -> Result<(), StoreError> {
        let conn = self.writer();
        let inserted = conn.execute(
            "INSERT OR IGNORE INTO tenants (name, created_ms) VALUES (?1, ?2)",
            params![name, hearth_core::unix_time_ms()],
        )?;
        if inserted == 0 {
            return Err(StoreError::TenantExists(name.to_string()));
        }
        Ok(())
    }

    pub fn tenant_exists(&self, name: &str) -> Result<bool, StoreError> {
        let conn = self.reader();
        Ok(conn
            .query_row("SELECT 1 FROM tenants WHERE name = ?1", [name], |_| Ok(()))
            .optional()?
            .is_some())
    }

    pub fn tenant_colocation(&self, tenant: &str) -> Result<Option<Colocation>, StoreError> {
        let conn = self.reader();
        let text: Option<Option<String>> = conn
            .query_row(
                "SELECT colocation FROM tenant_settings WHERE tenant = ?1",
                [tenant],
                |r| r.get(0),
            )
            .optional()?;
        parse_colocation(text.flatten())
    }

    pub fn set_tenant_colocation(
        &self,
        tenant: &str,
        mode: Option<Colocation>,
    ) -> Result<(), StoreError> {
        // Written only if the tenant exists, in one statement (as in
        // PostgreSQL's version).
        let written = self.writer().execute(
            "INSERT INTO tenant_settings (tenant, colocation)
             SELECT name, ?2 FROM tenants WHERE name = ?1
             ON CONFLICT (tenant) DO UPDATE SET colocation = excluded.colocation",
            params![tenant, mode.map(Colocation::as_str)],
        )?;
        if written == 0 {
            return Err(StoreError::NoSuchTenant(tenant.to_string()));
        }
        Ok(())
    }

    pub fn create_version(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        spec: &FunctionSpec,
        promote: bool,
    ) -> Result<FunctionVersion, StoreError> {
        let spec_json = serde_json::to_string(spec).expect("FunctionSpec always serializes");
        let created_at_ms = hearth_core::unix_time_ms();
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Versions keep counting after a function is removed and re-created,
        // so "hello v3" never names two different pieces of code.
        let last: u32 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM versions WHERE tenant = ?1 AND name = ?2",
            params![tenant, name],
            |r| r.get(0),
        )?;
        let floor: u32 = tx
            .query_row(
                "SELECT latest FROM functions WHERE tenant = ?1 AND name = ?2",
                params![tenant, name],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0);
        let version = last.max(floor) + 1;
        tx.execute(
            "INSERT INTO versions (tenant, name, version, artifact, spec, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![tenant, name, version, artifact, spec_json, created_at_ms],
        )?;
        tx.execute(
            "INSERT INTO functions (tenant, name, latest) VALUES (?1, ?2, ?3)
             ON CONFLICT (tenant, name) DO UPDATE SET latest = excluded.latest",
            params![tenant, name, version],
        )?;
        // New code gets a new chance in the isolate tier.
        tx.execute(
            "DELETE FROM modes WHERE tenant = ?1 AND name = ?2",
            params![tenant, name],
        )?;
        if promote {
            aliases::set(&tx, tenant, name, LIVE, (version, None), None)?;
        }
        tx.commit()?;
        Ok(FunctionVersion {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version,
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
        let conn = self.reader();
        let row = match version {
            Some(v) => conn
                .query_row(
                    &format!(
                        "SELECT {VERSION_COLUMNS} FROM versions v
                         WHERE tenant = ?1 AND name = ?2 AND version = ?3
                           AND EXISTS (SELECT 1 FROM functions f WHERE f.tenant = v.tenant AND f.name = v.name)"
                    ),
                    params![tenant, name, v],
                    row_to_version,
                )
                .optional()?,
            None => return self.alias_version(tenant, name, LIVE),
        };
        Ok(row)
    }

    pub fn alias_version(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        Ok(self
            .reader()
            .query_row(
                "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms
                 FROM aliases a JOIN versions v
                   ON v.tenant = a.tenant AND v.name = a.name AND v.version = a.version
                 WHERE a.tenant = ?1 AND a.name = ?2 AND a.alias = ?3",
                params![tenant, name, alias],
                row_to_version,
            )
            .optional()?)
    }

    pub fn aliases(&self, tenant: &str, name: &str) -> Result<Vec<Alias>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT alias, version, split_version, split_percent FROM aliases
             WHERE tenant = ?1 AND name = ?2 ORDER BY alias",
        )?;
        let rows = stmt.query_map(params![tenant, name], |r| {
            Ok(Alias {
                alias: r.get(0)?,
                version: r.get(1)?,
                split: crate::split_of(r.get(2)?, r.get(3)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<Alias>, StoreError> {
        Ok(self
            .aliases(tenant, name)?
            .into_iter()
            .find(|a| a.alias == alias))
    }

    pub fn set_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        version: u32,
        split: Option<Split>,
    ) -> Result<AliasMove, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let moved = aliases::set(&tx, tenant, name, alias, (version, split), None)?;
        tx.commit()?;
        Ok(moved)
    }

    pub fn rollback_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<AliasMove, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let moved = aliases::roll_back(&tx, tenant, name, alias)?;
        tx.commit()?;
        Ok(moved)
    }

    pub fn remove_alias(&self, tenant: &str, name: &str, alias: &str) -> Result<bool, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let removed = aliases::remove(&tx, tenant, name, alias)?;
        tx.commit()?;
        Ok(removed)
    }

    pub fn alias_moves(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        limit: u32,
    ) -> Result<Vec<AliasMove>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT id, alias, version, previous, undoes IS NOT NULL, at_ms, split_version,
                    split_percent, previous_split_version, previous_split_percent
             FROM alias_moves
             WHERE tenant = ?1 AND name = ?2 AND alias = ?3 ORDER BY id DESC LIMIT ?4",
        )?;
        let rows = stmt.query_map(params![tenant, name, alias, limit], |r| {
            Ok(AliasMove {
                id: r.get(0)?,
                alias: r.get(1)?,
                version: r.get(2)?,
                previous: r.get(3)?,
                rollback: r.get(4)?,
                at_ms: r.get(5)?,
                split: crate::split_of(r.get(6)?, r.get(7)?),
                previous_split: crate::split_of(r.get(8)?, r.get(9)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms,
                    (SELECT COUNT(*) FROM versions c WHERE c.tenant = f.tenant AND c.name = f.name),
                    COALESCE(m.bounces, 0), COALESCE(m.pinned, 0),
                    a.version, a.split_version, a.split_percent
             FROM functions f JOIN versions v
               ON v.tenant = f.tenant AND v.name = f.name AND v.version = f.latest
             LEFT JOIN modes m ON m.tenant = f.tenant AND m.name = f.name
             LEFT JOIN aliases a ON a.tenant = f.tenant AND a.name = f.name AND a.alias = 'live'
             WHERE f.tenant = ?1 ORDER BY f.name",
        )?;
        let rows = stmt.query_map([tenant], |r| {
            Ok((
                row_to_version(r)?,
                r.get::<_, u32>(6)?,
                FunctionMode {
                    bounces: r.get(7)?,
                    pinned: r.get(8)?,
                },
                r.get::<_, Option<u32>>(9)?,
                crate::split_of(r.get(10)?, r.get(11)?),
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (latest, versions, mode, live, live_split) = row?;
            out.push(FunctionSummary {
                name: latest.name.clone(),
                latest,
                live,
                live_split,
                versions,
                mode,
            });
        }
        Ok(out)
    }

    pub fn list_versions(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Vec<FunctionVersion>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn.prepare(&format!(
            "SELECT {VERSION_COLUMNS} FROM versions v
             WHERE tenant = ?1 AND name = ?2
               AND EXISTS (SELECT 1 FROM functions f WHERE f.tenant = v.tenant AND f.name = v.name)
             ORDER BY version"
        ))?;
        let rows = stmt.query_map(params![tenant, name], row_to_version)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn delete_function(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let existed = tx.execute(
            "DELETE FROM functions WHERE tenant = ?1 AND name = ?2",
            params![tenant, name],
        )? > 0;
        if existed {
            // Keep the highest version number as a tombstone so a re-created
            // function continues the count (see create_version).
            let last: u32 = tx.query_row(
                "SELECT COALESCE(MAX(version), 0) FROM versions WHERE tenant = ?1 AND name = ?2",
                params![tenant, name],
                |r| r.get(0),
            )?;
            tx.execute(
                "DELETE FROM versions WHERE tenant = ?1 AND name = ?2 AND version < ?3",
                params![tenant, name, last],
            )?;
            tx.execute(
                "DELETE FROM kv WHERE tenant = ?1 AND function = ?2",
                params![tenant, name],
            )?;
            tx.execute(
                "DELETE FROM modes WHERE tenant = ?1 AND name = ?2",
                params![tenant, name],
            )?;
            tx.execute(
                "DELETE FROM logs WHERE tenant = ?1 AND function = ?2",
                params![tenant, name],
            )?;
            tx.execute(
                "DELETE FROM log_usage WHERE tenant = ?1 AND function = ?2",
                params![tenant, name],
            )?;
            // Its schedules, broker bindings and queued invocations go
            // with it: nothing of a removed function runs again.
            for table in ["schedules", "triggers", "queue"] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE tenant = ?1 AND function = ?2"),
                    params![tenant, name],
                )?;
            }
            aliases::forget(&tx, tenant, name)?;
            tapes::forget_function(&tx, tenant, name)?;
        }
        tx.commit()?;
        Ok(existed)
    }

    pub fn function_mode(&self, tenant: &str, name: &str) -> Result<FunctionMode, StoreError> {
        let conn = self.reader();
        Ok(conn
            .query_row(
                "SELECT bounces, pinned FROM modes WHERE tenant = ?1 AND name = ?2",
                params![tenant, name],
                |r| {
                    Ok(FunctionMode {
                        bounces: r.get(0)?,
                        pinned: r.get(1)?,
                    })
                },
            )
            .optional()?
            .unwrap_or_default())
    }

    pub fn record_bounce(
        &self,
        tenant: &str,
        name: &str,
        pin_after: u32,
    ) -> Result<FunctionMode, StoreError> {
        let conn = self.writer();
        Ok(conn.query_row(
            "INSERT INTO modes (tenant, name, bounces, pinned) VALUES (?1, ?2, 1, ?3 <= 1)
             ON CONFLICT (tenant, name) DO UPDATE
               SET bounces = bounces + 1, pinned = (bounces + 1 >= ?3)
             RETURNING bounces, pinned",
            params![tenant, name, pin_after],
            |r| {
                Ok(FunctionMode {
                    bounces: r.get(0)?,
                    pinned: r.get(1)?,
                })
            },
        )?)
    }

    pub fn referenced_artifacts(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT DISTINCT v.artifact FROM versions v JOIN functions f
               ON f.tenant = v.tenant AND f.name = v.name",
        )?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn kv_get(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let conn = self.reader();
        Ok(conn
            .query_row(
                "SELECT value FROM kv WHERE tenant = ?1 AND function = ?2 AND key = ?3",
                params![tenant, function, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    pub fn kv_exists(&self, tenant: &str, function: &str, key: &[u8]) -> Result<bool, StoreError> {
        let conn = self.reader();
        Ok(conn
            .query_row(
                "SELECT 1 FROM kv WHERE tenant = ?1 AND function = ?2 AND key = ?3",
                params![tenant, function, key],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    pub fn kv_set(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        value: &[u8],
        max_tenant_bytes: u64,
    ) -> Result<(), StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction()?;
        put_within_quota(&tx, tenant, function, key, value, max_tenant_bytes)?;
        tx.commit()?;
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
        let mut conn = self.writer();
        let tx = conn.transaction()?;
        let current: Option<Vec<u8>> = tx
            .query_row(
                "SELECT value FROM kv WHERE tenant = ?1 AND function = ?2 AND key = ?3",
                params![tenant, function, key],
                |r| r.get(0),
            )
            .optional()?;
        let next = crate::kv_counter_next(current.as_deref(), delta)?;
        let text = next.to_string();
        put_within_quota(
            &tx,
            tenant,
            function,
            key,
            text.as_bytes(),
            max_tenant_bytes,
        )?;
        tx.commit()?;
        Ok(next)
    }

    pub fn kv_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let conn = self.reader();
        let used: Option<i64> = conn
            .query_row(
                "SELECT bytes FROM kv_usage WHERE tenant = ?1",
                [tenant],
                |r| r.get(0),
            )
            .optional()?;
        Ok(used.unwrap_or(0) as u64)
    }

    pub fn kv_delete(&self, tenant: &str, function: &str, key: &[u8]) -> Result<bool, StoreError> {
        let conn = self.writer();
        Ok(conn.execute(
            "DELETE FROM kv WHERE tenant = ?1 AND function = ?2 AND key = ?3",
            params![tenant, function, key],
        )? > 0)
    }

    pub fn kv_list(
        &self,
        tenant: &str,
        function: &str,
        prefix: &[u8],
        limit: u32,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let conn = self.reader();
        // Blob comparison is bytewise, so [prefix, prefix++) is exactly the
        // keys that start with prefix; substr() would defeat the index.
        let mut stmt = conn.prepare(
            "SELECT key FROM kv WHERE tenant = ?1 AND function = ?2 AND key >= ?3
             ORDER BY key LIMIT ?4",
        )?;
        let rows = stmt.query_map(params![tenant, function, prefix, limit], |r| {
            r.get::<_, Vec<u8>>(0)
        })?;
        let mut out = Vec::new();
        for key in rows {
            let key = key?;
            if !key.starts_with(prefix) {
                break;
            }
            out.push(key);
        }
        Ok(out)
    }

    pub fn journal_append(
        &self,
        key: &JournalKey<'_>,
        seq: u32,
        event: &[u8],
    ) -> Result<(), StoreError> {
        self.writer().execute(
            "INSERT INTO journal (tenant, function, invocation, seq, event, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            params![
                key.tenant,
                key.function,
                key.invocation,
                seq,
                event,
                hearth_core::unix_time_ms()
            ],
        )?;
        Ok(())
    }

    pub fn journal_read(&self, key: &JournalKey<'_>) -> Result<Vec<Vec<u8>>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT event FROM journal WHERE tenant = ?1 AND function = ?2 AND invocation = ?3
             ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![key.tenant, key.function, key.invocation], |r| {
            r.get::<_, Vec<u8>>(0)
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn journal_forget(&self, key: &JournalKey<'_>) -> Result<(), StoreError> {
        self.writer().execute(
            "DELETE FROM journal WHERE tenant = ?1 AND function = ?2 AND invocation = ?3",
            params![key.tenant, key.function, key.invocation],
        )?;
        Ok(())
    }

    pub fn journal_cut(&self, key: &JournalKey<'_>, from_seq: u32) -> Result<(), StoreError> {
        self.writer().execute(
            "DELETE FROM journal
             WHERE tenant = ?1 AND function = ?2 AND invocation = ?3 AND seq >= ?4",
            params![key.tenant, key.function, key.invocation, from_seq],
        )?;
        Ok(())
    }

    pub fn journal_sweep(&self, before_ms: i64) -> Result<u64, StoreError> {
        Ok(self.writer().execute(
            "DELETE FROM journal WHERE created_ms < ?1 AND invocation NOT IN (SELECT id FROM queue)",
            params![before_ms],
        )? as u64)
    }

    pub fn append_logs(&self, records: &[LogRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut conn = self.writer();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO logs (tenant, function, version, invocation, ts_ms, stream, level, message, trace_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            for r in records {
                stmt.execute(params![
                    r.tenant,
                    r.function,
                    r.version,
                    r.invocation_id,
                    r.ts_ms,
                    r.stream.as_str(),
                    r.level,
                    r.message,
                    r.trace_id
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn log_usage(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        let conn = self.reader();
        let mut stmt =
            conn.prepare_cached("SELECT tenant, function, bytes FROM log_usage WHERE bytes > 0")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)?.max(0) as u64))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn trim_logs(&self, tenant: &str, function: &str, keep: u64) -> Result<u64, StoreError> {
        let conn = self.writer();
        // The newest line past which the newest `keep` bytes are full:
        // it and every older one go.
        let n = conn.execute(
            "DELETE FROM logs WHERE tenant = ?1 AND function = ?2 AND id <= (
                 SELECT id FROM (
                     SELECT id, SUM(length(CAST(message AS BLOB))) OVER (ORDER BY id DESC) AS newer
                     FROM logs WHERE tenant = ?1 AND function = ?2
                 ) WHERE newer > ?3 ORDER BY id DESC LIMIT 1
             )",
            params![tenant, function, i64::try_from(keep).unwrap_or(i64::MAX)],
        )?;
        Ok(n as u64)
    }

    pub fn expire_logs(&self, before_ms: i64) -> Result<u64, StoreError> {
        let n = self
            .writer()
            .execute("DELETE FROM logs WHERE ts_ms < ?1", params![before_ms])?;
        Ok(n as u64)
    }

    pub fn reclaim_space(&self) -> Result<(), StoreError> {
        let conn = self.writer();
        // Stepped to its end: each step gives back pages.
        let mut vacuum = conn.prepare("PRAGMA incremental_vacuum")?;
        let mut steps = vacuum.query([])?;
        while steps.next()?.is_some() {}
        drop(steps);
        drop(vacuum);
        // The WAL holds what was written since the last checkpoint; cut it
        // back too.
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    pub fn read_logs(
        &self,
        tenant: &str,
        function: &str,
        query: &LogQuery,
    ) -> Result<Vec<LogRecord>, StoreError> {
        let conn = self.reader();
        let limit = if query.limit == 0 { 100 } else { query.limit };
        // Newest first, unless following: then the oldest after the cursor.
        let order = if query.after.is_some() { "ASC" } else { "DESC" };
        let mut stmt = conn.prepare(&format!(
            "SELECT id, tenant, function, version, invocation, ts_ms, stream, level, message, trace_id FROM logs
             WHERE tenant = ?1 AND function = ?2 AND (?3 IS NULL OR invocation = ?3)
               AND (?5 IS NULL OR id > ?5)
             ORDER BY id {order} LIMIT ?4"
        ))?;
        let rows = stmt.query_map(
            params![tenant, function, query.invocation_id, limit, query.after],
            |r| {
                Ok(LogRecord {
                    id: r.get(0)?,
                    tenant: r.get(1)?,
                    function: r.get(2)?,
                    version: r.get(3)?,
                    invocation_id: r.get(4)?,
                    ts_ms: r.get(5)?,
                    stream: LogStream::parse(&r.get::<_, String>(6)?),
                    level: r.get(7)?,
                    message: r.get(8)?,
                    trace_id: r.get(9)?,
                })
            },
        )?;
        let mut out: Vec<LogRecord> = rows.collect::<Result<_, _>>()?;
        if query.after.is_none() {
            out.reverse();
        }
        Ok(out)
    }
}

impl TapeIndex for SqliteStore {
    fn index_tapes(
        &self,
        blocks: &[TapeBlock],
        blobs: &[BlobEntry],
        retire: Option<u64>,
    ) -> Result<(), StoreError> {
        tapes::index(&mut self.writer(), blocks, blobs, retire)
    }

    fn blocks_holding(&self, tenant: &str, id: &str) -> Result<Vec<TapeBlock>, StoreError> {
        tapes::holding(&self.reader(), tenant, id)
    }

    fn list_blocks(&self, tenant: &str, q: &BlockQuery) -> Result<Vec<TapeBlock>, StoreError> {
        tapes::list(&self.reader(), tenant, q)
    }

    fn blocks_in_segment(&self, segment: u64) -> Result<Vec<TapeBlock>, StoreError> {
        tapes::in_segment(&self.reader(), segment)
    }

    fn expire_blocks(
        &self,
        gone: &[TapeBlock],
        ok_expired: &[TapeBlock],
    ) -> Result<(), StoreError> {
        tapes::expire(&mut self.writer(), gone, ok_expired)
    }

    fn pin_tape(&self, pin: &TapePin) -> Result<(), StoreError> {
        tapes::pin(&mut self.writer(), pin)
    }

    fn tape_pins(&self) -> Result<Vec<TapePin>, StoreError> {
        tapes::pins(&self.reader())
    }

    fn unpin_tapes(&self, pins: &[TapePin]) -> Result<(), StoreError> {
        tapes::unpin(&mut self.writer(), pins)
    }

    fn find_blob(
        &self,
        tenant: &str,
        hash: &str,
        segment: u64,
    ) -> Result<Option<BlobEntry>, StoreError> {
        tapes::find_blob(&self.reader(), tenant, hash, segment)
    }

    fn unindex_segment(&self, segment: u64, from_offset: u64) -> Result<(), StoreError> {
        tapes::unindex_segment(&mut self.writer(), segment, from_offset)
    }

    fn last_indexed_offset(&self, segment: u64) -> Result<Option<u64>, StoreError> {
        // The writer's connection: it sees the writer's own last commit.
        tapes::last_indexed_offset(&self.writer(), segment)
    }
}

/// Writes `key` in `tx`, unless the tenant's KV would then pass its quota:
/// [`StoreError::KvQuota`], and the caller drops `tx`, which rolls the
/// write back.
fn put_within_quota(
    tx: &rusqlite::Transaction<'_>,
    tenant: &str,
    function: &str,
    key: &[u8],
    value: &[u8],
    max_tenant_bytes: u64,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO kv (tenant, function, key, value) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, function, key) DO UPDATE SET value = excluded.value",
        params![tenant, function, key, value],
    )?;
    let used: i64 = tx.query_row(
        "SELECT bytes FROM kv_usage WHERE tenant = ?1",
        [tenant],
        |r| r.get(0),
    )?;
    if used as u64 > max_tenant_bytes {
        return Err(StoreError::KvQuota {
            tenant: tenant.to_string(),
            max_bytes: max_tenant_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("hearth.db")).unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn passes_the_store_scenarios() {
        for (name, scenario) in crate::conformance::SCENARIOS {
            eprintln!("scenario {name}");
            let (_dir, s) = store();
            scenario(&s).await;
        }
    }

    #[tokio::test]
    async fn versions_survive_reopen() {
        let (dir, s) = store();
        crate::conformance::versions_resolve_newest_or_pinned(&s).await;
        drop(s);
        let s = SqliteStore::open(dir.path().join("hearth.db")).unwrap();
        let latest = s.get_version("acme", "hello", None).unwrap().unwrap();
        assert_eq!((latest.version, latest.artifact.as_str()), (2, "bb"));
        assert_eq!(s.list_versions("acme", "hello").unwrap().len(), 2);
    }

    #[test]
    fn kv_written_before_quotas_is_counted_once_at_open() {
        let (dir, s) = store();
        s.kv_set("t", "f", b"ab", b"1234", u64::MAX).unwrap();
        s.kv_set("t", "g", b"c", b"5", u64::MAX).unwrap();
        // As a database from before kv_usage existed (and migrations, and
        // aliases).
        s.writer()
            .execute_batch(
                "DROP TRIGGER kv_usage_insert; DROP TRIGGER kv_usage_update;
                 DROP TRIGGER kv_usage_delete; DROP TABLE kv_usage;
                 DROP TABLE aliases; DROP TABLE alias_moves;
                 DROP TABLE hearth_migrations;",
            )
            .unwrap();
        drop(s);
        let s = SqliteStore::open(dir.path().join("hearth.db")).unwrap();
        assert_eq!(s.kv_bytes("t").unwrap(), 8);
        drop(s);
        // Counted once: opening again does not count it twice.
        let s = SqliteStore::open(dir.path().join("hearth.db")).unwrap();
        assert_eq!(s.kv_bytes("t").unwrap(), 8);
    }

    #[test]
    fn logs_from_before_traces_keep_their_lines_and_gain_the_column() {
        let (dir, s) = store();
        let line = |trace_id: Option<&str>| LogRecord {
            id: 0,
            tenant: "t".into(),
            function: "f".into(),
            version: 1,
            invocation_id: "i".into(),
            ts_ms: 1,
            stream: LogStream::Stderr,
            level: String::new(),
            message: "old".into(),
            trace_id: trace_id.map(String::from),
        };
        s.append_logs(&[line(None)]).unwrap();
        // As a database from before trace ids (and migrations, and aliases).
        s.writer()
            .execute_batch(
                "ALTER TABLE logs DROP COLUMN trace_id; DROP TABLE aliases;
                 DROP TABLE alias_moves; DROP TABLE hearth_migrations;",
            )
            .unwrap();
        drop(s);
        let s = SqliteStore::open(dir.path().join("hearth.db")).unwrap();
        s.append_logs(&[line(Some("4bf92f3577b34da6a3ce929d0e0e4736"))])
            .unwrap();
        let read = s.read_logs("t", "f", &LogQuery::default()).unwrap();
        assert_eq!(
            read.iter()
                .map(|l| l.trace_id.as_deref())
                .collect::<Vec<_>>(),
            [None, Some("4bf92f3577b34da6a3ce929d0e0e4736")]
        );
        drop(s);
        // Opened again: the column is there, and nothing is added twice.
        SqliteStore::open(dir.path().join("hearth.db")).unwrap();
    }
}
