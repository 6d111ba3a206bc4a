//! `hearth deploy`: what it sends (the module, file or bundle and the
//! function's settings as query parameters) and how it packs a directory
//! or a source file with its requirements.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;

use crate::client::{Client, Target, with_progress};

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The code: a .wasm/.wat module, a .py/.mjs/.js file, a directory,
    /// or a tar/tar.gz/zip bundle.
    file: PathBuf,
    /// Python packages (pinned name==version lines) or an npm
    /// package.json to bundle with a single source file.
    #[arg(long)]
    requirements: Option<PathBuf>,
    /// Function name (default: the file name without extension).
    #[arg(long)]
    name: Option<String>,
    /// wasm, js, python or node (default: inferred from the file).
    #[arg(long)]
    runtime: Option<String>,
    #[arg(long)]
    memory_mib: Option<u32>,
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Host (or host:port) outbound HTTP may reach; repeatable.
    #[arg(long = "allow-host")]
    allow_hosts: Vec<String>,
    /// NAME=VALUE in the function's environment; repeatable.
    #[arg(long = "env")]
    env: Vec<String>,
    /// Bind the tenant's secret NAME as the environment variable NAME, or
    /// VAR=NAME as VAR (`hearth secret set` makes one); repeatable.
    #[arg(long = "secret", value_name = "[VAR=]NAME")]
    secrets: Vec<String>,
    /// Fire the function's live alias on a schedule: five cron fields
    /// ("*/5 * * * *"), optionally after "TZ=<IANA zone> ", a nickname
    /// (@hourly, @daily, …) or "@every 30s"; repeatable. Given, they
    /// replace the function's schedules ("none": remove them all).
    #[arg(long = "schedule", value_name = "EXPR")]
    schedules: Vec<String>,
    /// Invoke the function's live alias for each message of a NATS
    /// JetStream stream: "nats://HOST:PORT/STREAM?subject=…&dlq=…"
    /// (docs/events.md); repeatable. Given, they replace the function's
    /// bindings ("none": remove them all).
    #[arg(long = "trigger", value_name = "URL")]
    triggers: Vec<String>,
    /// How many ticks a schedule missed while Hearth was down fire late
    /// (default 0: skipped).
    #[arg(long, value_name = "N")]
    schedule_catch_up: Option<u32>,
    /// Allow invocation without a token.
    #[arg(long)]
    public: bool,
    /// The function to call, as `module.function` (Lambda's handler
    /// setting: `lambda_function.lambda_handler`, `src/index.handler`).
    /// Default: the entry file's `handler`, `main` or `lambda_handler`.
    #[arg(long)]
    handler: Option<String>,
    /// Python: let pip build packages that have no wheel from source. The
    /// build runs the package's own code (in the install sandbox); without
    /// this, installs take wheels only.
    #[arg(long)]
    source_builds: bool,
    /// Stream the request to the function and its response to the caller
    /// as it writes it (wasm modules, js, Node.js Lambda streaming
    /// handlers), instead of whole; components always stream.
    #[arg(long)]
    stream: bool,
    /// Share of invocations recorded, 0 to 1 (default 1: all).
    #[arg(long)]
    record_sample: Option<f64>,
    /// Keep tapes of successful invocations this long (e.g. 1d).
    #[arg(long)]
    keep_ok: Option<String>,
    /// Keep tapes of failed invocations this long (e.g. 30d).
    #[arg(long)]
    keep_errors: Option<String>,
    /// Bytes of host calls one invocation's tape may hold (default and
    /// most: the node's --max-tape-bytes).
    #[arg(long)]
    max_tape_bytes: Option<usize>,
    /// Keep the new version without making it live: it answers as
    /// NAME@VERSION until `hearth promote NAME VERSION`.
    #[arg(long)]
    no_promote: bool,
    #[command(flatten)]
    pub(crate) target: Target,
}

pub(crate) async fn deploy(c: &Client, args: DeployArgs) -> anyhow::Result<()> {
    let DeployArgs {
        file,
        requirements,
        name,
        mut runtime,
        memory_mib,
        timeout_ms,
        allow_hosts,
        env,
        secrets,
        schedules,
        triggers,
        schedule_catch_up,
        public,
        handler,
        source_builds,
        stream,
        record_sample,
        keep_ok,
        keep_errors,
        max_tape_bytes,
        no_promote,
        target: _,
    } = args;
    let mut file_name = file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let code = if file.is_dir() || requirements.is_some() {
        // Directories and source + requirements travel as one tar.
        if runtime.is_none() {
            runtime = Some(infer_bundle_runtime(&file, requirements.as_deref()).to_string());
        }
        file_name = "bundle.tar".into();
        bundle(&file, requirements.as_deref())?
    } else {
        std::fs::read(&file).with_context(|| format!("failed to read {}", file.display()))?
    };
    let name = match name {
        Some(n) => n,
        None => file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .context("cannot name the function: pass --name")?,
    };
    let mut q: Vec<(&str, String)> = vec![("file_name", file_name)];
    if let Some(r) = runtime {
        q.push(("runtime", r));
    }
    if let Some(m) = memory_mib {
        q.push(("memory_mib", m.to_string()));
    }
    if let Some(t) = timeout_ms {
        q.push(("timeout_ms", t.to_string()));
    }
    q.extend(allow_hosts.into_iter().map(|h| ("allow_host", h)));
    q.extend(env.into_iter().map(|e| ("env", e)));
    q.extend(secrets.into_iter().map(|s| ("secret", s)));
    q.extend(schedules.into_iter().map(|s| ("schedule", s)));
    q.extend(triggers.into_iter().map(|t| ("trigger", t)));
    q.extend(schedule_catch_up.map(|n| ("schedule_catch_up", n.to_string())));
    if public {
        q.push(("public", "true".into()));
    }
    if source_builds {
        q.push(("source_builds", "true".into()));
    }
    if stream {
        q.push(("stream", "true".into()));
    }
    q.extend(handler.map(|h| ("handler", h)));
    q.extend(record_sample.map(|r| ("record_sample", r.to_string())));
    q.extend(keep_ok.map(|k| ("keep_ok", k)));
    q.extend(keep_errors.map(|k| ("keep_errors", k)));
    q.extend(max_tape_bytes.map(|b| ("max_tape_bytes", b.to_string())));
    if no_promote {
        q.push(("promote", "false".into()));
    }
    let size_kib = code.len() as f64 / 1024.0;
    let rb = c
        .request(reqwest::Method::POST, &format!("/v1/functions/{name}"))
        .query(&q)
        .body(code);
    let (deployed, v): (hearth_api::answers::Deployed, _) = with_progress(
        &format!("uploading {size_kib:.1} KiB, installing its packages and compiling"),
        c.send_as(rb),
    )
    .await?;
    if c.json {
        c.print_json(&v);
    } else {
        let installs = match deployed.packages.len() {
            0 => String::new(),
            n => {
                let cached = deployed.packages.iter().filter(|p| p.cached).count();
                format!(
                    ", {} ms to install {n} package{} ({cached} cached)",
                    deployed.install_ms,
                    if n == 1 { "" } else { "s" }
                )
            }
        };
        println!(
            "deployed {} version {} ({} ms to check and compile{installs})\n  invoke: {}{}",
            deployed.version.name,
            deployed.version.version,
            deployed.compile_ms,
            c.url,
            deployed.url
        );
        if !deployed.live {
            println!(
                "  not live: `hearth promote {} {}` makes it so",
                deployed.version.name, deployed.version.version
            );
        }
        for s in &deployed.schedules {
            let next = if s.paused {
                "paused".to_string()
            } else {
                format!("next at {}", crate::client::fmt_time(s.next_ms))
            };
            println!("  schedule {}: {} ({next})", s.id, s.expr);
        }
        for t in &deployed.triggers {
            let state = if t.paused { "paused" } else { "consuming" };
            println!(
                "  trigger {}: {} ({state})",
                t.id,
                crate::triggers::source(t)
            );
        }
    }
    // Choices made for the deployer are theirs to know, also under --json.
    for w in &deployed.warnings {
        eprintln!("warning: {w}");
    }
    Ok(())
}

/// A tar of a directory, or of one source file plus its requirements file.
fn bundle(file: &Path, requirements: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    if file.is_dir() {
        b.append_dir_all(".", file)
            .with_context(|| format!("failed to pack {}", file.display()))?;
    } else {
        let name = file.file_name().context("not a file")?;
        b.append_path_with_name(file, name)
            .with_context(|| format!("failed to read {}", file.display()))?;
    }
    if let Some(r) = requirements {
        let name = if r.extension().is_some_and(|e| e == "json") {
            "package.json"
        } else {
            "requirements.txt"
        };
        b.append_path_with_name(r, name)
            .with_context(|| format!("failed to read {}", r.display()))?;
    }
    Ok(b.into_inner()?)
}

/// python when the bundle holds Python, else node.
fn infer_bundle_runtime(file: &Path, requirements: Option<&Path>) -> &'static str {
    let is_py = |p: &Path| p.extension().is_some_and(|e| e == "py" || e == "txt");
    let python = if file.is_dir() {
        std::fs::read_dir(file)
            .map(|d| {
                d.flatten()
                    .any(|e| is_py(&e.path()) && e.path().extension().is_some_and(|x| x == "py"))
            })
            .unwrap_or(false)
    } else {
        is_py(file) || requirements.is_some_and(is_py)
    };
    if python { "python" } else { "js" }
}
