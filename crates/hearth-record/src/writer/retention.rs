//! Retention: how long tapes are kept, and who loses tapes when they take
//! too much room.
//!
//! Age is judged a block and function at a time (see [`Writer::sweep`]).
//! Room is judged per tenant ([`Writer::cap`]): the segment files may take
//! at most `max_bytes` in all and a tenant's tapes at most
//! `max_tenant_bytes`; past either, the tenant holding the most (or the
//! one over its quota) loses its oldest tapes, and the tapes of others
//! that shared their segment are moved forward, never deleted with it. So
//! one tenant's flood ages out its own tapes, not its neighbours'.
//!
//! A pinned tape ([`TapePin`]) keeps its block from ageing out while its
//! function exists; it still counts in its tenant's room, so the cap can
//! take it like any other.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::Duration;

use hearth_store::{TapeBlock, TapePin};

use super::Writer;
use crate::RecordError;
use crate::pending::Pending;

impl Writer {
    pub(super) fn sweep_logged(&mut self) {
        if let Err(e) = self.sweep() {
            tracing::warn!(error = %e, "recording retention failed");
        }
    }

    /// How long `row`'s function keeps tapes that succeeded and that
    /// failed: its own settings, or the node's.
    fn keep_for(&mut self, row: &TapeBlock) -> (Duration, Duration) {
        let key = (row.tenant.clone(), row.function.clone());
        let archive = self.archive.clone();
        let policy = *self.policies.entry(key).or_insert_with(|| {
            archive
                .newest_version(&row.tenant, &row.function)
                .ok()
                .flatten()
                .map(|v| v.spec.record)
                .unwrap_or_default()
        });
        let or_default = |s: Option<u64>| s.map_or(self.config.max_age, Duration::from_secs);
        (
            or_default(policy.keep_ok_s),
            or_default(policy.keep_errors_s),
        )
    }

    /// Retention, a block and function at a time (a tape lives as long as
    /// the newest tape of its block, at most one flush interval more):
    /// forget expired rows, or only their successful tapes when failures
    /// are kept longer; delete a closed segment once no row is left, or
    /// once it is older than the node's maximum age (moving forward the
    /// tapes whose function keeps them longer); then [`Writer::cap`].
    pub(super) fn sweep(&mut self) -> Result<(), RecordError> {
        self.policies.clear();
        let now = hearth_core::unix_time_ms();
        let store = self.archive.index().clone();
        let closed: Vec<u64> = self
            .archive
            .segments()?
            .into_iter()
            .filter(|&n| n != self.current.n)
            .collect();
        let age = |ms: i64| Duration::from_millis(now.saturating_sub(ms).max(0) as u64);
        let pins = self.live_pins()?;
        for &n in &closed {
            let (mut gone, mut ok_gone, mut kept) = (Vec::new(), Vec::new(), Vec::new());
            let mut expired = 0;
            for mut row in store.blocks_in_segment(n)? {
                if pins.iter().any(|p| holds(&row, p)) {
                    kept.push(row);
                    continue;
                }
                let (keep_ok, keep_errors) = self.keep_for(&row);
                let ok_expired = row.ok_expired || age(row.last_ms) > keep_ok;
                let errors_expired = row.errors == 0 || age(row.last_ms) > keep_errors;
                if ok_expired && errors_expired {
                    expired += if row.ok_expired {
                        row.errors
                    } else {
                        row.count
                    };
                    gone.push(row);
                } else if ok_expired && !row.ok_expired {
                    expired += row.count - row.errors;
                    row.ok_expired = true;
                    ok_gone.push(row.clone());
                    kept.push(row);
                } else {
                    kept.push(row);
                }
            }
            if !gone.is_empty() || !ok_gone.is_empty() {
                self.stats
                    .expired
                    .fetch_add(expired as u64, Ordering::Relaxed);
                store.expire_blocks(&gone, &ok_gone)?;
            }
            let newest = kept.iter().map(|r| r.last_ms).max().unwrap_or(0);
            if kept.is_empty() {
                self.delete_segment(n)?;
            } else if age(newest) > self.config.max_age {
                // Only tapes kept longer than the node's default are left:
                // move them to the current segment so this one can go.
                let mut moved = Pending::default();
                for r in self.archive.read_rows(&kept)? {
                    moved.push(r.borrowed())?;
                }
                self.write(&mut [moved], Some(n))?;
                self.delete_segment(n)?;
            }
        }
        self.cap()
    }

    /// The pinned tapes whose function still exists; the others are
    /// unpinned (a deleted function's tapes age out as usual).
    fn live_pins(&self) -> Result<Vec<TapePin>, RecordError> {
        let store = self.archive.index();
        let (live, stale): (Vec<TapePin>, Vec<TapePin>) =
            store.tape_pins()?.into_iter().partition(|p| {
                self.archive
                    .newest_version(&p.tenant, &p.function)
                    .map_or(true, |v| v.is_some())
            });
        if !stale.is_empty() {
            store.unpin_tapes(&stale)?;
        }
        Ok(live)
    }

    fn delete_segment(&mut self, n: u64) -> Result<(), RecordError> {
        // Index first: a crash in between leaves an unindexed file, which
        // the next start indexes again and a sweep then judges anew, never
        // an index row pointing at nothing.
        self.archive.index().unindex_segment(n, 0)?;
        match std::fs::remove_file(self.archive.segment_path(n)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Keeps segments within `max_bytes` and each tenant within
    /// `max_tenant_bytes`, taking from whoever holds the most.
    fn cap(&mut self) -> Result<(), RecordError> {
        let mut rotated = false;
        loop {
            let usage = self.usage()?;
            let total: u64 = usage.iter().map(|s| s.file_bytes).sum();
            let mut held: BTreeMap<&str, u64> = BTreeMap::new();
            for s in &usage {
                for (tenant, bytes) in &s.tenants {
                    *held.entry(tenant.as_str()).or_default() += bytes;
                }
            }
            *self.stats.tenant_bytes.lock() =
                held.iter().map(|(t, b)| (t.to_string(), *b)).collect();
            let largest = held.iter().max_by_key(|(_, b)| **b).map(|(t, b)| (*t, *b));
            let victim = match largest {
                Some((t, b)) if b > self.config.max_tenant_bytes => t.to_string(),
                Some((t, _)) if total > self.config.max_bytes => t.to_string(),
                None if total > self.config.max_bytes => {
                    // Nothing indexed, only files: the oldest closed one goes.
                    match usage.iter().find(|s| s.n != self.current.n) {
                        Some(s) => {
                            let n = s.n;
                            self.delete_segment(n)?;
                            continue;
                        }
                        None => return Ok(()),
                    }
                }
                _ => return Ok(()),
            };
            let oldest = usage
                .iter()
                .find(|s| s.n != self.current.n && s.tenants.contains_key(&victim))
                .map(|s| s.n);
            match oldest {
                Some(n) => self.take_from(n, &victim)?,
                // Its tapes are all in the segment being written: close it,
                // once, so that they can be taken.
                None if !rotated => {
                    self.rotate()?;
                    rotated = true;
                }
                None => return Ok(()),
            }
        }
    }

    /// Deletes segment `n` with `tenant`'s tapes in it, moving every other
    /// tenant's forward.
    fn take_from(&mut self, n: u64, tenant: &str) -> Result<(), RecordError> {
        let rows = self.archive.index().blocks_in_segment(n)?;
        let (gone, kept): (Vec<TapeBlock>, Vec<TapeBlock>) =
            rows.into_iter().partition(|r| r.tenant == tenant);
        let lost: u32 = gone
            .iter()
            .map(|r| if r.ok_expired { r.errors } else { r.count })
            .sum();
        tracing::warn!(
            segment = n,
            tenant,
            tapes = lost,
            moved = kept.len(),
            "recordings are over their room; deleting this tenant's oldest"
        );
        if !kept.is_empty() {
            let mut moved = Pending::default();
            for r in self.archive.read_rows(&kept)? {
                moved.push(r.borrowed())?;
            }
            self.write(&mut [moved], Some(n))?;
        }
        self.stats.expired.fetch_add(lost as u64, Ordering::Relaxed);
        let store = self.archive.index();
        let taken: Vec<TapePin> = store
            .tape_pins()?
            .into_iter()
            .filter(|p| gone.iter().any(|r| holds(r, p)))
            .collect();
        if !taken.is_empty() {
            store.unpin_tapes(&taken)?;
        }
        self.delete_segment(n)
    }

    /// Each segment's size and the bytes each tenant holds in it, oldest
    /// segment first. A block is one tenant's and runs from its offset to
    /// the next block's (or the end of the file); blocks whose rows have
    /// expired count for no one until their segment goes.
    fn usage(&self) -> Result<Vec<SegmentUsage>, RecordError> {
        let mut out = Vec::new();
        for n in self.archive.segments()? {
            let file_bytes = if n == self.current.n {
                self.current.len
            } else {
                std::fs::metadata(self.archive.segment_path(n)).map_or(0, |m| m.len())
            };
            let rows = self.archive.index().blocks_in_segment(n)?;
            let owners: BTreeMap<u64, &str> =
                rows.iter().map(|r| (r.offset, r.tenant.as_str())).collect();
            let mut tenants: HashMap<String, u64> = HashMap::new();
            let offsets: Vec<(u64, &str)> = owners.into_iter().collect();
            for (i, (offset, tenant)) in offsets.iter().enumerate() {
                let end = offsets.get(i + 1).map_or(file_bytes, |(next, _)| *next);
                *tenants.entry(tenant.to_string()).or_default() += end.saturating_sub(*offset);
            }
            out.push(SegmentUsage {
                n,
                file_bytes,
                tenants,
            });
        }
        Ok(out)
    }
}

/// Whether block `row` holds pinned tape `p`.
fn holds(row: &TapeBlock, p: &TapePin) -> bool {
    row.tenant == p.tenant
        && row.function == p.function
        && row.first_id.as_str() <= p.id.as_str()
        && p.id.as_str() <= row.last_id.as_str()
}

struct SegmentUsage {
    n: u64,
    file_bytes: u64,
    tenants: HashMap<String, u64>,
}
