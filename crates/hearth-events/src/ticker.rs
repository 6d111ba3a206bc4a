//! Firing schedules: every poll, the schedules whose tick has come are
//! moved on and their firings queued, one transaction each
//! (`Store::fire_schedule`), so a tick is queued once however many
//! members found it due.
//!
//! **Missed ticks.** A tick is on time if it is fired within its grace
//! (its period, at most a minute) of when it was due. Ticks that passed
//! while no member ran are skipped unless the schedule catches up: with
//! `catch_up = N` the last N of them fire (oldest first, each its own
//! invocation with its own `scheduledTime`). Either way the owner's
//! system log says how many were skipped.

use std::sync::Arc;

use hearth_core::unix_time_ms;
use hearth_store::{Enqueue, Fired, ScheduleRow, Store};

use crate::event::{firing_id, scheduled_request};
use crate::worker::Worker;
use crate::{Dispatch, EventsConfig, Schedule};

/// The most due schedules taken at one poll.
const BATCH: u32 = 256;
/// The longest a tick may be late and still count as on time.
const MAX_GRACE_MS: i64 = 60_000;

pub(crate) async fn run(
    store: Arc<dyn Store>,
    dispatch: Arc<dyn Dispatch>,
    config: EventsConfig,
    worker: Arc<Worker>,
) {
    let mut every = tokio::time::interval(config.poll);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let now = unix_time_ms();
        let due = match store.due_schedules(now, BATCH).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the due schedules");
                continue;
            }
        };
        let mut queued = false;
        for row in due {
            match fire(store.as_ref(), dispatch.as_ref(), &config, &row, now).await {
                Ok(fired) => queued |= fired,
                Err(e) => tracing::warn!(
                    error = %e, tenant = row.tenant, function = row.function, schedule = row.id,
                    "could not fire a schedule"
                ),
            }
        }
        if queued {
            worker.wake();
        }
    }
}

/// Fires `row`'s ticks up to `now`; whether this member queued them.
async fn fire(
    store: &dyn Store,
    dispatch: &dyn Dispatch,
    config: &EventsConfig,
    row: &ScheduleRow,
    now: i64,
) -> Result<bool, hearth_store::StoreError> {
    let schedule: Schedule = match row.expr.parse() {
        Ok(s) => s,
        Err(e) => {
            // Refused at deploy, so only a row written by another Hearth:
            // paused, so it is not read again every poll.
            store
                .pause_schedule((&row.tenant, &row.function, &row.id), true, 0)
                .await?;
            dispatch.note(
                &row.tenant,
                &row.function,
                "error",
                &format!("schedule {} is paused: {e}", row.id),
            );
            return Ok(false);
        }
    };
    let keep = row.catch_up as usize + 1;
    let Some(ticks) = schedule.ticks_through(row.next_ms, now, keep) else {
        return Ok(false);
    };
    let grace = MAX_GRACE_MS.min(ticks.next - ticks.kept.last().copied().unwrap_or(now));
    let on_time = ticks.kept.last().is_some_and(|&t| now - t <= grace);
    // The on-time tick, and at most `catch_up` missed ones before it.
    let missed_kept = ticks.kept.len() - usize::from(on_time);
    let skip_kept = missed_kept.saturating_sub(row.catch_up as usize);
    let firing: Vec<i64> = ticks.kept[skip_kept..].to_vec();
    let skipped = ticks.before + skip_kept as u64;
    let expires_ms = now + i64::try_from(config.max_age.as_millis()).unwrap_or(i64::MAX);
    let firings: Vec<Enqueue> = firing
        .iter()
        .map(|&tick| {
            let id = firing_id(row, tick);
            let request = scheduled_request(row, tick, id);
            Enqueue {
                id: id.to_string(),
                tenant: row.tenant.clone(),
                function: row.function.clone(),
                target: hearth_store::LIVE.to_string(),
                source: format!("schedule:{}", row.id),
                request: postcard::to_allocvec(&request).expect("a request encodes"),
                enqueued_ms: now,
                expires_ms,
                max_attempts: config.attempts,
            }
        })
        .collect();
    let fired = store
        .fire_schedule(row, ticks.next, &firings, config.max_queued_per_tenant)
        .await?;
    if fired == Fired::Full {
        dispatch.note(
            &row.tenant,
            &row.function,
            "warn",
            &format!(
                "schedule {} ({}) skipped its tick: this tenant has {} invocations queued, the \
                 most it may",
                row.id, row.expr, config.max_queued_per_tenant
            ),
        );
    }
    let moved = fired != Fired::Taken;
    if moved && skipped > 0 {
        let policy = match row.catch_up {
            0 => "it does not catch up".to_string(),
            n => format!("it catches up at most {n}"),
        };
        dispatch.note(
            &row.tenant,
            &row.function,
            "warn",
            &format!(
                "schedule {} ({}) missed {skipped} tick(s) while no member ran; they were \
                 skipped ({policy}: deploy with schedule_catch_up=N to fire the last N)",
                row.id, row.expr
            ),
        );
    }
    Ok(fired == Fired::Queued && !firings.is_empty())
}
