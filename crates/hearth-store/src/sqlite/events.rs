//! Schedules and the queue in SQLite (`events.rs` says what each is).
//! One writer connection serializes every change, so a compare-and-set
//! is a plain `UPDATE … WHERE` in an immediate transaction.

use rusqlite::{OptionalExtension, Row, Transaction, params};

use super::SqliteStore;
use crate::StoreError;
use crate::events::{
    Claimed, DeadLetter, Enqueue, Fired, MAX_DEAD_PER_FUNCTION, QueueDepth, ScheduleRow, Settle,
};

const SCHEDULE_COLUMNS: &str =
    "tenant, function, id, expr, catch_up, paused, next_ms, fired_ms, created_ms";

fn schedule(r: &Row<'_>) -> rusqlite::Result<ScheduleRow> {
    Ok(ScheduleRow {
        tenant: r.get(0)?,
        function: r.get(1)?,
        id: r.get(2)?,
        expr: r.get(3)?,
        catch_up: r.get(4)?,
        paused: r.get(5)?,
        next_ms: r.get(6)?,
        fired_ms: r.get(7)?,
        created_ms: r.get(8)?,
    })
}

const CLAIMED_COLUMNS: &str = "id, tenant, function, target, source, request, enqueued_ms, \
     expires_ms, attempts, max_attempts, deliveries, claim, last_error";

fn claimed(r: &Row<'_>) -> rusqlite::Result<Claimed> {
    Ok(Claimed {
        id: r.get(0)?,
        tenant: r.get(1)?,
        function: r.get(2)?,
        target: r.get(3)?,
        source: r.get(4)?,
        request: r.get(5)?,
        enqueued_ms: r.get(6)?,
        expires_ms: r.get(7)?,
        attempts: r.get(8)?,
        max_attempts: r.get(9)?,
        deliveries: r.get(10)?,
        claim: r.get(11)?,
        last_error: r.get(12)?,
    })
}

/// Visible queued invocations, taken in turns between tenants: every
/// tenant's longest waiting, then every tenant's next, … (`?1`: now,
/// `?2`: how many). A tenant that floods its queue waits behind itself.
/// Whether anything is there to claim at `?1`, none of `?2`'s (a JSON
/// array of tenants).
const ANY: &str = "SELECT EXISTS(SELECT 1 FROM queue WHERE state = 'ready' AND visible_ms <= ?1
     AND tenant NOT IN (SELECT value FROM json_each(?2)))";

/// What a claim takes, at most `?3` visible at `?1`, none of `?2`'s:
/// each tenant's oldest first (its `turn`), and among tenants at the same
/// turn the one served longest ago (`queue_turns`).
const FAIR: &str = "SELECT q.id, q.tenant FROM (
        SELECT id, tenant, visible_ms,
               ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY visible_ms) AS turn
        FROM queue WHERE state = 'ready' AND visible_ms <= ?1
          AND tenant NOT IN (SELECT value FROM json_each(?2))) q
     LEFT JOIN queue_turns t ON t.tenant = q.tenant
     ORDER BY q.turn, COALESCE(t.served, 0), q.visible_ms LIMIT ?3";

fn insert(tx: &Transaction<'_>, item: &Enqueue) -> rusqlite::Result<bool> {
    Ok(tx.execute(
        "INSERT INTO queue (id, tenant, function, target, source, request, enqueued_ms,
                            expires_ms, visible_ms, attempts, max_attempts, deliveries, state)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?7, 0, ?9, 0, 'ready')
         ON CONFLICT (id) DO NOTHING",
        params![
            item.id,
            item.tenant,
            item.function,
            item.target,
            item.source,
            item.request,
            item.enqueued_ms,
            item.expires_ms,
            item.max_attempts,
        ],
    )? > 0)
}

/// How many invocations `tenant` has waiting or running.
fn ready(tx: &Transaction<'_>, tenant: &str) -> rusqlite::Result<u64> {
    let n: i64 = tx.query_row(
        "SELECT COUNT(*) FROM queue WHERE tenant = ?1 AND state = 'ready'",
        [tenant],
        |r| r.get(0),
    )?;
    Ok(n.max(0) as u64)
}

fn forget_journal(tx: &Transaction<'_>, item: &Claimed) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM journal WHERE tenant = ?1 AND function = ?2 AND invocation = ?3",
        params![item.tenant, item.function, item.id],
    )?;
    Ok(())
}

impl SqliteStore {
    pub fn set_schedules(
        &self,
        tenant: &str,
        function: &str,
        rows: &[ScheduleRow],
    ) -> Result<(), StoreError> {
        crate::events::check_schedules(rows)?;
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let kept: Vec<String> = {
            let mut st =
                tx.prepare("SELECT id FROM schedules WHERE tenant = ?1 AND function = ?2")?;
            st.query_map([tenant, function], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        for id in kept.iter().filter(|id| !rows.iter().any(|r| &r.id == *id)) {
            tx.execute(
                "DELETE FROM schedules WHERE tenant = ?1 AND function = ?2 AND id = ?3",
                params![tenant, function, id],
            )?;
        }
        for r in rows {
            // A schedule the function keeps keeps its pause and next tick;
            // its catch-up policy is the deploy's.
            tx.execute(
                "INSERT INTO schedules (tenant, function, id, expr, catch_up, paused, next_ms,
                                        created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (tenant, function, id) DO UPDATE SET catch_up = excluded.catch_up",
                params![
                    tenant,
                    function,
                    r.id,
                    r.expr,
                    r.catch_up,
                    r.paused,
                    r.next_ms,
                    r.created_ms
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn schedules(
        &self,
        tenant: &str,
        function: Option<&str>,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let conn = self.reader();
        let mut st = conn.prepare(&format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules
             WHERE tenant = ?1 AND (?2 IS NULL OR function = ?2) ORDER BY function, created_ms, id"
        ))?;
        let rows = st.query_map(params![tenant, function], schedule)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn pause_schedule(
        &self,
        (tenant, function, id): (&str, &str, &str),
        paused: bool,
        next_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(self.writer().execute(
            "UPDATE schedules SET paused = ?4, next_ms = CASE WHEN ?4 THEN next_ms ELSE ?5 END
             WHERE tenant = ?1 AND function = ?2 AND id = ?3",
            params![tenant, function, id, paused, next_ms],
        )? > 0)
    }

    pub fn remove_schedule(
        &self,
        tenant: &str,
        function: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        Ok(self.writer().execute(
            "DELETE FROM schedules WHERE tenant = ?1 AND function = ?2 AND id = ?3",
            params![tenant, function, id],
        )? > 0)
    }

    pub fn due_schedules(&self, now_ms: i64, limit: u32) -> Result<Vec<ScheduleRow>, StoreError> {
        let conn = self.reader();
        let mut st = conn.prepare(&format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules
             WHERE paused = 0 AND next_ms <= ?1 ORDER BY next_ms LIMIT ?2"
        ))?;
        let rows = st.query_map(params![now_ms, limit], schedule)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn fire_schedule(
        &self,
        row: &ScheduleRow,
        next_ms: i64,
        firings: &[Enqueue],
        max_ready: u64,
    ) -> Result<Fired, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let full = ready(&tx, &row.tenant)? >= max_ready;
        let fired = firings.last().filter(|_| !full).map(|f| f.enqueued_ms);
        let moved = tx.execute(
            "UPDATE schedules SET next_ms = ?5, fired_ms = COALESCE(?6, fired_ms)
             WHERE tenant = ?1 AND function = ?2 AND id = ?3 AND next_ms = ?4 AND paused = 0",
            params![
                row.tenant,
                row.function,
                row.id,
                row.next_ms,
                next_ms,
                fired
            ],
        )? > 0;
        if !moved {
            return Ok(Fired::Taken);
        }
        if full {
            tx.commit()?;
            return Ok(Fired::Full);
        }
        for f in firings {
            insert(&tx, f)?;
        }
        tx.commit()?;
        Ok(Fired::Queued)
    }

    pub fn enqueue(&self, item: &Enqueue, max_ready: u64) -> Result<bool, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        if ready(&tx, &item.tenant)? >= max_ready {
            return Err(StoreError::QueueFull {
                tenant: item.tenant.clone(),
                max: max_ready,
            });
        }
        let added = insert(&tx, item)?;
        tx.commit()?;
        Ok(added)
    }

    pub fn claim_queued(
        &self,
        claim: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<Claimed>, StoreError> {
        let skip = serde_json::to_string(skip).expect("strings serialize");
        // An idle queue is polled often: asked of a reader first, so the
        // poll does not take the writer.
        let any: bool = self
            .reader()
            .query_row(ANY, params![now_ms, skip], |r| r.get(0))?;
        if !any {
            return Ok(Vec::new());
        }
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let picked: Vec<(String, String)> = {
            let mut st = tx.prepare(FAIR)?;
            st.query_map(params![now_ms, skip, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        let served: i64 = tx.query_row(
            "SELECT COALESCE(MAX(served), 0) + 1 FROM queue_turns",
            [],
            |r| r.get(0),
        )?;
        let mut out = Vec::with_capacity(picked.len());
        for (id, tenant) in picked {
            tx.execute(
                "INSERT INTO queue_turns (tenant, served) VALUES (?1, ?2)
                 ON CONFLICT (tenant) DO UPDATE SET served = excluded.served",
                params![tenant, served],
            )?;
            let row = tx.query_row(
                &format!(
                    "UPDATE queue SET visible_ms = ?2, deliveries = deliveries + 1, claim = ?3
                     WHERE id = ?1 RETURNING {CLAIMED_COLUMNS}"
                ),
                params![id, now_ms + lease_ms, claim],
                claimed,
            )?;
            out.push(row);
        }
        tx.commit()?;
        Ok(out)
    }

    pub fn release_claims(&self) -> Result<u64, StoreError> {
        Ok(self.writer().execute(
            "UPDATE queue SET visible_ms = 0, claim = NULL
             WHERE state = 'ready' AND claim IS NOT NULL",
            [],
        )? as u64)
    }

    pub fn settle_queued(&self, item: &Claimed, how: &Settle) -> Result<bool, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mine = tx
            .query_row(
                "SELECT 1 FROM queue WHERE id = ?1 AND claim = ?2 AND state = 'ready'",
                params![item.id, item.claim],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if !mine {
            return Ok(false);
        }
        match how {
            Settle::Done => {
                tx.execute("DELETE FROM queue WHERE id = ?1", [&item.id])?;
            }
            Settle::Retry {
                visible_ms,
                error,
                refused,
            } => {
                tx.execute(
                    "UPDATE queue SET visible_ms = ?2, claim = NULL, last_error = ?3,
                         attempts = attempts + CASE WHEN ?4 THEN 0 ELSE 1 END,
                         deliveries = 0
                     WHERE id = ?1",
                    params![item.id, visible_ms, error, refused],
                )?;
            }
            Settle::Dead { error } => {
                tx.execute(
                    "UPDATE queue SET state = 'dead', claim = NULL, last_error = ?2,
                         attempts = attempts + 1
                     WHERE id = ?1",
                    params![item.id, error],
                )?;
                // The function's oldest dead letters past its bound go.
                tx.execute(
                    "DELETE FROM queue WHERE tenant = ?1 AND function = ?2 AND state = 'dead'
                       AND id NOT IN (
                         SELECT id FROM queue
                         WHERE tenant = ?1 AND function = ?2 AND state = 'dead'
                         ORDER BY enqueued_ms DESC, id DESC LIMIT ?3)",
                    params![item.tenant, item.function, MAX_DEAD_PER_FUNCTION],
                )?;
            }
        }
        if !matches!(how, Settle::Retry { .. }) {
            forget_journal(&tx, item)?;
        }
        tx.commit()?;
        Ok(true)
    }

    pub fn dead_letters(
        &self,
        tenant: &str,
        function: &str,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let conn = self.reader();
        let mut st = conn.prepare(
            "SELECT id, function, source, enqueued_ms, attempts, COALESCE(last_error, '')
             FROM queue WHERE tenant = ?1 AND function = ?2 AND state = 'dead'
             ORDER BY enqueued_ms DESC, id DESC LIMIT ?3",
        )?;
        let rows = st.query_map(params![tenant, function, limit], |r| {
            Ok(DeadLetter {
                id: r.get(0)?,
                function: r.get(1)?,
                source: r.get(2)?,
                enqueued_ms: r.get(3)?,
                attempts: r.get(4)?,
                error: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn requeue_dead(
        &self,
        (tenant, function, id): (&str, &str, Option<&str>),
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<u64, StoreError> {
        Ok(self.writer().execute(
            "UPDATE queue SET state = 'ready', attempts = 0, deliveries = 0, visible_ms = ?4,
                 expires_ms = ?5, claim = NULL
             WHERE tenant = ?1 AND function = ?2 AND state = 'dead' AND (?3 IS NULL OR id = ?3)",
            params![tenant, function, id, now_ms, expires_ms],
        )? as u64)
    }

    pub fn purge_dead(
        &self,
        (tenant, function, id): (&str, &str, Option<&str>),
    ) -> Result<u64, StoreError> {
        Ok(self.writer().execute(
            "DELETE FROM queue
             WHERE tenant = ?1 AND function = ?2 AND state = 'dead' AND (?3 IS NULL OR id = ?3)",
            params![tenant, function, id],
        )? as u64)
    }

    pub fn queue_depths(&self) -> Result<Vec<QueueDepth>, StoreError> {
        let conn = self.reader();
        let mut st = conn.prepare(
            "SELECT tenant, function,
                    SUM(state = 'ready'), SUM(state = 'dead'),
                    MIN(CASE WHEN state = 'ready' THEN enqueued_ms END),
                    SUM(state = 'ready' AND attempts > 0)
             FROM queue GROUP BY tenant, function ORDER BY tenant, function",
        )?;
        let n = |r: &Row<'_>, i: usize| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
        let rows = st.query_map([], |r| {
            Ok(QueueDepth {
                tenant: r.get(0)?,
                function: r.get(1)?,
                ready: n(r, 2)?,
                dead: n(r, 3)?,
                oldest_ms: r.get(4)?,
                retrying: n(r, 5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_node_takes_back_the_claims_it_died_holding() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path().join("hearth.db")).unwrap();
        let item = Enqueue {
            id: "one".into(),
            tenant: "t".into(),
            function: "f".into(),
            target: "live".into(),
            source: "async".into(),
            request: Vec::new(),
            enqueued_ms: 0,
            expires_ms: i64::MAX,
            max_attempts: 3,
        };
        s.enqueue(&item, 10).unwrap();
        assert_eq!(
            s.claim_queued("before", 1_000, 300_000, 10, &[])
                .unwrap()
                .len(),
            1
        );
        assert!(
            s.claim_queued("after", 2_000, 300_000, 10, &[])
                .unwrap()
                .is_empty()
        );
        assert_eq!(s.release_claims().unwrap(), 1);
        let again = s.claim_queued("after", 2_000, 300_000, 10, &[]).unwrap();
        assert_eq!((again.len(), again[0].redelivered()), (1, true));
    }
}
