//! The gateway's side of the HTTP surface: nodes join, send heartbeats and
//! leave under `/v1/cluster/nodes`, fetch code by hash from
//! `/v1/artifacts/{sha256}`, and invocations are forwarded to the node the
//! placer picks (see `hearth_cluster::gateway`). Every cluster call needs
//! an admin token: the nodes hold the cluster's.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hearth_cluster::gateway::{Heartbeat, Join, Outgoing};
use hearth_cluster::{Gateway, GatewayError};
use hearth_core::FunctionVersion;
use hearth_store::Role;
use serde_json::json;

use crate::invoke::is_hop_by_hop;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// The gateway, or 404 on a node that is not one.
async fn gateway_for_admin(s: &AppState, headers: &HeaderMap) -> Result<Arc<Gateway>, ApiError> {
    let p = s.auth.require(s.node.store(), headers).await?;
    if p.role != Role::Admin {
        return Err(ApiError::Forbidden(
            "cluster calls need an admin token".into(),
        ));
    }
    s.gateway
        .clone()
        .ok_or_else(|| ApiError::NotFound("this Hearth is not a gateway (--role gateway)".into()))
}

pub(crate) async fn join(
    State(s): S,
    headers: HeaderMap,
    Json(join): Json<Join>,
) -> Result<impl IntoResponse, ApiError> {
    let g = gateway_for_admin(&s, &headers).await?;
    let parsed: http::Uri = join
        .url
        .parse()
        .map_err(|e| ApiError::BadRequest(format!("node url {:?}: {e}", join.url)))?;
    if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
        return Err(ApiError::BadRequest(format!(
            "node url {:?} is not http(s)",
            join.url
        )));
    }
    Ok((StatusCode::CREATED, Json(g.join(join))))
}

pub(crate) async fn heartbeat(
    State(s): S,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(beat): Json<Heartbeat>,
) -> Result<StatusCode, ApiError> {
    let g = gateway_for_admin(&s, &headers).await?;
    if g.heartbeat(&id, beat) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no node {id}: join again")))
    }
}

pub(crate) async fn leave(
    State(s): S,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let g = gateway_for_admin(&s, &headers).await?;
    if g.leave(&id) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no node {id}")))
    }
}

pub(crate) async fn members(
    State(s): S,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    let g = gateway_for_admin(&s, &headers).await?;
    Ok(Json(json!({ "nodes": g.members() })))
}

/// `GET /v1/artifacts/{sha256}`: code as deployed, for nodes to cache.
pub(crate) async fn artifact(
    State(s): S,
    Path(hash): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    gateway_for_admin(&s, &headers).await?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::BadRequest(format!("{hash:?} is not a sha256")));
    }
    let artifacts = s.node.artifacts().clone();
    let bytes = tokio::task::spawn_blocking(move || artifacts.get(&hash))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| match e {
            hearth_store::StoreError::MissingArtifact(_) => ApiError::NotFound(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        })?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// How much longer than the function's own timeout the gateway waits for a
/// node: a cold start (a process-tier runtime, an artifact fetch) comes
/// before the function's clock starts.
const NODE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends an invocation to a node, pinned to the version the gateway
/// resolved, so every node runs the same code whatever it has cached.
pub(crate) async fn forward(
    g: &Gateway,
    function: &FunctionVersion,
    method: http::Method,
    uri: &http::Uri,
    mut headers: HeaderMap,
    body: bytes::Bytes,
) -> Result<Response, ApiError> {
    // `/fn/{tenant}/{name}[@v][/rest]`, kept raw (still percent-encoded).
    let raw = uri.path().strip_prefix("/fn/").unwrap_or_default();
    let mut parts = raw.splitn(3, '/');
    let (tenant, name) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let name = name.split('@').next().unwrap_or_default();
    let rest = parts.next().map(|r| format!("/{r}")).unwrap_or_default();
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    // The node's own: its address, the version, which the path pins, and
    // the attempt, which only the gateway may name.
    for h in [
        header::HOST,
        HeaderName::from_static("hearth-version"),
        HeaderName::from_static(hearth_cluster::attempt::HEADER),
    ] {
        headers.remove(h);
    }
    let hop_by_hop: Vec<HeaderName> = headers
        .keys()
        .filter(|k| is_hop_by_hop(k))
        .cloned()
        .collect();
    for h in hop_by_hop {
        headers.remove(h);
    }
    let out = Outgoing {
        tenant: &function.tenant,
        function: &function.name,
        memory_mb: u64::from(function.spec.limits.memory_mib),
        timeout: std::time::Duration::from_millis(function.spec.limits.timeout_ms) + NODE_GRACE,
        method,
        path_and_query: format!("/fn/{tenant}/{name}@{}{rest}{query}", function.version),
        headers,
        body,
    };
    let done = g.forward(&out).await.map_err(|e| match e {
        GatewayError::NoNodes | GatewayError::Busy(_) => ApiError::Unavailable(e.to_string()),
        GatewayError::NoRoom(_) => ApiError::TooManyRequests(e.to_string()),
        GatewayError::Failed(_) => ApiError::BadGateway(e.to_string()),
        GatewayError::Timeout { .. } => ApiError::GatewayTimeout(e.to_string()),
    })?;
    let mut resp = Response::new(Body::from(done.body));
    *resp.status_mut() = StatusCode::from_u16(done.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let h = resp.headers_mut();
    for (k, v) in &done.headers {
        if !is_hop_by_hop(k) {
            h.append(k.clone(), v.clone());
        }
    }
    let node = |id: &str| HeaderValue::try_from(id).expect("a hex id is a valid header value");
    h.insert(HeaderName::from_static("hearth-node"), node(&done.node));
    if let Some(first) = &done.retried_from {
        h.insert(HeaderName::from_static("hearth-retried-from"), node(first));
    }
    Ok(resp)
}

// ---- recordings in a cluster: each node keeps its own, the gateway asks all

/// What a fan-out passes on: the caller's credentials (tokens live in the
/// shared store, so every node knows them) and the body's type.
fn passed_on(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for h in [header::AUTHORIZATION, header::CONTENT_TYPE] {
        if let Some(v) = headers.get(&h) {
            out.insert(h, v.clone());
        }
    }
    out
}

/// `path` with the caller's query, as a node is asked the same request.
pub(crate) fn with_query(path: String, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    }
}

/// Nodes that did not answer, for the caller to know what it is not seeing.
fn unreachable(failed: &[(Arc<str>, String)]) -> serde_json::Value {
    json!(
        failed
            .iter()
            .map(|(node, why)| json!({"node": node.as_ref(), "error": why}))
            .collect::<Vec<_>>()
    )
}

/// Each node's JSON answer to `path`, and the nodes that failed. A node's
/// own error (4xx/5xx other than 404) is returned as the caller's error.
async fn ask_all(
    g: &Gateway,
    method: http::Method,
    path: &str,
    headers: &HeaderMap,
    body: bytes::Bytes,
) -> Result<(Vec<(Arc<str>, serde_json::Value)>, Vec<(Arc<str>, String)>), ApiError> {
    let mut answers = Vec::new();
    let mut failed = Vec::new();
    for (node, answer) in g.ask_nodes(method, path, &passed_on(headers), body).await {
        match answer {
            Ok((200, bytes)) => match serde_json::from_slice(&bytes) {
                Ok(v) => answers.push((node, v)),
                Err(e) => failed.push((node, format!("unreadable answer: {e}"))),
            },
            Ok((404, _)) => {}
            Ok((status, bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                return Err(ApiError::BadGateway(format!(
                    "node {node} answered {status}: {text}"
                )));
            }
            Err(e) => failed.push((node, e)),
        }
    }
    Ok((answers, failed))
}

/// `GET /v1/functions/{name}/recordings` on a gateway: every node's tapes
/// of the function, newest first (ids sort by time), each with its node.
pub(crate) async fn recordings_list(
    g: &Gateway,
    tenant: &str,
    name: &str,
    query: Option<&str>,
    limit: usize,
    headers: &HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    let path = with_query(format!("/v1/functions/{name}/recordings"), query);
    let (answers, failed) =
        ask_all(g, http::Method::GET, &path, headers, Default::default()).await?;
    let mut all = Vec::new();
    for (node, mut answer) in answers {
        if let Some(list) = answer["recordings"].as_array_mut() {
            for mut r in list.drain(..) {
                r["node"] = json!(node.as_ref());
                all.push(r);
            }
        }
    }
    all.sort_by(|a, b| b["id"].as_str().cmp(&a["id"].as_str()));
    all.truncate(limit);
    Ok(Json(json!({
        "tenant": tenant,
        "name": name,
        "recordings": all,
        "unreachable": unreachable(&failed),
    })))
}

/// `GET /v1/recordings/{id}[/export]` and `POST /v1/recordings/{id}/replay`
/// on a gateway: the node holding the tape answers, its bytes passed on
/// as they are (a replay runs there, beside its tape).
pub(crate) async fn recording_on_its_node(
    g: &Gateway,
    method: http::Method,
    id: &str,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let mut failed = Vec::new();
    let mut found = None;
    for (node, answer) in g
        .ask_nodes(
            method,
            path_and_query,
            &passed_on(headers),
            Default::default(),
        )
        .await
    {
        match answer {
            Ok((404, _)) => {}
            Ok((status, bytes)) if found.is_none() => found = Some((node, status, bytes)),
            Ok(_) => {}
            Err(e) => failed.push((node, e)),
        }
    }
    let Some((node, status, bytes)) = found else {
        let also = if failed.is_empty() {
            String::new()
        } else {
            format!(
                "; {} node(s) did not answer: {}",
                failed.len(),
                unreachable(&failed)
            )
        };
        return Err(ApiError::NotFound(format!(
            "no recording {id} on any node{also}"
        )));
    };
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        HeaderName::from_static("hearth-node"),
        HeaderValue::try_from(node.as_ref()).expect("a hex id is a valid header value"),
    );
    Ok(resp)
}

/// `POST /v1/functions/{name}/replay?against=N…` on a gateway: every node
/// replays its own recorded traffic; the reports are added up.
pub(crate) async fn replay_traffic(
    g: &Gateway,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (answers, failed) = ask_all(
        g,
        http::Method::POST,
        path_and_query,
        headers,
        Default::default(),
    )
    .await?;
    let mut total = json!({"replayed": 0, "changed": 0, "diverged": 0, "results": []});
    for (node, answer) in answers {
        for key in ["replayed", "changed", "diverged"] {
            let sum = total[key].as_u64().unwrap_or(0) + answer[key].as_u64().unwrap_or(0);
            total[key] = json!(sum);
        }
        for key in ["name", "against"] {
            total[key] = answer[key].clone();
        }
        if let (Some(all), Some(results)) = (
            total["results"].as_array_mut(),
            answer["results"].as_array(),
        ) {
            for r in results {
                let mut r = r.clone();
                r["node"] = json!(node.as_ref());
                all.push(r);
            }
        }
    }
    total["unreachable"] = unreachable(&failed);
    Ok(Json(total))
}
