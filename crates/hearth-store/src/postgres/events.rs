//! Schedules and the queue in PostgreSQL, shared by a cluster's members
//! (`events.rs` says what each is; the rules are SQLite's,
//! `sqlite/events.rs`). A tick is moved on by a conditional `UPDATE`, which
//! PostgreSQL runs once per row whichever member races it; claimers skip
//! the rows another has locked (`FOR UPDATE SKIP LOCKED`), so many
//! gateways draw from one queue without waiting on each other, and take
//! tenants in turns (a window over the visible rows: PostgreSQL locks no
//! row a window reads, so the rows it picks are locked by id).

use tokio_postgres::Row;
use tokio_postgres::Transaction;

use super::PgStore;
use crate::StoreError;
use crate::events::{
    Claimed, DeadLetter, Enqueue, Fired, MAX_DEAD_PER_FUNCTION, QueueDepth, ScheduleRow, Settle,
};

const SCHEDULE_COLUMNS: &str =
    "tenant, function, id, expr, catch_up, paused, next_ms, fired_ms, created_ms";

fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn schedule(r: &Row) -> ScheduleRow {
    ScheduleRow {
        tenant: r.get(0),
        function: r.get(1),
        id: r.get(2),
        expr: r.get(3),
        catch_up: count(r.get(4)),
        paused: r.get(5),
        next_ms: r.get(6),
        fired_ms: r.get(7),
        created_ms: r.get(8),
    }
}

const CLAIMED_COLUMNS: &str = "id, tenant, function, target, source, request, enqueued_ms, \
     expires_ms, attempts, max_attempts, deliveries, claim, last_error";

fn claimed(r: &Row) -> Claimed {
    Claimed {
        id: r.get(0),
        tenant: r.get(1),
        function: r.get(2),
        target: r.get(3),
        source: r.get(4),
        request: r.get(5),
        enqueued_ms: r.get(6),
        expires_ms: r.get(7),
        attempts: count(r.get(8)),
        max_attempts: count(r.get(9)),
        deliveries: count(r.get(10)),
        claim: r.get(11),
        last_error: r.get(12),
    }
}

fn small(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

async fn insert(tx: &Transaction<'_>, item: &Enqueue) -> Result<bool, tokio_postgres::Error> {
    Ok(tx
        .execute(
            "INSERT INTO queue (id, tenant, function, target, source, request, enqueued_ms,
                                expires_ms, visible_ms, attempts, max_attempts, deliveries, state)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7, 0, $9, 0, 'ready')
             ON CONFLICT (id) DO NOTHING",
            &[
                &item.id,
                &item.tenant,
                &item.function,
                &item.target,
                &item.source,
                &item.request,
                &item.enqueued_ms,
                &item.expires_ms,
                &small(item.max_attempts),
            ],
        )
        .await?
        > 0)
}

/// How many invocations `tenant` has waiting or running, its enqueues
/// taking turns from here to the transaction's end (so two cannot both
/// take its last place).
async fn ready(tx: &Transaction<'_>, tenant: &str) -> Result<u64, tokio_postgres::Error> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('hearth queue ' || $1))",
        &[&tenant],
    )
    .await?;
    let n: i64 = tx
        .query_one(
            "SELECT COUNT(*) FROM queue WHERE tenant = $1 AND state = 'ready'",
            &[&tenant],
        )
        .await?
        .get(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

impl PgStore {
    pub async fn set_schedules(
        &self,
        tenant: &str,
        function: &str,
        rows: &[ScheduleRow],
    ) -> Result<(), StoreError> {
        crate::events::check_schedules(rows)?;
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        self.in_transaction(async |tx| {
            tx.execute(
                "DELETE FROM schedules WHERE tenant = $1 AND function = $2 AND id <> ALL($3)",
                &[&tenant, &function, &ids],
            )
            .await?;
            for r in rows {
                tx.execute(
                    "INSERT INTO schedules (tenant, function, id, expr, catch_up, paused,
                                            next_ms, created_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (tenant, function, id)
                     DO UPDATE SET catch_up = excluded.catch_up",
                    &[
                        &tenant,
                        &function,
                        &r.id,
                        &r.expr,
                        &small(r.catch_up),
                        &r.paused,
                        &r.next_ms,
                        &r.created_ms,
                    ],
                )
                .await?;
            }
            Ok(())
        })
        .await
    }

    pub async fn schedules(
        &self,
        tenant: &str,
        function: Option<&str>,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    &format!(
                        "SELECT {SCHEDULE_COLUMNS} FROM schedules
                         WHERE tenant = $1 AND ($2::TEXT IS NULL OR function = $2)
                         ORDER BY function, created_ms, id"
                    ),
                    &[&tenant, &function],
                )
                .await
            })
            .await?;
        Ok(rows.iter().map(schedule).collect())
    }

    pub async fn pause_schedule(
        &self,
        (tenant, function, id): (&str, &str, &str),
        paused: bool,
        next_ms: i64,
    ) -> Result<bool, StoreError> {
        let n = self
            .with(async |c| {
                c.execute(
                    "UPDATE schedules SET paused = $4,
                         next_ms = CASE WHEN $4 THEN next_ms ELSE $5 END
                     WHERE tenant = $1 AND function = $2 AND id = $3",
                    &[&tenant, &function, &id, &paused, &next_ms],
                )
                .await
            })
            .await?;
        Ok(n > 0)
    }

    pub async fn remove_schedule(
        &self,
        tenant: &str,
        function: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        let n = self
            .with(async |c| {
                c.execute(
                    "DELETE FROM schedules WHERE tenant = $1 AND function = $2 AND id = $3",
                    &[&tenant, &function, &id],
                )
                .await
            })
            .await?;
        Ok(n > 0)
    }

    pub async fn due_schedules(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let limit = i64::from(limit);
        let rows = self
            .with(async |c| {
                c.query(
                    &format!(
                        "SELECT {SCHEDULE_COLUMNS} FROM schedules
                         WHERE NOT paused AND next_ms <= $1 ORDER BY next_ms LIMIT $2"
                    ),
                    &[&now_ms, &limit],
                )
                .await
            })
            .await?;
        Ok(rows.iter().map(schedule).collect())
    }

    pub async fn fire_schedule(
        &self,
        row: &ScheduleRow,
        next_ms: i64,
        firings: &[Enqueue],
        max_ready: u64,
    ) -> Result<Fired, StoreError> {
        self.in_transaction(async |tx| {
            let full = ready(tx, &row.tenant).await? >= max_ready;
            let fired = firings.last().filter(|_| !full).map(|f| f.enqueued_ms);
            let moved = tx
                .execute(
                    "UPDATE schedules SET next_ms = $5, fired_ms = COALESCE($6, fired_ms)
                     WHERE tenant = $1 AND function = $2 AND id = $3 AND next_ms = $4
                       AND NOT paused",
                    &[
                        &row.tenant,
                        &row.function,
                        &row.id,
                        &row.next_ms,
                        &next_ms,
                        &fired,
                    ],
                )
                .await?
                > 0;
            if !moved {
                return Ok(Fired::Taken);
            }
            if full {
                return Ok(Fired::Full);
            }
            for f in firings {
                insert(tx, f).await?;
            }
            Ok(Fired::Queued)
        })
        .await
    }

    pub async fn enqueue(&self, item: &Enqueue, max_ready: u64) -> Result<bool, StoreError> {
        self.in_transaction(async |tx| {
            // One tenant's enqueues take turns, so two cannot both take
            // its last place.
            if ready(tx, &item.tenant).await? >= max_ready {
                return Err(StoreError::QueueFull {
                    tenant: item.tenant.clone(),
                    max: max_ready,
                });
            }
            Ok(insert(tx, item).await?)
        })
        .await
    }

    pub async fn claim_queued(
        &self,
        claim: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<Claimed>, StoreError> {
        let (until, limit) = (now_ms + lease_ms, i64::from(limit));
        let rows = self
            .with(async |c| {
                // Each tenant's oldest first, and among tenants at the same
                // turn the one served longest ago (`queue_turns`), which the
                // claim then moves to the back.
                c.query(
                    &format!(
                        "WITH claimed AS (
                           UPDATE queue SET visible_ms = $2, deliveries = deliveries + 1, claim = $3
                           WHERE id IN (
                               SELECT id FROM queue
                               WHERE id IN (
                                   SELECT w.id FROM (
                                       SELECT id, tenant, visible_ms, ROW_NUMBER() OVER (
                                           PARTITION BY tenant ORDER BY visible_ms) AS turn
                                       FROM queue WHERE state = 'ready' AND visible_ms <= $1
                                         AND NOT (tenant = ANY($5))) w
                                   LEFT JOIN queue_turns t ON t.tenant = w.tenant
                                   ORDER BY w.turn, COALESCE(t.served, 0), w.visible_ms LIMIT $4)
                                 AND state = 'ready' AND visible_ms <= $1
                               FOR UPDATE SKIP LOCKED)
                           RETURNING {CLAIMED_COLUMNS}),
                         turns AS (
                           INSERT INTO queue_turns (tenant, served)
                           SELECT DISTINCT tenant,
                                  (SELECT COALESCE(MAX(served), 0) + 1 FROM queue_turns)
                           FROM claimed
                           ON CONFLICT (tenant) DO UPDATE SET served = excluded.served)
                         SELECT {CLAIMED_COLUMNS} FROM claimed"
                    ),
                    &[&now_ms, &until, &claim, &limit, &skip],
                )
                .await
            })
            .await?;
        Ok(rows.iter().map(claimed).collect())
    }

    pub async fn settle_queued(&self, item: &Claimed, how: &Settle) -> Result<bool, StoreError> {
        self.in_transaction(async |tx| {
            let mine = tx
                .query_opt(
                    "SELECT 1 FROM queue WHERE id = $1 AND claim = $2 AND state = 'ready'
                     FOR UPDATE",
                    &[&item.id, &item.claim],
                )
                .await?
                .is_some();
            if !mine {
                return Ok(false);
            }
            match how {
                Settle::Done => {
                    tx.execute("DELETE FROM queue WHERE id = $1", &[&item.id])
                        .await?;
                }
                Settle::Retry {
                    visible_ms,
                    error,
                    refused,
                } => {
                    tx.execute(
                        "UPDATE queue SET visible_ms = $2, claim = NULL, last_error = $3,
                             attempts = attempts + CASE WHEN $4 THEN 0 ELSE 1 END,
                             deliveries = 0
                         WHERE id = $1",
                        &[&item.id, visible_ms, error, refused],
                    )
                    .await?;
                }
                Settle::Dead { error } => {
                    tx.execute(
                        "UPDATE queue SET state = 'dead', claim = NULL, last_error = $2,
                             attempts = attempts + 1
                         WHERE id = $1",
                        &[&item.id, error],
                    )
                    .await?;
                    // The function's oldest dead letters past its bound go.
                    tx.execute(
                        "DELETE FROM queue WHERE tenant = $1 AND function = $2 AND state = 'dead'
                           AND id NOT IN (
                             SELECT id FROM queue
                             WHERE tenant = $1 AND function = $2 AND state = 'dead'
                             ORDER BY enqueued_ms DESC, id DESC LIMIT $3)",
                        &[
                            &item.tenant,
                            &item.function,
                            &i64::from(MAX_DEAD_PER_FUNCTION),
                        ],
                    )
                    .await?;
                }
            }
            if !matches!(how, Settle::Retry { .. }) {
                tx.execute(
                    "DELETE FROM journal WHERE tenant = $1 AND function = $2 AND invocation = $3",
                    &[&item.tenant, &item.function, &item.id],
                )
                .await?;
            }
            Ok(true)
        })
        .await
    }

    pub async fn dead_letters(
        &self,
        tenant: &str,
        function: &str,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let limit = i64::from(limit);
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT id, function, source, enqueued_ms, attempts, COALESCE(last_error, '')
                     FROM queue WHERE tenant = $1 AND function = $2 AND state = 'dead'
                     ORDER BY enqueued_ms DESC, id DESC LIMIT $3",
                    &[&tenant, &function, &limit],
                )
                .await
            })
            .await?;
        Ok(rows
            .iter()
            .map(|r| DeadLetter {
                id: r.get(0),
                function: r.get(1),
                source: r.get(2),
                enqueued_ms: r.get(3),
                attempts: count(r.get(4)),
                error: r.get(5),
            })
            .collect())
    }

    pub async fn requeue_dead(
        &self,
        (tenant, function, id): (&str, &str, Option<&str>),
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<u64, StoreError> {
        self.with(async |c| {
            c.execute(
                "UPDATE queue SET state = 'ready', attempts = 0, deliveries = 0, visible_ms = $4,
                     expires_ms = $5, claim = NULL
                 WHERE tenant = $1 AND function = $2 AND state = 'dead'
                   AND ($3::TEXT IS NULL OR id = $3)",
                &[&tenant, &function, &id, &now_ms, &expires_ms],
            )
            .await
        })
        .await
    }

    pub async fn purge_dead(
        &self,
        (tenant, function, id): (&str, &str, Option<&str>),
    ) -> Result<u64, StoreError> {
        self.with(async |c| {
            c.execute(
                "DELETE FROM queue WHERE tenant = $1 AND function = $2 AND state = 'dead'
                   AND ($3::TEXT IS NULL OR id = $3)",
                &[&tenant, &function, &id],
            )
            .await
        })
        .await
    }

    pub async fn queue_depths(&self) -> Result<Vec<QueueDepth>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT tenant, function,
                            COUNT(*) FILTER (WHERE state = 'ready'),
                            COUNT(*) FILTER (WHERE state = 'dead'),
                            MIN(enqueued_ms) FILTER (WHERE state = 'ready'),
                            COUNT(*) FILTER (WHERE state = 'ready' AND attempts > 0)
                     FROM queue GROUP BY tenant, function ORDER BY tenant, function",
                    &[],
                )
                .await
            })
            .await?;
        let n = |r: &Row, i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
        Ok(rows
            .iter()
            .map(|r| QueueDepth {
                tenant: r.get(0),
                function: r.get(1),
                ready: n(r, 2),
                dead: n(r, 3),
                oldest_ms: r.get(4),
                retrying: n(r, 5),
            })
            .collect())
    }
}
