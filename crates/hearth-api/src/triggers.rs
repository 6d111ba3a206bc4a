//! Broker bindings (docs/events.md, "Queue triggers on NATS JetStream"):
//! set at deploy (`trigger=`, repeatable), then listed, paused, resumed
//! and removed here.
//!
//! - `GET /v1/triggers`: the tenant's, every function's.
//! - `GET /v1/functions/{name}/triggers`: one function's.
//! - `POST /v1/functions/{name}/triggers/{id}/pause` and `…/resume`.
//! - `DELETE /v1/functions/{name}/triggers/{id}`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use hearth_events::{Binding, TriggerError};
use hearth_store::{Scope, TriggerRow};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ErrorBody;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// Broker bindings, each function's in the order they were made.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Triggers {
    pub tenant: String,
    pub triggers: Vec<TriggerRow>,
}

impl From<TriggerError> for ApiError {
    fn from(e: TriggerError) -> Self {
        match e {
            TriggerError::Invalid(_) => ApiError::BadRequest(e.to_string()),
            TriggerError::NotAllowed(_) => ApiError::Forbidden(e.to_string()),
            TriggerError::Broker(_) => ApiError::Broker(e.to_string()),
        }
    }
}

/// Checks a deploy's bindings before anything is deployed: this Hearth
/// runs events, the tenant's bound holds, and each broker is allowed,
/// reachable and has what the binding needs (its consumer made there).
pub(crate) async fn check(
    s: &Arc<AppState>,
    tenant: &str,
    function: &str,
    bindings: &[Binding],
) -> Result<Vec<TriggerRow>, ApiError> {
    if bindings.is_empty() {
        return Ok(Vec::new());
    }
    let Some(config) = &s.config.events else {
        return Err(ApiError::Conflict(
            "this Hearth runs no events, so nothing would consume a trigger: drop \
             trigger=, or deploy through a Hearth that runs them (a gateway, or one alone)"
                .into(),
        ));
    };
    let all = s.node.store().triggers(None, None).await?;
    let elsewhere = |r: &&TriggerRow| r.tenant != tenant || r.function != function;
    if all.iter().filter(elsewhere).count() + bindings.len() > hearth_events::trigger::MAX_BINDINGS
    {
        return Err(ApiError::Unavailable(format!(
            "this Hearth consumes at most {} broker bindings, every tenant's, and has them: \
             remove one (`hearth triggers rm`), or ask the operator",
            hearth_events::trigger::MAX_BINDINGS
        )));
    }
    let others = all
        .iter()
        .filter(|r| r.tenant == tenant && r.function != function)
        .count();
    if others + bindings.len() > hearth_store::MAX_TRIGGERS_PER_TENANT {
        return Err(hearth_store::StoreError::TooManyTriggers {
            max: hearth_store::MAX_TRIGGERS_PER_TENANT,
            per: "tenant",
        }
        .into());
    }
    let dispatch = crate::events::ApiDispatch(Arc::downgrade(s));
    for b in bindings {
        b.check(tenant, function, &dispatch, config).await?;
    }
    Ok(bindings.iter().map(|b| b.row(tenant, function)).collect())
}

/// The tenant's broker bindings
#[utoipa::path(get, path = "/v1/triggers", tag = "events",
    responses((status = 200, body = Triggers), (status = 401, body = ErrorBody)))]
pub(crate) async fn list_all(State(s): S, headers: HeaderMap) -> Result<Json<Triggers>, ApiError> {
    let p = s
        .auth
        .require(s.node.store(), &headers, Scope::Read)
        .await?;
    let triggers = s
        .node
        .store()
        .triggers(Some(&p.tenant), None)
        .await?
        .into_iter()
        .filter(|r| crate::auth::check_function(&p, &r.function).is_ok())
        .collect();
    Ok(Json(Triggers {
        tenant: p.tenant.clone(),
        triggers,
    }))
}

/// A function's broker bindings
#[utoipa::path(get, path = "/v1/functions/{name}/triggers", tag = "events",
    params(("name" = String, Path)),
    responses((status = 200, body = Triggers), (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(s): S,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Triggers>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    let triggers = s.node.store().triggers(Some(&tenant), Some(&name)).await?;
    Ok(Json(Triggers { tenant, triggers }))
}

/// The binding `id` of `name`, or a 404 naming where the ids are.
async fn one(s: &AppState, tenant: &str, name: &str, id: &str) -> Result<TriggerRow, ApiError> {
    s.node
        .store()
        .triggers(Some(tenant), Some(name))
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "function {name} has no trigger {id:?} (`hearth triggers {name}` lists them)"
            ))
        })
}

/// Pause a binding: its messages wait in the broker until it is resumed
#[utoipa::path(post, path = "/v1/functions/{name}/triggers/{id}/pause", tag = "events",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = TriggerRow), (status = 404, body = ErrorBody)))]
pub(crate) async fn pause(
    State(s): S,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<TriggerRow>, ApiError> {
    set_paused(&s, &headers, &name, &id, true).await
}

/// Resume a paused binding, from the messages that waited
#[utoipa::path(post, path = "/v1/functions/{name}/triggers/{id}/resume", tag = "events",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = TriggerRow), (status = 404, body = ErrorBody)))]
pub(crate) async fn resume(
    State(s): S,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<TriggerRow>, ApiError> {
    set_paused(&s, &headers, &name, &id, false).await
}

async fn set_paused(
    s: &AppState,
    headers: &HeaderMap,
    name: &str,
    id: &str,
    paused: bool,
) -> Result<Json<TriggerRow>, ApiError> {
    let tenant = crate::auth::function_owner(s, headers, name, Scope::Deploy).await?;
    one(s, &tenant, name, id).await?;
    s.node
        .store()
        .pause_trigger((&tenant, name, id), paused)
        .await?;
    Ok(Json(one(s, &tenant, name, id).await?))
}

/// Remove a binding (its consumer on the broker is deleted too)
#[utoipa::path(delete, path = "/v1/functions/{name}/triggers/{id}", tag = "events",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = TriggerRow), (status = 404, body = ErrorBody)))]
pub(crate) async fn remove(
    State(s): S,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<TriggerRow>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    let row = one(&s, &tenant, &name, &id).await?;
    s.node.store().remove_trigger((&tenant, &name, &id)).await?;
    forget(&s, std::slice::from_ref(&row));
    Ok(Json(row))
}

/// Deletes removed bindings' consumers on their brokers (their places in
/// the streams), off the request's path; a broker that cannot be reached
/// keeps a consumer that nothing reads, said in the daemon's log.
pub(crate) fn forget(s: &Arc<AppState>, removed: &[TriggerRow]) {
    for row in removed {
        let Ok(binding) = Binding::of_row(row) else {
            continue;
        };
        let dispatch = crate::events::ApiDispatch(Arc::downgrade(s));
        let (tenant, function) = (row.tenant.clone(), row.function.clone());
        tokio::spawn(async move { binding.forget(&tenant, &function, &dispatch).await });
    }
}
