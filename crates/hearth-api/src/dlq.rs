//! A function's dead letters (docs/events.md): queued invocations whose
//! every attempt failed, or that waited past their age.
//!
//! - `GET /v1/functions/{name}/dlq`: the newest first, with why each died,
//!   and the function's queue as last counted.
//! - `POST /v1/functions/{name}/dlq/replay[?id=ID]`: queue them (or one)
//!   again, from a first attempt.
//! - `DELETE /v1/functions/{name}/dlq[?id=ID]`: purge them (or one).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use hearth_store::{DeadLetter, QueueDepth, Scope};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ErrorBody;
use crate::query::Query;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// A function's dead letters.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct DeadLetters {
    pub tenant: String,
    pub function: String,
    /// Newest first.
    pub dead: Vec<DeadLetter>,
    /// The function's queue as last counted (every 2 s, as `/metrics`
    /// shows it): waiting or running, of those retrying, dead, and since
    /// when the oldest waits. Zeros when it holds nothing.
    pub queue: QueueDepth,
}

/// Which dead letters a replay or purge takes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct Which {
    /// One dead letter (its invocation id); all of them without.
    id: Option<String>,
    /// At most this many listed (default 100, at most 1000).
    limit: Option<u32>,
}

/// How many dead letters a replay or purge took.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct DeadLettersTaken {
    pub count: u64,
}

/// A function's dead letters
#[utoipa::path(get, path = "/v1/functions/{name}/dlq", tag = "events",
    params(("name" = String, Path), Which),
    responses((status = 200, body = DeadLetters), (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(s): S,
    Path(name): Path<String>,
    Query(q): Query<Which>,
    headers: HeaderMap,
) -> Result<Json<DeadLetters>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Read).await?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let dead = s.node.store().dead_letters(&tenant, &name, limit).await?;
    let queue = s
        .events
        .get()
        .and_then(|e| {
            e.depth_reader()()
                .into_iter()
                .find(|d| d.tenant == tenant && d.function == name)
        })
        .unwrap_or_else(|| QueueDepth {
            tenant: tenant.clone(),
            function: name.clone(),
            ..Default::default()
        });
    Ok(Json(DeadLetters {
        tenant,
        function: name,
        dead,
        queue,
    }))
}

/// Queue a function's dead letters again, each from a first attempt
#[utoipa::path(post, path = "/v1/functions/{name}/dlq/replay", tag = "events",
    params(("name" = String, Path), Which),
    responses((status = 200, body = DeadLettersTaken), (status = 404, body = ErrorBody)))]
pub(crate) async fn replay(
    State(s): S,
    Path(name): Path<String>,
    Query(q): Query<Which>,
    headers: HeaderMap,
) -> Result<Json<DeadLettersTaken>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    let now = hearth_core::unix_time_ms();
    let age = s.config.events.as_ref().map_or(0, |e| {
        i64::try_from(e.max_age.as_millis()).unwrap_or(i64::MAX)
    });
    let count = s
        .node
        .store()
        .requeue_dead(
            (&tenant, &name, q.id.as_deref()),
            now,
            now.saturating_add(age),
        )
        .await?;
    if let Some(events) = s.events.get() {
        events.wake();
    }
    Ok(Json(DeadLettersTaken { count }))
}

/// Purge a function's dead letters
#[utoipa::path(delete, path = "/v1/functions/{name}/dlq", tag = "events",
    params(("name" = String, Path), Which),
    responses((status = 200, body = DeadLettersTaken), (status = 404, body = ErrorBody)))]
pub(crate) async fn purge(
    State(s): S,
    Path(name): Path<String>,
    Query(q): Query<Which>,
    headers: HeaderMap,
) -> Result<Json<DeadLettersTaken>, ApiError> {
    let tenant = crate::auth::function_owner(&s, &headers, &name, Scope::Deploy).await?;
    let count = s
        .node
        .store()
        .purge_dead((&tenant, &name, q.id.as_deref()))
        .await?;
    Ok(Json(DeadLettersTaken { count }))
}
