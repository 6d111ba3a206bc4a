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

    #[test]
    fn the_writer_is_idle_class_until_raised_and_lowers_itself_again() {
        // SAFETY: sched_getscheduler reads a thread's policy; any tid is
        // safe to ask about (an unknown one is an error return).
        let policy = |tid: i32| unsafe { libc::sched_getscheduler(tid) };
        let p = Arc::new(WriterPriority::new(Durability::Batched));
        let (tx, rx) = mpsc::channel::<()>();
        let (back, here) = mpsc::channel();
        let writer = {
            let p = p.clone();
            std::thread::spawn(move || {
                p.lower();
                back.send(()).unwrap();
                rx.recv().unwrap(); // raised by another thread
                p.lower();
                back.send(()).unwrap();
                rx.recv().unwrap();
            })
        };
        here.recv().unwrap();
        let tid = p.tid.load(Ordering::Relaxed);
        if !p.idle_class {
            // Not root: nice 10, as in sync durability; raising is a no-op.
            p.raise();
            assert!(!p.raised.load(Ordering::Relaxed));
        } else {
            assert_eq!(policy(tid), libc::SCHED_IDLE);
            p.raise();
            assert_eq!(policy(tid), libc::SCHED_OTHER);
            assert!(p.raised.load(Ordering::Relaxed));
            p.raise(); // already raised: nothing to do
        }
        tx.send(()).unwrap();
        here.recv().unwrap();
        if p.idle_class {
            assert_eq!(policy(tid), libc::SCHED_IDLE);
            assert!(!p.raised.load(Ordering::Relaxed));
        }
        tx.send(()).unwrap();
        writer.join().unwrap();
        assert!(!WriterPriority::new(Durability::Sync).idle_class);
    }
}
