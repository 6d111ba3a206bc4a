//! Invocation traces: the Azure Functions traces in both published layouts,
//! and a synthetic day with their published shape.
//!
//! - **2021** (`app,func,end_timestamp,duration`, seconds): one row per
//!   invocation; start = end − duration. The tenant is the app. The trace
//!   has no memory column: each function gets a size from the 2019
//!   distribution (see [`memory_for`]).
//! - **2019** (a directory): `invocations*.csv` holds per-minute counts
//!   (`HashOwner,HashApp,HashFunction,Trigger,1..1440`), `durations*.csv`
//!   duration percentiles in ms, `memory*.csv` allocated-memory figures per
//!   function or per app (the published file has no `HashFunction`). A
//!   minute's invocations are spread evenly over it, with jitter; durations
//!   are drawn from the function's percentiles. The tenant is the owner.
//! - **Synthetic** ([`synthetic`]): the shape Shahrad et al. (ATC '20)
//!   published for the 2019 trace — rates spread over eight orders of
//!   magnitude, most functions rare, a diurnal swing, sub-second median
//!   durations, a median app of 170 MB.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[derive(Debug, displaydoc::Display, thiserror::Error)]
pub enum TraceError {
    /// cannot read {0}: {1}
    Io(PathBuf, std::io::Error),
    /// {0}: {1}
    Csv(PathBuf, csv::Error),
    /// {0}: {1}
    Format(PathBuf, String),
    /// {0}
    TooLarge(String),
}

/// One invocation to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invocation {
    /// Milliseconds since the trace's first invocation.
    pub start_ms: u64,
    pub duration_ms: u64,
    /// Indexes into [`Trace::tenants`] and [`Trace::functions`].
    pub tenant: u32,
    pub function: u32,
    /// The function's memory size.
    pub memory_mb: u32,
}

/// A whole trace, sorted by start time, names interned.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    pub invocations: Vec<Invocation>,
    pub tenants: Vec<String>,
    pub functions: Vec<String>,
}

/// Refuses to expand a 2019 trace past this many invocations in memory:
/// the full published day is far larger; `minutes` picks a window.
pub const MAX_INVOCATIONS: usize = 50_000_000;

impl Trace {
    /// Reads a trace: a 2021 CSV file, or a directory in the 2019 layout
    /// (only `minutes`, 1-based and inclusive, of its day).
    pub fn load(path: &Path, minutes: Option<(u32, u32)>) -> Result<Trace, TraceError> {
        if path.is_dir() {
            load_2019(path, minutes)
        } else {
            load_2021(path)
        }
    }

    /// How long the trace lasts, to the last invocation's end.
    pub fn span_ms(&self) -> u64 {
        self.invocations
            .iter()
            .map(|i| i.start_ms + i.duration_ms)
            .max()
            .unwrap_or(0)
    }

    fn intern(names: &mut Vec<String>, index: &mut HashMap<String, u32>, name: &str) -> u32 {
        if let Some(&i) = index.get(name) {
            return i;
        }
        let i = names.len() as u32;
        names.push(name.to_string());
        index.insert(name.to_string(), i);
        i
    }

    fn finish(mut self) -> Trace {
        self.invocations.sort_by_key(|i| (i.start_ms, i.function));
        if let Some(first) = self.invocations.first().map(|i| i.start_ms) {
            for i in &mut self.invocations {
                i.start_ms -= first;
            }
        }
        self
    }
}

/// A function's memory size when the trace does not say: drawn once per
/// function (seeded by its name) from the 2019 trace's app distribution
/// (median 170 MB, 90% at most 400 MB), rounded up to 32 MB.
pub fn memory_for(function: &str) -> u32 {
    let seed = function.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = StdRng::seed_from_u64(seed);
    lognormal_mb(&mut rng)
}

fn lognormal_mb(rng: &mut StdRng) -> u32 {
    let mb = 170.0 * (0.667 * normal(rng)).exp();
    (mb.clamp(64.0, 2048.0) / 32.0).ceil() as u32 * 32
}

/// A standard normal sample (Box–Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u: f64 = rng.random_range(f64::EPSILON..1.0);
    let v: f64 = rng.random_range(0.0..1.0);
    (-2.0f64 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

fn reader(path: &Path) -> Result<csv::Reader<std::fs::File>, TraceError> {
    let file = std::fs::File::open(path).map_err(|e| TraceError::Io(path.into(), e))?;
    Ok(csv::ReaderBuilder::new().flexible(true).from_reader(file))
}

/// A small CSV whole: its header and rows (the per-function tables of the
/// 2019 layout; the invocation counts are streamed instead).
fn table(path: &Path) -> Result<(csv::StringRecord, Vec<csv::StringRecord>), TraceError> {
    let mut rd = reader(path)?;
    let csv_err = |e| TraceError::Csv(path.into(), e);
    let headers = rd.headers().map_err(csv_err)?.clone();
    let rows = rd.records().collect::<Result<_, _>>().map_err(csv_err)?;
    Ok((headers, rows))
}

fn load_2021(path: &Path) -> Result<Trace, TraceError> {
    let mut rd = reader(path)?;
    let headers = rd
        .headers()
        .map_err(|e| TraceError::Csv(path.into(), e))?
        .clone();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            TraceError::Format(
                path.into(),
                format!("no {name:?} column (expected app,func,end_timestamp,duration)"),
            )
        })
    };
    let (app, func, end, dur) = (
        col("app")?,
        col("func")?,
        col("end_timestamp")?,
        col("duration")?,
    );
    let mut t = Trace::default();
    let (mut tenants, mut functions) = (HashMap::new(), HashMap::new());
    let mut sizes: HashMap<u32, u32> = HashMap::new();
    let mut starts = Vec::new();
    for (line, row) in rd.records().enumerate() {
        let row = row.map_err(|e| TraceError::Csv(path.into(), e))?;
        let num = |i: usize| -> Result<f64, TraceError> {
            row.get(i)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    TraceError::Format(
                        path.into(),
                        format!("line {}: not a time in seconds", line + 2),
                    )
                })
        };
        let (end_s, dur_s) = (num(end)?, num(dur)?);
        let app_name = row.get(app).unwrap_or_default();
        let name = format!("{app_name}/{}", row.get(func).unwrap_or_default());
        let tenant = Trace::intern(&mut t.tenants, &mut tenants, app_name);
        let function = Trace::intern(&mut t.functions, &mut functions, &name);
        let memory_mb = *sizes.entry(function).or_insert_with(|| memory_for(&name));
        starts.push(((end_s - dur_s).max(0.0) * 1000.0) as u64);
        t.invocations.push(Invocation {
            start_ms: 0,
            duration_ms: (dur_s * 1000.0).round().max(1.0) as u64,
            tenant,
            function,
            memory_mb,
        });
    }
    for (i, s) in t.invocations.iter_mut().zip(starts) {
        i.start_ms = s;
    }
    Ok(t.finish())
}

/// The file in `dir` whose name contains `part` (`invocations`, …).
fn find(dir: &Path, part: &str) -> Result<Option<PathBuf>, TraceError> {
    let entries = std::fs::read_dir(dir).map_err(|e| TraceError::Io(dir.into(), e))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(part) && n.ends_with(".csv"))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().next())
}

/// Percentile points (p, value) of a 2019 row, in order of p.
fn percentiles(
    headers: &csv::StringRecord,
    row: &csv::StringRecord,
    prefix: &str,
) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = headers
        .iter()
        .zip(row.iter())
        .filter_map(|(h, v)| {
            let p = h
                .strip_prefix(prefix)?
                .trim_start_matches('_')
                .parse::<f64>()
                .ok()?;
            Some((p, v.trim().parse::<f64>().ok()?))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// A draw from a distribution given by percentile points (linear between).
fn sample(points: &[(f64, f64)], rng: &mut StdRng) -> f64 {
    let q = rng.random_range(0.0..100.0);
    for w in points.windows(2) {
        let ((p0, v0), (p1, v1)) = (w[0], w[1]);
        if q <= p1 {
            return if p1 > p0 {
                v0 + (v1 - v0) * (q - p0) / (p1 - p0)
            } else {
                v1
            };
        }
    }
    points.last().map_or(100.0, |p| p.1)
}

fn load_2019(dir: &Path, minutes: Option<(u32, u32)>) -> Result<Trace, TraceError> {
    let inv_path = find(dir, "invocations")?.ok_or_else(|| {
        TraceError::Format(dir.into(), "no invocations*.csv in this directory".into())
    })?;
    // Durations: percentiles per function.
    let mut durations: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    if let Some(p) = find(dir, "durations")? {
        let (h, rows) = table(&p)?;
        for row in rows {
            let key = format!(
                "{}/{}",
                row.get(1).unwrap_or_default(),
                row.get(2).unwrap_or_default()
            );
            durations.insert(key, percentiles(&h, &row, "percentile_Average"));
        }
    }
    // Memory: the average allocated MB, per function or per app.
    let mut memory: HashMap<String, u32> = HashMap::new();
    if let Some(p) = find(dir, "memory")? {
        let (h, rows) = table(&p)?;
        let avg = h.iter().position(|c| c == "AverageAllocatedMb");
        let per_function = h.iter().any(|c| c == "HashFunction");
        for row in rows {
            let Some(mb) = avg
                .and_then(|i| row.get(i))
                .and_then(|v| v.trim().parse::<f64>().ok())
            else {
                continue;
            };
            let key = if per_function {
                format!(
                    "{}/{}",
                    row.get(1).unwrap_or_default(),
                    row.get(2).unwrap_or_default()
                )
            } else {
                row.get(1).unwrap_or_default().to_string()
            };
            memory.insert(key, (mb.ceil() as u32).max(1));
        }
    }
    let mut rd = reader(&inv_path)?;
    let h = rd
        .headers()
        .map_err(|e| TraceError::Csv(inv_path.clone(), e))?
        .clone();
    let minute_cols: Vec<(usize, u32)> = h
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, c.parse::<u32>().ok()?)))
        .filter(|(_, m)| minutes.is_none_or(|(a, b)| (a..=b).contains(m)))
        .collect();
    if minute_cols.is_empty() {
        return Err(TraceError::Format(
            inv_path,
            "no minute columns (1..1440) in range".into(),
        ));
    }
    let mut t = Trace::default();
    let (mut tenants, mut functions) = (HashMap::new(), HashMap::new());
    let mut rng = StdRng::seed_from_u64(2019);
    for row in rd.records() {
        let row = row.map_err(|e| TraceError::Csv(inv_path.clone(), e))?;
        let (owner, app, func) = (
            row.get(0).unwrap_or_default(),
            row.get(1).unwrap_or_default(),
            row.get(2).unwrap_or_default(),
        );
        let name = format!("{app}/{func}");
        let tenant = Trace::intern(&mut t.tenants, &mut tenants, owner);
        let function = Trace::intern(&mut t.functions, &mut functions, &name);
        let memory_mb = memory
            .get(&name)
            .or_else(|| memory.get(app))
            .copied()
            .unwrap_or_else(|| memory_for(&name));
        let dist = durations.get(&name);
        for &(col, minute) in &minute_cols {
            let count: u64 = row
                .get(col)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if t.invocations.len() as u64 + count > MAX_INVOCATIONS as u64 {
                return Err(TraceError::TooLarge(format!(
                    "this trace expands past {MAX_INVOCATIONS} invocations; pick a window with --minutes A-B"
                )));
            }
            let base = u64::from(minute - 1) * 60_000;
            let slot = (60_000 / count.max(1)).max(1);
            for k in 0..count {
                let start_ms = base + k * slot + rng.random_range(0..slot);
                let duration_ms = dist
                    .map_or(1000.0, |d| sample(d, &mut rng))
                    .round()
                    .max(1.0) as u64;
                t.invocations.push(Invocation {
                    start_ms,
                    duration_ms,
                    tenant,
                    function,
                    memory_mb,
                });
            }
        }
    }
    Ok(t.finish())
}

/// What a synthetic trace looks like.
#[derive(Debug, Clone, Copy)]
pub struct Synthetic {
    pub functions: u32,
    pub hours: u32,
    /// No function is invoked more often than this per minute (the real
    /// trace's head goes past 10^4; capping keeps a day in memory).
    pub max_per_minute: f64,
    pub seed: u64,
}

impl Default for Synthetic {
    fn default() -> Self {
        Synthetic {
            functions: 500,
            hours: 24,
            max_per_minute: 120.0,
            seed: 1,
        }
    }
}

/// A synthetic trace with the 2019 trace's published shape (Shahrad et al.,
/// ATC '20): log10 of a function's rate per minute ~ N(−1.5, 1.6), so about
/// 45% of functions run at most hourly and 83% at most once a minute; a
/// diurnal swing of ±50%; a third of functions on timers (evenly spaced),
/// the rest Poisson; median duration per function log-normal around 1 s
/// (about 84% under 10 s), each invocation ±50% around it; memory per app
/// log-normal, median 170 MB; functions per tenant geometric (half the
/// tenants have one).
pub fn synthetic(s: Synthetic) -> Trace {
    let mut rng = StdRng::seed_from_u64(s.seed);
    let mut t = Trace::default();
    let span_ms = u64::from(s.hours) * 3_600_000;
    let mut tenant = 0u32;
    let mut left_in_tenant = 0u32;
    let mut tenant_mb = 0;
    for f in 0..s.functions {
        if left_in_tenant == 0 {
            tenant = t.tenants.len() as u32;
            t.tenants.push(format!("tenant-{tenant}"));
            left_in_tenant = 1;
            while left_in_tenant < 50 && rng.random_bool(0.5) {
                left_in_tenant += 1;
            }
            tenant_mb = lognormal_mb(&mut rng);
        }
        left_in_tenant -= 1;
        t.functions.push(format!("tenant-{tenant}/fn-{f}"));
        let per_minute = 10f64
            .powf(-1.5 + 1.6 * normal(&mut rng))
            .min(s.max_per_minute);
        let median_ms = 10f64.powf(3.0 + normal(&mut rng)).clamp(1.0, 600_000.0);
        let timer = rng.random_bool(1.0 / 3.0);
        let mean_gap_ms = 60_000.0 / per_minute;
        let mut at = rng.random_range(0.0..mean_gap_ms.min(span_ms as f64));
        while (at as u64) < span_ms {
            // The diurnal swing thins arrivals at night.
            let hour = at / 3_600_000.0;
            let level = 1.0 + 0.5 * (std::f64::consts::TAU * (hour - 9.0) / 24.0).sin();
            if rng.random_bool((level / 1.5).clamp(0.0, 1.0)) {
                let jitter = (0.5 * normal(&mut rng)).exp();
                t.invocations.push(Invocation {
                    start_ms: at as u64,
                    duration_ms: (median_ms * jitter).round().max(1.0) as u64,
                    tenant,
                    function: f,
                    memory_mb: tenant_mb,
                });
            }
            at += if timer {
                mean_gap_ms / 1.5
            } else {
                -(mean_gap_ms / 1.5) * rng.random_range(f64::EPSILON..1.0f64).ln()
            };
        }
    }
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(p: &str) -> PathBuf {
        // Read when the test runs: a clone elsewhere sharing the target
        // dir may reuse this binary.
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
            .join("data")
            .join(p)
    }

    #[test]
    fn reads_the_2021_excerpt() {
        let t = Trace::load(&data("azure2021/Azure2021_200.csv"), None).unwrap();
        assert_eq!(t.invocations.len(), 199);
        assert_eq!(t.functions.len(), 31);
        assert!(
            t.invocations
                .windows(2)
                .all(|w| w[0].start_ms <= w[1].start_ms)
        );
        assert_eq!(t.invocations[0].start_ms, 0);
        // About 21 minutes, as published.
        assert!(
            (19..=23).contains(&(t.span_ms() / 60_000)),
            "{}",
            t.span_ms()
        );
        let same = t
            .invocations
            .iter()
            .filter(|i| i.function == t.invocations[0].function);
        assert!(
            same.map(|i| i.memory_mb)
                .all(|m| m == t.invocations[0].memory_mb)
        );
    }

    #[test]
    fn reads_the_2019_layout_and_a_window_of_it() {
        let dir = data("azure2019-format");
        let day = Trace::load(&dir, None).unwrap();
        // Every function and every count of the day is there.
        let rows: Vec<csv::StringRecord> = reader(&dir.join("invocations.csv"))
            .unwrap()
            .records()
            .map(Result::unwrap)
            .collect();
        assert_eq!(day.functions.len(), rows.len());
        let total: u64 = rows
            .iter()
            .map(|r| {
                r.iter()
                    .skip(4)
                    .map(|v| v.parse::<u64>().unwrap_or(0))
                    .sum::<u64>()
            })
            .sum();
        assert_eq!(day.invocations.len() as u64, total);
        let hour = Trace::load(&dir, Some((61, 120))).unwrap();
        assert!(hour.invocations.len() < day.invocations.len());
        assert!(hour.span_ms() <= 61 * 60_000);
        // Durations come from the percentiles: within the row's 0..100 range.
        assert!(day.invocations.iter().all(|i| i.duration_ms >= 1));
    }

    #[test]
    fn a_synthetic_day_has_the_published_shape() {
        let t = synthetic(Synthetic {
            functions: 400,
            hours: 24,
            ..Synthetic::default()
        });
        let mut per_function = vec![0u64; t.functions.len()];
        for i in &t.invocations {
            per_function[i.function as usize] += 1;
        }
        let rare = per_function.iter().filter(|&&n| n <= 24).count() as f64 / 400.0;
        assert!(
            (0.3..0.6).contains(&rare),
            "share invoked at most hourly: {rare}"
        );
        // A few functions make most of the invocations.
        per_function.sort_unstable_by(|a, b| b.cmp(a));
        let top = per_function[..40].iter().sum::<u64>() as f64 / t.invocations.len() as f64;
        assert!(top > 0.8, "top 10% of functions make {top} of invocations");
        let mut d: Vec<u64> = t.invocations.iter().map(|i| i.duration_ms).collect();
        d.sort_unstable();
        assert!(
            (100..5_000).contains(&d[d.len() / 2]),
            "median duration {}",
            d[d.len() / 2]
        );
        // Same seed, same trace.
        let again = synthetic(Synthetic {
            functions: 400,
            hours: 24,
            ..Synthetic::default()
        });
        assert_eq!(again.invocations, t.invocations);
    }
}
