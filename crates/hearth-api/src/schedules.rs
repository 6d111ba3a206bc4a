//! Schedules (docs/events.md): set at deploy (`schedule=`, repeatable),
//! then listed, paused, resumed and removed here.
//!
//! - `GET /v1/schedules`: the tenant's, every function's.
//! - `GET /v1/functions/{name}/schedules`: one function's.
//! - `POST /v1/functions/{name}/schedules/{id}/pause` and `…/resume`.
//! - `DELETE /v1/functions/{name}/schedules/{id}`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use hearth_events::Schedule;
use hearth_store::{ScheduleRow, Scope};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ErrorBody;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// Schedules, each function's in the order they were made.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Schedules {
    pub tenant: String,
    pub schedules: Vec<ScheduleRow>,
}

/// The schedules a deploy's settings give a function, each from its next
/// tick (a row the function keeps keeps its own: the store's rule).
pub(crate) fn rows(
    tenant: &str,
    function: &str,
    schedules: &[Schedule],
    catch_up: u32,
) -> Vec<ScheduleRow> {
    let now = hearth_core::unix_time_ms();
    schedules
        .iter()
        .map(|s| ScheduleRow {
            tenant: tenant.to_string(),
            function: function.to_string(),
            id: s.id(),
            expr: s.expr().to_string(),
            catch_up,
            paused: false,
            next_ms: s.next_after(now).unwrap_or(i64::MAX),
            fired_ms: None,
            created_ms: now,
        })
        .collect()
}

/// The tenant's schedules
#[utoipa::path(get, path = "/v1/schedules", tag = "events",
    responses((status = 200, body = Schedules), (status = 401, body = ErrorBody)))]
pub(crate) async fn list_all(State(s): S, headers: HeaderMap) -> Result<Json<Schedules>, ApiError> {
    let p = s
        .auth
        .require(s.node.store(), &headers, Scope::Read)
        .await?;
    let schedules = s
        .node
        .store()
        .schedules(&p.tenant, None)
        .await?
        .into_iter()
        .filter(|r| crate::auth::check_function(&p, &r.function).is_ok())
        .collect();
    Ok(Json(Schedules {
        tenant: p.tenant.clone(),
        schedules,
    }))
}

/// A function's schedules
#[utoipa::path(get, path = "/v1/functions/{name}/schedules", tag = "events",
    params(("name" = String, Path)),
    responses((status = 200, body = Schedules), (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Schedules>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    let schedules = s.node.store().schedules(&tenant, Some(&name)).await?;
    Ok(Json(Schedules { tenant, schedules }))
}

/// The schedule `id` of `name`, or a 404 naming where the ids are.
async fn one(s: &AppState, tenant: &str, name: &str, id: &str) -> Result<ScheduleRow, ApiError> {
    s.node
        .store()
        .schedules(tenant, Some(name))
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "function {name} has no schedule {id:?} (`hearth schedules {name}` lists them)"
            ))
        })
}

/// Pause a schedule: its ticks are not fired until it is resumed
#[utoipa::path(post, path = "/v1/functions/{name}/schedules/{id}/pause", tag = "events",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = ScheduleRow), (status = 404, body = ErrorBody)))]
pub(crate) async fn pause(
    State(s): S,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<ScheduleRow>, ApiError> {
    set_paused(&s, &headers, &name, &id, true).await
}

/// Resume a paused schedule from its next tick (the ticks it missed
/// while paused are not fired)
#[utoipa::path(post, path = "/v1/functions/{name}/schedules/{id}/resume", tag = "events",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = ScheduleRow), (status = 404, body = ErrorBody)))]
pub(crate) async fn resume(
    State(s): S,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<ScheduleRow>, ApiError> {
    set_paused(&s, &headers, &name, &id, false).await
}

async fn set_paused(
    s: &AppState,
    headers: &HeaderMap,
    name: &str,
    id: &str,
    paused: bool,
) -> Result<Json<ScheduleRow>, ApiError> {
    let tenant = crate::auth::function_owner(s, headers, name, Scope::Deploy).await?;
    let row = one(s, &tenant, name, id).await?;
    let schedule: Schedule = row
        .expr
        .parse()
        .map_err(|e: hearth_events::ScheduleError| ApiError::Conflict(e.to_string()))?;
    let next = schedule
        .next_after(hearth_core::unix_time_ms())
        .unwrap_or(i64::MAX);
    s.node
        .store()
        .pause_schedule((&tenant, name, id), paused, next)
        .await?;
    Ok(Json(one(s, &tenant, name, id).await?))
}

/// Remove a schedule
#[utoipa::path(delete, path = "/v1/functions/{name}/schedules/{id}", tag = "events",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = ScheduleRow), (status = 404, body = ErrorBody)))]
pub(crate) async fn remove(
    State(s): S,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<ScheduleRow>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    let row = one(&s, &tenant, &name, &id).await?;
    s.node.store().remove_schedule(&tenant, &name, &id).await?;
    Ok(Json(row))
}
