//! `hearth-bench trace`: the Hydra placer driven by a whole invocation trace
//! over simulated nodes (Hydra §5.2), once per colocation mode and pool
//! size, optionally with a window of it played on real `hearth up` nodes.
//!
//! ```text
//! trace (Azure 2019 / 2021 / synthetic) ──▶ Invocation stream   (source)
//!        ──▶ hearth_cluster::Placer: same function ▸ same tenant ▸ least loaded
//!        ──▶ simulated nodes: instances keyed by colocation mode, warm pool,
//!            keep-alive, memory accounting                       (sim)
//!        ──▶ summary.csv / memory.csv / SVG charts               (report)
//!        ╰─▶ a window on real nodes beside the model             (realnode)
//! ```

use std::path::PathBuf;

use anyhow::Context;
use hearth_cluster::Colocation;

mod realnode;
mod report;
mod sim;
mod source;

use sim::{SimConfig, simulate};
use source::Trace;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Limits {
    Known,
    Hidden,
}

/// Drive the placer with a whole trace over simulated nodes, once per
/// colocation mode and pool size (Hydra §5.2); write summary.csv,
/// summary.svg, memory.csv and memory.svg.
#[derive(Debug, clap::Parser)]
#[command(name = "hearth-bench trace")]
pub struct TraceArgs {
    /// An Azure Functions 2021 CSV, or a directory in the 2019 layout.
    /// Without it, a synthetic day with the published shape.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Only these minutes of a 2019 day, as A-B (1-based, inclusive).
    #[arg(long)]
    minutes: Option<String>,
    /// Synthetic trace: functions, hours and seed.
    #[arg(long, default_value_t = 500)]
    functions: u32,
    #[arg(long, default_value_t = 24)]
    hours: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated nodes, and memory per node in MiB.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    #[arg(long, default_value_t = 16 << 10)]
    node_mib: u64,
    /// Colocation modes to compare.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "full,tenant,function,none"
    )]
    modes: Vec<Colocation>,
    /// Pool sizes (pre-started instances per node) to compare.
    #[arg(long, value_delimiter = ',', default_value = "8,0")]
    pools: Vec<usize>,
    /// Real nodes: in a live run of a window of the trace (after the
    /// whole-trace simulation), the placer's first N nodes are real (a
    /// `hearth up` each, started for the run) and push back; results in
    /// real.csv.
    #[arg(long, default_value_t = 0)]
    real_nodes: usize,
    /// The real nodes' window, played at the trace's own pace: trace
    /// seconds FROM .. FROM + SECONDS.
    #[arg(long, default_value_t = 0)]
    real_from_s: u64,
    #[arg(long, default_value_t = 60)]
    real_seconds: u64,
    /// Cap on how long a real invocation sleeps (trace durations run to
    /// minutes).
    #[arg(long, default_value_t = 1000)]
    real_max_ms: u64,
    /// The real nodes' --max-concurrency: a low one makes them push back
    /// sooner (their default if unset).
    #[arg(long)]
    real_max_concurrency: Option<usize>,
    /// Whether the placer knows the real nodes' concurrency limit (as a
    /// gateway learns it at a node's join) or meets it only as refusals.
    #[arg(long, value_enum, default_value_t = Limits::Known)]
    real_limits: Limits,
    /// MiB of objects the real nodes' Python functions' library builds at
    /// import (shared through a zygote as the colocation mode allows);
    /// 0: they import nothing.
    #[arg(long, default_value_t = 16)]
    real_import_mib: u32,
    /// The `hearth` binary the real nodes run (default: the one beside
    /// this binary, as `cargo build` leaves it).
    #[arg(long)]
    hearth: Option<PathBuf>,
    /// Where the report goes.
    #[arg(long, default_value = "trace-report")]
    out: PathBuf,
}

pub fn run(a: TraceArgs) -> anyhow::Result<()> {
    let (t, title) = match &a.trace {
        Some(path) => {
            let minutes = a
                .minutes
                .as_deref()
                .map(|m| -> anyhow::Result<(u32, u32)> {
                    let (x, y) = m
                        .split_once('-')
                        .context("--minutes takes A-B, e.g. 600-630")?;
                    Ok((x.parse()?, y.parse()?))
                })
                .transpose()?;
            let t = Trace::load(path, minutes)
                .with_context(|| format!("reading {}", path.display()))?;
            (t, format!("{}", path.display()))
        }
        None => {
            let s = source::Synthetic {
                functions: a.functions,
                hours: a.hours,
                seed: a.seed,
                ..Default::default()
            };
            (
                source::synthetic(s),
                format!(
                    "synthetic: {} functions, {} h, seed {}",
                    a.functions, a.hours, a.seed
                ),
            )
        }
    };
    anyhow::ensure!(!t.invocations.is_empty(), "the trace holds no invocations");
    eprintln!(
        "{} invocations of {} functions from {} tenants over {:.1} min, {} nodes of {} MiB",
        t.invocations.len(),
        t.functions.len(),
        t.tenants.len(),
        t.span_ms() as f64 / 60_000.0,
        a.nodes,
        a.node_mib
    );
    anyhow::ensure!(
        a.real_nodes <= a.nodes,
        "--real-nodes {} is more than --nodes {}",
        a.real_nodes,
        a.nodes
    );
    let hearth = match &a.hearth {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("hearth"),
    };
    anyhow::ensure!(
        a.real_nodes == 0 || hearth.is_file(),
        "no hearth binary at {} for the real nodes: build it (cargo build -p hearth) or pass --hearth",
        hearth.display()
    );
    let real = realnode::RealConfig {
        hearth,
        nodes: a.real_nodes,
        from_s: a.real_from_s,
        seconds: a.real_seconds,
        max_ms: a.real_max_ms,
        max_concurrency: a.real_max_concurrency,
        limits_known: a.real_limits == Limits::Known,
        import_mib: a.real_import_mib,
    };
    let mut reports = Vec::new();
    let mut real_reports = Vec::new();
    for &pool in &a.pools {
        for &mode in &a.modes {
            let cfg = SimConfig {
                nodes: a.nodes,
                node_mb: a.node_mib,
                mode,
                pool,
                ..SimConfig::default()
            };
            reports.push(simulate(&t, &cfg));
            if a.real_nodes > 0 {
                eprintln!("{} / pool {pool}:", mode.as_str());
                real_reports.push(realnode::run(&t, &cfg, &real)?);
            }
        }
    }
    report::write(&a.out, &title, &reports)
        .with_context(|| format!("writing {}", a.out.display()))?;
    print!("{}", report::summary_markdown(&reports));
    if !real_reports.is_empty() {
        std::fs::write(a.out.join("real.csv"), realnode::csv(&real_reports))?;
        println!(
            "\nReal nodes ({} of {}), trace seconds {}..{}:\n\n{}",
            a.real_nodes,
            a.nodes,
            a.real_from_s,
            a.real_from_s + a.real_seconds,
            realnode::markdown(&real_reports)
        );
    }
    eprintln!(
        "wrote {}/summary.csv, summary.svg, memory.csv, memory.svg",
        a.out.display()
    );
    Ok(())
}
