//! Thread priorities: work that should give way to other work runs on a
//! thread at a higher nice value, so that the kernel runs every thread
//! with other work first and the lowered one in the time left. Nice is
//! work-conserving: a lowered thread alone on a core runs at full speed.
//!
//! On Linux a nice value belongs to a thread, not to the process. Raising
//! a thread back needs `CAP_SYS_NICE` (or an `RLIMIT_NICE` that allows
//! it): without it, lowering is one way, so callers ask
//! [`lowering_works`] first and lower nothing when it does not.

use std::cell::Cell;
use std::sync::OnceLock;

/// How much lower a thread running work that gives way is than the others.
pub const LOWER_BY: libc::c_int = 10;

/// Sets the calling thread's nice value.
pub fn set_nice(nice: libc::c_int) -> bool {
    // SAFETY: setpriority has no memory effects; `gettid` names this thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) == 0 }
}

/// The calling thread's nice value.
pub fn nice_now() -> libc::c_int {
    // SAFETY: getpriority has no memory effects. It answers -1 both for
    // an error and for nice -1; with the thread's own id it cannot fail.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

/// Whether a thread of this process may go from `base` to `low` and back,
/// tried on a thread of its own.
pub fn can_renice(base: libc::c_int, low: libc::c_int) -> bool {
    std::thread::spawn(move || set_nice(low) && set_nice(base) && nice_now() == base)
        .join()
        .unwrap_or(false)
}

/// Whether this process's threads may be lowered by [`LOWER_BY`] from
/// the nice value the process started with and raised again (tried once).
pub fn lowering_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let base = nice_now();
        let low = (base + LOWER_BY).min(19);
        low > base && can_renice(base, low)
    })
}

thread_local! {
    /// The calling thread's nice value when it was first put at a level
    /// by [`give_way`], and whether it is lowered now.
    static LEVEL: Cell<Option<(libc::c_int, bool)>> = const { Cell::new(None) };
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
            let nice = if lower {
                (base + LOWER_BY).min(19)
            } else {
                base
            };
            if !set_nice(nice) {
                return;
            }
        }
        level.set(Some((base, lower)));
    });
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
            set_nice(base + 1);
            give_way(true);
            assert_eq!(nice_now(), base + 1, "no call while the level is the same");
            give_way(false);
            assert_eq!(nice_now(), base);
        })
        .join()
        .unwrap();
    }
}
