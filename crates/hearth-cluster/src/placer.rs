//! The placer (Hydra §4.1): picks a node for each invocation.
//!
//! It knows, per node, the functions and tenants registered there (those
//! with a live runtime instance) and the memory committed to running work.
//! An invocation goes to a node already holding its function, else one
//! holding its tenant, else the least loaded — always one with room; among
//! several candidates of a kind, the least loaded. With no room anywhere
//! the answer is `None`, which the gateway turns into 429 with
//! `Retry-After`.
//!
//! Memory is not the only thing that runs out: a node may also have a
//! limit on invocations at once (its slots), which counts as room like
//! memory does. A node that refused an invocation anyway (slots taken by
//! work the placer does not see) is marked busy until it frees a slot or
//! reports in; busy nodes are chosen only when no other node has room.

use std::collections::HashMap;

pub use hearth_core::Colocation;

/// Which of the placer's rules chose a node, best first: one already
/// holding the function (a warm instance may take it), one holding its
/// tenant (a runtime the tenant's functions share), or the least loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Function,
    Tenant,
    LeastLoaded,
}

#[derive(Debug, Clone, Default)]
struct NodeState {
    capacity_mib: u64,
    committed_mib: u64,
    /// Invocations it may run at once, if limited, and those running.
    slots: Option<u32>,
    running: u32,
    busy: bool,
}

/// Nodes registered per key, with how many registrations each holds.
type Holders = HashMap<u32, HashMap<usize, u32>>;

#[derive(Debug, Clone, Default)]
pub struct Placer {
    nodes: Vec<NodeState>,
    by_function: Holders,
    by_tenant: Holders,
}

impl Placer {
    /// `nodes` nodes of `capacity_mib` each.
    pub fn new(nodes: usize, capacity_mib: u64) -> Placer {
        Placer {
            nodes: vec![
                NodeState {
                    capacity_mib,
                    ..NodeState::default()
                };
                nodes
            ],
            ..Placer::default()
        }
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Adds a node of `capacity_mib`; returns its index.
    pub fn add_node(&mut self, capacity_mib: u64) -> usize {
        self.nodes.push(NodeState {
            capacity_mib,
            ..NodeState::default()
        });
        self.nodes.len() - 1
    }

    /// A node's capacity changed; 0 takes it out of placement (a node that
    /// left or stopped answering keeps its index).
    pub fn set_capacity(&mut self, node: usize, capacity_mib: u64) {
        self.nodes[node].capacity_mib = capacity_mib;
    }

    /// The node for an invocation of `function` (of `tenant`) that needs
    /// `memory_mib` more, or `None` when no node has room.
    pub fn place(&self, tenant: u32, function: u32, memory_mib: u64) -> Option<usize> {
        self.place_except(tenant, function, memory_mib, None)
    }

    /// As [`place`](Self::place), never choosing `except` (the node a
    /// retried invocation just failed on).
    pub fn place_except(
        &self,
        tenant: u32,
        function: u32,
        memory_mib: u64,
        except: Option<usize>,
    ) -> Option<usize> {
        self.place_by(tenant, function, memory_mib, except)
            .map(|(node, _)| node)
    }

    /// As [`place_except`](Self::place_except), with the rule that chose
    /// the node.
    pub fn place_by(
        &self,
        tenant: u32,
        function: u32,
        memory_mib: u64,
        except: Option<usize>,
    ) -> Option<(usize, Rule)> {
        self.pick(tenant, function, memory_mib, except, false)
            .or_else(|| self.pick(tenant, function, memory_mib, except, true))
    }

    /// Function's node ▸ tenant's node ▸ least loaded, among nodes with
    /// room (and not busy, unless `busy_too`).
    fn pick(
        &self,
        tenant: u32,
        function: u32,
        memory_mib: u64,
        except: Option<usize>,
        busy_too: bool,
    ) -> Option<(usize, Rule)> {
        let fits = |n: usize| {
            let s = &self.nodes[n];
            Some(n) != except
                && (busy_too || !s.busy)
                && s.capacity_mib > 0
                && s.committed_mib + memory_mib <= s.capacity_mib
                && s.slots.is_none_or(|slots| s.running < slots)
        };
        let least = |candidates: &mut dyn Iterator<Item = usize>| {
            candidates
                .filter(|&n| fits(n))
                .min_by_key(|&n| (self.nodes[n].committed_mib, n))
        };
        for (holders, rule) in [
            (self.by_function.get(&function), Rule::Function),
            (self.by_tenant.get(&tenant), Rule::Tenant),
        ] {
            if let Some(found) = holders.and_then(|h| least(&mut h.keys().copied())) {
                return Some((found, rule));
            }
        }
        least(&mut (0..self.nodes.len())).map(|n| (n, Rule::LeastLoaded))
    }

    /// A node's limit on invocations at once (`None`: only memory limits
    /// it).
    pub fn set_slots(&mut self, node: usize, slots: Option<u32>) {
        self.nodes[node].slots = slots;
    }

    /// Invocations placed there and running now.
    pub fn set_running(&mut self, node: usize, running: u32) {
        self.nodes[node].running = running;
    }

    /// A node refused work for want of a slot (`true`), or has freed one
    /// or reported in since (`false`).
    pub fn set_busy(&mut self, node: usize, busy: bool) {
        self.nodes[node].busy = busy;
    }

    /// A node's memory committed to running work changed.
    pub fn set_committed(&mut self, node: usize, mib: u64) {
        self.nodes[node].committed_mib = mib;
    }

    pub fn committed(&self, node: usize) -> u64 {
        self.nodes[node].committed_mib
    }

    /// `function` (of `tenant`) got, or lost, a runtime on `node`.
    pub fn register(&mut self, node: usize, tenant: u32, function: u32) {
        for (map, key) in [
            (&mut self.by_function, function),
            (&mut self.by_tenant, tenant),
        ] {
            *map.entry(key).or_default().entry(node).or_default() += 1;
        }
    }

    pub fn unregister(&mut self, node: usize, tenant: u32, function: u32) {
        for (map, key) in [
            (&mut self.by_function, function),
            (&mut self.by_tenant, tenant),
        ] {
            if let Some(nodes) = map.get_mut(&key) {
                if let Some(c) = nodes.get_mut(&node) {
                    *c -= 1;
                    if *c == 0 {
                        nodes.remove(&node);
                    }
                }
                if nodes.is_empty() {
                    map.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_then_tenant_then_least_loaded_within_capacity() {
        let mut p = Placer::new(3, 1000);
        p.set_committed(0, 100);
        p.set_committed(1, 500);
        p.set_committed(2, 300);
        assert_eq!(
            p.place(7, 70, 100),
            Some(0),
            "nothing registered: least loaded"
        );
        assert_eq!(p.place_by(7, 70, 100, None), Some((0, Rule::LeastLoaded)));
        p.register(2, 7, 71);
        assert_eq!(p.place(7, 70, 100), Some(2), "same tenant");
        assert_eq!(p.place_by(7, 70, 100, None), Some((2, Rule::Tenant)));
        p.register(1, 7, 70);
        assert_eq!(p.place(7, 70, 100), Some(1), "same function first");
        assert_eq!(p.place_by(7, 70, 100, None), Some((1, Rule::Function)));
        assert_eq!(
            p.place(7, 70, 600),
            Some(2),
            "node 1 is full for this: the tenant's other node"
        );
        assert_eq!(p.place(7, 70, 800), Some(0), "only node 0 has room");
        assert_eq!(p.place(7, 70, 950), None, "no room anywhere: 429");
        p.unregister(1, 7, 70);
        assert_eq!(p.place(7, 70, 100), Some(2));
        p.unregister(2, 7, 71);
        assert_eq!(p.place(7, 70, 100), Some(0));
    }

    #[test]
    fn a_node_with_every_slot_taken_has_no_room() {
        let mut p = Placer::new(2, 1000);
        p.register(0, 1, 10);
        p.set_slots(0, Some(2));
        p.set_running(0, 1);
        assert_eq!(p.place(1, 10, 100), Some(0), "one slot left");
        p.set_running(0, 2);
        assert_eq!(p.place(1, 10, 100), Some(1), "its function's node is full");
        p.set_slots(1, Some(0));
        assert_eq!(p.place(1, 10, 100), None, "no slot anywhere: 429");
        p.set_slots(0, None);
        assert_eq!(p.place(1, 10, 100), Some(0), "unlimited");
    }

    #[test]
    fn a_busy_node_is_the_last_resort_until_it_frees_a_slot() {
        let mut p = Placer::new(2, 1000);
        p.register(0, 1, 10);
        p.set_busy(0, true);
        assert_eq!(p.place(1, 10, 100), Some(1), "its function's node is busy");
        p.set_committed(1, 950);
        assert_eq!(
            p.place(1, 10, 100),
            Some(0),
            "no other node has room: the busy one may have a slot by now"
        );
        assert_eq!(p.place_except(1, 10, 100, Some(0)), None);
        p.set_busy(0, false);
        p.set_committed(1, 0);
        assert_eq!(
            p.place(1, 10, 100),
            Some(0),
            "free again: its function's node"
        );
    }

    #[test]
    fn nodes_join_leave_and_retries_avoid_the_failed_node() {
        let mut p = Placer::new(0, 0);
        assert_eq!(p.place(1, 10, 0), None, "no nodes");
        let a = p.add_node(1000);
        let b = p.add_node(1000);
        p.register(a, 1, 10);
        assert_eq!(p.place(1, 10, 100), Some(a));
        assert_eq!(p.place_except(1, 10, 100, Some(a)), Some(b));
        p.set_capacity(a, 0);
        assert_eq!(
            p.place(1, 10, 0),
            Some(b),
            "a node out of placement gets nothing"
        );
        assert_eq!(p.place_except(1, 10, 0, Some(b)), None);
    }
}
