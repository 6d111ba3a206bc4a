//! Each function's last hour, a minute at a time: invocations, errors,
//! refusals and a latency histogram, for the console's charts (`/v1/stats`). Kept in
//! memory on the node that ran them (tapes may be sampled; these count
//! every invocation), and saved to the data directory each minute and at
//! a clean stop ([`Stats::save`]), so a restart picks up the hour it had
//! (less at most the minute before a crash).
//!
//! Bounded: at most [`MINUTES`] minutes per function, each a fixed array;
//! a function's series go when it is removed here, and a tenant's series
//! with nothing in the last hour go when it starts a new one (a node of a
//! cluster hears of removals only as "something changed").

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Minutes kept per function.
pub const MINUTES: usize = 60;

/// Upper bounds of the latency buckets, µs: doubling from 100 µs to about
/// 14 minutes, then everything slower.
const BOUNDS_US: [u64; 24] = {
    let mut b = [0u64; 24];
    let mut i = 0;
    let mut v = 100;
    while i < 24 {
        b[i] = v;
        v *= 2;
        i += 1;
    }
    b
};

#[derive(Clone)]
struct Minute {
    /// Minutes since the Unix epoch.
    at: i64,
    count: u32,
    errors: u32,
    /// Invocations refused at admission (not in `count`).
    refused: u32,
    /// Invocations per bucket of [`BOUNDS_US`], and past the last.
    buckets: [u32; BOUNDS_US.len() + 1],
}

/// One minute of one function, as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MinuteStats {
    /// The minute's start, ms since the Unix epoch.
    pub t_ms: i64,
    pub count: u32,
    pub errors: u32,
    /// Invocations refused at admission: they ran nothing, and are not in
    /// `count`, `errors` or the quantiles.
    pub refused: u32,
    /// Estimated from the histogram (the bucket's upper bound, at most
    /// twice the true value), ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Every function's minutes: tenant → function → newest last.
#[derive(Default)]
pub struct Stats(Mutex<HashMap<String, HashMap<String, VecDeque<Minute>>>>);

impl Stats {
    /// Counts one invocation of `tenant`'s `function` ending at `now_ms`.
    pub fn add(&self, tenant: &str, function: &str, now_ms: i64, duration_us: u64, ok: bool) {
        let bucket = BOUNDS_US.partition_point(|&b| b < duration_us);
        self.at(tenant, function, now_ms, |m| {
            m.count += 1;
            m.errors += u32::from(!ok);
            m.buckets[bucket] += 1;
        });
    }

    /// Counts one invocation of `tenant`'s `function` refused at admission
    /// at `now_ms`: apart from those that ran and their latency.
    pub fn refused(&self, tenant: &str, function: &str, now_ms: i64) {
        self.at(tenant, function, now_ms, |m| m.refused += 1);
    }

    /// Changes the minute of `now_ms` of `tenant`'s `function` with `change`.
    fn at(&self, tenant: &str, function: &str, now_ms: i64, change: impl FnOnce(&mut Minute)) {
        let minute = now_ms.div_euclid(60_000);
        let mut all = self.0.lock();
        // Borrowed lookups first: the common case allocates nothing.
        let series = match all.get_mut(tenant).and_then(|t| t.get_mut(function)) {
            Some(s) => s,
            None => {
                let functions = all.entry(tenant.to_string()).or_default();
                let oldest = minute - MINUTES as i64 + 1;
                functions.retain(|_, s| s.back().is_some_and(|m| m.at >= oldest));
                functions.entry(function.to_string()).or_default()
            }
        };
        if series.back().is_none_or(|m| m.at != minute) {
            if series.len() == MINUTES {
                series.pop_front();
            }
            series.push_back(Minute {
                at: minute,
                count: 0,
                errors: 0,
                refused: 0,
                buckets: [0; BOUNDS_US.len() + 1],
            });
        }
        change(series.back_mut().expect("just pushed"));
    }

    /// `tenant`'s functions' minutes within the hour before `now_ms`,
    /// oldest first (minutes without invocations are left out).
    pub fn of(&self, tenant: &str, now_ms: i64) -> HashMap<String, Vec<MinuteStats>> {
        let oldest = now_ms.div_euclid(60_000) - MINUTES as i64 + 1;
        let all = self.0.lock();
        let Some(functions) = all.get(tenant) else {
            return HashMap::new();
        };
        functions
            .iter()
            .map(|(name, series)| {
                let minutes = series
                    .iter()
                    .filter(|m| m.at >= oldest)
                    .map(|m| MinuteStats {
                        t_ms: m.at * 60_000,
                        count: m.count,
                        errors: m.errors,
                        refused: m.refused,
                        p50_ms: quantile(&m.buckets, m.count, 0.50),
                        p99_ms: quantile(&m.buckets, m.count, 0.99),
                    })
                    .collect();
                (name.clone(), minutes)
            })
            .collect()
    }

    /// Every minute within the hour before `now_ms`, to keep across a
    /// restart.
    fn snapshot(&self, now_ms: i64) -> Vec<Saved> {
        let oldest = now_ms.div_euclid(60_000) - MINUTES as i64 + 1;
        let all = self.0.lock();
        let mut saved = Vec::new();
        for (tenant, functions) in all.iter() {
            for (function, series) in functions {
                let minutes: Vec<SavedMinute> = series
                    .iter()
                    .filter(|m| m.at >= oldest)
                    .map(|m| SavedMinute {
                        at: m.at,
                        count: m.count,
                        errors: m.errors,
                        refused: m.refused,
                        buckets: m.buckets.to_vec(),
                    })
                    .collect();
                if !minutes.is_empty() {
                    saved.push(Saved {
                        tenant: tenant.clone(),
                        function: function.clone(),
                        minutes,
                    });
                }
            }
        }
        saved
    }

    /// Writes the last hour to `path` (whole or not at all).
    pub fn save(&self, path: &std::path::Path, now_ms: i64) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(&self.snapshot(now_ms)).map_err(std::io::Error::other)?;
        hearth_store::write_secret(path, &bytes).map_err(std::io::Error::other)
    }

    /// Takes up the minutes [`save`](Self::save) wrote to `path` that are
    /// still within the hour before `now_ms`, added to what is counted
    /// here already; how many series it read. A missing file is none; one that
    /// does not read as saved minutes is skipped (and said so).
    pub fn load(&self, path: &std::path::Path, now_ms: i64) -> Result<usize, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let saved: Vec<Saved> = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not saved stats: {e}", path.display()))?;
        let oldest = now_ms.div_euclid(60_000) - MINUTES as i64 + 1;
        let mut all = self.0.lock();
        let mut series_read = 0;
        for s in saved {
            let series = all
                .entry(s.tenant)
                .or_default()
                .entry(s.function)
                .or_default();
            let minutes = s
                .minutes
                .into_iter()
                .filter(|m| m.at >= oldest && m.buckets.len() == BOUNDS_US.len() + 1)
                .map(|m| Minute {
                    at: m.at,
                    count: m.count,
                    errors: m.errors,
                    refused: m.refused,
                    buckets: m.buckets.try_into().expect("checked the length"),
                });
            // In order by minute; a minute also counted since the start
            // (the one the restart fell in) adds up.
            for m in minutes {
                match series.iter_mut().find(|x| x.at == m.at) {
                    Some(x) => {
                        x.count += m.count;
                        x.errors += m.errors;
                        x.refused += m.refused;
                        for (b, n) in x.buckets.iter_mut().zip(m.buckets) {
                            *b += n;
                        }
                    }
                    None => {
                        let i = series.partition_point(|x| x.at < m.at);
                        series.insert(i, m);
                    }
                }
            }
            while series.len() > MINUTES {
                series.pop_front();
            }
            series_read += 1;
        }
        Ok(series_read)
    }

    /// Forgets a removed function's minutes.
    pub fn forget(&self, tenant: &str, function: &str) {
        let mut all = self.0.lock();
        if let Some(t) = all.get_mut(tenant) {
            t.remove(function);
            if t.is_empty() {
                all.remove(tenant);
            }
        }
    }
}

/// One function's minutes as [`Stats::save`] writes them.
#[derive(Serialize, Deserialize)]
struct Saved {
    tenant: String,
    function: String,
    minutes: Vec<SavedMinute>,
}

#[derive(Serialize, Deserialize)]
struct SavedMinute {
    at: i64,
    count: u32,
    errors: u32,
    refused: u32,
    buckets: Vec<u32>,
}

/// The upper bound of the bucket holding the `q` quantile, ms.
fn quantile(buckets: &[u32], count: u32, q: f64) -> f64 {
    let rank = ((f64::from(count) * q).ceil() as u64).max(1);
    let mut seen = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        seen += u64::from(n);
        if seen >= rank {
            // Past the last bound: report the last bound (a floor).
            let us = BOUNDS_US[i.min(BOUNDS_US.len() - 1)];
            return us as f64 / 1000.0;
        }
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_count_errors_and_bound_their_quantiles() {
        let s = Stats::default();
        // A minute's start (a multiple of 60,000 ms).
        let t0 = 30_000_000 * 60_000i64;
        // 99 fast (150 µs) and one slow (30 ms) in the first minute.
        for _ in 0..99 {
            s.add("a", "f", t0 + 10, 150, true);
        }
        s.add("a", "f", t0 + 20, 30_000, false);
        s.refused("a", "f", t0 + 30);
        s.add("a", "f", t0 + 60_000, 150, true);
        let of = s.of("a", t0 + 60_000);
        let f = &of["f"];
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].count, f[0].errors, f[0].refused), (100, 1, 1));
        // 150 µs is in the (100, 200] bucket; the 99th of 100 too.
        assert_eq!(f[0].p50_ms, 0.2);
        assert_eq!(f[0].p99_ms, 0.2);
        assert_eq!(f[1].t_ms, t0 + 60_000);
        assert!(s.of("b", t0).is_empty(), "another tenant sees nothing");
    }

    #[test]
    fn an_hour_is_kept_and_no_more() {
        let s = Stats::default();
        for m in 0..200i64 {
            s.add("a", "f", m * 60_000, 1000, true);
        }
        let of = s.of("a", 199 * 60_000);
        assert_eq!(of["f"].len(), MINUTES);
        assert_eq!(of["f"][0].t_ms, (200 - MINUTES as i64) * 60_000);
        s.forget("a", "f");
        assert!(s.of("a", 199 * 60_000).is_empty());
    }

    #[test]
    fn the_last_hour_is_saved_and_taken_up_again_under_what_came_since() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stats.json");
        let t0 = 30_000_000 * 60_000i64;
        let before = Stats::default();
        before.add("a", "f", t0 - 90 * 60_000, 150, true); // over an hour old
        for _ in 0..3 {
            before.add("a", "f", t0, 150, true);
        }
        before.add("a", "f", t0, 30_000, false);
        before.refused("a", "f", t0);
        before.add("b", "g", t0 + 60_000, 150, true);
        before.save(&path, t0 + 60_000).unwrap();

        // After the restart, one more call in the same minute as the last
        // saved one: the two add up.
        let after = Stats::default();
        after.add("b", "g", t0 + 60_000, 150, true);
        assert_eq!(after.load(&path, t0 + 120_000), Ok(2));
        let a = &after.of("a", t0 + 120_000)["f"];
        assert_eq!(a.len(), 1, "the hour-old minute is dropped");
        assert_eq!((a[0].count, a[0].errors, a[0].refused), (4, 1, 1));
        assert_eq!(a[0].p99_ms, before.of("a", t0 + 60_000)["f"][0].p99_ms);
        let g = &after.of("b", t0 + 120_000)["g"];
        assert_eq!((g.len(), g[0].count), (1, 2), "saved, and counted since");
        assert_eq!(after.load(&dir.path().join("none"), t0), Ok(0));
        std::fs::write(&path, b"not stats").unwrap();
        assert!(after.load(&path, t0).is_err());
    }

    #[test]
    fn a_new_series_sweeps_the_tenants_idle_ones() {
        let s = Stats::default();
        s.add("a", "idle", 0, 1000, true);
        s.add("b", "other", 0, 1000, true);
        // Two hours later, a's first invocation of another function.
        s.add("a", "busy", 120 * 60_000, 1000, true);
        let a = s.0.lock();
        assert!(!a["a"].contains_key("idle"), "an hour without invocations");
        assert!(a["a"].contains_key("busy"));
        assert!(
            a["b"].contains_key("other"),
            "other tenants are theirs to sweep"
        );
    }
}
