//! The js tier's worker threads, and how work is shared between them.
//!
//! Each worker is an OS thread with a single-threaded Tokio runtime; an
//! invocation is a local task there, so one worker interleaves many
//! invocations while they wait on host calls. JS never runs on the node's
//! HTTP threads. Idle isolates are kept per worker, per version — never
//! shared across versions, functions or tenants — and dropped after the
//! keep-alive or beyond a per-worker count.
//!
//! Each worker also keeps a few *blank* isolates (Hydra's generic warm
//! pool, §3.4): runtime, context and prelude, no function. A version's
//! first invocation on a worker loads its code into one of them instead of
//! building an isolate from nothing (the prelude is most of that cost),
//! and the worker makes a new blank one when it next has nothing to run.
//!
//! A function that spins holds its worker's thread until the interrupt
//! handler stops it at the deadline (QuickJS cannot pause a run and resume
//! it later). So that one tenant cannot take every thread:
//!
//! * **A share per tenant.** A tenant's invocations run on at most
//!   `workers_per_tenant` of the workers (half, by default): once it holds
//!   that many, its next invocation goes to one it already holds, behind
//!   its own work. A tenant whose every invocation spins takes that many
//!   threads, never all of them.
//! * **Stalled workers are passed over.** A worker whose JS has run for
//!   longer than a slice (20 ms) without yielding is *stalled*. Dispatch
//!   sends work elsewhere while any other worker will do, and a watchdog
//!   moves the jobs waiting in a stalled worker's queue to one that is not.
//!   (A job that has started stays: its isolate lives on that thread.)
//! * **Reserve workers**, as many as the regular ones, take work only when
//!   every worker a job may go to is stalled: a new invocation of a tenant
//!   that is not spinning finds a thread even while other tenants hold
//!   their whole shares, and the kernel time-slices it with the spinners.
//! * **Lost workers are abandoned.** Some QuickJS builtins loop without
//!   polling the interrupt handler (`Array.prototype.reverse.call({length:
//!   2**53-1})`, `join`): the deadline cannot stop them. The caller does
//!   not wait on the worker past the deadline and a grace ([`GRACE`]); if
//!   the worker has not polled since then, it is *lost*: it takes no more
//!   work, its queue moves elsewhere, its thread drops to `SCHED_IDLE` (it
//!   runs only when nothing else wants the core), and a spare slot starts
//!   a fresh thread in its place (at most as many spares as regular
//!   workers). The version that did it, and every later one of its tenant,
//!   runs in Node.js from then on ([`JsVersion::lost_a_worker`] and the
//!   engine's tenants), where a deadline kills the process.
//! * **Tenants over their CPU share give way.** The time each job's polls
//!   take is charged to its tenant ([`hearth_host::cpu`]); while a tenant
//!   is over its share, a worker polls its jobs with the thread lowered,
//!   so the kernel runs other tenants' workers first.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hearth_core::LogStream;
use hearth_core::{InvokeError, Request};
use hearth_host::HostCtx;
use hearth_host::cpu::TenantCpu;
use hearth_host::priority;
use tokio::sync::oneshot;

use crate::engine::{JsConfig, JsVersion};
use crate::isolate::{Answered, Failure, Isolate, Streams};

pub(crate) struct Job {
    pub(crate) version: Arc<JsVersion>,
    /// In an isolate of its own, neither taken from nor kept among the
    /// version's idle ones (a replay).
    pub(crate) isolated: bool,
    pub(crate) req: Request,
    pub(crate) host: HostCtx,
    /// Set for a streaming invocation.
    pub(crate) streams: Option<Streams>,
    pub(crate) reply: oneshot::Sender<Result<Answered, InvokeError>>,
}

pub(crate) struct Worker {
    /// Jobs assigned and not yet started.
    queue: Mutex<VecDeque<Job>>,
    wake: tokio::sync::Notify,
    /// Invocations assigned and not finished (queued or running).
    pub(crate) load: AtomicUsize,
    pub(crate) idle: AtomicUsize,
    pub(crate) idle_bytes: AtomicU64,
    /// Blank isolates ready.
    pub(crate) blank: AtomicUsize,
    /// When its thread began running JS without yielding since (µs after
    /// [`epoch`], plus one); 0 while it is not running JS.
    busy_since: AtomicU64,
    /// When its thread last polled an interrupt handler (µs after
    /// [`epoch`], plus one).
    polled: AtomicU64,
    /// Takes work: a regular or reserve worker, or a spare started in a
    /// lost one's place; not a lost one, not a spare not yet started.
    active: std::sync::atomic::AtomicBool,
    /// Its thread's id, for moving a lost one to `SCHED_IDLE`.
    tid: std::sync::atomic::AtomicI32,
}

impl Worker {
    fn new(active: bool) -> Worker {
        Worker {
            queue: Mutex::new(VecDeque::new()),
            wake: tokio::sync::Notify::new(),
            load: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            idle_bytes: AtomicU64::new(0),
            blank: AtomicUsize::new(0),
            busy_since: AtomicU64::new(0),
            polled: AtomicU64::new(0),
            active: std::sync::atomic::AtomicBool::new(active),
            tid: std::sync::atomic::AtomicI32::new(0),
        }
    }

    fn stalled(&self, now: u64, slice: u64) -> bool {
        let since = self.busy_since.load(Ordering::Relaxed);
        since != 0 && now.saturating_sub(since) > slice
    }

    fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }
}

/// How long past an invocation's deadline its caller waits on the worker;
/// a worker that has not polled its interrupt handler for as long is lost.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// The workers, and each tenant's invocations on each of them.
pub(crate) struct Pool {
    pub(crate) workers: Vec<Arc<Worker>>,
    /// The first `regular` workers take work first; the rest are reserves.
    regular: usize,
    per_tenant: usize,
    /// The slice, in µs.
    slice: u64,
    /// Tenant → its invocations (queued or running) on each worker.
    held: Mutex<HashMap<Arc<str>, Vec<usize>>>,
    /// Workers abandoned since start.
    abandoned: AtomicUsize,
    /// What a spare worker's thread is started with.
    spawn: Mutex<Option<Spawner>>,
}

/// What starting a worker's thread needs.
struct Spawner {
    io: tokio::runtime::Handle,
    config: JsConfig,
}

thread_local! {
    /// This thread's worker, for [`running`] and [`yielded`].
    static BUSY: RefCell<Option<Arc<Worker>>> = const { RefCell::new(None) };
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    epoch().elapsed().as_micros() as u64 + 1
}

/// Called by an isolate's interrupt handler, which QuickJS polls while JS
/// runs: this thread is running JS (since the first poll, if it was not).
pub(crate) fn running() {
    BUSY.with(|b| {
        if let Some(w) = &*b.borrow() {
            let now = now_us();
            if w.busy_since.load(Ordering::Relaxed) == 0 {
                w.busy_since.store(now, Ordering::Relaxed);
            }
            w.polled.store(now, Ordering::Relaxed);
        }
    });
}

/// This thread stopped running JS (it is about to wait, or is done).
pub(crate) fn yielded() {
    BUSY.with(|b| {
        if let Some(w) = &*b.borrow() {
            w.busy_since.store(0, Ordering::Relaxed);
        }
    });
}

impl Pool {
    /// Starts `config.workers` workers and as many reserves, and the
    /// watchdog. Call inside the node's Tokio runtime: host calls run there.
    pub(crate) fn start(config: &JsConfig) -> anyhow::Result<Arc<Pool>> {
        let regular = config.workers.max(1);
        let io = tokio::runtime::Handle::current();
        // Regular workers, as many reserves, and as many spares (started
        // only in lost workers' places).
        let workers: Vec<Arc<Worker>> = (0..regular * 3)
            .map(|i| Arc::new(Worker::new(i < regular * 2)))
            .collect();
        let pool = Arc::new(Pool {
            workers,
            regular,
            per_tenant: config.workers_per_tenant.clamp(1, regular),
            slice: config.slice.as_micros() as u64,
            held: Mutex::new(HashMap::new()),
            abandoned: AtomicUsize::new(0),
            spawn: Mutex::new(Some(Spawner {
                io,
                config: config.clone(),
            })),
        });
        for index in 0..regular * 2 {
            pool.start_thread(index)?;
        }
        let weak = Arc::downgrade(&pool);
        let slice = config.slice;
        std::thread::Builder::new()
            .name("hearth-js-watchdog".into())
            .spawn(move || {
                while let Some(pool) = weak.upgrade() {
                    pool.rescue();
                    drop(pool);
                    std::thread::sleep(slice);
                }
            })?;
        Ok(pool)
    }

    /// Starts worker `index`'s thread.
    fn start_thread(self: &Arc<Self>, index: usize) -> std::io::Result<()> {
        let spawn = self.spawn.lock();
        let Some(spawn) = spawn.as_ref() else {
            return Ok(());
        };
        let (w, io, cfg, weak) = (
            self.workers[index].clone(),
            spawn.io.clone(),
            spawn.config.clone(),
            Arc::downgrade(self),
        );
        // Reserves keep no blank isolates: they are for bad moments.
        let blanks = if index < self.regular || index >= self.regular * 2 {
            cfg.blank_per_worker
        } else {
            0
        };
        std::thread::Builder::new()
            .name(format!("hearth-js-{index}"))
            .stack_size(16 << 20)
            .spawn(move || worker_main(index, w, weak, io, cfg, blanks))
            .map(drop)
    }

    /// The caller of an invocation dispatched to worker `i` gave up on it
    /// at its deadline and [`GRACE`]: if the worker has not polled its
    /// interrupt handler since before then, its thread is stuck in a
    /// builtin. It is abandoned (see the module's documentation); whether
    /// it was is returned.
    pub(crate) fn give_up_on(self: &Arc<Self>, i: usize) -> bool {
        let w = &self.workers[i];
        let now = now_us();
        let grace = GRACE.as_micros() as u64;
        let stuck =
            w.stalled(now, grace) && now.saturating_sub(w.polled.load(Ordering::Relaxed)) > grace;
        if !stuck || !w.active.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.abandoned.fetch_add(1, Ordering::Relaxed);
        let tid = w.tid.load(Ordering::Relaxed);
        if tid != 0 {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: sets the scheduling policy of one thread of this
            // process by its id; `param` is a valid sched_param.
            unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) };
        }
        tracing::warn!(
            worker = i,
            "a js worker ran past its invocation's deadline without polling its interrupt handler \
             (a builtin that loops); abandoned"
        );
        let spare = (self.regular * 2..self.workers.len()).find(|&s| {
            self.workers[s].tid.load(Ordering::Relaxed) == 0
                && self.workers[s]
                    .active
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
        });
        if let Some(s) = spare
            && self.start_thread(s).is_err()
        {
            self.workers[s].active.store(false, Ordering::Relaxed);
        }
        // Its queue moves at the watchdog's next turn.
        true
    }

    /// Workers abandoned since start.
    pub(crate) fn abandoned(&self) -> usize {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// Queues `job` on a worker (see the module's documentation); which.
    pub(crate) fn dispatch(&self, job: Job) -> usize {
        let i = {
            let mut held = self.held.lock();
            let i = self.pick(&held, &job.version, None);
            held.entry(job.version.tenant.clone())
                .or_insert_with(|| vec![0; self.workers.len()])[i] += 1;
            i
        };
        let worker = &self.workers[i];
        worker.load.fetch_add(1, Ordering::Relaxed);
        worker.queue.lock().push_back(job);
        worker.wake.notify_one();
        i
    }

    /// The worker for an invocation of `v`: among those its tenant may
    /// use, not stalled before stalled, regular before reserve, fewest
    /// invocations of other tenants, least loaded, then one holding an
    /// idle isolate of `v`. `except`: a worker it must not go to.
    fn pick(
        &self,
        held: &HashMap<Arc<str>, Vec<usize>>,
        v: &JsVersion,
        except: Option<usize>,
    ) -> usize {
        let mine = held.get(&v.tenant);
        let on = |i: usize| mine.map_or(0, |m| m[i]);
        let holding = (0..self.workers.len())
            .filter(|&i| on(i) > 0 && self.workers[i].active())
            .count();
        let full = holding >= self.per_tenant;
        let now = now_us();
        (0..self.workers.len())
            .filter(|&i| Some(i) != except && self.workers[i].active() && (!full || on(i) > 0))
            .min_by_key(|&i| {
                let w = &self.workers[i];
                let load = w.load.load(Ordering::Relaxed);
                (
                    w.stalled(now, self.slice),
                    i >= self.regular,
                    load.saturating_sub(on(i)),
                    load,
                    v.idle_on[i].load(Ordering::Relaxed) == 0,
                )
            })
            .unwrap_or(0)
    }

    /// An invocation on worker `i` ended.
    fn finished(&self, i: usize, tenant: &Arc<str>) {
        // The tenant's entry stays when its counts reach zero (one per
        // tenant the node has served): removed, the next invocation would
        // allocate it again.
        if let Some(counts) = self.held.lock().get_mut(tenant) {
            counts[i] = counts[i].saturating_sub(1);
        }
        self.workers[i].load.fetch_sub(1, Ordering::Relaxed);
    }

    /// Moves the jobs waiting behind a stalled worker to workers that are
    /// not stalled, where their tenants' shares allow.
    fn rescue(&self) {
        let now = now_us();
        for (from, worker) in self.workers.iter().enumerate() {
            if !worker.stalled(now, self.slice) && worker.active() {
                continue;
            }
            loop {
                let Some(job) = worker.queue.lock().pop_front() else {
                    break;
                };
                let mut held = self.held.lock();
                let to = self.pick(&held, &job.version, Some(from));
                let lost = !worker.active();
                if to == from || (!lost && self.workers[to].stalled(now, self.slice)) {
                    drop(held);
                    worker.queue.lock().push_front(job);
                    break;
                }
                if let Some(counts) = held.get_mut(&job.version.tenant) {
                    counts[from] = counts[from].saturating_sub(1);
                    counts[to] += 1;
                }
                drop(held);
                worker.load.fetch_sub(1, Ordering::Relaxed);
                let target = &self.workers[to];
                target.load.fetch_add(1, Ordering::Relaxed);
                target.queue.lock().push_back(job);
                target.wake.notify_one();
            }
        }
    }

    /// Workers stalled now (the lost ones among them).
    pub(crate) fn stalled(&self) -> usize {
        let now = now_us();
        self.workers
            .iter()
            .filter(|w| w.stalled(now, self.slice))
            .count()
    }

    /// Workers taking work now.
    pub(crate) fn active(&self) -> usize {
        self.workers.iter().filter(|w| w.active()).count()
    }

    pub(crate) fn regular(&self) -> usize {
        self.regular
    }
}

// ---------------------------------------------------------------- one worker

struct Idle {
    isolate: Isolate,
    since: Instant,
    bytes: u64,
    version: Arc<JsVersion>,
}

type IdleMap = RefCell<HashMap<String, Vec<Idle>>>;

/// What one worker keeps between invocations.
#[derive(Default)]
struct Local {
    /// Isolates of versions, parked after an invocation.
    idle: IdleMap,
    /// Blank isolates, ready for any version.
    blanks: RefCell<Vec<Isolate>>,
    /// Woken when a blank isolate is taken.
    refill: tokio::sync::Notify,
    /// Woken when the worker's last running invocation finishes.
    quiet: tokio::sync::Notify,
}

fn worker_main(
    index: usize,
    me: Arc<Worker>,
    pool: std::sync::Weak<Pool>,
    io: tokio::runtime::Handle,
    config: JsConfig,
    blanks: usize,
) {
    BUSY.with(|b| *b.borrow_mut() = Some(me.clone()));
    // SAFETY: gettid has no preconditions.
    me.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a worker runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let here: Rc<Local> = Rc::default();
        {
            let (here, me, keep) = (here.clone(), me.clone(), config.keep_alive);
            tokio::task::spawn_local(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    evict(&here.idle, &me, index, |i| i.since.elapsed() > keep);
                }
            });
        }
        tokio::task::spawn_local(refill_blanks(here.clone(), me.clone(), io.clone(), blanks));
        loop {
            let next = me.queue.lock().pop_front();
            let Some(job) = next else {
                // A job pushed meanwhile left a permit: no wake-up is lost.
                me.wake.notified().await;
                continue;
            };
            let (here, me, io, config, pool) = (
                here.clone(),
                me.clone(),
                io.clone(),
                config.clone(),
                pool.clone(),
            );
            tokio::task::spawn_local(async move {
                let tenant = job.version.tenant.clone();
                let cpu = job.host.meta().cpu.clone();
                let run = run_job(
                    index,
                    &me,
                    &here,
                    io,
                    &config,
                    (job.version, job.isolated),
                    job.req,
                    job.host,
                    job.streams,
                );
                let result = charged(cpu.as_deref(), run).await;
                yielded();
                if let Some(pool) = pool.upgrade() {
                    pool.finished(index, &tenant);
                }
                if me.load.load(Ordering::Relaxed) == 0 {
                    here.quiet.notify_waiters();
                }
                let _ = job.reply.send(result);
            });
        }
    });
}

/// Polls `job` on this worker's thread, charging the time of each poll to
/// its tenant's CPU account, with the thread lowered while the tenant is
/// over its share ([`hearth_host::cpu`]) and at its own priority otherwise.
async fn charged<F: Future>(cpu: Option<&TenantCpu>, job: F) -> F::Output {
    let mut job = std::pin::pin!(job);
    let mut over = cpu.is_some_and(TenantCpu::over_share);
    std::future::poll_fn(|cx| {
        priority::give_way(over);
        let started = Instant::now();
        let polled = job.as_mut().poll(cx);
        if let Some(cpu) = cpu {
            over = cpu.charge_since(started).1;
        }
        polled
    })
    .await
}

/// Keeps `target` blank isolates on this worker, making them only while it
/// has no invocation to run, so a refill never delays one.
async fn refill_blanks(
    here: Rc<Local>,
    me: Arc<Worker>,
    io: tokio::runtime::Handle,
    target: usize,
) {
    loop {
        while here.blanks.borrow().len() < target {
            loop {
                // Made before the check, so a finish in between still wakes it.
                let quiet = here.quiet.notified();
                if me.load.load(Ordering::Relaxed) == 0 {
                    break;
                }
                quiet.await;
            }
            let made = Isolate::blank(io.clone());
            yielded();
            match made {
                Ok(i) => {
                    here.blanks.borrow_mut().push(i);
                    me.blank.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    tracing::warn!("could not make a blank js isolate; the pool stays short");
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
        here.refill.notified().await;
    }
}

/// Drops idle isolates for which `expired` holds.
fn evict(idle: &IdleMap, me: &Worker, index: usize, expired: impl Fn(&Idle) -> bool) {
    let mut map = idle.borrow_mut();
    for list in map.values_mut() {
        list.retain(|i| {
            if expired(i) {
                i.version.idle_on[index].fetch_sub(1, Ordering::Relaxed);
                me.idle.fetch_sub(1, Ordering::Relaxed);
                me.idle_bytes.fetch_sub(i.bytes, Ordering::Relaxed);
                false
            } else {
                true
            }
        });
    }
    map.retain(|_, l| !l.is_empty());
}

#[allow(clippy::too_many_arguments)]
async fn run_job(
    index: usize,
    me: &Worker,
    here: &Local,
    io: tokio::runtime::Handle,
    config: &JsConfig,
    (version, isolated): (Arc<JsVersion>, bool),
    req: Request,
    host: HostCtx,
    streams: Option<Streams>,
) -> Result<Answered, InvokeError> {
    // Its caller stopped waiting at the deadline; and a version that lost
    // a worker may do it again: neither starts (a builtin that loops would
    // take this thread too, with no caller left to give up on it).
    let meta = host.meta();
    if Instant::now() >= meta.deadline {
        let limit_ms = meta.version.spec.limits.timeout_ms;
        return Err(InvokeError::Timeout { limit_ms });
    }
    if version.lost_a_worker.load(Ordering::Relaxed) {
        return Err(InvokeError::Unsupported(
            "an earlier invocation of this version lost a worker".into(),
        ));
    }
    let idle = &here.idle;
    let warm = if isolated {
        None
    } else {
        idle.borrow_mut().get_mut(&version.key).and_then(Vec::pop)
    };
    let mut isolate = match warm {
        Some(i) => {
            version.idle_on[index].fetch_sub(1, Ordering::Relaxed);
            me.idle.fetch_sub(1, Ordering::Relaxed);
            me.idle_bytes.fetch_sub(i.bytes, Ordering::Relaxed);
            i.isolate
        }
        None => {
            let blank = here.blanks.borrow_mut().pop();
            let blank = match blank {
                Some(i) => {
                    me.blank.fetch_sub(1, Ordering::Relaxed);
                    here.refill.notify_one();
                    Ok(i)
                }
                None => Isolate::blank(io),
            };
            let loaded = match blank {
                Ok(i) => {
                    i.load(version.code.clone(), version.memory_mib, host.clone())
                        .await
                }
                Err(e) => Err(e),
            };
            match loaded {
                Ok(i) => i,
                Err(Failure::Invoke(e)) => return Err(e),
                Err(Failure::Load(first, text)) => {
                    host.log(LogStream::Stderr, "error", &text);
                    return Err(InvokeError::Function(first));
                }
            }
        }
    };
    let result = isolate
        .invoke(req, host, config.max_response_bytes, streams, &version.env)
        .await;
    isolate.finish();
    // Kept only when its state is known good: a clean run or a plain
    // exception; never after a timeout, OOM or an unsupported request;
    // never an isolated one.
    if !isolated && matches!(result, Ok(_) | Err(InvokeError::Function(_))) {
        let bytes = isolate.memory_bytes();
        version.idle_on[index].fetch_add(1, Ordering::Relaxed);
        me.idle.fetch_add(1, Ordering::Relaxed);
        me.idle_bytes.fetch_add(bytes, Ordering::Relaxed);
        let parked = Idle {
            isolate,
            since: Instant::now(),
            bytes,
            version: version.clone(),
        };
        // The key is cloned only for a version's first idle isolate here.
        let mut map = idle.borrow_mut();
        match map.get_mut(&version.key) {
            Some(list) => list.push(parked),
            None => {
                map.insert(version.key.clone(), vec![parked]);
            }
        }
        drop(map);
        if me.idle.load(Ordering::Relaxed) > config.max_idle_per_worker {
            // Over the cap: drop the oldest idle isolate.
            let oldest = idle
                .borrow()
                .values()
                .flat_map(|l| l.iter().map(|i| i.since))
                .min();
            if let Some(t) = oldest {
                evict(idle, me, index, |i| i.since <= t);
            }
        }
    }
    result
}
