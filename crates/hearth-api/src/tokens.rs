//! A tenant's tokens under `/v1/tokens`: create one with a scope (and
//! optionally one function and an expiry), list them (never their
//! secrets), revoke and rotate them.
//!
//! Managing tokens needs scope deploy on the whole tenant (or admin, which
//! may name another tenant with `?tenant=`), and no token makes or renews
//! one broader than itself: a deploy token cannot make an admin token, an
//! expiring one cannot make or rotate one that outlives it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hearth_store::{Grant, Principal, Scope};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ErrorBody;
use crate::query::Query;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// A token to make.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewToken {
    /// admin (the operator's tenant only), deploy, invoke or read.
    scope: Scope,
    /// Only this function of the tenant.
    #[serde(default)]
    function: Option<String>,
    /// How long it works: `90s`, `15m`, `12h`, `30d` (default: until
    /// revoked).
    #[serde(default)]
    #[schema(example = "30d")]
    expires: Option<String>,
    /// A label for lists (`ci`, `grafana`).
    #[serde(default)]
    name: Option<String>,
}

/// Whose tokens (admin only: another tenant's).
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Whose {
    tenant: Option<String>,
}

/// A token just made: its secret, shown once, and what it may do.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct TokenMade {
    /// Send as `Authorization: Bearer <token>`; only its hash is kept.
    pub token: String,
    #[serde(flatten)]
    pub info: Principal,
}

/// A tenant's tokens.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct TokenList {
    pub tenant: String,
    /// Oldest first; secrets are never shown again.
    pub tokens: Vec<Principal>,
}

/// The caller, allowed to manage `whose`'s tokens (its own tenant's
/// unless an admin names another), and that tenant.
async fn manager(
    s: &AppState,
    headers: &HeaderMap,
    whose: Whose,
) -> Result<(Arc<Principal>, String), ApiError> {
    let p = s
        .auth
        .require(s.node.store(), headers, Scope::Deploy)
        .await?;
    let tenant = match whose.tenant {
        Some(t) if t != p.tenant && !p.is_admin() => {
            return Err(ApiError::Forbidden(format!(
                "a token of {} cannot manage tenant {t}'s tokens",
                p.tenant
            )));
        }
        Some(t) => t,
        None => p.tenant.clone(),
    };
    Ok((p, tenant))
}

/// Refuses `grant` unless `p` may give it to a token of `tenant`.
fn may_give(p: &Principal, tenant: &str, grant: &Grant) -> Result<(), ApiError> {
    if grant.scope == Scope::Admin && tenant != hearth_store::ADMIN_TENANT {
        return Err(ApiError::BadRequest(format!(
            "scope admin is the operator's, for tenant {}'s tokens only; give tenant {tenant} \
             deploy, invoke or read",
            hearth_store::ADMIN_TENANT
        )));
    }
    if !p.grant.covers(grant) {
        return Err(ApiError::Forbidden(format!(
            "this token (scope {}{}{}) cannot give scope {}{}{}: a token gives no more than \
             it has",
            p.grant.scope,
            p.grant
                .function
                .as_ref()
                .map(|f| format!(", function {f}"))
                .unwrap_or_default(),
            p.grant
                .expires_ms
                .map(|at| format!(", until {}", crate::auth::when(at)))
                .unwrap_or_default(),
            grant.scope,
            grant
                .function
                .as_ref()
                .map(|f| format!(", function {f}"))
                .unwrap_or_default(),
            match grant.expires_ms {
                Some(at) => format!(", until {}", crate::auth::when(at)),
                None => ", for good".to_string(),
            },
        )));
    }
    Ok(())
}

/// Make a token
///
/// Answers its secret once. Needs scope deploy on the whole tenant; the
/// new token's grant is no broader than the caller's.
#[utoipa::path(post, path = "/v1/tokens", tag = "tenants", params(Whose),
    request_body = NewToken,
    responses((status = 201, body = TokenMade), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(crate) async fn create(
    State(s): S,
    Query(whose): Query<Whose>,
    headers: HeaderMap,
    Json(body): Json<NewToken>,
) -> Result<impl IntoResponse, ApiError> {
    let (p, tenant) = manager(&s, &headers, whose).await?;
    let expires_ms = match &body.expires {
        None => None,
        Some(text) => {
            let secs = hearth_core::parse_duration_s(text)
                .filter(|&s| s > 0 && s <= 100 * 365 * 86_400)
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "expires {text:?} is not a duration: write 90s, 15m, 12h or 30d \
                         (at most 100 years; leave it out for a token that does not expire)"
                    ))
                })?;
            Some(hearth_core::unix_time_ms() + secs as i64 * 1000)
        }
    };
    let grant = Grant {
        scope: body.scope,
        function: body.function,
        expires_ms,
        name: body.name,
    };
    may_give(&p, &tenant, &grant)?;
    s.node.admit_growth()?;
    let (token, info) = s.node.store().create_token(&tenant, &grant).await?;
    Ok((StatusCode::CREATED, Json(TokenMade { token, info })))
}

/// List a tenant's tokens (never their secrets)
#[utoipa::path(get, path = "/v1/tokens", tag = "tenants", params(Whose),
    responses((status = 200, body = TokenList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
pub(crate) async fn list(
    State(s): S,
    Query(whose): Query<Whose>,
    headers: HeaderMap,
) -> Result<Json<TokenList>, ApiError> {
    let (_, tenant) = manager(&s, &headers, whose).await?;
    let tokens = s.node.store().tokens(&tenant).await?;
    Ok(Json(TokenList { tenant, tokens }))
}

/// Revoke a token
///
/// It fails here at once, and on every node and gateway of a cluster
/// within half a second and one store query (each checks a token's grant
/// again that often).
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "tenants",
    params(("id" = String, Path), Whose),
    responses((status = 200, body = Principal, description = "The token revoked"),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn revoke(
    State(s): S,
    Path(id): Path<String>,
    Query(whose): Query<Whose>,
    headers: HeaderMap,
) -> Result<Json<Principal>, ApiError> {
    let (_, tenant) = manager(&s, &headers, whose).await?;
    let gone = s.node.store().revoke_token(&tenant, &id).await?;
    s.auth.forget(&gone.id);
    Ok(Json(gone))
}

/// Rotate a token: a new secret with the same grant
///
/// The old secret stops as the new one starts (in one transaction; other
/// members within half a second). The caller's grant must cover the
/// token's.
#[utoipa::path(post, path = "/v1/tokens/{id}/rotate", tag = "tenants",
    params(("id" = String, Path), Whose),
    responses((status = 201, body = TokenMade), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn rotate(
    State(s): S,
    Path(id): Path<String>,
    Query(whose): Query<Whose>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let (p, tenant) = manager(&s, &headers, whose).await?;
    let store = s.node.store();
    let old = store
        .tokens(&tenant)
        .await?
        .into_iter()
        .find(|t| t.id == id.to_ascii_lowercase())
        .ok_or_else(|| hearth_store::StoreError::NoSuchToken {
            tenant: tenant.clone(),
            id: id.clone(),
        })?;
    may_give(&p, &tenant, &old.grant)?;
    let (token, info) = store.rotate_token(&tenant, &old.id).await?;
    s.auth.forget(&old.id);
    Ok((StatusCode::CREATED, Json(TokenMade { token, info })))
}
