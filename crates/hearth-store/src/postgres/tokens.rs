//! Tokens in PostgreSQL: the rules are SQLite's (`sqlite/tokens.rs`). A
//! tenant's row is locked while its tokens change, so two creations
//! racing cannot both take its last place.

use tokio_postgres::{Row, Transaction};

use super::PgStore;
use crate::tokens::{ID_DIGITS, same_token};
use crate::{Grant, MAX_TOKENS_PER_TENANT, Principal, StoreError, sha256_hex};

/// The columns [`principal`] reads, in its order.
const COLUMNS: &str = "tenant, substr(hash, 1, 16), scope, function, expires_ms, name, created_ms";

fn principal(r: &Row) -> Result<Principal, StoreError> {
    Ok(Principal {
        tenant: r.get(0),
        id: r.get(1),
        grant: Grant {
            scope: r.get::<_, &str>(2).parse().map_err(StoreError::Corrupt)?,
            function: r.get(3),
            expires_ms: r.get(4),
            name: r.get(5),
        },
        created_ms: r.get(6),
    })
}

/// Locks the tenant's row; [`StoreError::NoSuchTenant`] if there is none.
async fn lock_tenant(tx: &Transaction<'_>, tenant: &str) -> Result<(), StoreError> {
    tx.query_opt(
        "SELECT 1 FROM tenants WHERE name = $1 FOR UPDATE",
        &[&tenant],
    )
    .await?
    .map(|_| ())
    .ok_or_else(|| StoreError::NoSuchTenant(tenant.to_string()))
}

async fn by_hash(tx: &Transaction<'_>, hash: &str) -> Result<Option<Principal>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM access_tokens WHERE hash = $1");
    tx.query_opt(&sql, &[&hash])
        .await?
        .map(|r| principal(&r))
        .transpose()
}

async fn insert(
    tx: &Transaction<'_>,
    tenant: &str,
    grant: &Grant,
    hash: &str,
) -> Result<Principal, StoreError> {
    tx.execute(
        "INSERT INTO access_tokens (hash, tenant, scope, function, expires_ms, name, created_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &hash,
            &tenant,
            &grant.scope.as_str(),
            &grant.function,
            &grant.expires_ms,
            &grant.name,
            &hearth_core::unix_time_ms(),
        ],
    )
    .await?;
    by_hash(tx, hash)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a token inserted is not there".into()))
}

/// The tenant's token `id` and its hash, locked.
async fn find(
    tx: &Transaction<'_>,
    tenant: &str,
    id: &str,
) -> Result<(Principal, String), StoreError> {
    let no_such = || StoreError::NoSuchToken {
        tenant: tenant.to_string(),
        id: id.to_string(),
    };
    if id.len() != ID_DIGITS || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(no_such());
    }
    let sql = format!(
        "SELECT {COLUMNS}, hash FROM access_tokens
         WHERE tenant = $1 AND substr(hash, 1, 16) = $2 FOR UPDATE"
    );
    let row = tx
        .query_opt(&sql, &[&tenant, &id.to_ascii_lowercase()])
        .await?
        .ok_or_else(no_such)?;
    Ok((principal(&row)?, row.get(7)))
}

impl PgStore {
    pub async fn add_token(
        &self,
        tenant: &str,
        grant: &Grant,
        token: &str,
    ) -> Result<Principal, StoreError> {
        grant.check()?;
        let hash = sha256_hex(token.as_bytes());
        self.in_transaction(async |tx| {
            lock_tenant(tx, tenant).await?;
            if let Some(had) = by_hash(tx, &hash).await? {
                return same_token(had, tenant, grant);
            }
            let count: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM access_tokens WHERE tenant = $1",
                    &[&tenant],
                )
                .await?
                .get(0);
            if count >= i64::from(MAX_TOKENS_PER_TENANT) {
                return Err(StoreError::TooManyTokens {
                    tenant: tenant.to_string(),
                    max: MAX_TOKENS_PER_TENANT,
                });
            }
            insert(tx, tenant, grant, &hash).await
        })
        .await
    }

    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        let hash = sha256_hex(token.as_bytes());
        let sql = format!("SELECT {COLUMNS} FROM access_tokens WHERE hash = $1");
        let row = self
            .with(async |c| c.query_opt(&sql, &[&hash]).await)
            .await?;
        row.map(|r| principal(&r)).transpose()
    }

    pub async fn tokens(&self, tenant: &str) -> Result<Vec<Principal>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM access_tokens WHERE tenant = $1 ORDER BY created_ms, hash"
        );
        let rows = self.with(async |c| c.query(&sql, &[&tenant]).await).await?;
        rows.iter().map(principal).collect()
    }

    pub async fn revoke_token(&self, tenant: &str, id: &str) -> Result<Principal, StoreError> {
        self.in_transaction(async |tx| {
            let (gone, hash) = find(tx, tenant, id).await?;
            tx.execute("DELETE FROM access_tokens WHERE hash = $1", &[&hash])
                .await?;
            Ok(gone)
        })
        .await
    }

    pub async fn replace_token(
        &self,
        tenant: &str,
        id: &str,
        token: &str,
    ) -> Result<Principal, StoreError> {
        let hash = sha256_hex(token.as_bytes());
        self.in_transaction(async |tx| {
            let (old, old_hash) = find(tx, tenant, id).await?;
            tx.execute("DELETE FROM access_tokens WHERE hash = $1", &[&old_hash])
                .await?;
            insert(tx, tenant, &old.grant, &hash).await
        })
        .await
    }
}
