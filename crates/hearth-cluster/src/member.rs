//! A node's side of the cluster, all through the shared store: its row in
//! `members` (joined, refreshed every heartbeat with what it has loaded,
//! marked when it leaves), the cluster's settings it follows, and code
//! fetched by content hash.
//!
//! A node never talks to a gateway: any number of them read its row, so
//! none has to be told it exists, and one that restarts knows it at once.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hearth_core::{ByMode, Colocation};
use hearth_host::ArtifactSource;
use hearth_store::{ClusterSettings, PgStore};

use crate::gateway::{Heartbeat, Join};

/// The node a member speaks for, as the cluster sees it: what a
/// heartbeat reports of it, and the cluster's settings it follows. The
/// binary implements it for its node: the cluster knows no node.
pub trait Reporting: Send + Sync + 'static {
    /// Functions with code prepared there, as (tenant, name).
    fn loaded(&self) -> Vec<(String, String)>;
    /// Invocations running there now.
    fn in_flight(&self) -> u64;
    /// Warm pools: instances ready for a new invocation, by kind.
    fn pool_free(&self) -> std::collections::BTreeMap<String, u64>;
    /// Invocations it ran since it started, by mode.
    fn ran(&self) -> ByMode;
    /// Takes the cluster's default colocation mode.
    fn set_default_colocation(&self, mode: Colocation);
}

/// This node's membership of the cluster whose store is `store`.
pub struct Membership {
    store: Arc<PgStore>,
    join: Join,
    /// Its row's id; a new one if the row was swept and it joined again.
    id: Mutex<String>,
    heartbeat_ms: AtomicU64,
    /// Set by [`leave`](Self::leave): heartbeats stop (one more would put
    /// the node back in placement).
    left: AtomicBool,
    /// Whether the last heartbeat reached the store.
    beating: AtomicBool,
}

impl Membership {
    /// Joins as the node reachable at `join.url`, retrying for up to
    /// `patience` while the store is not reachable.
    pub async fn join(
        store: Arc<PgStore>,
        join: Join,
        patience: Duration,
    ) -> Result<Arc<Membership>, String> {
        let deadline = tokio::time::Instant::now() + patience;
        let id = loop {
            match Self::insert(&store, &join).await {
                Ok(id) => break id,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::warn!(error = %e, "cannot join yet; retrying");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => return Err(format!("failed to join the cluster: {e}")),
            }
        };
        tracing::info!(%id, url = %join.url, "joined the cluster");
        Ok(Arc::new(Membership {
            store,
            join,
            id: Mutex::new(id),
            heartbeat_ms: AtomicU64::new(1000),
            left: AtomicBool::new(false),
            beating: AtomicBool::new(true),
        }))
    }

    async fn insert(store: &Arc<PgStore>, join: &Join) -> Result<String, String> {
        let report = serde_json::to_string(&Heartbeat::default()).expect("serializes");
        store
            .member_join(&join.url, join.capacity_mib, join.max_concurrency, &report)
            .await
            .map_err(|e| e.to_string())
    }

    pub fn id(&self) -> String {
        self.id.lock().clone()
    }

    /// Why this node should not be sent work now, if it should not: it
    /// left (it is stopping), or its last heartbeat did not reach the
    /// store (gateways will soon take it out).
    pub fn not_ready(&self) -> Option<&'static str> {
        if self.left.load(Ordering::Acquire) {
            Some("the node has left the cluster (it is stopping)")
        } else if !self.beating.load(Ordering::Acquire) {
            Some("the node's last heartbeat did not reach the cluster's store")
        } else {
            None
        }
    }

    /// One heartbeat now; the cluster's settings it carried back are
    /// applied to `node`.
    pub async fn beat(&self, node: &dyn Reporting) -> Result<(), String> {
        let beat = Heartbeat {
            loaded: node.loaded(),
            in_flight: node.in_flight(),
            rss_mib: rss_mib(),
            pool_free: node.pool_free(),
            ran: node.ran(),
        };
        let report = serde_json::to_string(&beat).expect("serializes");
        let beat = self.store.member_beat(&self.id(), &report).await;
        match beat.map_err(|e| e.to_string())? {
            _ if self.left.load(Ordering::Acquire) => {}
            Some(settings) => self.follow(node, &settings),
            // Our row is gone (swept after a long silence): join again.
            None => {
                let id = Self::insert(&self.store, &self.join).await?;
                tracing::info!(%id, "joined the cluster again");
                *self.id.lock() = id;
            }
        }
        Ok(())
    }

    fn follow(&self, node: &dyn Reporting, settings: &ClusterSettings) {
        if let Some(mode) = settings.colocation.as_deref() {
            match mode.parse() {
                // Logs a change from this node's own.
                Ok(mode) => node.set_default_colocation(mode),
                Err(e) => tracing::warn!(mode, error = %e, "the cluster's colocation mode"),
            }
        }
        if let Some(ms) = settings.heartbeat_ms {
            self.heartbeat_ms.store(ms.max(50), Ordering::Relaxed);
        }
    }

    /// Sends a heartbeat every interval until the node leaves.
    pub fn spawn_heartbeats(self: &Arc<Self>, node: Arc<dyn Reporting>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut warned = false;
            while !me.left.load(Ordering::Acquire) {
                let beat = me.beat(node.as_ref()).await;
                me.beating.store(beat.is_ok(), Ordering::Release);
                match beat {
                    Ok(()) => warned = false,
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!(error = %e, "cannot reach the cluster's store; still serving");
                    }
                    Err(_) => {}
                }
                let every = me.heartbeat_ms.load(Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(every)).await;
            }
        });
    }

    /// Leaves: every gateway hears it at once and places nothing more
    /// here. Invocations already sent still finish.
    pub async fn leave(&self) {
        self.left.store(true, Ordering::Release);
        match self.store.member_leave(&self.id()).await {
            Ok(_) => tracing::info!("left the cluster"),
            Err(e) => tracing::warn!(error = %e, "leaving the cluster"),
        }
    }
}

/// Code by hash in the cluster's store.
pub struct SharedArtifacts {
    store: Arc<PgStore>,
}

impl SharedArtifacts {
    pub fn shared(store: Arc<PgStore>) -> Arc<dyn ArtifactSource> {
        Arc::new(SharedArtifacts { store })
    }
}

#[async_trait::async_trait]
impl ArtifactSource for SharedArtifacts {
    async fn fetch(&self, hash: &str) -> Result<Vec<u8>, String> {
        self.store
            .get_artifact(hash)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no artifact {hash} in the cluster's store"))
    }

    async fn publish(&self, hash: &str, bytes: bytes::Bytes) -> Result<(), String> {
        self.store
            .put_artifact(hash, &bytes)
            .await
            .map_err(|e| e.to_string())
    }
}

/// This process's resident memory, MiB (0 if /proc cannot say).
fn rss_mib() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * 4096 / (1 << 20)
}
