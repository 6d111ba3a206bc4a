//! Triggers: a function bound to a message broker, each message an
//! invocation of its `live` alias.
//!
//! The seam. A binding is a row in the store (`hearth_store::TriggerRow`):
//! a `kind` and a `spec` that kind reads. [`Binding`] is every kind this
//! build knows; each member that runs events keeps one consumer task per
//! binding not paused ([`supervise`]), which pulls at most what it can
//! run (back-pressure), runs each message through the same [`Dispatch`]
//! the queue uses (the tenant's share of the member, its concurrency and
//! memory, its journal), and settles the message with its broker:
//! acknowledged after success, redelivered after a backoff on failure,
//! moved to a dead-letter destination after its last attempt. A new
//! kind (Kafka, Redis Streams) is a variant here and a module like
//! `nats/` with the same four steps: check (at deploy: reachable, the
//! source exists, dead letters have somewhere to go), consume, settle,
//! forget (its broker-side cursor, when the binding is removed).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hearth_store::{Store, TriggerRow};
use tokio::task::JoinHandle;

use crate::nats::NatsBinding;
use crate::worker::Worker;
use crate::{Dispatch, EventsConfig};

/// The most bindings a member consumes, every tenant's: each holds a
/// connection to its broker and a task. Deploys past it are refused.
pub const MAX_BINDINGS: usize = 1024;

/// A function's binding to a broker, as a deploy gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    Nats(NatsBinding),
}

/// Why a binding cannot be made, or its broker cannot be used: said to
/// the deployer, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TriggerError {
    /// The binding does not parse.
    #[error("{0}")]
    Invalid(String),
    /// The broker is not one this Hearth may reach.
    #[error("{0}")]
    NotAllowed(String),
    /// The broker cannot be reached, or refused what the binding needs.
    #[error("{0}")]
    Broker(String),
}

impl Binding {
    /// Parses a deploy's `trigger=` value: `nats://HOST[:PORT]/STREAM?…`.
    pub fn parse(s: &str) -> Result<Binding, TriggerError> {
        match s.split_once("://") {
            Some(("nats", _)) => Ok(Binding::Nats(s.parse()?)),
            Some((scheme, _)) => Err(TriggerError::Invalid(format!(
                "trigger {s:?}: {scheme}:// is not a broker this Hearth binds to; \
                 NATS JetStream is (`nats://HOST:PORT/STREAM?subject=…`)"
            ))),
            None => Err(TriggerError::Invalid(format!(
                "trigger {s:?} is not a broker's URL: `nats://HOST:PORT/STREAM?subject=…`"
            ))),
        }
    }

    /// The binding a stored row holds.
    pub fn of_row(row: &TriggerRow) -> Result<Binding, TriggerError> {
        match row.kind.as_str() {
            "nats" => serde_json::from_str(&row.spec)
                .map(Binding::Nats)
                .map_err(|e| TriggerError::Invalid(format!("stored binding does not read: {e}"))),
            other => Err(TriggerError::Invalid(format!(
                "a {other:?} binding is not one this build consumes"
            ))),
        }
    }

    /// What names the binding: where it reads from (a redeploy that
    /// changes only how keeps it).
    pub fn id(&self) -> String {
        let Binding::Nats(b) = self;
        b.id()
    }

    /// The row a function keeps for this binding.
    pub fn row(&self, tenant: &str, function: &str) -> TriggerRow {
        let Binding::Nats(b) = self;
        TriggerRow {
            tenant: tenant.into(),
            function: function.into(),
            id: b.id(),
            kind: "nats".into(),
            spec: serde_json::to_string(b).expect("a binding serializes"),
            paused: false,
            created_ms: hearth_core::unix_time_ms(),
        }
    }

    /// Checks at deploy what consuming will need (the broker allowed and
    /// reachable, its stream there, dead letters' subject stored), and
    /// makes the broker-side cursor, so messages published from now on
    /// wait for the function however soon a member consumes them.
    pub async fn check(
        &self,
        tenant: &str,
        function: &str,
        dispatch: &dyn Dispatch,
        config: &EventsConfig,
    ) -> Result<(), TriggerError> {
        let Binding::Nats(b) = self;
        b.check(tenant, function, dispatch, config).await
    }

    /// Deletes the binding's cursor on its broker: the binding is gone.
    pub async fn forget(&self, tenant: &str, function: &str, dispatch: &dyn Dispatch) {
        let Binding::Nats(b) = self;
        b.forget(tenant, function, dispatch).await
    }
}

/// Whose binding a task consumes, and as what spec: a changed spec is a
/// new task.
type Key = (String, String, String, String);

/// Keeps one consumer task per binding not paused, every 2 s: new
/// bindings start, removed or paused ones stop, changed ones restart.
/// (Whoever removes a binding deletes its cursor on the broker.)
pub(crate) async fn supervise(
    store: Arc<dyn Store>,
    dispatch: Arc<dyn Dispatch>,
    config: EventsConfig,
    worker: Arc<Worker>,
    counts: Arc<Counts>,
) {
    let mut running: HashMap<Key, JoinHandle<()>> = HashMap::new();
    let mut every = tokio::time::interval(Duration::from_secs(2));
    loop {
        every.tick().await;
        let rows = match store.triggers(None, None).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the broker bindings");
                continue;
            }
        };
        let key = |r: &TriggerRow| {
            (
                r.tenant.clone(),
                r.function.clone(),
                r.id.clone(),
                r.spec.clone(),
            )
        };
        let wanted: HashMap<Key, &TriggerRow> = rows
            .iter()
            .filter(|r| !r.paused)
            .map(|r| (key(r), r))
            .collect();
        running.retain(|k, task| {
            if wanted.contains_key(k) && !task.is_finished() {
                return true;
            }
            task.abort();
            counts
                .pending
                .lock()
                .remove(&(k.0.clone(), k.1.clone(), k.2.clone()));
            false
        });
        for (k, row) in wanted {
            if running.contains_key(&k) {
                continue;
            }
            if running.len() >= MAX_BINDINGS {
                dispatch.note(
                    &row.tenant,
                    &row.function,
                    "error",
                    &format!(
                        "trigger {} is not consumed: this member consumes at most {MAX_BINDINGS} \
                         bindings (every tenant's)",
                        row.id
                    ),
                );
                continue;
            }
            let binding = match Binding::of_row(row) {
                Ok(b) => b,
                Err(e) => {
                    dispatch.note(&row.tenant, &row.function, "error", &e.to_string());
                    continue;
                }
            };
            let Binding::Nats(b) = binding;
            let task = tokio::spawn(crate::nats::consume(
                b,
                row.clone(),
                dispatch.clone(),
                config.clone(),
                worker.clone(),
                counts.clone(),
            ));
            running.insert(k, task);
        }
    }
}

/// What this member's triggers have done since it started, for
/// `/metrics`.
#[derive(Debug, Default)]
pub struct Counts {
    /// Messages whose invocation succeeded (acknowledged).
    pub done: std::sync::atomic::AtomicU64,
    /// Failed attempts given back to be redelivered after a backoff.
    pub retried: std::sync::atomic::AtomicU64,
    /// Messages moved to their dead-letter subject, or ended in their
    /// stream, after their last attempt (or too big to run).
    pub dead: std::sync::atomic::AtomicU64,
    /// Messages each consumer had waiting on its broker as last asked,
    /// by binding.
    pub pending: parking_lot::Mutex<HashMap<(String, String, String), u64>>,
}
