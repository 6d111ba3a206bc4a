//! Real nodes in `hearth bench trace` (Hydra §5.2: "99 nodes that simulate
//! invocations and one node that executes the actual function code").
//!
//! The placer runs the whole trace over simulated nodes; what it sends to
//! nodes `0..k` is also kept ([`hearth_cluster::ModeReport::real`]). Here a
//! window of that share is replayed, at the trace's own pace, against `k`
//! real `hearth up` daemons started for the purpose, each with the mode
//! being measured as its `--colocation`.
//!
//! Functions are chosen by duration, as Hydra assigned its benchmarks:
//! a trace function whose invocations take under 20 ms becomes the wasm
//! `hello` (it answers in microseconds); a longer one a Python handler that
//! sleeps for the invocation's duration, capped (`--real-max-ms`) so a
//! window ends in minutes. Every trace function is its own deployed
//! function and every trace tenant its own tenant, so cold and warm starts,
//! paused handlers and zygotes are the node's own.
//!
//! Limits, stated: the real nodes do not push back on the placer (it
//! places them with the simulated model, which the real answers do not
//! update); Python functions import no packages, so the colocation mode
//! changes nothing on a real node in this run (it governs package
//! zygotes, `docs/process-tier.md`) — what differs between modes is which
//! invocations the placer sends there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hearth_cluster::{Colocation, Invocation};
use tokio::sync::Mutex;

/// Which part of the real nodes' share to run, and how.
#[derive(Debug, Clone)]
pub struct RealConfig {
    pub nodes: usize,
    /// Trace seconds `[from, from + seconds)` are replayed.
    pub from_s: u64,
    pub seconds: u64,
    /// No invocation sleeps longer than this.
    pub max_ms: u64,
}

/// What the real nodes did with their share under one mode.
#[derive(Debug, Clone, Default)]
pub struct RealReport {
    pub mode: String,
    pub pool: usize,
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    pub cold: u64,
    pub warm: u64,
    /// Functions deployed, by what they became.
    pub python_functions: u64,
    pub wasm_functions: u64,
    /// Latency over what the function itself was asked to take (its
    /// sleep), so the figures are the platform's part.
    pub p50_overhead_ms: f64,
    pub p99_overhead_ms: f64,
    /// Daemon RSS plus its sandboxes' cgroups, summed over real nodes.
    pub mean_mb: f64,
    pub peak_mb: f64,
}

/// A function shorter than this runs as wasm `hello`.
const WASM_BELOW_MS: u64 = 20;

const SLEEPER_PY: &str = "import os, time\n\
SLEEP_S = int(os.environ['SLEEP_MS']) / 1000\n\
def handler(event, context):\n    time.sleep(SLEEP_S)\n    return 'ok'\n";

/// Replays `share` (from [`hearth_cluster::ModeReport::real`]) on fresh real
/// nodes running with `mode`.
pub fn run(
    share: &[(usize, Invocation)],
    mode: Colocation,
    pool: usize,
    cfg: &RealConfig,
) -> anyhow::Result<RealReport> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(replay(share, mode, pool, cfg))
}

async fn replay(
    share: &[(usize, Invocation)],
    mode: Colocation,
    pool: usize,
    cfg: &RealConfig,
) -> anyhow::Result<RealReport> {
    let from = cfg.from_s * 1000;
    let to = from + cfg.seconds * 1000;
    let window: Vec<(usize, Invocation)> = share
        .iter()
        .filter(|(_, i)| (from..to).contains(&i.start_ms))
        .copied()
        .collect();
    let mut nodes = Vec::new();
    for n in 0..cfg.nodes {
        nodes.push(RealNode::start(mode, n)?);
    }
    let result = drive(&window, &nodes, cfg, from).await;
    for node in nodes {
        node.stop();
    }
    let mut report = result?;
    report.mode = mode.as_str().to_string();
    report.pool = pool;
    Ok(report)
}

async fn drive(
    window: &[(usize, Invocation)],
    nodes: &[RealNode],
    cfg: &RealConfig,
    from_ms: u64,
) -> anyhow::Result<RealReport> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    // Deploy each (node, function) the window needs, with its tenant.
    let mut deployed: HashMap<(usize, u32), (String, String, u64)> = HashMap::new();
    let mut tokens: HashMap<(usize, u32), String> = HashMap::new();
    let mut report = RealReport::default();
    for &(n, inv) in window {
        if deployed.contains_key(&(n, inv.function)) {
            continue;
        }
        let node = &nodes[n];
        let tenant = format!("t{}", inv.tenant);
        if let std::collections::hash_map::Entry::Vacant(slot) = tokens.entry((n, inv.tenant)) {
            let v = node
                .admin(&http, reqwest::Method::POST, "/v1/tenants")
                .json(&serde_json::json!({ "name": tenant }))
                .send()
                .await?
                .error_for_status()?
                .json::<serde_json::Value>()
                .await?;
            let token = v["token"].as_str().context("no token")?.to_string();
            slot.insert(token);
        }
        let token = &tokens[&(n, inv.tenant)];
        let name = format!("f{}", inv.function);
        let sleep_ms = inv.duration_ms.min(cfg.max_ms);
        let memory = inv.memory_mb.clamp(64, 512).to_string();
        let (code, query): (Vec<u8>, Vec<(&str, String)>) = if inv.duration_ms < WASM_BELOW_MS {
            report.wasm_functions += 1;
            (
                include_bytes!("../../../examples/wasm/hello.wat").to_vec(),
                vec![("runtime", "wasm".into())],
            )
        } else {
            report.python_functions += 1;
            (
                SLEEPER_PY.as_bytes().to_vec(),
                vec![
                    ("runtime", "python".into()),
                    ("file_name", "handler.py".into()),
                    ("env", format!("SLEEP_MS={sleep_ms}")),
                    ("timeout_ms", (cfg.max_ms + 30_000).to_string()),
                ],
            )
        };
        let r = http
            .post(format!("{}/v1/functions/{name}", node.url))
            .query(&query)
            .query(&[("memory_mib", memory)])
            .bearer_auth(token)
            .body(code)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!(
                "deploying {name} on real node {n}: {}",
                r.text().await.unwrap_or_default()
            );
        }
        let asked = if inv.duration_ms < WASM_BELOW_MS {
            0
        } else {
            sleep_ms
        };
        deployed.insert((n, inv.function), (tenant, name, asked));
    }
    eprintln!(
        "  real nodes: {} invocations of {} functions ({} python, {} wasm) in trace seconds {}..{}",
        window.len(),
        deployed.len(),
        report.python_functions,
        report.wasm_functions,
        cfg.from_s,
        cfg.from_s + cfg.seconds
    );

    // Memory, sampled every second while the window runs.
    let samples = Arc::new(Mutex::new(Vec::<f64>::new()));
    let stop = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (samples, stop) = (samples.clone(), stop.clone());
        let probes: Vec<(u32, PathBuf)> = nodes.iter().map(|n| (n.pid, n.dir.clone())).collect();
        tokio::spawn(async move {
            while stop.load(Ordering::Relaxed) == 0 {
                let mb: f64 = probes
                    .iter()
                    .map(|(pid, dir)| node_memory_mb(*pid, dir))
                    .sum();
                samples.lock().await.push(mb);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // The window at the trace's own pace.
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(window.len());
    for &(n, inv) in window {
        let due = Duration::from_millis(inv.start_ms - from_ms);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let (tenant, name, asked) = deployed[&(n, inv.function)].clone();
        let url = format!("{}/fn/{tenant}/{name}", nodes[n].url);
        let token = tokens[&(n, inv.tenant)].clone();
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let r = http.post(url).bearer_auth(token).send().await;
            let (ok, start) = match r {
                Ok(r) => {
                    let start = r
                        .headers()
                        .get("hearth-start")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let ok = r.status().is_success() && r.bytes().await.is_ok();
                    (ok, start)
                }
                Err(_) => (false, None),
            };
            let overhead = t0.elapsed().as_secs_f64() * 1000.0 - asked as f64;
            (ok, start, overhead)
        }));
    }
    let mut overheads = Vec::with_capacity(tasks.len());
    for t in tasks {
        let (ok, start, overhead) = t.await?;
        report.sent += 1;
        if !ok {
            report.failed += 1;
            continue;
        }
        report.ok += 1;
        match start.as_deref() {
            Some("cold") => report.cold += 1,
            _ => report.warm += 1,
        }
        overheads.push(overhead);
    }
    stop.store(1, Ordering::Relaxed);
    let _ = sampler.await;
    overheads.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        overheads
            .get(((overheads.len() as f64 * p) as usize).min(overheads.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    report.p50_overhead_ms = pct(0.50);
    report.p99_overhead_ms = pct(0.99);
    let samples = samples.lock().await;
    if !samples.is_empty() {
        report.mean_mb = samples.iter().sum::<f64>() / samples.len() as f64;
        report.peak_mb = samples.iter().copied().fold(0.0, f64::max);
    }
    Ok(report)
}

/// One `hearth up` started for the run, in a data directory of its own.
struct RealNode {
    child: Child,
    pid: u32,
    dir: PathBuf,
    url: String,
    token: String,
}

impl RealNode {
    fn start(mode: Colocation, n: usize) -> anyhow::Result<RealNode> {
        let dir = std::env::temp_dir().join(format!(
            "hearth-real-{}-{}-{n}",
            std::process::id(),
            mode.as_str()
        ));
        std::fs::create_dir_all(&dir)?;
        let dir = dir.canonicalize()?;
        let child = Command::new(std::env::current_exe()?)
            .arg("up")
            .arg("--data-dir")
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0", "--colocation", mode.as_str()])
            .env("HEARTH_EXAMPLES", "false")
            .env("HEARTH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting a real node")?;
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            if let Ok(text) = std::fs::read_to_string(dir.join("server.json"))
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
                && v["pid"].as_u64() == Some(u64::from(pid))
                && let Some(url) = v["url"].as_str()
            {
                break url.to_string();
            }
            if Instant::now() > deadline {
                bail!("real node {n} did not start within 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let token = std::fs::read_to_string(dir.join("token"))?
            .trim()
            .to_string();
        Ok(RealNode {
            child,
            pid,
            dir,
            url,
            token,
        })
    }

    fn admin(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        http.request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// SIGTERM (the daemon removes its sandboxes, mounts and cgroups), then
    /// the data directory once it has exited.
    fn stop(mut self) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                _ if Instant::now() > deadline => {
                    eprintln!(
                        "  real node at {} did not stop; its data directory {} is left",
                        self.url,
                        self.dir.display()
                    );
                    let _ = self.child.kill();
                    return;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let still_mounted = std::fs::read_to_string("/proc/mounts")
            .map(|m| m.contains(self.dir.to_str().unwrap_or("\0")))
            .unwrap_or(true);
        if still_mounted {
            eprintln!(
                "  {} still has mounts under it; left in place",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The daemon's RSS plus what its sandboxes' cgroup holds, MiB.
fn node_memory_mb(pid: u32, dir: &Path) -> f64 {
    let rss_kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let instance = hearth_proc::instance_name(&dir.join("proc"));
    let sandboxes = [
        format!("/sys/fs/cgroup/memory/hearth/{instance}/memory.usage_in_bytes"),
        format!("/sys/fs/cgroup/hearth/{instance}/memory.current"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|s| s.trim().parse::<u64>().ok())
    .unwrap_or(0);
    rss_kb as f64 / 1024.0 + sandboxes as f64 / 1048576.0
}

/// The report's columns: (CSV header, Markdown header), in order.
const COLUMNS: [(&str, &str); 12] = [
    ("mode", "mode"),
    ("pool", "pool"),
    ("sent", "sent"),
    ("ok", "ok"),
    ("failed", "failed"),
    ("cold", "cold"),
    ("warm", "warm"),
    ("functions_py_wasm", "functions (py/wasm)"),
    ("p50_overhead_ms", "p50 overhead ms"),
    ("p99_overhead_ms", "p99 overhead ms"),
    ("mean_mb", "mean MB"),
    ("peak_mb", "peak MB"),
];

impl RealReport {
    /// The row's cells, in [`COLUMNS`] order.
    fn cells(&self) -> [String; 12] {
        [
            self.mode.clone(),
            self.pool.to_string(),
            self.sent.to_string(),
            self.ok.to_string(),
            self.failed.to_string(),
            self.cold.to_string(),
            self.warm.to_string(),
            format!("{}/{}", self.python_functions, self.wasm_functions),
            format!("{:.1}", self.p50_overhead_ms),
            format!("{:.1}", self.p99_overhead_ms),
            format!("{:.1}", self.mean_mb),
            format!("{:.1}", self.peak_mb),
        ]
    }
}

/// `real.csv`: one row per mode and pool size.
pub fn csv(reports: &[RealReport]) -> String {
    let mut out = COLUMNS.map(|c| c.0).join(",") + "\n";
    for r in reports {
        out += &(r.cells().join(",") + "\n");
    }
    out
}

/// The same as a Markdown table, for `bench/RESULTS.md`.
pub fn markdown(reports: &[RealReport]) -> String {
    let mut out = format!(
        "| {} |\n|{}\n",
        COLUMNS.map(|c| c.1).join(" | "),
        "---|".repeat(COLUMNS.len())
    );
    for r in reports {
        out += &format!("| {} |\n", r.cells().join(" | "));
    }
    out
}
