//! Broker bindings in PostgreSQL (`events.rs` says what one is).

use tokio_postgres::Row;

use super::PgStore;
use crate::StoreError;
use crate::events::{MAX_TRIGGERS_PER_TENANT, TriggerRow, check_triggers};

const COLUMNS: &str = "tenant, function, id, kind, spec, paused, created_ms";

fn trigger(r: &Row) -> TriggerRow {
    TriggerRow {
        tenant: r.get(0),
        function: r.get(1),
        id: r.get(2),
        kind: r.get(3),
        spec: r.get(4),
        paused: r.get(5),
        created_ms: r.get(6),
    }
}

impl PgStore {
    pub async fn set_triggers(
        &self,
        tenant: &str,
        function: &str,
        rows: &[TriggerRow],
    ) -> Result<(), StoreError> {
        check_triggers(rows)?;
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        self.in_transaction(async |tx| {
            // Deploys of one tenant's functions count each other's
            // bindings one at a time.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('hearth.triggers.' || $1))",
                &[&tenant],
            )
            .await?;
            let others: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM triggers WHERE tenant = $1 AND function <> $2",
                    &[&tenant, &function],
                )
                .await?
                .get(0);
            if usize::try_from(others).unwrap_or(usize::MAX) + rows.len() > MAX_TRIGGERS_PER_TENANT
            {
                return Err(StoreError::TooManyTriggers {
                    max: MAX_TRIGGERS_PER_TENANT,
                    per: "tenant",
                });
            }
            tx.execute(
                "DELETE FROM triggers WHERE tenant = $1 AND function = $2 AND id <> ALL($3)",
                &[&tenant, &function, &ids],
            )
            .await?;
            for r in rows {
                // A binding the function keeps keeps its pause; its
                // settings (batch, attempts, …) are the deploy's. its settings
                // (batch, attempts, …) are the deploy's.
                tx.execute(
                    "INSERT INTO triggers (tenant, function, id, kind, spec, paused, created_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (tenant, function, id)
                     DO UPDATE SET kind = excluded.kind, spec = excluded.spec",
                    &[
                        &tenant,
                        &function,
                        &r.id,
                        &r.kind,
                        &r.spec,
                        &r.paused,
                        &r.created_ms,
                    ],
                )
                .await?;
            }
            Ok(())
        })
        .await
    }

    pub async fn triggers(
        &self,
        tenant: Option<&str>,
        function: Option<&str>,
    ) -> Result<Vec<TriggerRow>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    &format!(
                        "SELECT {COLUMNS} FROM triggers
                         WHERE ($1::TEXT IS NULL OR tenant = $1)
                           AND ($2::TEXT IS NULL OR function = $2)
                         ORDER BY tenant, function, created_ms, id"
                    ),
                    &[&tenant, &function],
                )
                .await
            })
            .await?;
        Ok(rows.iter().map(trigger).collect())
    }

    pub async fn pause_trigger(
        &self,
        (tenant, function, id): (&str, &str, &str),
        paused: bool,
    ) -> Result<bool, StoreError> {
        let n = self
            .with(async |c| {
                c.execute(
                    "UPDATE triggers SET paused = $4 WHERE tenant = $1 AND function = $2 AND id = $3",
                    &[&tenant, &function, &id, &paused],
                )
                .await
            })
            .await?;
        Ok(n > 0)
    }

    pub async fn remove_trigger(
        &self,
        (tenant, function, id): (&str, &str, &str),
    ) -> Result<bool, StoreError> {
        let n = self
            .with(async |c| {
                c.execute(
                    "DELETE FROM triggers WHERE tenant = $1 AND function = $2 AND id = $3",
                    &[&tenant, &function, &id],
                )
                .await
            })
            .await?;
        Ok(n > 0)
    }
}
