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
//! Calls are async (`tokio-postgres`): a query waits on the runtime's own
//! sockets, never on a blocking thread. A few connections are kept open
//! (`deadpool-postgres`); one that PostgreSQL closed is dropped when it
//! is given back and a new one opened on a later call.
//!
//! [`SplitStore`]: crate::SplitStore

use deadpool_postgres::{Client, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use hearth_core::{Colocation, FunctionSpec, FunctionVersion};
use tokio_postgres::Row;
use tokio_postgres_rustls::MakeRustlsConnect;

mod aliases;
mod events;
mod node_role;
pub use node_role::role_identifier;
mod secrets;
pub mod tls;
mod tokens;
mod triggers;

use crate::Split;

use crate::cluster::{Change, notify};
use crate::{
    Alias, AliasMove, FunctionMode, FunctionSummary, JournalKey, LIVE, LogQuery, LogRecord,
    LogStream, StoreError, parse_colocation,
};

/// Connections a node or gateway keeps open to the cluster's database.
const CONNECTIONS: usize = 4;
/// How long a store call waits for a free connection (or a new one).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The cluster's registry, KV and logs in PostgreSQL.
pub struct PgStore {
    pool: Pool,
    /// For connections of its own (the change listener's).
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: MakeRustlsConnect,
    /// How its connections are secured (`sslmode`, [`tls`]).
    pub tls_mode: tls::Mode,
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/db`, with libpq's
    /// TLS settings: [`tls`]) and brings its schema to this build's
    /// (`crate::migrations`).
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let tls::Connect {
            mut config,
            mode,
            tls,
        } = tls::parse(url)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // The first connection is made here, so an unreachable or refusing
        // server is the caller's error at once, and it migrates the
        // schema; the pool then opens connections as calls need them.
        let (mut first, connection) = config
            .connect(tls.clone())
            .await
            .map_err(|e| tls::connect_error(e, mode))?;
        let driver = tokio::spawn(connection);
        crate::migrations::postgres(&mut first).await?;
        drop(first);
        let _ = driver.await;
        // `Fast`: a connection is not tested with a query as it is taken
        // (a broken one is dropped when given back: the pool asks the
        // client whether it closed).
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(CONNECTIONS)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .expect("a pool with a runtime and timeouts builds");
        Ok(PgStore {
            pool,
            config,
            tls,
            tls_mode: mode,
        })
    }

    /// Runs `f` on a connection from the pool (at most [`CONNECTIONS`],
    /// opened as needed, broken ones replaced).
    pub(crate) async fn with<T>(
        &self,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut client = self.pool.get().await?;
        Ok(f(&mut client).await?)
    }

    /// Runs `f` in a transaction on a connection from the pool, and
    /// commits what it did unless it failed.
    async fn in_transaction<T>(
        &self,
        f: impl AsyncFnOnce(&tokio_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let out = f(&tx).await?;
        tx.commit().await?;
        Ok(out)
    }

    pub async fn create_tenant(&self, name: &str) -> Result<(), StoreError> {
        let inserted = self
            .with(async |c| {
                c.execute(
                    "INSERT INTO tenants (name, created_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&name, &hearth_core::unix_time_ms()],
                )
                .await
            })
            .await?;
        if inserted == 0 {
            return Err(StoreError::TenantExists(name.to_string()));
        }
        Ok(())
    }

    pub async fn tenant_exists(&self, name: &str) -> Result<bool, StoreError> {
        self.with(async |c| {
            Ok(
                c.query_opt("SELECT 1 FROM tenants WHERE name = $1", &[&name])
                    .await?
                    .is_some(),
            )
        })
        .await
    }

    pub async fn tenant_colocation(&self, tenant: &str) -> Result<Option<Colocation>, StoreError> {
        let text: Option<String> = self
            .with(async |c| {
                Ok(c.query_opt(
                    "SELECT colocation FROM tenant_settings WHERE tenant = $1",
                    &[&tenant],
                )
                .await?
                .and_then(|r| r.get(0)))
            })
            .await?;
        parse_colocation(text)
    }

    pub async fn set_tenant_colocation(
        &self,
        tenant: &str,
        mode: Option<Colocation>,
    ) -> Result<(), StoreError> {
        let mode = mode.map(Colocation::as_str);
        let written = self
            .with(async |c| {
                let tx = c.transaction().await?;
                let n = tx
                    .execute(
                        "INSERT INTO tenant_settings (tenant, colocation)
                 SELECT name, $2 FROM tenants WHERE name = $1
                 ON CONFLICT (tenant) DO UPDATE SET colocation = excluded.colocation",
                        &[&tenant, &mode],
                    )
                    .await?;
                notify(
                    &tx,
                    &Change::Tenant {
                        tenant: tenant.to_string(),
                    },
                )
                .await?;
                tx.commit().await?;
                Ok(n)
            })
            .await?;
        if written == 0 {
            return Err(StoreError::NoSuchTenant(tenant.to_string()));
        }
        Ok(())
    }

    pub async fn create_version(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        spec: &FunctionSpec,
        promote: bool,
    ) -> Result<FunctionVersion, StoreError> {
        let spec_json = serde_json::to_string(spec).expect("FunctionSpec always serializes");
        let created_at_ms = hearth_core::unix_time_ms();
        let key = format!("{tenant}/{name}");
        let version = self.in_transaction(async |tx| {
            // One deploy of a name at a time, across the cluster; the
            // numbering rule is SqliteStore::create_version's.
            tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key]).await?;
            let last: i64 = tx
                .query_one(
                    "SELECT GREATEST(
                        (SELECT COALESCE(MAX(version), 0) FROM versions WHERE tenant = $1 AND name = $2),
                        (SELECT COALESCE(MAX(latest), 0) FROM functions WHERE tenant = $1 AND name = $2))",
                    &[&tenant, &name],
                )
                .await?
                .get(0);
            let version = last + 1;
            tx.execute(
                "INSERT INTO versions (tenant, name, version, artifact, spec, created_ms)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[&tenant, &name, &version, &artifact, &spec_json, &created_at_ms],
            ).await?;
            tx.execute(
                "INSERT INTO functions (tenant, name, latest) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, name) DO UPDATE SET latest = excluded.latest",
                &[&tenant, &name, &version],
            ).await?;
            tx.execute(
                "DELETE FROM modes WHERE tenant = $1 AND name = $2",
                &[&tenant, &name],
            ).await?;
            notify(tx, &function_changed(tenant, name)).await?;
            if promote {
                aliases::set(tx, tenant, name, LIVE, (version as u32, None), None).await?;
            }
            Ok(version)
        }).await?;
        Ok(FunctionVersion {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version: version as u32,
            artifact: artifact.to_string(),
            spec: spec.clone(),
            created_at_ms,
        })
    }

    pub async fn get_version(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        let Some(version) = version.map(i64::from) else {
            return self.alias_version(tenant, name, LIVE).await;
        };
        let row = self
            .with(async |c| {
                c.query_opt(
                    "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms
                     FROM functions f JOIN versions v ON v.tenant = f.tenant AND v.name = f.name
                     WHERE f.tenant = $1 AND f.name = $2 AND v.version = $3",
                    &[&tenant, &name, &version],
                )
                .await
            })
            .await?;
        row.as_ref().map(row_to_version).transpose()
    }

    pub async fn alias_version(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt(
                    "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms
                     FROM aliases a JOIN versions v
                       ON v.tenant = a.tenant AND v.name = a.name AND v.version = a.version
                     WHERE a.tenant = $1 AND a.name = $2 AND a.alias = $3",
                    &[&tenant, &name, &alias],
                )
                .await
            })
            .await?;
        row.as_ref().map(row_to_version).transpose()
    }

    pub async fn aliases(&self, tenant: &str, name: &str) -> Result<Vec<Alias>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT alias, version, split_version, split_percent FROM aliases
                     WHERE tenant = $1 AND name = $2 ORDER BY alias",
                    &[&tenant, &name],
                )
                .await
            })
            .await?;
        Ok(rows
            .iter()
            .map(|r| Alias {
                alias: r.get(0),
                version: r.get::<_, i64>(1) as u32,
                split: aliases::split_of(r.get(2), r.get(3)),
            })
            .collect())
    }

    pub async fn alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<Alias>, StoreError> {
        Ok(self
            .aliases(tenant, name)
            .await?
            .into_iter()
            .find(|a| a.alias == alias))
    }

    pub async fn set_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        version: u32,
        split: Option<Split>,
    ) -> Result<AliasMove, StoreError> {
        self.in_transaction(async |tx| {
            aliases::set(tx, tenant, name, alias, (version, split), None).await
        })
        .await
    }

    pub async fn rollback_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<AliasMove, StoreError> {
        self.in_transaction(async |tx| aliases::roll_back(tx, tenant, name, alias).await)
            .await
    }

    pub async fn remove_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<bool, StoreError> {
        self.in_transaction(async |tx| aliases::remove(tx, tenant, name, alias).await)
            .await
    }

    pub async fn alias_moves(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        limit: u32,
    ) -> Result<Vec<AliasMove>, StoreError> {
        let limit = i64::from(limit);
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT id, alias, version, previous, undoes IS NOT NULL, at_ms,
                            split_version, split_percent, previous_split_version,
                            previous_split_percent
                     FROM alias_moves WHERE tenant = $1 AND name = $2 AND alias = $3
                     ORDER BY id DESC LIMIT $4",
                    &[&tenant, &name, &alias, &limit],
                )
                .await
            })
            .await?;
        Ok(rows
            .iter()
            .map(|r| AliasMove {
                id: r.get(0),
                alias: r.get(1),
                version: r.get::<_, i64>(2) as u32,
                previous: r.get::<_, Option<i64>>(3).map(|p| p as u32),
                rollback: r.get(4),
                at_ms: r.get(5),
                split: aliases::split_of(r.get(6), r.get(7)),
                previous_split: aliases::split_of(r.get(8), r.get(9)),
            })
            .collect())
    }

    pub async fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>, StoreError> {
        let rows = self.with(async |c| {
            c.query(
                "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms,
                        (SELECT COUNT(*) FROM versions c WHERE c.tenant = f.tenant AND c.name = f.name),
                        COALESCE(m.bounces, 0), COALESCE(m.pinned, false),
                        a.version, a.split_version, a.split_percent
                 FROM functions f JOIN versions v
                   ON v.tenant = f.tenant AND v.name = f.name AND v.version = f.latest
                 LEFT JOIN modes m ON m.tenant = f.tenant AND m.name = f.name
                 LEFT JOIN aliases a ON a.tenant = f.tenant AND a.name = f.name AND a.alias = 'live'
                 WHERE f.tenant = $1 ORDER BY f.name",
                &[&tenant],
            ).await
        }).await?;
        rows.iter()
            .map(|r| {
                let latest = row_to_version(r)?;
                Ok(FunctionSummary {
                    name: latest.name.clone(),
                    latest,
                    live: r.get::<_, Option<i64>>(9).map(|v| v as u32),
                    live_split: aliases::split_of(r.get(10), r.get(11)),
                    versions: r.get::<_, i64>(6) as u32,
                    mode: FunctionMode {
                        bounces: r.get::<_, i64>(7) as u32,
                        pinned: r.get(8),
                    },
                })
            })
            .collect()
    }

    pub async fn list_versions(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Vec<FunctionVersion>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT v.tenant, v.name, v.version, v.artifact, v.spec, v.created_ms
                 FROM versions v JOIN functions f ON f.tenant = v.tenant AND f.name = v.name
                 WHERE v.tenant = $1 AND v.name = $2 ORDER BY v.version",
                    &[&tenant, &name],
                )
                .await
            })
            .await?;
        rows.iter().map(row_to_version).collect()
    }

    pub async fn delete_function(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        self.with(async |c| {
            let tx = c.transaction().await?;
            // The last version row stays as a tombstone, invisible without
            // its functions row, so a re-created function continues the
            // count (as in SqliteStore).
            let existed = tx.execute(
                "DELETE FROM functions WHERE tenant = $1 AND name = $2",
                &[&tenant, &name],
            ).await? > 0;
            if existed {
                tx.execute(
                    "DELETE FROM versions WHERE tenant = $1 AND name = $2
                       AND version < (SELECT MAX(version) FROM versions WHERE tenant = $1 AND name = $2)",
                    &[&tenant, &name],
                ).await?;
                // Its schedules, broker bindings and queued invocations go
                // with it: nothing of a removed function runs again.
                for table in ["kv", "logs", "log_usage", "schedules", "triggers", "queue"] {
                    tx.execute(
                        &format!("DELETE FROM {table} WHERE tenant = $1 AND function = $2"),
                        &[&tenant, &name],
                    ).await?;
                }
                tx.execute(
                    "DELETE FROM modes WHERE tenant = $1 AND name = $2",
                    &[&tenant, &name],
                ).await?;
                aliases::forget(&tx, tenant, name).await?;
                notify(&tx, &function_changed(tenant, name)).await?;
            }
            tx.commit().await?;
            Ok(existed)
        }).await
    }

    pub async fn function_mode(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<FunctionMode, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt(
                    "SELECT bounces, pinned FROM modes WHERE tenant = $1 AND name = $2",
                    &[&tenant, &name],
                )
                .await
            })
            .await?;
        Ok(row.map(|r| mode_of(&r)).unwrap_or_default())
    }

    pub async fn record_bounce(
        &self,
        tenant: &str,
        name: &str,
        pin_after: u32,
    ) -> Result<FunctionMode, StoreError> {
        let pin_after = i64::from(pin_after);
        let row = self.with(async |c| {
            let tx = c.transaction().await?;
            let row = tx.query_one(
                "INSERT INTO modes (tenant, name, bounces, pinned) VALUES ($1, $2, 1, $3::bigint <= 1)
                 ON CONFLICT (tenant, name) DO UPDATE
                   SET bounces = modes.bounces + 1, pinned = (modes.bounces + 1 >= $3)
                 RETURNING bounces, pinned",
                &[&tenant, &name, &pin_after],
            ).await?;
            notify(&tx, &function_changed(tenant, name)).await?;
            tx.commit().await?;
            Ok(row)
        }).await?;
        Ok(mode_of(&row))
    }

    pub async fn referenced_artifacts(&self) -> Result<Vec<String>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT DISTINCT v.artifact FROM versions v JOIN functions f
                   ON f.tenant = v.tenant AND f.name = v.name",
                    &[],
                )
                .await
            })
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub async fn kv_get(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt(
                    "SELECT value FROM kv WHERE tenant = $1 AND function = $2 AND key = $3",
                    &[&tenant, &function, &key],
                )
                .await
            })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn kv_exists(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<bool, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt(
                    "SELECT 1 FROM kv WHERE tenant = $1 AND function = $2 AND key = $3",
                    &[&tenant, &function, &key],
                )
                .await
            })
            .await?;
        Ok(row.is_some())
    }

    pub async fn kv_set(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        value: &[u8],
        max_tenant_bytes: u64,
    ) -> Result<(), StoreError> {
        let within = self
            .with(async |c| {
                let tx = c.transaction().await?;
                if !put_within_quota(&tx, tenant, function, key, value, max_tenant_bytes).await? {
                    return Ok(false);
                }
                tx.commit().await?;
                Ok(true)
            })
            .await?;
        if !within {
            return Err(StoreError::KvQuota {
                tenant: tenant.to_string(),
                max_bytes: max_tenant_bytes,
            });
        }
        Ok(())
    }

    pub async fn kv_increment(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        delta: u64,
        max_tenant_bytes: u64,
    ) -> Result<u64, StoreError> {
        self.with(async |c| {
            let tx = c.transaction().await?;
            // Taking the row lock first makes concurrent increments queue;
            // an absent key is inserted as 0 so that there is a row to lock.
            tx.execute(
                "INSERT INTO kv (tenant, function, key, value) VALUES ($1, $2, $3, '0')
                 ON CONFLICT (tenant, function, key) DO NOTHING",
                &[&tenant, &function, &key],
            )
            .await?;
            let current: Vec<u8> = tx
                .query_one(
                    "SELECT value FROM kv WHERE tenant = $1 AND function = $2 AND key = $3
                     FOR UPDATE",
                    &[&tenant, &function, &key],
                )
                .await?
                .get(0);
            let next = match crate::kv_counter_next(Some(&current), delta) {
                Ok(next) => next,
                Err(e) => return Ok(Err(e)),
            };
            let text = next.to_string();
            if !put_within_quota(
                &tx,
                tenant,
                function,
                key,
                text.as_bytes(),
                max_tenant_bytes,
            )
            .await?
            {
                return Ok(Err(StoreError::KvQuota {
                    tenant: tenant.to_string(),
                    max_bytes: max_tenant_bytes,
                }));
            }
            tx.commit().await?;
            Ok(Ok(next))
        })
        .await?
    }

    pub async fn kv_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt("SELECT bytes FROM kv_usage WHERE tenant = $1", &[&tenant])
                    .await
            })
            .await?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0)) as u64)
    }

    pub async fn kv_delete(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<bool, StoreError> {
        Ok(self
            .with(async |c| {
                c.execute(
                    "DELETE FROM kv WHERE tenant = $1 AND function = $2 AND key = $3",
                    &[&tenant, &function, &key],
                )
                .await
            })
            .await?
            > 0)
    }

    pub async fn kv_list(
        &self,
        tenant: &str,
        function: &str,
        prefix: &[u8],
        limit: u32,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        // bytea compares bytewise, as SQLite's blobs do (see SqliteStore).
        let limit = i64::from(limit);
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT key FROM kv WHERE tenant = $1 AND function = $2 AND key >= $3
                 ORDER BY key LIMIT $4",
                    &[&tenant, &function, &prefix, &limit],
                )
                .await
            })
            .await?;
        Ok(rows
            .iter()
            .map(|r| r.get::<_, Vec<u8>>(0))
            .take_while(|k| k.starts_with(prefix))
            .collect())
    }

    pub async fn journal_append(
        &self,
        key: &JournalKey<'_>,
        seq: u32,
        event: &[u8],
    ) -> Result<(), StoreError> {
        self.with(async |c| {
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
            .await
        })
        .await?;
        Ok(())
    }

    pub async fn journal_read(&self, key: &JournalKey<'_>) -> Result<Vec<Vec<u8>>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT event FROM journal
                 WHERE tenant = $1 AND function = $2 AND invocation = $3 ORDER BY seq",
                    &[&key.tenant, &key.function, &key.invocation],
                )
                .await
            })
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub async fn journal_forget(&self, key: &JournalKey<'_>) -> Result<(), StoreError> {
        self.with(async |c| {
            c.execute(
                "DELETE FROM journal WHERE tenant = $1 AND function = $2 AND invocation = $3",
                &[&key.tenant, &key.function, &key.invocation],
            )
            .await
        })
        .await?;
        Ok(())
    }

    pub async fn journal_cut(&self, key: &JournalKey<'_>, from_seq: u32) -> Result<(), StoreError> {
        let from = i64::from(from_seq);
        self.with(async |c| {
            c.execute(
                "DELETE FROM journal
                 WHERE tenant = $1 AND function = $2 AND invocation = $3 AND seq >= $4",
                &[&key.tenant, &key.function, &key.invocation, &from],
            )
            .await
        })
        .await?;
        Ok(())
    }

    pub async fn journal_sweep(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.with(async |c| {
            c.execute(
                "DELETE FROM journal WHERE created_ms < $1
                 AND invocation NOT IN (SELECT id FROM queue)",
                &[&before_ms],
            )
            .await
        })
        .await
    }

    pub async fn append_logs(&self, records: &[LogRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        self.with(async |c| {
            let tx = c.transaction().await?;
            let stmt = tx.prepare(
                "INSERT INTO logs (tenant, function, version, invocation, ts_ms, stream, level, message, trace_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            ).await?;
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
                ).await?;
            }
            tx.commit().await
        }).await
    }

    pub async fn log_usage(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT tenant, function, bytes FROM log_usage WHERE bytes > 0",
                    &[],
                )
                .await
            })
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get::<_, i64>(2).max(0) as u64))
            .collect())
    }

    pub async fn trim_logs(
        &self,
        tenant: &str,
        function: &str,
        keep: u64,
    ) -> Result<u64, StoreError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.with(async |c| {
            c.execute(
                "DELETE FROM logs WHERE tenant = $1 AND function = $2 AND id <= (
                     SELECT id FROM (
                         SELECT id, SUM(octet_length(message)) OVER (ORDER BY id DESC) AS newer
                         FROM logs WHERE tenant = $1 AND function = $2
                     ) AS t WHERE newer > $3 ORDER BY id DESC LIMIT 1
                 )",
                &[&tenant, &function, &keep],
            )
            .await
        })
        .await
    }

    pub async fn expire_logs(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.with(async |c| {
            c.execute("DELETE FROM logs WHERE ts_ms < $1", &[&before_ms])
                .await
        })
        .await
    }

    pub async fn read_logs(
        &self,
        tenant: &str,
        function: &str,
        query: &LogQuery,
    ) -> Result<Vec<LogRecord>, StoreError> {
        let limit = i64::from(if query.limit == 0 { 100 } else { query.limit });
        // Newest first, unless following: then the oldest after the cursor.
        let order = if query.after.is_some() { "ASC" } else { "DESC" };
        let rows = self.with(async |c| {
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
            ).await
        }).await?;
        let record = |r: &Row| LogRecord {
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
async fn put_within_quota(
    tx: &tokio_postgres::Transaction<'_>,
    tenant: &str,
    function: &str,
    key: &[u8],
    value: &[u8],
    max_tenant_bytes: u64,
) -> Result<bool, tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO kv (tenant, function, key, value) VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant, function, key) DO UPDATE SET value = excluded.value",
        &[&tenant, &function, &key, &value],
    )
    .await?;
    let used: i64 = tx
        .query_one("SELECT bytes FROM kv_usage WHERE tenant = $1", &[&tenant])
        .await?
        .get(0);
    Ok(used as u64 <= max_tenant_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SplitStore, SqliteStore};
    use hearth_test_support::TempPostgres;
    use std::sync::Arc;

    /// One server for all of this; a database per scenario.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_passes_the_store_scenarios_and_numbers_concurrent_deploys() {
        hearth_test_support::require!(Postgres);
        let pg = TempPostgres::start().unwrap();
        let local = tempfile::tempdir().unwrap();
        for (i, (name, scenario)) in crate::conformance::SCENARIOS.iter().enumerate() {
            eprintln!("scenario {name}");
            let url = pg.create_database(&format!("s{i}")).unwrap();
            let s = SplitStore::new(
                Arc::new(PgStore::open(&url).await.unwrap()),
                SqliteStore::open(local.path().join(format!("s{i}.db"))).unwrap(),
            );
            scenario(&s).await;
        }

        // Deploys of one name from many stores (as from several nodes),
        // each on a task of its own, get their own numbers, none skipped.
        let url = pg.create_database("race").unwrap();
        let mut stores = Vec::new();
        for _ in 0..4 {
            stores.push(Arc::new(PgStore::open(&url).await.unwrap()));
        }
        let spec = FunctionSpec::new(hearth_core::Runtime::Wasm);
        let deploys: Vec<_> = stores
            .iter()
            .map(|s| {
                let (s, spec) = (s.clone(), spec.clone());
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    for _ in 0..10 {
                        got.push(
                            s.create_version("t", "f", "aa", &spec, true)
                                .await
                                .unwrap()
                                .version,
                        );
                    }
                    got
                })
            })
            .collect();
        let mut got = Vec::new();
        for d in deploys {
            got.extend(d.await.unwrap());
        }
        got.sort();
        assert_eq!(got, (1..=40).collect::<Vec<_>>());
        let newest = stores[0].get_version("t", "f", None).await.unwrap();
        assert_eq!(newest.unwrap().version, 40);

        // Increments of one counter from many stores at once: none is lost.
        let increments: Vec<_> = stores
            .iter()
            .map(|s| {
                let s = s.clone();
                tokio::spawn(async move {
                    for _ in 0..25 {
                        s.kv_increment("t", "f", b"hits", 1, u64::MAX)
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for i in increments {
            i.await.unwrap();
        }
        assert_eq!(
            stores[0].kv_get("t", "f", b"hits").await.unwrap().unwrap(),
            b"100"
        );
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_clear_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = PgStore::open(&format!("postgres://hearth@127.0.0.1:{port}/x"))
            .await
            .err()
            .expect("nothing listens there");
        assert!(err.to_string().contains("PostgreSQL"), "{err}");
    }
}
