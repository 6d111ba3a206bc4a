//! The management API under `/v1`.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hearth_core::{Colocation, FunctionVersion, Runtime};
use hearth_host::deps::Package;
use hearth_store::{FunctionSummary, Grant, LogQuery, LogRecord, Principal, Scope};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::body::read_body;
use crate::error::ErrorBody;
use crate::query::Query;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// Liveness: the process answers
#[utoipa::path(get, path = "/healthz", tag = "node", security(()),
    responses((status = 200, description = "`ok`", content_type = "text/plain")))]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready for work: the store answers, the data directory's disk is not
/// full, and in a cluster the node is a member in good standing (joined, heartbeats reaching the store, not
/// leaving) or the gateway knows the nodes. A load balancer or
/// Kubernetes sends work only while this is 200.
#[utoipa::path(get, path = "/readyz", tag = "node", security(()),
    responses((status = 200, description = "`ready`", content_type = "text/plain"),
        (status = 503, description = "Why not", content_type = "text/plain")))]
pub(crate) async fn readyz(State(s): S) -> Response {
    let not = |why: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
    };
    let probe = s.node.store().tenant_exists(hearth_store::ADMIN_TENANT);
    match tokio::time::timeout(std::time::Duration::from_secs(2), probe).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return not(format!("the store: {e}")).into_response(),
        Err(_) => return not("the store did not answer within 2 s".into()).into_response(),
    }
    if let Some(why) = s.membership.as_ref().and_then(|m| m.not_ready()) {
        return not(why.into()).into_response();
    }
    if let Some(why) = s.node.disk_full() {
        return not(why).into_response();
    }
    if let Some(g) = &s.gateway
        && !g.synced()
    {
        return not("the gateway has not read the cluster's nodes yet".into()).into_response();
    }
    "ready\n".into_response()
}

/// Prometheus metrics (admin only)
///
/// They describe every tenant's use of the node; series that name tenants
/// and functions only with `--metrics-per-function`.
#[utoipa::path(get, path = "/metrics", tag = "node",
    responses(
        (status = 200, description = "OpenMetrics text; Prometheus' text format 0.0.4 when `Accept` asks for `text/plain` and not for OpenMetrics", content_type = "application/openmetrics-text"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn metrics(
    State(s): S,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let p = s.auth.caller(s.node.store(), &headers).await?;
    if !p.is_admin() {
        return Err(ApiError::Forbidden(
            "metrics describe every tenant's use of the node: they need an admin token".into(),
        ));
    }
    // OpenMetrics unless the scraper asks for Prometheus' text format
    // (`text/plain`) and not for OpenMetrics.
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if accept.contains("text/plain") && !accept.contains("application/openmetrics-text") {
        return Ok((
            [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
            s.node.metrics().encode_prometheus(),
        ));
    }
    Ok((
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.node.metrics().encode(),
    ))
}

/// The tenant's functions' last hour.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Stats {
    pub tenant: String,
    /// Function name → its minutes with invocations, oldest first:
    /// `{t_ms, count, errors, refused, p50_ms, p99_ms}` (quantiles from a
    /// doubling histogram: an upper bound, at most twice the true value).
    #[schema(value_type = Object)]
    pub functions: std::collections::HashMap<String, Vec<hearth_node::stats::MinuteStats>>,
}

/// Each function's invocations, errors, p50 and p99 per minute over the last hour
///
/// Counted on the node that ran them (every invocation, sampled or not);
/// through a gateway, summed over its nodes.
#[utoipa::path(get, path = "/v1/stats", tag = "functions",
    responses((status = 200, body = Stats), (status = 401, body = ErrorBody)))]
pub(crate) async fn stats(
    State(s): S,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Read)
        .await?;
    if let Some(g) = &s.gateway {
        return hearth_cluster::fanout::stats(g, &p.tenant, &headers)
            .await
            .map(|merged| Json(merged).into_response())
            .map_err(crate::cluster::fanout_error);
    }
    // Each node shows a token limited to one function that function's
    // minutes alone (a gateway merges what its nodes show).
    let mut functions = s.node.stats().of(&p.tenant, hearth_core::unix_time_ms());
    if let Some(only) = &p.grant.function {
        functions.retain(|name, _| name == only);
    }
    Ok(Json(Stats {
        tenant: p.tenant.clone(),
        functions,
    })
    .into_response())
}

/// The token: its tenant, id, scope, function and expiry
#[utoipa::path(get, path = "/v1/whoami", tag = "tenants",
    responses((status = 200, body = Principal), (status = 401, body = ErrorBody)))]
pub(crate) async fn whoami(State(s): S, headers: HeaderMap) -> Result<Json<Principal>, ApiError> {
    Ok(Json(Principal::clone(
        &*s.auth.caller(s.node.store(), &headers).await?,
    )))
}

/// The node's status as a token sees it: the node's (less the node-wide
/// figures, for a tenant), its tenant's use, and for an admin what a
/// gateway's heartbeat carries.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Status {
    #[serde(flatten)]
    pub node: hearth_node::status::NodeStatus,
    pub tenant: TenantStatus,
    /// `[[tenant, name]]` with code prepared here (admin only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<Vec<(String, String)>>,
    /// The warm pools' free instances (admin only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_free: Option<std::collections::BTreeMap<String, u64>>,
    /// Invocations run here since start, by mode (admin only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran: Option<hearth_core::ByMode>,
}

/// The token's tenant's use of this node against its quotas and shares.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct TenantStatus {
    pub name: String,
    pub in_flight: usize,
    pub max_concurrency: usize,
    pub kv_bytes: u64,
    pub kv_max_bytes: u64,
    /// Its tapes' bytes on this node (absent when the node records none).
    pub recording_bytes: Option<u64>,
    pub recording_max_bytes: Option<u64>,
    pub code_bytes: u64,
    pub code_max_bytes: u64,
    pub memory_reserved_mib: u64,
    pub memory_max_mib: u64,
}

/// The node's state and what it cannot enforce here
///
/// Any valid token: each tier's sandboxes, pools and
/// zygotes, `degraded` (what this machine cannot enforce), and `tenant` (the
/// token's tenant's use against its quotas and shares). An admin also sees
/// the node's in-flight invocations, `memory` (reserved by running
/// invocations, against the node's capacity), `cpu_share` (how many
/// tenants ran in the last window and how many were over their share),
/// `recording`, and what a
/// gateway's heartbeat carries: `loaded` (`[[tenant, name]]` with code
/// prepared here, every tenant's), `pool_free` (the warm pools' free
/// instances) and `ran` (invocations run here since start, every
/// tenant's, by mode: wasm, isolate, compiled, process). The tiers'
/// sections differ by tier.
#[utoipa::path(get, path = "/v1/status", tag = "node",
    responses((status = 200, body = Status), (status = 401, body = ErrorBody)))]
pub(crate) async fn status(State(s): S, headers: HeaderMap) -> Result<Json<Status>, ApiError> {
    let p = s
        .auth
        .require(s.node.store(), &headers, Scope::Read)
        .await?;
    let admin = p.is_admin();
    let (running, share) = s.node.tenant_in_flight(&p.tenant);
    let tenant = p.tenant.clone();
    let kv_bytes = s.node.store().kv_bytes(&tenant).await?;
    let (code_bytes, _) = s.node.code_bytes(&p.tenant).await?;
    let (memory_reserved, memory_max) = s.node.tenant_memory(&p.tenant);
    let tenant = TenantStatus {
        in_flight: running,
        max_concurrency: share,
        kv_bytes,
        kv_max_bytes: s.node.kv_max_tenant_bytes(),
        recording_bytes: s.node.recorder().map(|r| {
            r.stats()
                .tenant_bytes
                .lock()
                .get(&p.tenant)
                .copied()
                .unwrap_or(0)
        }),
        recording_max_bytes: s.node.recorder().map(|r| r.max_tenant_bytes()),
        code_bytes,
        code_max_bytes: s.node.max_code_bytes_per_tenant(),
        memory_reserved_mib: memory_reserved >> 20,
        memory_max_mib: memory_max >> 20,
        name: p.tenant.clone(),
    };
    let node = s.node.status();
    Ok(Json(Status {
        // What every tenant together does here is the operator's: a
        // tenant reading it would watch the others' traffic.
        node: if admin { node } else { node.for_a_tenant() },
        tenant,
        loaded: admin.then(|| s.node.loaded()),
        pool_free: admin.then(|| s.node.pool_free()),
        ran: admin.then(|| s.node.invocations_by_mode()),
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTenant {
    /// Lower-case letters, digits, `-` and `_`; at most 64.
    #[schema(example = "acme")]
    name: String,
}

/// A new tenant and its first token.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct TenantCreated {
    pub tenant: String,
    /// A token of the tenant with scope deploy; shown once.
    pub token: String,
}

/// Create a tenant and a deploy token for it (admin only)
#[utoipa::path(post, path = "/v1/tenants", tag = "tenants", request_body = NewTenant,
    responses((status = 201, body = TenantCreated), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 507, body = ErrorBody)))]
pub(crate) async fn create_tenant(
    State(s): S,
    headers: HeaderMap,
    Json(body): Json<NewTenant>,
) -> Result<impl IntoResponse, ApiError> {
    let p = s.auth.caller(s.node.store(), &headers).await?;
    crate::auth::check_scope(&p, Scope::Admin)?;
    hearth_core::validate_tenant_name(&body.name)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    s.node.admit_growth()?;
    let store = s.node.store();
    store.create_tenant(&body.name).await?;
    let (token, _) = store
        .create_token(&body.name, &Grant::of(Scope::Deploy))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(TenantCreated {
            tenant: body.name,
            token,
        }),
    ))
}

/// A tenant's settings.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct TenantView {
    pub tenant: String,
    /// The mode that applies: the override, else the cluster's.
    pub colocation: Colocation,
    /// The tenant's own setting, if any.
    pub colocation_override: Option<Colocation>,
    /// The mode of tenants without an override.
    pub cluster_colocation: Colocation,
}

impl TenantView {
    fn new(s: &AppState, tenant: &str, own: Option<Colocation>) -> TenantView {
        let cluster = s.node.default_colocation();
        TenantView {
            tenant: tenant.to_string(),
            colocation: own.unwrap_or(cluster),
            colocation_override: own,
            cluster_colocation: cluster,
        }
    }
}

/// A tenant's settings (its own token or an admin's)
#[utoipa::path(get, path = "/v1/tenants/{tenant}", tag = "tenants",
    params(("tenant" = String, Path)),
    responses((status = 200, body = TenantView), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn get_tenant(
    State(s): S,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<Json<TenantView>, ApiError> {
    let p = s
        .auth
        .require(s.node.store(), &headers, Scope::Read)
        .await?;
    if !p.is_admin() && p.tenant != tenant {
        return Err(ApiError::Forbidden(format!(
            "a token of {} cannot read tenant {tenant}",
            p.tenant
        )));
    }
    let store = s.node.store();
    if !store.tenant_exists(&tenant).await? {
        return Err(hearth_store::StoreError::NoSuchTenant(tenant).into());
    }
    let own = store.tenant_colocation(&tenant).await?;
    Ok(Json(TenantView::new(&s, &tenant, own)))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantSettings {
    /// `null` clears the override.
    colocation: Option<Colocation>,
}

/// Set or clear a tenant's colocation mode (admin only)
///
/// It trades the tenant's isolation against memory, which is the
/// operator's call. Applies to the tenant's next cold starts.
#[utoipa::path(put, path = "/v1/tenants/{tenant}", tag = "tenants",
    params(("tenant" = String, Path)), request_body = TenantSettings,
    responses((status = 200, body = TenantView), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(crate) async fn put_tenant(
    State(s): S,
    headers: HeaderMap,
    Path(tenant): Path<String>,
    Json(body): Json<TenantSettings>,
) -> Result<Json<TenantView>, ApiError> {
    let p = s.auth.caller(s.node.store(), &headers).await?;
    if !p.is_admin() {
        return Err(ApiError::Forbidden(
            "only an admin token may change a tenant's colocation".into(),
        ));
    }
    let name = tenant.clone();
    let mode = body.colocation;
    s.node.store().set_tenant_colocation(&name, mode).await?;
    Ok(Json(TenantView::new(&s, &tenant, mode)))
}

/// A new version, as the deploy answers.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Deployed {
    #[serde(flatten)]
    pub version: FunctionVersion,
    /// Checking and compiling the code, in every tier its runtime has.
    pub compile_ms: u64,
    /// Resolving and installing its packages.
    pub install_ms: u64,
    /// The lock: each package installed, and whether it was cached here.
    pub packages: Vec<hearth_host::DeployedPackage>,
    /// What may not work as meant (unpinned requirements, …).
    pub warnings: Vec<String>,
    /// Where it is invoked: the function's own URL once live, else its
    /// version's (`name@N`).
    #[schema(example = "/fn/acme/resize")]
    pub url: String,
    /// Whether `live` points at it now.
    pub live: bool,
    /// The function's schedules, which fire its live alias.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<hearth_store::ScheduleRow>,
    /// The function's broker bindings, which invoke its live alias.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<hearth_store::TriggerRow>,
}

/// Deploy a new version
///
/// The body is the code: a Wasm module or `wasi:http` component (binary or
/// WAT text), a JavaScript or Python file, or a bundle (tar, tar.gz, zip) with `requirements.txt` or
/// `package.json`. Settings are query parameters.
#[utoipa::path(post, path = "/v1/functions/{name}", tag = "functions",
    params(("name" = String, Path), crate::deploy_settings::DeploySettings),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = Deployed), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 507, body = ErrorBody)))]
pub(crate) async fn deploy(
    State(s): S,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let p = s
        .auth
        .require_for(s.node.store(), &headers, Scope::Deploy, &name)
        .await?;
    if let Some(gateway) = &s.deploys_via {
        let there = match gateway {
            Some(url) => format!("its gateways at {url}"),
            None => "its gateways".to_string(),
        };
        return Err(ApiError::Conflict(format!(
            "this node is a member of a cluster: deploy through {there}, so every node can fetch the code"
        )));
    }
    let crate::deploy_settings::Parsed {
        mut spec,
        runtime,
        file_name,
        promote,
        schedules,
        catch_up,
        triggers,
    } = crate::deploy_settings::parse(query.as_deref().unwrap_or_default())?;
    let code = read_body(
        &headers,
        body,
        (s.config.max_code_bytes, s.config.body_timeout),
        "code",
    )
    .await?;
    if code.is_empty() {
        return Err(ApiError::BadRequest(
            "the request body should hold the function's code".into(),
        ));
    }
    spec.runtime = match runtime {
        Some(r) => r,
        None if code.starts_with(b"\0asm") => Runtime::Wasm,
        None => {
            return Err(ApiError::BadRequest(
                "cannot tell the runtime: pass runtime=wasm|js|python|node (or file_name)".into(),
            ));
        }
    };
    if spec.stream && spec.runtime == Runtime::Python {
        return Err(ApiError::BadRequest(
            "stream=true applies to wasm, js and node functions; a python function takes \
             its request and answers whole, as Lambda events (drop the setting)"
                .into(),
        ));
    }
    // Before anything is deployed: a binding that cannot consume is
    // refused now, not found out at the first message.
    let trigger_rows = match &triggers {
        Some(bindings) => Some(crate::triggers::check(&s, &p.tenant, &name, bindings).await?),
        None => None,
    };
    let source = hearth_host::Source {
        file_name,
        code: code.to_vec(),
        artifact: false,
    };
    let out = s
        .node
        .deploy(&p.tenant, &name, source, spec, promote)
        .await?;
    let (v, compiled) = (out.version, out.compiled);
    let store = s.node.store();
    if let Some(schedules) = &schedules {
        let rows = crate::schedules::rows(&v.tenant, &v.name, schedules, catch_up);
        store.set_schedules(&v.tenant, &v.name, &rows).await?;
    }
    let schedules = store.schedules(&v.tenant, Some(&v.name)).await?;
    if let Some(rows) = &trigger_rows {
        let before = store.triggers(Some(&v.tenant), Some(&v.name)).await?;
        store.set_triggers(&v.tenant, &v.name, rows).await?;
        let removed: Vec<_> = before
            .into_iter()
            .filter(|b| !rows.iter().any(|r| r.id == b.id))
            .collect();
        crate::triggers::forget(&s, &removed);
    }
    let triggers = store.triggers(Some(&v.tenant), Some(&v.name)).await?;
    let url = if promote {
        format!("/fn/{}/{}", v.tenant, v.name)
    } else {
        format!("/fn/{}/{}@{}", v.tenant, v.name, v.version)
    };
    Ok((
        StatusCode::CREATED,
        Json(Deployed {
            version: v,
            compile_ms: compiled.compile_ms,
            install_ms: compiled.install_ms,
            packages: compiled.packages,
            warnings: compiled.warnings,
            url,
            live: promote,
            schedules,
            triggers,
        }),
    ))
}

/// The tenant's functions.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct FunctionList {
    pub tenant: String,
    pub functions: Vec<FunctionListed>,
}

/// Whether a JavaScript function's newest version runs compiled from its
/// traces on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compiled {
    /// In the isolate, and it will stay there (`not_compiled` says why).
    Interpreted,
    /// In the isolate, its traces being gathered.
    Tracing,
    /// Compiled, proved on `proved_tapes` tapes.
    Compiled,
}

/// A function as listed, with whether this node serves its newest
/// version compiled (js only).
#[derive(Serialize, Deserialize, ToSchema)]
pub struct FunctionListed {
    #[serde(flatten)]
    pub summary: FunctionSummary,
    /// How this node runs it (js functions; absent for the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled: Option<Compiled>,
    /// Tapes its compiled code was proved against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proved_tapes: Option<usize>,
    /// Why it is not compiled, when it will not be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_compiled: Option<String>,
}

impl FunctionListed {
    fn of(summary: FunctionSummary, node: &hearth_node::Node) -> FunctionListed {
        use hearth_node::CompiledMode;
        let mut listed = FunctionListed {
            compiled: None,
            proved_tapes: None,
            not_compiled: None,
            summary,
        };
        if listed.summary.latest.spec.runtime != hearth_core::Runtime::Js {
            return listed;
        }
        listed.compiled = Some(match node.compiled_mode(&listed.summary.latest) {
            CompiledMode::NotCompiled(why) => {
                listed.not_compiled = why;
                Compiled::Interpreted
            }
            CompiledMode::Tracing => Compiled::Tracing,
            CompiledMode::Compiled { proved } => {
                listed.proved_tapes = Some(proved);
                Compiled::Compiled
            }
        });
        listed
    }
}

/// List the tenant's functions
#[utoipa::path(get, path = "/v1/functions", tag = "functions",
    responses((status = 200, body = FunctionList), (status = 401, body = ErrorBody)))]
pub(crate) async fn list_functions(
    State(s): S,
    headers: HeaderMap,
) -> Result<Json<FunctionList>, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Read)
        .await?;
    let tenant = p.tenant.clone();
    let mut functions = s.node.store().list_functions(&tenant).await?;
    if let Some(only) = &p.grant.function {
        functions.retain(|f| &f.name == only);
    }
    Ok(Json(FunctionList {
        tenant: p.tenant.clone(),
        functions: functions
            .into_iter()
            .map(|f| FunctionListed::of(f, &s.node))
            .collect(),
    }))
}

/// One version of a function, with its lock.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct VersionView {
    #[serde(flatten)]
    pub version: FunctionVersion,
    /// The packages it installs, exactly (empty for wasm and for code
    /// without packages).
    pub packages: Vec<Package>,
}

/// A function's versions.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct FunctionVersions {
    pub tenant: String,
    pub name: String,
    pub versions: Vec<VersionView>,
    /// Where each alias points (`live`: what an unpinned call runs).
    #[serde(default)]
    pub aliases: Vec<hearth_store::Alias>,
}

/// A function's versions, each with its packages (lock)
#[utoipa::path(get, path = "/v1/functions/{name}", tag = "functions",
    params(("name" = String, Path)),
    responses((status = 200, body = FunctionVersions), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_function(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<FunctionVersions>, ApiError> {
    let p = s
        .auth
        .require_for(s.node.store(), &headers, Scope::Read, &name)
        .await?;
    let (tenant, n) = (p.tenant.clone(), name.clone());
    let versions = s.node.store().list_versions(&tenant, &n).await?;
    if versions.is_empty() {
        return Err(ApiError::NotFound(format!(
            "function {}/{name} does not exist",
            p.tenant
        )));
    }
    // Each version's lock, from its artifact (where one is here): read
    // once per artifact, however many versions share it, and only its
    // tar headers up to the lock.
    let artifacts = s.node.artifacts().clone();
    let versions = tokio::task::spawn_blocking(move || {
        let mut locks = std::collections::HashMap::new();
        versions
            .into_iter()
            .map(|v| {
                let runtime = match v.spec.runtime {
                    Runtime::Python => Runtime::Python,
                    _ => Runtime::Node,
                };
                let packages = locks
                    .entry((v.artifact.clone(), runtime))
                    .or_insert_with(|| {
                        (v.spec.runtime != Runtime::Wasm)
                            .then(|| std::fs::File::open(artifacts.path_of(&v.artifact)).ok())
                            .flatten()
                            .and_then(|f| {
                                hearth_host::bundle::Bundle::lock_in_artifact(
                                    runtime,
                                    std::io::BufReader::new(f),
                                )
                            })
                            .map(|l| l.packages)
                            .unwrap_or_default()
                    })
                    .clone();
                VersionView {
                    version: v,
                    packages,
                }
            })
            .collect()
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    let aliases = s.node.store().aliases(&p.tenant, &name).await?;
    Ok(Json(FunctionVersions {
        tenant: p.tenant.clone(),
        name,
        versions,
        aliases,
    }))
}

/// Remove a function, its versions, KV and logs
#[utoipa::path(delete, path = "/v1/functions/{name}", tag = "functions",
    params(("name" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 404, body = ErrorBody)))]
pub(crate) async fn remove_function(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let p = s
        .auth
        .require_for(s.node.store(), &headers, Scope::Deploy, &name)
        .await?;
    let bindings = s
        .node
        .store()
        .triggers(Some(&p.tenant), Some(&name))
        .await?;
    if s.node.remove(&p.tenant, &name).await? {
        crate::triggers::forget(&s, &bindings);
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "function {}/{name} does not exist",
            p.tenant
        )))
    }
}

/// Which of a function's log lines to read.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LogsQuery {
    /// Only this invocation's lines.
    invocation: Option<String>,
    /// At most this many (the newest, returned oldest first).
    #[param(default = 100, maximum = 1000)]
    limit: Option<u32>,
    /// Only lines after the one with this id, oldest first (following).
    after: Option<i64>,
}

/// A function's log lines.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Logs {
    pub tenant: String,
    pub name: String,
    pub lines: Vec<LogRecord>,
}

/// A function's log lines, oldest first
///
/// Lines of invocations that finished on this node are all there.
#[utoipa::path(get, path = "/v1/functions/{name}/logs", tag = "functions",
    params(("name" = String, Path), LogsQuery),
    responses((status = 200, body = Logs), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn logs(
    State(s): S,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
    headers: HeaderMap,
) -> Result<Json<Logs>, ApiError> {
    let p = s
        .auth
        .require_for(s.node.store(), &headers, Scope::Read, &name)
        .await?;
    let q = LogQuery {
        invocation_id: query.invocation,
        limit: query.limit.unwrap_or(100).min(1000),
        after: query.after,
    };
    // Every line of invocations that finished here is in the store before
    // it is read (briefly: the writer stores within 50 ms).
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), s.node.flush_logs()).await;
    let (tenant, n) = (p.tenant.clone(), name.clone());
    let lines = s.node.store().read_logs(&tenant, &n, &q).await?;
    Ok(Json(Logs {
        tenant: p.tenant.clone(),
        name,
        lines,
    }))
}
