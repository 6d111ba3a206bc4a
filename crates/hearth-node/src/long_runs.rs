//! Long runs give way to short ones: a two-level feedback queue over the
//! executor's worker threads.
//!
//! Wasm sandboxes (modules, components, compiled JS) run on the executor's
//! workers and yield at every time slice. A tenant whose calls spin to
//! their deadline keeps every worker busy, and another tenant's request
//! then waits in a queue behind a slice on each: admitted spinners of one
//! tenant took another's p99 to 2.0–2.8× its idle figure. An invocation that
//! has been polled for longer than [`LONG_AFTER`] is *long*. From then on, each
//! of its polls (one slice)
//!
//! - takes a place in the *lane*, which holds one fewer than the
//!   executor's workers, so that one worker is always free for short work
//!   and the I/O it waits on; and
//! - runs with its thread at nice 10, so that the kernel runs a worker
//!   with short work first when the cores are busy, and the long slices
//!   in whatever time is left.
//!
//! The runtime has one more worker than the machine has cores, so long
//! runs alone still use every core. Raising a thread back to nice 0 needs
//! `CAP_SYS_NICE` (or an `RLIMIT_NICE` of 20); without it threads are not
//! lowered, and the lane alone keeps a worker free.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// How much lower a thread running a long slice is than the others.
const LOWER_BY: libc::c_int = 10;

/// Polling an invocation takes this long before it is long: two of the
/// wasm tier's default time slices. The calls a node mostly answers take
/// well under a millisecond of it.
pub(crate) const LONG_AFTER: Duration = Duration::from_millis(10);

type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// The lane long runs share, and how a run becomes long.
pub(crate) struct LongRuns {
    lane: Arc<Semaphore>,
    lane_size: usize,
    after: Duration,
    /// The nice values of the executor's threads, and of a long slice's.
    base: libc::c_int,
    low: libc::c_int,
    /// Threads can be lowered and raised again.
    nice: AtomicBool,
}

impl LongRuns {
    /// Long runs of at most `workers - 1` at once (at least one), long
    /// after `after` of polling.
    pub(crate) fn new(workers: usize, after: Duration) -> LongRuns {
        let lane_size = workers.saturating_sub(1).max(1);
        let base = nice_now();
        let low = (base + LOWER_BY).min(19);
        LongRuns {
            lane: Arc::new(Semaphore::new(lane_size)),
            lane_size,
            after,
            base,
            low,
            nice: AtomicBool::new(low > base && can_renice(base, low)),
        }
    }

    /// Long slices that may run at once.
    pub(crate) fn lane_size(&self) -> usize {
        self.lane_size
    }

    /// Whether long slices run at a lower priority.
    pub(crate) fn lowers_threads(&self) -> bool {
        self.nice.load(Ordering::Relaxed)
    }

    /// Polls `run` as it would be polled alone, counting the time its
    /// polls take; once past `after`, each poll waits for the lane and
    /// runs at low priority.
    pub(crate) async fn run<F: Future>(&self, run: F) -> F::Output {
        let mut run = std::pin::pin!(run);
        let mut ran = Duration::ZERO;
        let mut waiting: Option<Acquire> = None;
        std::future::poll_fn(|cx| {
            if ran < self.after {
                let started = Instant::now();
                let polled = run.as_mut().poll(cx);
                ran += started.elapsed();
                return polled;
            }
            // A wait already queued comes first: its permit may be
            // assigned to it already.
            let free = match waiting {
                None => self.lane.clone().try_acquire_owned().ok(),
                Some(_) => None,
            };
            let _permit = match free {
                Some(permit) => permit,
                None => {
                    let acquire =
                        waiting.get_or_insert_with(|| Box::pin(self.lane.clone().acquire_owned()));
                    match acquire.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(permit) => {
                            waiting = None;
                            permit.expect("the lane is never closed")
                        }
                    }
                }
            };
            // Raised again, then the lane given back (in reverse order).
            let _lowered = self.lowers_threads().then(|| Lowered::new(self)).flatten();
            run.as_mut().poll(cx)
        })
        .await
    }
}

/// The calling thread at a long run's priority, raised again when
/// dropped (also when the run panics).
struct Lowered<'a>(&'a LongRuns);

impl<'a> Lowered<'a> {
    fn new(runs: &'a LongRuns) -> Option<Lowered<'a>> {
        set_nice(runs.low).then_some(Lowered(runs))
    }
}

impl Drop for Lowered<'_> {
    fn drop(&mut self) {
        if !set_nice(self.0.base) {
            // Lost the right to raise it again: stop lowering.
            self.0.nice.store(false, Ordering::Relaxed);
            tracing::error!(
                nice = self.0.low,
                "could not raise an executor thread back from a long run's priority; long runs are no longer lowered"
            );
        }
    }
}

/// For the executor's `on_thread_start`: a thread spawned from a worker
/// in a long slice (a blocking-pool thread) would inherit its lowered nice
/// value for good; it starts at the calling thread's instead.
pub fn start_threads_at_this_priority() -> impl Fn() + Send + Sync + 'static {
    let base = nice_now();
    move || {
        if nice_now() != base {
            set_nice(base);
        }
    }
}

/// Sets the calling thread's nice value (on Linux, per thread).
fn set_nice(nice: libc::c_int) -> bool {
    // SAFETY: setpriority has no memory effects; `gettid` names this thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) == 0 }
}

/// The calling thread's nice value.
fn nice_now() -> libc::c_int {
    // SAFETY: getpriority has no memory effects. It answers -1 both for
    // an error and for nice -1; with the thread's own id it cannot fail.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

/// Whether a thread of this process may go from `base` to `low` and back,
/// tried on a thread of its own.
fn can_renice(base: libc::c_int, low: libc::c_int) -> bool {
    std::thread::spawn(move || set_nice(low) && set_nice(base) && nice_now() == base)
        .join()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A future that spins for `slice` at every poll, `slices` times,
    /// noting the thread's nice value each time.
    async fn spin(slices: u32, slice: Duration, seen: &mut Vec<libc::c_int>) {
        for _ in 0..slices {
            let started = Instant::now();
            while started.elapsed() < slice {
                std::hint::spin_loop();
            }
            seen.push(nice_now());
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_run_is_lowered_only_once_long_and_raised_between_slices() {
        let runs = LongRuns::new(2, Duration::from_millis(10));
        let mut seen = Vec::new();
        runs.run(spin(6, Duration::from_millis(4), &mut seen)).await;
        let (base, low) = (runs.base, runs.low);
        assert_eq!(nice_now(), base, "the thread is raised again");
        if !runs.lowers_threads() {
            assert_eq!(seen, [base; 6], "no CAP_SYS_NICE here: nothing is lowered");
            return;
        }
        // 4 ms slices: the first three come to 12 ms, past 10.
        assert_eq!(seen, [base, base, base, low, low, low]);
    }

    #[tokio::test]
    async fn a_short_run_is_never_lowered() {
        let runs = LongRuns::new(2, Duration::from_millis(50));
        let mut seen = Vec::new();
        runs.run(spin(5, Duration::from_millis(1), &mut seen)).await;
        assert!(seen.iter().all(|&n| n == runs.base), "{seen:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 3)]
    async fn long_runs_hold_at_most_the_lane_at_once() {
        let runs = Arc::new(LongRuns::new(3, Duration::ZERO));
        assert_eq!(runs.lane_size(), 2);
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (runs, running, most) = (runs.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    runs.run(async {
                        for _ in 0..5 {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(2));
                            running.fetch_sub(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                        }
                    })
                    .await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "two slices at once, never three"
        );
    }
}
