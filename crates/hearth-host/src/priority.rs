//! Thread priorities: work that should give way to other work runs on a
//! thread at a higher nice value, so that the kernel runs every thread
//! with other work first and the lowered one in the time left. Nice is
//! work-conserving: a lowered thread alone on a core runs at full speed.
//!
//! On Linux a nice value belongs to a thread, not to the process. Raising
//! a thread back needs `CAP_SYS_NICE` (or an `RLIMIT_NICE` that allows
//! it): without it, lowering is one way, so callers ask
//! [`lowering_works`] first and lower nothing when it does not.
//!
//! An executor thread running a long slice is also
//! [marked](mark_giving_way), whether or not its nice value could change:
//! a wasm sandbox polled on it yields at every fine epoch tick (half a
//! millisecond) instead of every time slice, so that work queued behind
//! it on the same worker waits less. [`give_way`] (a JS worker's level)
//! does not mark: no sandbox is polled there, and a mark left on an idle
//! worker would keep the ticker fast for nothing.
//!
//! Nice alone does not make a waking thread run at once: the kernel's
//! EEVDF scheduler (Linux 6.6 on) lets the running thread finish its
//! slice, and a nice +10 thread's slice is as long as anyone's. So every
//! thread of the daemon (and every process it starts) asks for the
//! shortest slice the kernel gives ([`SHORT_SLICE`], Linux 6.12 on: a
//! *custom slice*), and work that gives way asks for the default one
//! again: a thread with a shorter slice preempts one with a longer slice
//! when it wakes. Under spinning calls this took another tenant's p99
//! from 1.6–3.5× its idle figure to 1.6–2.3× (`bench/RESULTS.md` §10).
//! Before 6.12 the kernel keeps no custom slice for these threads (not
//! tried here: this machine runs 6.18).

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How much lower a thread running work that gives way is than the others.
pub const LOWER_BY: libc::c_int = 10;

/// The slice a thread that does not give way asks of the kernel: the
/// shortest it gives.
pub const SHORT_SLICE: std::time::Duration = std::time::Duration::from_micros(100);

/// `struct sched_attr` as `sched_setattr(2)` takes it, in its first size
/// (`SCHED_ATTR_SIZE_VER0`). The libc crate does not have it.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// `SCHED_FLAG_KEEP_POLICY`: a policy the operator chose (batch, idle)
/// stays.
const KEEP_POLICY: u64 = 0x08;

/// Sets thread (or one-thread process) `tid`'s nice value, and the slice
/// it asks of the kernel: the default where it `gives_way`, else
/// [`SHORT_SLICE`]. Where `sched_setattr` is refused (a real-time
/// policy), only the nice value is set.
pub fn set_level(tid: libc::pid_t, nice: libc::c_int, gives_way: bool) -> bool {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        flags: KEEP_POLICY,
        nice,
        // 0 is the kernel's default slice.
        runtime: if gives_way {
            0
        } else {
            SHORT_SLICE.as_nanos() as u64
        },
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a sched_attr of the size it names, read by the
    // kernel during the call; an id that names no thread is an error.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &raw const attr, 0u32) == 0 };
    // SAFETY: setpriority has no memory effects.
    set || unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 }
}

/// [`set_level`] for the calling thread.
pub fn set_own_level(nice: libc::c_int, gives_way: bool) -> bool {
    // SAFETY: gettid has no memory effects and names this thread.
    set_level(unsafe { libc::gettid() }, nice, gives_way)
}

/// The calling thread asks for [`SHORT_SLICE`] at its nice value; threads
/// and processes it starts inherit that. The daemon calls it first.
pub fn ask_for_short_slices() -> bool {
    set_own_level(nice_now(), false)
}

/// The calling thread's nice value.
pub fn nice_now() -> libc::c_int {
    // SAFETY: getpriority has no memory effects. It answers -1 both for
    // an error and for nice -1; with the thread's own id it cannot fail.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

/// The nice value [`LOWER_BY`] below `base`, as far as nice goes.
pub fn lowered(base: libc::c_int) -> libc::c_int {
    (base + LOWER_BY).min(19)
}

/// Whether a thread of this process may go from `base` to `low` and back,
/// tried on a thread of its own.
fn can_renice(base: libc::c_int, low: libc::c_int) -> bool {
    std::thread::spawn(move || {
        set_own_level(low, true) && set_own_level(base, false) && nice_now() == base
    })
    .join()
    .unwrap_or(false)
}

/// The nice value of the thread that first asked, and whether threads
/// may go [`LOWER_BY`] below it and back (tried once).
fn base_and_works() -> (libc::c_int, bool) {
    static BASE: OnceLock<(libc::c_int, bool)> = OnceLock::new();
    *BASE.get_or_init(|| {
        let base = nice_now();
        let low = lowered(base);
        (base, low > base && can_renice(base, low))
    })
}

/// The process's nice value and the lowered one, when threads may go
/// from one to the other and back; `None` where they may not.
pub fn levels() -> Option<(libc::c_int, libc::c_int)> {
    let (base, works) = base_and_works();
    works.then(|| (base, lowered(base)))
}

/// Whether this process's threads may be lowered by [`LOWER_BY`] from
/// the nice value the process started with and raised again (tried once).
pub fn lowering_works() -> bool {
    base_and_works().1
}

/// Puts process `pid` (a sandbox's, one thread) [`LOWER_BY`] below this
/// process's nice value with the default slice (`lower`), or at it with
/// the short one. Whether it was done: nothing
/// is done where lowering does not [work](lowering_works).
pub fn give_way_process(pid: libc::pid_t, lower: bool) -> bool {
    let Some((base, low)) = levels().filter(|_| pid > 0) else {
        return false;
    };
    set_level(pid, if lower { low } else { base }, lower)
}

/// CPU time process `pid`'s main thread has used, from
/// `/proc/PID/schedstat` (nanoseconds); `None` once it is gone.
pub fn process_cpu(pid: libc::pid_t) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let ns = stat.split_whitespace().next()?.parse().ok()?;
    Some(std::time::Duration::from_nanos(ns))
}

thread_local! {
    /// The calling thread's nice value when it was first put at a level
    /// by [`give_way`], and whether it is lowered now.
    static LEVEL: Cell<Option<(libc::c_int, bool)>> = const { Cell::new(None) };
    /// The calling thread runs work that gives way now.
    static GIVES_WAY: Cell<bool> = const { Cell::new(false) };
}

/// Threads of this process running work that gives way now.
static GIVING_WAY: AtomicUsize = AtomicUsize::new(0);

/// Marks the calling thread as running work that gives way, or as no
/// longer running it, whether or not its nice value can change. Wasm
/// sandboxes polled on a marked thread yield at every epoch tick, and
/// the ticker ticks finer while any thread is marked.
pub fn mark_giving_way(gives: bool) {
    GIVES_WAY.with(|marked| {
        if marked.replace(gives) != gives {
            if gives {
                GIVING_WAY.fetch_add(1, Ordering::Relaxed);
            } else {
                GIVING_WAY.fetch_sub(1, Ordering::Relaxed);
            }
        }
    });
}

/// Whether the calling thread runs work that gives way now.
pub fn gives_way() -> bool {
    GIVES_WAY.with(Cell::get)
}

/// Whether any thread of this process runs work that gives way now.
pub fn any_gives_way() -> bool {
    GIVING_WAY.load(Ordering::Relaxed) > 0
}

/// Puts the calling thread [`LOWER_BY`] below the nice value it had at
/// its first call here (`lower`), or back at that value; a system call
/// only when the level changes. Nothing happens where lowering does not
/// [work](lowering_works).
pub fn give_way(lower: bool) {
    if !lowering_works() {
        return;
    }
    LEVEL.with(|level| {
        let (base, lowered) = level.get().unwrap_or((nice_now(), false));
        if lowered != lower {
            let nice = if lower { self::lowered(base) } else { base };
            if !set_own_level(nice, lower) {
                return;
            }
        }
        level.set(Some((base, lower)));
    });
}

/// The calling thread [giving way](give_way) until dropped (also when
/// its work panics): for work a pool thread does that should run after
/// invocations, as a deploy's does.
pub struct GivingWay(());

impl GivingWay {
    pub fn new() -> GivingWay {
        give_way(true);
        GivingWay(())
    }
}

impl Default for GivingWay {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for GivingWay {
    fn drop(&mut self) {
        give_way(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_gives_way_and_comes_back_with_a_call_only_at_each_change() {
        std::thread::spawn(|| {
            let base = nice_now();
            if !lowering_works() {
                give_way(true);
                assert_eq!(
                    nice_now(),
                    base,
                    "nothing is lowered without the right to raise"
                );
                return;
            }
            give_way(true);
            assert_eq!(nice_now(), (base + LOWER_BY).min(19));
            give_way(true);
            assert_eq!(nice_now(), (base + LOWER_BY).min(19));
            // Set behind its back: only a change of level makes a call.
            // SAFETY: setpriority has no memory effects.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, base + 1)
            };
            give_way(true);
            assert_eq!(nice_now(), base + 1, "no call while the level is the same");
            give_way(false);
            assert_eq!(nice_now(), base);
        })
        .join()
        .unwrap();
    }

    /// The slice thread or process `tid` asks for, as the kernel's debug
    /// file shows it; `None` where the kernel does not show it.
    fn slice_of(tid: libc::pid_t) -> Option<u64> {
        let sched = std::fs::read_to_string(format!("/proc/{tid}/sched")).ok()?;
        let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
        line.rsplit(':').next()?.trim().parse().ok()
    }

    /// Whether this kernel takes a custom slice (Linux 6.12 on).
    fn custom_slices() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap(), parts.next().unwrap());
        (major, minor) >= (6, 12)
    }

    #[test]
    fn a_thread_asks_for_a_short_slice_unless_it_gives_way() {
        std::thread::spawn(|| {
            // SAFETY: gettid has no memory effects.
            let tid = unsafe { libc::gettid() };
            let base = nice_now();
            assert!(
                ask_for_short_slices(),
                "its own nice value is always allowed"
            );
            assert_eq!(nice_now(), base);
            let short = slice_of(tid);
            if custom_slices() {
                let short = short.expect("a 6.12 kernel shows se.slice");
                assert_eq!(short, SHORT_SLICE.as_nanos() as u64);
                // Nice +19 is allowed without privilege.
                assert!(set_own_level(19, true));
                assert_eq!(nice_now(), 19);
                let default = slice_of(tid).unwrap();
                assert!(default > short, "the default slice {default} is longer");
                // A thread it starts inherits its slice.
                assert!(ask_for_short_slices());
                let child = std::thread::spawn(|| {
                    // SAFETY: gettid has no memory effects.
                    slice_of(unsafe { libc::gettid() })
                });
                assert_eq!(child.join().unwrap(), Some(short));
            } else {
                // Older kernels take the call and set the nice value.
                assert!(set_own_level(19, true));
                assert_eq!(nice_now(), 19);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn work_that_gives_way_is_lowered_until_it_ends_even_by_panicking() {
        std::thread::spawn(|| {
            let base = nice_now();
            let lowered = if lowering_works() {
                (base + LOWER_BY).min(19)
            } else {
                base
            };
            {
                let _way = GivingWay::new();
                assert_eq!(nice_now(), lowered);
            }
            assert_eq!(nice_now(), base, "raised when the work ended");
            let panicked = std::panic::catch_unwind(|| {
                let _way = GivingWay::new();
                panic!("the work failed");
            });
            assert!(panicked.is_err());
            assert_eq!(nice_now(), base, "raised when the work panicked");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_marked_thread_is_counted_once_and_a_js_workers_level_is_no_mark() {
        std::thread::spawn(|| {
            assert!(!gives_way());
            mark_giving_way(true);
            mark_giving_way(true);
            assert!(gives_way());
            assert!(any_gives_way());
            mark_giving_way(false);
            assert!(!gives_way());
            // Unmarked once however often: unmarking an unmarked thread
            // would otherwise wrap the count to "some thread gives way".
            mark_giving_way(false);
            assert!(GIVING_WAY.load(Ordering::Relaxed) < usize::MAX / 2);
            // A JS worker's level is not a mark.
            give_way(true);
            assert!(!gives_way());
            give_way(false);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_child_process_gives_way_and_its_cpu_time_is_read() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 5",
            ])
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let nice_of = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let rest = stat.rsplit_once(") ").unwrap().1;
            rest.split(' ').nth(16).unwrap().parse::<i64>().unwrap()
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        let used = process_cpu(pid).expect("a live process has a schedstat");
        assert!(used > std::time::Duration::ZERO, "its loop took CPU");
        if lowering_works() {
            let base = i64::from(base_and_works().0);
            assert!(give_way_process(pid, true));
            assert_eq!(nice_of(), (base + 10).min(19));
            let lowered = slice_of(pid);
            assert!(give_way_process(pid, false));
            assert_eq!(nice_of(), base);
            if custom_slices() {
                assert_eq!(slice_of(pid), Some(SHORT_SLICE.as_nanos() as u64));
                assert!(lowered.unwrap() > SHORT_SLICE.as_nanos() as u64);
            }
        } else {
            assert!(
                !give_way_process(pid, true),
                "nothing is lowered without the right to raise"
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(process_cpu(pid), None, "gone");
    }
}
