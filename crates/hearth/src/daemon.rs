//! `hearth up`: open the data directory, wire the crates, serve.
//!
//! Data directory layout:
//! ```text
//! hearth.toml      optional settings
//! hearth.db        SQLite registry, KV, logs (WAL)
//! artifacts/       code by sha256
//! cache/           compiled modules by engine and sha256
//! token            the admin token for the CLI (mode 0600)
//! server.json      {url, pid} of the running daemon, for the CLI
//! ```

use std::sync::Arc;

use anyhow::Context;
use hearth_api::ClusterRole;
use hearth_cluster::gateway::Join;
use hearth_cluster::{AttemptKey, Gateway, GatewayArtifacts, GatewayConfig, Membership};
use hearth_core::{FunctionSpec, Runtime};
use hearth_host::{Engine, HostLimits, HostServices};
use hearth_js::{JsConfig, JsEngine};
use hearth_node::{Node, NodeConfig};
use hearth_proc::{ProcConfig, ProcEngine};
use hearth_store::{ArtifactStore, PgStore, SplitStore, SqliteStore, Store};
use hearth_wasm::{WasmConfig, WasmEngine};

use crate::config::{Role, Settings};

pub const ADMIN_TENANT: &str = "admin";

/// Functions every fresh Hearth starts with, so there is something to call.
const EXAMPLES: &[(&str, &[u8], bool)] = &[
    (
        "hello",
        include_bytes!("../../../examples/wasm/hello.wat"),
        true,
    ),
    (
        "echo",
        include_bytes!("../../../examples/wasm/echo.wat"),
        true,
    ),
    (
        "counter",
        include_bytes!("../../../examples/wasm/counter.wat"),
        false,
    ),
];

pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let dir = &settings.data_dir;
    crate::datadir::secure(dir)?;
    let local = SqliteStore::open(dir.join("hearth.db"))
        .with_context(|| format!("failed to open {}", dir.display()))?;
    let store: Arc<dyn Store> = match &settings.store {
        None => Arc::new(local),
        Some(url) => {
            let shared = PgStore::open(url)
                .with_context(|| format!("failed to open the cluster store {}", redact(url)))?;
            Arc::new(SplitStore::new(shared, local))
        }
    };
    let artifacts = ArtifactStore::open(dir.join("artifacts"))?;
    // Before serving, so no deploy can be between writing its artifact and
    // committing its version: anything unreferenced now is garbage.
    let keep = store.referenced_artifacts()?.into_iter().collect();
    let removed = artifacts.retain(&keep)?;
    if removed > 0 {
        tracing::info!(removed, "removed artifacts no version refers to");
    }
    let mut wasm_config = WasmConfig::new(dir.join("cache"));
    wasm_config.pooling = settings.pooling;
    wasm_config.max_sandboxes = settings.max_sandboxes;
    wasm_config.max_memory_mib = settings.max_memory_mib;
    wasm_config.time_slice_ms = settings.time_slice_ms;
    wasm_config.max_response_bytes = settings.max_response_bytes;
    let wasm = WasmEngine::new(wasm_config).context("failed to start the wasm engine")?;
    let mut proc_config = ProcConfig::new(dir.join("proc"));
    proc_config.max_response_bytes = settings.max_response_bytes;
    proc_config.max_body_bytes = settings.max_body_bytes;
    proc_config.offline_packages = settings.offline_packages.clone();
    proc_config.allow_private_egress = settings.allow_private_egress;
    proc_config.package_index_hosts = settings.package_index_hosts.clone();
    proc_config.registries = hearth_proc::install::Registries {
        pip_index_url: settings.package_index_url.clone(),
        npm_registry: settings.npm_registry.clone(),
    };
    proc_config.keep_alive = std::time::Duration::from_secs(settings.keep_alive_s);
    proc_config.caches = settings.proc_caches;
    proc_config.generic_pool = settings.proc_pool;
    let colocation = hearth_node::DefaultColocation::new(settings.colocation);
    proc_config.colocation = Arc::new(hearth_node::StoreColocation::new(
        colocation.clone(),
        store.clone(),
    ));
    if settings.proc_caches != hearth_proc::Caches::ALL {
        tracing::warn!(caches = ?settings.proc_caches, "process tier caches are turned off: cold starts will be slow");
    }
    let proc = ProcEngine::new(proc_config).context("failed to start the process tier")?;
    let mut js_config = JsConfig::new(dir.join("cache"));
    js_config.max_response_bytes = settings.max_response_bytes;
    js_config.keep_alive = std::time::Duration::from_secs(settings.keep_alive_s);
    if let Some(n) = settings.js_workers {
        js_config.workers = n;
        js_config.workers_per_tenant = (n / 2).max(1);
    }
    if let Some(n) = settings.js_workers_per_tenant {
        js_config.workers_per_tenant = n;
    }
    let js = JsEngine::new(js_config).context("failed to start the js tier")?;
    let host = Arc::new(HostServices::new(
        store.clone(),
        HostLimits {
            http_timeout_ms: settings.http_timeout_ms,
            tape_max_bytes: settings.max_tape_bytes,
            private_egress: settings.allow_private_egress,
            kv_max_tenant_bytes: settings.max_kv_mib_per_tenant << 20,
            ..HostLimits::default()
        },
    ));
    let recorder = match &settings.record {
        Some(config) => {
            let archive = hearth_record::Archive::open(&dir.join("recordings"), store.clone())
                .context("failed to open the recordings")?;
            let recorder = hearth_record::Recorder::open(Arc::new(archive), config.clone())
                .context("failed to start the recorder")?;
            Some(Arc::new(recorder))
        }
        None => {
            tracing::warn!("recording is off: invocations cannot be replayed");
            None
        }
    };
    let mut node = Node::new(
        store.clone(),
        artifacts,
        vec![
            Arc::new(wasm) as Arc<dyn Engine>,
            Arc::new(js) as Arc<dyn Engine>,
            Arc::new(proc.clone()) as Arc<dyn Engine>,
        ],
        host,
        NodeConfig {
            max_concurrency: settings.max_concurrency,
            max_timeout_ms: settings.max_timeout_ms,
            max_memory_mib: settings.max_memory_mib,
            pin_after_fallbacks: settings.js_pin_after,
            colocation,
            per_function_metrics: settings.metrics_per_function,
            max_concurrency_per_tenant: settings.max_concurrency_per_tenant,
            max_code_bytes_per_tenant: settings.max_code_mib_per_tenant << 20,
            max_stream_bytes: settings.max_stream_bytes,
        },
    );
    if let Some(r) = &recorder {
        node = node.with_recorder(r.clone());
    }
    if let Role::Node { join, token } = &settings.role {
        node = node.with_artifact_source(GatewayArtifacts::shared(join, token));
    }
    let node = Arc::new(node);
    // Prepared code lives as long as an idle handler does.
    node.spawn_prepared_sweeper(std::time::Duration::from_secs(settings.keep_alive_s));

    match &settings.role {
        // A node's token is the one it joins its gateway with.
        Role::Node { token, .. } => {
            hearth_store::write_secret(&dir.join("token"), token.as_bytes())?
        }
        _ => first_start(&settings, &store, &node).await?,
    }

    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("failed to listen on {}", settings.listen))?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");
    let server_json = serde_json::json!({"url": url, "pid": std::process::id()});
    hearth_store::write_secret(&dir.join("server.json"), server_json.to_string().as_bytes())?;
    let (role, membership) = match &settings.role {
        Role::Node { join, token } => {
            let advertise = settings.advertise.clone().unwrap_or_else(|| url.clone());
            let joining = Join {
                url: advertise,
                capacity_mib: settings.capacity_mib,
                max_concurrency: u32::try_from(settings.max_concurrency).ok(),
            };
            let m = Membership::join(join, token, joining, std::time::Duration::from_secs(30))
                .await
                .map_err(anyhow::Error::msg)?;
            // The cluster's mode is the gateway's (set_default_colocation
            // logs a change from this node's own).
            if let Some(mode) = m.colocation() {
                node.set_default_colocation(mode);
            }
            m.spawn_heartbeats(node.clone());
            (
                ClusterRole::Member {
                    gateway: join.clone(),
                    key: AttemptKey::from_token(token),
                },
                Some(m),
            )
        }
        Role::Gateway => {
            // Nodes join with this token: it also keys the attempts the
            // gateway signs for them.
            let token = std::fs::read_to_string(dir.join("token"))
                .context("the gateway's admin token (written at first start)")?;
            let g = Gateway::new(GatewayConfig {
                heartbeat: std::time::Duration::from_millis(settings.heartbeat_ms),
                attempt_key: Some(AttemptKey::from_token(&token)),
                colocation: settings.colocation,
                ..GatewayConfig::default()
            });
            g.spawn_reaper();
            spawn_journal_sweep(store.clone());
            (ClusterRole::Gateway(g), None)
        }
        Role::All => (ClusterRole::Standalone, None),
    };
    println!("Hearth listening on {url}");
    println!("  data:  {}", dir.display());
    match &settings.role {
        Role::All => println!("  try:   curl -d 'ping' {url}/fn/{ADMIN_TENANT}/echo"),
        Role::Gateway => println!(
            "  role:  gateway; start nodes with HEARTH_JOIN_TOKEN=$(cat {}) hearth up --role node --join {url} --store <the same postgres URL>",
            dir.join("token").display()
        ),
        Role::Node { join, .. } => println!("  role:  node of {join}"),
    }

    let app = hearth_api::router_for(
        node,
        hearth_api::ApiConfig {
            max_body_bytes: settings.max_body_bytes,
            max_code_bytes: settings.max_code_bytes,
            body_timeout: std::time::Duration::from_millis(settings.body_timeout_ms),
        },
        role,
    );
    let limits = crate::serve::ConnLimits {
        header_timeout: std::time::Duration::from_millis(settings.header_timeout_ms),
        max_connections: settings.max_connections,
        max_per_client: settings.max_connections_per_client,
    };
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        crate::serve::serve(listener, app, limits, async move {
            shutdown_signal().await;
            // Out of placement first, so the gateway sends nothing
            // more while requests in flight finish.
            if let Some(m) = membership {
                m.leave().await;
            }
            let _ = stopping.send(());
        })
        .await
    });
    // Requests in flight get a few seconds to finish; a function that runs
    // longer (or a client that never closes) must not keep the node from
    // cleaning up its sandboxes.
    let served = tokio::select! {
        r = &mut server => r.map_err(anyhow::Error::from),
        _ = async {
            let _ = stopped.await;
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        } => {
            tracing::warn!("requests still open 5 s after the stop signal; stopping anyway");
            server.abort();
            Ok(())
        }
    };
    let _ = std::fs::remove_file(dir.join("server.json"));
    // Sandboxes, zygotes, mounts and cgroups go with the daemon: first,
    // since they outlive it on the host.
    tokio::task::spawn_blocking(move || proc.shutdown()).await?;
    tracing::info!("sandboxes removed");
    if let Some(r) = recorder {
        // Writes what is queued: a clean stop loses no tape.
        tokio::task::spawn_blocking(move || r.close()).await?;
        tracing::info!("recordings written");
    }
    served
}

/// A store URL without its password, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_string(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}

/// Creates the admin tenant, its token and the examples, once.
async fn first_start(
    settings: &Settings,
    store: &Arc<dyn Store>,
    node: &Node,
) -> anyhow::Result<()> {
    let token_path = settings.data_dir.join("token");
    if store.tenant_exists(ADMIN_TENANT)? && token_path.exists() {
        return Ok(());
    }
    if !store.tenant_exists(ADMIN_TENANT)? {
        store.create_tenant(ADMIN_TENANT)?;
    }
    let token = store.create_token(ADMIN_TENANT, hearth_store::Role::Admin)?;
    hearth_store::write_secret(&token_path, token.as_bytes())?;
    println!(
        "Created tenant {ADMIN_TENANT:?}; its admin token is in {} (mode 0600)",
        token_path.display()
    );
    if settings.examples {
        for (name, code, public) in EXAMPLES {
            let mut spec = FunctionSpec::new(Runtime::Wasm);
            spec.public = *public;
            node.deploy(ADMIN_TENANT, name, code.to_vec().into(), spec)
                .await
                .with_context(|| format!("failed to deploy example {name}"))?;
        }
        println!("Deployed examples: hello, echo (public), counter (needs the token)");
    }
    Ok(())
}

/// Retry journals whose invocations are long over (their node died before
/// forgetting them) go every minute; a journal is read only by a retry,
/// within the function's timeout of its first attempt.
fn spawn_journal_sweep(store: Arc<dyn Store>) {
    const KEEP_MS: i64 = 30 * 60 * 1000;
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            every.tick().await;
            let store = store.clone();
            let swept = tokio::task::spawn_blocking(move || {
                store.journal_sweep(hearth_core::unix_time_ms() - KEEP_MS)
            })
            .await;
            match swept {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::info!(events = n, "swept old retry journals"),
                Ok(Err(e)) => tracing::warn!(error = %e, "could not sweep retry journals"),
                Err(_) => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn store_urls_lose_their_password_only() {
        use super::redact;
        assert_eq!(
            redact("postgres://hearth:s3cret@db:5432/h"),
            "postgres://hearth:***@db:5432/h"
        );
        assert_eq!(
            redact("postgres://hearth@db:5432/h"),
            "postgres://hearth@db:5432/h"
        );
        assert_eq!(redact("postgres://db/h"), "postgres://db/h");
    }
}
