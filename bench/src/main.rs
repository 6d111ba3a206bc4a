//! `hearth-bench instantiate [N]`: instantiate and invoke the hello module
//! in process, pooling vs on-demand allocation, p50/p99 in µs.
//!
//! `hearth-bench component FILE [N]`: the same for a wasi:http component
//! (instantiate and handle one request), p50/p99 in µs.
//!
//! `hearth-bench ceiling ADDR`: a minimal hyper server answering exactly the
//! bytes Hearth's hello function answers, the ceiling for `bench/http.sh`.
//!
//! `hearth-bench record [N] [THREADS]`: recording's cost per tape, in process
//! ([`record`]).
//!
//! `hearth-bench trace …`: the placer over a whole invocation trace on
//! simulated nodes, a window of it on real ones ([`trace`]; `--help`).

mod record;
mod trace;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hearth_core::{FunctionSpec, FunctionVersion, InvocationId, Request, Runtime};
use hearth_host::{Artifacts, Engine, HostCtx, HostLimits, HostServices, InvocationMeta, Sandbox};
use hearth_store::{ArtifactStore, SqliteStore};
use hearth_wasm::{WasmConfig, WasmEngine};

const HELLO: &[u8] = include_bytes!("../../examples/wasm/hello.wat");

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1e6
}

struct Stats {
    p50: f64,
    p99: f64,
    mean: f64,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / samples.len() as f64 * 1e6;
    Stats {
        p50: percentile(&samples, 0.50),
        p99: percentile(&samples, 0.99),
        mean,
    }
}

/// A function deployed to a wasm engine of its own, in process: what the
/// in-process benchmarks run.
struct Deployed {
    engine: WasmEngine,
    version: Arc<FunctionVersion>,
    artifacts: Arc<dyn Artifacts>,
    services: Arc<HostServices>,
    /// The engine's cache, artifacts and database; removed on drop.
    _dir: tempfile::TempDir,
}

impl Deployed {
    async fn new(code: Vec<u8>, pooling: bool) -> anyhow::Result<Deployed> {
        let dir = tempfile::tempdir()?;
        let mut config = WasmConfig::new(dir.path().join("cache"));
        config.pooling = pooling;
        config.max_sandboxes = 64;
        let engine = WasmEngine::new(config)?;
        let artifacts = ArtifactStore::open(dir.path().join("artifacts"))?;
        let spec = FunctionSpec::new(Runtime::Wasm);
        let compiled = engine
            .compile(&spec, code.into())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let version = Arc::new(FunctionVersion {
            tenant: "bench".into(),
            name: "bench".into(),
            version: 1,
            artifact: artifacts.put(&compiled.artifact)?,
            spec,
            created_at_ms: 0,
        });
        let store = Arc::new(SqliteStore::open(dir.path().join("db"))?);
        Ok(Deployed {
            engine,
            version,
            artifacts: Arc::new(artifacts),
            services: Arc::new(HostServices::new(store, HostLimits::default())),
            _dir: dir,
        })
    }

    /// A host context for one invocation, 10 s to run.
    fn host(&self) -> HostCtx {
        HostCtx::new(
            self.services.clone(),
            InvocationMeta {
                id: InvocationId::new(),
                version: self.version.clone(),
                started: Instant::now(),
                deadline: Instant::now() + Duration::from_secs(10),
                trace: None,
                cpu: None,
                answer: None,
            },
        )
    }
}

async fn instantiate_bench(pooling: bool, n: usize) -> anyhow::Result<(Stats, Stats)> {
    let d = Deployed::new(HELLO.to_vec(), pooling).await?;
    // The concrete type, so the measurement has no extra boxing.
    let prepared = d
        .engine
        .prepare_wasm(&d.version, &d.artifacts)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let warmup = n / 10;
    let mut inst = Vec::with_capacity(n);
    let mut total = Vec::with_capacity(n);
    for i in 0..n + warmup {
        let t0 = Instant::now();
        let mut sandbox = prepared
            .instantiate_sandbox()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let t1 = Instant::now();
        let resp = sandbox
            .invoke(&Request::default(), d.host())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        drop(sandbox);
        let t2 = Instant::now();
        assert_eq!(&resp.body[..], b"hello from wasm\n");
        if i >= warmup {
            inst.push(t1 - t0);
            total.push(t2 - t0);
        }
    }
    Ok((stats(inst), stats(total)))
}

/// Instantiates the component in `file` and has it handle a GET, `n`
/// times after a tenth as many warm-up rounds: p50, p99 and mean.
async fn component_bench(file: &str, n: usize) -> anyhow::Result<Stats> {
    let d = Deployed::new(std::fs::read(file)?, true).await?;
    let prepared = hearth_host::Engine::prepare(&d.engine, &d.version, &d.artifacts)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let request = Request {
        method: "GET".into(),
        path: "/".into(),
        ..Request::default()
    };
    let mut total = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t0 = Instant::now();
        let mut sandbox = prepared
            .instantiate()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let resp = sandbox
            .invoke(&request, d.host())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        drop(sandbox);
        anyhow::ensure!(resp.status == 200, "the component answered {}", resp.status);
        if i >= n / 10 {
            total.push(t0.elapsed());
        }
    }
    Ok(stats(total))
}

/// Answers every request with `body` (Hearth's hello bytes by default, or
/// a file's contents: the JSON document `bench/js.sh` fetches).
async fn ceiling(addr: &str, body: Bytes, content_type: &'static str) -> anyhow::Result<()> {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("ceiling listening on http://{}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let body = body.clone();
        tokio::spawn(async move {
            let service = service_fn(move |_req| {
                let body = body.clone();
                async move {
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .header("content-type", content_type)
                            .body(http_body_util::Full::new(body))
                            .expect("a static response is valid"),
                    )
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.first().map(String::as_str) {
        Some("instantiate") => {
            let n: usize = args
                .get(1)
                .map(|s| s.parse())
                .transpose()?
                .unwrap_or(20_000);
            println!(
                "| allocator | instantiate p50 | p99 | mean | instantiate+invoke p50 | p99 | mean |"
            );
            println!("|---|---|---|---|---|---|---|");
            for (name, pooling) in [("pooling", true), ("on-demand", false)] {
                let (i, t) = rt.block_on(instantiate_bench(pooling, n))?;
                println!(
                    "| {name} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs |",
                    i.p50, i.p99, i.mean, t.p50, t.p99, t.mean
                );
            }
            Ok(())
        }
        Some("ceiling") => {
            let addr = args.get(1).map(String::as_str).unwrap_or("127.0.0.1:0");
            match args.get(2) {
                Some(file) => rt.block_on(ceiling(
                    addr,
                    Bytes::from(std::fs::read(file)?),
                    "application/json",
                )),
                None => rt.block_on(ceiling(
                    addr,
                    Bytes::from_static(b"hello from wasm\n"),
                    "text/plain",
                )),
            }
        }
        Some("component") => {
            let Some(file) = args.get(1) else {
                anyhow::bail!("usage: hearth-bench component FILE [N]");
            };
            let n = args
                .get(2)
                .map(|s| s.parse())
                .transpose()?
                .unwrap_or(20_000);
            let s = rt.block_on(component_bench(file, n))?;
            println!("| component | instantiate+handle p50 | p99 | mean |");
            println!("|---|---|---|---|");
            println!(
                "| {file} | {:.1} µs | {:.1} µs | {:.1} µs |",
                s.p50, s.p99, s.mean
            );
            Ok(())
        }
        Some("adapter") => {
            // The preview-1 adapters of the pinned wasmtime, for building
            // C into components (examples/components/build.sh).
            use wasi_preview1_component_adapter_provider as adapters;
            let bytes = match args.get(1).map(String::as_str) {
                Some("proxy") => adapters::WASI_SNAPSHOT_PREVIEW1_PROXY_ADAPTER,
                Some("reactor") => adapters::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
                _ => anyhow::bail!("usage: hearth-bench adapter proxy|reactor > adapter.wasm"),
            };
            std::io::Write::write_all(&mut std::io::stdout(), bytes)?;
            Ok(())
        }
        Some("trace") => {
            use clap::Parser;
            trace::run(trace::TraceArgs::parse_from(&args))
        }
        Some("record") => {
            let n = args
                .get(1)
                .map(|s| s.parse())
                .transpose()?
                .unwrap_or(500_000);
            let threads = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1);
            record::run(n, threads)
        }
        _ => {
            eprintln!(
                "usage: hearth-bench instantiate [N] | hearth-bench ceiling ADDR [FILE] | hearth-bench record [N] [THREADS] | hearth-bench component FILE [N] | hearth-bench adapter proxy|reactor | hearth-bench trace --help"
            );
            std::process::exit(2);
        }
    }
}
