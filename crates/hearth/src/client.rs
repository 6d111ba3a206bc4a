//! The CLI commands that talk to a Hearth daemon over its `/v1` API.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use hearth_api::answers;
use hearth_core::Runtime;
use serde_json::Value;

use crate::deploy::DeployArgs;

#[derive(Debug, Args)]
pub struct Target {
    /// Server URL (default: from the data directory's server.json).
    #[arg(long, env = "HEARTH_URL", global = true)]
    url: Option<String>,
    /// API token (default: the data directory's token file).
    #[arg(long, env = "HEARTH_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// Print JSON instead of readable text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Deploy a function: a new immutable version of NAME.
    Deploy(DeployArgs),
    /// Invoke a function and print its response body.
    Invoke {
        name: String,
        /// Request body; @FILE reads a file, @- standard input.
        #[arg(short = 'd', long = "data")]
        data: Option<String>,
        #[arg(short = 'X', long = "method")]
        method: Option<String>,
        /// Sub-path after the function name, e.g. /users/7?x=1.
        #[arg(long, default_value = "")]
        path: String,
        /// Header "Name: value"; repeatable.
        #[arg(short = 'H', long = "header")]
        headers: Vec<String>,
        /// Tenant that owns the function (default: the token's).
        #[arg(long)]
        tenant: Option<String>,
        /// Run this version (a number) or alias (`canary`) instead of the
        /// live one.
        #[arg(long)]
        version: Option<String>,
        /// Also print status and headers.
        #[arg(short = 'i', long)]
        include: bool,
        /// Then print the invocation's log lines (to standard error).
        #[arg(long)]
        logs: bool,
        /// Queue it and return at once with its id (202): it runs from the
        /// queue, retried on failure (`hearth dlq` has those that failed
        /// every attempt).
        #[arg(long = "async", conflicts_with = "logs")]
        run_async: bool,
        #[command(flatten)]
        target: Target,
    },
    /// List functions.
    Ls {
        #[command(flatten)]
        target: Target,
    },
    /// List a function's versions and where its aliases point, or
    /// download one version's code.
    Versions {
        name: String,
        /// Write version N's code (as the node stores it) to --output.
        #[arg(long, value_name = "N")]
        download: Option<u32>,
        /// Where --download writes (default: NAME@N in this directory;
        /// `-`: standard output).
        #[arg(short = 'o', long, requires = "download")]
        output: Option<PathBuf>,
        #[command(flatten)]
        target: Target,
    },
    /// Point an alias (default `live`, what unpinned calls run) at a
    /// version: a release, or a rollback to a version chosen by number.
    Promote {
        name: String,
        version: u32,
        #[arg(long, default_value = hearth_store::LIVE)]
        alias: String,
        /// First replay the newest tapes of the version the alias points
        /// at against VERSION, and move only if each answers as recorded.
        #[arg(long)]
        gate: bool,
        /// With --gate: the newest this many tapes (default 100).
        #[arg(long, requires = "gate", value_name = "K")]
        gate_last: Option<u32>,
        /// With --gate: only tapes newer than this (90s, 15m, 1h, 2d).
        #[arg(long, requires = "gate", value_name = "AGE")]
        gate_since: Option<String>,
        /// With --gate: move even if replays differ (printing each).
        #[arg(long, requires = "gate")]
        accept_diff: bool,
        /// With --gate: a canary, through these percentages of the
        /// alias's calls (e.g. 1,10,100), gated and checked between steps;
        /// a breach rolls the alias back.
        #[arg(long, requires = "gate", value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=100))]
        steps: Vec<u8>,
        /// With --steps: how long each step runs before it is judged.
        #[arg(long, requires = "steps", default_value = "60s")]
        step_wait: String,
        /// With --steps: the percent of the canary's calls that may fail.
        #[arg(long, requires = "steps", default_value_t = 1.0)]
        max_error_rate: f64,
        #[command(flatten)]
        target: Target,
    },
    /// Send PERCENT of an alias's (default `live`) calls to VERSION, the
    /// rest staying where the alias points (a canary; 0 ends it). A
    /// caller's `Hearth-Split-Key` header keeps it on one side.
    Split {
        name: String,
        version: u32,
        #[arg(value_parser = clap::value_parser!(u8).range(0..100))]
        percent: u8,
        #[arg(long, default_value = hearth_store::LIVE)]
        alias: String,
        #[command(flatten)]
        target: Target,
    },
    /// Point an alias (default `live`) back where it was before its last
    /// move, in one call; again, and it goes further back.
    Rollback {
        name: String,
        #[arg(long, default_value = hearth_store::LIVE)]
        alias: String,
        #[command(flatten)]
        target: Target,
    },
    /// Where a function's aliases point, with an alias's recent moves.
    Aliases {
        name: String,
        /// Also list this alias's moves, newest first.
        #[arg(long, value_name = "ALIAS")]
        history: Option<String>,
        /// Remove this alias and its history instead (not `live`).
        #[arg(long, value_name = "ALIAS", conflicts_with = "history")]
        remove: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a function with all its versions, KV and logs.
    Rm {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Read and write a function's KV: get, set, ls, rm.
    #[command(subcommand)]
    Kv(crate::kv::KvCommand),
    /// Show a function's log: stderr, log calls, and failures, per invocation.
    Logs {
        name: String,
        /// Only this invocation's lines.
        #[arg(long)]
        invocation: Option<String>,
        /// The newest this many lines (at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Keep printing new lines as they are stored, until interrupted.
        #[arg(short = 'f', long)]
        follow: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Show the node's state and any protection it cannot give here.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// The tenant's secrets: set (or rotate), ls, rm; bound to functions
    /// with `deploy --secret`.
    #[command(subcommand)]
    Secret(crate::secrets::SecretCommand),
    /// The tenant's schedules (set with `deploy --schedule`): list them,
    /// or pause, resume or rm one.
    Schedules(crate::schedules::SchedulesArgs),
    /// The tenant's broker bindings (set with `deploy --trigger`): list
    /// them, or pause, resume or remove one.
    Triggers(crate::triggers::TriggersArgs),
    /// A function's dead letters: queued invocations that failed every
    /// attempt. List them, or replay or purge them.
    Dlq(crate::dlq::DlqArgs),
    /// A tenant's tokens: create (with a scope), ls, revoke, rotate.
    #[command(subcommand)]
    Token(crate::tokens::TokenCommand),
    /// Create a tenant and print a deploy token of it (admin token required).
    CreateTenant {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Show a tenant's settings, or change its colocation mode (admin):
    /// which of its functions may share a runtime with whose.
    Tenant {
        name: String,
        /// full, tenant, function or none.
        #[arg(long, conflicts_with = "clear_colocation")]
        colocation: Option<hearth_core::Colocation>,
        /// Drop the tenant's own mode: the cluster's applies again.
        #[arg(long)]
        clear_colocation: bool,
        #[command(flatten)]
        target: Target,
    },
    /// List a function's recorded invocations (`recordings NAME`), or show
    /// one's timeline of host calls (`recordings show ID`).
    Recordings {
        /// A function name, or `show`.
        name: String,
        /// With `show`: the recording's id.
        id: Option<String>,
        #[command(flatten)]
        filter: crate::recordings::Filter,
        #[command(flatten)]
        target: Target,
    },
    /// Replay recorded invocations: `replay ID` (exits 1 unless identical),
    /// `replay NAME --against V`, `replay --export ID > case.tape`,
    /// `replay --file case.tape`. Replays never touch KV or the network.
    Replay {
        /// A recording id, or with --against a function name.
        what: Option<String>,
        /// Replay NAME's recorded traffic against this version.
        #[arg(long)]
        against: Option<u32>,
        /// With --against: the newest N recordings (default 100).
        #[arg(long)]
        last: Option<u32>,
        /// With --against: recordings newer than this (90s, 15m, 1h, 2d).
        #[arg(long)]
        since: Option<String>,
        /// With --against: `error`, `any` or an HTTP status.
        #[arg(long)]
        status: Option<String>,
        /// Print recording ID as a tape file, to keep as a test case.
        #[arg(long, value_name = "ID")]
        export: Option<String>,
        /// Replay a tape file made with --export.
        #[arg(long)]
        file: Option<PathBuf>,
        /// With an id or --file: replay against this version instead.
        #[arg(long)]
        version: Option<u32>,
        #[command(flatten)]
        target: Target,
    },
}

pub(crate) struct Client {
    http: reqwest::Client,
    pub(crate) url: String,
    token: Option<String>,
    pub(crate) json: bool,
}

impl Client {
    pub(crate) fn new(data_dir: &Path, target: &Target) -> anyhow::Result<Self> {
        let url = match &target.url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => {
                let path = data_dir.join("server.json");
                let text = std::fs::read_to_string(&path).with_context(|| {
                    format!(
                        "no running Hearth found ({} is missing): start one with `hearth up`, or set HEARTH_URL",
                        path.display()
                    )
                })?;
                let v: Value = serde_json::from_str(&text)
                    .with_context(|| format!("{} is not JSON", path.display()))?;
                v["url"]
                    .as_str()
                    .context("server.json has no url")?
                    .to_string()
            }
        };
        let token = match &target.token {
            Some(t) => Some(t.clone()),
            None => std::fs::read_to_string(data_dir.join("token"))
                .ok()
                .map(|t| t.trim().to_string()),
        };
        Ok(Client {
            http: reqwest::Client::new(),
            url,
            token,
            json: target.json,
        })
    }

    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut rb = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    /// A successful answer read as the API's own type for it
    /// (`hearth_api::answers`), and as JSON for `--json`. An answer that is
    /// not that type (another Hearth's) is an error naming the field.
    pub(crate) async fn send_as<T: serde::de::DeserializeOwned>(
        &self,
        rb: reqwest::RequestBuilder,
    ) -> anyhow::Result<(T, Value)> {
        let v = self.send(rb).await?;
        let typed = serde_path_to_error::deserialize(&v).map_err(|e| {
            anyhow::anyhow!(
                "Hearth at {} answered in a shape this CLI does not know (at `{}`: {}): is it another version?",
                self.url,
                e.path(),
                e.inner()
            )
        })?;
        Ok((typed, v))
    }

    pub(crate) async fn send(&self, rb: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let bytes = self.send_raw(rb).await?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// The response body of a successful request; an error with the
    /// server's message otherwise.
    pub(crate) async fn send_raw(&self, rb: reqwest::RequestBuilder) -> anyhow::Result<Vec<u8>> {
        let resp = rb
            .send()
            .await
            .with_context(|| format!("cannot reach Hearth at {}", self.url))?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        if !status.is_success() {
            let msg = match serde_json::from_slice::<hearth_api::answers::ErrorBody>(&bytes) {
                Ok(body) => body.error.message.into_owned(),
                Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
            };
            bail!("{} {}", status.as_u16(), msg);
        }
        Ok(bytes.to_vec())
    }

    pub(crate) fn print_json(&self, v: &Value) {
        println!(
            "{}",
            serde_json::to_string_pretty(v).expect("a Value always serializes")
        );
    }
}

pub(crate) fn read_data(data: &str) -> anyhow::Result<Vec<u8>> {
    match data.strip_prefix('@') {
        Some("-") => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)?;
            Ok(buf)
        }
        Some(path) => std::fs::read(path).with_context(|| format!("failed to read {path}")),
        None => Ok(data.as_bytes().to_vec()),
    }
}

/// Shows elapsed time on a terminal while `fut` runs longer than a second.
pub(crate) async fn with_progress<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    if !std::io::stderr().is_terminal() {
        return fut.await;
    }
    let started = Instant::now();
    tokio::pin!(fut);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            out = &mut fut => {
                if started.elapsed() >= Duration::from_secs(1) {
                    eprintln!();
                }
                return out;
            }
            _ = tick.tick() => {
                let secs = started.elapsed().as_secs_f32();
                if secs >= 1.0 {
                    eprint!("\r{what}… {secs:.1}s");
                    let _ = std::io::stderr().flush();
                }
            }
        }
    }
}

/// `ms` (since the Unix epoch) as a date and time in UTC, to the
/// millisecond: `2026-11-28 13:14:05.123Z`. Out of range, the number.
pub(crate) fn fmt_time(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S%.3fZ").to_string(),
        Err(_) => format!("{ms} ms"),
    }
}

fn print_status(url: &str, status: &answers::Status) {
    let node = &status.node;
    // A tenant is shown its own invocations; the operator the node's.
    let (flying, of) = match node.in_flight {
        Some(n) => (n, node.max_concurrency),
        None => (status.tenant.in_flight, status.tenant.max_concurrency),
    };
    println!(
        "Hearth {} at {url}: {flying} of {of} invocations in flight",
        node.version
    );
    if let Some(m) = &node.memory {
        println!(
            "memory: {} of {} MiB reserved by running invocations",
            m.reserved_mib, m.capacity_mib
        );
    }
    if let Some(d) = &node.disk {
        println!(
            "disk: {}{} MiB free of {} (at least {} must stay free)",
            if d.full { "FULL, " } else { "" },
            d.free_mib,
            d.total_mib,
            d.min_free_mib,
        );
    }
    for fault in node.faults.iter().flatten() {
        println!("FAULT: {fault}");
    }
    if node.degraded.is_empty() {
        println!("isolation: full (nothing degraded)");
    } else {
        println!("isolation: DEGRADED");
        for d in &node.degraded {
            println!("  - {d}");
        }
    }
    // Each tier's details are its own (open JSON).
    let details = |tier: &str| node.tiers.get(tier).map(|t| &t.details);
    if let Some(j) = details("js").and_then(Value::as_object) {
        println!(
            "js tier: {} workers, {} running, {} idle isolates ({} KiB)",
            j.get("workers").unwrap_or(&Value::Null),
            j.get("running").unwrap_or(&Value::Null),
            j.get("idle_isolates").unwrap_or(&Value::Null),
            j.get("idle_isolate_bytes")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                / 1024,
        );
    }
    if let Some(p) = details("process").and_then(Value::as_object) {
        println!(
            "process tier: cgroups {}, colocation {}, {} paused handlers, generic processes ready: {} Python, {} Node.js",
            p.get("cgroups").and_then(Value::as_str).unwrap_or("none"),
            p.get("colocation").and_then(Value::as_str).unwrap_or("?"),
            p.get("paused_handlers").unwrap_or(&Value::Null),
            p.get("generic_python_processes").unwrap_or(&Value::Null),
            p.get("generic_node_processes").unwrap_or(&Value::Null),
        );
        for z in p
            .get("zygotes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let scope = match (z["scope"]["shared_by"].as_str(), z["scope"]["of"].as_str()) {
                (None, _) => "root".to_string(),
                (Some(by), None) => format!("shared by {by}"),
                (Some(by), Some(of)) => format!("shared by {by} {of}"),
            };
            println!(
                "  zygote pid {}: {} packages, {:.1} MiB PSS, {} forks, {scope}",
                z["pid"],
                z["packages"],
                z["pss_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                z["forks"]
            );
        }
    }
}

pub async fn run(data_dir: &Path, cmd: ClientCommand) -> anyhow::Result<()> {
    match cmd {
        ClientCommand::Deploy(args) => {
            let c = Client::new(data_dir, &args.target)?;
            crate::deploy::deploy(&c, args).await?;
        }
        ClientCommand::Invoke {
            name,
            data,
            method,
            path,
            headers,
            tenant,
            version,
            include,
            logs,
            run_async,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let tenant = match tenant {
                Some(t) => t,
                None => {
                    let (me, _): (hearth_store::Principal, _) = c
                        .send_as(c.request(reqwest::Method::GET, "/v1/whoami"))
                        .await?;
                    me.tenant
                }
            };
            let body = data.as_deref().map(read_data).transpose()?;
            let method = method.unwrap_or_else(|| {
                if body.is_some() {
                    "POST".into()
                } else {
                    "GET".into()
                }
            });
            let method =
                reqwest::Method::from_bytes(method.as_bytes()).context("invalid method")?;
            let mut rb = c.request(method, &format!("/fn/{tenant}/{name}{path}"));
            if let Some(v) = version {
                rb = rb.header("hearth-version", v);
            }
            if run_async {
                rb = rb.header("hearth-invocation-type", "Event");
            }
            for h in &headers {
                let (k, v) = h
                    .split_once(':')
                    .with_context(|| format!("header {h:?} should be \"Name: value\""))?;
                rb = rb.header(k.trim(), v.trim());
            }
            if let Some(b) = body {
                rb = rb.body(b);
            }
            let resp = rb
                .send()
                .await
                .with_context(|| format!("cannot reach Hearth at {}", c.url))?;
            let status = resp.status();
            if include {
                println!("{:?} {}", resp.version(), status);
                for (k, v) in resp.headers() {
                    println!("{k}: {}", v.to_str().unwrap_or("<binary>"));
                }
                println!();
            }
            let invocation = resp
                .headers()
                .get("hearth-invocation-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let bytes = resp.bytes().await?;
            std::io::stdout().write_all(&bytes)?;
            std::io::stdout().flush()?;
            if logs {
                let id = invocation.context("the answer names no invocation")?;
                crate::logs::of_invocation(&c, &name, &id).await?;
            }
            if !status.is_success() {
                bail!("the invocation failed with {status}");
            }
        }
        ClientCommand::Status { target } => {
            let c = Client::new(data_dir, &target)?;
            let (status, v): (answers::Status, _) = c
                .send_as(c.request(reqwest::Method::GET, "/v1/status"))
                .await?;
            if c.json {
                c.print_json(&v);
                return Ok(());
            }
            print_status(&c.url, &status);
        }
        ClientCommand::Ls { target } => {
            let c = Client::new(data_dir, &target)?;
            let (list, v): (answers::FunctionList, _) = c
                .send_as(c.request(reqwest::Method::GET, "/v1/functions"))
                .await?;
            if c.json {
                c.print_json(&v);
                return Ok(());
            }
            println!(
                "{:<24} {:>7} {:>5} {:>6} {:>10} {:>8}  {:<6}  MODE",
                "NAME", "RUNTIME", "LIVE", "NEWEST", "MEMORY", "TIMEOUT", "PUBLIC"
            );
            for f in &list.functions {
                let l = &f.summary.latest;
                let (bounces, pinned) = (f.summary.mode.bounces, f.summary.mode.pinned);
                let mode = match (l.spec.runtime, pinned, f.compiled) {
                    (Runtime::Js, true, _) => format!("process (pinned after {bounces} fallbacks)"),
                    (Runtime::Js, false, Some(answers::Compiled::Compiled)) => {
                        format!("compiled (proved on {} tapes)", f.proved_tapes.unwrap_or(0))
                    }
                    (Runtime::Js, false, _) if bounces > 0 => {
                        format!("isolate ({bounces} fallbacks)")
                    }
                    (Runtime::Js, false, Some(answers::Compiled::Tracing)) => {
                        "isolate (tracing)".to_string()
                    }
                    (Runtime::Js, false, _) => "isolate".to_string(),
                    (Runtime::Wasm, _, _) => "wasm".to_string(),
                    _ => "process".to_string(),
                };
                let live = match (f.summary.live, f.summary.live_split) {
                    (Some(v), Some(s)) => format!("{v}+{}@{}%", s.version, s.percent),
                    (Some(v), None) => v.to_string(),
                    (None, _) => "-".to_string(),
                };
                println!(
                    "{:<24} {:>7} {live:>5} {:>6} {:>7}MiB {:>6}ms  {:<6}  {mode}",
                    f.summary.name,
                    l.spec.runtime.as_str(),
                    l.version,
                    l.spec.limits.memory_mib,
                    l.spec.limits.timeout_ms,
                    if l.spec.public { "yes" } else { "no" }
                );
            }
        }
        ClientCommand::Versions {
            name,
            download: Some(n),
            output,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            crate::releases::download(&c, &name, n, output).await?;
        }
        ClientCommand::Promote {
            name,
            version,
            alias,
            gate,
            gate_last,
            gate_since,
            accept_diff,
            steps,
            step_wait,
            max_error_rate,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let gate = gate.then_some(answers::Gate {
                last: gate_last,
                since: gate_since,
                accept_diff,
            });
            match (gate, steps.is_empty()) {
                (Some(gate), false) => {
                    let wait = hearth_core::parse_duration_s(&step_wait).with_context(|| {
                        format!("--step-wait {step_wait:?}: write 90s, 15m or 1h")
                    })?;
                    if steps.last() != Some(&100) || !steps.is_sorted() {
                        anyhow::bail!(
                            "--steps rise to 100 (e.g. 1,10,100): the canary ends with the \
                             version taking every call"
                        );
                    }
                    let canary = crate::releases::Canary {
                        steps,
                        step_wait: std::time::Duration::from_secs(wait),
                        max_error_percent: max_error_rate,
                    };
                    crate::releases::canary(&c, &name, &alias, version, gate, canary).await?;
                }
                (gate, _) => crate::releases::promote(&c, &name, &alias, version, gate).await?,
            }
        }
        ClientCommand::Split {
            name,
            version,
            percent,
            alias,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            crate::releases::split(&c, &name, &alias, version, percent).await?;
        }
        ClientCommand::Rollback {
            name,
            alias,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            crate::releases::rollback(&c, &name, &alias).await?;
        }
        ClientCommand::Aliases {
            name,
            remove: Some(alias),
            target,
            ..
        } => {
            let c = Client::new(data_dir, &target)?;
            crate::releases::remove(&c, &name, &alias).await?;
        }
        ClientCommand::Aliases {
            name,
            history,
            remove: None,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            crate::releases::aliases(&c, &name, history.as_deref()).await?;
        }
        ClientCommand::Versions {
            name,
            download: None,
            output: _,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let (versions, v): (answers::FunctionVersions, _) = c
                .send_as(c.request(reqwest::Method::GET, &format!("/v1/functions/{name}")))
                .await?;
            if c.json {
                c.print_json(&v);
                return Ok(());
            }
            println!(
                "{:>8}  {:<24}  {:<16}  {:<12}  SETTINGS",
                "VERSION", "CREATED", "ARTIFACT", "ALIASES"
            );
            for ver in &versions.versions {
                let (version, spec) = (&ver.version, &ver.version.spec);
                let aliases: Vec<&str> = versions
                    .aliases
                    .iter()
                    .filter(|a| a.version == version.version)
                    .map(|a| a.alias.as_str())
                    .collect();
                let hosts = if spec.allowed_hosts.is_empty() {
                    String::new()
                } else {
                    format!(" hosts={}", spec.allowed_hosts.join(","))
                };
                // Which secret each variable reads (names only: values
                // never leave the secret store).
                let secrets: String = spec
                    .secrets
                    .iter()
                    .map(|(var, secret)| format!(" secret:{var}={secret}"))
                    .collect();
                println!(
                    "{:>8}  {:<24}  {:<16}  {:<12}  {}MiB {}ms{}{hosts}{secrets}",
                    version.version,
                    fmt_time(version.created_at_ms),
                    &version.artifact[..12.min(version.artifact.len())],
                    aliases.join(","),
                    spec.limits.memory_mib,
                    spec.limits.timeout_ms,
                    if spec.public { " public" } else { "" },
                );
                // The lock: what this version installs, exactly.
                let packages: Vec<String> = ver
                    .packages
                    .iter()
                    .map(|p| match spec.runtime {
                        Runtime::Python => format!("{}=={}", p.name, p.version),
                        _ => format!("{}@{}", p.name, p.version),
                    })
                    .collect();
                if !packages.is_empty() {
                    println!("{:>8}  packages: {}", "", packages.join(" "));
                }
            }
        }
        ClientCommand::Kv(cmd) => crate::kv::run(data_dir, cmd).await?,
        ClientCommand::Token(cmd) => crate::tokens::run(data_dir, cmd).await?,
        ClientCommand::Secret(cmd) => crate::secrets::run(data_dir, cmd).await?,
        ClientCommand::Schedules(args) => crate::schedules::run(data_dir, args).await?,
        ClientCommand::Triggers(args) => crate::triggers::run(data_dir, args).await?,
        ClientCommand::Dlq(args) => crate::dlq::run(data_dir, args).await?,
        ClientCommand::Rm { name, target } => {
            let c = Client::new(data_dir, &target)?;
            c.send(c.request(reqwest::Method::DELETE, &format!("/v1/functions/{name}")))
                .await?;
            if c.json {
                c.print_json(&serde_json::json!({"removed": name}));
            } else {
                println!("removed {name}");
            }
        }
        ClientCommand::Logs {
            name,
            invocation,
            limit,
            follow,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            crate::logs::show(&c, &name, invocation, limit, follow).await?;
        }
        ClientCommand::Recordings {
            name,
            id,
            filter,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            match (name.as_str(), id) {
                ("show", Some(id)) => crate::recordings::show(&c, &id).await?,
                (_, Some(_)) => {
                    bail!("use `hearth recordings NAME` or `hearth recordings show ID`")
                }
                (name, None) => crate::recordings::list(&c, name, filter).await?,
            }
        }
        ClientCommand::Replay {
            what,
            against,
            last,
            since,
            status,
            export,
            file,
            version,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let identical = match (what, against, export, file) {
                (None, None, Some(id), None) => {
                    let tape = c
                        .send_raw(
                            c.request(reqwest::Method::GET, &format!("/v1/recordings/{id}/export")),
                        )
                        .await?;
                    std::io::stdout().write_all(&tape)?;
                    true
                }
                (None, None, None, Some(path)) => {
                    let tape = std::fs::read(&path)
                        .with_context(|| format!("failed to read {}", path.display()))?;
                    crate::recordings::replay_file(&c, tape, version).await?
                }
                (Some(name), Some(against), None, None) => {
                    crate::recordings::replay_traffic(&c, &name, against, last, since, status)
                        .await?;
                    true
                }
                (Some(id), None, None, None) => crate::recordings::replay(&c, &id, version).await?,
                _ => bail!(
                    "use one of: replay ID | replay NAME --against VERSION | replay --export ID | replay --file FILE"
                ),
            };
            if !identical {
                std::process::exit(1);
            }
        }
        ClientCommand::Tenant {
            name,
            colocation,
            clear_colocation,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let path = format!("/v1/tenants/{name}");
            let req = if colocation.is_some() || clear_colocation {
                c.request(reqwest::Method::PUT, &path)
                    .json(&serde_json::json!({ "colocation": colocation }))
            } else {
                c.request(reqwest::Method::GET, &path)
            };
            let (view, v): (answers::TenantView, _) = c.send_as(req).await?;
            if c.json {
                c.print_json(&v);
            } else {
                println!(
                    "tenant {}: colocation {} ({})",
                    view.tenant,
                    view.colocation.as_str(),
                    match view.colocation_override {
                        Some(_) => "its own".to_string(),
                        None => format!(
                            "the cluster's; its own would override {}",
                            view.cluster_colocation.as_str()
                        ),
                    }
                );
            }
        }
        ClientCommand::CreateTenant { name, target } => {
            let c = Client::new(data_dir, &target)?;
            let (created, v): (answers::TenantCreated, _) = c
                .send_as(
                    c.request(reqwest::Method::POST, "/v1/tenants")
                        .json(&serde_json::json!({"name": name})),
                )
                .await?;
            if c.json {
                c.print_json(&v);
            } else {
                println!(
                    "created tenant {}\ntoken: {}",
                    created.tenant, created.token
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fmt_time;

    #[test]
    fn times_are_printed_with_their_date_in_utc() {
        // 2026-11-28 13:14:05.123 UTC.
        assert_eq!(fmt_time(1_795_871_645_123), "2026-11-28 13:14:05.123Z");
        assert_eq!(fmt_time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(fmt_time(i64::MAX), format!("{} ms", i64::MAX));
    }
}
