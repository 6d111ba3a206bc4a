//! A tenant's secrets under `/v1/secrets`: set (or rotate) one, list them
//! by name, remove one. No call answers a value: a secret's value leaves
//! the node only as its functions' environment.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hearth_store::{Scope, SecretInfo};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::body::read_body;
use crate::error::ErrorBody;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// A tenant's secrets, by name.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct SecretList {
    pub tenant: String,
    pub secrets: Vec<SecretListed>,
}

/// A secret as listed (never its value).
#[derive(Serialize, Deserialize, ToSchema)]
pub struct SecretListed {
    #[serde(flatten)]
    pub info: SecretInfo,
    /// The functions whose live version binds it (`name@N`).
    pub bound_by: Vec<String>,
}

/// A secret set.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct SecretSet {
    pub name: String,
    /// Made now (else its value was replaced: a rotation).
    pub created: bool,
}

/// Set a secret (or rotate it)
///
/// The body is the value: UTF-8 text without NUL, at most 4 KiB. It is
/// sealed with the tenant's key before it is stored, and functions that
/// bind it read the new value from their next cold start: their prepared
/// code is dropped now, here and on every member of a cluster.
#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "tenants",
    params(("name" = String, Path)),
    request_body(content = Vec<u8>, content_type = "text/plain"),
    responses((status = 200, body = SecretSet), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody)))]
pub(crate) async fn set(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<SecretSet>, ApiError> {
    let p = s
        .auth
        .require(s.node.store(), &headers, Scope::Deploy)
        .await?;
    hearth_core::validate_env_name("secret name", &name)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let value = read_body(
        &headers,
        body,
        (hearth_node::MAX_SECRET_BYTES, s.config.body_timeout),
        "secret",
    )
    .await?;
    s.node.admit_growth()?;
    let created = s.node.set_secret(&p.tenant, &name, &value).await?;
    Ok(Json(SecretSet { name, created }))
}

/// The tenant's secrets, by name (never their values)
#[utoipa::path(get, path = "/v1/secrets", tag = "tenants",
    responses((status = 200, body = SecretList), (status = 401, body = ErrorBody)))]
pub(crate) async fn list(State(s): S, headers: HeaderMap) -> Result<Json<SecretList>, ApiError> {
    let p = s
        .auth
        .require(s.node.store(), &headers, Scope::Read)
        .await?;
    let infos = s.node.store().secrets(&p.tenant).await?;
    let mut bound = s.node.live_secret_bindings(&p.tenant).await?;
    let secrets = infos
        .into_iter()
        .map(|info| SecretListed {
            bound_by: bound.remove(&info.name).unwrap_or_default(),
            info,
        })
        .collect();
    Ok(Json(SecretList {
        tenant: p.tenant.clone(),
        secrets,
    }))
}

/// Remove a secret
///
/// Refused (409) while a function's live version binds it.
#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "tenants",
    params(("name" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(crate) async fn remove(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let p = s
        .auth
        .require(s.node.store(), &headers, Scope::Deploy)
        .await?;
    if s.node.remove_secret(&p.tenant, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "tenant {} has no secret {name} (`hearth secret ls` lists them)",
            p.tenant
        )))
    }
}
