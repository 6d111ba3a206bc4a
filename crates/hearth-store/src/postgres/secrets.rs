//! Secrets in PostgreSQL: the rules are SQLite's (`sqlite/secrets.rs`);
//! each change also notifies [`Change::Secret`], so every member forgets
//! code prepared with the old value. The tenant's row is locked while a
//! secret is added, so two additions cannot both take its last place.

use super::PgStore;
use crate::cluster::{Change, notify};
use crate::secrets::check_sealed;
use crate::{MAX_SECRETS_PER_TENANT, SecretInfo, StoreError};

impl PgStore {
    pub async fn put_secret(
        &self,
        tenant: &str,
        name: &str,
        sealed: &[u8],
    ) -> Result<bool, StoreError> {
        check_sealed(sealed)?;
        let now = hearth_core::unix_time_ms();
        self.in_transaction(async |tx| {
            tx.query_opt("SELECT 1 FROM tenants WHERE name = $1 FOR UPDATE", &[&tenant])
                .await?
                .ok_or_else(|| StoreError::NoSuchTenant(tenant.to_string()))?;
            let updated = tx
                .execute(
                    "UPDATE secrets SET sealed = $3, updated_ms = $4 WHERE tenant = $1 AND name = $2",
                    &[&tenant, &name, &sealed, &now],
                )
                .await?;
            if updated == 0 {
                let count: i64 = tx
                    .query_one("SELECT COUNT(*) FROM secrets WHERE tenant = $1", &[&tenant])
                    .await?
                    .get(0);
                if count >= i64::from(MAX_SECRETS_PER_TENANT) {
                    return Err(StoreError::TooManySecrets {
                        tenant: tenant.to_string(),
                        max: MAX_SECRETS_PER_TENANT,
                    });
                }
                tx.execute(
                    "INSERT INTO secrets (tenant, name, sealed, created_ms, updated_ms)
                     VALUES ($1, $2, $3, $4, $4)",
                    &[&tenant, &name, &sealed, &now],
                )
                .await?;
            }
            let change = Change::Secret {
                tenant: tenant.to_string(),
                name: name.to_string(),
            };
            notify(tx, &change).await?;
            Ok(updated == 0)
        })
        .await
    }

    pub async fn secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT name, created_ms, updated_ms FROM secrets WHERE tenant = $1
                     ORDER BY name",
                    &[&tenant],
                )
                .await
            })
            .await?;
        Ok(rows
            .iter()
            .map(|r| SecretInfo {
                name: r.get(0),
                created_ms: r.get(1),
                updated_ms: r.get(2),
            })
            .collect())
    }

    pub async fn sealed_secret(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt(
                    "SELECT sealed FROM secrets WHERE tenant = $1 AND name = $2",
                    &[&tenant, &name],
                )
                .await
            })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn remove_secret(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        self.in_transaction(async |tx| {
            let removed = tx
                .execute(
                    "DELETE FROM secrets WHERE tenant = $1 AND name = $2",
                    &[&tenant, &name],
                )
                .await?;
            if removed > 0 {
                let change = Change::Secret {
                    tenant: tenant.to_string(),
                    name: name.to_string(),
                };
                notify(tx, &change).await?;
            }
            Ok(removed > 0)
        })
        .await
    }
}
