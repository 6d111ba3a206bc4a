//! The node's in-memory view of the registry: which version each of a
//! name's aliases means now (`live` for an unpinned call), the versions
//! seen so far (immutable, so safe to keep), and each version's prepared
//! code.
//!
//! ```text
//! tenant ─▶ name ─▶ Entry { aliases: alias ─▶ version, versions: version ─▶ (FunctionVersion, prepared slot) }
//! ```
//! Lookups borrow `&str` keys, so once a version is known an invocation
//! allocates nothing here and never touches the store, pinned or not.
//!
//! Prepared code is kept while it is used: [`FunctionTable::sweep`] drops
//! what has been idle for the keep-alive, so a node holding many functions
//! gives their memory back, and what it reports as loaded (to a gateway's
//! placer) is what it ran lately, not everything it ever ran.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use hearth_core::{FunctionVersion, Tier};
use hearth_host::Prepared;
use tokio::sync::OnceCell;

/// A version's prepared code in each tier that ran it, each filled once
/// (single-flight) on first use. JavaScript has two: the isolate tier and,
/// after a fallback, the process tier.
pub(crate) type PreparedSlot = Arc<TierSlots>;

#[derive(Default)]
pub(crate) struct TierSlots {
    cells: [OnceCell<Arc<dyn Prepared>>; 4],
    /// When an invocation last used it, ms since [`EPOCH`].
    last_used_ms: AtomicU64,
}

/// The table's clock.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

impl TierSlots {
    pub fn get(&self, tier: Tier) -> &OnceCell<Arc<dyn Prepared>> {
        &self.cells[match tier {
            Tier::Wasm => 0,
            Tier::Js => 1,
            Tier::Process => 2,
            // Empty: a compiled module is kept with its plan and trace by
            // the node's compiled path (`node/jit.rs`), which drops it when
            // this slot's other tiers go idle.
            Tier::Compiled => 3,
        }]
    }

    /// An invocation is using it now. Writes at most once a millisecond,
    /// so invocations of a hot version on several cores do not keep
    /// taking the cache line from each other.
    pub fn touch(&self) {
        let now = now_ms();
        if self.last_used_ms.load(Ordering::Relaxed) != now {
            self.last_used_ms.store(now, Ordering::Relaxed);
        }
    }

    fn prepared(&self) -> bool {
        self.cells.iter().any(|cell| cell.initialized())
    }
}

/// Which version a request runs: where one of the function's aliases
/// points, or a version by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin<'a> {
    Alias(&'a str),
    Version(u32),
}

impl Pin<'_> {
    /// What an unpinned request runs.
    pub const LIVE: Pin<'static> = Pin::Alias(hearth_store::LIVE);
}

/// A number pins that version; none is [`Pin::LIVE`].
impl From<Option<u32>> for Pin<'static> {
    fn from(version: Option<u32>) -> Self {
        version.map_or(Pin::LIVE, Pin::Version)
    }
}

impl std::fmt::Display for Pin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pin::Alias(a) => f.write_str(a),
            Pin::Version(v) => write!(f, "{v}"),
        }
    }
}

/// Where an alias points: its version, and a share of calls that goes to
/// another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub version: u32,
    pub split: Option<hearth_store::Split>,
}

impl Target {
    /// The version a call with `draw` (0–99, uniform over calls, or the
    /// same for one caller's key) runs: the split's for draws under its
    /// percent, else the alias's own.
    pub fn choose(&self, draw: u8) -> u32 {
        match self.split {
            Some(s) if draw < s.percent => s.version,
            _ => self.version,
        }
    }
}

#[derive(Default)]
struct Entry {
    /// Where each alias looked up so far points.
    aliases: HashMap<String, Target>,
    versions: HashMap<u32, (Arc<FunctionVersion>, PreparedSlot)>,
}

#[derive(Default)]
pub(crate) struct FunctionTable {
    map: RwLock<HashMap<String, HashMap<String, Entry>>>,
    /// Bumped by every removal, so a fill that read the store before a
    /// removal cannot put back what was removed.
    generation: AtomicU64,
}

impl FunctionTable {
    // The map is a cache: a panic mid-update leaves at worst a stale entry,
    // which the store corrects on the next miss (locks do not poison; see
    // docs/architecture.md).
    fn read(&self) -> RwLockReadGuard<'_, HashMap<String, HashMap<String, Entry>>> {
        self.map.read()
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<String, HashMap<String, Entry>>> {
        self.map.write()
    }

    /// Read before consulting the store; pass to [`insert`](Self::insert).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The version `pin` names of tenant/name, if known; `draw` (0–99)
    /// chooses between an alias's two versions when it splits.
    pub fn get<'p>(
        &self,
        tenant: &str,
        name: &str,
        pin: impl Into<Pin<'p>>,
        draw: u8,
    ) -> Option<Arc<FunctionVersion>> {
        let map = self.read();
        let entry = map.get(tenant)?.get(name)?;
        let v = match pin.into() {
            Pin::Version(v) => v,
            Pin::Alias(alias) => entry.aliases.get(alias)?.choose(draw),
        };
        entry.versions.get(&v).map(|(fv, _)| fv.clone())
    }

    /// Records a version from the store or a deploy, and `alias`, where
    /// an alias points (at it, or at it and another). Skipped if a removal
    /// or a move happened since `generation`.
    pub fn insert(&self, v: Arc<FunctionVersion>, alias: Option<(&str, Target)>, generation: u64) {
        let mut map = self.write();
        if self.generation() != generation {
            return;
        }
        let entry = map
            .entry(v.tenant.clone())
            .or_default()
            .entry(v.name.clone())
            .or_default();
        if let Some((alias, target)) = alias {
            entry.aliases.insert(alias.to_string(), target);
        }
        entry
            .versions
            .entry(v.version)
            .or_insert_with(|| (v, PreparedSlot::default()));
    }

    /// Forgets a function, its versions and their prepared code.
    pub fn remove(&self, tenant: &str, name: &str) {
        let mut map = self.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(fns) = map.get_mut(tenant) {
            fns.remove(name);
        }
    }

    /// Forgets each of the tenant's functions that holds a version for
    /// which `binds` is true, prepared code and all; their names.
    pub fn remove_where(
        &self,
        tenant: &str,
        binds: impl Fn(&FunctionVersion) -> bool,
    ) -> Vec<String> {
        let mut map = self.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        let Some(fns) = map.get_mut(tenant) else {
            return Vec::new();
        };
        let names: Vec<String> = fns
            .iter()
            .filter(|(_, e)| e.versions.values().any(|(v, _)| binds(v)))
            .map(|(name, _)| name.clone())
            .collect();
        for name in &names {
            fns.remove(name);
        }
        names
    }

    /// Forgets where tenant/name's aliases point (it was deployed, or an
    /// alias moved, here or on another member), or every function's with
    /// `None`; the next lookup asks the store. Versions and their prepared
    /// code stay: a version never changes. A fill that read the store
    /// before this is skipped, as after a removal.
    pub fn forget_aliases(&self, function: Option<(&str, &str)>) {
        let mut map = self.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        match function {
            Some((tenant, name)) => {
                if let Some(entry) = map.get_mut(tenant).and_then(|fns| fns.get_mut(name)) {
                    entry.aliases.clear();
                }
            }
            None => {
                for entry in map.values_mut().flat_map(|fns| fns.values_mut()) {
                    entry.aliases.clear();
                }
            }
        }
    }

    /// Functions with some version's code prepared, as (tenant, name):
    /// what this node can run without a cold start.
    pub fn loaded(&self) -> Vec<(String, String)> {
        let map = self.read();
        let mut out = Vec::new();
        for (tenant, fns) in map.iter() {
            for (name, entry) in fns {
                if entry.versions.values().any(|(_, slots)| slots.prepared()) {
                    out.push((tenant.clone(), name.clone()));
                }
            }
        }
        out
    }

    /// Drops the prepared code of versions no invocation has used for
    /// `idle`: its memory goes back (once running invocations, which hold
    /// their own reference, end) and the next invocation prepares it again,
    /// a cold start. Returns how many versions it dropped.
    pub fn sweep(&self, idle: Duration) -> usize {
        let idle_ms = idle.as_millis() as u64;
        let now = now_ms();
        let mut dropped = 0;
        let mut map = self.write();
        for entry in map.values_mut().flat_map(|fns| fns.values_mut()) {
            for (_, slot) in entry.versions.values_mut() {
                let last = slot.last_used_ms.load(Ordering::Relaxed);
                if slot.prepared() && now.saturating_sub(last) >= idle_ms {
                    *slot = PreparedSlot::default();
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Whether `version` of `tenant`'s `name` has code prepared (it was
    /// not idle for the keep-alive at the last [`sweep`](Self::sweep)).
    pub fn prepared(&self, tenant: &str, name: &str, version: u32) -> bool {
        self.read()
            .get(tenant)
            .and_then(|fns| fns.get(name))
            .and_then(|e| e.versions.get(&version))
            .is_some_and(|(_, slot)| slot.prepared())
    }

    /// The prepared-code slot of `v`. A version no longer in the table (its
    /// function was removed mid-invocation) gets a slot that is not kept.
    pub fn slot(&self, v: &FunctionVersion) -> PreparedSlot {
        self.read()
            .get(&v.tenant)
            .and_then(|fns| fns.get(&v.name))
            .and_then(|e| e.versions.get(&v.version))
            .map(|(_, slot)| slot.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_core::{FunctionSpec, Runtime};

    /// An alias pointing at `version` alone.
    fn to(alias: &str, version: u32) -> Option<(&str, Target)> {
        Some((
            alias,
            Target {
                version,
                split: None,
            },
        ))
    }

    fn v(version: u32) -> Arc<FunctionVersion> {
        Arc::new(FunctionVersion {
            tenant: "t".into(),
            name: "f".into(),
            version,
            artifact: String::new(),
            spec: FunctionSpec::new(Runtime::Wasm),
            created_at_ms: 0,
        })
    }

    #[test]
    fn live_aliased_and_pinned_versions_are_served_from_memory() {
        let t = FunctionTable::default();
        let g = t.generation();
        t.insert(v(2), to("live", 2), g);
        t.insert(v(1), None, g);
        t.insert(v(3), to("canary", 3), g);
        assert_eq!(t.get("t", "f", None, 0).map(|v| v.version), Some(2));
        assert_eq!(
            t.get("t", "f", Pin::Alias("canary"), 0).map(|v| v.version),
            Some(3)
        );
        assert!(
            t.get("t", "f", Pin::Alias("staging"), 0).is_none(),
            "asks the store"
        );
        // A rollback moves live back: the table says what it was told.
        t.insert(v(1), to("live", 1), g);
        assert_eq!(t.get("t", "f", None, 0).map(|v| v.version), Some(1));
        assert_eq!(t.get("t", "f", Some(1), 0).map(|v| v.version), Some(1));
        assert!(t.get("t", "f", Some(4), 0).is_none());
        // A split: draws under its percent run the other version.
        let split = Target {
            version: 1,
            split: Some(hearth_store::Split {
                version: 2,
                percent: 5,
            }),
        };
        t.insert(v(2), Some(("live", split)), g);
        let chosen: Vec<u32> = [0, 4, 5, 99]
            .iter()
            .map(|&d| t.get("t", "f", None, d).unwrap().version)
            .collect();
        assert_eq!(chosen, [2, 2, 1, 1]);
        assert!(
            Arc::ptr_eq(&t.slot(&v(2)), &t.slot(&v(2))),
            "one slot per version"
        );
    }

    #[tokio::test]
    async fn prepared_code_idle_for_the_keep_alive_is_dropped() {
        let t = FunctionTable::default();
        t.insert(v(1), to("live", 1), t.generation());
        assert!(t.loaded().is_empty(), "known, not prepared");
        let slot = t.slot(&v(1));
        slot.get(Tier::Wasm)
            .get_or_init(|| async { Arc::new(Nothing) as Arc<dyn Prepared> })
            .await;
        slot.touch();
        assert_eq!(t.loaded(), [("t".to_string(), "f".to_string())]);
        assert_eq!(t.sweep(Duration::from_secs(60)), 0, "used just now");
        assert_eq!(t.loaded().len(), 1);
        assert_eq!(t.sweep(Duration::ZERO), 1);
        assert!(t.loaded().is_empty(), "no longer reported as loaded");
        assert!(
            t.slot(&v(1)).get(Tier::Wasm).get().is_none(),
            "the next invocation prepares it again"
        );
        assert!(
            slot.get(Tier::Wasm).get().is_some(),
            "an invocation holding the old slot keeps its code"
        );
        assert_eq!(t.get("t", "f", None, 0).map(|v| v.version), Some(1));
    }

    /// Prepared code that runs nothing, for the table's own tests.
    struct Nothing;

    #[async_trait::async_trait]
    impl Prepared for Nothing {
        async fn instantiate(
            &self,
        ) -> Result<Box<dyn hearth_host::Sandbox>, hearth_core::InvokeError> {
            Err(hearth_core::InvokeError::Overloaded)
        }
    }

    #[test]
    fn a_fill_that_raced_a_removal_is_dropped() {
        let t = FunctionTable::default();
        let before = t.generation();
        t.insert(v(1), to("live", 1), before);
        t.remove("t", "f");
        assert!(t.get("t", "f", None, 0).is_none());
        t.insert(v(1), to("live", 1), before); // read from the store before the removal
        assert!(t.get("t", "f", None, 0).is_none());
        assert!(
            !Arc::ptr_eq(&t.slot(&v(1)), &t.slot(&v(1))),
            "removed versions are not cached"
        );
    }

    #[test]
    fn a_change_forgets_the_aliases_but_keeps_versions() {
        let t = FunctionTable::default();
        let before = t.generation();
        t.insert(v(1), to("live", 1), before);
        let slot = t.slot(&v(1));
        t.forget_aliases(Some(("t", "f")));
        assert!(
            t.get("t", "f", None, 0).is_none(),
            "the store is asked again"
        );
        assert_eq!(t.get("t", "f", Some(1), 0).map(|v| v.version), Some(1));
        assert!(Arc::ptr_eq(&slot, &t.slot(&v(1))), "prepared code stays");
        // A lookup that read the store before the change cannot put back
        // the alias it read.
        t.insert(v(1), to("live", 1), before);
        assert!(t.get("t", "f", None, 0).is_none());
        t.insert(v(2), to("live", 2), t.generation());
        assert_eq!(t.get("t", "f", None, 0).map(|v| v.version), Some(2));
        t.forget_aliases(None);
        assert!(t.get("t", "f", None, 0).is_none(), "a resync forgets all");
    }
}
