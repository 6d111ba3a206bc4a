//! What holds any wasm sandbox — module or component — to its function's
//! limits: a memory cap and a deadline checked at every epoch tick.

use std::time::Instant;

use wasmtime::{ResourceLimiter, Store, UpdateDeadline};

use crate::WasmEngine;

/// A sandbox's limits and what they refused, kept in its store.
pub(crate) struct Bounds {
    pub limiter: MemoryLimiter,
    /// When the invocation must end; `None` runs without one.
    pub deadline: Option<Instant>,
    /// The deadline interrupted the guest.
    pub timed_out: bool,
}

impl Bounds {
    pub fn new(memory_bytes: usize) -> Self {
        Bounds {
            limiter: MemoryLimiter::new(memory_bytes),
            deadline: None,
            timed_out: false,
        }
    }
}

/// A store's data that carries [`Bounds`].
pub(crate) trait Bounded: Send + 'static {
    fn bounds(&mut self) -> &mut Bounds;
}

/// Caps linear memory at the function's limit and remembers refusals, so
/// a trap that follows one is reported as running out of memory.
pub(crate) struct MemoryLimiter {
    limit_bytes: usize,
    refused: bool,
}

impl MemoryLimiter {
    pub fn new(limit_bytes: usize) -> Self {
        MemoryLimiter {
            limit_bytes,
            refused: false,
        }
    }

    /// Whether a growth past the limit was refused.
    pub fn refused(&self) -> bool {
        self.refused
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit_bytes {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // The pool's slot is smaller than asked: the same thing to the guest.
        self.refused = true;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// A store whose memory is capped by its [`Bounds`] and which yields
/// once a time slice has passed, checked at every epoch tick, until the
/// deadline, then traps. Polled on a thread that
/// [gives way](hearth_host::priority::gives_way) (a long run's), it
/// yields at every tick, which the ticker then makes half a millisecond.
pub(crate) fn new_store<T: Bounded>(engine: &WasmEngine, state: T) -> Store<T> {
    let mut store = Store::new(engine.wasmtime(), state);
    store.limiter(|s| &mut s.bounds().limiter);
    store.set_epoch_deadline(1);
    let slice = engine.config().time_slice();
    // The first tick ends the first slice, as when every tick did.
    let mut slice_ends = Instant::now();
    store.epoch_deadline_callback(move |mut ctx| {
        let bounds = ctx.data_mut().bounds();
        let now = Instant::now();
        match bounds.deadline {
            Some(deadline) if now >= deadline => {
                bounds.timed_out = true;
                Ok(UpdateDeadline::Interrupt)
            }
            _ if now >= slice_ends || hearth_host::priority::gives_way() => {
                slice_ends = now + slice;
                Ok(UpdateDeadline::Yield(1))
            }
            _ => Ok(UpdateDeadline::Continue(1)),
        }
    });
    store
}

/// Why a guest whose run returned `err` failed, in the caller's terms:
/// out of time, out of memory, or the trap with its backtrace.
pub(crate) fn why_failed(
    bounds: &Bounds,
    limits: &hearth_core::Limits,
    err: &wasmtime::Error,
) -> hearth_core::InvokeError {
    use hearth_core::InvokeError;
    if bounds.timed_out {
        return InvokeError::Timeout {
            limit_ms: limits.timeout_ms,
        };
    }
    if bounds.limiter.refused() {
        return InvokeError::OutOfMemory {
            limit_mib: limits.memory_mib,
            last_output: Default::default(),
        };
    }
    match err.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::StackOverflow) => {
            InvokeError::Trap("stack overflow (call stack exhausted)".into())
        }
        Some(trap) => {
            let frames = err
                .downcast_ref::<wasmtime::WasmBacktrace>()
                .map(|bt| format!("\n{bt}"))
                .unwrap_or_default();
            InvokeError::Trap(format!("{trap}{frames}"))
        }
        None => InvokeError::Trap(format!("{err:#}")),
    }
}
