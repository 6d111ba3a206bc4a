//! Events as the store keeps them: a function's schedules, and the queue
//! of invocations waiting to run (schedules' firings, async invocations)
//! with its dead letters. What a schedule's expression means and how a
//! queued invocation runs are `hearth-events`'; the store keeps the rows
//! and makes the two steps that must be atomic so: a tick queued once
//! (`fire_schedule`), a queued invocation run by one claimer at a time
//! (`claim_queued`).

use serde::{Deserialize, Serialize};

use crate::StoreError;

/// How many schedules one function may have.
pub const MAX_SCHEDULES_PER_FUNCTION: usize = 10;

/// How many broker bindings one function may have.
pub const MAX_TRIGGERS_PER_FUNCTION: usize = 4;

/// How many broker bindings one tenant may have, every function's: each
/// holds a connection and a consumer on every member that runs events.
pub const MAX_TRIGGERS_PER_TENANT: usize = 32;

/// How many dead letters one function keeps: past it, the oldest go (a
/// schedule that always fails would otherwise add its every tick).
pub const MAX_DEAD_PER_FUNCTION: u32 = 1000;

/// What became of a tick [`crate::Store::fire_schedule`] was asked to
/// fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fired {
    /// Moved on by this call, its firings queued.
    Queued,
    /// Another member moved it first (or it was paused): nothing done.
    Taken,
    /// Moved on by this call, nothing queued: the tenant's queue is at
    /// its bound.
    Full,
}

/// One of a function's schedules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleRow {
    pub tenant: String,
    pub function: String,
    /// Stable for one expression: a redeploy that keeps it keeps its row.
    pub id: String,
    /// As deployed: `*/5 * * * *`, `TZ=Europe/Paris 0 9 * * 1-5`,
    /// `@every 30s`.
    pub expr: String,
    /// How many ticks missed while nothing ran are fired late (0: none).
    pub catch_up: u32,
    pub paused: bool,
    /// The next tick not yet fired (ms since the epoch).
    pub next_ms: i64,
    /// When its last firing was queued.
    pub fired_ms: Option<i64>,
    pub created_ms: i64,
}

/// An invocation to queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueue {
    /// The invocation's id (32 hex digits), which every attempt keeps.
    pub id: String,
    pub tenant: String,
    pub function: String,
    /// The alias or version number it runs.
    pub target: String,
    /// What queued it: `schedule:<id>` or `async`.
    pub source: String,
    /// The request, encoded by whoever queued it.
    pub request: Vec<u8>,
    pub enqueued_ms: i64,
    /// Past this it is not run again but dead.
    pub expires_ms: i64,
    pub max_attempts: u32,
}

/// A queued invocation one claimer holds until `visible_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claimed {
    pub id: String,
    pub tenant: String,
    pub function: String,
    pub target: String,
    pub source: String,
    #[serde(skip)]
    pub request: Vec<u8>,
    pub enqueued_ms: i64,
    pub expires_ms: i64,
    /// Attempts that ended in failure so far.
    pub attempts: u32,
    pub max_attempts: u32,
    /// Times it was claimed since its last attempt ended, this claim
    /// included: more than one means an earlier claimer vanished without
    /// an answer.
    pub deliveries: u32,
    /// This claim's token: only it may settle the row.
    pub claim: String,
    pub last_error: Option<String>,
}

impl Claimed {
    /// Whether an earlier claim of it ended without a word (its claimer
    /// died): this attempt follows that one's journal.
    pub fn redelivered(&self) -> bool {
        self.deliveries > 1
    }
}

/// How a claimed invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Done: gone from the queue, with its journal.
    Done,
    /// Failed: tried again at `visible_ms` (an attempt counted unless
    /// `refused`, which ran nothing), its journal kept for the retry.
    Retry {
        visible_ms: i64,
        error: String,
        refused: bool,
    },
    /// Failed for the last time: dead, kept for `hearth dlq`.
    Dead { error: String },
}

/// A dead letter as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetter {
    pub id: String,
    pub function: String,
    pub source: String,
    pub enqueued_ms: i64,
    pub attempts: u32,
    pub error: String,
}

/// One of a function's bindings to a message broker: each message it
/// delivers invokes the function's `live` alias.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TriggerRow {
    pub tenant: String,
    pub function: String,
    /// Derived from the binding: a deploy that keeps it keeps its id.
    pub id: String,
    /// Which broker: `nats` (JetStream).
    pub kind: String,
    /// The binding, as its kind reads it (JSON).
    pub spec: String,
    /// Not consumed until resumed (its messages wait in the broker).
    pub paused: bool,
    pub created_ms: i64,
}

/// Refuses more bindings than a function may have, or one id twice.
pub(crate) fn check_triggers(rows: &[TriggerRow]) -> Result<(), StoreError> {
    if rows.len() > MAX_TRIGGERS_PER_FUNCTION {
        return Err(StoreError::TooManyTriggers {
            max: MAX_TRIGGERS_PER_FUNCTION,
            per: "function",
        });
    }
    for (i, r) in rows.iter().enumerate() {
        if rows[..i].iter().any(|o| o.id == r.id) {
            return Err(StoreError::Corrupt(format!(
                "trigger {:?} is listed twice",
                r.spec
            )));
        }
    }
    Ok(())
}

/// One function's queue, as counted for metrics and the console.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueDepth {
    pub tenant: String,
    pub function: String,
    /// Waiting or running.
    pub ready: u64,
    /// Dead letters.
    pub dead: u64,
    /// When the oldest waiting one was queued.
    pub oldest_ms: Option<i64>,
    /// Of those waiting, how many failed at least once.
    pub retrying: u64,
}

/// Refuses more schedules than a function may have, or one id twice.
pub(crate) fn check_schedules(rows: &[ScheduleRow]) -> Result<(), StoreError> {
    if rows.len() > MAX_SCHEDULES_PER_FUNCTION {
        return Err(StoreError::TooManySchedules {
            max: MAX_SCHEDULES_PER_FUNCTION,
        });
    }
    for (i, r) in rows.iter().enumerate() {
        if rows[..i].iter().any(|o| o.id == r.id) {
            return Err(StoreError::Corrupt(format!(
                "schedule {:?} is listed twice",
                r.expr
            )));
        }
    }
    Ok(())
}
