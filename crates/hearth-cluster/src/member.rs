//! A node's side of the cluster: joining the gateway, heartbeats with what
//! the node has loaded, leaving on shutdown, and fetching code artifacts
//! from the gateway by content hash.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hearth_node::{ArtifactSource, Node};

use crate::gateway::{Heartbeat, Join, Joined};

/// This node's membership of one gateway's cluster.
pub struct Membership {
    gateway: String,
    token: String,
    join: Join,
    client: reqwest::Client,
    /// The id the gateway gave us; a new one if it forgot us and we rejoined.
    id: Mutex<String>,
    heartbeat: Duration,
    colocation: Option<hearth_core::Colocation>,
    /// Set by [`leave`](Self::leave): heartbeats stop (one more would put
    /// the node back in placement).
    left: AtomicBool,
}

async fn error_text(resp: reqwest::Response) -> String {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    format!("{status}: {body}")
}

impl Membership {
    /// Joins the gateway at `gateway` as the node reachable at `url`.
    /// Retries for up to `patience` while the gateway is not up yet.
    pub async fn join(
        gateway: &str,
        token: &str,
        join: Join,
        patience: Duration,
    ) -> Result<Arc<Membership>, String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        let gateway = gateway.trim_end_matches('/').to_string();
        let deadline = tokio::time::Instant::now() + patience;
        let joined = loop {
            match Self::post_join(&client, &gateway, token, &join).await {
                Ok(j) => break j,
                Err((retry, e)) if retry && tokio::time::Instant::now() < deadline => {
                    tracing::warn!(%gateway, error = %e, "gateway not reachable yet; retrying");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err((_, e)) => return Err(format!("failed to join {gateway}: {e}")),
            }
        };
        tracing::info!(%gateway, id = %joined.id, "joined the cluster");
        Ok(Arc::new(Membership {
            gateway,
            token: token.to_string(),
            join,
            client,
            id: Mutex::new(joined.id),
            heartbeat: Duration::from_millis(joined.heartbeat_ms.max(50)),
            colocation: joined.colocation,
            left: AtomicBool::new(false),
        }))
    }

    /// `Err((worth retrying, why))`.
    async fn post_join(
        client: &reqwest::Client,
        gateway: &str,
        token: &str,
        join: &Join,
    ) -> Result<Joined, (bool, String)> {
        let resp = client
            .post(format!("{gateway}/v1/cluster/nodes"))
            .bearer_auth(token)
            .json(join)
            .send()
            .await
            .map_err(|e| (true, e.to_string()))?;
        if !resp.status().is_success() {
            let retry = resp.status().is_server_error();
            return Err((retry, error_text(resp).await));
        }
        resp.json().await.map_err(|e| (false, e.to_string()))
    }

    /// The cluster's default colocation mode, as the gateway said at join.
    pub fn colocation(&self) -> Option<hearth_core::Colocation> {
        self.colocation
    }

    pub fn id(&self) -> String {
        self.id.lock().clone()
    }

    /// Sends a heartbeat every interval until the process ends; rejoins if
    /// the gateway no longer knows this node (it restarted, or took the
    /// node out and forgot it).
    pub fn spawn_heartbeats(self: &Arc<Self>, node: Arc<Node>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut warned = false;
            loop {
                tokio::time::sleep(me.heartbeat).await;
                if me.left.load(Ordering::Acquire) {
                    return;
                }
                let beat = Heartbeat {
                    loaded: node.loaded(),
                    in_flight: node.in_flight() as u64,
                    rss_mib: rss_mib(),
                    pool_free: node.pool_free(),
                };
                let url = format!("{}/v1/cluster/nodes/{}/heartbeat", me.gateway, me.id());
                let sent = me
                    .client
                    .post(url)
                    .bearer_auth(&me.token)
                    .json(&beat)
                    .send()
                    .await;
                match sent {
                    _ if me.left.load(Ordering::Acquire) => return,
                    Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                        match Self::post_join(&me.client, &me.gateway, &me.token, &me.join).await {
                            Ok(j) => {
                                tracing::info!(id = %j.id, "rejoined the cluster");
                                if let Some(mode) = j.colocation {
                                    node.set_default_colocation(mode);
                                }
                                *me.id.lock() = j.id;
                            }
                            Err((_, e)) => tracing::warn!(error = %e, "failed to rejoin"),
                        }
                    }
                    Ok(r) if r.status().is_success() => warned = false,
                    Ok(r) => {
                        let e = error_text(r).await;
                        tracing::warn!(error = %e, "heartbeat refused");
                    }
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!(error = %e, "gateway unreachable; still serving");
                    }
                    Err(_) => {}
                }
            }
        });
    }

    /// Tells the gateway this node is going (best effort: a gateway that
    /// does not hear it takes the node out after missed heartbeats).
    pub async fn leave(&self) {
        self.left.store(true, Ordering::Release);
        let url = format!("{}/v1/cluster/nodes/{}", self.gateway, self.id());
        match self
            .client
            .delete(url)
            .bearer_auth(&self.token)
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => tracing::info!("left the cluster"),
            Ok(r) => {
                let e = error_text(r).await;
                tracing::warn!(error = %e, "leaving the cluster");
            }
            Err(e) => tracing::warn!(error = %e, "leaving the cluster"),
        }
    }
}

/// Code by hash from a gateway (`GET /v1/artifacts/{sha256}`).
pub struct GatewayArtifacts {
    gateway: String,
    token: String,
    client: reqwest::Client,
}

impl GatewayArtifacts {
    pub fn shared(gateway: &str, token: &str) -> Arc<dyn ArtifactSource> {
        Arc::new(GatewayArtifacts {
            gateway: gateway.trim_end_matches('/').to_string(),
            token: token.to_string(),
            client: reqwest::Client::new(),
        })
    }
}

#[async_trait::async_trait]
impl ArtifactSource for GatewayArtifacts {
    async fn fetch(&self, hash: &str) -> Result<Vec<u8>, String> {
        let m = self;
        let resp = m
            .client
            .get(format!("{}/v1/artifacts/{hash}", m.gateway))
            .bearer_auth(&m.token)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(error_text(resp).await);
        }
        Ok(resp.bytes().await.map_err(|e| e.to_string())?.to_vec())
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
