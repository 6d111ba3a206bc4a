//! The gateway of a real cluster: which node runs each invocation, and
//! the one retry. Who the nodes are and whether they are alive is
//! `gateway/members.rs`; what is sent to a node and what of its answer
//! passes, [`crate::forward`].
//!
//! Each invocation goes where the [`Placer`](crate::Placer) says (its function's node, else its tenant's, else the least
//! loaded, within capacity), with the function's memory limit committed on
//! that node while it runs.
//!
//! An invocation whose node fails before answering (connection refused,
//! reset, or closed mid-response) is sent once more to another node: the
//! platform expects functions to be idempotent, as the issue allows, and
//! helps where it can: both attempts carry the same invocation id in a
//! signed `Hearth-Attempt` header ([`crate::attempt`]), the first attempt's
//! node journals each KV and HTTP answer to the shared store before the
//! function sees it, and the retry is given those answers again instead of
//! repeating the calls. One that got an answer, of any status, is never
//! retried, and neither is one that timed out (it may still be running) —
//! except a node's refusal: 429 or 503 with `Hearth-Refused` (at its
//! concurrency limit or out of sandboxes, having run nothing) sends the
//! invocation to another node once, and leaves the busy node in placement.
//! A second failure or refusal is an error naming both nodes (503 with
//! `Retry-After` when both were busy).

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use displaydoc::Display;
use http::{HeaderMap, Method};
use thiserror::Error;

use hearth_core::{GatewayAttempt, InvocationId};
use hearth_store::{AwayTapes, PgStore};

mod members;

pub use members::{Heartbeat, Join, MemberView, PlacedBy};

use crate::attempt::AttemptKey;
use crate::forward::{Forwarded, Outgoing};
use members::State;

/// How often nodes report, and how many missed reports take one out.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub heartbeat: Duration,
    pub missed: u32,
    /// Signs each forward's `Hearth-Attempt` header; `None` sends none
    /// (nodes then give a retry no journal).
    pub attempt_key: Option<AttemptKey>,
    /// How it connects to nodes that serve HTTPS (mutual TLS with the
    /// cluster's CA, [`crate::tls`]); `None`: plain HTTP.
    pub tls: Option<rustls::ClientConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            heartbeat: Duration::from_secs(1),
            missed: 3,
            attempt_key: None,
            tls: None,
        }
    }
}

/// Why an invocation got no answer from any node.
#[derive(Debug, Display, Error)]
pub enum GatewayError {
    /// no node is available: none has joined this gateway, or all have left or stopped answering
    NoNodes,
    /// no node has room for {0} MiB more right now
    NoRoom(u64),
    /// {0}
    Busy(String),
    /// {0}
    Failed(String),
    /// node {node} did not answer within {timeout_ms} ms
    Timeout { node: Arc<str>, timeout_ms: u64 },
}

/// The cluster as one gateway sees it.
pub struct Gateway {
    state: Mutex<State>,
    client: reqwest::Client,
    config: GatewayConfig,
    /// Whether it has read the nodes' rows at least once.
    synced: std::sync::atomic::AtomicBool,
    /// The cluster's store, once [`spawn_sync`](Self::spawn_sync) has it.
    store: std::sync::OnceLock<Arc<PgStore>>,
}

/// Memory committed on a node for one forwarded invocation; released on
/// drop, which is when its answer's body has passed (a streamed answer
/// keeps its invocation running on the node). Members are never removed,
/// so `node` stays theirs.
struct Lease {
    gateway: Arc<Gateway>,
    node: usize,
    mib: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut s = self.gateway.lock();
        let m = &mut s.members[self.node];
        m.committed_mib = m.committed_mib.saturating_sub(self.mib);
        m.running = m.running.saturating_sub(1);
        let (committed, running) = (m.committed_mib, m.running);
        s.placer.set_committed(self.node, committed);
        s.placer.set_running(self.node, running);
        // A slot there is free again.
        s.placer.set_busy(self.node, false);
    }
}

impl Gateway {
    pub fn new(config: GatewayConfig) -> Arc<Gateway> {
        let mut client = reqwest::Client::builder()
            // Under a node's idle limit (its header timeout, 15 s by
            // default), so a forward is not sent on a connection the node
            // is closing.
            .pool_idle_timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(2));
        if let Some(tls) = &config.tls {
            client = client.use_preconfigured_tls(tls.clone());
        }
        let client = client.build().expect("building an HTTP client");
        Arc::new(Gateway {
            state: Mutex::new(State::default()),
            client,
            config,
            synced: Default::default(),
            store: Default::default(),
        })
    }

    /// Tapes of tenant/function that nodes which left keep on their
    /// machines (their handed-over index); empty without a store.
    pub async fn away_tapes(&self, tenant: &str, function: &str) -> Vec<AwayTapes> {
        let Some(store) = self.store.get().cloned() else {
            return Vec::new();
        };
        match store.away_tapes(tenant, function).await {
            Ok(away) => away,
            Err(e) => {
                tracing::warn!(error = %e, "reading the tapes of nodes that left");
                Vec::new()
            }
        }
    }

    /// Whether it knows the cluster's nodes yet (has read their rows).
    pub fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent before it can panic.
        self.state.lock()
    }

    /// Sends the same request to every node in placement, at once: for
    /// what each node keeps to itself (its recordings). Each answer comes
    /// with its node's id; a node that did not answer gives the reason.
    pub async fn ask_nodes(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Vec<(Arc<str>, Result<(u16, Bytes), String>)> {
        let nodes: Vec<(Arc<str>, Arc<str>)> = self
            .lock()
            .members
            .iter()
            .filter(|m| m.out.is_none())
            .map(|m| (m.id.clone(), m.url.clone()))
            .collect();
        let asks = nodes.into_iter().map(|(id, url)| {
            let request = self
                .client
                .request(method.clone(), format!("{url}{path_and_query}"))
                .headers(headers.clone())
                .body(body.clone())
                .timeout(Duration::from_secs(60));
            async move {
                let answer = async {
                    let resp = request.send().await.map_err(|e| e.to_string())?;
                    let status = resp.status().as_u16();
                    let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
                    Ok((status, bytes))
                }
                .await;
                (id, answer)
            }
        });
        futures::future::join_all(asks).await
    }

    /// Picks a node (not `except`) and commits the invocation's memory there.
    fn place(
        self: &Arc<Self>,
        out: &Outgoing<'_>,
        except: Option<usize>,
    ) -> Result<(Lease, Arc<str>, Arc<str>), GatewayError> {
        let mut s = self.lock();
        let (t, f) = s.ids(out.tenant, out.function);
        let Some((n, rule)) = s.placer.place_by(t, f, out.memory_mib, except) else {
            return Err(if s.members.iter().all(|m| m.out.is_some()) {
                GatewayError::NoNodes
            } else {
                GatewayError::NoRoom(out.memory_mib)
            });
        };
        // The function will be loaded there once this runs: later
        // invocations follow it before the next heartbeat says so.
        if s.members[n].loaded.insert((t, f)) {
            s.placer.register(n, t, f);
        }
        let m = &mut s.members[n];
        m.committed_mib += out.memory_mib;
        m.running += 1;
        m.placed += 1;
        m.placed_by.count(rule);
        let (committed, running) = (m.committed_mib, m.running);
        let (id, url) = (m.id.clone(), m.url.clone());
        s.placer.set_committed(n, committed);
        s.placer.set_running(n, running);
        Ok((
            Lease {
                gateway: self.clone(),
                node: n,
                mib: out.memory_mib,
            },
            id,
            url,
        ))
    }

    /// Runs `out` on a node. It is sent once more, to another node, if the
    /// first fails before answering or refuses it (at its limit, before
    /// running any of it: [`hearth_core::REFUSED_HEADER`]).
    pub async fn forward(self: &Arc<Self>, out: &Outgoing<'_>) -> Result<Forwarded, GatewayError> {
        let (invocation, redelivered, queued) = match out.queued {
            Some(q) => (q.id, q.retry, true),
            None => (InvocationId::new(), false, false),
        };
        let attempt = |retry: bool| GatewayAttempt {
            id: invocation,
            retry: retry || redelivered,
            queued,
        };
        let (lease, id, url) = self.place(out, None)?;
        let first = lease.node;
        let failed = match self.attempt(lease, &id, &url, out, attempt(false)).await {
            Ok(f) => return Ok(f),
            Err(e) => e,
        };
        // What became of the first attempt, as the errors say it.
        let (what, refused) = match failed {
            SendError::Timeout => {
                return Err(GatewayError::Timeout {
                    node: id,
                    timeout_ms: out.timeout.as_millis() as u64,
                });
            }
            // A busy node stays in placement, as the last resort until it
            // frees a slot: it is alive, only full.
            SendError::Refused => {
                self.lock().placer.set_busy(first, true);
                (format!("node {id} is at its limit"), true)
            }
            SendError::Failed(err) => {
                self.lock().take_out(first, &err);
                (format!("node {id} failed ({err})"), false)
            }
        };
        if !out.body.resendable() {
            let why = "its request body streamed to that node and cannot be sent to another";
            return Err(if refused {
                GatewayError::Busy(format!("{what}, and {why}; try again shortly"))
            } else {
                GatewayError::Failed(format!("{what}, and {why}"))
            });
        }
        let (lease, second_id, url) = match self.place(out, Some(first)) {
            Ok(p) => p,
            Err(e) if refused => {
                return Err(GatewayError::Busy(format!(
                    "{what} and no other node could take the invocation ({e}); try again shortly"
                )));
            }
            Err(e) => {
                return Err(GatewayError::Failed(format!(
                    "{what} and no other node could take the retry ({e})"
                )));
            }
        };
        let second = lease.node;
        let failed = match self
            .attempt(lease, &second_id, &url, out, attempt(true))
            .await
        {
            Ok(f) => {
                return Ok(Forwarded {
                    retried_from: Some(id),
                    ..f
                });
            }
            Err(e) => e,
        };
        match failed {
            SendError::Timeout => Err(GatewayError::Timeout {
                node: second_id,
                timeout_ms: out.timeout.as_millis() as u64,
            }),
            SendError::Refused => {
                self.lock().placer.set_busy(second, true);
                Err(GatewayError::Busy(format!(
                    "{what}, and node {second_id}, asked next, is at its limit too; try again shortly"
                )))
            }
            SendError::Failed(err2) => {
                self.lock().take_out(second, &err2);
                Err(GatewayError::Failed(format!(
                    "{what}; the retry on node {second_id} failed too ({err2})"
                )))
            }
        }
    }

    /// Sends `out` to node `id` at `url` under `lease`, as an attempt
    /// span when the invocation is traced. An answer holds the lease and
    /// the span until its body has passed; a failure drops both.
    async fn attempt(
        &self,
        lease: Lease,
        id: &Arc<str>,
        url: &str,
        out: &Outgoing<'_>,
        attempt: GatewayAttempt,
    ) -> Result<Forwarded, SendError> {
        let resend = u32::from(attempt.retry);
        let span = out
            .span
            .and_then(|s| s.attempt(out.method.as_str(), id, url, resend));
        let traceparent = span.as_ref().map(|span| {
            http::HeaderValue::from_str(&span.traceparent())
                .expect("a traceparent is hex and dashes")
        });
        match self.send(url, out, attempt, traceparent).await {
            Ok(f) => {
                if let Some(span) = &span {
                    span.answered(f.status);
                }
                let f = Forwarded {
                    node: id.clone(),
                    ..f
                };
                Ok(f.holding((lease, span)))
            }
            Err(e) => {
                if let Some(span) = &span {
                    span.failed(e.kind(), e.to_string());
                }
                Err(e)
            }
        }
    }

    /// Sends `out` to the node at `base`, with `traceparent` in place of
    /// the one it carries, if given.
    async fn send(
        &self,
        base: &str,
        out: &Outgoing<'_>,
        attempt: GatewayAttempt,
        traceparent: Option<http::HeaderValue>,
    ) -> Result<Forwarded, SendError> {
        let classify = |e: reqwest::Error| {
            if e.is_timeout() {
                SendError::Timeout
            } else {
                // reqwest's Display is only the outermost layer
                // ("error sending request"): name the cause too.
                let mut msg = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    msg = format!("{msg}: {s}");
                    source = s.source();
                }
                SendError::Failed(msg)
            }
        };
        let mut headers = out.headers.clone();
        if let Some(tp) = traceparent {
            headers.insert("traceparent", tp);
        }
        let mut request = self
            .client
            .request(out.method.clone(), format!("{base}{}", out.path_and_query))
            .headers(headers);
        if let Some(key) = &self.config.attempt_key {
            request = request.header(crate::attempt::HEADER, key.sign(attempt));
        }
        let body = out.body.take().ok_or_else(|| {
            SendError::Failed("its streamed request body was already sent".into())
        })?;
        let resp = request
            .body(body)
            .timeout(out.timeout)
            .send()
            .await
            .map_err(classify)?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if refused(status, &headers) {
            return Err(SendError::Refused);
        }
        Ok(Forwarded {
            status,
            headers,
            body: Box::pin(resp.bytes_stream()),
            node: "".into(),
            retried_from: None,
        })
    }
}

/// Whether a node's answer is its refusal: it ran nothing of the invocation
/// (at its limit), so another node may be asked.
pub fn refused(status: u16, headers: &HeaderMap) -> bool {
    matches!(status, 429 | 503) && headers.contains_key(hearth_core::REFUSED_HEADER)
}

#[derive(Debug, Display)]
enum SendError {
    /// no answer within the invocation's timeout
    Timeout,
    /// the node is at its limit and ran nothing of it
    Refused,
    /// {0}
    Failed(String),
}

impl SendError {
    /// What an attempt's span calls it (`error.type`).
    fn kind(&self) -> &'static str {
        match self {
            SendError::Timeout => "timeout",
            SendError::Refused => "refused",
            SendError::Failed(_) => "node_failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use hearth_store::MemberRow;

    use super::*;
    use crate::forward::OutgoingBody;

    fn outgoing(function: &str, memory_mib: u64) -> Outgoing<'_> {
        Outgoing {
            tenant: "t",
            function,
            memory_mib,
            timeout: Duration::from_secs(1),
            method: Method::GET,
            path_and_query: "/".into(),
            headers: HeaderMap::new(),
            body: OutgoingBody::Whole(Bytes::new()),
            span: None,
            queued: None,
        }
    }

    fn view<'a>(views: &'a [MemberView], id: &str) -> &'a MemberView {
        views.iter().find(|v| v.id == id).unwrap()
    }

    #[test]
    fn each_function_of_each_tenant_gets_its_own_number_once() {
        let mut s = State::default();
        let f = s.ids("t", "f");
        assert_eq!(s.ids("t", "f"), f, "the same name, the same numbers");
        let g = s.ids("t", "g");
        let uf = s.ids("u", "f");
        assert_eq!(g.0, f.0, "one tenant");
        assert_ne!(uf.0, f.0);
        let functions = HashSet::from([f.1, g.1, uf.1]);
        assert_eq!(
            functions.len(),
            3,
            "f of t and f of u are different functions"
        );
    }

    /// A node's row as the store gives it.
    fn row(id: &str, url: &str, beats: u64, report: Heartbeat) -> MemberRow {
        MemberRow {
            id: id.into(),
            url: url.into(),
            capacity_mib: 100,
            max_concurrency: None,
            report: serde_json::to_string(&report).unwrap(),
            beats,
            beat_age: Duration::ZERO,
            left: false,
        }
    }

    fn loaded(f: &str) -> Heartbeat {
        Heartbeat {
            loaded: vec![("t".into(), f.into())],
            ..Heartbeat::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn members_join_report_time_out_come_back_and_leave() {
        let g = Gateway::new(GatewayConfig {
            heartbeat: Duration::from_millis(100),
            missed: 3,
            attempt_key: None,
            tls: None,
        });
        g.spawn_reaper();
        assert!(matches!(
            g.place(&outgoing("f", 10), None),
            Err(GatewayError::NoNodes)
        ));
        // b reports f loaded: f goes there, and g (unknown) to the least loaded.
        let mut a = row("a", "http://a", 0, Heartbeat::default());
        let mut b = row("b", "http://b", 1, loaded("f"));
        g.sync(&[a.clone(), b.clone()]);
        let (lease, id, url) = g.place(&outgoing("f", 60), None).unwrap();
        assert_eq!((&*id, &*url), ("b", "http://b"));
        assert_eq!(view(&g.members(), "b").committed_mib, 60);
        // b has 40 MiB left: a second f of 60 goes to a, then nowhere.
        let (_lease2, id2, _) = g.place(&outgoing("f", 60), None).unwrap();
        assert_eq!(&*id2, "a");
        assert!(matches!(
            g.place(&outgoing("f", 60), None),
            Err(GatewayError::NoRoom(60))
        ));
        drop(lease);
        assert_eq!(view(&g.members(), "b").committed_mib, 0, "released on drop");

        // a keeps beating, b's row goes stale: after three intervals b is out.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            a.beats += 1;
            b.beat_age += Duration::from_millis(100);
            g.sync(&[a.clone(), b.clone()]);
        }
        let v = g.members();
        assert!(view(&v, "a").alive);
        assert_eq!(
            view(&v, "b").out_because.as_deref(),
            Some("missed heartbeats")
        );
        assert_eq!(view(&v, "b").loaded, 0);
        // Reading its stale row again does not revive it.
        g.sync(&[a.clone(), b.clone()]);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!view(&g.members(), "b").alive);
        let (_l, id, _) = g.place(&outgoing("f", 10), None).unwrap();
        assert_eq!(&*id, "a", "only a is in placement");
        // b beats again: back in, with what it reports loaded.
        b.beats += 1;
        b.beat_age = Duration::ZERO;
        g.sync(&[a.clone(), b.clone()]);
        assert!(view(&g.members(), "b").alive);
        assert_eq!(view(&g.members(), "b").loaded, 1);

        // a leaves; its row, still read, does not revive it.
        a.left = true;
        g.sync(&[a.clone(), b.clone()]);
        a.beats += 1;
        g.sync(&[a.clone(), b.clone()]);
        assert_eq!(view(&g.members(), "a").out_because.as_deref(), Some("left"));

        // a restarts and joins again on the same URL: its slot is reused.
        let a2 = row("a2", "http://a", 0, Heartbeat::default());
        g.sync(&[a2, b.clone()]);
        let v = g.members();
        assert_eq!(v.len(), 2);
        assert!(view(&v, "a2").alive);

        // b's row is swept from the store: gone from placement.
        g.sync(&[]);
        let v = g.members();
        assert!(v.iter().all(|m| !m.alive));
        assert_eq!(
            view(&v, "b").out_because.as_deref(),
            Some("gone from the cluster's store")
        );
    }
}
