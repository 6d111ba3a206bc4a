//! Hearth's HTTP surface.
//!
//! | path | what |
//! |---|---|
//! | `ANY /fn/{tenant}/{name}[@version][/{*path}]` | invoke a function |
//! | `/v1/...` | management API (JSON), described at `/v1/openapi.json` |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz` | liveness |
//!
//! Auth: `Authorization: Bearer <token>`. Management calls always need a
//! token and act on the token's own tenant; invocation needs one unless the
//! function was deployed public. Missing or unknown token: 401; a valid token
//! of another tenant: 403.
//!
//! What this crate is not: the invoker. It parses, authenticates, bounds
//! sizes and maps results to status codes; [`hearth_node::Node`] does the rest.

mod auth;
mod error;
mod invoke;
mod manage;
mod openapi;
mod query;
mod recordings;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, get, post};
use hearth_node::Node;

pub use error::ApiError;

/// Limits of the HTTP surface.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Largest invocation request body; larger ones get 413.
    pub max_body_bytes: usize,
    /// Largest module or bundle a deploy may upload.
    pub max_code_bytes: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_body_bytes: 6 << 20,
            max_code_bytes: 64 << 20,
        }
    }
}

pub(crate) struct AppState {
    pub node: Arc<Node>,
    pub config: ApiConfig,
    pub auth: auth::TokenCache,
}

/// The whole HTTP application.
pub fn router(node: Arc<Node>, config: ApiConfig) -> Router {
    let state = Arc::new(AppState {
        node,
        config,
        auth: auth::TokenCache::default(),
    });
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(manage::metrics))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/v1/whoami", get(manage::whoami))
        .route("/v1/status", get(manage::status))
        .route("/v1/tenants", post(manage::create_tenant))
        .route("/v1/functions", get(manage::list_functions))
        .route(
            "/v1/functions/{name}",
            post(manage::deploy)
                .get(manage::get_function)
                .delete(manage::remove_function),
        )
        .route("/v1/functions/{name}/logs", get(manage::logs))
        .route("/v1/functions/{name}/recordings", get(recordings::list))
        .route(
            "/v1/functions/{name}/replay",
            post(recordings::replay_traffic),
        )
        .route("/v1/recordings/{id}", get(recordings::show))
        .route("/v1/recordings/{id}/export", get(recordings::export))
        .route("/v1/recordings/{id}/replay", post(recordings::replay))
        .route("/v1/replay", post(recordings::replay_file))
        .route("/fn/{tenant}/{name}", any(invoke::invoke_root))
        // A trailing slash is the root sub-path, not an unknown route
        // (`{*path}` does not match an empty rest).
        .route("/fn/{tenant}/{name}/", any(invoke::invoke_root))
        .route("/fn/{tenant}/{name}/{*path}", any(invoke::invoke_path))
        .fallback(|| async { ApiError::NotFound("no such route; see /v1/openapi.json".into()) })
        .with_state(state)
}
