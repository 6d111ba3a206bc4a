//! Broker bindings in SQLite (`events.rs` says what one is).

use rusqlite::{Row, params};

use super::SqliteStore;
use crate::StoreError;
use crate::events::{MAX_TRIGGERS_PER_TENANT, TriggerRow, check_triggers};

const COLUMNS: &str = "tenant, function, id, kind, spec, paused, created_ms";

fn trigger(r: &Row<'_>) -> rusqlite::Result<TriggerRow> {
    Ok(TriggerRow {
        tenant: r.get(0)?,
        function: r.get(1)?,
        id: r.get(2)?,
        kind: r.get(3)?,
        spec: r.get(4)?,
        paused: r.get(5)?,
        created_ms: r.get(6)?,
    })
}

impl SqliteStore {
    pub fn set_triggers(
        &self,
        tenant: &str,
        function: &str,
        rows: &[TriggerRow],
    ) -> Result<(), StoreError> {
        check_triggers(rows)?;
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let others: i64 = tx.query_row(
            "SELECT COUNT(*) FROM triggers WHERE tenant = ?1 AND function <> ?2",
            params![tenant, function],
            |r| r.get(0),
        )?;
        if usize::try_from(others).unwrap_or(usize::MAX) + rows.len() > MAX_TRIGGERS_PER_TENANT {
            return Err(StoreError::TooManyTriggers {
                max: MAX_TRIGGERS_PER_TENANT,
                per: "tenant",
            });
        }
        let kept: Vec<String> = {
            let mut st =
                tx.prepare("SELECT id FROM triggers WHERE tenant = ?1 AND function = ?2")?;
            st.query_map([tenant, function], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        for id in kept.iter().filter(|id| !rows.iter().any(|r| &r.id == *id)) {
            tx.execute(
                "DELETE FROM triggers WHERE tenant = ?1 AND function = ?2 AND id = ?3",
                params![tenant, function, id],
            )?;
        }
        for r in rows {
            // A binding the function keeps keeps its pause; its settings
            // (batch, attempts, …) are the deploy's.
            tx.execute(
                "INSERT INTO triggers (tenant, function, id, kind, spec, paused, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (tenant, function, id)
                 DO UPDATE SET kind = excluded.kind, spec = excluded.spec",
                params![
                    tenant,
                    function,
                    r.id,
                    r.kind,
                    r.spec,
                    r.paused,
                    r.created_ms
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn triggers(
        &self,
        tenant: Option<&str>,
        function: Option<&str>,
    ) -> Result<Vec<TriggerRow>, StoreError> {
        let conn = self.reader();
        let mut st = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM triggers
             WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR function = ?2)
             ORDER BY tenant, function, created_ms, id"
        ))?;
        let rows = st.query_map(params![tenant, function], trigger)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn pause_trigger(
        &self,
        (tenant, function, id): (&str, &str, &str),
        paused: bool,
    ) -> Result<bool, StoreError> {
        Ok(self.writer().execute(
            "UPDATE triggers SET paused = ?4 WHERE tenant = ?1 AND function = ?2 AND id = ?3",
            params![tenant, function, id, paused],
        )? > 0)
    }

    pub fn remove_trigger(
        &self,
        (tenant, function, id): (&str, &str, &str),
    ) -> Result<bool, StoreError> {
        Ok(self.writer().execute(
            "DELETE FROM triggers WHERE tenant = ?1 AND function = ?2 AND id = ?3",
            params![tenant, function, id],
        )? > 0)
    }
}
