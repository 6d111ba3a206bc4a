//! Each tenant's share of a node's concurrency: one tenant's burst (or its
//! functions spinning until their deadlines) cannot take every slot the
//! node has, so another tenant's invocations still find room.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Invocations running now, per tenant, each at most `max`.
pub(crate) struct TenantShares {
    max: usize,
    /// Only tenants with a function that resolved get an entry: as many as
    /// the node has tenants.
    running: RwLock<HashMap<Box<str>, Arc<AtomicUsize>>>,
}

/// One running invocation of a tenant; counted until dropped.
pub(crate) struct Share(Arc<AtomicUsize>);

impl Drop for Share {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl TenantShares {
    pub fn new(max: usize) -> Self {
        TenantShares {
            max: max.max(1),
            running: RwLock::default(),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot for one more of `tenant`'s invocations, unless it has `max`
    /// running.
    pub fn take(&self, tenant: &str) -> Option<Share> {
        let counter = self.counter(tenant);
        if counter.fetch_add(1, Ordering::AcqRel) >= self.max {
            counter.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Share(counter))
    }

    /// `tenant`'s invocations running now.
    pub fn running(&self, tenant: &str) -> usize {
        let map = self.running.read();
        map.get(tenant).map_or(0, |c| c.load(Ordering::Acquire))
    }

    fn counter(&self, tenant: &str) -> Arc<AtomicUsize> {
        if let Some(c) = self.running.read().get(tenant) {
            return c.clone();
        }
        let mut map = self.running.write();
        map.entry(tenant.into()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_gets_its_share_and_no_more_and_others_keep_theirs() {
        let shares = TenantShares::new(2);
        let a: Vec<_> = (0..2).map(|_| shares.take("a").unwrap()).collect();
        assert!(shares.take("a").is_none(), "a third for a");
        assert_eq!(shares.running("a"), 2, "the refusal took nothing");
        let b = shares.take("b").expect("b has its own share");
        drop(a);
        assert_eq!(shares.running("a"), 0);
        assert!(shares.take("a").is_some());
        drop(b);
        assert_eq!(shares.running("b"), 0);
    }
}
