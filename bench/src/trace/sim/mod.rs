//! Simulated nodes (Hydra §5.2) driven one invocation at a time: the
//! [`Simulation`] the placer places into, where any node can be detached
//! and run for real by the caller, and [`simulate`], a whole trace through
//! it. The node model itself, and its numbers, are in [`model`].

mod model;

use std::collections::BinaryHeap;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::report::percentile;
use super::source::{Invocation, Trace};
use hearth_cluster::{Colocation, Placer};
use model::{Node, Sim};

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub nodes: usize,
    pub node_mb: u64,
    pub mode: Colocation,
    /// Pre-started generic instances per node (0: no pool).
    pub pool: usize,
    pub runtime_mb: u64,
    pub cold_start_ms: u64,
    pub pool_start_ms: u64,
    pub keep_alive_ms: (u64, u64),
    pub max_instances: usize,
    /// How often memory is sampled for the time series.
    pub sample_ms: u64,
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 10,
            node_mb: 16 << 10,
            mode: Colocation::Tenant,
            pool: 8,
            // A Python or Node runtime's resident size, roughly, and its
            // start (FACTS.md: 290–376 ms to a first answer here).
            runtime_mb: 40,
            cold_start_ms: 300,
            pool_start_ms: 5,
            keep_alive_ms: (600_000, 1_200_000),
            max_instances: 416,
            sample_ms: 10_000,
            seed: 7,
        }
    }
}

/// What one mode did with the trace.
#[derive(Debug, Clone, Default)]
pub struct ModeReport {
    pub mode: String,
    pub pool: usize,
    pub invocations: u64,
    pub completed: u64,
    /// No node had room (429).
    pub rejected: u64,
    pub cold: u64,
    pub from_pool: u64,
    pub hot: u64,
    pub p50_ms: u64,
    pub p99_ms: u64,
    pub mean_gb: f64,
    pub peak_gb: f64,
    pub gb_s: f64,
    /// Completed invocations per GB-second of memory held.
    pub density: f64,
    /// Placer time per decision.
    pub place_ns: f64,
    /// (seconds, GB held across nodes), every `sample_ms`.
    pub memory: Vec<(f64, f64)>,
}
/// Runs `trace` through `cfg.nodes` simulated nodes in `cfg.mode`.
pub fn simulate(trace: &Trace, cfg: &SimConfig) -> ModeReport {
    let mut sim = Simulation::new(cfg, trace.invocations.len());
    for inv in &trace.invocations {
        sim.offer(inv);
    }
    sim.finish()
}

/// A simulation driven one invocation at a time, in trace order.
///
/// [`simulate`] runs a whole trace through it. `hearth-bench trace` with
/// real nodes also drives one live: up to its window every node is
/// simulated; then its real nodes are [`detach`](Self::detach)ed
/// and run for real, the placer learning of them what a gateway learns
/// (the functions they have loaded, the memory and slots taken by what it
/// sent them), and an invocation a real node refuses is placed again
/// ([`retry`](Self::retry)).
pub struct Simulation {
    sim: Sim,
    next_sample: u64,
    place_ns: u128,
    /// Per detached node, what the placer knows of it.
    external: Vec<External>,
}

/// A detached node as the placer sees it, like a gateway's member.
#[derive(Debug, Clone, Default)]
struct External {
    /// The (tenant, function) pairs it last said it has loaded, as
    /// registered with the placer.
    loaded: Vec<(u32, u32)>,
    /// Memory and slots taken by what was placed there and not yet done.
    committed_mb: u64,
    running: u32,
}

/// Where the placer put an invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Started on this simulated node.
    Simulated(usize),
    /// For the caller to run on this detached node.
    External(usize),
    /// No node had room (429).
    Rejected,
}

impl Simulation {
    /// `cfg.nodes` nodes with full pools; `expected` sizes the latency log.
    pub fn new(cfg: &SimConfig, expected: usize) -> Simulation {
        let mut sim = Sim {
            cfg: cfg.clone(),
            placer: Placer::new(cfg.nodes, cfg.node_mb),
            nodes: (0..cfg.nodes).map(|_| Node::default()).collect(),
            events: BinaryHeap::new(),
            seq: 0,
            rng: StdRng::seed_from_u64(cfg.seed),
            held_mb: 0,
            last_ms: 0,
            mb_ms: 0.0,
            peak_mb: 0,
            report: ModeReport {
                mode: cfg.mode.as_str().to_string(),
                pool: cfg.pool,
                ..ModeReport::default()
            },
            latencies: Vec::with_capacity(expected),
            external: vec![false; cfg.nodes],
        };
        for n in 0..cfg.nodes {
            for _ in 0..cfg.pool {
                sim.add_pool_instance(n);
            }
        }
        Simulation {
            sim,
            next_sample: 0,
            place_ns: 0,
            external: vec![External::default(); cfg.nodes],
        }
    }

    /// Places `inv` at its start time (which must not precede the last
    /// one's), starting it there if the node is simulated.
    pub fn offer(&mut self, inv: &Invocation) -> Placement {
        self.sim.report.invocations += 1;
        self.place(inv, None)
    }

    /// Places again, at `now_ms`, an invocation that the detached node
    /// `refused` would not take, never choosing that node.
    pub fn retry(&mut self, inv: &Invocation, now_ms: u64, refused: usize) -> Placement {
        let inv = Invocation {
            start_ms: now_ms.max(self.sim.last_ms),
            ..*inv
        };
        self.place(&inv, Some(refused))
    }

    fn place(&mut self, inv: &Invocation, except: Option<usize>) -> Placement {
        self.sim.run_until(inv.start_ms, &mut self.next_sample);
        let t0 = Instant::now();
        let node = self.sim.placer.place_except(
            inv.tenant,
            inv.function,
            u64::from(inv.memory_mb),
            except,
        );
        self.place_ns += t0.elapsed().as_nanos();
        match node {
            Some(n) if self.sim.external[n] => {
                self.take_external(n, inv.memory_mb, 1);
                Placement::External(n)
            }
            Some(n) => {
                self.sim.start(n, inv);
                Placement::Simulated(n)
            }
            None => {
                self.sim.report.rejected += 1;
                Placement::Rejected
            }
        }
    }

    /// Takes `node` out of the model: its instances and pool are dropped
    /// (their memory no longer counts), and from now on the placer knows
    /// of it what it is told ([`external_loaded`](Self::external_loaded),
    /// [`external_done`](Self::external_done)) and what it placed there.
    /// Invocations already running there finish in the model, and their
    /// instances go when they do.
    pub fn detach(&mut self, node: usize) {
        let live: Vec<usize> = (0..self.sim.nodes[node].slots.len())
            .filter(|&s| {
                self.sim.nodes[node].slots[s]
                    .as_ref()
                    .is_some_and(|i| i.running == 0)
            })
            .collect();
        self.sim.nodes[node].pool.clear();
        for s in live {
            self.sim.evict(node, s);
        }
        self.sim.external[node] = true;
        // What the model still runs there is not on the real node.
        self.take_external(node, 0, 0);
    }

    /// The (tenant, function) pairs a detached node says it has loaded.
    pub fn external_loaded(&mut self, node: usize, loaded: Vec<(u32, u32)>) {
        assert!(self.sim.external[node], "node {node} is simulated");
        let before = std::mem::replace(&mut self.external[node].loaded, loaded);
        let now = &self.external[node].loaded;
        for &(t, f) in before.iter().filter(|p| !now.contains(p)) {
            self.sim.placer.unregister(node, t, f);
        }
        for &(t, f) in now.iter().filter(|p| !before.contains(p)) {
            self.sim.placer.register(node, t, f);
        }
    }

    /// `inv`, placed on detached node `node`, is done there: its memory and
    /// slot are free again, and it counts as completed if it `completed`
    /// (not if the node refused it or it failed).
    pub fn external_done(&mut self, node: usize, inv: &Invocation, completed: bool) {
        assert!(self.sim.external[node], "node {node} is simulated");
        let e = &mut self.external[node];
        e.committed_mb = e.committed_mb.saturating_sub(u64::from(inv.memory_mb));
        e.running = e.running.saturating_sub(1);
        self.take_external(node, 0, 0);
        if completed {
            self.sim.report.completed += 1;
        }
    }

    /// `mb` more memory and `slots` more slots taken on detached `node`;
    /// the placer is told what it holds.
    fn take_external(&mut self, node: usize, mb: u32, slots: u32) {
        let e = &mut self.external[node];
        e.committed_mb += u64::from(mb);
        e.running += slots;
        self.sim.placer.set_committed(node, e.committed_mb);
        self.sim.placer.set_running(node, e.running);
    }

    /// How many invocations a detached node runs at once, if limited.
    pub fn set_slots(&mut self, node: usize, slots: Option<u32>) {
        assert!(self.sim.external[node], "node {node} is simulated");
        self.sim.placer.set_slots(node, slots);
    }

    /// A detached node refused work for want of a slot (`true`), or has
    /// freed one since (`false`): see [`Placer::set_busy`].
    pub fn set_busy(&mut self, node: usize, busy: bool) {
        assert!(self.sim.external[node], "node {node} is simulated");
        self.sim.placer.set_busy(node, busy);
    }

    /// Runs the model to its end and reports.
    pub fn finish(mut self) -> ModeReport {
        self.sim.run_until(u64::MAX, &mut self.next_sample);
        let sim = &mut self.sim;
        let mut r = std::mem::take(&mut sim.report);
        sim.latencies.sort_unstable();
        r.p50_ms = percentile(&sim.latencies, 0.50);
        r.p99_ms = percentile(&sim.latencies, 0.99);
        r.gb_s = sim.mb_ms / 1024.0 / 1000.0;
        r.mean_gb = if sim.last_ms > 0 {
            sim.mb_ms / sim.last_ms as f64 / 1024.0
        } else {
            0.0
        };
        r.peak_gb = sim.peak_mb as f64 / 1024.0;
        r.density = if r.gb_s > 0.0 {
            r.completed as f64 / r.gb_s
        } else {
            0.0
        };
        r.place_ns = self.place_ns as f64 / r.invocations.max(1) as f64;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::source::{Synthetic, synthetic};

    fn run(trace: &Trace, mode: Colocation, pool: usize) -> ModeReport {
        simulate(
            trace,
            &SimConfig {
                nodes: 4,
                mode,
                pool,
                ..SimConfig::default()
            },
        )
    }

    #[test]
    fn every_invocation_is_started_once_and_accounted_for() {
        let t = synthetic(Synthetic {
            functions: 120,
            hours: 2,
            ..Synthetic::default()
        });
        for mode in Colocation::ALL {
            for pool in [0, 4] {
                let r = run(&t, mode, pool);
                assert_eq!(r.invocations, t.invocations.len() as u64);
                assert_eq!(r.completed + r.rejected, r.invocations, "{mode:?}");
                assert_eq!(r.cold + r.from_pool + r.hot, r.completed, "{mode:?}");
                assert!(r.p99_ms >= r.p50_ms && r.gb_s > 0.0 && r.density > 0.0);
                if pool == 0 {
                    assert_eq!(r.from_pool, 0);
                }
            }
        }
    }

    #[test]
    fn pools_and_tenant_colocation_cut_cold_starts_and_memory_as_hydra_found() {
        let t = synthetic(Synthetic {
            functions: 200,
            hours: 3,
            ..Synthetic::default()
        });
        let none = run(&t, Colocation::None, 0);
        let tenant = run(&t, Colocation::Tenant, 8);
        let full = run(&t, Colocation::Full, 8);
        assert!(
            tenant.cold * 10 < none.cold,
            "cold starts: tenant+pool {} vs none {}",
            tenant.cold,
            none.cold
        );
        assert!(
            tenant.mean_gb < none.mean_gb,
            "memory: tenant {} GB vs none {} GB",
            tenant.mean_gb,
            none.mean_gb
        );
        assert!(
            full.mean_gb <= tenant.mean_gb * 1.05,
            "full {} vs tenant {}",
            full.mean_gb,
            tenant.mean_gb
        );
        assert!(tenant.p99_ms <= none.p99_ms);
    }

    #[test]
    fn a_detached_node_is_placed_by_what_it_reports_and_refusals_go_elsewhere() {
        let cfg = SimConfig {
            nodes: 2,
            node_mb: 1000,
            pool: 0,
            ..SimConfig::default()
        };
        let inv = |start_ms, tenant, function, memory_mb| Invocation {
            start_ms,
            duration_ms: 100,
            tenant,
            function,
            memory_mb,
        };
        let mut sim = Simulation::new(&cfg, 8);
        assert_eq!(sim.offer(&inv(0, 1, 1, 100)), Placement::Simulated(0));
        sim.detach(0);
        // Node 0 takes a large call (least loaded, first in line), which
        // is for the caller to run: then f1's next call goes to node 1
        // although node 0 ran it last (its instance went when it ended).
        let big0 = inv(10, 2, 2, 900);
        assert_eq!(sim.offer(&big0), Placement::External(0));
        assert_eq!(sim.offer(&inv(500, 1, 1, 100)), Placement::Simulated(1));
        sim.external_done(0, &big0, true);
        // It reports f3 loaded, and has room again: f3 goes there.
        sim.external_loaded(0, vec![(3, 3)]);
        let f3 = inv(600, 3, 3, 100);
        assert_eq!(sim.offer(&f3), Placement::External(0));
        // Refused there, it is placed again, never on node 0.
        sim.external_done(0, &f3, false);
        assert_eq!(sim.retry(&f3, 650, 0), Placement::Simulated(1));
        let big = inv(700, 3, 3, 950);
        assert_eq!(sim.offer(&big), Placement::External(0));
        assert_eq!(
            sim.retry(&big, 700, 0),
            Placement::Rejected,
            "node 1 has no room"
        );
        sim.external_done(0, &big, false);
        // Unloaded, f3 is no longer drawn to node 0 once it is the more
        // loaded of the two.
        sim.external_loaded(0, Vec::new());
        let hold = inv(750, 4, 4, 500);
        assert_eq!(sim.offer(&hold), Placement::External(0));
        assert_eq!(sim.offer(&inv(800, 3, 3, 100)), Placement::Simulated(1));
        sim.external_done(0, &hold, true);
        let r = sim.finish();
        assert_eq!(r.invocations, 7, "retries are not new invocations");
        assert_eq!(r.rejected, 1);
        assert_eq!(r.completed, 6, "four in the model, two real");
    }

    #[test]
    fn a_cluster_without_room_refuses_rather_than_overcommits() {
        let t = synthetic(Synthetic {
            functions: 100,
            hours: 1,
            ..Synthetic::default()
        });
        let r = simulate(
            &t,
            &SimConfig {
                nodes: 1,
                node_mb: 512,
                mode: Colocation::Tenant,
                ..SimConfig::default()
            },
        );
        assert!(
            r.rejected > 0,
            "512 MB cannot take this trace's concurrency"
        );
        assert!(r.completed > 0);
    }
}
