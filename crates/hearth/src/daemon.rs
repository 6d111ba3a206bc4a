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
use hearth_cluster::{AttemptKey, Gateway, GatewayConfig, Membership, SharedArtifacts};
use hearth_core::{FunctionSpec, Runtime};
use hearth_host::{Engine, HostLimits, HostServices};
use hearth_js::{JsConfig, JsEngine};
use hearth_node::{Node, NodeConfig};
use hearth_proc::{ProcConfig, ProcEngine};
use hearth_store::{ArtifactStore, PgStore, SplitStore, SqliteStore, Store, TapeIndex};
use hearth_wasm::{WasmConfig, WasmEngine};

use crate::config::{Role, Settings};

pub use hearth_store::ADMIN_TENANT;

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
    let shared = match &settings.store {
        None => None,
        Some(url) => Some(Arc::new(PgStore::open(url).await.with_context(|| {
            format!("failed to open the cluster store {}", redact(url))
        })?)),
    };
    // The tape index is always this node's own (it points into its files).
    let tape_index: Arc<dyn TapeIndex> = Arc::new(local.clone());
    // Kept as itself too: a leaving node hands its tape index over.
    let mut split = None;
    let store: Arc<dyn Store> = match &shared {
        None => Arc::new(local),
        Some(pg) => {
            let s = Arc::new(SplitStore::new(pg.clone(), local));
            split = Some(s.clone());
            s
        }
    };
    let artifacts = ArtifactStore::open(dir.join("artifacts"))?;
    // Before serving, so no deploy can be between writing its artifact and
    // committing its version: anything unreferenced now is garbage.
    let keep = store.referenced_artifacts().await?.into_iter().collect();
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
    // Every module the compiled js tier makes imports its runtime.
    wasm_config.libraries = vec![hearth_wasm::LibrarySource {
        name: hearth_node::JIT_RUNTIME_NAME,
        wasm: hearth_node::JIT_RUNTIME,
    }];
    let wasm = WasmEngine::new(wasm_config).context("failed to start the wasm engine")?;
    let mut proc_config = ProcConfig::new(dir.join("proc"));
    proc_config.max_response_bytes = settings.max_response_bytes;
    proc_config.max_body_bytes = settings.max_body_bytes;
    proc_config.offline_packages = settings.offline_packages.clone();
    proc_config.cgroup_parent = settings.cgroup_parent.clone();
    proc_config.remount_cgroupfs = settings.remount_cgroupfs;
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
            max_outbound: settings.max_outbound_connections,
            max_outbound_per_tenant: settings.max_outbound_connections_per_tenant,
            log_bytes_per_sec_per_tenant: settings.log_kib_per_sec_per_tenant << 10,
            ..HostLimits::default()
        },
    ));
    proc.use_outbound(host.outbound.clone());
    let recorder = match &settings.record {
        Some(config) => {
            let archive = hearth_record::Archive::open(
                &dir.join("recordings"),
                tape_index.clone(),
                store.clone(),
            )
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
            max_after_response_per_tenant: settings.max_after_response_per_tenant,
            max_code_bytes_per_tenant: settings.max_code_mib_per_tenant << 20,
            max_functions_per_tenant: settings.max_functions_per_tenant,
            max_stream_bytes: settings.max_stream_bytes,
            logs: hearth_node::LogQuotas {
                per_function: settings.max_log_mib_per_function << 20,
                per_tenant: settings.max_log_mib_per_tenant << 20,
                max_age: std::time::Duration::from_secs(settings.log_max_age_h * 3600),
            },
            memory: hearth_node::MemoryBudget {
                node_bytes: settings.capacity_mib << 20,
                tenant_bytes: settings.capacity_mib_per_tenant << 20,
            },
            jit: settings.js_compile.then(hearth_node::JitConfig::default),
            disk: Some(hearth_node::DiskConfig {
                dir: settings.data_dir.clone(),
                min_free_bytes: settings.min_free_disk_mib.map(|m| m << 20),
                reserve_bytes: settings.disk_reserve_mib << 20,
            }),
        },
    );
    if let Some(r) = &recorder {
        node = node.with_recorder(r.clone());
    }
    // Every member of a cluster derives the same secrets key from the
    // cluster key; a single Hearth keeps its own.
    node = node.with_secrets(match &settings.cluster_key {
        Some(key) => hearth_node::SecretBox::from_cluster_key(key.0.as_bytes()),
        None => hearth_node::SecretBox::in_file(&settings.data_dir.join("secrets.key"))
            .map_err(anyhow::Error::msg)?,
    });
    if let Some(pg) = &shared {
        // Deploys publish their code there; nodes fetch what they lack.
        node = node.with_artifact_source(SharedArtifacts::shared(pg.clone()));
    }
    let node = Arc::new(node);
    let stats_file = settings.data_dir.join("stats.json");
    keep_stats(&node, stats_file.clone());
    // Prepared code lives as long as an idle handler does.
    node.spawn_prepared_sweeper(std::time::Duration::from_secs(settings.keep_alive_s));
    // What other members change reaches this one's caches at once.
    let members_changed = Arc::new(tokio::sync::Notify::new());
    if let Some(pg) = &shared {
        spawn_change_listener(pg, node.clone(), members_changed.clone());
    }

    match &settings.role {
        // A node makes no tenants; the operator's token, if given, is
        // kept for the CLI.
        Role::Node { .. } => {
            if let Some(token) = &settings.admin_token {
                hearth_store::write_secret(&dir.join("token"), token.0.as_bytes())?
            }
        }
        _ => first_start(&settings, &store, &node).await?,
    }

    let tls = match &settings.tls {
        Some(files) => Some(hearth_cluster::MemberTls::load(files).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("failed to listen on {}", settings.listen))?;
    let addr = listener.local_addr()?;
    // A node in a cluster with TLS serves only HTTPS (to members).
    let serves_tls = tls.is_some() && matches!(settings.role, Role::Node { .. });
    let url = format!("{}://{addr}", if serves_tls { "https" } else { "http" });
    let server_json = serde_json::json!({"url": url, "pid": std::process::id()});
    hearth_store::write_secret(&dir.join("server.json"), server_json.to_string().as_bytes())?;
    let cluster_key = || {
        let key = settings
            .cluster_key
            .as_ref()
            .expect("checked with the settings");
        AttemptKey::from_token(&key.0)
    };
    let advertise = settings.advertise.clone().unwrap_or_else(|| url.clone());
    if let Some(endpoint) = &settings.otlp_endpoint {
        let tracing = crate::otlp::tracing(endpoint, &advertise, settings.otlp_sample_ratio)
            .map_err(anyhow::Error::msg)?;
        node.start_tracing(tracing);
    }
    let (role, membership) = match (&settings.role, &shared) {
        (Role::Node { gateway }, Some(pg)) => {
            let joining = Join {
                url: advertise.clone(),
                capacity_mib: settings.capacity_mib,
                max_concurrency: u32::try_from(settings.max_concurrency).ok(),
            };
            let m = Membership::join(pg.clone(), joining, std::time::Duration::from_secs(30))
                .await
                .map_err(anyhow::Error::msg)?;
            // The first heartbeat brings the cluster's settings (its
            // colocation mode), before any invocation arrives.
            let reported = Arc::new(Reported(node.clone()));
            if let Err(e) = m.beat(reported.as_ref()).await {
                tracing::warn!(error = %e, "first heartbeat");
            }
            m.spawn_heartbeats(reported);
            let role = ClusterRole::Member {
                gateway: gateway.clone(),
                key: cluster_key(),
                membership: m.clone(),
            };
            (role, Some(m))
        }
        (Role::Gateway, Some(pg)) => {
            let g = Gateway::new(GatewayConfig {
                heartbeat: std::time::Duration::from_millis(settings.heartbeat_ms),
                attempt_key: Some(cluster_key()),
                tls: tls.as_ref().map(|t| t.client.clone()),
                ..GatewayConfig::default()
            });
            // Every gateway writes the same (from the same configuration).
            let cluster = hearth_store::ClusterSettings {
                colocation: Some(settings.colocation.as_str().to_string()),
                heartbeat_ms: Some(settings.heartbeat_ms),
            };
            pg.set_cluster_settings(&cluster).await?;
            if let Some(node_role) = &settings.store_node_role {
                pg.grant_node_role(node_role).await?;
            }
            g.spawn_reaper();
            g.spawn_sync(pg.clone(), members_changed);
            spawn_cluster_sweep(store.clone(), pg.clone());
            (ClusterRole::Gateway(g), None)
        }
        (Role::All, _) => (ClusterRole::Standalone, None),
        (_, None) => anyhow::bail!("a gateway or node needs --store postgres://…"),
    };
    println!("Hearth listening on {url}");
    println!("  data:  {}", dir.display());
    match &settings.role {
        Role::All => println!("  try:   curl -d 'ping' {url}/fn/{ADMIN_TENANT}/echo"),
        Role::Gateway => println!(
            "  role:  gateway; start nodes with the same HEARTH_CLUSTER_KEY: hearth up --role node --store <the same postgres URL>"
        ),
        Role::Node { .. } => println!("  role:  node"),
    }

    if let Some(endpoint) = &settings.otlp_endpoint {
        println!("  traces: OTLP to {endpoint}");
    }
    // Held past the server (which takes its own) for what a stop does last.
    let held = node.clone();
    let (app, probes) = hearth_api::routers_for(
        node,
        hearth_api::ApiConfig {
            max_body_bytes: settings.max_body_bytes,
            max_code_bytes: settings.max_code_bytes,
            body_timeout: std::time::Duration::from_millis(settings.body_timeout_ms),
            trace_report: settings.trace_report.clone(),
            functions_domain: settings.functions_domain.clone(),
            max_buffered_bytes: usize::try_from(settings.max_buffered_mib << 20)
                .unwrap_or(usize::MAX),
            replay_file: hearth_record::ImportLimits::for_node(
                settings.max_body_bytes,
                settings.max_response_bytes,
                settings.max_tape_bytes,
            ),
            // A claim outlives the longest invocation a function may be
            // given, so only a claimer that died loses one.
            events: Some(hearth_events::EventsConfig {
                lease: std::time::Duration::from_millis(settings.max_timeout_ms)
                    + std::time::Duration::from_secs(5),
                max_message_bytes: settings.max_body_bytes,
                broker_allow: settings.broker_allow.clone(),
                ..Default::default()
            }),
        },
        role,
    );
    let limits = crate::serve::ConnLimits {
        header_timeout: std::time::Duration::from_millis(settings.header_timeout_ms),
        write_timeout: std::time::Duration::from_millis(settings.write_timeout_ms),
        max_connections: settings.max_connections,
    };
    let clients = hearth_api::Clients::new(hearth_api::ClientLimits {
        max_connections: settings.max_connections_per_client,
        // A quarter of the node's, and room for one whole body at least.
        buffered_bytes: usize::try_from(settings.max_buffered_mib << 20)
            .unwrap_or(usize::MAX)
            .div_ceil(4)
            .max(settings.max_body_bytes),
        body_bytes_per_sec: settings.client_body_mib_per_sec.saturating_mul(1 << 20),
        max_body_bytes: settings.max_body_bytes,
        trusted_proxies: settings.trusted_proxies.clone(),
    });
    {
        let metrics = held.metrics();
        let seen = clients.clone();
        metrics.read_at_scrape(
            "client_bodies_rate_limited",
            "Request bodies refused unread since start: their client sent faster than \
             --client-body-mib-per-sec",
            move || i64::try_from(seen.refused()).unwrap_or(i64::MAX),
        );
        let seen = clients.clone();
        metrics.read_at_scrape(
            "clients_held",
            "Client addresses with a connection open or a request body being read",
            move || i64::try_from(seen.held()).unwrap_or(i64::MAX),
        );
    }
    if let Some(at) = settings.probe_listen {
        let probe_listener = tokio::net::TcpListener::bind(at)
            .await
            .with_context(|| format!("failed to listen for probes on {at}"))?;
        tokio::spawn(async move { axum::serve(probe_listener, probes).await });
    }
    // A node serves its members over TLS; a gateway takes clients' plain
    // HTTP (TLS for clients ends at an ingress in front of it).
    let server_tls = match (&settings.role, &tls) {
        (Role::Node { .. }, Some(t)) => Some(t.server.clone()),
        _ => None,
    };
    let (stopping, stopped) = tokio::sync::oneshot::channel::<std::time::Instant>();
    let mut server = tokio::spawn(async move {
        crate::serve::serve(listener, app, limits, clients, server_tls, async move {
            shutdown_signal().await;
            let signalled = std::time::Instant::now();
            // Out of placement first, so gateways send nothing more
            // while requests in flight finish.
            if let Some(m) = membership {
                m.leave().await;
            }
            let _ = stopping.send(signalled);
        })
        .await
    });
    // Requests in flight get the drain timeout to finish; a function that
    // runs longer (or a client that never closes) must not keep the node
    // from cleaning up its sandboxes.
    let drain = std::time::Duration::from_secs(settings.drain_timeout_s);
    let mut signalled = None;
    let served = tokio::select! {
        r = &mut server => r.map_err(anyhow::Error::from),
        _ = async {
            if let Ok(at) = stopped.await {
                signalled = Some(at);
            }
            tokio::time::sleep(drain).await;
        } => {
            tracing::warn!(drain_timeout_s = drain.as_secs(), "requests still open at the drain timeout; stopping anyway");
            server.abort();
            Ok(())
        }
    };
    if let Some(at) = signalled {
        tracing::info!(ms = at.elapsed().as_millis() as u64, "drained");
    }
    let _ = std::fs::remove_file(dir.join("server.json"));
    if let Err(e) = held.stats().save(&stats_file, hearth_core::unix_time_ms()) {
        tracing::warn!(error = %e, "the last hour's stats were not saved");
    }
    // Sandboxes, zygotes, mounts and cgroups go with the daemon: first,
    // since they outlive it on the host.
    tokio::task::spawn_blocking(move || proc.shutdown()).await?;
    tracing::info!("sandboxes removed");
    // Sends the spans still queued.
    tokio::task::spawn_blocking(move || held.stop_tracing()).await?;
    if let Some(r) = recorder {
        // Writes what is queued: a clean stop loses no tape.
        tokio::task::spawn_blocking(move || r.close()).await?;
        tracing::info!("recordings written");
    }
    // A node that left tells the cluster which tapes stay on this machine;
    // a store that does not answer within a few seconds is not waited for
    // (the tapes stay, uncounted, until a node starts here again).
    if let (Role::Node { .. }, Some(split)) = (&settings.role, split) {
        let handing = split.hand_over_tapes(&advertise);
        match tokio::time::timeout(std::time::Duration::from_secs(3), handing).await {
            Ok(Ok(tapes)) => tracing::info!(tapes, "tape index handed to the cluster's store"),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not hand the tape index over"),
            Err(_) => tracing::warn!("the store did not take the tape index within 3 s"),
        }
    }
    served
}

/// Takes up the last hour's stats the daemon saved before it stopped,
/// and saves them each minute from now on (a crash loses at most that).
fn keep_stats(node: &Arc<Node>, path: std::path::PathBuf) {
    match node.stats().load(&path, hearth_core::unix_time_ms()) {
        Ok(0) => {}
        Ok(n) => tracing::info!(functions = n, "the last hour's stats taken up again"),
        Err(e) => tracing::warn!(error = %e, "the saved stats were skipped"),
    }
    let node = Arc::downgrade(node);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        every.tick().await;
        loop {
            every.tick().await;
            let Some(node) = node.upgrade() else { return };
            let path = path.clone();
            let saved = tokio::task::spawn_blocking(move || {
                node.stats().save(&path, hearth_core::unix_time_ms())
            })
            .await;
            if let Ok(Err(e)) = saved {
                tracing::warn!(error = %e, "the last hour's stats were not saved");
            }
        }
    });
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

/// Creates the admin tenant, its token and the examples, once; takes the
/// operator's admin token into the store if one was given. Gateways
/// starting together on one store create the tenant and examples once.
async fn first_start(
    settings: &Settings,
    store: &Arc<dyn Store>,
    node: &Arc<Node>,
) -> anyhow::Result<()> {
    let token_path = settings.data_dir.join("token");
    let created = match store.create_tenant(ADMIN_TENANT).await {
        Ok(()) => true,
        Err(hearth_store::StoreError::TenantExists(_)) => false,
        Err(e) => return Err(e.into()),
    };
    match &settings.admin_token {
        Some(token) => {
            store
                .add_token(
                    ADMIN_TENANT,
                    &hearth_store::Grant::of(hearth_store::Scope::Admin),
                    &token.0,
                )
                .await
                .context("taking HEARTH_ADMIN_TOKEN as the admin token")?;
            hearth_store::write_secret(&token_path, token.0.as_bytes())?;
        }
        None if !created && token_path.exists() => {}
        None => {
            let (token, _) = store
                .create_token(
                    ADMIN_TENANT,
                    &hearth_store::Grant::of(hearth_store::Scope::Admin),
                )
                .await?;
            hearth_store::write_secret(&token_path, token.as_bytes())?;
            println!(
                "Created an admin token of tenant {ADMIN_TENANT:?} in {} (mode 0600)",
                token_path.display()
            );
        }
    }
    if created && settings.examples {
        for (name, code, public) in EXAMPLES {
            let mut spec = FunctionSpec::new(Runtime::Wasm);
            spec.public = *public;
            node.deploy(ADMIN_TENANT, name, code.to_vec().into(), spec, true)
                .await
                .with_context(|| format!("failed to deploy example {name}"))?;
        }
        println!("Deployed examples: hello, echo (public), counter (needs the token)");
    }
    Ok(())
}

/// Hears what other members of the cluster change: a function's versions
/// or mode (this member's caches of it are forgotten) and nodes joining or
/// leaving (a gateway reads the nodes' rows at once).
fn spawn_change_listener(
    pg: &Arc<PgStore>,
    node: Arc<Node>,
    members_changed: Arc<tokio::sync::Notify>,
) {
    use hearth_store::Change;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut changes = pg.listen(stop.clone());
    tokio::spawn(async move {
        // The listener thread stops when this task (and so its receiver)
        // goes with the runtime.
        let _stop_on_drop = StopOnDrop(stop);
        while let Some(change) = changes.recv().await {
            match change {
                Change::Function { tenant, name } => node.forget(Some((&tenant, &name))),
                Change::Secret { tenant, name } => node.forget_secret(&tenant, &name),
                // Tenant settings are read from the store when used.
                Change::Tenant { .. } => {}
                Change::Members => members_changed.notify_one(),
                Change::Resync => {
                    tracing::info!("reconnected to the cluster's store: caches forgotten");
                    node.forget(None);
                    members_changed.notify_one();
                }
            }
        }
    });
}

struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Every minute, what the cluster's store holds for nobody: retry
/// journals whose invocations are long over (their node died before
/// forgetting them; a journal is read only by a retry, within the
/// function's timeout of its first attempt), rows of nodes silent for an
/// hour, and artifacts no version names (an hour old, so a deploy between
/// its artifact and its version keeps it). Any gateway may do it.
fn spawn_cluster_sweep(store: Arc<dyn Store>, pg: Arc<PgStore>) {
    const KEEP_MS: i64 = 30 * 60 * 1000;
    const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            every.tick().await;
            let swept = async {
                Ok::<_, hearth_store::StoreError>((
                    store
                        .journal_sweep(hearth_core::unix_time_ms() - KEEP_MS)
                        .await?,
                    pg.sweep_members(HOUR).await?,
                    pg.sweep_artifacts(HOUR).await?,
                ))
            }
            .await;
            match swept {
                Ok((0, 0, 0)) => {}
                Ok((events, nodes, artifacts)) => {
                    tracing::info!(events, nodes, artifacts, "swept the cluster's store")
                }
                Err(e) => tracing::warn!(error = %e, "could not sweep the cluster's store"),
            }
        }
    });
}

/// The node as its cluster membership reports it.
struct Reported(Arc<Node>);

impl hearth_cluster::Reporting for Reported {
    fn loaded(&self) -> Vec<(String, String)> {
        self.0.loaded()
    }

    fn in_flight(&self) -> u64 {
        self.0.in_flight() as u64
    }

    fn pool_free(&self) -> std::collections::BTreeMap<String, u64> {
        self.0.pool_free()
    }

    fn ran(&self) -> hearth_core::ByMode {
        self.0.invocations_by_mode()
    }

    fn set_default_colocation(&self, mode: hearth_core::Colocation) {
        self.0.set_default_colocation(mode);
    }
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
