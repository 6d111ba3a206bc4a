//! [`HostCtx`]: one invocation's view of the platform. This file holds
//! what every capability shares (the tape, the earlier tape a replay or
//! retry answers from, calls in flight, the deadline, the store on a
//! blocking thread); each capability is a part of its own: clocks and
//! randomness (`ctx/clock.rs`), the log (`ctx/logs.rs`), KV (`ctx/kv.rs`),
//! outbound HTTP (`ctx/fetch.rs`), and the retry journal
//! (`ctx/journal.rs`).

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use displaydoc::Display;
use hearth_core::{FunctionVersion, InvocationId};
use hearth_store::{LogStream, Store};
use thiserror::Error;

use crate::replay::{Earlier, Follow, Verdict};
use crate::{CallTime, CallTiming, Divergence, HostEvent, Tape};

mod clock;
mod fetch;
mod journal;
mod kv;
mod logs;

pub use clock::monotonic_now_nanos;

/// Ceilings on what one invocation may ask of the host.
#[derive(Debug, Clone)]
pub struct HostLimits {
    pub kv_max_key_bytes: usize,
    pub kv_max_value_bytes: usize,
    pub kv_max_list: u32,
    /// Bytes of keys and values one tenant's KV may hold, over all its
    /// functions; a `kv.set` past it fails with [`HostError::KvQuota`].
    pub kv_max_tenant_bytes: u64,
    pub http_timeout_ms: u64,
    pub http_max_response_bytes: usize,
    pub http_max_calls: u32,
    /// Bytes of log text (stderr and log calls) kept per invocation.
    pub log_max_bytes: usize,
    /// Bytes of log text a second one tenant's invocations may keep
    /// together, with four seconds' worth (and at least one invocation's
    /// `log_max_bytes`) at once ([`crate::log_rate`]).
    pub log_bytes_per_sec_per_tenant: u64,
    /// Bytes one invocation's tape may hold in memory
    /// ([`HostEvent::approx_bytes`]). Past it the invocation fails with
    /// `tape_budget_exceeded`: later clock, randomness and log calls are
    /// answered but not recorded, KV and HTTP calls are refused
    /// ([`HostError::TapeFull`]), and the tape ends with
    /// [`HostEvent::Truncated`].
    pub tape_max_bytes: usize,
    /// Let outbound HTTP reach loopback, private and link-local addresses
    /// (see `egress.rs`); off by default, for an operator whose
    /// functions must call services on the host or its private network.
    pub private_egress: bool,
    /// Outbound connections in flight at once, over the node and per
    /// tenant ([`crate::outbound`]).
    pub max_outbound: usize,
    pub max_outbound_per_tenant: usize,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            kv_max_key_bytes: 1024,
            kv_max_value_bytes: 1 << 20,
            kv_max_list: 1000,
            kv_max_tenant_bytes: 1 << 30,
            http_timeout_ms: 10_000,
            http_max_response_bytes: 8 << 20,
            http_max_calls: 64,
            log_max_bytes: 64 << 10,
            log_bytes_per_sec_per_tenant: 1 << 20,
            tape_max_bytes: 4 << 20,
            private_egress: false,
            max_outbound: 4096,
            max_outbound_per_tenant: 1024,
        }
    }
}

/// What the host shares across invocations: storage and an HTTP client.
pub struct HostServices {
    pub store: Arc<dyn Store>,
    pub http: reqwest::Client,
    pub limits: HostLimits,
    /// Outbound connections in flight, per tenant and for the node.
    pub outbound: Arc<crate::outbound::Outbound>,
    /// How fast each tenant may log.
    pub log_rates: crate::log_rate::LogRates,
    /// Whether what would grow the node's storage may: set by the node
    /// that watches its disk, `Err` with what to do while it is full. A
    /// function's KV writes ask it first.
    pub growth: std::sync::OnceLock<Growth>,
}

/// [`HostServices::growth`]: `Err` (the cause and the fix) while the
/// node's disk is full.
pub type Growth = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

impl HostServices {
    pub fn new(store: Arc<dyn Store>, limits: HostLimits) -> Self {
        let mut http = reqwest::Client::builder()
            // A redirect could lead to a host the function may not reach;
            // the function sees the 3xx and decides.
            .redirect(reqwest::redirect::Policy::none())
            // The operator's proxy settings are not the functions'.
            .no_proxy()
            .user_agent(concat!("hearth/", env!("CARGO_PKG_VERSION")));
        if !limits.private_egress {
            http = http.dns_resolver(Arc::new(crate::egress::Resolver));
        }
        let http = http
            .build()
            .expect("an HTTP client with default TLS settings always builds");
        let outbound = Arc::new(crate::outbound::Outbound::new(
            limits.max_outbound,
            limits.max_outbound_per_tenant,
        ));
        let log_rates = crate::log_rate::LogRates::new(
            limits.log_bytes_per_sec_per_tenant,
            (limits.log_bytes_per_sec_per_tenant * 4).max(limits.log_max_bytes as u64),
        );
        HostServices {
            store,
            http,
            limits,
            outbound,
            log_rates,
            growth: std::sync::OnceLock::new(),
        }
    }

    /// `Err` while the node's disk is full (see [`HostServices::growth`]).
    fn admit_growth(&self) -> Result<(), HostError> {
        match self.growth.get() {
            Some(growth) => growth().map_err(HostError::Storage),
            None => Ok(()),
        }
    }
}

/// Which invocation a [`HostCtx`] serves.
#[derive(Debug, Clone)]
pub struct InvocationMeta {
    pub id: InvocationId,
    /// The version being run: its tenant and name scope KV, its spec is the
    /// policy. Shared, not copied, per invocation.
    pub version: Arc<FunctionVersion>,
    /// When the invocation started: its host calls' times count from here.
    pub started: Instant,
    /// When the invocation must be finished; host calls never wait past it.
    pub deadline: Instant,
    /// Its trace, when the node exports traces: KV and HTTP calls become
    /// child spans, and outbound HTTP carries `traceparent`.
    pub trace: Option<Arc<crate::trace::InvocationTrace>>,
    /// Its tenant's CPU account on the node that admitted it, which the
    /// tiers charge the time its code runs (see [`crate::cpu`]); `None`
    /// outside a node's admission (a replay, a test).
    pub cpu: Option<Arc<crate::cpu::TenantCpu>>,
    /// Where it may answer before it ends (work after the response:
    /// [`crate::Answer`]); `None` where it may not (a replay, a streamed
    /// response, a tier that cannot).
    pub answer: Option<Arc<crate::Answer>>,
}

/// One line of a function's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub ts_ms: i64,
    pub stream: LogStream,
    pub level: String,
    pub message: String,
}

/// Why a host call failed. Guests see a negative code (see `code`) and, for
/// logs, this message.
#[derive(Debug, Clone, Display, Error, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HostError {
    /// outbound HTTP to {0} is not allowed: add it with --allow-host
    Denied(String),
    /// invalid host call: {0}
    Invalid(String),
    /// network error: {0}
    Network(String),
    /// the response is larger than the limit of {0} bytes
    TooLarge(usize),
    /// the host call ran out of time
    Timeout,
    /// storage error: {0}
    Storage(String),
    /// too many calls of this kind in one invocation (limit {0})
    TooMany(u32),
    /// this replay left its tape: {0}
    OffTape(String),
    /// the invocation has ended: a KV or HTTP call made after its response is refused
    Ended,
    /// this tenant's KV is full: its quota is {0} bytes of keys and values
    KvQuota(u64),
    /// the invocation's tape budget of {0} bytes is used up: no more KV or HTTP calls
    TapeFull(usize),
    /// outbound HTTP to {0} is refused: it is a loopback, private or link-local address, which functions may not reach (an operator allows them with --allow-private-egress)
    Internal(String),
    /// too many outbound connections open: {0}; try again when some have ended
    Congested(String),
}

impl HostError {
    /// Its kind in a word, as a span's `error.type` says it.
    pub fn kind(&self) -> &'static str {
        match self {
            HostError::Denied(_) => "denied",
            HostError::Invalid(_) => "invalid",
            HostError::Network(_) => "network",
            HostError::TooLarge(_) => "too_large",
            HostError::Timeout => "timeout",
            HostError::Storage(_) => "storage",
            HostError::TooMany(_) => "too_many",
            HostError::OffTape(_) => "off_tape",
            HostError::Ended => "ended",
            HostError::KvQuota(_) => "kv_quota",
            HostError::TapeFull(_) => "tape_full",
            HostError::Internal(_) => "internal",
            HostError::Congested(_) => "congested",
        }
    }

    /// The code a Wasm guest receives; documented in `examples/wasm/hearth.h`.
    pub fn code(&self) -> i32 {
        match self {
            HostError::Denied(_) => -1,
            HostError::Invalid(_) => -2,
            HostError::Network(_) => -3,
            HostError::TooLarge(_) => -4,
            HostError::Timeout => -5,
            HostError::Storage(_) => -6,
            HostError::TooMany(_) => -7,
            HostError::OffTape(_) => -8,
            HostError::TapeFull(_) => -9,
            HostError::Internal(_) => -1,
            HostError::Ended => -10,
            HostError::KvQuota(_) => -11,
            HostError::Congested(_) => -12,
        }
    }
}

#[derive(Default)]
struct Recorded {
    tape: Tape,
    /// [`HostEvent::approx_bytes`] of the tape's events.
    tape_bytes: usize,
    /// Calls answered after the tape's budget ran out, not recorded.
    tape_dropped: u64,
    /// The tape reached its budget.
    tape_full: bool,
    /// KV and HTTP calls running now.
    in_flight: u32,
    /// The invocation has ended: no more KV or HTTP calls.
    ended: bool,
    logs: Vec<LogLine>,
    log_bytes: usize,
    logs_truncated: bool,
    /// Bytes of lines dropped over the tenant's log rate.
    log_dropped_bytes: u64,
    http_calls: u32,
    /// Fetches in flight now ([`crate::outbound::PER_INVOCATION`]).
    fetching: u32,
    journal_failed: bool,
    /// Log lines the node reads instead of the function's log
    /// ([`HostCtx::divert_logs`]): their prefix, and those seen.
    diverted: Option<(&'static str, Vec<String>)>,
}

struct Inner {
    meta: InvocationMeta,
    services: Arc<HostServices>,
    recorded: Mutex<Recorded>,
    /// A tape to answer from (replay, or a retry); `None` for a first
    /// attempt, which then pays nothing for this.
    earlier: Option<Earlier>,
    /// Set for a first attempt a gateway may retry on another node: the
    /// next position in its journal (see [`HostCtx::journaling`]).
    journal: Option<AtomicU32>,
    /// Told when the last KV or HTTP call in flight ends ([`HostCtx::settle`]).
    settled: tokio::sync::Notify,
}

/// The host, bound to one invocation. Cheap to clone; all clones share one tape.
#[derive(Clone)]
pub struct HostCtx(Arc<Inner>);

impl HostCtx {
    pub fn new(services: Arc<HostServices>, meta: InvocationMeta) -> Self {
        HostCtx(Arc::new(Inner {
            meta,
            services,
            recorded: Mutex::default(),
            earlier: None,
            journal: None,
            settled: tokio::sync::Notify::new(),
        }))
    }

    /// A host for a second attempt at the same invocation (the js tier's
    /// fallback to the process tier). Its KV and HTTP calls are answered
    /// from `earlier` — what the aborted attempt got — in order and without
    /// touching the world, as long as they are the same calls; so each
    /// effect happens once. Clocks, randomness and logs of the earlier
    /// attempt are not replayed (the second attempt reads its own). At the
    /// first call that differs, the rest of `earlier` is dropped, a warning
    /// goes to the function's log, and calls go to the world.
    pub fn retrying(services: Arc<HostServices>, meta: InvocationMeta, earlier: Tape) -> Self {
        Self::following(
            services,
            meta,
            Earlier::new(Follow::ThenLive, earlier),
            None,
        )
    }

    /// [`retrying`](Self::retrying), journaling what it asks past the
    /// journal it follows (`earlier`), after it: a queued invocation,
    /// whose next attempt must repeat none of this one's effects either.
    pub fn retrying_journaled(
        services: Arc<HostServices>,
        meta: InvocationMeta,
        earlier: Tape,
    ) -> Self {
        let next = u32::try_from(earlier.events.len()).unwrap_or(u32::MAX);
        let earlier = Earlier::new(Follow::ThenLive, earlier);
        Self::following(services, meta, earlier, Some(AtomicU32::new(next)))
    }

    fn following(
        services: Arc<HostServices>,
        meta: InvocationMeta,
        earlier: Earlier,
        journal: Option<AtomicU32>,
    ) -> Self {
        HostCtx(Arc::new(Inner {
            meta,
            services,
            recorded: Mutex::default(),
            earlier: Some(earlier),
            journal,
            settled: tokio::sync::Notify::new(),
        }))
    }

    /// A host that answers every call from `tape` and never touches the
    /// world: replay. While the code makes the calls the tape holds, in
    /// order, it gets the recorded answers. At the first call that differs
    /// the replay has *diverged* ([`HostCtx::divergence`]): from then on KV
    /// and HTTP calls fail with [`HostError::OffTape`] and clocks and
    /// randomness are read fresh, so the code runs to an end without side
    /// effects.
    pub fn replaying(services: Arc<HostServices>, meta: InvocationMeta, tape: Tape) -> Self {
        Self::following(services, meta, Earlier::new(Follow::Strict, tape), None)
    }

    /// Where a replay left its tape: at a call that differs, or at a call
    /// the code never made. `None` for a replay that followed its tape to
    /// the end, and for a host that is not replaying.
    pub fn divergence(&self) -> Option<Divergence> {
        self.0
            .earlier
            .as_ref()
            .filter(|e| e.is_strict())?
            .divergence()
    }

    /// The earlier tape's answer to a call (see [`crate::replay`]). `None`:
    /// ask the world. `Some(Ok)`: the recorded answer, also put on this
    /// host's tape. `Some(Err)`: a replay is off its tape.
    fn earlier<T>(
        &self,
        effect: bool,
        asked: impl FnOnce() -> String,
        same: impl FnOnce(&HostEvent) -> Option<T>,
    ) -> Option<Result<T, HostError>> {
        match self.0.earlier.as_ref()?.answer(effect, asked, same) {
            Verdict::Live => None,
            Verdict::Recorded(answer, event, time) => {
                let max = self.tape_budget();
                self.recorded().push(event, max, false, time);
                Some(Ok(answer))
            }
            Verdict::OffTape(e) => Some(Err(e)),
            Verdict::LeftTape(left) => {
                self.log(
                    LogStream::System,
                    "warn",
                    &format!(
                        "the retry made a different host call than the first attempt; {left} recorded call(s) were not replayed and calls now go to the world"
                    ),
                );
                None
            }
        }
    }

    pub fn meta(&self) -> &InvocationMeta {
        &self.0.meta
    }

    /// Sends `response` to the caller before the invocation ends, if the
    /// node lets this one answer early (work after the response,
    /// [`crate::Answer`]); true if it went. The tape says when, among its
    /// calls (a log line, which replay steps over).
    pub fn answer_early(&self, response: &hearth_core::Response) -> bool {
        let Some(answer) = &self.0.meta.answer else {
            return false;
        };
        if !answer.early(response) {
            return false;
        }
        self.tape_answered(format!(
            "answered {} to the caller; the work passed to waitUntil goes on",
            response.status
        ));
        true
    }

    /// Puts on the tape, at this moment, that the caller has its answer.
    fn tape_answered(&self, message: String) {
        let event = HostEvent::Log {
            level: "info".into(),
            message,
        };
        let time = CallTime::since(self.0.meta.started, Instant::now());
        self.recorded()
            .push(event, self.tape_budget(), true, Some(time));
    }

    /// [`answer_early`](Self::answer_early) for a streamed response: true
    /// if the caller's body may end now, whole, while the invocation
    /// works on (the sink ends it: `ResponseSink::finish_early`).
    pub fn answer_streamed_early(&self, status: u16) -> bool {
        let Some(answer) = &self.0.meta.answer else {
            return false;
        };
        if !answer.early_streamed() {
            return false;
        }
        self.tape_answered(format!(
            "answered {status} to the caller (its body whole); the work after it goes on"
        ));
        true
    }

    /// Whether the invocation's function was removed while it worked
    /// after its response: the work is to stop.
    pub fn cut_short(&self) -> bool {
        self.0.meta.answer.as_ref().is_some_and(|a| a.is_cut())
    }

    /// Resolves when [`cut_short`](Self::cut_short) becomes true (never,
    /// for an invocation that cannot answer early): what a tier waits on
    /// beside the function to stop it.
    pub async fn until_cut_short(&self) {
        match &self.0.meta.answer {
            Some(a) => a.cut_notified().await,
            None => std::future::pending().await,
        }
    }

    /// The error an invocation cut short ends with.
    pub fn cut_short_error() -> hearth_core::InvokeError {
        hearth_core::InvokeError::Function(
            "its function was removed while it worked after its response".into(),
        )
    }

    pub fn limits(&self) -> &HostLimits {
        &self.0.services.limits
    }

    fn recorded(&self) -> parking_lot::MutexGuard<'_, Recorded> {
        // Only plain pushes happen under this lock; a panic cannot leave it
        // half-updated in a way that matters.
        self.0.recorded.lock()
    }

    /// Puts `event` on the tape, within its budget; over it, the event is
    /// counted but not kept.
    fn record(&self, event: HostEvent) {
        let max = self.tape_budget();
        self.recorded().push(event, max, false, None);
    }

    /// Bytes this invocation's tape may hold: its function's own budget,
    /// or the node's.
    pub fn tape_budget(&self) -> usize {
        self.0
            .meta
            .version
            .spec
            .record
            .max_tape_bytes
            .unwrap_or(self.0.services.limits.tape_max_bytes)
    }

    /// Whether a KV or HTTP call may still go to the world: its answer must
    /// be taped (a retry must not repeat it), and the tape is full.
    fn check_tape_room(&self) -> Result<(), HostError> {
        if self.recorded().tape_full {
            return Err(HostError::TapeFull(self.tape_budget()));
        }
        Ok(())
    }

    /// Counts a host call as running until the guard is dropped, so that
    /// the invocation waits for it before it ends ([`Self::settle`]);
    /// refused once the invocation has ended. A tier that starts a call on
    /// another task (the js tier's bridge) takes one where the code made the
    /// call, so the invocation cannot end between the two.
    pub fn begin_call(&self) -> Result<CallGuard, HostError> {
        let mut rec = self.recorded();
        if rec.ended {
            return Err(HostError::Ended);
        }
        rec.in_flight += 1;
        Ok(CallGuard(self.clone()))
    }

    /// Waits for the KV and HTTP calls still running (one a function made
    /// without awaiting it, say) to finish, at most until the deadline, and
    /// then ends the invocation: later calls are refused. So the tape holds
    /// every effect the invocation had, and no effect lands after it.
    pub async fn settle(&self) {
        loop {
            let notified = self.0.settled.notified();
            {
                let mut rec = self.recorded();
                if rec.in_flight == 0 {
                    rec.ended = true;
                    return;
                }
            }
            if tokio::time::timeout(self.remaining(), notified)
                .await
                .is_err()
            {
                self.recorded().ended = true;
                return;
            }
        }
    }

    /// The tape budget, if this invocation ran past it.
    pub fn tape_budget_exceeded(&self) -> Option<usize> {
        let full = self.recorded().tape_full;
        full.then(|| self.tape_budget())
    }

    /// Time left before the invocation's deadline.
    pub fn remaining(&self) -> Duration {
        self.0
            .meta
            .deadline
            .saturating_duration_since(Instant::now())
    }

    // ---- the store (KV: `ctx/kv.rs`) ----

    /// The store, and whose KV and journals in it this invocation's are:
    /// its tenant and function.
    fn scope(&self) -> (&dyn Store, &str, &str) {
        let inner = &self.0;
        (
            &*inner.services.store,
            &inner.meta.version.tenant,
            &inner.meta.version.name,
        )
    }

    /// A child span for host call `name`, if this invocation is traced and
    /// has spans left (`attributes` is only asked for then).
    fn call_span(
        &self,
        name: &'static str,
        attributes: impl FnOnce() -> Vec<opentelemetry::KeyValue>,
    ) -> Option<crate::trace::CallSpan> {
        self.0.meta.trace.as_ref()?.call(name, attributes())
    }

    /// A store call (not begun until awaited) within the deadline: past
    /// it the call is dropped (a PostgreSQL query is abandoned, a
    /// transaction rolled back; SQLite's blocking thread finishes on its
    /// own and its answer is not used).
    async fn store_call<T>(
        &self,
        work: impl Future<Output = Result<T, hearth_store::StoreError>>,
    ) -> Result<T, HostError> {
        match tokio::time::timeout(self.remaining(), work).await {
            Err(_) => Err(HostError::Timeout),
            Ok(result) => result.map_err(|e| match e {
                hearth_store::StoreError::KvQuota { max_bytes, .. } => {
                    HostError::KvQuota(max_bytes)
                }
                e @ hearth_store::StoreError::KvNotACounter(_) => HostError::Invalid(e.to_string()),
                e => HostError::Storage(e.to_string()),
            }),
        }
    }

    /// Takes what the invocation recorded: its tape and its log lines.
    pub fn take_records(&self) -> (Tape, Vec<LogLine>) {
        let mut rec = self.recorded();
        if rec.tape_full {
            let calls = std::mem::take(&mut rec.tape_dropped);
            rec.tape.events.push(HostEvent::Truncated { calls });
        }
        let dropped = std::mem::take(&mut rec.log_dropped_bytes);
        if dropped > 0 {
            let rate = self.0.services.log_rates.per_second() / 1024;
            rec.logs.push(LogLine {
                ts_ms: hearth_core::unix_time_ms(),
                stream: LogStream::System,
                level: "warn".into(),
                message: format!(
                    "{dropped} bytes of log output dropped: this tenant's functions logged \
                     faster than {rate} KiB/s together (the node's --log-kib-per-sec-per-tenant)"
                ),
            });
        }
        (std::mem::take(&mut rec.tape), std::mem::take(&mut rec.logs))
    }
}

/// A host call running ([`HostCtx::begin_call`]).
pub struct CallGuard(HostCtx);

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut rec = self.0.recorded();
        rec.in_flight -= 1;
        if rec.in_flight == 0 {
            self.0.0.settled.notify_one();
        }
    }
}

impl Recorded {
    /// Tapes `event`, and when it ran if `time` says, if it fits in `max`
    /// bytes; `always`, even if not (a KV or HTTP answer that was already
    /// let through). Either way the tape is full once it has reached `max`.
    fn push(&mut self, event: HostEvent, max: usize, always: bool, time: Option<CallTime>) {
        let bytes = event.approx_bytes() + time.map_or(0, |_| size_of::<CallTiming>());
        if self.tape_full && !always {
            self.tape_dropped += 1;
            return;
        }
        if self.tape_bytes + bytes > max && !always {
            self.tape_full = true;
            self.tape_dropped += 1;
            return;
        }
        self.tape_bytes += bytes;
        self.tape_full |= self.tape_bytes >= max;
        self.tape.push(event, time);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OutboundRequest;
    use hearth_core::Runtime;
    use hearth_store::SqliteStore;

    pub(super) fn ctx(dir: &tempfile::TempDir, limits: HostLimits) -> HostCtx {
        let store = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        let services = Arc::new(HostServices::new(store, limits));
        let meta = InvocationMeta {
            id: InvocationId::new(),
            version: Arc::new(FunctionVersion {
                tenant: "t".into(),
                name: "f".into(),
                version: 1,
                artifact: String::new(),
                spec: hearth_core::FunctionSpec::new(Runtime::Wasm),
                created_at_ms: 0,
            }),
            started: Instant::now(),
            deadline: Instant::now() + Duration::from_secs(5),
            trace: None,
            cpu: None,
            answer: None,
        };
        HostCtx::new(services, meta)
    }

    #[tokio::test]
    async fn every_answer_lands_on_the_tape_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let host = ctx(&dir, HostLimits::default());
        let wall = host.wall_clock_nanos();
        let mut buf = [0u8; 8];
        host.fill_random(&mut buf);
        host.kv_set(b"k".to_vec(), b"v".to_vec()).await.unwrap();
        assert_eq!(
            host.kv_get(b"k".to_vec()).await.unwrap(),
            Some(b"v".to_vec())
        );
        let (tape, _) = host.take_records();
        let names: Vec<_> = tape.events.iter().map(|e| e.name()).collect();
        assert_eq!(names, ["clock.wall", "random", "kv.set", "kv.get"]);
        assert_eq!(tape.events[0], HostEvent::WallClock { nanos: wall });
        assert_eq!(
            tape.events[1],
            HostEvent::Random {
                bytes: buf.to_vec()
            }
        );
        // The calls that went to the world are timed, in order; clocks and
        // randomness are not.
        let timed: Vec<_> = tape.timings.iter().map(|t| t.call).collect();
        assert_eq!(timed, [2, 3]);
        let (set, get) = (tape.timing(2).unwrap(), tape.timing(3).unwrap());
        assert!(get.at_us >= set.at_us + set.took_us, "{set:?} then {get:?}");
        assert!(tape.timing(0).is_none());
    }

    /// A traced run's diverted lines (its trace, `hearth-jit`) are kept
    /// for the node within a bound, whatever the function logs: at most
    /// four lines of 64 KiB; none of them reaches the log or the tape.
    #[tokio::test]
    async fn diverted_lines_are_bounded_and_stay_off_the_tape() {
        let dir = tempfile::tempdir().unwrap();
        let host = ctx(&dir, HostLimits::default());
        host.divert_logs("trace:");
        host.log(
            LogStream::Log,
            "info",
            &format!("trace:{}", "x".repeat(1 << 20)),
        );
        for i in 0..1000 {
            host.log(LogStream::Log, "info", &format!("trace:{i}"));
        }
        host.log(LogStream::Log, "info", "an ordinary line");
        let kept = host.take_diverted();
        assert_eq!(kept, ["trace:0", "trace:1", "trace:2", "trace:3"]);
        let (tape, lines) = host.take_records();
        assert_eq!(tape.events.len(), 1, "{:?}", tape.events);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].message, "an ordinary line");
    }

    /// A second host for the same function and store as `first`.
    fn again(first: &HostCtx, earlier: Tape) -> HostCtx {
        HostCtx::retrying(first.0.services.clone(), first.meta().clone(), earlier)
    }

    #[tokio::test]
    async fn a_retry_gets_the_first_attempts_answers_and_effects_happen_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = ctx(&dir, HostLimits::default());
        // The first attempt reads a counter, writes it, then is aborted.
        assert_eq!(first.kv_get(b"n".to_vec()).await.unwrap(), None);
        first.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        let now = first.wall_clock_nanos();
        let (tape, _) = first.take_records();

        let retry = again(&first, tape.clone());
        assert_eq!(
            retry.kv_get(b"n".to_vec()).await.unwrap(),
            None,
            "replayed: the store already holds 1, the first attempt saw nothing"
        );
        retry.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        // Past the prefix, calls are live again.
        retry.kv_set(b"m".to_vec(), b"2".to_vec()).await.unwrap();
        assert_eq!(
            retry.kv_get(b"m".to_vec()).await.unwrap(),
            Some(b"2".to_vec())
        );
        let (retry_tape, logs) = retry.take_records();
        assert_eq!(retry_tape.events.len(), 4, "replayed calls are taped too");
        // With when they ran the first time; the live ones with their own.
        assert_eq!(retry_tape.timings.len(), 4);
        assert_eq!(retry_tape.timings[..2], tape.timings[..]);
        assert!(logs.is_empty(), "{logs:?}");
        assert!(
            !retry_tape
                .events
                .contains(&HostEvent::WallClock { nanos: now })
        );

        // A retry that asks for something else goes live and says so.
        let diverging = again(&first, tape);
        assert_eq!(
            diverging.kv_get(b"m".to_vec()).await.unwrap(),
            Some(b"2".to_vec())
        );
        assert_eq!(
            diverging.kv_get(b"n".to_vec()).await.unwrap(),
            Some(b"1".to_vec()),
            "after diverging, nothing more is replayed"
        );
        let (_, logs) = diverging.take_records();
        assert!(logs[0].message.contains("different host call"), "{logs:?}");
    }

    #[tokio::test]
    async fn a_replay_answers_from_the_tape_and_never_touches_the_world() {
        let dir = tempfile::tempdir().unwrap();
        let live = ctx(&dir, HostLimits::default());
        let now = live.wall_clock_nanos();
        live.log(LogStream::Log, "info", "hi");
        live.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        let mut rnd = [0u8; 4];
        live.fill_random(&mut rnd);
        let (tape, _) = live.take_records();
        live.kv_set(b"n".to_vec(), b"changed".to_vec())
            .await
            .unwrap();
        let (services, meta) = (live.0.services.clone(), live.meta().clone());

        let same = HostCtx::replaying(services.clone(), meta.clone(), tape.clone());
        assert_eq!(same.wall_clock_nanos(), now);
        same.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        let mut again = [0u8; 4];
        same.fill_random(&mut again);
        assert_eq!(again, rnd);
        assert_eq!(same.divergence(), None);
        assert_eq!(
            live.kv_get(b"n".to_vec()).await.unwrap(),
            Some(b"changed".to_vec()),
            "the replayed kv.set did not write"
        );

        // A different call: diverged at its place (the log line counts).
        let other = HostCtx::replaying(services.clone(), meta.clone(), tape.clone());
        other.wall_clock_nanos();
        let err = other.kv_get(b"n".to_vec()).await.unwrap_err();
        assert!(matches!(err, HostError::OffTape(_)), "{err:?}");
        let d = other.divergence().unwrap();
        assert_eq!(d.at, 3);
        assert_eq!(d.recorded.as_deref(), Some("kv.set \"n\" = \"1\""));
        assert_eq!(d.asked.as_deref(), Some("kv.get \"n\""));

        // Fewer calls than the tape holds is a divergence too.
        let short = HostCtx::replaying(services, meta, tape);
        short.wall_clock_nanos();
        let d = short.divergence().unwrap();
        assert_eq!((d.at, d.asked), (3, None));
    }

    #[tokio::test]
    async fn logs_are_capped_per_invocation() {
        let dir = tempfile::tempdir().unwrap();
        let limits = HostLimits {
            log_max_bytes: 10,
            ..HostLimits::default()
        };
        let host = ctx(&dir, limits);
        host.log(LogStream::Stderr, "", "0123456789abcdef");
        host.log(LogStream::Stderr, "", "more");
        let (_, logs) = host.take_records();
        assert_eq!(logs[0].message, "0123456789");
        assert_eq!(logs.len(), 2, "one truncated line and one notice: {logs:?}");
        assert!(logs[1].message.contains("truncated"));
    }

    #[tokio::test]
    async fn a_tenant_logging_past_its_rate_loses_lines_and_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let limits = HostLimits {
            log_max_bytes: 100,
            log_bytes_per_sec_per_tenant: 1,
            ..HostLimits::default()
        };
        // The bucket holds one invocation's 100 bytes: the first call
        // spends it, a second call of the same tenant finds it empty.
        let first = ctx(&dir, limits);
        for _ in 0..4 {
            first.log(LogStream::Log, "info", &"x".repeat(25));
        }
        assert_eq!(first.take_records().1.len(), 4);
        let second = HostCtx::new(first.0.services.clone(), first.0.meta.clone());
        second.log(LogStream::Log, "info", &"y".repeat(25));
        second.log(LogStream::Stderr, "", &"z".repeat(25));
        second.log(LogStream::System, "info", "the node's own line");
        let (tape, logs) = second.take_records();
        assert!(tape.events.is_empty(), "the tape keeps what the log keeps");
        let messages: Vec<_> = logs.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert_eq!(messages[0], "the node's own line");
        assert!(
            messages[1].starts_with("50 bytes of log output dropped"),
            "{messages:?}"
        );
        assert_eq!(first.0.services.log_rates.dropped_bytes(), 50);
    }

    #[tokio::test]
    async fn the_tape_keeps_a_cut_line_as_the_log_does() {
        let dir = tempfile::tempdir().unwrap();
        let limits = HostLimits {
            log_max_bytes: 10,
            ..HostLimits::default()
        };
        let host = ctx(&dir, limits);
        host.log(LogStream::Log, "info", "0123456789abcdef");
        host.log(LogStream::Log, "info", "more");
        let (tape, _) = host.take_records();
        let messages: Vec<_> = tape
            .events
            .iter()
            .map(|e| match e {
                HostEvent::Log { message, .. } => message.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(messages, ["0123456789"]);
    }

    #[tokio::test]
    async fn outbound_http_is_denied_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let host = ctx(&dir, HostLimits::default());
        let err = host
            .http_fetch(OutboundRequest {
                method: "GET".into(),
                url: "http://127.0.0.1:9/".into(),
                headers: vec![],
                body: vec![],
            })
            .await
            .unwrap_err();
        assert_eq!(err, HostError::Denied("127.0.0.1:9".into()));
        assert!(host.take_records().0.events.is_empty());
    }
}
