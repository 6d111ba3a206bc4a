//! Real nodes in `hearth-bench trace` (Hydra §5.2: "99 nodes that simulate
//! invocations and one node that executes the actual function code").
//!
//! For each mode, a live run beside the whole-trace simulation. The model
//! ([`Simulation`]) takes the trace up to the window with every node
//! simulated, so the placer enters the window with the state the trace
//! left; then nodes `0..k` are detached and `k` real `hearth up` daemons
//! (started for the purpose, each with the mode as its `--colocation`)
//! take their place, and the window is played at the trace's own pace:
//!
//! - What the placer sends a real node is sent to it over HTTP.
//! - The placer learns of a real node what a gateway learns: the functions
//!   it has loaded and how many invocations it runs at once (polled from
//!   its `GET /v1/status`, which carries what a join and a heartbeat do,
//!   every [`POLL`]), and the memory and slots taken by what it sent there.
//! - A real node that refuses (429 or 503 with `Hearth-Refused`: at its
//!   concurrency limit, or out of sandboxes) pushes back: the invocation
//!   is placed again, once, never on that node — a simulated node runs it
//!   in the model, another real node is sent it (refusing too, it is
//!   rejected), and with no room anywhere it is rejected — and the node is
//!   placed last until one of its invocations ends, as the gateway does.
//!
//! Functions are chosen by duration, as Hydra assigned its benchmarks:
//! a trace function whose invocations take under 20 ms becomes the wasm
//! `hello` (it answers in microseconds); a longer one a Python handler that
//! sleeps for the invocation's duration, capped (`--real-max-ms`) so a
//! window ends in minutes. Every trace function is its own deployed
//! function and every trace tenant its own tenant, so cold and warm starts,
//! paused handlers and zygotes are the node's own. Every function the
//! window invokes is deployed on every real node before it starts (a
//! deploy prepares nothing: the first invocation on a node is its cold
//! start).
//!
//! Python functions import a library, as most real ones do
//! (`--real-import-mib`, default 16): `tracelib`, a wheel this run writes
//! and the nodes install offline, whose import builds that many MiB of
//! Python objects (a dict of strings: 16 MiB asked built 17.5 MiB in 33 ms
//! in a plain python3 here) — a stand-in
//! for a package like numpy (113 ms to import, 17 MiB a process holding
//! it, RESULTS §4). The colocation
//! mode then decides, on the real node itself, which handlers fork from a
//! zygote holding it (`docs/process-tier.md`): one for everyone (`full`),
//! per tenant, per function, or none, where every handler imports it for
//! itself. `--real-import-mib 0` deploys handlers that import nothing.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::report::percentile;
use anyhow::{Context, bail};
use hearth_cluster::Colocation;

use super::sim::{Placement, SimConfig, Simulation};
use super::source::{Invocation, Trace};

mod code;
use code::{HELLO_WAT, WASM_BELOW_MS, python_code, write_library_wheel};

/// How often the placer learns what real nodes have loaded (a gateway's
/// heartbeat interval).
const POLL: Duration = Duration::from_millis(500);

/// Which part of the trace the real nodes take part in, and how.
#[derive(Debug, Clone)]
pub struct RealConfig {
    /// The `hearth` binary each real node runs as `hearth up`.
    pub hearth: PathBuf,
    pub nodes: usize,
    /// Trace seconds `[from, from + seconds)` are played live.
    pub from_s: u64,
    pub seconds: u64,
    /// No invocation sleeps longer than this.
    pub max_ms: u64,
    /// The real nodes' `--max-concurrency` (their default if unset).
    pub max_concurrency: Option<usize>,
    /// Whether the placer learns that limit (as a gateway does at a
    /// node's join), or only meets it as refusals.
    pub limits_known: bool,
    /// MiB of objects the Python functions' library builds at import;
    /// 0: they import nothing.
    pub import_mib: u32,
}

/// What the real nodes did in the window under one mode.
#[derive(Debug, Clone, Default)]
pub struct RealReport {
    pub mode: String,
    pub pool: usize,
    /// Invocations in the window, over every node.
    pub window: u64,
    /// Placements on real nodes (first ones and re-placements).
    pub sent: u64,
    pub ok: u64,
    /// Answered with an error other than a refusal, or not at all.
    pub failed: u64,
    /// Answered 429/503: the node pushed back.
    pub refused: u64,
    /// Where refused invocations went: a simulated node, another real
    /// node, nowhere (rejected).
    pub moved_sim: u64,
    pub moved_real: u64,
    pub rejected: u64,
    pub cold: u64,
    pub warm: u64,
    /// Functions deployed on each real node, by what they became.
    pub python_functions: u64,
    pub wasm_functions: u64,
    /// Distinct (real node, function) pairs the placer sent work to.
    pub functions_used: u64,
    /// Python zygotes holding the library, summed over the real nodes,
    /// at the most (sampled with the loaded functions).
    pub package_zygotes: u64,
    /// Latency over what the function itself was asked to take (its
    /// sleep), so the figures are the platform's part.
    pub p50_overhead_ms: f64,
    pub p99_overhead_ms: f64,
    /// Daemon RSS plus its sandboxes' cgroups, summed over real nodes.
    pub mean_mb: f64,
    pub peak_mb: f64,
    /// Completed invocations per GB-second the real nodes held, as the
    /// simulated report's density.
    pub density: f64,
}

/// Plays `trace`'s window live with `cfg.nodes` of `sim`'s nodes real.
pub fn run(trace: &Trace, sim: &SimConfig, cfg: &RealConfig) -> anyhow::Result<RealReport> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut nodes = Vec::new();
    let started = (0..cfg.nodes).try_for_each(|n| {
        nodes.push(RealNode::start(sim.mode, n, cfg)?);
        anyhow::Ok(())
    });
    let result = started.and_then(|()| rt.block_on(play(trace, sim, cfg, &nodes)));
    for node in nodes {
        node.stop();
    }
    let mut report = result?;
    report.mode = sim.mode.as_str().to_string();
    report.pool = sim.pool;
    Ok(report)
}

/// How to invoke one function on one real node.
struct Target {
    url: String,
    token: String,
    /// What the function was asked to sleep, ms.
    asked_ms: u64,
}

/// What the live run shares between its tasks. The placer's view of the
/// real nodes (loaded functions, memory and slots taken) is the
/// simulation's own.
struct Live {
    sim: Simulation,
    /// (real node, function) pairs sent work.
    used: HashSet<(usize, u32)>,
    report: RealReport,
    overheads: Vec<f64>,
}

struct Ctx {
    live: Mutex<Live>,
    targets: HashMap<(usize, u32), Target>,
    http: reqwest::Client,
    started: Instant,
    from_ms: u64,
}

impl Ctx {
    fn live(&self) -> parking_lot::MutexGuard<'_, Live> {
        self.live.lock()
    }

    /// The trace's clock, running with the wall clock through the window.
    fn now_ms(&self) -> u64 {
        self.from_ms + self.started.elapsed().as_millis() as u64
    }
}

async fn play(
    trace: &Trace,
    sim_cfg: &SimConfig,
    cfg: &RealConfig,
    nodes: &[RealNode],
) -> anyhow::Result<RealReport> {
    let from_ms = cfg.from_s * 1000;
    let to_ms = from_ms + cfg.seconds * 1000;
    let (before, window): (Vec<&Invocation>, Vec<&Invocation>) = trace
        .invocations
        .iter()
        .filter(|i| i.start_ms < to_ms)
        .partition(|i| i.start_ms < from_ms);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut report = RealReport {
        window: window.len() as u64,
        ..RealReport::default()
    };
    let targets = deploy(&http, nodes, &window, cfg, &mut report).await?;

    // Up to the window, every node is simulated; then the real ones leave
    // the model.
    let mut sim = Simulation::new(sim_cfg, trace.invocations.len());
    for inv in before {
        sim.offer(inv);
    }
    for n in 0..nodes.len() {
        sim.detach(n);
    }
    let ctx = Arc::new(Ctx {
        live: Mutex::new(Live {
            sim,
            used: HashSet::new(),
            report,
            overheads: Vec::new(),
        }),
        targets,
        http,
        started: Instant::now(),
        from_ms,
    });

    let stop = Arc::new(AtomicBool::new(false));
    let addrs: Vec<(String, String)> = nodes
        .iter()
        .map(|n| (n.url.clone(), n.token.clone()))
        .collect();
    poll_once(&ctx, &addrs, cfg.limits_known).await;
    let poller = tokio::spawn(poll_loaded(
        ctx.clone(),
        addrs,
        cfg.limits_known,
        stop.clone(),
    ));
    let samples = Arc::new(Mutex::new(Vec::<f64>::new()));
    let sampler = {
        let (samples, stop) = (samples.clone(), stop.clone());
        let probes: Vec<(u32, PathBuf)> = nodes.iter().map(|n| (n.pid, n.dir.clone())).collect();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mb: f64 = probes
                    .iter()
                    .map(|(pid, dir)| node_memory_mb(*pid, dir))
                    .sum();
                samples.lock().push(mb);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // The window at the trace's own pace.
    let mut tasks = Vec::new();
    for inv in window {
        let due = Duration::from_millis(inv.start_ms - from_ms);
        if let Some(wait) = due.checked_sub(ctx.started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let placed = ctx.live().sim.offer(inv);
        if let Placement::External(n) = placed {
            tasks.push(tokio::spawn(invoke(ctx.clone(), n, *inv)));
        }
    }
    for t in tasks {
        t.await?;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = poller.await;
    let _ = sampler.await;
    let seconds = ctx.started.elapsed().as_secs_f64();

    let mut live = ctx.live();
    let Live {
        report,
        overheads,
        used,
        ..
    } = &mut *live;
    report.functions_used = used.len() as u64;
    overheads.sort_by(f64::total_cmp);
    report.p50_overhead_ms = percentile(overheads, 0.50);
    report.p99_overhead_ms = percentile(overheads, 0.99);
    let samples = samples.lock();
    if !samples.is_empty() {
        report.mean_mb = samples.iter().sum::<f64>() / samples.len() as f64;
        report.peak_mb = samples.iter().copied().fold(0.0, f64::max);
        let gb_s = report.mean_mb / 1024.0 * seconds;
        if gb_s > 0.0 {
            report.density = report.ok as f64 / gb_s;
        }
    }
    Ok(std::mem::take(report))
}

/// Deploys every function `window` invokes on every real node, each under
/// a tenant of its trace tenant.
async fn deploy(
    http: &reqwest::Client,
    nodes: &[RealNode],
    window: &[&Invocation],
    cfg: &RealConfig,
    report: &mut RealReport,
) -> anyhow::Result<HashMap<(usize, u32), Target>> {
    let mut functions: HashMap<u32, Invocation> = HashMap::new();
    for inv in window {
        functions.entry(inv.function).or_insert(**inv);
    }
    let tenants: BTreeSet<u32> = functions.values().map(|i| i.tenant).collect();
    let t0 = Instant::now();
    let mut targets = HashMap::new();
    for (n, node) in nodes.iter().enumerate() {
        let mut tokens = HashMap::new();
        for &tenant in &tenants {
            let v = node
                .admin(http, reqwest::Method::POST, "/v1/tenants")
                .json(&serde_json::json!({ "name": format!("t{tenant}") }))
                .send()
                .await?
                .error_for_status()?
                .json::<serde_json::Value>()
                .await?;
            let token = v["token"].as_str().context("no token")?.to_string();
            tokens.insert(tenant, token);
        }
        for (&function, inv) in &functions {
            let name = format!("f{function}");
            let token = &tokens[&inv.tenant];
            let sleep_ms = inv.duration_ms.min(cfg.max_ms);
            let memory = inv.memory_mb.clamp(64, 512).to_string();
            let wasm = inv.duration_ms < WASM_BELOW_MS;
            let (code, query): (Vec<u8>, Vec<(&str, String)>) = if wasm {
                (HELLO_WAT.to_vec(), vec![("runtime", "wasm".into())])
            } else {
                let (code, file_name) = python_code(cfg.import_mib)?;
                (
                    code,
                    vec![
                        ("runtime", "python".into()),
                        ("file_name", file_name.into()),
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
            if n == 0 {
                if wasm {
                    report.wasm_functions += 1;
                } else {
                    report.python_functions += 1;
                }
            }
            targets.insert(
                (n, function),
                Target {
                    url: format!("{}/fn/t{}/{name}", node.url, inv.tenant),
                    token: token.clone(),
                    asked_ms: if wasm { 0 } else { sleep_ms },
                },
            );
        }
    }
    eprintln!(
        "  real nodes: {} functions ({} python, {} wasm) of {} tenants deployed on each of {} in {:.1} s; \
         {} invocations in trace seconds {}..{}",
        functions.len(),
        report.python_functions,
        report.wasm_functions,
        tenants.len(),
        nodes.len(),
        t0.elapsed().as_secs_f64(),
        window.len(),
        cfg.from_s,
        cfg.from_s + cfg.seconds
    );
    Ok(targets)
}

/// How a real node answered.
enum Answer {
    Ok { cold: bool, overhead_ms: f64 },
    Refused,
    Failed,
}

/// Runs `inv` on real node `n`, where the placer put it; a
/// refusal places it again, once.
async fn invoke(ctx: Arc<Ctx>, mut n: usize, inv: Invocation) {
    let mut first = true;
    loop {
        let answer = send(&ctx, &ctx.targets[&(n, inv.function)]).await;
        let mut live = ctx.live();
        live.sim
            .external_done(n, &inv, matches!(answer, Answer::Ok { .. }));
        live.report.sent += 1;
        live.used.insert((n, inv.function));
        // A refusal marks the node busy (placed last) until one of its
        // invocations ends and frees a slot, as the gateway does.
        live.sim.set_busy(n, matches!(answer, Answer::Refused));
        match answer {
            Answer::Ok { cold, overhead_ms } => {
                live.report.ok += 1;
                if cold {
                    live.report.cold += 1;
                } else {
                    live.report.warm += 1;
                }
                live.overheads.push(overhead_ms);
            }
            Answer::Failed => live.report.failed += 1,
            Answer::Refused => {
                live.report.refused += 1;
                if !first {
                    live.report.rejected += 1;
                    return;
                }
                first = false;
                let now = ctx.now_ms();
                match live.sim.retry(&inv, now, n) {
                    Placement::Simulated(_) => live.report.moved_sim += 1,
                    Placement::Rejected => live.report.rejected += 1,
                    Placement::External(m) => {
                        live.report.moved_real += 1;
                        n = m;
                        drop(live);
                        continue;
                    }
                }
            }
        }
        return;
    }
}

async fn send(ctx: &Ctx, target: &Target) -> Answer {
    let t0 = Instant::now();
    let Ok(r) = ctx
        .http
        .post(&target.url)
        .bearer_auth(&target.token)
        .send()
        .await
    else {
        return Answer::Failed;
    };
    let status = r.status();
    if hearth_cluster::gateway::refused(status.as_u16(), r.headers()) {
        return Answer::Refused;
    }
    let cold = r
        .headers()
        .get("hearth-start")
        .and_then(|v| v.to_str().ok())
        == Some("cold");
    if !status.is_success() || r.bytes().await.is_err() {
        return Answer::Failed;
    }
    Answer::Ok {
        cold,
        overhead_ms: t0.elapsed().as_secs_f64() * 1000.0 - target.asked_ms as f64,
    }
}

/// Every [`POLL`], tells the placer what each real node has loaded and
/// how many invocations it runs at once, as a join and heartbeats would.
async fn poll_loaded(
    ctx: Arc<Ctx>,
    nodes: Vec<(String, String)>,
    limits_known: bool,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(POLL).await;
        poll_once(&ctx, &nodes, limits_known).await;
    }
}

/// One round of [`poll_loaded`]; the slots only if `limits_known`.
async fn poll_once(ctx: &Ctx, nodes: &[(String, String)], limits_known: bool) {
    let mut zygotes = 0;
    for (n, (url, token)) in nodes.iter().enumerate() {
        let Some(seen) = status_of(&ctx.http, url, token).await else {
            continue;
        };
        zygotes += seen.package_zygotes;
        let mut live = ctx.live();
        live.sim.external_loaded(n, seen.loaded);
        if limits_known {
            live.sim.set_slots(n, seen.slots);
        }
    }
    let mut live = ctx.live();
    live.report.package_zygotes = live.report.package_zygotes.max(zygotes);
}

/// What the placer (and the report) learns from a real node's status.
struct NodeStatus {
    /// Its loaded functions, as (trace tenant, trace function).
    loaded: Vec<(u32, u32)>,
    /// Its limit on invocations at once.
    slots: Option<u32>,
    /// Its Python zygotes that hold packages.
    package_zygotes: u64,
}

async fn status_of(http: &reqwest::Client, url: &str, token: &str) -> Option<NodeStatus> {
    let status: serde_json::Value = http
        .get(format!("{url}/v1/status"))
        .bearer_auth(token)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let ids = |pair: &serde_json::Value| -> Option<(u32, u32)> {
        let tenant = pair.get(0)?.as_str()?.strip_prefix('t')?.parse().ok()?;
        let function = pair.get(1)?.as_str()?.strip_prefix('f')?.parse().ok()?;
        Some((tenant, function))
    };
    let slots = status["max_concurrency"]
        .as_u64()
        .and_then(|m| u32::try_from(m).ok());
    let package_zygotes = status["tiers"]["process"]["details"]["zygotes"]
        .as_array()
        .map_or(0, |z| {
            z.iter()
                .filter(|z| z["packages"].as_u64().is_some_and(|p| p > 0))
                .count() as u64
        });
    Some(NodeStatus {
        loaded: status["loaded"]
            .as_array()?
            .iter()
            .filter_map(ids)
            .collect(),
        slots,
        package_zygotes,
    })
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
    /// A `hearth up` on a fresh data directory, with the library's wheel
    /// in it to install from (offline) when the functions import one.
    fn start(mode: Colocation, n: usize, cfg: &RealConfig) -> anyhow::Result<RealNode> {
        let dir = std::env::temp_dir().join(format!(
            "hearth-real-{}-{}-{n}",
            std::process::id(),
            mode.as_str()
        ));
        std::fs::create_dir_all(&dir)?;
        let dir = dir.canonicalize()?;
        let mut cmd = Command::new(&cfg.hearth);
        cmd.arg("up").arg("--data-dir").arg(&dir).args([
            "--listen",
            "127.0.0.1:0",
            "--colocation",
            mode.as_str(),
        ]);
        if let Some(c) = cfg.max_concurrency {
            cmd.arg("--max-concurrency").arg(c.to_string());
        }
        if cfg.import_mib > 0 {
            // Beside the data directory, not in it: installs run as the
            // sandbox user, who may read the wheels but nothing of the
            // node's own directory.
            let wheels = wheels_of(&dir);
            std::fs::create_dir_all(&wheels)?;
            write_library_wheel(&wheels, cfg.import_mib)?;
            cmd.arg("--offline-packages").arg(&wheels);
        }
        let child = cmd
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
        let _ = std::fs::remove_dir_all(wheels_of(&self.dir));
    }
}

/// Where a real node's offline wheels are.
fn wheels_of(dir: &std::path::Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push("-wheels");
    PathBuf::from(name)
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
const COLUMNS: [(&str, &str); 20] = [
    ("mode", "mode"),
    ("pool", "pool"),
    ("window", "window"),
    ("sent", "sent to real"),
    ("ok", "ok"),
    ("failed", "failed"),
    ("refused", "refused"),
    ("moved_sim", "then sim"),
    ("moved_real", "then real"),
    ("rejected", "then none"),
    ("cold", "cold"),
    ("warm", "warm"),
    ("functions_used", "functions used"),
    ("functions_py_wasm", "deployed (py/wasm)"),
    ("package_zygotes", "package zygotes"),
    ("p50_overhead_ms", "p50 overhead ms"),
    ("p99_overhead_ms", "p99 overhead ms"),
    ("mean_mb", "mean MB"),
    ("peak_mb", "peak MB"),
    ("density_per_gb_s", "inv/GB·s"),
];

impl RealReport {
    /// The row's cells, in [`COLUMNS`] order.
    fn cells(&self) -> [String; 20] {
        [
            self.mode.clone(),
            self.pool.to_string(),
            self.window.to_string(),
            self.sent.to_string(),
            self.ok.to_string(),
            self.failed.to_string(),
            self.refused.to_string(),
            self.moved_sim.to_string(),
            self.moved_real.to_string(),
            self.rejected.to_string(),
            self.cold.to_string(),
            self.warm.to_string(),
            self.functions_used.to_string(),
            format!("{}/{}", self.python_functions, self.wasm_functions),
            self.package_zygotes.to_string(),
            format!("{:.1}", self.p50_overhead_ms),
            format!("{:.1}", self.p99_overhead_ms),
            format!("{:.1}", self.mean_mb),
            format!("{:.1}", self.peak_mb),
            format!("{:.2}", self.density),
        ]
    }
}

/// `real.csv`: one row per mode and pool size.
pub fn csv(reports: &[RealReport]) -> String {
    let header = COLUMNS.map(|c| c.0.to_string()).to_vec();
    super::report::csv_of(std::iter::once(header).chain(reports.iter().map(|r| r.cells().to_vec())))
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
