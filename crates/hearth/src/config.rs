//! Settings: `hearth.toml` in the data directory, overridden by `HEARTH_*`
//! environment variables, overridden by flags (clap reads both of those).
//! One struct lists every setting ([`UpArgs`]); figment layers the file
//! and the command line; [`Settings`] is the result with defaults filled
//! in. `docs/hearth.toml` documents every key (a test holds it to the
//! struct).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use hearth_core::Colocation;
use hearth_proc::Caches;
use serde::{Deserialize, Serialize};

/// Every setting of `hearth up`, once: the keys of `hearth.toml` (a
/// misspelt key is an error), the flags, and the `HEARTH_*` variables clap
/// reads for them. All are optional here; [`Settings::resolve`] layers
/// them (flags and variables over the file) and fills in the defaults.
#[serde_with::skip_serializing_none]
#[derive(Debug, Default, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpArgs {
    /// Address to serve on (port 0 picks a free port).
    #[arg(long, env = "HEARTH_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Largest invocation request body, in bytes (default 6 MiB).
    #[arg(long, env = "HEARTH_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Largest body that may stream into or out of one invocation, in
    /// bytes, each way (default 4 GiB): wasm components stream bodies
    /// instead of buffering them, so this bounds time and bandwidth, not
    /// memory.
    #[arg(long, env = "HEARTH_MAX_STREAM_BYTES")]
    pub max_stream_bytes: Option<u64>,
    /// Largest uploaded module, in bytes (default 64 MiB).
    #[arg(long, env = "HEARTH_MAX_CODE_BYTES")]
    pub max_code_bytes: Option<usize>,
    /// Largest response a function may write, in bytes (default 16 MiB).
    #[arg(long, env = "HEARTH_MAX_RESPONSE_BYTES")]
    pub max_response_bytes: Option<usize>,
    /// Wasm sandboxes that may exist at once (default 1000).
    #[arg(long, env = "HEARTH_MAX_SANDBOXES")]
    pub max_sandboxes: Option<u32>,
    /// Invocations that may run at once before 503 (default 1024).
    #[arg(long, env = "HEARTH_MAX_CONCURRENCY")]
    pub max_concurrency: Option<usize>,
    /// Largest memory limit a function may ask for, MiB (default 512).
    #[arg(long, env = "HEARTH_MAX_MEMORY_MIB")]
    pub max_memory_mib: Option<u32>,
    /// Largest timeout a function may ask for, ms (default 300000).
    #[arg(long, env = "HEARTH_MAX_TIMEOUT_MS")]
    pub max_timeout_ms: Option<u64>,
    /// Scheduling time slice for Wasm, ms (default 5).
    #[arg(long, env = "HEARTH_TIME_SLICE_MS")]
    pub time_slice_ms: Option<u64>,
    /// Use wasmtime's pooling allocator (default true).
    #[arg(long, env = "HEARTH_POOLING")]
    pub pooling: Option<bool>,
    /// Timeout of one outbound HTTP call, ms (default 10000).
    #[arg(long, env = "HEARTH_HTTP_TIMEOUT_MS")]
    pub http_timeout_ms: Option<u64>,
    /// Deploy the bundled example functions on first start (default true).
    #[arg(long, env = "HEARTH_EXAMPLES")]
    pub examples: Option<bool>,
    /// Install packages only from this directory: Python's from its wheels
    /// (pip --no-index --find-links), Node.js's from the npm cache in its
    /// `npm/` (npm --offline; fill it with `npm cache add --cache DIR/npm`)
    /// (default: online).
    #[arg(long, env = "HEARTH_OFFLINE_PACKAGES")]
    pub offline_packages: Option<PathBuf>,
    /// The cgroup Python and Node.js sandboxes go under, a path in the
    /// hierarchy such as /hearth.slice/nodes (default: on cgroup v2 the
    /// group Hearth was started in, which must be delegated to it and hold
    /// no other process, as a systemd service with Delegate=yes is; on v1
    /// /hearth). On v2 it must be delegated and offer the memory and pids
    /// controllers; Hearth never writes the root of the hierarchy.
    #[arg(long, env = "HEARTH_CGROUP_PARENT")]
    pub cgroup_parent: Option<PathBuf>,
    /// In a container started with a cgroup namespace of its own, which
    /// runtimes mount read-only: remount it read-write (needs
    /// CAP_SYS_ADMIN) and put sandboxes in groups below the container's,
    /// inside its limits (default false). cgroup v2 only; refused where
    /// the read-only cgroupfs is not a container's own namespace.
    #[arg(long, env = "HEARTH_REMOUNT_CGROUPFS")]
    pub remount_cgroupfs: Option<bool>,
    /// Seconds a paused Python/Node.js handler, and a version's prepared
    /// code in any tier, is kept unused (default 300).
    #[arg(long, env = "HEARTH_KEEP_ALIVE_S")]
    pub keep_alive_s: Option<u64>,
    /// The process tier's caches: all (default), none, or a comma list of
    /// install, import, handler, learn. Turning caches off is for measuring
    /// them.
    #[arg(long, env = "HEARTH_PROC_CACHES")]
    pub proc_caches: Option<String>,
    /// Generic Python and Node.js processes kept started, per language,
    /// for new functions' first invocations (default 2; 0 turns the pools
    /// off, for measuring them).
    #[arg(long, env = "HEARTH_PROC_POOL")]
    pub proc_pool: Option<usize>,
    /// Which functions may share a runtime (a Python zygote holding their
    /// packages): full, tenant (default), function or none. A tenant's
    /// own setting (PUT /v1/tenants/{tenant}) overrides it. Give every
    /// member of a cluster the same.
    #[arg(long, env = "HEARTH_COLOCATION")]
    pub colocation: Option<Colocation>,
    /// Fallbacks to the process tier after which a JavaScript function
    /// stays there until its next deploy (default 3).
    #[arg(long, env = "HEARTH_JS_PIN_AFTER")]
    pub js_pin_after: Option<u32>,
    /// Compile hot, CPU-bound JavaScript functions from their traces to
    /// wasm, proved against their tapes before they serve (default true).
    #[arg(long, env = "HEARTH_JS_COMPILE")]
    pub js_compile: Option<bool>,
    /// Threads running JavaScript isolates (default: twice the cores, at
    /// least 4); as many again wait in reserve.
    #[arg(long, env = "HEARTH_JS_WORKERS")]
    pub js_workers: Option<usize>,
    /// Of those, how many one tenant's invocations may run on at once
    /// (default: half).
    #[arg(long, env = "HEARTH_JS_WORKERS_PER_TENANT")]
    pub js_workers_per_tenant: Option<usize>,
    /// Record every invocation's tape (default true).
    #[arg(long, env = "HEARTH_RECORD")]
    pub record: Option<bool>,
    /// When a tape counts as kept: batched (default; a crash loses at most
    /// one flush interval) or sync (the response waits for the disk).
    #[arg(long, env = "HEARTH_RECORD_DURABILITY")]
    pub record_durability: Option<String>,
    /// Flush interval of batched recording, ms (default 200).
    #[arg(long, env = "HEARTH_RECORD_FLUSH_MS")]
    pub record_flush_ms: Option<u64>,
    /// Hours tapes are kept unless a function says otherwise (default 168).
    #[arg(long, env = "HEARTH_RECORD_MAX_AGE_H")]
    pub record_max_age_h: Option<u64>,
    /// MiB of disk tapes may take; past it the tenant holding the most
    /// loses its oldest first (default 1024).
    #[arg(long, env = "HEARTH_RECORD_MAX_MIB")]
    pub record_max_mib: Option<u64>,
    /// MiB of disk one tenant's tapes may take; its oldest go first
    /// (default: the node's `record_max_mib`).
    #[arg(long, env = "HEARTH_RECORD_MAX_MIB_PER_TENANT")]
    pub record_max_mib_per_tenant: Option<u64>,
    /// Seconds between retention sweeps (age and room; default 60).
    #[arg(long, env = "HEARTH_RECORD_SWEEP_S")]
    pub record_sweep_s: Option<u64>,
    /// all (default: one Hearth serves everything), gateway (places
    /// invocations on nodes) or node (runs what a gateway sends it).
    #[arg(long, env = "HEARTH_ROLE")]
    pub role: Option<String>,
    /// A node's gateways' address, e.g. http://hearth-gateway:8080 (a
    /// Service): only named in the answer to a deploy sent to the node.
    /// Nodes and gateways find each other through the store.
    #[arg(long, env = "HEARTH_GATEWAY")]
    pub gateway: Option<String>,
    /// A cluster member's certificate (PEM), signed by `tls_ca`: nodes
    /// then serve HTTPS taking only clients the CA signed, and gateways
    /// connect to them with it (mutual TLS). All three of `tls_cert`,
    /// `tls_key`, `tls_ca`, or none.
    #[arg(long, env = "HEARTH_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    #[arg(long, env = "HEARTH_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// The cluster's CA certificate (PEM): members trust only what it
    /// signed.
    #[arg(long, env = "HEARTH_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// The name (subject alternative name) in every member's certificate,
    /// which gateways check nodes' certificates against (default
    /// hearth-member).
    #[arg(long, env = "HEARTH_TLS_NAME")]
    pub tls_name: Option<String>,
    /// A second, plain HTTP address answering only /healthz and /readyz
    /// (for probes, when the main port takes only members' certificates).
    #[arg(long, env = "HEARTH_PROBE_LISTEN")]
    pub probe_listen: Option<SocketAddr>,
    /// Seconds a stopping Hearth gives requests in flight to finish
    /// before it stops anyway (default 5). In Kubernetes: a little under
    /// the pod's terminationGracePeriodSeconds.
    #[arg(long, env = "HEARTH_DRAIN_TIMEOUT_S")]
    pub drain_timeout_s: Option<u64>,
    /// Where the registry, tokens, KV and logs live: sqlite (default, in
    /// the data directory) or postgres://user@host:port/db (a cluster's).
    /// TLS as libpq's sslmode, sslrootcert, sslcert and sslkey say; a
    /// server not on this machine gets sslmode=verify-full (checked
    /// against the system's CAs, or sslrootcert's) unless the URL says
    /// otherwise (docs/cluster.md).
    #[arg(long, env = "HEARTH_STORE")]
    pub store: Option<String>,
    /// A gateway's: the PostgreSQL role nodes connect as, which it grants
    /// only what a node needs after migrating (reading the registry,
    /// writing KV, logs, the journal and the members' rows, nothing of the
    /// tokens). The role must exist; nodes' store URLs name it
    /// (docs/cluster.md).
    #[arg(long, env = "HEARTH_STORE_NODE_ROLE")]
    pub store_node_role: Option<String>,
    /// The URL gateways reach this node at (default: http:// and the
    /// address it listens on).
    #[arg(long, env = "HEARTH_ADVERTISE")]
    pub advertise: Option<String>,
    /// Memory a node offers to running functions, MiB: every running
    /// invocation reserves its memory limit and tape budget against it,
    /// and past it the node answers 503 (default: three quarters of the
    /// machine's memory, or of the daemon's cgroup's limit if lower).
    #[arg(long, env = "HEARTH_CAPACITY_MIB")]
    pub capacity_mib: Option<u64>,
    /// Of that, what one tenant's running invocations may reserve, MiB;
    /// past it, 429 (default: half of `capacity_mib`).
    #[arg(long, env = "HEARTH_CAPACITY_MIB_PER_TENANT")]
    pub capacity_mib_per_tenant: Option<u64>,
    /// How often nodes report to the cluster, ms; three missed take a
    /// node out. Set on gateways: nodes follow it (default 1000).
    #[arg(long, env = "HEARTH_HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Keep `/metrics` series labelled with tenants and functions (default
    /// false: they name every tenant's functions to whoever reads them,
    /// and grow with the functions deployed).
    #[arg(long, env = "HEARTH_METRICS_PER_FUNCTION")]
    pub metrics_per_function: Option<bool>,
    /// Export every invocation's span to this OpenTelemetry collector, by
    /// OTLP over HTTP (its base URL, e.g. http://localhost:4318; spans go
    /// to `/v1/traces`). Off when unset (docs/observability.md).
    #[arg(long, env = "HEARTH_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Of the invocations that begin a trace here, the share traced, 0 to 1
    /// (default 1). A request with a `traceparent` follows its caller's
    /// choice, sampled or not (W3C parent-based sampling).
    #[arg(long, env = "HEARTH_OTLP_SAMPLE_RATIO")]
    pub otlp_sample_ratio: Option<f64>,
    /// A `hearth-bench trace --out` directory: the console's Cluster page
    /// shows its charts (summary.svg, memory.svg) to the operator.
    #[arg(long, env = "HEARTH_TRACE_REPORT")]
    pub trace_report: Option<PathBuf>,
    /// The domain under which each tenant's functions get an origin of
    /// their own, `https://{tenant}.{domain}/{name}` (default localhost,
    /// whose subdomains browsers resolve to this machine). Point a
    /// wildcard DNS name at Hearth and use a registrable domain apart
    /// from the console's.
    #[arg(long, env = "HEARTH_FUNCTIONS_DOMAIN")]
    pub functions_domain: Option<String>,
    /// Time a client has to send a request's head, and that a kept-alive
    /// connection may sit idle, ms (default 15000).
    #[arg(long, env = "HEARTH_HEADER_TIMEOUT_MS")]
    pub header_timeout_ms: Option<u64>,
    /// Time a request body has to arrive whole, ms (default 60000).
    #[arg(long, env = "HEARTH_BODY_TIMEOUT_MS")]
    pub body_timeout_ms: Option<u64>,
    /// Time a response write may wait on a client that does not read,
    /// ms; past it the connection is closed and its response freed
    /// (default 30000).
    #[arg(long, env = "HEARTH_WRITE_TIMEOUT_MS")]
    pub write_timeout_ms: Option<u64>,
    /// MiB of invocation request bodies the node holds at once, over every
    /// connection; past it, 503 (default: a quarter of `capacity_mib`, at
    /// least 64). One client address holds at most a quarter of it; past
    /// that, 429.
    #[arg(long, env = "HEARTH_MAX_BUFFERED_MIB")]
    pub max_buffered_mib: Option<u64>,
    /// MiB of log messages one function keeps, its newest (default 64).
    #[arg(long, env = "HEARTH_MAX_LOG_MIB_PER_FUNCTION")]
    pub max_log_mib_per_function: Option<u64>,
    /// MiB of log messages one tenant keeps over its functions; its
    /// largest lose their oldest lines first (default 512).
    #[arg(long, env = "HEARTH_MAX_LOG_MIB_PER_TENANT")]
    pub max_log_mib_per_tenant: Option<u64>,
    /// Hours log lines are kept (default 168).
    #[arg(long, env = "HEARTH_LOG_MAX_AGE_H")]
    pub log_max_age_h: Option<u64>,
    /// KiB of log text a second one tenant's functions may keep together,
    /// four seconds' worth at once; past it their lines are dropped and
    /// each invocation's log says how much (default 1024).
    #[arg(long, env = "HEARTH_LOG_KIB_PER_SEC_PER_TENANT")]
    pub log_kib_per_sec_per_tenant: Option<u64>,
    /// MiB that must stay free on the data directory's file system; below
    /// it the disk is full: deploys and KV writes get 507, tapes and log
    /// lines are dropped, /readyz is 503 (default: 2% of the file system,
    /// between 64 and 1024).
    #[arg(long, env = "HEARTH_MIN_FREE_DISK_MIB")]
    pub min_free_disk_mib: Option<u64>,
    /// MiB the node sets aside in its data directory so that deletes work
    /// on a full disk (default 64; 0: none).
    #[arg(long, env = "HEARTH_DISK_RESERVE_MIB")]
    pub disk_reserve_mib: Option<u64>,
    /// Open client connections in all; past it, 503 (default: a quarter
    /// of the open-files limit, at most 16384).
    #[arg(long, env = "HEARTH_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Outbound connections functions' fetches hold open at once, over
    /// the node; past it a fetch is refused (default: a quarter of the
    /// open-files limit, at most 16384). One invocation holds at most 16.
    #[arg(long, env = "HEARTH_MAX_OUTBOUND_CONNECTIONS")]
    pub max_outbound_connections: Option<usize>,
    /// Of those, what one tenant's fetches may hold (default: a quarter
    /// of `max_outbound_connections`).
    #[arg(long, env = "HEARTH_MAX_OUTBOUND_CONNECTIONS_PER_TENANT")]
    pub max_outbound_connections_per_tenant: Option<usize>,
    /// Open connections from one client address; past it, 429 (default
    /// 512). A gateway is one client to its nodes: give nodes more.
    #[arg(long, env = "HEARTH_MAX_CONNECTIONS_PER_CLIENT")]
    pub max_connections_per_client: Option<usize>,
    /// MiB of request bodies a second one client address may send (an
    /// IPv6 address by its /64); past it, 429 with the body unread and the
    /// wait in Retry-After. The burst is a second's worth and one largest
    /// body (default 16; on a --role node, whose clients are gateways, 0:
    /// no rate).
    #[arg(long, env = "HEARTH_CLIENT_BODY_MIB_PER_SEC")]
    pub client_body_mib_per_sec: Option<u64>,
    /// Proxies in front of Hearth, as addresses or CIDR ranges, repeated
    /// or comma-separated: a request from one of them is counted as the
    /// client its X-Forwarded-For names (the rightmost address there that
    /// is not a trusted proxy), and their own connections are not bound
    /// as one client's (default: none; every peer is a client).
    #[arg(
        long = "trusted-proxy",
        env = "HEARTH_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Option<Vec<String>>,
    /// Bytes of host calls one invocation's tape may hold in memory; past
    /// it the invocation fails with tape_budget_exceeded (default 4 MiB).
    #[arg(long, env = "HEARTH_MAX_TAPE_BYTES")]
    pub max_tape_bytes: Option<usize>,
    /// Let functions' outbound HTTP reach loopback, private and
    /// link-local addresses (this machine, its networks, cloud metadata)
    /// when their allow-list names them (default false).
    #[arg(long, env = "HEARTH_ALLOW_PRIVATE_EGRESS")]
    pub allow_private_egress: Option<bool>,
    /// The package indexes pip and npm may reach at install, `host` or
    /// `host:port`, repeated or comma-separated (default: pypi.org:443,
    /// files.pythonhosted.org:443, registry.npmjs.org:443). Installs reach
    /// nothing else; loopback and private addresses only with
    /// --allow-private-egress.
    #[arg(
        long = "package-index-host",
        env = "HEARTH_PACKAGE_INDEX_HOSTS",
        value_delimiter = ','
    )]
    pub package_index_hosts: Option<Vec<String>>,
    /// The message brokers a function may be bound to (`trigger=`), each
    /// `host:port` as bindings name it, repeated or comma-separated, or
    /// `*` for any broker on a public address (default: none, so every
    /// binding is refused). A listed broker may be on this machine or its
    /// private networks.
    #[arg(
        long = "broker-allow",
        env = "HEARTH_BROKER_ALLOW",
        value_delimiter = ','
    )]
    pub broker_allow: Option<Vec<String>>,
    /// The Python package index pip resolves and installs from (pip's
    /// --index-url; default PyPI). Its host must be a --package-index-host.
    #[arg(long, env = "HEARTH_PACKAGE_INDEX_URL")]
    pub package_index_url: Option<String>,
    /// The npm registry npm resolves and installs from (npm's --registry;
    /// default registry.npmjs.org). Its host must be a --package-index-host.
    #[arg(long, env = "HEARTH_NPM_REGISTRY")]
    pub npm_registry: Option<String>,
    /// Invocations one tenant may have running at once; past it, 429
    /// (default: three quarters of max_concurrency).
    #[arg(long, env = "HEARTH_MAX_CONCURRENCY_PER_TENANT")]
    pub max_concurrency_per_tenant: Option<usize>,
    /// Of a tenant's invocations, how many may be working after their
    /// response (ctx.waitUntil) at once; past it, a caller waits for the
    /// work (default: a quarter of max_concurrency_per_tenant).
    #[arg(long, env = "HEARTH_MAX_AFTER_RESPONSE_PER_TENANT")]
    pub max_after_response_per_tenant: Option<usize>,
    /// MiB of KV keys and values one tenant may keep, over all its
    /// functions; past it kv.set fails (default 1024).
    #[arg(long, env = "HEARTH_MAX_KV_MIB_PER_TENANT")]
    pub max_kv_mib_per_tenant: Option<u64>,
    /// MiB of code one tenant may keep deployed, over all its functions
    /// and versions; past it a deploy gets 507 (default 1024).
    #[arg(long, env = "HEARTH_MAX_CODE_MIB_PER_TENANT")]
    pub max_code_mib_per_tenant: Option<u64>,
    /// Functions one tenant may have; past it a deploy of a new one gets
    /// 409 (default 1000). Bounds what grows per function without code:
    /// aliases and their history, stats, tapes' series.
    #[arg(long, env = "HEARTH_MAX_FUNCTIONS_PER_TENANT")]
    pub max_functions_per_tenant: Option<usize>,
}

/// What this Hearth is in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    All,
    Gateway,
    /// With its gateways' address, if the operator named it.
    Node {
        gateway: Option<String>,
    },
}

/// A secret from the environment (a flag would show it in `ps`), never
/// printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// `name` from the environment, if set and not empty.
fn secret_from_env(name: &str) -> Option<Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret)
}

/// The settings `hearth up` runs with, after merging.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    pub max_stream_bytes: u64,
    pub max_code_bytes: usize,
    pub max_response_bytes: usize,
    pub max_sandboxes: u32,
    pub max_concurrency: usize,
    pub max_memory_mib: u32,
    pub max_timeout_ms: u64,
    pub time_slice_ms: u64,
    pub pooling: bool,
    pub http_timeout_ms: u64,
    pub examples: bool,
    pub offline_packages: Option<PathBuf>,
    pub cgroup_parent: Option<PathBuf>,
    pub remount_cgroupfs: bool,
    pub keep_alive_s: u64,
    pub proc_caches: Caches,
    pub proc_pool: usize,
    pub colocation: Colocation,
    pub js_pin_after: u32,
    pub js_compile: bool,
    /// `None`: the js tier's defaults.
    pub js_workers: Option<usize>,
    pub js_workers_per_tenant: Option<usize>,
    /// `None`: recording is off.
    pub record: Option<hearth_record::RecordConfig>,
    pub role: Role,
    /// Keys the gateways' signed attempts (`HEARTH_CLUSTER_KEY`): the
    /// same on every member of a cluster.
    pub cluster_key: Option<Secret>,
    /// The admin token the operator chose (`HEARTH_ADMIN_TOKEN`), taken
    /// into the store at start; `None`: one is made at first start.
    pub admin_token: Option<Secret>,
    pub drain_timeout_s: u64,
    /// Mutual TLS between members; `None`: plain HTTP.
    pub tls: Option<hearth_cluster::TlsFiles>,
    pub probe_listen: Option<SocketAddr>,
    /// A postgres:// URL; `None`: SQLite in the data directory.
    pub store: Option<String>,
    /// The role a gateway grants a node's share of the store.
    pub store_node_role: Option<String>,
    pub advertise: Option<String>,
    pub capacity_mib: u64,
    pub capacity_mib_per_tenant: u64,
    pub heartbeat_ms: u64,
    pub metrics_per_function: bool,
    pub otlp_endpoint: Option<String>,
    pub otlp_sample_ratio: f64,
    pub trace_report: Option<PathBuf>,
    pub functions_domain: String,
    pub header_timeout_ms: u64,
    pub write_timeout_ms: u64,
    pub max_buffered_mib: u64,
    pub max_log_mib_per_function: u64,
    pub max_log_mib_per_tenant: u64,
    pub log_max_age_h: u64,
    pub log_kib_per_sec_per_tenant: u64,
    pub min_free_disk_mib: Option<u64>,
    pub disk_reserve_mib: u64,
    pub body_timeout_ms: u64,
    pub max_connections: usize,
    pub max_outbound_connections: usize,
    pub max_outbound_connections_per_tenant: usize,
    pub max_connections_per_client: usize,
    pub client_body_mib_per_sec: u64,
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub max_tape_bytes: usize,
    pub allow_private_egress: bool,
    pub package_index_hosts: Vec<String>,
    pub broker_allow: Vec<String>,
    pub package_index_url: Option<String>,
    pub npm_registry: Option<String>,
    pub max_concurrency_per_tenant: usize,
    pub max_after_response_per_tenant: usize,
    pub max_kv_mib_per_tenant: u64,
    pub max_code_mib_per_tenant: u64,
    pub max_functions_per_tenant: usize,
}

/// Refuses a URL that is not `http(s)://host[:port]`.
fn check_http_url(flag: &str, url: &str) -> anyhow::Result<()> {
    let parsed: axum::http::Uri = url
        .parse()
        .with_context(|| format!("{flag} {url:?} is not a URL"))?;
    if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
        anyhow::bail!("{flag} {url:?} must be http(s)://host[:port]");
    }
    Ok(())
}

/// `--advertise` as a URL. An IPv6 address written bare, as Kubernetes
/// gives a pod's (`https://$(POD_IP):8080` becomes `https://fd00::7:8080`),
/// is bracketed: `https://[fd00::7]:8080`. A last group that is a port
/// number is taken as the port.
fn advertise_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if let Some((host, port)) = authority.rsplit_once(':')
        && port.parse::<u16>().is_ok()
        && host.parse::<std::net::Ipv6Addr>().is_ok()
    {
        return format!("{scheme}://[{host}]:{port}{path}");
    }
    if authority.parse::<std::net::Ipv6Addr>().is_ok() {
        return format!("{scheme}://[{authority}]{path}");
    }
    url.to_string()
}

/// `--broker-allow`'s entries, each `*` or `host:port`.
fn broker_allow(entries: &[String]) -> anyhow::Result<Vec<String>> {
    entries
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .map(|e| {
            let port = e.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
            if e == "*" || matches!(port, Some(Ok(p)) if p > 0) {
                Ok(e.to_ascii_lowercase())
            } else {
                anyhow::bail!(
                    "--broker-allow {e:?}: name a broker as host:port (127.0.0.1:4222), or * \
                     for any on a public address"
                )
            }
        })
        .collect()
}

/// The memory the daemon may use, MiB: the machine's, or its memory
/// cgroup's limit when that is lower (a container, a systemd unit).
fn daemon_memory_mib() -> u64 {
    let cgroup_limit = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|groups| {
            groups.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                let file = if controllers.is_empty() {
                    format!("/sys/fs/cgroup{path}/memory.max")
                } else if controllers.split(',').any(|c| c == "memory") {
                    format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
                } else {
                    return None;
                };
                std::fs::read_to_string(file)
                    .ok()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        })
        .map(|bytes| bytes >> 20);
    let machine = machine_mib();
    cgroup_limit.map_or(machine, |limit| limit.min(machine))
}

/// The machine's memory in MiB, from /proc/meminfo (4096 if unreadable).
fn machine_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(4096, |kib| kib / 1024)
}

/// A quarter of the open-files limit (the rest is for sandboxes, the
/// store, tapes and outbound calls), between 64 and 16384.
/// A `--trusted-proxy`: an address (one host) or a CIDR range.
fn parse_proxy(p: &str) -> anyhow::Result<ipnet::IpNet> {
    p.parse::<ipnet::IpNet>()
        .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| {
            anyhow::anyhow!(
                "--trusted-proxy {p:?} is neither an address nor a CIDR range \
                 (e.g. 10.0.0.7 or 10.0.0.0/8)"
            )
        })
}

fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit to the pointer it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let files = if ok { limit.rlim_cur as usize } else { 1024 };
    (files / 4).clamp(64, 16_384)
}

impl Settings {
    pub fn resolve(data_dir: &Path, args: &UpArgs) -> anyhow::Result<Settings> {
        let path = data_dir.join("hearth.toml");
        // The file (if there is one), then what the command line set.
        let mut layers = Figment::new();
        if path.exists() {
            layers = layers.merge(Toml::file_exact(&path));
        }
        let o: UpArgs = layers
            .merge(Serialized::defaults(args))
            .extract()
            .with_context(|| {
                format!(
                    "invalid settings (from {} and the command line)",
                    path.display()
                )
            })?;
        let record = if o.record.unwrap_or(true) {
            let defaults = hearth_record::RecordConfig::default();
            Some(hearth_record::RecordConfig {
                durability: match o.record_durability.as_ref() {
                    Some(d) => d.parse().map_err(anyhow::Error::msg)?,
                    None => defaults.durability,
                },
                flush_interval: o
                    .record_flush_ms
                    .map_or(defaults.flush_interval, std::time::Duration::from_millis),
                max_age: o.record_max_age_h.map_or(defaults.max_age, |h| {
                    std::time::Duration::from_secs(h * 3600)
                }),
                max_bytes: o.record_max_mib.map_or(defaults.max_bytes, |m| m << 20),
                max_tenant_bytes: o
                    .record_max_mib_per_tenant
                    .or(o.record_max_mib)
                    .map_or(defaults.max_bytes, |m| m << 20),
                sweep_interval: o.record_sweep_s.map_or(defaults.sweep_interval, |s| {
                    std::time::Duration::from_secs(s.max(1))
                }),
                ..defaults
            })
        } else {
            None
        };
        let role = match o.role.as_deref().unwrap_or("all") {
            "all" => Role::All,
            "gateway" => Role::Gateway,
            "node" => Role::Node {
                gateway: o.gateway.clone(),
            },
            other => anyhow::bail!("--role must be all, gateway or node, not {other:?}"),
        };
        if o.gateway.is_some() && !matches!(role, Role::Node { .. }) {
            anyhow::bail!("--gateway is for --role node");
        }
        let cluster_key = secret_from_env("HEARTH_CLUSTER_KEY");
        if role != Role::All && cluster_key.is_none() {
            anyhow::bail!(
                "a cluster's gateways and nodes need the same secret in HEARTH_CLUSTER_KEY \
                 (e.g. from `openssl rand -hex 32`): it signs the attempts gateways send"
            );
        }
        // A node's clients are gateways, which rate their own.
        let client_body_mib_per_sec =
            o.client_body_mib_per_sec
                .unwrap_or(if matches!(role, Role::Node { .. }) {
                    0
                } else {
                    16
                });
        let trusted_proxies = o
            .trusted_proxies
            .iter()
            .flatten()
            .filter(|p| !p.trim().is_empty())
            .map(|p| parse_proxy(p.trim()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let advertise = o.advertise.as_deref().map(advertise_url);
        if let Some(url) = &advertise {
            check_http_url("--advertise", url)?;
        }
        if let Some(url) = &o.otlp_endpoint {
            check_http_url("--otlp-endpoint", url)?;
        }
        if let Some(r) = o.otlp_sample_ratio
            && !(0.0..=1.0).contains(&r)
        {
            anyhow::bail!(
                "--otlp-sample-ratio {r} is not a share: give a number from 0 (no new traces) to 1 (every invocation)"
            );
        }
        if let Some(dir) = &o.trace_report
            && dir.exists()
            && !dir.is_dir()
        {
            anyhow::bail!(
                "--trace-report {} is not a directory: give the --out directory of `hearth-bench trace`",
                dir.display()
            );
        }
        let functions_domain = o
            .functions_domain
            .as_deref()
            .unwrap_or("localhost")
            .trim_matches('.')
            .to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !functions_domain.split('.').all(label_ok) {
            anyhow::bail!(
                "--functions-domain {:?} is not a DNS name: give one like functions.example.com",
                o.functions_domain.as_deref().unwrap_or_default()
            );
        }
        let capacity_mib = o
            .capacity_mib
            .unwrap_or_else(|| daemon_memory_mib() * 3 / 4)
            .max(1);
        let max_outbound_connections = o
            .max_outbound_connections
            .unwrap_or_else(default_max_connections)
            .max(1);
        let max_concurrency_per_tenant = o.max_concurrency_per_tenant.unwrap_or_else(|| {
            let all = o.max_concurrency.unwrap_or(1024);
            (all * 3 / 4).max(1)
        });
        let tls = match (&o.tls_cert, &o.tls_key, &o.tls_ca) {
            (None, None, None) => None,
            (Some(cert), Some(key), Some(ca)) => Some(hearth_cluster::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
                name: o
                    .tls_name
                    .clone()
                    .unwrap_or_else(|| hearth_cluster::tls::DEFAULT_NAME.to_string()),
            }),
            _ => anyhow::bail!(
                "mutual TLS needs all of --tls-cert, --tls-key and --tls-ca (or none of them)"
            ),
        };
        if tls.is_some() && role == Role::All {
            anyhow::bail!(
                "--tls-cert, --tls-key and --tls-ca secure a cluster's gateways and nodes: \
                 a Hearth with --role all has no members to talk to"
            );
        }
        if let Some(url) = &o.gateway {
            check_http_url("--gateway", url)?;
        }
        let store = match o.store.as_deref() {
            None | Some("sqlite") => None,
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Some(url.to_string())
            }
            Some(other) => {
                anyhow::bail!("--store must be sqlite or a postgres:// URL, not {other:?}")
            }
        };
        if role != Role::All && store.is_none() {
            anyhow::bail!(
                "a cluster keeps its registry, tokens and KV in PostgreSQL: \
                 pass --store postgres://user@host:port/db to the gateway and every node"
            );
        }
        if let Some(node_role) = &o.store_node_role {
            if role != Role::Gateway {
                anyhow::bail!(
                    "--store-node-role is a gateway's (it grants the role nodes connect as); \
                     a node names its role in its --store URL"
                );
            }
            hearth_store::role_identifier(node_role)?;
        }
        Ok(Settings {
            role,
            cluster_key,
            admin_token: secret_from_env("HEARTH_ADMIN_TOKEN"),
            drain_timeout_s: o.drain_timeout_s.unwrap_or(5),
            tls,
            probe_listen: o.probe_listen,
            store,
            store_node_role: o.store_node_role.clone(),
            advertise,
            capacity_mib,
            capacity_mib_per_tenant: o
                .capacity_mib_per_tenant
                .unwrap_or(capacity_mib / 2)
                .min(capacity_mib),
            heartbeat_ms: o.heartbeat_ms.unwrap_or(1000).max(50),
            record,
            header_timeout_ms: o.header_timeout_ms.unwrap_or(15_000).max(1),
            write_timeout_ms: o.write_timeout_ms.unwrap_or(30_000).max(1),
            max_buffered_mib: o
                .max_buffered_mib
                .unwrap_or((capacity_mib / 4).max(64))
                .max(1),
            body_timeout_ms: o.body_timeout_ms.unwrap_or(60_000).max(1),
            max_log_mib_per_function: o.max_log_mib_per_function.unwrap_or(64).max(1),
            max_log_mib_per_tenant: o.max_log_mib_per_tenant.unwrap_or(512).max(1),
            log_max_age_h: o.log_max_age_h.unwrap_or(168).max(1),
            log_kib_per_sec_per_tenant: o.log_kib_per_sec_per_tenant.unwrap_or(1024).max(1),
            min_free_disk_mib: o.min_free_disk_mib,
            disk_reserve_mib: o.disk_reserve_mib.unwrap_or(64),
            max_connections: o
                .max_connections
                .unwrap_or_else(default_max_connections)
                .max(1),
            max_connections_per_client: o.max_connections_per_client.unwrap_or(512).max(1),
            client_body_mib_per_sec,
            trusted_proxies,
            max_outbound_connections,
            max_outbound_connections_per_tenant: o
                .max_outbound_connections_per_tenant
                .unwrap_or(max_outbound_connections / 4)
                .clamp(1, max_outbound_connections),
            max_kv_mib_per_tenant: o.max_kv_mib_per_tenant.unwrap_or(1024),
            max_code_mib_per_tenant: o.max_code_mib_per_tenant.unwrap_or(1024),
            max_functions_per_tenant: o.max_functions_per_tenant.unwrap_or(1000),
            max_concurrency_per_tenant,
            max_after_response_per_tenant: o
                .max_after_response_per_tenant
                .unwrap_or(max_concurrency_per_tenant / 4)
                .max(1),
            allow_private_egress: o.allow_private_egress.unwrap_or(false),
            package_index_hosts: o
                .package_index_hosts
                .clone()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| {
                    hearth_proc::install::DEFAULT_INDEX_HOSTS
                        .map(String::from)
                        .to_vec()
                }),
            package_index_url: o.package_index_url.clone(),
            npm_registry: o.npm_registry.clone(),
            broker_allow: broker_allow(o.broker_allow.as_deref().unwrap_or_default())?,
            max_tape_bytes: o.max_tape_bytes.unwrap_or(4 << 20),
            metrics_per_function: o.metrics_per_function.unwrap_or(false),
            otlp_endpoint: o.otlp_endpoint.clone(),
            otlp_sample_ratio: o.otlp_sample_ratio.unwrap_or(1.0),
            trace_report: o.trace_report.clone(),
            functions_domain,
            offline_packages: o.offline_packages.clone(),
            cgroup_parent: o.cgroup_parent.clone(),
            remount_cgroupfs: o.remount_cgroupfs.unwrap_or(false),
            keep_alive_s: o.keep_alive_s.unwrap_or(300),
            js_pin_after: o.js_pin_after.unwrap_or(3).max(1),
            js_compile: o.js_compile.unwrap_or(true),
            js_workers: o.js_workers.map(|n| n.max(1)),
            js_workers_per_tenant: o.js_workers_per_tenant.map(|n| n.max(1)),
            proc_caches: match o.proc_caches.as_ref() {
                Some(s) => Caches::parse(s)?,
                None => Caches::ALL,
            },
            proc_pool: o.proc_pool.unwrap_or(2),
            colocation: o.colocation.unwrap_or_default(),
            data_dir: data_dir.to_path_buf(),
            listen: o
                .listen
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            max_body_bytes: o.max_body_bytes.unwrap_or(6 << 20),
            max_stream_bytes: o.max_stream_bytes.unwrap_or(4 << 30),
            max_code_bytes: o.max_code_bytes.unwrap_or(64 << 20),
            max_response_bytes: o.max_response_bytes.unwrap_or(16 << 20),
            max_sandboxes: o.max_sandboxes.unwrap_or(1000),
            max_concurrency: o.max_concurrency.unwrap_or(1024),
            max_memory_mib: o.max_memory_mib.unwrap_or(512),
            max_timeout_ms: o.max_timeout_ms.unwrap_or(300_000),
            time_slice_ms: o.time_slice_ms.unwrap_or(5),
            pooling: o.pooling.unwrap_or(true),
            http_timeout_ms: o.http_timeout_ms.unwrap_or(10_000),
            examples: o.examples.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Command;

    #[test]
    fn an_advertised_bare_ipv6_address_is_bracketed() {
        for (given, url) in [
            ("https://fd00::7:8080", "https://[fd00::7]:8080"),
            ("http://fd00::7", "http://[fd00::7]"),
            ("https://[fd00::7]:8080", "https://[fd00::7]:8080"),
            ("https://10.0.0.7:8080", "https://10.0.0.7:8080"),
            (
                "https://node-1.hearth:8080/x",
                "https://node-1.hearth:8080/x",
            ),
            ("https://::1:8080/", "https://[::1]:8080/"),
        ] {
            assert_eq!(advertise_url(given), url, "{given}");
            check_http_url("--advertise", &advertise_url(given)).unwrap();
        }
    }

    /// Every setting `hearth up` takes, by name.
    fn setting_names() -> Vec<String> {
        let cmd = UpArgs::augment_args(Command::new("up"));
        let mut names: Vec<String> = cmd
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        names.sort();
        names
    }

    /// `docs/hearth.toml` with its commented examples switched on.
    fn documented() -> String {
        let text = include_str!("../../../docs/hearth.toml");
        text.lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(kv)
                    if kv.split_once(" = ").is_some_and(|(k, _)| {
                        !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    }) =>
                {
                    kv
                }
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn docs_hearth_toml_names_every_setting_and_parses() {
        let all: UpArgs = toml::from_str(&documented()).expect("docs/hearth.toml parses");
        let serde_json::Value::Object(set) = serde_json::to_value(&all).unwrap() else {
            panic!("a table");
        };
        let mut documented: Vec<String> = set.keys().cloned().collect();
        documented.sort();
        assert_eq!(
            documented,
            setting_names(),
            "docs/hearth.toml and `hearth up` differ"
        );
        // Its active lines are the defaults: a file of them changes nothing.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("hearth.toml"),
            include_str!("../../../docs/hearth.toml"),
        )
        .unwrap();
        let from_file = Settings::resolve(dir.path(), &UpArgs::default()).unwrap();
        let empty = tempfile::tempdir().unwrap();
        let defaults = Settings::resolve(empty.path(), &UpArgs::default()).unwrap();
        let shown = |s: &Settings| format!("{s:?}").replace(&s.data_dir.display().to_string(), "");
        assert_eq!(shown(&from_file), shown(&defaults));
    }

    #[test]
    fn the_command_line_overrides_the_file_and_a_misspelt_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hearth.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9000\"\nmax_body_bytes = 1000\nrecord = false\n",
        )
        .unwrap();
        let args = UpArgs {
            max_body_bytes: Some(2000),
            ..UpArgs::default()
        };
        let s = Settings::resolve(dir.path(), &args).unwrap();
        assert_eq!(s.listen, "127.0.0.1:9000".parse().unwrap(), "from the file");
        assert_eq!(s.max_body_bytes, 2000, "the flag wins");
        assert!(s.record.is_none());
        assert_eq!(s.max_code_bytes, 64 << 20, "the default");

        std::fs::write(&file, "max_body_byte = 1000\n").unwrap();
        let err = format!(
            "{:#}",
            Settings::resolve(dir.path(), &UpArgs::default()).unwrap_err()
        );
        assert!(err.contains("max_body_byte"), "{err}");
        std::fs::write(&file, "max_body_bytes = \"lots\"\n").unwrap();
        let err = format!(
            "{:#}",
            Settings::resolve(dir.path(), &UpArgs::default()).unwrap_err()
        );
        assert!(err.contains("max_body_bytes"), "{err}");
    }

    #[test]
    fn a_sample_ratio_is_a_share() {
        let dir = tempfile::tempdir().unwrap();
        let with = |r: f64| UpArgs {
            otlp_sample_ratio: Some(r),
            ..UpArgs::default()
        };
        let s = Settings::resolve(dir.path(), &UpArgs::default()).unwrap();
        assert_eq!(s.otlp_sample_ratio, 1.0);
        assert_eq!(
            Settings::resolve(dir.path(), &with(0.0))
                .unwrap()
                .otlp_sample_ratio,
            0.0
        );
        for bad in [1.5, -0.1, f64::NAN] {
            let err = format!(
                "{:#}",
                Settings::resolve(dir.path(), &with(bad)).unwrap_err()
            );
            assert!(err.contains("--otlp-sample-ratio"), "{err}");
        }
    }

    /// A trace report not written yet is fine (the page says so); a file
    /// where the directory should be is a mistake, refused at start.
    #[test]
    fn a_trace_report_must_be_a_directory_if_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        let with = |path: PathBuf| UpArgs {
            trace_report: Some(path),
            ..UpArgs::default()
        };
        let later = dir.path().join("report");
        let s = Settings::resolve(dir.path(), &with(later.clone())).unwrap();
        assert_eq!(s.trace_report, Some(later));
        let file = dir.path().join("summary.svg");
        std::fs::write(&file, "<svg/>").unwrap();
        let err = format!(
            "{:#}",
            Settings::resolve(dir.path(), &with(file)).unwrap_err()
        );
        assert!(
            err.contains("--trace-report") && err.contains("not a directory"),
            "{err}"
        );
    }
}
