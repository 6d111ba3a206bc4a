//! Handlers and the handler cache (SOCK's paused containers).
//!
//! A handler is one sandboxed process serving one function version (or, for
//! a generic Node.js process, none yet). Between invocations it is paused
//! and kept in the [`HandlerCache`], least recently used first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::net::UnixStream;

use crate::cgroup::Cgroup;
use crate::container::Root;
use crate::zygote::Zygote;

/// One live sandbox, counted against `max_sandboxes` until dropped.
pub(crate) struct LiveGuard(Arc<AtomicU64>);

impl LiveGuard {
    pub(crate) fn new(count: &Arc<AtomicU64>) -> LiveGuard {
        count.fetch_add(1, Ordering::Relaxed);
        LiveGuard(count.clone())
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One sandboxed process and what it holds.
pub(crate) struct Handler {
    /// The version it serves; `None` for a generic Node process.
    pub(crate) key: Option<String>,
    pub(crate) pid: i32,
    pub(crate) conn: Option<UnixStream>,
    pub(crate) cgroup: Option<Cgroup>,
    pub(crate) root: Option<Root>,
    pub(crate) memory: u64,
    pub(crate) idle_since: Instant,
    /// Packages installed for this handler alone (install cache off);
    /// removed with it.
    pub(crate) private_packages: Option<std::path::PathBuf>,
    /// Its egress proxy, for a function with allowed hosts; stops when
    /// the handler goes.
    pub(crate) egress: Option<crate::egress::Relay>,
    /// The package zygote it was forked from: if that ended, so did it.
    pub(crate) zygote: Option<Weak<Zygote>>,
    /// The CPU time its process had used when its tenant was last charged.
    pub(crate) cpu_charged: Duration,
    /// Its process runs lowered: its tenant was over its CPU share.
    pub(crate) lowered: bool,
    /// Held for its `Drop`: the sandbox counts as live while this exists.
    pub(crate) _live: LiveGuard,
}

impl Handler {
    pub(crate) fn conn(&mut self) -> &mut UnixStream {
        self.conn.as_mut().expect("a live handler has a connection")
    }

    /// Puts its process at low priority while its tenant is over its CPU
    /// share ([`hearth_host::cpu`]), at the node's otherwise; a system
    /// call only when that changes.
    pub(crate) fn give_way(&mut self, lower: bool) {
        if lower != self.lowered && hearth_host::priority::give_way_process(self.pid, lower) {
            self.lowered = lower;
        }
    }

    /// The CPU time its process used since the last call (its main
    /// thread's: a function's own threads are not counted).
    pub(crate) fn cpu_since_charged(&mut self) -> Duration {
        let now = hearth_host::priority::process_cpu(self.pid).unwrap_or(self.cpu_charged);
        let used = now.saturating_sub(self.cpu_charged);
        self.cpu_charged = now;
        used
    }

    pub(crate) fn oom_killed(&self) -> bool {
        self.cgroup.as_ref().is_some_and(Cgroup::oom_killed)
    }

    /// Pauses the handler where it stands (SOCK's paused containers).
    pub(crate) fn pause(&self) {
        match &self.cgroup {
            Some(cg) if cg.freeze().is_ok() => {}
            // SAFETY: kill(2) has no memory-safety preconditions.
            _ => unsafe {
                libc::kill(self.pid, libc::SIGSTOP);
            },
        }
    }

    pub(crate) fn resume(&self) {
        match &self.cgroup {
            Some(cg) if cg.thaw().is_ok() => {}
            // SAFETY: as above.
            _ => unsafe {
                libc::kill(self.pid, libc::SIGCONT);
            },
        }
    }
}

/// Paused handlers, least recently used first.
#[derive(Default)]
pub(crate) struct HandlerCache {
    pub(crate) idle: VecDeque<Handler>,
}

impl HandlerCache {
    pub(crate) fn take(&mut self, key: &str) -> Option<Handler> {
        let i = self
            .idle
            .iter()
            .rposition(|h| h.key.as_deref() == Some(key))?;
        self.idle.remove(i)
    }

    /// Adds a paused handler; returns those that must go to respect `budget`.
    pub(crate) fn put(&mut self, h: Handler, budget: u64) -> Vec<Handler> {
        self.idle.push_back(h);
        let mut out = Vec::new();
        let mut total: u64 = self.idle.iter().map(|h| h.memory).sum();
        while total > budget && self.idle.len() > 1 {
            let Some(old) = self.idle.pop_front() else {
                break;
            };
            total -= old.memory;
            out.push(old);
        }
        out
    }

    pub(crate) fn expired(&mut self, keep_alive: Duration) -> Vec<Handler> {
        let mut out = Vec::new();
        while let Some(h) = self
            .idle
            .pop_front_if(|h| h.idle_since.elapsed() > keep_alive)
        {
            out.push(h);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(key: &str, memory: u64, live: &Arc<AtomicU64>) -> Handler {
        Handler {
            key: Some(key.into()),
            pid: 0,
            conn: None,
            cgroup: None,
            root: None,
            memory,
            idle_since: Instant::now(),
            private_packages: None,
            egress: None,
            zygote: None,
            cpu_charged: Duration::ZERO,
            lowered: false,
            _live: LiveGuard::new(live),
        }
    }

    #[test]
    fn the_cache_hands_back_by_version_and_evicts_the_oldest_over_budget() {
        let live = Arc::new(AtomicU64::new(0));
        let mut cache = HandlerCache::default();
        assert!(cache.put(handler("a", 40, &live), 100).is_empty());
        assert!(cache.put(handler("b", 40, &live), 100).is_empty());
        let evicted = cache.put(handler("c", 40, &live), 100);
        assert_eq!(
            evicted.iter().map(|h| h.key.as_deref()).collect::<Vec<_>>(),
            [Some("a")]
        );
        drop(evicted);
        assert_eq!(
            live.load(Ordering::Relaxed),
            2,
            "dropping a handler frees its slot"
        );
        assert!(cache.take("a").is_none());
        assert_eq!(cache.take("c").unwrap().key.as_deref(), Some("c"));
        assert_eq!(
            cache.expired(Duration::ZERO).len(),
            1,
            "b is past a zero keep-alive"
        );
        assert!(cache.idle.is_empty());
    }
}
