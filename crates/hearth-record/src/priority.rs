//! The recorder's writer thread and the CPU: it should take none an
//! invocation wants, and never fall so far behind that tapes are dropped.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::writer::Durability;

/// The writer's CPU priority. In `batched` durability it is `SCHED_IDLE`:
/// it runs on CPU nothing else wants, so writing a flush's tapes never
/// preempts an invocation (at nice 10 a waking writer still did, and
/// `hello`'s p99 rose by tens of percent: `bench/RESULTS.md` §6). When
/// tapes pile up because no CPU is idle, the thread that hands one over
/// raises the writer to normal priority; the writer lowers itself again
/// once the queue is nearly empty. In `sync` durability callers wait for
/// the writer, so it stays at nice 10 and is never idle-class; nor is it
/// when the daemon is not root, since an unprivileged thread may not be
/// raised out of `SCHED_IDLE` again (RLIMIT_NICE).
pub(crate) struct WriterPriority {
    pub idle_class: bool,
    /// The writer thread's id, once it runs.
    pub tid: AtomicI32,
    pub raised: AtomicBool,
}

impl WriterPriority {
    pub fn new(durability: Durability) -> Self {
        WriterPriority {
            // SAFETY: geteuid has no preconditions.
            idle_class: durability == Durability::Batched && unsafe { libc::geteuid() } == 0,
            tid: AtomicI32::new(0),
            raised: AtomicBool::new(false),
        }
    }

    /// On the writer thread: take the low priority.
    pub fn lower(&self) {
        // SAFETY: gettid has no preconditions.
        self.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
        self.raised.store(false, Ordering::Relaxed);
        // SAFETY: on this thread's own id (0); no memory is touched.
        let rc = unsafe {
            if self.idle_class {
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param)
            } else {
                libc::setpriority(libc::PRIO_PROCESS, 0, 10)
            }
        };
        if rc != 0 {
            tracing::debug!("could not lower the recorder thread's priority");
        }
    }

    /// On any thread: the writer must catch up. Cheap when already raised.
    pub fn raise(&self) {
        let tid = self.tid.load(Ordering::Relaxed);
        if !self.idle_class || tid == 0 || self.raised.swap(true, Ordering::Relaxed) {
            return;
        }
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: changes the writer thread's policy by its id; no memory
        // is touched. If the thread is gone, the call fails harmlessly.
        let rc = unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
        if rc == 0 {
            tracing::debug!("recorder behind: writer raised to normal priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc;

    use super::*;

    /// The writer thread's scheduling policy and nice value.
    fn sched_of(tid: i32) -> (i32, i32) {
        // SAFETY: both read a thread's scheduling by its id; an unknown id
        // is an error return, not undefined behaviour.
        unsafe {
            (
                libc::sched_getscheduler(tid),
                libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t),
            )
        }
    }

    /// A check run on the test's thread, given the writer's thread id.
    type Step<'a> = &'a dyn Fn(&WriterPriority, i32);

    /// Runs a writer thread under `p`: it lowers itself, and after each
    /// step of `steps` (called on this thread with the writer's id) lowers
    /// itself again.
    fn with_writer(p: Arc<WriterPriority>, steps: &[Step<'_>]) {
        let (tx, rx) = mpsc::channel::<()>();
        let (back, here) = mpsc::channel();
        let writer = {
            let p = p.clone();
            let n = steps.len();
            std::thread::spawn(move || {
                p.lower();
                back.send(()).unwrap();
                for _ in 0..n {
                    rx.recv().unwrap(); // a step ran on another thread
                    p.lower();
                    back.send(()).unwrap();
                }
            })
        };
        here.recv().unwrap();
        let tid = p.tid.load(Ordering::Relaxed);
        for step in steps {
            step(&p, tid);
            tx.send(()).unwrap();
            here.recv().unwrap();
        }
        writer.join().unwrap();
    }

    /// Batched durability: as root the writer is idle-class, raised to
    /// normal by a handover and lowered again by itself; not as root it
    /// runs at nice 10 and a raise leaves it there.
    #[test]
    fn a_batched_writer_is_idle_class_until_raised_and_lowers_itself_again() {
        let p = Arc::new(WriterPriority::new(Durability::Batched));
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert_eq!(p.idle_class, root);
        with_writer(
            p,
            &[
                &|p, tid| {
                    if p.idle_class {
                        assert_eq!(sched_of(tid).0, libc::SCHED_IDLE);
                        p.raise();
                        assert_eq!(sched_of(tid).0, libc::SCHED_OTHER);
                        assert!(p.raised.load(Ordering::Relaxed));
                        p.raise(); // already raised: nothing to do
                    } else {
                        assert_eq!(sched_of(tid), (libc::SCHED_OTHER, 10));
                        p.raise();
                        assert_eq!(sched_of(tid), (libc::SCHED_OTHER, 10));
                        assert!(!p.raised.load(Ordering::Relaxed));
                    }
                },
                &|p, tid| {
                    let lowered = if p.idle_class {
                        libc::SCHED_IDLE
                    } else {
                        libc::SCHED_OTHER
                    };
                    assert_eq!(sched_of(tid).0, lowered);
                    assert!(!p.raised.load(Ordering::Relaxed));
                },
            ],
        );
    }

    /// Sync durability, root or not: callers wait for the writer, so it
    /// is never idle-class; it runs at nice 10 and is never raised.
    #[test]
    fn a_sync_writer_runs_at_nice_10_and_is_never_raised() {
        let p = Arc::new(WriterPriority::new(Durability::Sync));
        assert!(!p.idle_class);
        with_writer(
            p,
            &[&|p, tid| {
                assert_eq!(sched_of(tid), (libc::SCHED_OTHER, 10));
                p.raise();
                assert_eq!(sched_of(tid), (libc::SCHED_OTHER, 10));
                assert!(!p.raised.load(Ordering::Relaxed));
            }],
        );
    }
}
