//! Generic warm pools (Hydra §4.2): per language, a few processes started
//! ahead of time inside a sandbox (root, cgroup, namespaces, seccomp) but
//! given no function yet, so a new function's first invocation skips
//! starting one.
//!
//! - **Node.js**: spawned through the root zygote (V8 does not survive
//!   `fork`); without the pool a new function waits for `node` to start.
//! - **Python**: forked from the bare root zygote, as a handler of a
//!   function without packages would be; without the pool a new function
//!   waits for that fork and for the move into its cgroup (the move waits
//!   out an RCU grace period after a quiet spell: `docs/process-tier.md`).
//!   Only handlers that would fork from the bare root take one: a function
//!   whose packages a zygote holds forks from that zygote instead (the
//!   import cache is worth more than the pool), and one that may open
//!   internet sockets needs a seccomp filter chosen at fork. Python is
//!   pooled only with cgroups: without them its memory cap is an address
//!   space limit fixed at fork, before the function is known.
//!
//! A pooled process is paused until taken. It is given a function by
//! binding its code and packages into its root — there is no mount
//! namespace, so they appear inside the running sandbox at once — setting
//! its cgroup's limits, and sending it `load`. Pools are language-generic
//! and belong to no tenant, so every colocation mode may use them: a
//! process serves the one function it was given, never another.
//!
//! A pool is kept only once a function of its language was prepared on
//! this node, and refilled in the background once the invocation that
//! took from it ends.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hearth_core::{InvokeError, Runtime};

use super::{Inner, ProcEngine};
use crate::cgroup::CgroupLimits;
use crate::handler::Handler;

/// The pre-started processes of one language.
pub(super) struct GenericPool {
    ready: Mutex<Vec<Handler>>,
    /// A refill is under way (one at a time).
    filling: AtomicBool,
    /// Set once a function of this language is prepared.
    wanted: AtomicBool,
    /// Handlers given a function from this pool.
    taken: AtomicU64,
}

impl GenericPool {
    pub(super) fn new() -> GenericPool {
        GenericPool {
            ready: Mutex::default(),
            filling: false.into(),
            wanted: false.into(),
            taken: AtomicU64::new(0),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.ready.lock().len()
    }

    pub(super) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    pub(super) fn filling(&self) -> bool {
        self.filling.load(Ordering::Acquire)
    }

    /// A pre-started process, resumed; `None` if the pool is empty.
    pub(super) fn take(&self) -> Option<Handler> {
        let h = self.ready.lock().pop()?;
        h.resume();
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some(h)
    }

    /// Everything pooled (at shutdown).
    pub(super) fn drain(&self) -> Vec<Handler> {
        self.ready.lock().drain(..).collect()
    }
}

/// The limits of a process not yet given a function; its function's own
/// replace them when it is.
pub(super) fn generic_limits(inner: &Inner) -> CgroupLimits {
    CgroupLimits {
        memory_bytes: 256 << 20,
        max_pids: inner.config.max_pids,
        cpu_percent: inner.config.cpu_percent,
    }
}

impl Inner {
    pub(super) fn pool(&self, runtime: Runtime) -> &GenericPool {
        match runtime {
            Runtime::Python => &self.python_pool,
            _ => &self.node_pool,
        }
    }

    /// Whether `runtime` gets a pool on this node at all.
    fn pooled(&self, runtime: Runtime) -> bool {
        self.config.generic_pool > 0 && (runtime != Runtime::Python || self.cgroups.is_some())
    }

    /// From now on keeps `runtime`'s pool filled.
    pub(super) fn want_pool(self: &Arc<Self>, runtime: Runtime) {
        self.pool(runtime).wanted.store(true, Ordering::Relaxed);
        self.fill_pool(runtime);
    }

    /// A pre-started process of `runtime`, if its pool has one. The pool
    /// is refilled when the invocation that took it ends ([`Inner::refill`]).
    pub(super) fn take_generic(&self, runtime: Runtime) -> Option<Handler> {
        self.pool(runtime).take()
    }

    /// Tops up every pool — generic processes and sandbox roots — in the
    /// background. Called when an invocation ends, not when it starts: a
    /// refill forks, mounts and moves a process between cgroups, and on
    /// two cores doing that beside the invocation that took from the pool
    /// slowed it by more than the pool saved (a pooled Python function's
    /// first invocation over curl, six fresh functions: 13–17 ms with the
    /// refill at the take, 6–9 ms with it here; the handler itself was
    /// ready in 3–5 ms).
    pub(super) fn refill(self: &Arc<Self>) {
        self.fill_roots();
        self.fill_pool(Runtime::Python);
        self.fill_pool(Runtime::Node);
    }

    /// Tops `runtime`'s pool up to `generic_pool` processes, in the
    /// background, if it is wanted.
    pub(super) fn fill_pool(self: &Arc<Self>, runtime: Runtime) {
        let pool = self.pool(runtime);
        if !self.pooled(runtime)
            || self.closed.load(Ordering::Acquire)
            || !pool.wanted.load(Ordering::Relaxed)
            || pool.len() >= self.config.generic_pool
            || pool.filling.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let engine = ProcEngine(self.clone());
        tokio::spawn(async move {
            let inner = &engine.0;
            let pool = inner.pool(runtime);
            while pool.len() < inner.config.generic_pool && !inner.closed.load(Ordering::Acquire) {
                match engine.launch_generic(runtime).await {
                    Ok(h) if inner.closed.load(Ordering::Acquire) => inner.destroy_now(h),
                    Ok(h) => {
                        h.pause();
                        pool.ready.lock().push(h);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, %runtime, "could not start a generic process");
                        break;
                    }
                }
            }
            pool.filling.store(false, Ordering::Release);
        });
    }
}

impl ProcEngine {
    /// Starts one process of `runtime` with no function.
    async fn launch_generic(&self, runtime: Runtime) -> Result<Handler, InvokeError> {
        match runtime {
            Runtime::Python => {
                let root = self.zygotes().await?.root();
                let limits = generic_limits(&self.0);
                // Network sockets stay closed (the filter is chosen at
                // fork): functions that may open them are not pooled.
                self.launch(None, &[], limits, None, |spec| async move {
                    spec.send(&root, "fork_handler").await
                })
                .await
            }
            _ => self.launch_node().await,
        }
    }
}
