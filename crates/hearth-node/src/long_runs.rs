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
//! - runs with its thread at nice 10 and the kernel's default slice
//!   (other threads ask for a short one: [`hearth_host::priority`]), so
//!   that the kernel runs a worker with short work first when the cores
//!   are busy, and the long slices in whatever time is left; and
//! - yields after half a millisecond instead of a time slice (5 ms by
//!   default): a request woken onto the same worker waits behind at most
//!   that. Under spinning calls this took another tenant's p99 from
//!   3.9–6.5× its idle figure to 1.7–2.5× (`bench/RESULTS.md` §10).
//!
//! An invocation of a tenant over its CPU share ([`hearth_host::cpu`])
//! gives way the same way from its first poll, long or not; every poll's
//! time is charged to its tenant.
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

use hearth_host::cpu::TenantCpu;
use hearth_host::priority::{self, nice_now, set_own_level};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

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
        let ((base, low), works) = match priority::levels() {
            Some(levels) => (levels, true),
            None => ((nice_now(), priority::lowered(nice_now())), false),
        };
        LongRuns {
            lane: Arc::new(Semaphore::new(lane_size)),
            lane_size,
            after,
            base,
            low,
            nice: AtomicBool::new(works),
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
    /// polls take and charging it to `cpu`; once past `after`, or while
    /// `cpu`'s tenant is over its share, each poll waits for the lane and
    /// runs at low priority.
    pub(crate) async fn run<F: Future>(&self, run: F, cpu: Option<&TenantCpu>) -> F::Output {
        let mut run = std::pin::pin!(run);
        let mut ran = Duration::ZERO;
        let mut over = cpu.is_some_and(TenantCpu::over_share);
        let mut waiting: Option<Acquire> = None;
        // Polls `run`, adding the time to `ran` and charging it.
        let timed = |run: Pin<&mut F>,
                     cx: &mut std::task::Context<'_>,
                     ran: &mut Duration,
                     over: &mut bool| {
            let started = Instant::now();
            let polled = run.poll(cx);
            *ran += match cpu {
                Some(cpu) => {
                    let took;
                    (took, *over) = cpu.charge_since(started);
                    took
                }
                None => started.elapsed(),
            };
            polled
        };
        std::future::poll_fn(|cx| {
            if ran < self.after && !over {
                return timed(run.as_mut(), cx, &mut ran, &mut over);
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
            let _lowered = Lowered::new(self);
            timed(run.as_mut(), cx, &mut ran, &mut over)
        })
        .await
    }
}

/// The calling thread giving way for one long slice: marked (so a wasm
/// sandbox yields at every fine epoch tick) and at a long run's priority
/// where threads can be lowered; raised and unmarked again when dropped
/// (also when the run panics).
struct Lowered<'a> {
    runs: &'a LongRuns,
    niced: bool,
}

impl<'a> Lowered<'a> {
    fn new(runs: &'a LongRuns) -> Lowered<'a> {
        priority::mark_giving_way(true);
        let niced = runs.lowers_threads() && set_own_level(runs.low, true);
        Lowered { runs, niced }
    }
}

impl Drop for Lowered<'_> {
    fn drop(&mut self) {
        priority::mark_giving_way(false);
        if self.niced && !set_own_level(self.runs.base, false) {
            // Lost the right to raise it again: stop lowering.
            self.runs.nice.store(false, Ordering::Relaxed);
            tracing::error!(
                nice = self.runs.low,
                "could not raise an executor thread back from a long run's priority; long runs are no longer lowered"
            );
        }
    }
}

/// For the executor's `on_thread_start`: a thread spawned from a worker
/// in a long slice (a blocking-pool thread) would inherit its lowered nice
/// value and long slice for good; it starts at the calling thread's nice
/// value with a short slice instead.
pub fn start_threads_at_this_priority() -> impl Fn() + Send + Sync + 'static {
    let base = nice_now();
    move || {
        set_own_level(base, false);
    }
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
        runs.run(spin(6, Duration::from_millis(4), &mut seen), None)
            .await;
        let (base, low) = (runs.base, runs.low);
        assert_eq!(nice_now(), base, "the thread is raised again");
        if !runs.lowers_threads() {
            assert_eq!(seen, [base; 6], "no CAP_SYS_NICE here: nothing is lowered");
            return;
        }
        // Slices of at least 4 ms: the first is never long, and the first
        // three come to 12 ms, past 10 (a busy machine may stretch the
        // second and third past it too).
        assert_eq!(seen[0], base, "{seen:?}");
        assert_eq!(seen[3..], [low, low, low], "{seen:?}");
        assert!(seen.is_sorted(), "lowered once, for good: {seen:?}");
    }

    #[tokio::test]
    async fn a_long_runs_slices_are_marked_as_giving_way_whatever_its_nice_value() {
        async fn note(slices: u32, seen: &mut Vec<bool>) {
            for _ in 0..slices {
                let started = Instant::now();
                while started.elapsed() < Duration::from_millis(4) {
                    std::hint::spin_loop();
                }
                seen.push(priority::gives_way());
                tokio::task::yield_now().await;
            }
        }
        let runs = LongRuns::new(2, Duration::from_millis(10));
        let mut seen = Vec::new();
        runs.run(note(6, &mut seen), None).await;
        assert!(!priority::gives_way(), "unmarked after the run");
        assert!(!seen[0], "{seen:?}");
        assert_eq!(seen[3..], [true, true, true], "{seen:?}");
    }

    #[tokio::test]
    async fn a_short_run_is_never_lowered() {
        let runs = LongRuns::new(2, Duration::from_millis(50));
        let mut seen = Vec::new();
        runs.run(spin(5, Duration::from_millis(1), &mut seen), None)
            .await;
        assert!(seen.iter().all(|&n| n == runs.base), "{seen:?}");
    }

    #[tokio::test]
    async fn a_tenant_over_its_cpu_share_is_lowered_from_its_first_poll() {
        let shares = hearth_host::cpu::CpuShares::with_window(Duration::from_millis(200));
        let (heavy, light) = (shares.account(), shares.account());
        // Both run in one window, heavy far more: over in the next.
        let mut over = false;
        for _ in 0..100 {
            heavy.charge(Duration::from_millis(150));
            light.charge(Duration::from_millis(1));
            tokio::time::sleep(Duration::from_millis(10)).await;
            over = heavy.over_share();
            if over {
                break;
            }
        }
        assert!(over, "heavy never went over its share");
        let runs = LongRuns::new(2, Duration::from_secs(60));
        let mut seen = Vec::new();
        runs.run(spin(3, Duration::from_millis(1), &mut seen), Some(&heavy))
            .await;
        let mut light_seen = Vec::new();
        runs.run(
            spin(3, Duration::from_millis(1), &mut light_seen),
            Some(&light),
        )
        .await;
        assert!(light_seen.iter().all(|&n| n == runs.base), "{light_seen:?}");
        if !runs.lowers_threads() {
            assert_eq!(
                seen, [runs.base; 3],
                "no CAP_SYS_NICE here: nothing is lowered"
            );
            return;
        }
        assert_eq!(seen[0], runs.low, "lowered from the first poll: {seen:?}");
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
                    runs.run(
                        async {
                            for _ in 0..5 {
                                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                                most.fetch_max(now, Ordering::SeqCst);
                                std::thread::sleep(Duration::from_millis(2));
                                running.fetch_sub(1, Ordering::SeqCst);
                                tokio::task::yield_now().await;
                            }
                        },
                        None,
                    )
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
