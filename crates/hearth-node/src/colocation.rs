//! The node's colocation policy: the cluster's mode (`--colocation`),
//! overridden per tenant by what the store holds (`PUT /v1/tenants/{t}`).
//!
//! Asked at every new runtime a tier might share (a Python handler's
//! zygote), and read from the store each time: a cold start already costs
//! milliseconds, a store read microseconds (SQLite) to a fraction of one
//! (PostgreSQL), and no node can then act on a stale override.

use std::sync::Arc;

use hearth_core::Colocation;
use hearth_host::ColocationPolicy;
use hearth_store::Store;

#[derive(Clone)]
pub struct StoreColocation {
    default: Colocation,
    store: Arc<dyn Store>,
}

impl StoreColocation {
    pub fn new(default: Colocation, store: Arc<dyn Store>) -> StoreColocation {
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

impl ColocationPolicy for StoreColocation {
    fn mode_for(&self, tenant: &str) -> Colocation {
        match self.store.tenant_colocation(tenant) {
            Ok(Some(mode)) => mode,
            Ok(None) => self.default,
            Err(e) => {
                // Unknown is treated as the strictest: sharing nothing
                // costs a slower start, sharing wrongly costs isolation.
                tracing::warn!(tenant, error = %e, "cannot read the tenant's colocation mode; sharing nothing");
                Colocation::None
            }
        }
    }

    fn default_mode(&self) -> Colocation {
        self.default
    }
}
