//! Secrets in SQLite: each row a tenant's sealed value.

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::secrets::check_sealed;
use crate::{MAX_SECRETS_PER_TENANT, SecretInfo, StoreError};

impl SqliteStore {
    pub fn put_secret(&self, tenant: &str, name: &str, sealed: &[u8]) -> Result<bool, StoreError> {
        check_sealed(sealed)?;
        let now = hearth_core::unix_time_ms();
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        if tx
            .query_row(
                "SELECT 1 FROM tenants WHERE name = ?1",
                [tenant],
                |_| Ok(()),
            )
            .optional()?
            .is_none()
        {
            return Err(StoreError::NoSuchTenant(tenant.to_string()));
        }
        let updated = tx.execute(
            "UPDATE secrets SET sealed = ?3, updated_ms = ?4 WHERE tenant = ?1 AND name = ?2",
            params![tenant, name, sealed, now],
        )?;
        if updated == 0 {
            let count: u32 = tx.query_row(
                "SELECT COUNT(*) FROM secrets WHERE tenant = ?1",
                [tenant],
                |r| r.get(0),
            )?;
            if count >= MAX_SECRETS_PER_TENANT {
                return Err(StoreError::TooManySecrets {
                    tenant: tenant.to_string(),
                    max: MAX_SECRETS_PER_TENANT,
                });
            }
            tx.execute(
                "INSERT INTO secrets (tenant, name, sealed, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?4)",
                params![tenant, name, sealed, now],
            )?;
        }
        tx.commit()?;
        Ok(updated == 0)
    }

    pub fn secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>, StoreError> {
        let conn = self.reader();
        let mut st = conn.prepare(
            "SELECT name, created_ms, updated_ms FROM secrets WHERE tenant = ?1 ORDER BY name",
        )?;
        let rows = st.query_map([tenant], |r| {
            Ok(SecretInfo {
                name: r.get(0)?,
                created_ms: r.get(1)?,
                updated_ms: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn sealed_secret(&self, tenant: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .reader()
            .query_row(
                "SELECT sealed FROM secrets WHERE tenant = ?1 AND name = ?2",
                [tenant, name],
                |r| r.get(0),
            )
            .optional()?)
    }

    pub fn remove_secret(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        let removed = self.writer().execute(
            "DELETE FROM secrets WHERE tenant = ?1 AND name = ?2",
            [tenant, name],
        )?;
        Ok(removed > 0)
    }
}
