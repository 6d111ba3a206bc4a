//! Hearth's events: invocations that are not a client's HTTP call.
//!
//! - **Schedules** (`schedule.rs`: what an expression means;
//!   `ticker.rs`: firing them): every member that runs events looks for
//!   due schedules; the one whose compare-and-set moves a tick on queues
//!   its firing in the same transaction, so a tick is queued once across
//!   the cluster whichever member saw it first, and however many did.
//! - **The queue** (`worker.rs`): invocations waiting to run, in the store
//!   (SQLite alone, PostgreSQL shared by a cluster). A claim hides one for
//!   a lease; its attempt runs through the [`Dispatch`] the binary gives
//!   (on this node, or placed by this gateway), with an id that every
//!   attempt keeps and a journal that outlives the answer until the queue
//!   settles it, so a claimer killed at any point leaves the next claimer
//!   to follow the journal: its effects happen once. A failure is tried
//!   again after an exponential backoff with jitter, up to the attempts
//!   and age it was queued with, then kept as a dead letter.
//!
//! - **Triggers** (`trigger.rs`: the seam; `nats/`: NATS JetStream):
//!   a function bound to a broker; every member consumes each binding
//!   through a durable consumer the broker shares among them, pulling
//!   only what it can run, and settles each message with the broker
//!   (acknowledged, redelivered after a backoff, or a dead letter).
//!
//! The store keeps the rows (`hearth_store::events`); this crate decides
//! what they mean. It knows no node and no HTTP: the binary hands it a
//! [`Dispatch`].

use std::sync::Arc;
use std::time::Duration;

use hearth_core::{GatewayAttempt, Request};
use hearth_store::Store;

pub mod event;
pub mod nats;
pub mod schedule;
mod ticker;
pub mod trigger;
mod worker;

pub use schedule::{Schedule, ScheduleError};
pub use trigger::{Binding, TriggerError};

/// What became of one attempt at a queued invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dispatched {
    /// The function answered with this status (5xx counts as a failure).
    Answered(u16),
    /// The function failed (an unhandled error, a timeout): why.
    Failed(String),
    /// Nothing ran (the node or tenant was at its limit, no node could
    /// take it): tried again shortly, no attempt counted.
    Refused(String),
    /// Its function or target is gone: a dead letter at once.
    Gone(String),
}

/// Whose invocation a dispatch runs: a tenant's function, at a version
/// (`"3"`) or an alias (`"live"`).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub tenant: &'a str,
    pub function: &'a str,
    pub pin: &'a str,
}

/// Runs queued invocations and triggered messages: the binary's, over
/// its node or its gateway, and what else events need of it.
#[async_trait::async_trait]
pub trait Dispatch: Send + Sync + 'static {
    /// Runs `request` as `target`'s attempt `attempt` (`queued`, with
    /// the invocation's id; `retry` when an earlier attempt failed or
    /// vanished, so it follows that one's journal).
    async fn dispatch(
        &self,
        target: Target<'_>,
        request: Request,
        attempt: GatewayAttempt,
    ) -> Dispatched;

    /// The address a tenant's binding may reach its broker `host:port`
    /// at, as the operator allows (`--broker-allow`), or why not.
    async fn broker(&self, host: &str, port: u16) -> Result<std::net::SocketAddr, String>;

    /// The value of `tenant`'s secret `name` (a binding's credentials),
    /// or why it cannot be had.
    async fn secret(&self, tenant: &str, name: &str) -> Result<String, String>;

    /// Tells `function`'s owner something about its events that no
    /// invocation's log says (ticks skipped, a firing given up): a line
    /// in its system log.
    fn note(&self, tenant: &str, function: &str, level: &str, message: &str);
}

/// How a member runs events.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    /// How often due schedules and visible queued invocations are looked
    /// for (a firing queued here is claimed at once).
    pub poll: Duration,
    /// How long a claim hides an invocation from other claimers: past
    /// the longest an invocation may run, so only a claimer that died
    /// loses its claim.
    pub lease: Duration,
    /// Queued invocations this member runs at once.
    pub max_in_flight: usize,
    /// Of those, one tenant's at most: the rest stay free for other
    /// tenants' whatever one tenant has queued (its own run in turns).
    pub max_in_flight_per_tenant: usize,
    /// Attempts of a schedule's firing (Lambda's default for async
    /// invocations: the first and two retries).
    pub attempts: u32,
    /// How long a firing may wait and be retried before it is dead.
    pub max_age: Duration,
    /// The first retry's delay; each later one doubles it, to
    /// `backoff_max`, and takes a random half of it off (jitter).
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// Invocations one tenant may have waiting (async calls past it are
    /// refused with 429; a schedule's firings are bounded by its ticks).
    pub max_queued_per_tenant: u64,
    /// The biggest triggered message run (the node's body limit): a
    /// bigger one is a dead letter.
    pub max_message_bytes: usize,
    /// The brokers a binding may use, `host:port` (on any address), or
    /// `*` (any on a public address): the operator's `--broker-allow`.
    pub broker_allow: Vec<String>,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            poll: Duration::from_millis(100),
            lease: Duration::from_secs(120),
            max_in_flight: 64,
            max_in_flight_per_tenant: 48,
            attempts: 3,
            max_age: Duration::from_secs(6 * 3600),
            backoff: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            max_queued_per_tenant: 100_000,
            max_message_bytes: 6 << 20,
            broker_allow: Vec::new(),
        }
    }
}

/// Counts every function's queue every 2 s, while `depths` is wanted.
async fn count_depths(
    store: Arc<dyn Store>,
    depths: std::sync::Weak<parking_lot::Mutex<Vec<hearth_store::QueueDepth>>>,
) {
    let mut every = tokio::time::interval(Duration::from_secs(2));
    loop {
        every.tick().await;
        let Some(depths) = depths.upgrade() else {
            return;
        };
        match store.queue_depths().await {
            Ok(counted) => *depths.lock() = counted,
            Err(e) => tracing::warn!(error = %e, "could not count the queue"),
        }
    }
}

/// A member's events, running: its ticker and its queue worker, tasks
/// on the runtime that end when it does.
pub struct Events {
    worker: Arc<worker::Worker>,
    /// What this member's triggers have done, for `/metrics`.
    pub triggers: Arc<trigger::Counts>,
    /// Every function's queue as last counted (every 2 s): what
    /// `/metrics` shows.
    depths: Arc<parking_lot::Mutex<Vec<hearth_store::QueueDepth>>>,
}

impl Events {
    /// Starts firing schedules and running queued invocations.
    pub fn start(
        store: Arc<dyn Store>,
        dispatch: Arc<dyn Dispatch>,
        config: EventsConfig,
    ) -> Events {
        let worker = Arc::new(worker::Worker::new(
            store.clone(),
            dispatch.clone(),
            config.clone(),
        ));
        tokio::spawn(worker.clone().run());
        tokio::spawn(ticker::run(
            store.clone(),
            dispatch.clone(),
            config.clone(),
            worker.clone(),
        ));
        let triggers = Arc::<trigger::Counts>::default();
        tokio::spawn(trigger::supervise(
            store.clone(),
            dispatch,
            config,
            worker.clone(),
            triggers.clone(),
        ));
        let depths = Arc::default();
        tokio::spawn(count_depths(store, Arc::downgrade(&depths)));
        Events {
            worker,
            triggers,
            depths,
        }
    }

    /// Every function's queue that holds anything, as last counted (every
    /// 2 s), by a reader that holds nothing alive.
    pub fn depth_reader(&self) -> impl Fn() -> Vec<hearth_store::QueueDepth> + Send + Sync + use<> {
        let depths = Arc::downgrade(&self.depths);
        move || {
            depths
                .upgrade()
                .map(|d| d.lock().clone())
                .unwrap_or_default()
        }
    }

    /// Something was queued here: claim it now rather than at the next
    /// poll.
    pub fn wake(&self) {
        self.worker.wake();
    }

    /// Queues `request` as an async invocation `id` of `version` of
    /// `tenant`'s `function`, within the tenant's bound, and claims it at
    /// once. Every attempt runs that version, as the caller's would have.
    pub async fn enqueue_async(
        &self,
        (tenant, function, version): (&str, &str, u32),
        request: &Request,
        id: hearth_core::InvocationId,
    ) -> Result<(), hearth_store::StoreError> {
        let config = &self.worker.config;
        let now = hearth_core::unix_time_ms();
        let item = hearth_store::Enqueue {
            id: id.to_string(),
            tenant: tenant.to_string(),
            function: function.to_string(),
            target: version.to_string(),
            source: "async".into(),
            request: postcard::to_allocvec(request).expect("a request encodes"),
            enqueued_ms: now,
            expires_ms: now + i64::try_from(config.max_age.as_millis()).unwrap_or(i64::MAX),
            max_attempts: config.attempts,
        };
        self.worker
            .store
            .enqueue(&item, config.max_queued_per_tenant)
            .await?;
        self.wake();
        Ok(())
    }
}
