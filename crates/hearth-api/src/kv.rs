//! A function's KV from outside it, to seed or inspect it:
//! `GET /v1/functions/{name}/kv?prefix=&limit=` lists keys,
//! `GET|PUT|DELETE /v1/functions/{name}/kv/{key}` reads, writes and
//! removes one. The token's tenant owns the function; another tenant's
//! function of the same name is never reached (its KV is keyed by tenant).
//! Keys here are UTF-8 (the path's percent-decoded segment); the limits a
//! function's own `kv.set` has apply: key and value size, the tenant's
//! quota. Writes from here are not on any invocation's tape: a replay
//! answers from what the invocation read.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hearth_store::Scope;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::body::read_body;
use crate::error::ErrorBody;
use crate::query::Query;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

fn check_key(s: &AppState, key: &str) -> Result<(), ApiError> {
    let (max_key, _, _) = s.node.kv_limits();
    if key.is_empty() || key.len() > max_key {
        return Err(ApiError::BadRequest(format!(
            "a KV key is 1 to {max_key} bytes, not {}",
            key.len()
        )));
    }
    Ok(())
}

/// Which keys to list.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only keys that start with this.
    prefix: Option<String>,
    /// At most this many (and at most the node's KV list limit, 1000 by
    /// default).
    limit: Option<u32>,
}

/// A function's KV keys.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Keys {
    pub tenant: String,
    pub name: String,
    /// Keys listed that are not UTF-8, and so not in `keys`.
    pub not_utf8: usize,
    pub keys: Vec<String>,
}

/// A function's KV keys (UTF-8 ones; `not_utf8` counts the others)
#[utoipa::path(get, path = "/v1/functions/{name}/kv", tag = "kv",
    params(("name" = String, Path), ListQuery),
    responses((status = 200, body = Keys), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(s): S,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Json<Keys>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    let prefix = query.prefix.unwrap_or_default();
    let most = s.node.kv_limits().2;
    let limit = query.limit.unwrap_or(most).min(most);
    let (t, n) = (tenant.clone(), name.clone());
    let keys = s
        .node
        .store()
        .kv_list(&t, &n, prefix.as_bytes(), limit)
        .await?;
    let total = keys.len();
    let keys: Vec<String> = keys
        .into_iter()
        .filter_map(|k| String::from_utf8(k).ok())
        .collect();
    Ok(Json(Keys {
        tenant,
        name,
        not_utf8: total - keys.len(),
        keys,
    }))
}

/// A KV value, raw
#[utoipa::path(get, path = "/v1/functions/{name}/kv/{key}", tag = "kv",
    params(("name" = String, Path), ("key" = String, Path)),
    responses(
        (status = 200, description = "The value's bytes", content_type = "application/octet-stream"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(s): S,
    Path((name, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    check_key(&s, &key)?;
    s.node.make_room_to_delete();
    let (t, n, k) = (tenant.clone(), name.clone(), key.clone());
    match s.node.store().kv_get(&t, &n, k.as_bytes()).await? {
        Some(value) => Ok(([("content-type", "application/octet-stream")], value)),
        None => Err(ApiError::NotFound(format!(
            "{tenant}/{name} has no KV key {key:?}"
        ))),
    }
}

/// Set a KV value (the body)
#[utoipa::path(put, path = "/v1/functions/{name}/kv/{key}", tag = "kv",
    params(("name" = String, Path), ("key" = String, Path)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 204, description = "Set"), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 507, body = ErrorBody)))]
pub(crate) async fn put(
    State(s): S,
    Path((name, key)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    check_key(&s, &key)?;
    s.node.admit_growth()?;
    let (_, max_value, _) = s.node.kv_limits();
    let value = read_body(&headers, body, (max_value, s.config.body_timeout), "value").await?;
    let quota = s.node.kv_max_tenant_bytes();
    s.node
        .store()
        .kv_set(&tenant, &name, key.as_bytes(), &value, quota)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove a KV key
#[utoipa::path(delete, path = "/v1/functions/{name}/kv/{key}", tag = "kv",
    params(("name" = String, Path), ("key" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(s): S,
    Path((name, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    check_key(&s, &key)?;
    s.node.make_room_to_delete();
    let (t, n, k) = (tenant.clone(), name.clone(), key.clone());
    if s.node.store().kv_delete(&t, &n, k.as_bytes()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "{tenant}/{name} has no KV key {key:?}"
        )))
    }
}
