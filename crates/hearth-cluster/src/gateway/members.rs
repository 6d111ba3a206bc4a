//! Who a gateway's nodes are: their rows in the cluster's store read
//! into a view ([`Gateway::sync`]: joins, heartbeats, leaves, nodes that
//! went silent), what each has loaded, and what `GET /v1/cluster/nodes`
//! shows of them.
//!
//! Nodes join by writing a row in the cluster's store with their URL and
//! memory capacity, and update it every heartbeat with what they have
//! loaded; the gateway reads the rows, so any number of gateways know the
//! same nodes. A node whose row misses `missed` heartbeats, that leaves,
//! or that refuses a connection is out of placement until its next
//! heartbeat.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use hearth_core::ByMode;
use hearth_store::{MemberRow, PgStore};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::Gateway;
use crate::placer::{Placer, Rule};

/// Why a node that left cleanly is out of placement.
pub(super) const LEFT: &str = "left";

/// What a node offers when it joins (its row in the store's `members`).
#[derive(Debug, Clone)]
pub struct Join {
    /// Where gateways reach the node (`http(s)://host:port`).
    pub url: String,
    /// Memory the node offers to running functions, MiB.
    pub capacity_mib: u64,
    /// Invocations it runs at once before refusing (`--max-concurrency`).
    pub max_concurrency: Option<u32>,
}

/// What a node reports every interval (its row's `report`, as JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Functions with code prepared there, as (tenant, name).
    pub loaded: Vec<(String, String)>,
    /// Invocations running there now (from any gateway).
    pub in_flight: u64,
    /// The node process's resident memory, MiB.
    pub rss_mib: u64,
    /// Warm pools: instances ready for a new invocation, by kind.
    #[serde(default)]
    pub pool_free: BTreeMap<String, u64>,
    /// Invocations the node ran since it started (from any gateway), by
    /// mode.
    #[serde(default)]
    pub ran: ByMode,
}

/// One node as `GET /v1/cluster/nodes` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberView {
    pub id: String,
    pub url: String,
    pub alive: bool,
    /// Why a node is out of placement: `left`, `missed heartbeats`, or
    /// the error of a forwarded invocation.
    pub out_because: Option<String>,
    pub capacity_mib: u64,
    /// Memory committed to invocations this gateway has running there.
    pub committed_mib: u64,
    /// Invocations this gateway has running there, and the node's limit.
    pub running: u32,
    pub max_concurrency: Option<u32>,
    pub loaded: usize,
    /// Tenants with a function loaded there.
    pub tenants: usize,
    pub in_flight: u64,
    pub rss_mib: u64,
    pub pool_free: BTreeMap<String, u64>,
    /// Invocations this gateway sent there.
    pub placed: u64,
    /// Of those, how many each of the placer's rules sent: as the
    /// function's node, as its tenant's, or as the least loaded.
    pub placed_by: PlacedBy,
    /// Invocations the node ran since it started, from any gateway, by
    /// the mode that ran them (as of its last heartbeat).
    pub ran: ByMode,
    pub last_heartbeat_ms_ago: u64,
}

/// Invocations placed on a node, by the placer's rule that chose it
/// ([`Rule`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlacedBy {
    pub function: u64,
    pub tenant: u64,
    pub least_loaded: u64,
}

impl PlacedBy {
    pub(super) fn count(&mut self, rule: Rule) {
        *match rule {
            Rule::Function => &mut self.function,
            Rule::Tenant => &mut self.tenant,
            Rule::LeastLoaded => &mut self.least_loaded,
        } += 1;
    }
}

pub(super) struct Member {
    /// Shared with each forward's answer, which names its node.
    pub(super) id: Arc<str>,
    pub(super) url: Arc<str>,
    pub(super) capacity_mib: u64,
    /// `None` while in placement; why not, otherwise.
    pub(super) out: Option<String>,
    pub(super) last_seen: Instant,
    pub(super) loaded: HashSet<(u32, u32)>,
    pub(super) committed_mib: u64,
    /// Invocations this gateway has running there, and how many the node
    /// takes at once.
    pub(super) running: u32,
    pub(super) max_concurrency: Option<u32>,
    pub(super) report: Heartbeat,
    /// The heartbeat count of its row when this gateway last read it.
    pub(super) beats: u64,
    pub(super) placed: u64,
    pub(super) placed_by: PlacedBy,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) placer: Placer,
    /// Index = the placer's node index; a node that left keeps its slot
    /// (capacity 0) until a node with its URL joins again.
    pub(super) members: Vec<Member>,
    /// The placer's numbers for tenants and their functions: tenant →
    /// (its number, function → its number). Nested so that a lookup
    /// borrows its keys; only a name seen for the first time allocates.
    pub(super) names: HashMap<String, (u32, HashMap<String, u32>)>,
    pub(super) functions_named: u32,
}

impl State {
    pub(super) fn ids(&mut self, tenant: &str, function: &str) -> (u32, u32) {
        if let Some((t, fns)) = self.names.get(tenant)
            && let Some(&f) = fns.get(function)
        {
            return (*t, f);
        }
        let tenants = self.names.len() as u32;
        let (t, fns) = self
            .names
            .entry(tenant.to_string())
            .or_insert_with(|| (tenants, HashMap::new()));
        let f = *fns
            .entry(function.to_string())
            .or_insert(self.functions_named);
        if f == self.functions_named {
            self.functions_named += 1;
        }
        (*t, f)
    }

    pub(super) fn find(&self, id: &str) -> Option<usize> {
        self.members.iter().position(|m| &*m.id == id)
    }

    /// Takes node `n` out of placement and forgets what it had loaded.
    pub(super) fn take_out(&mut self, n: usize, why: &str) {
        let m = &mut self.members[n];
        if m.out.is_some() {
            return;
        }
        tracing::warn!(node = %m.id, url = %m.url, why, "node out of placement");
        m.out = Some(why.to_string());
        self.placer.set_capacity(n, 0);
        for (t, f) in std::mem::take(&mut self.members[n].loaded) {
            self.placer.unregister(n, t, f);
        }
    }

    pub(super) fn set_loaded(&mut self, n: usize, now: HashSet<(u32, u32)>) {
        let before = std::mem::take(&mut self.members[n].loaded);
        for &(t, f) in before.difference(&now) {
            self.placer.unregister(n, t, f);
        }
        for &(t, f) in now.difference(&before) {
            self.placer.register(n, t, f);
        }
        self.members[n].loaded = now;
    }
}

impl Gateway {
    /// Takes out nodes whose heartbeats stopped, every half interval,
    /// for as long as the gateway lives.
    pub fn spawn_reaper(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let period = self.config.heartbeat / 2;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(g) = weak.upgrade() else { return };
                let limit = g.config.heartbeat * g.config.missed;
                let mut s = g.lock();
                for n in 0..s.members.len() {
                    if s.members[n].out.is_none() && s.members[n].last_seen.elapsed() > limit {
                        s.take_out(n, "missed heartbeats");
                    }
                }
            }
        });
    }

    /// Brings this gateway up to date with the nodes' rows in the store:
    /// a new row is a node that joined, a row whose heartbeat count moved
    /// (within the heartbeat limit) a heartbeat, a marked row a node that
    /// left, and a missing one a node that is gone.
    pub fn sync(&self, rows: &[MemberRow]) {
        let limit = self.config.heartbeat * self.config.missed;
        for row in rows {
            let known = {
                let s = self.lock();
                s.find(&row.id).map(|n| s.members[n].beats)
            };
            if row.left {
                if known.is_some() {
                    self.leave(&row.id);
                }
                continue;
            }
            if known.is_none() {
                self.join(
                    &row.id,
                    Join {
                        url: row.url.clone(),
                        capacity_mib: row.capacity_mib,
                        max_concurrency: row.max_concurrency,
                    },
                );
            }
            let fresh = row.beat_age < limit;
            if fresh && known != Some(row.beats) {
                let beat = serde_json::from_str(&row.report).unwrap_or_else(|e| {
                    tracing::warn!(node = %row.id, error = %e, "unreadable heartbeat");
                    Heartbeat::default()
                });
                self.heartbeat(&row.id, beat);
            }
            let mut s = self.lock();
            if let Some(n) = s.find(&row.id) {
                let m = &mut s.members[n];
                m.beats = row.beats;
                // The row's age by the database's clock: the reaper takes
                // the node out once it passes the limit.
                m.last_seen = Instant::now()
                    .checked_sub(row.beat_age)
                    .unwrap_or_else(Instant::now);
            }
        }
        let mut s = self.lock();
        for n in 0..s.members.len() {
            if !rows.iter().any(|r| *r.id == *s.members[n].id) {
                s.take_out(n, "gone from the cluster's store");
            }
        }
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Reads the nodes' rows every half heartbeat, and at once when
    /// `changed` says a node joined or left, for as long as the gateway
    /// lives.
    pub fn spawn_sync(self: &Arc<Self>, store: Arc<PgStore>, changed: Arc<tokio::sync::Notify>) {
        let _ = self.store.set(store.clone());
        let weak = Arc::downgrade(self);
        let period = self.config.heartbeat / 2;
        tokio::spawn(async move {
            let mut warned = false;
            loop {
                let rows = store.members().await;
                let Some(g) = weak.upgrade() else { return };
                match rows {
                    Ok(rows) => {
                        warned = false;
                        g.sync(&rows);
                    }
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!(error = %e, "cannot read the cluster's nodes");
                    }
                    _ => {}
                }
                drop(g);
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = changed.notified() => {}
                }
            }
        });
    }

    /// A node joins (or rejoins, after a restart, under a new id).
    pub(super) fn join(&self, id: &str, join: Join) {
        let mut s = self.lock();
        let member = Member {
            id: id.into(),
            url: join.url.trim_end_matches('/').into(),
            capacity_mib: join.capacity_mib,
            out: None,
            last_seen: Instant::now(),
            loaded: HashSet::new(),
            committed_mib: 0,
            running: 0,
            max_concurrency: join.max_concurrency,
            report: Heartbeat::default(),
            beats: 0,
            placed: 0,
            placed_by: PlacedBy::default(),
        };
        let n = match s.members.iter().position(|m| m.url == member.url) {
            Some(n) => {
                s.take_out(n, "rejoined");
                s.members[n] = member;
                n
            }
            None => {
                let n = s.placer.add_node(0);
                s.members.push(member);
                n
            }
        };
        s.placer.set_capacity(n, join.capacity_mib);
        s.placer.set_committed(n, 0);
        s.placer.set_slots(n, join.max_concurrency);
        s.placer.set_running(n, 0);
        tracing::info!(node = %id, url = %s.members[n].url, capacity_mib = join.capacity_mib, "node joined");
    }

    /// Records a heartbeat; false if the node is unknown (it should join).
    pub(super) fn heartbeat(&self, id: &str, beat: Heartbeat) -> bool {
        let mut s = self.lock();
        let Some(n) = s.find(id) else { return false };
        if s.members[n].out.as_deref() == Some(LEFT) {
            // A heartbeat that crossed the node's goodbye.
            return false;
        }
        let loaded = beat
            .loaded
            .iter()
            .map(|(t, f)| s.ids(t, f))
            .collect::<HashSet<_>>();
        let m = &mut s.members[n];
        m.last_seen = Instant::now();
        m.report = beat;
        if m.out.take().is_some() {
            tracing::info!(node = %m.id, "node back in placement");
            let capacity = m.capacity_mib;
            s.placer.set_capacity(n, capacity);
        }
        s.set_loaded(n, loaded);
        s.placer.set_busy(n, false);
        true
    }

    /// A node leaves cleanly; false if it was unknown.
    pub(super) fn leave(&self, id: &str) -> bool {
        let mut s = self.lock();
        let Some(n) = s.find(id) else { return false };
        s.take_out(n, LEFT);
        true
    }

    pub fn members(&self) -> Vec<MemberView> {
        let s = self.lock();
        s.members
            .iter()
            .map(|m| MemberView {
                id: m.id.to_string(),
                url: m.url.to_string(),
                alive: m.out.is_none(),
                out_because: m.out.clone(),
                capacity_mib: m.capacity_mib,
                committed_mib: m.committed_mib,
                running: m.running,
                max_concurrency: m.max_concurrency,
                loaded: m.loaded.len(),
                tenants: m
                    .loaded
                    .iter()
                    .map(|(t, _)| t)
                    .collect::<HashSet<_>>()
                    .len(),
                in_flight: m.report.in_flight,
                rss_mib: m.report.rss_mib,
                pool_free: m.report.pool_free.clone(),
                placed: m.placed,
                placed_by: m.placed_by,
                ran: m.report.ran,
                last_heartbeat_ms_ago: m.last_seen.elapsed().as_millis() as u64,
            })
            .collect()
    }
}
