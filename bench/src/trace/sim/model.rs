//! The model of a simulated node (Hydra §5.2): it accounts for time and
//! memory without running code, so the placer can be driven by a whole
//! trace.
//!
//! The node model, stated so its numbers can be argued with:
//!
//! - A node runs **instances** (language runtimes). Which invocations may
//!   share one is the colocation mode: `full` any, `tenant` the tenant's,
//!   `function` the function's (concurrently, one shared heap, like
//!   Knative), `none` one invocation at a time (like OpenWhisk).
//! - Memory: an instance holds `runtime_mb`; in `full` and `tenant` each
//!   running invocation adds a sandbox of its function's size, returned
//!   when it ends (Hydra instances shrink); in `function` and `none` the
//!   instance also holds its function's heap for as long as it lives.
//! - Starts: an invocation that finds an instance it may use starts **hot**
//!   (no cost); else it takes one from the node's **pool** of pre-started
//!   generic instances (`pool_start_ms`), which is refilled in the
//!   background after `cold_start_ms`; else it starts **cold**
//!   (`cold_start_ms`). Latency = start cost + duration.
//! - An idle instance lives a keep-alive drawn between 10 and 20 minutes
//!   (as in Hydra's evaluation), then returns its memory; past
//!   `max_instances` or the node's memory, idle instances go least
//!   recently used first.
//! - The placer sees each node's committed memory (busy instances) and the
//!   functions and tenants with a live instance there.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::RngExt;
use rand::rngs::StdRng;

use hearth_cluster::{Colocation, Placer};

use super::{ModeReport, SimConfig};
use crate::trace::source::Invocation;

#[derive(Debug, Clone)]
pub(super) struct Instance {
    /// The colocation key it serves; `None` while in the pool.
    pub(super) key: Option<u32>,
    pub(super) running: u32,
    /// Memory it holds now.
    pub(super) mb: u64,
    /// Functions registered with the placer through it, with their tenant.
    pub(super) functions: Vec<(u32, u32)>,
    pub(super) idle_since: u64,
}

#[derive(Default)]
pub(super) struct Node {
    pub(super) slots: Vec<Option<Instance>>,
    pub(super) free: Vec<usize>,
    pub(super) by_key: HashMap<u32, Vec<usize>>,
    pub(super) pool: Vec<usize>,
    /// Memory held by every instance, and by busy ones.
    pub(super) held_mb: u64,
    pub(super) busy_mb: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// An invocation ends: node, slot, the memory its sandbox returns.
    End {
        node: usize,
        slot: usize,
        sandbox_mb: u64,
    },
    /// A pool instance finished starting on this node.
    Refill { node: usize },
    /// An instance idle since `since` reaches its keep-alive.
    Expire {
        node: usize,
        slot: usize,
        since: u64,
    },
}

pub(super) struct Sim {
    pub(super) cfg: SimConfig,
    pub(super) placer: Placer,
    pub(super) nodes: Vec<Node>,
    pub(super) events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    pub(super) seq: u64,
    pub(super) rng: StdRng,
    pub(super) held_mb: u64,
    pub(super) last_ms: u64,
    pub(super) mb_ms: f64,
    pub(super) peak_mb: u64,
    pub(super) report: ModeReport,
    pub(super) latencies: Vec<u64>,
    /// Detached nodes ([`Simulation::detach`]): the model starts nothing
    /// there and leaves their committed memory to the caller.
    pub(super) external: Vec<bool>,
}

impl Sim {
    pub(super) fn key(&self, inv: &Invocation) -> u32 {
        match self.cfg.mode {
            Colocation::Full => 0,
            Colocation::Tenant => inv.tenant,
            Colocation::Function | Colocation::None => inv.function,
        }
    }

    /// Memory accounting: integrate what was held up to `now`.
    pub(super) fn advance(&mut self, now: u64) {
        if now > self.last_ms {
            self.mb_ms += self.held_mb as f64 * (now - self.last_ms) as f64;
            self.last_ms = now;
        }
    }

    pub(super) fn change(&mut self, node: usize, held: i64, busy: i64) {
        let n = &mut self.nodes[node];
        n.held_mb = n
            .held_mb
            .checked_add_signed(held)
            .expect("memory accounting");
        n.busy_mb = n
            .busy_mb
            .checked_add_signed(busy)
            .expect("memory accounting");
        self.held_mb = self
            .held_mb
            .checked_add_signed(held)
            .expect("memory accounting");
        self.peak_mb = self.peak_mb.max(self.held_mb);
        if !self.external[node] {
            let busy = self.nodes[node].busy_mb;
            self.placer.set_committed(node, busy);
        }
    }

    pub(super) fn push(&mut self, at: u64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, e)));
    }

    pub(super) fn new_slot(&mut self, node: usize, inst: Instance) -> usize {
        let n = &mut self.nodes[node];
        match n.free.pop() {
            Some(s) => {
                n.slots[s] = Some(inst);
                s
            }
            None => {
                n.slots.push(Some(inst));
                n.slots.len() - 1
            }
        }
    }

    pub(super) fn add_pool_instance(&mut self, node: usize) {
        let slot = self.new_slot(node, Instance::fresh(self.cfg.runtime_mb));
        self.nodes[node].pool.push(slot);
        self.change(node, self.cfg.runtime_mb as i64, 0);
    }

    /// Handles every event up to `now`, sampling memory on the way.
    pub(super) fn run_until(&mut self, now: u64, next_sample: &mut u64) {
        while let Some(&Reverse((at, _, e))) = self.events.peek() {
            if at > now {
                break;
            }
            self.sample_until(at, next_sample);
            self.events.pop();
            self.advance(at);
            match e {
                Event::End {
                    node,
                    slot,
                    sandbox_mb,
                } => self.end(node, slot, sandbox_mb, at),
                Event::Refill { node } if !self.external[node] => self.add_pool_instance(node),
                Event::Refill { .. } => {}
                Event::Expire { node, slot, since } => self.expire(node, slot, since),
            }
        }
        if now != u64::MAX {
            self.sample_until(now, next_sample);
            self.advance(now);
        }
    }

    pub(super) fn sample_until(&mut self, t: u64, next_sample: &mut u64) {
        while *next_sample <= t {
            self.advance(*next_sample);
            self.report
                .memory
                .push((*next_sample as f64 / 1000.0, self.held_mb as f64 / 1024.0));
            *next_sample += self.cfg.sample_ms;
        }
    }

    pub(super) fn evict(&mut self, node: usize, slot: usize) {
        let inst = self.nodes[node].slots[slot]
            .take()
            .expect("a live instance");
        self.nodes[node].free.push(slot);
        if let Some(key) = inst.key
            && let Some(list) = self.nodes[node].by_key.get_mut(&key)
        {
            list.retain(|&s| s != slot);
            if list.is_empty() {
                self.nodes[node].by_key.remove(&key);
            }
        }
        for (tenant, function) in inst.functions {
            self.placer.unregister(node, tenant, function);
        }
        self.change(node, -(inst.mb as i64), 0);
    }

    /// Makes room for `need_mb` more on `node` by evicting idle instances,
    /// least recently used first.
    pub(super) fn make_room(&mut self, node: usize, need_mb: u64, need_slot: bool) {
        loop {
            let n = &self.nodes[node];
            let live = n.slots.len() - n.free.len();
            if n.held_mb + need_mb <= self.cfg.node_mb
                && !(need_slot && live >= self.cfg.max_instances)
            {
                return;
            }
            let lru = n
                .slots
                .iter()
                .enumerate()
                .filter_map(|(s, i)| {
                    i.as_ref()
                        .filter(|i| i.key.is_some() && i.running == 0)
                        .map(|i| (i.idle_since, s))
                })
                .min();
            match lru {
                Some((_, s)) => self.evict(node, s),
                None => return,
            }
        }
    }

    pub(super) fn start(&mut self, node: usize, inv: &Invocation) {
        let key = self.key(inv);
        let sandbox_mb = u64::from(inv.memory_mb);
        let shares = matches!(self.cfg.mode, Colocation::Full | Colocation::Tenant);
        let usable = self.nodes[node].by_key.get(&key).and_then(|list| {
            list.iter().copied().find(|&s| {
                let i = self.nodes[node].slots[s]
                    .as_ref()
                    .expect("listed instances are live");
                self.cfg.mode != Colocation::None || i.running == 0
            })
        });
        let (slot, cost) = match usable {
            Some(s) => {
                self.report.hot += 1;
                (s, 0)
            }
            None => {
                // In `function` and `none` the instance also holds its
                // function's heap for as long as it lives.
                let heap_mb = if shares { 0 } else { sandbox_mb };
                let pooled = !self.nodes[node].pool.is_empty();
                let runtime = if pooled { 0 } else { self.cfg.runtime_mb };
                self.make_room(node, heap_mb + runtime, !pooled);
                let (slot, cost) = match self.nodes[node].pool.pop() {
                    Some(s) => {
                        self.report.from_pool += 1;
                        self.push(
                            inv.start_ms + self.cfg.cold_start_ms,
                            Event::Refill { node },
                        );
                        (s, self.cfg.pool_start_ms)
                    }
                    None => {
                        self.report.cold += 1;
                        let s = self.new_slot(node, Instance::fresh(self.cfg.runtime_mb));
                        self.change(node, self.cfg.runtime_mb as i64, 0);
                        (s, self.cfg.cold_start_ms)
                    }
                };
                let inst = self.nodes[node].slots[slot].as_mut().expect("live");
                inst.key = Some(key);
                inst.mb += heap_mb;
                self.nodes[node].by_key.entry(key).or_default().push(slot);
                self.change(node, heap_mb as i64, 0);
                (slot, cost)
            }
        };
        let add_mb = if shares { sandbox_mb } else { 0 };
        let inst = self.nodes[node].slots[slot].as_mut().expect("live");
        let was_idle = inst.running == 0;
        inst.running += 1;
        inst.mb += add_mb;
        let busy_add = if was_idle { inst.mb } else { add_mb };
        let pair = (inv.tenant, inv.function);
        if !inst.functions.contains(&pair) {
            inst.functions.push(pair);
            self.placer.register(node, inv.tenant, inv.function);
        }
        self.change(node, add_mb as i64, busy_add as i64);
        self.latencies.push(cost + inv.duration_ms);
        let end = inv.start_ms + cost + inv.duration_ms;
        self.push(
            end,
            Event::End {
                node,
                slot,
                sandbox_mb: add_mb,
            },
        );
    }

    pub(super) fn end(&mut self, node: usize, slot: usize, sandbox_mb: u64, now: u64) {
        let keep_alive = self
            .rng
            .random_range(self.cfg.keep_alive_ms.0..=self.cfg.keep_alive_ms.1);
        let inst = self.nodes[node].slots[slot]
            .as_mut()
            .expect("a running instance is live");
        inst.running -= 1;
        inst.mb -= sandbox_mb;
        let idle = inst.running == 0;
        let busy_mb = if idle { inst.mb } else { 0 };
        if idle {
            inst.idle_since = now;
        }
        self.change(node, -(sandbox_mb as i64), -((sandbox_mb + busy_mb) as i64));
        self.report.completed += 1;
        if idle && self.external[node] {
            // A detached node's instances are the real node's business.
            self.evict(node, slot);
        } else if idle {
            self.push(
                now + keep_alive,
                Event::Expire {
                    node,
                    slot,
                    since: now,
                },
            );
        }
    }

    /// An idle instance past its keep-alive returns its memory (unless it
    /// was used, or replaced, since).
    pub(super) fn expire(&mut self, node: usize, slot: usize, since: u64) {
        let still_idle = self.nodes[node].slots[slot]
            .as_ref()
            .is_some_and(|i| i.key.is_some() && i.running == 0 && i.idle_since == since);
        if still_idle {
            self.evict(node, slot);
        }
    }
}

impl Instance {
    pub(super) fn fresh(runtime_mb: u64) -> Instance {
        Instance {
            key: None,
            running: 0,
            mb: runtime_mb,
            functions: Vec::new(),
            idle_since: 0,
        }
    }
}
