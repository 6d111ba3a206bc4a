//! Tokens in SQLite: each row a token's SHA-256 and its grant.

use rusqlite::{OptionalExtension, Row, params};

use super::SqliteStore;
use crate::tokens::{ID_DIGITS, same_token};
use crate::{Grant, MAX_TOKENS_PER_TENANT, Principal, StoreError, sha256_hex};

/// The columns [`principal`] reads, in its order.
const COLUMNS: &str = "tenant, substr(hash, 1, 16), scope, function, expires_ms, name, created_ms";

fn principal(r: &Row<'_>) -> rusqlite::Result<Principal> {
    let scope: String = r.get(2)?;
    Ok(Principal {
        tenant: r.get(0)?,
        id: r.get(1)?,
        grant: Grant {
            scope: scope.parse().map_err(|e: String| {
                rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, e.into())
            })?,
            function: r.get(3)?,
            expires_ms: r.get(4)?,
            name: r.get(5)?,
        },
        created_ms: r.get(6)?,
    })
}

impl SqliteStore {
    pub fn add_token(
        &self,
        tenant: &str,
        grant: &Grant,
        token: &str,
    ) -> Result<Principal, StoreError> {
        grant.check()?;
        let hash = sha256_hex(token.as_bytes());
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let exists = tx
            .query_row(
                "SELECT 1 FROM tenants WHERE name = ?1",
                [tenant],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if !exists {
            return Err(StoreError::NoSuchTenant(tenant.to_string()));
        }
        let sql = format!("SELECT {COLUMNS} FROM access_tokens WHERE hash = ?1");
        if let Some(had) = tx.query_row(&sql, [&hash], principal).optional()? {
            return same_token(had, tenant, grant);
        }
        let count: u32 = tx.query_row(
            "SELECT COUNT(*) FROM access_tokens WHERE tenant = ?1",
            [tenant],
            |r| r.get(0),
        )?;
        if count >= MAX_TOKENS_PER_TENANT {
            return Err(StoreError::TooManyTokens {
                tenant: tenant.to_string(),
                max: MAX_TOKENS_PER_TENANT,
            });
        }
        insert(&tx, tenant, grant, &hash)?;
        let made = tx.query_row(&sql, [&hash], principal)?;
        tx.commit()?;
        Ok(made)
    }

    pub fn authenticate(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM access_tokens WHERE hash = ?1");
        let found = self
            .reader()
            .query_row(&sql, [sha256_hex(token.as_bytes())], principal)
            .optional()?;
        Ok(found)
    }

    pub fn tokens(&self, tenant: &str) -> Result<Vec<Principal>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM access_tokens WHERE tenant = ?1 ORDER BY created_ms, hash"
        );
        let conn = self.reader();
        let mut st = conn.prepare(&sql)?;
        let rows = st.query_map([tenant], principal)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn revoke_token(&self, tenant: &str, id: &str) -> Result<Principal, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let (gone, hash) = find(&tx, tenant, id)?;
        tx.execute("DELETE FROM access_tokens WHERE hash = ?1", [&hash])?;
        tx.commit()?;
        Ok(gone)
    }

    pub fn replace_token(
        &self,
        tenant: &str,
        id: &str,
        token: &str,
    ) -> Result<Principal, StoreError> {
        let hash = sha256_hex(token.as_bytes());
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let (old, old_hash) = find(&tx, tenant, id)?;
        tx.execute("DELETE FROM access_tokens WHERE hash = ?1", [&old_hash])?;
        insert(&tx, tenant, &old.grant, &hash)?;
        let sql = format!("SELECT {COLUMNS} FROM access_tokens WHERE hash = ?1");
        let made = tx.query_row(&sql, [&hash], principal)?;
        tx.commit()?;
        Ok(made)
    }
}

fn insert(
    tx: &rusqlite::Transaction<'_>,
    tenant: &str,
    grant: &Grant,
    hash: &str,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO access_tokens (hash, tenant, scope, function, expires_ms, name, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            hash,
            tenant,
            grant.scope.as_str(),
            grant.function,
            grant.expires_ms,
            grant.name,
            hearth_core::unix_time_ms()
        ],
    )?;
    Ok(())
}

/// The tenant's token `id` and its hash.
fn find(
    tx: &rusqlite::Transaction<'_>,
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
        "SELECT {COLUMNS}, hash FROM access_tokens WHERE tenant = ?1 AND substr(hash, 1, 16) = ?2"
    );
    tx.query_row(&sql, params![tenant, id.to_ascii_lowercase()], |r| {
        Ok((principal(r)?, r.get(7)?))
    })
    .optional()?
    .ok_or_else(no_such)
}
