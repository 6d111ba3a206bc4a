//! The management API under `/v1`.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hearth_core::{Colocation, Runtime};
use hearth_store::{LogQuery, Principal, Role};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::invoke::read_body;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

pub(crate) async fn blocking<T: Send + 'static>(
    s: &AppState,
    f: impl FnOnce(&dyn hearth_store::Store) -> Result<T, hearth_store::StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = s.node.store().clone();
    Ok(tokio::task::spawn_blocking(move || f(&*store))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??)
}

/// The node's metrics; an admin token. They describe every tenant's use of
/// the node (and, opted into, name their functions).
pub(crate) async fn metrics(
    State(s): S,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if p.role != Role::Admin {
        return Err(ApiError::Forbidden(
            "metrics describe every tenant's use of the node: they need an admin token".into(),
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

pub(crate) async fn whoami(State(s): S, headers: HeaderMap) -> Result<Json<Principal>, ApiError> {
    Ok(Json(s.auth.require(s.node.store(), &headers).await?))
}

/// The node's state and what it cannot enforce here; any valid token. An
/// admin also sees what a gateway's heartbeat carries: the functions with
/// code prepared here (every tenant's) and the warm pools' free instances.
pub(crate) async fn status(State(s): S, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    let mut status = s.node.status();
    let (running, share) = s.node.tenant_in_flight(&p.tenant);
    let tenant = p.tenant.clone();
    let kv_bytes = blocking(&s, move |st| st.kv_bytes(&tenant)).await?;
    let (code_bytes, _) = s.node.code_bytes(&p.tenant).await?;
    status["tenant"] = json!({
        "name": p.tenant,
        "in_flight": running,
        "max_concurrency": share,
        "kv_bytes": kv_bytes,
        "kv_max_bytes": s.node.kv_max_tenant_bytes(),
        "recording_bytes": s.node.recorder().map(|r| {
            r.stats().tenant_bytes.lock().get(&p.tenant).copied().unwrap_or(0)
        }),
        "recording_max_bytes": s.node.recorder().map(|r| r.max_tenant_bytes()),
        "code_bytes": code_bytes,
        "code_max_bytes": s.node.max_code_bytes_per_tenant(),
    });
    if p.role == Role::Admin {
        status["loaded"] = json!(s.node.loaded());
        status["pool_free"] = json!(s.node.pool_free());
    }
    Ok(Json(status))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTenant {
    name: String,
}

pub(crate) async fn create_tenant(
    State(s): S,
    headers: HeaderMap,
    Json(body): Json<NewTenant>,
) -> Result<impl IntoResponse, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if p.role != Role::Admin {
        return Err(ApiError::Forbidden(
            "only an admin token may create tenants".into(),
        ));
    }
    hearth_core::validate_tenant_name(&body.name)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let name = body.name.clone();
    let token = blocking(&s, move |st| {
        st.create_tenant(&name)?;
        st.create_token(&name, Role::Member)
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"tenant": body.name, "token": token})),
    ))
}

/// A tenant's settings as the API shows them.
fn tenant_view(s: &AppState, tenant: &str, own: Option<Colocation>) -> Value {
    let cluster = s.node.default_colocation();
    json!({
        "tenant": tenant,
        "colocation": own.unwrap_or(cluster),
        "colocation_override": own,
        "cluster_colocation": cluster,
    })
}

/// A tenant's settings; its own token or an admin's.
pub(crate) async fn get_tenant(
    State(s): S,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if p.role != Role::Admin && p.tenant != tenant {
        return Err(ApiError::Forbidden(format!(
            "a token of {} cannot read tenant {tenant}",
            p.tenant
        )));
    }
    let name = tenant.clone();
    let own = blocking(&s, move |st| {
        if !st.tenant_exists(&name)? {
            return Err(hearth_store::StoreError::NoSuchTenant(name));
        }
        st.tenant_colocation(&name)
    })
    .await?;
    Ok(Json(tenant_view(&s, &tenant, own)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantSettings {
    /// `null` clears the override.
    colocation: Option<Colocation>,
}

/// Sets a tenant's colocation override; admin only (it trades the
/// tenant's isolation against memory, which is the operator's call).
/// Applies to the tenant's next cold starts.
pub(crate) async fn put_tenant(
    State(s): S,
    headers: HeaderMap,
    Path(tenant): Path<String>,
    Json(body): Json<TenantSettings>,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if p.role != Role::Admin {
        return Err(ApiError::Forbidden(
            "only an admin token may change a tenant's colocation".into(),
        ));
    }
    let name = tenant.clone();
    let mode = body.colocation;
    blocking(&s, move |st| st.set_tenant_colocation(&name, mode)).await?;
    Ok(Json(tenant_view(&s, &tenant, mode)))
}

pub(crate) async fn deploy(
    State(s): S,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if let Some(gateway) = &s.deploys_via {
        return Err(ApiError::Conflict(format!(
            "this node belongs to the cluster of {gateway}: deploy there, so every node can fetch the code"
        )));
    }
    let (mut spec, runtime, file_name) =
        crate::deploy_settings::parse(query.as_deref().unwrap_or_default())?;
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
    let source = hearth_host::Source {
        file_name,
        code: code.to_vec(),
        artifact: false,
    };
    let out = s.node.deploy(&p.tenant, &name, source, spec).await?;
    let (v, compiled) = (out.version, out.compiled);
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "tenant": v.tenant,
            "name": v.name,
            "version": v.version,
            "artifact": v.artifact,
            "spec": v.spec,
            "created_at_ms": v.created_at_ms,
            "compile_ms": compiled.compile_ms,
            "install_ms": compiled.install_ms,
            "packages": compiled.packages,
            "warnings": compiled.warnings,
            "url": format!("/fn/{}/{}", v.tenant, v.name),
        })),
    ))
}

pub(crate) async fn list_functions(
    State(s): S,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    let tenant = p.tenant.clone();
    let fns = blocking(&s, move |st| st.list_functions(&tenant)).await?;
    Ok(Json(json!({ "tenant": p.tenant, "functions": fns })))
}

pub(crate) async fn get_function(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    let (tenant, n) = (p.tenant.clone(), name.clone());
    let versions = blocking(&s, move |st| st.list_versions(&tenant, &n)).await?;
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
                let mut view = json!(v);
                view["packages"] = json!(packages);
                view
            })
            .collect::<Vec<Value>>()
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Json(
        json!({ "tenant": p.tenant, "name": name, "versions": versions }),
    ))
}

pub(crate) async fn remove_function(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if s.node.remove(&p.tenant, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "function {}/{name} does not exist",
            p.tenant
        )))
    }
}

pub(crate) async fn logs(
    State(s): S,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    let params = crate::query::params(query);
    let q = LogQuery {
        invocation_id: params.get("invocation").cloned(),
        limit: crate::query::number::<u32>(&params, "limit")?
            .unwrap_or(100)
            .min(1000),
        after: crate::query::number(&params, "after")?,
    };
    // Every line of invocations that finished here is in the store before
    // it is read (briefly: the writer stores within 50 ms).
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), s.node.flush_logs()).await;
    let (tenant, n) = (p.tenant.clone(), name.clone());
    let lines = blocking(&s, move |st| st.read_logs(&tenant, &n, &q)).await?;
    Ok(Json(
        json!({ "tenant": p.tenant, "name": name, "lines": lines }),
    ))
}
