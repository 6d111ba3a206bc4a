use std::path::PathBuf;

use displaydoc::Display;
use thiserror::Error;

/// Why a store operation failed.
#[derive(Debug, Display, Error)]
pub enum StoreError {
    /// database error: {0}
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL: {0}
    Postgres(#[from] tokio_postgres::Error),
    /// the store's URL: {0}
    StoreUrl(String),
    /// {0}
    StoreTls(String),
    /// no PostgreSQL connection: {0}
    Pool(#[from] deadpool_postgres::PoolError),
    /// the store's blocking thread was stopped (the runtime is shutting down)
    Stopped,
    /// the database's schema could not be migrated ({0}); a database another Hearth migrated further needs that Hearth or a newer one
    Migration(#[from] refinery::Error),
    /// {0}
    Schema(String),
    /// the nodes' store role: {0}
    NodeRole(String),
    /// a stored record is unreadable: {0}
    Corrupt(String),
    /// failed to {action} {path}: {source}
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// artifact {0} is not in the store
    MissingArtifact(String),
    /// artifact {hash} is corrupt: its content hashes to {actual}
    CorruptArtifact { hash: String, actual: String },
    /// tenant {0:?} does not exist
    NoSuchTenant(String),
    /// tenant {0:?} already exists
    TenantExists(String),
    /// that token is already another tenant's or scope's: choose another
    TokenTaken,
    /// tenant {tenant:?} has no token {id:?} (`hearth token ls` lists them)
    NoSuchToken { tenant: String, id: String },
    /// tenant {tenant:?} has {max} tokens, the most it may: revoke one first (`hearth token revoke ID`)
    TooManyTokens { tenant: String, max: u32 },
    /// {0}
    BadToken(String),
    /// tenant {tenant:?} has {max} secrets, the most it may: remove one first (`hearth secret rm NAME`)
    TooManySecrets { tenant: String, max: u32 },
    /// tenant {tenant:?}'s KV would hold more than its quota of {max_bytes} bytes (keys and values of all its functions)
    KvQuota { tenant: String, max_bytes: u64 },
    /// the KV value cannot be incremented: {0}
    KvNotACounter(String),
    /// function {function} has no version {version} (`hearth versions` lists them)
    NoSuchVersion { function: String, version: u32 },
    /// function {function} has no alias {alias:?} (`hearth aliases` lists them)
    NoSuchAlias { function: String, alias: String },
    /// alias {alias:?} of {function} has no earlier version to roll back to: promote one instead
    NothingToRollBack { function: String, alias: String },
    /// function {function} has {max} aliases, the most it may: remove one first (`DELETE /v1/functions/{{name}}/aliases/{{alias}}`)
    TooManyAliases { function: String, max: u32 },
    /// the live alias is what unpinned calls run and cannot be removed: promote another version to it instead
    LiveAlias,
    /// {0}
    BadSplit(String),
    /// a function has at most {max} schedules
    TooManySchedules { max: usize },
    /// a {per} has at most {max} broker bindings (`trigger=`): remove one first (`hearth triggers`)
    TooManyTriggers { max: usize, per: &'static str },
    /// tenant {tenant:?} has {max} invocations queued, the most it may: wait for them to run, or purge its dead letters (`hearth dlq purge`)
    QueueFull { tenant: String, max: u64 },
}

impl StoreError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        StoreError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
