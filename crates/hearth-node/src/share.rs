//! What running invocations hold of a node, admitted against the sum
//! before any of them runs: each tenant's share of its concurrency (one
//! tenant's burst, or its functions spinning until their deadlines, cannot
//! take every slot the node has), and the memory they may reach, per
//! tenant and for the node (concurrent invocations each within their own
//! limit cannot add up past the machine and get the daemon OOM-killed);
//! and each tenant's CPU account ([`hearth_host::cpu`]), which its
//! invocations carry.

use hearth_host::cpu::{CpuShares, TenantCpu};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Memory running invocations may reach, in bytes: the node's and each
/// tenant's.
#[derive(Debug, Clone, Copy)]
pub struct MemoryBudget {
    pub node_bytes: u64,
    pub tenant_bytes: u64,
}

/// Invocations running now and the memory they reserved, per tenant and
/// for the node.
pub(crate) struct TenantShares {
    max: usize,
    memory: MemoryBudget,
    node_memory: Arc<AtomicU64>,
    cpu: Arc<CpuShares>,
    /// Only tenants with a function that resolved get an entry: as many as
    /// the node has tenants.
    running: RwLock<HashMap<Box<str>, Arc<TenantUse>>>,
}

struct TenantUse {
    running: AtomicUsize,
    memory: AtomicU64,
    cpu: Arc<TenantCpu>,
}

/// One running invocation of a tenant and the memory it reserved; given
/// back when dropped.
pub(crate) struct Share {
    tenant: Arc<TenantUse>,
    node_memory: Arc<AtomicU64>,
    bytes: u64,
}

impl Share {
    /// The tenant's CPU account.
    pub fn cpu(&self) -> Arc<TenantCpu> {
        self.tenant.cpu.clone()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.tenant.running.fetch_sub(1, Ordering::AcqRel);
        self.tenant.memory.fetch_sub(self.bytes, Ordering::AcqRel);
        self.node_memory.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Why an invocation was not let in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The tenant has its share of invocations running.
    Busy,
    /// The tenant's running invocations hold its share of memory.
    TenantMemory,
    /// The node's running invocations hold all the memory it offers.
    NodeMemory,
}

/// Adds `bytes` to `counter` unless that takes it past `max`.
fn reserve(counter: &AtomicU64, bytes: u64, max: u64) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(bytes).filter(|&u| u <= max)
        })
        .is_ok()
}

impl TenantShares {
    pub fn new(max: usize, memory: MemoryBudget, cpu: Arc<CpuShares>) -> Self {
        TenantShares {
            max: max.max(1),
            memory,
            node_memory: Arc::default(),
            cpu,
            running: RwLock::default(),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn memory(&self) -> MemoryBudget {
        self.memory
    }

    /// A slot for one more of `tenant`'s invocations, reserving `bytes` of
    /// memory, unless the tenant has `max` running or the memory is not
    /// there (the tenant's, then the node's). A refusal takes nothing.
    pub fn take(&self, tenant: &str, bytes: u64) -> Result<Share, Refused> {
        let counter = self.counter(tenant);
        if counter.running.fetch_add(1, Ordering::AcqRel) >= self.max {
            counter.running.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Busy);
        }
        if !reserve(&counter.memory, bytes, self.memory.tenant_bytes) {
            counter.running.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::TenantMemory);
        }
        if !reserve(&self.node_memory, bytes, self.memory.node_bytes) {
            counter.running.fetch_sub(1, Ordering::AcqRel);
            counter.memory.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Refused::NodeMemory);
        }
        Ok(Share {
            tenant: counter,
            node_memory: self.node_memory.clone(),
            bytes,
        })
    }

    /// Whether [`take`](Self::take) would let one more of `tenant`'s
    /// invocations in now, reserving nothing: asked before a version is
    /// prepared, so that a node or tenant at its limit refuses before it
    /// installs or compiles anything. Another call may take the room in
    /// between; `take` is still the admission.
    pub fn would_take(&self, tenant: &str, bytes: u64) -> Result<(), Refused> {
        let (running, memory) = self.running.read().get(tenant).map_or((0, 0), |c| {
            (
                c.running.load(Ordering::Acquire),
                c.memory.load(Ordering::Acquire),
            )
        });
        let fits = |used: u64, max: u64| used.checked_add(bytes).is_some_and(|u| u <= max);
        if running >= self.max {
            Err(Refused::Busy)
        } else if !fits(memory, self.memory.tenant_bytes) {
            Err(Refused::TenantMemory)
        } else if !fits(self.node_memory(), self.memory.node_bytes) {
            Err(Refused::NodeMemory)
        } else {
            Ok(())
        }
    }

    /// `tenant`'s invocations running now.
    pub fn running(&self, tenant: &str) -> usize {
        let map = self.running.read();
        map.get(tenant)
            .map_or(0, |c| c.running.load(Ordering::Acquire))
    }

    /// Memory reserved now by `tenant`'s invocations, in bytes.
    pub fn tenant_memory(&self, tenant: &str) -> u64 {
        let map = self.running.read();
        map.get(tenant)
            .map_or(0, |c| c.memory.load(Ordering::Acquire))
    }

    /// Memory reserved now by every running invocation, in bytes.
    pub fn node_memory(&self) -> u64 {
        self.node_memory.load(Ordering::Acquire)
    }

    /// What [`node_memory`](Self::node_memory) reads, to read it elsewhere.
    pub fn node_memory_counter(&self) -> Arc<AtomicU64> {
        self.node_memory.clone()
    }

    /// What the node's tenants did with its CPU in the last window.
    pub fn cpu_window(&self) -> hearth_host::cpu::CpuWindow {
        self.cpu.last_window()
    }

    fn counter(&self, tenant: &str) -> Arc<TenantUse> {
        if let Some(c) = self.running.read().get(tenant) {
            return c.clone();
        }
        let mut map = self.running.write();
        map.entry(tenant.into())
            .or_insert_with(|| {
                Arc::new(TenantUse {
                    running: AtomicUsize::new(0),
                    memory: AtomicU64::new(0),
                    cpu: self.cpu.account(),
                })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: MemoryBudget = MemoryBudget {
        node_bytes: u64::MAX,
        tenant_bytes: u64::MAX,
    };

    #[test]
    fn a_tenant_gets_its_share_and_no_more_and_others_keep_theirs() {
        let shares = TenantShares::new(2, ROOMY, CpuShares::new());
        let a: Vec<_> = (0..2).map(|_| shares.take("a", 1).unwrap()).collect();
        assert_eq!(shares.take("a", 1).err(), Some(Refused::Busy));
        assert_eq!(shares.running("a"), 2, "the refusal took nothing");
        let b = shares.take("b", 1).expect("b has its own share");
        drop(a);
        assert_eq!(shares.running("a"), 0);
        assert!(shares.take("a", 1).is_ok());
        drop(b);
        assert_eq!(shares.running("b"), 0);
    }

    #[test]
    fn would_take_answers_as_take_would_and_reserves_nothing() {
        let shares = TenantShares::new(
            3,
            MemoryBudget {
                node_bytes: 100,
                tenant_bytes: 60,
            },
            CpuShares::new(),
        );
        let mut held = Vec::new();
        // Every tenant and size against every state the takes leave.
        for (tenant, bytes) in [
            ("a", 40),
            ("a", 30),
            ("b", 50),
            ("a", 1),
            ("c", 20),
            ("a", 1),
        ] {
            for (t, b) in [
                ("a", 1),
                ("a", 21),
                ("b", 11),
                ("c", 10),
                ("c", 61),
                ("d", 0),
            ] {
                let before = (
                    shares.running(t),
                    shares.tenant_memory(t),
                    shares.node_memory(),
                );
                let would = shares.would_take(t, b);
                let after = (
                    shares.running(t),
                    shares.tenant_memory(t),
                    shares.node_memory(),
                );
                assert_eq!(before, after, "asking reserved nothing");
                assert_eq!(would, shares.take(t, b).map(drop), "{t} {b}");
            }
            if let Ok(share) = shares.take(tenant, bytes) {
                held.push(share);
            }
        }
        assert_eq!(shares.would_take("a", 0), Err(Refused::Busy), "a holds 3");
        drop(held);
        assert_eq!(shares.would_take("a", 60), Ok(()));
    }

    #[test]
    fn memory_is_reserved_against_the_tenants_share_then_the_nodes() {
        let shares = TenantShares::new(
            100,
            MemoryBudget {
                node_bytes: 100,
                tenant_bytes: 60,
            },
            CpuShares::new(),
        );
        let a = shares.take("a", 40).unwrap();
        assert_eq!(shares.take("a", 30).err(), Some(Refused::TenantMemory));
        let b = shares.take("b", 50).unwrap();
        assert_eq!(shares.take("c", 20).err(), Some(Refused::NodeMemory));
        assert_eq!(
            (shares.running("a"), shares.running("c")),
            (1, 0),
            "refusals took no slot"
        );
        assert_eq!(
            (
                shares.tenant_memory("a"),
                shares.tenant_memory("c"),
                shares.node_memory()
            ),
            (40, 0, 90),
            "refusals took no memory"
        );
        let c = shares.take("c", 10).expect("what is left fits");
        drop((a, b, c));
        assert_eq!(shares.node_memory(), 0);
        assert_eq!(shares.tenant_memory("a"), 0);
    }

    #[test]
    fn concurrent_reservations_never_pass_the_budget() {
        let shares = Arc::new(TenantShares::new(
            usize::MAX,
            MemoryBudget {
                node_bytes: 1000,
                tenant_bytes: 1000,
            },
            CpuShares::new(),
        ));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let shares = shares.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for _ in 0..2000 {
                        if let Ok(s) = shares.take(&format!("t{}", i % 3), 7) {
                            assert!(shares.node_memory() <= 1000);
                            held.push(s);
                        }
                        if held.len() > 10 {
                            held.clear();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(shares.node_memory(), 0);
    }
}
