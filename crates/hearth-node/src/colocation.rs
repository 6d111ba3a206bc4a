//! The node's colocation policy: the cluster's mode (`--colocation`),
//! overridden per tenant by what the store holds (`PUT /v1/tenants/{t}`).
//!
//! Asked at every new runtime a tier might share (a Python handler's
//! zygote), and read from the store each time: a cold start already costs
//! milliseconds, a store read microseconds (SQLite) to a fraction of one
//! (PostgreSQL), and no node can then act on a stale override.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use hearth_core::Colocation;
use hearth_host::ColocationPolicy;
use hearth_store::Store;

/// The mode of tenants without their own: `--colocation` at start, then,
/// on a cluster node, the gateway's, which it hands out at every join so
/// that all nodes of a cluster share one default. Clones share the value.
#[derive(Clone, Default)]
pub struct DefaultColocation(Arc<AtomicU8>);

impl DefaultColocation {
    pub fn new(mode: Colocation) -> Self {
        let cell = DefaultColocation::default();
        cell.set(mode);
        cell
    }

    pub fn get(&self) -> Colocation {
        Colocation::ALL[usize::from(self.0.load(Ordering::Relaxed))]
    }

    pub fn set(&self, mode: Colocation) {
        let i = Colocation::ALL.iter().position(|&m| m == mode).unwrap_or(0);
        self.0.store(i as u8, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for DefaultColocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

#[derive(Clone)]
pub struct StoreColocation {
    default: DefaultColocation,
    store: Arc<dyn Store>,
}

impl StoreColocation {
    pub fn new(default: DefaultColocation, store: Arc<dyn Store>) -> StoreColocation {
        StoreColocation { default, store }
    }
}

impl std::fmt::Debug for StoreColocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreColocation")
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl ColocationPolicy for StoreColocation {
    async fn mode_for(&self, tenant: &str) -> Colocation {
        match self.store.tenant_colocation(tenant).await {
            Ok(Some(mode)) => mode,
            Ok(None) => self.default.get(),
            Err(e) => {
                // Unknown is treated as the strictest: sharing nothing
                // costs a slower start, sharing wrongly costs isolation.
                tracing::warn!(tenant, error = %e, "cannot read the tenant's colocation mode; sharing nothing");
                Colocation::None
            }
        }
    }

    fn default_mode(&self) -> Colocation {
        self.default.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_default_and_every_mode_round_trips() {
        let a = DefaultColocation::new(Colocation::Tenant);
        let b = a.clone();
        for mode in Colocation::ALL {
            a.set(mode);
            assert_eq!(b.get(), mode);
        }
    }
}
