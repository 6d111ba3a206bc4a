//! A function's aliases and releases: `live` is what an unpinned call runs,
//! and a tenant may name others (`canary`, `staging`), each invocable as
//! `name@alias`.
//!
//! - `GET /v1/functions/{name}/aliases`: where each points.
//! - `POST /v1/functions/{name}/aliases/{alias}` `{"version": N}`: point it
//!   at N (`hearth promote`), made if new.
//! - `POST /v1/functions/{name}/aliases/{alias}/rollback`: back where it
//!   was before its last move (`hearth rollback`); again, further back.
//! - `DELETE /v1/functions/{name}/aliases/{alias}`: remove one (not `live`).
//! - `GET /v1/functions/{name}/aliases/{alias}/history`: its moves.
//! - `GET /v1/functions/{name}/versions/{version}/code`: the code a
//!   version runs, as the node stores it.
//!
//! A move is one store transaction, so nothing is half-applied; in a
//! cluster it reaches every member as a deploy does (the store's change
//! notification), and this node's table forgets its aliases at once.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hearth_store::{Alias, AliasMove, Scope};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ErrorBody;
use crate::gate::{Gate, GateResult};
use crate::query::Query;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// A function's aliases.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Aliases {
    pub tenant: String,
    pub name: String,
    pub aliases: Vec<Alias>,
}

/// Where a function's aliases point
#[utoipa::path(get, path = "/v1/functions/{name}/aliases", tag = "functions",
    params(("name" = String, Path)),
    responses((status = 200, body = Aliases), (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Aliases>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    let aliases = s.node.store().aliases(&tenant, &name).await?;
    Ok(Json(Aliases {
        tenant,
        name,
        aliases,
    }))
}

/// Which version an alias is to point at, and a share of its calls to
/// send to another.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Promotion {
    pub version: u32,
    /// `percent` (1–99) of the alias's calls go to `split.version`; a
    /// caller's `Hearth-Split-Key` header keeps it on one side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<hearth_store::Split>,
    /// First replay the newest tapes of the version the alias points at
    /// against the version taking traffic (`split.version` if splitting,
    /// else `version`), and move only if each answers as its tape did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
}

/// An alias moved, and what its gate found.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Promoted {
    #[serde(flatten)]
    pub moved: AliasMove,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateResult>,
}

/// A gate that refused: the error, and what the gate found.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct GateRefused {
    /// `kind` is `gate_refused`.
    #[schema(value_type = Object)]
    pub error: serde_json::Value,
    pub gate: GateResult,
}

/// Point an alias at a version (promote), gated by replay if asked
///
/// `live` is what unpinned invocations run: pointing it at an older
/// version is a rollback to it, at a newer one a release. Recorded in the
/// alias's history. With `gate`, the newest tapes of the version the alias
/// points at are first replayed against the new one (docs/releases.md); a
/// gate that does not pass answers 409 `gate_refused` with what it found,
/// and nothing moves.
#[utoipa::path(post, path = "/v1/functions/{name}/aliases/{alias}", tag = "functions",
    params(("name" = String, Path), ("alias" = String, Path)),
    request_body = Promotion,
    responses((status = 200, body = Promoted), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = GateRefused)))]
pub(crate) async fn promote(
    State(s): S,
    Path((name, alias)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Promotion>,
) -> Result<Response, ApiError> {
    hearth_core::validate_alias_name(&alias).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    let gate = match &body.gate {
        None => None,
        Some(gate) => {
            let Some(current) = s.node.store().alias_version(&tenant, &name, &alias).await? else {
                return Err(ApiError::Conflict(format!(
                    "{name}@{alias} points at no version yet, so it has no tapes to gate on: \
                     promote without the gate"
                )));
            };
            let against = body.split.map_or(body.version, |sp| sp.version);
            // Both versions must exist before any replay runs.
            for v in [body.version, against] {
                s.node.resolve(&tenant, &name, Some(v)).await?;
            }
            let found = crate::gate::run(
                &s,
                &headers,
                (&tenant, &name),
                (current.version, against),
                gate,
            )
            .await?;
            if !found.passed {
                let message = crate::gate::refusal(&name, &found);
                let refused = GateRefused {
                    error: serde_json::json!({"kind": "gate_refused", "message": message}),
                    gate: found,
                };
                return Ok((StatusCode::CONFLICT, Json(refused)).into_response());
            }
            Some(found)
        }
    };
    let moved = s
        .node
        .promote(&tenant, &name, &alias, body.version, body.split)
        .await?;
    Ok(Json(Promoted { moved, gate }).into_response())
}

/// Remove an alias and its history
///
/// `live` cannot be removed (400): promote another version to it instead.
/// A function keeps at most 32 aliases, so one may have to go first.
#[utoipa::path(delete, path = "/v1/functions/{name}/aliases/{alias}", tag = "functions",
    params(("name" = String, Path), ("alias" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn remove(
    State(s): S,
    Path((name, alias)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    if s.node.remove_alias(&tenant, &name, &alias).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "function {tenant}/{name} has no alias {alias:?}"
        )))
    }
}

/// Roll an alias back
///
/// Points the alias where it was before the move that made its current
/// version (each rollback undoes one move; a second goes further back).
/// 409 when there is nothing before.
#[utoipa::path(post, path = "/v1/functions/{name}/aliases/{alias}/rollback", tag = "functions",
    params(("name" = String, Path), ("alias" = String, Path)),
    responses((status = 200, body = AliasMove), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(crate) async fn rollback(
    State(s): S,
    Path((name, alias)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<AliasMove>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    Ok(Json(s.node.roll_back(&tenant, &name, &alias).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    /// At most this many moves, newest first (default 50; an alias keeps
    /// its newest 1000).
    limit: Option<u32>,
}

/// An alias's moves.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct AliasHistory {
    pub alias: String,
    /// Newest first.
    pub moves: Vec<AliasMove>,
}

/// An alias's history: every promotion and rollback, newest first
#[utoipa::path(get, path = "/v1/functions/{name}/aliases/{alias}/history", tag = "functions",
    params(("name" = String, Path), ("alias" = String, Path), HistoryQuery),
    responses((status = 200, body = AliasHistory), (status = 404, body = ErrorBody)))]
pub(crate) async fn history(
    State(s): S,
    Path((name, alias)): Path<(String, String)>,
    Query(q): Query<HistoryQuery>,
    headers: HeaderMap,
) -> Result<Json<AliasHistory>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    let limit = q
        .limit
        .unwrap_or(50)
        .clamp(1, 2 * hearth_store::MAX_MOVES_PER_ALIAS);
    let moves = s
        .node
        .store()
        .alias_moves(&tenant, &name, &alias, limit)
        .await?;
    Ok(Json(AliasHistory { alias, moves }))
}

/// A version's code, as the node stores it
///
/// The artifact the version runs: the module (for a wasm function with an
/// init step, the snapshot taken at deploy), the JavaScript or Python
/// file, or the bundle with its lock.
#[utoipa::path(get, path = "/v1/functions/{name}/versions/{version}/code", tag = "functions",
    params(("name" = String, Path), ("version" = u32, Path)),
    responses((status = 200, description = "The artifact", content_type = "application/octet-stream"),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn code(
    State(s): S,
    Path((name, version)): Path<(String, u32)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    let v = s.node.resolve(&tenant, &name, Some(version)).await?;
    let artifacts = s.node.artifacts().clone();
    let hash = v.artifact.clone();
    let bytes = tokio::task::spawn_blocking(move || artifacts.get(&hash))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    let mut resp = (StatusCode::OK, bytes).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(disposition) =
        HeaderValue::from_str(&format!("attachment; filename=\"{name}@{version}\""))
    {
        h.insert(header::CONTENT_DISPOSITION, disposition);
    }
    h.insert(
        "hearth-artifact",
        HeaderValue::from_str(&v.artifact).map_err(|e| ApiError::Internal(e.to_string()))?,
    );
    Ok(resp)
}
