//! Outbound connections functions hold open, bounded per invocation, per
//! tenant and for the node. Each `fetch` in flight holds a socket (a file
//! descriptor) until it ends; the per-invocation call count alone let 330
//! concurrent invocations of one tenant, each with its 64 fetches to a
//! slow host, take the daemon to 17,941 of its 20,000 descriptors, and
//! every other tenant's calls and deploys failed with "Too many open
//! files". A fetch past a bound is refused before it opens anything
//! ([`HostError::Congested`]); it is not taped (it never left).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::HostError;

/// Fetches one invocation may have in flight at once.
pub const PER_INVOCATION: u32 = 16;

/// The node's and each tenant's outbound connections in flight.
pub struct Outbound {
    node: Arc<Semaphore>,
    node_max: usize,
    per_tenant: usize,
    /// One entry per tenant that has fetched: as many as the node has
    /// tenants.
    tenants: Mutex<HashMap<Box<str>, Arc<Semaphore>>>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("in_use", &self.in_use())
            .field("node_max", &self.node_max)
            .field("per_tenant", &self.per_tenant)
            .finish()
    }
}

/// One outbound connection in flight, counted until dropped.
pub struct Held {
    _tenant: OwnedSemaphorePermit,
    _node: OwnedSemaphorePermit,
}

impl Outbound {
    pub fn new(node_max: usize, per_tenant: usize) -> Outbound {
        let node_max = node_max.max(1);
        Outbound {
            node: Arc::new(Semaphore::new(node_max)),
            node_max,
            per_tenant: per_tenant.clamp(1, node_max),
            tenants: Mutex::default(),
        }
    }

    /// A connection for one of `tenant`'s fetches, unless the tenant or
    /// the node has as many in flight as it may.
    pub fn try_hold(&self, tenant: &str) -> Result<Held, HostError> {
        let share = {
            let mut map = self.tenants.lock();
            match map.get(tenant) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(Semaphore::new(self.per_tenant));
                    map.insert(tenant.into(), s.clone());
                    s
                }
            }
        };
        let tenant_permit = share.try_acquire_owned().map_err(|_| {
            HostError::Congested(format!(
                "this tenant has {} outbound connections open on this node, its share \
                 (--max-outbound-connections-per-tenant)",
                self.per_tenant
            ))
        })?;
        let node_permit = self.node.clone().try_acquire_owned().map_err(|_| {
            HostError::Congested(format!(
                "this node has {} outbound connections open, all it allows \
                 (--max-outbound-connections)",
                self.node_max
            ))
        })?;
        Ok(Held {
            _tenant: tenant_permit,
            _node: node_permit,
        })
    }

    /// Outbound connections in flight now, over every tenant.
    pub fn in_use(&self) -> usize {
        self.node_max - self.node.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_holds_its_share_and_the_node_its_sum() {
        let out = Outbound::new(5, 3);
        let a: Vec<_> = (0..3).map(|_| out.try_hold("a").unwrap()).collect();
        assert!(matches!(out.try_hold("a"), Err(HostError::Congested(_))));
        let b: Vec<_> = (0..2).map(|_| out.try_hold("b").unwrap()).collect();
        let refused = out.try_hold("c").err().unwrap().to_string();
        assert!(refused.contains("--max-outbound-connections)"), "{refused}");
        assert_eq!(out.in_use(), 5);
        drop(a);
        assert_eq!(out.in_use(), 2, "a refusal held nothing");
        assert!(out.try_hold("c").is_ok());
        drop(b);
    }
}
