//! Each tenant's share of the node's CPU: when one tenant's code takes
//! most of it, the other tenants' code goes first.
//!
//! Every invocation admitted on a node carries its tenant's
//! [`TenantCpu`] (in [`InvocationMeta::cpu`](crate::InvocationMeta)), and
//! the tiers charge it the time their code runs: each poll of a sandbox on
//! the node's executor, each poll of a JS job on its worker thread. Time
//! is counted in windows of [`WINDOW`]. A tenant is *over its share* for a
//! window when, in the one before,
//!
//! - at least one other tenant's code ran too,
//! - it used more than [`OVER_MEAN`] times the mean of the tenants that
//!   ran (so equals never lower each other), and
//! - it used more than a tenth of a core ([`FLOOR`]).
//!
//! Its code then runs on threads lowered by
//! [`LOWER_BY`](crate::priority::LOWER_BY): the kernel runs any thread
//! with another tenant's work first, and the heavy tenant's in the time
//! left. Nice is work-conserving, so that costs the heavy tenant nothing
//! while nobody else wants the cores; a tenant alone is never over.
//!
//! Relative to what the node's tenants used, not to the machine's cores:
//! what the light tenant needs is not to wait for a core behind the heavy
//! one's threads, however busy the machine is with work not charged here
//! (the process tier's children, other programs).

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the CPU a tenant used is summed before it is judged.
pub const WINDOW: Duration = Duration::from_millis(200);

/// Over its share: past this many times the mean of the tenants that ran.
/// With two tenants, the heavy one is over once it used three times what
/// the other did.
pub const OVER_MEAN: f64 = 1.5;

/// Below this share of one core, a tenant is never over: it cannot keep
/// others from a core for long.
pub const FLOOR: f64 = 0.1;

/// The windows the node's tenants' time is counted in.
#[derive(Debug)]
pub struct CpuShares {
    window_ns: u64,
    origin: Instant,
    windows: Mutex<Windows>,
}

/// The tenants that ran in the current window, and what the one before
/// it came to.
#[derive(Debug, Default)]
struct Windows {
    at: u64,
    /// Each tenant that ran in it: its time so far.
    ran: Vec<Arc<AtomicU64>>,
    over: usize,
    ran_before: usize,
    over_before: usize,
    used_before_ns: u64,
}

/// One tenant's CPU time in the window it is in. Charging it is two
/// loads and an add; moving it into the next window takes the node's
/// lock, once per window.
#[derive(Debug)]
pub struct TenantCpu {
    node: Arc<CpuShares>,
    /// The window its time counts in ([`NEVER`] before its first charge);
    /// moved on under the node's lock.
    window: AtomicU64,
    used_ns: Arc<AtomicU64>,
    over: AtomicBool,
}

const NEVER: u64 = u64::MAX;

/// What [`CpuShares::last_window`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CpuWindow {
    /// Tenants whose code ran in the last full window.
    pub tenants: usize,
    /// Those of them over their share in it.
    pub over_share: usize,
}

impl CpuShares {
    /// Shares counted in windows of [`WINDOW`].
    pub fn new() -> Arc<CpuShares> {
        Self::with_window(WINDOW)
    }

    pub fn with_window(window: Duration) -> Arc<CpuShares> {
        Arc::new(CpuShares {
            window_ns: (window.as_nanos() as u64).max(1),
            origin: Instant::now(),
            // Window 0 is the first: nothing ran before it.
            windows: Mutex::new(Windows::default()),
        })
    }

    /// A new tenant's account.
    pub fn account(self: &Arc<Self>) -> Arc<TenantCpu> {
        Arc::new(TenantCpu {
            node: self.clone(),
            window: AtomicU64::new(NEVER),
            used_ns: Arc::default(),
            over: AtomicBool::new(false),
        })
    }

    fn window_at(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_nanos() as u64 / self.window_ns
    }

    /// The last full window: how many tenants ran and how many were over.
    pub fn last_window(&self) -> CpuWindow {
        let mut w = self.windows.lock();
        Self::roll(&mut w, self.window_at(Instant::now()));
        CpuWindow {
            tenants: w.ran_before,
            over_share: w.over_before,
        }
    }

    /// Moves the node's count on to window `to` (never back: a thread
    /// may have read the clock before another moved it on). The tenants
    /// that ran in the window it leaves have not moved on yet (each does
    /// after this, under the same lock), so their counters still hold
    /// their time in it; a charge racing the move may land in the next
    /// window, off by one poll.
    fn roll(w: &mut Windows, to: u64) {
        if to <= w.at {
            return;
        }
        (w.ran_before, w.over_before, w.used_before_ns) = if w.at + 1 == to {
            let used = w.ran.iter().map(|u| u.load(Ordering::Relaxed)).sum();
            (w.ran.len(), w.over, used)
        } else {
            (0, 0, 0)
        };
        w.ran.clear();
        (w.at, w.over) = (to, 0);
    }
}

impl TenantCpu {
    /// Whether the tenant is over its share now.
    pub fn over_share(&self) -> bool {
        self.charge_at(Instant::now(), Duration::ZERO)
    }

    /// Charges the tenant the time since `started`, just spent running
    /// its code: that time, and whether the tenant is over its share now.
    pub fn charge_since(&self, started: Instant) -> (Duration, bool) {
        let now = Instant::now();
        let ran = now.saturating_duration_since(started);
        (ran, self.charge_at(now, ran))
    }

    /// Charges the tenant `ran` of CPU time, just used; whether it is
    /// over its share now.
    pub fn charge(&self, ran: Duration) -> bool {
        self.charge_at(Instant::now(), ran)
    }

    fn charge_at(&self, now: Instant, ran: Duration) -> bool {
        let window = self.node.window_at(now);
        // (A window behind the account's: this thread read the clock
        // before another charged the tenant in the next one.)
        let at = self.window.load(Ordering::Acquire);
        if at == NEVER || at < window {
            self.enter(window);
        }
        let ns = ran.as_nanos() as u64;
        if ns > 0 {
            self.used_ns.fetch_add(ns, Ordering::Relaxed);
        }
        self.over.load(Ordering::Relaxed)
    }

    /// Moves the tenant into `window`, judging what it used in the one
    /// before, and counts it as running in it.
    fn enter(&self, window: u64) {
        let node = &self.node;
        let mut windows = node.windows.lock();
        let at = self.window.load(Ordering::Acquire);
        if at != NEVER && at >= window {
            return; // another thread moved it meanwhile
        }
        CpuShares::roll(&mut windows, window);
        let used = self.used_ns.swap(0, Ordering::Relaxed);
        let used = if at != NEVER && at + 1 == window {
            used as f64
        } else {
            0.0
        };
        let tenants = windows.ran_before;
        let mean = windows.used_before_ns as f64 / tenants.max(1) as f64;
        let over = tenants >= 2 && used > OVER_MEAN * mean && used > FLOOR * node.window_ns as f64;
        windows.ran.push(self.used_ns.clone());
        windows.over += usize::from(over);
        self.over.store(over, Ordering::Relaxed);
        self.window.store(window, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Charges made at chosen times, in 100 ms windows.
    struct Clock {
        node: Arc<CpuShares>,
    }

    impl Clock {
        fn new() -> Clock {
            Clock {
                node: CpuShares::with_window(ms(100)),
            }
        }

        /// `n` ms after the node's start.
        fn at(&self, n: u64) -> Instant {
            self.node.origin + ms(n)
        }

        /// Charges each account its time, in window `w`; what each is.
        fn window(&self, w: u64, charges: &[(&TenantCpu, u64)]) -> Vec<bool> {
            charges
                .iter()
                .map(|(a, used)| a.charge_at(self.at(w * 100 + 1), ms(*used)))
                .collect()
        }
    }

    #[test]
    fn a_heavy_tenant_beside_a_light_one_is_over_in_the_next_window_only() {
        let c = Clock::new();
        let (heavy, light) = (c.node.account(), c.node.account());
        assert_eq!(c.window(0, &[(&heavy, 150), (&light, 5)]), [false, false]);
        // Judged on window 0: 150 against a mean of 77.5.
        assert_eq!(c.window(1, &[(&heavy, 150), (&light, 5)]), [true, false]);
        assert_eq!(c.node.windows.lock().over, 1);
        assert_eq!(c.window(2, &[(&heavy, 10), (&light, 5)]), [true, false]);
        // Window 2: 10 ms is under a tenth of a core.
        assert_eq!(c.window(3, &[(&heavy, 0)]), [false]);
        assert_eq!(
            c.node.last_window(),
            CpuWindow {
                tenants: 2,
                over_share: 1
            },
            "window 2, seen from window 3"
        );
    }

    #[test]
    fn a_tenant_alone_is_never_over() {
        let c = Clock::new();
        let alone = c.node.account();
        for w in 0..5 {
            assert_eq!(c.window(w, &[(&alone, 400)]), [false], "window {w}");
        }
    }

    #[test]
    fn equals_never_lower_each_other() {
        let c = Clock::new();
        let tenants: Vec<_> = (0..4).map(|_| c.node.account()).collect();
        // Noise around an equal split, and one tenant over 1.5x the mean.
        let used = [60, 45, 55, 40];
        let charges: Vec<_> = tenants.iter().map(|t| (&**t, 0)).collect();
        let first: Vec<_> = tenants.iter().zip(used).map(|(t, u)| (&**t, u)).collect();
        c.window(0, &first);
        assert_eq!(c.window(1, &charges), [false; 4]);
        let skewed: Vec<_> = tenants
            .iter()
            .zip([90, 30, 30, 30])
            .map(|(t, u)| (&**t, u))
            .collect();
        c.window(2, &skewed);
        assert_eq!(c.window(3, &charges), [true, false, false, false]);
    }

    #[test]
    fn time_used_before_a_gap_is_not_held_against_a_tenant() {
        let c = Clock::new();
        let (heavy, other) = (c.node.account(), c.node.account());
        c.window(0, &[(&heavy, 190), (&other, 1)]);
        // Nothing in window 1; window 2 judges window 1, where neither ran.
        assert_eq!(c.window(2, &[(&heavy, 0), (&other, 0)]), [false, false]);
        assert_eq!(c.node.windows.lock().ran_before, 0);
    }

    #[test]
    fn asking_counts_a_tenant_once_per_window() {
        let c = Clock::new();
        let a = c.node.account();
        c.window(0, &[(&a, 0), (&a, 0), (&a, 1)]);
        assert_eq!(c.node.windows.lock().ran.len(), 1);
    }
}
