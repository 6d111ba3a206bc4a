//! `hearth bench …`: evaluation tools that run without a daemon.

use std::path::PathBuf;

use anyhow::Context;
use hearth_cluster::{Colocation, SimConfig, Trace, report, simulate, trace};

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Drive the placer with a whole trace over simulated nodes, once per
    /// colocation mode and pool size (Hydra §5.2); write summary.csv,
    /// memory.csv and memory.svg.
    Trace(TraceArgs),
}

#[derive(Debug, clap::Args)]
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
    /// Where the report goes.
    #[arg(long, default_value = "trace-report")]
    out: PathBuf,
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    let BenchCommand::Trace(a) = cmd;
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
            let s = trace::Synthetic {
                functions: a.functions,
                hours: a.hours,
                seed: a.seed,
                ..Default::default()
            };
            (
                trace::synthetic(s),
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
    let mut reports = Vec::new();
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
        }
    }
    let title = format!("Memory held, {title}");
    report::write(&a.out, &title, &reports)
        .with_context(|| format!("writing {}", a.out.display()))?;
    print!("{}", report::summary_markdown(&reports));
    eprintln!(
        "wrote {}/summary.csv, memory.csv, memory.svg",
        a.out.display()
    );
    Ok(())
}
