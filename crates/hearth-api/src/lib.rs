//! Hearth's HTTP surface.
//!
//! | path | what |
//! |---|---|
//! | `ANY /fn/{tenant}/{name}[@version][/{*path}]` | invoke a function |
//! | `/v1/...` | management API (JSON), described at `/v1/openapi.json` |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz` | liveness |
//! | `GET /console/` | the web console (docs/console.md) |
//! | `/v1/cluster/nodes`, `/v1/artifacts/{sha256}` | a gateway's nodes join, report and fetch code |
//!
//! Auth: `Authorization: Bearer <token>`. Management calls always need a
//! token and act on the token's own tenant; invocation needs one unless the
//! function was deployed public. Missing or unknown token: 401; a valid token
//! of another tenant: 403.
//!
//! What this crate is not: the invoker. It parses, authenticates, bounds
//! sizes and maps results to status codes; [`hearth_node::Node`] does the rest.

mod aliases;
mod auth;
mod body;
mod clients;
mod cluster;
mod console;
mod deploy_settings;
mod dlq;
mod error;
mod events;
mod gate;
mod invoke;
mod kv;
mod manage;
mod openapi;
mod origin;
mod query;
mod recordings;
mod report;
mod schedules;
mod secrets;
mod session;
mod tokens;
mod triggers;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, get};
use hearth_cluster::Gateway;
use hearth_node::Node;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use clients::{ClientLimits, ClientShare, Clients, Connection};
pub use error::ApiError;
pub use origin::App;

/// The answers the API gives, as the types it writes them from: a client
/// (the CLI) reads them with the same types, so the two cannot drift
/// apart. Fields a gateway adds as it merges nodes' answers (`node`) are
/// not in them and are skipped when read. Each tier's part of the status
/// (`tiers.*.details`) and a tape's timeline are open documents (each
/// engine adds its own figures, each host call its own shape) and stay
/// JSON.
pub mod answers {
    pub use crate::aliases::{AliasHistory, Aliases, GateRefused, Promoted, Promotion};
    pub use crate::dlq::{DeadLetters, DeadLettersTaken};
    pub use crate::error::{ErrorBody, ErrorDetail};
    pub use crate::gate::{Gate, GateResult};
    pub use crate::kv::Keys;
    pub use crate::manage::{
        Compiled, Deployed, FunctionList, FunctionListed, FunctionVersions, Logs, Stats, Status,
        TenantCreated, TenantStatus, TenantView, VersionView,
    };
    pub use crate::recordings::{
        Recordings, Replayed, TenantRecordings, TrafficReplay, Unreachable,
    };
    pub use crate::schedules::Schedules;
    pub use crate::secrets::{SecretList, SecretListed, SecretSet};
    pub use crate::tokens::{TokenList, TokenMade};
    pub use crate::triggers::Triggers;
    pub use hearth_node::status::{
        CpuShare, DiskStatus, LongRuns, MemoryStatus, NodeStatus, RecordingStatus,
    };
    pub use hearth_store::{Alias, AliasMove, Principal};
}

/// Limits of the HTTP surface.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Largest invocation request body; larger ones get 413.
    pub max_body_bytes: usize,
    /// Largest module or bundle a deploy may upload.
    pub max_code_bytes: usize,
    /// Time a request body has to arrive whole; past it, 408.
    pub body_timeout: std::time::Duration,
    /// The directory of a `hearth-bench trace` report whose charts the
    /// console shows (`--trace-report`).
    pub trace_report: Option<std::path::PathBuf>,
    /// The domain under which each tenant's functions have an origin of
    /// their own, `{tenant}.{functions_domain}` (`--functions-domain`).
    pub functions_domain: String,
    /// Bytes of invocation request bodies the node holds at once, over
    /// every connection; past it, 503 (`--max-buffered-mib`).
    pub max_buffered_bytes: usize,
    /// How large a tape file `/v1/replay` reads, and how many host calls it
    /// may hold: this node's largest tape, exported.
    pub replay_file: hearth_record::ImportLimits,
    /// How schedules fire and queued invocations run (`None`: not here).
    pub events: Option<hearth_events::EventsConfig>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_body_bytes: 6 << 20,
            max_code_bytes: 64 << 20,
            body_timeout: std::time::Duration::from_secs(60),
            trace_report: None,
            functions_domain: "localhost".into(),
            max_buffered_bytes: 1 << 30,
            replay_file: hearth_record::ImportLimits::for_node(6 << 20, 16 << 20, 4 << 20),
            events: None,
        }
    }
}

/// What this Hearth is in a cluster.
#[derive(Clone, Default)]
pub enum ClusterRole {
    /// Serves everything itself (`--role all`).
    #[default]
    Standalone,
    /// Forwards invocations to its nodes.
    Gateway(Arc<Gateway>),
    /// Runs invocations gateways forward; deploys go through them (at
    /// `gateway`, if the operator named its address). `key` checks the
    /// gateways' `Hearth-Attempt` headers.
    Member {
        gateway: Option<String>,
        key: hearth_cluster::AttemptKey,
        membership: Arc<hearth_cluster::Membership>,
    },
}

pub(crate) struct AppState {
    pub node: Arc<Node>,
    pub config: ApiConfig,
    pub auth: auth::TokenCache,
    pub gateway: Option<Arc<Gateway>>,
    /// On a cluster member: deploys must go through a gateway (this one,
    /// if its address is known).
    pub deploys_via: Option<Option<String>>,
    /// On a cluster member: what checks the gateway's signed attempts.
    pub attempt_key: Option<hearth_cluster::AttemptKey>,
    /// On a cluster member: its membership, which `/readyz` consults.
    pub membership: Option<Arc<hearth_cluster::Membership>>,
    /// Invocation request bodies held now, a permit per KiB.
    pub buffered: Arc<tokio::sync::Semaphore>,
    /// Schedules fired and queued invocations run here (alone, or on a
    /// gateway), once started.
    pub events: std::sync::OnceLock<hearth_events::Events>,
}

/// The whole HTTP application of a single Hearth.
pub fn router(node: Arc<Node>, config: ApiConfig) -> App {
    router_for(node, config, ClusterRole::Standalone)
}

/// The HTTP application of a Hearth in `role`.
pub fn router_for(node: Arc<Node>, config: ApiConfig, role: ClusterRole) -> App {
    routers_for(node, config, role).0
}

/// The HTTP application of a Hearth in `role`, and the same Hearth's
/// probes alone (`/healthz`, `/readyz`), for a listener of their own: a
/// node whose port takes only the cluster's certificates still answers
/// the kubelet's probes there.
pub fn routers_for(node: Arc<Node>, config: ApiConfig, role: ClusterRole) -> (App, Router) {
    let (gateway, deploys_via, attempt_key, membership) = match role {
        ClusterRole::Standalone => (None, None, None, None),
        ClusterRole::Gateway(g) => (Some(g), None, None, None),
        ClusterRole::Member {
            gateway,
            key,
            membership,
        } => (None, Some(gateway), Some(key), Some(membership)),
    };
    let kib = (config.max_buffered_bytes / 1024).min(tokio::sync::Semaphore::MAX_PERMITS);
    let buffered = Arc::new(tokio::sync::Semaphore::new(kib));
    let held = Arc::downgrade(&buffered);
    node.metrics().read_at_scrape(
        "buffered_body_bytes",
        "Bytes of request bodies held over every connection, against --max-buffered-mib",
        move || {
            held.upgrade()
                .map_or(0, |b| (kib - b.available_permits()) as i64 * 1024)
        },
    );
    let state = Arc::new(AppState {
        buffered,
        node,
        config,
        auth: auth::TokenCache::default(),
        gateway,
        deploys_via,
        attempt_key,
        membership,
        events: std::sync::OnceLock::new(),
    });
    // A cluster's members run what their gateways place on them.
    if let Some(events) = state.config.events.clone()
        && state.deploys_via.is_none()
    {
        let dispatch = Arc::new(events::ApiDispatch(Arc::downgrade(&state)));
        let store = state.node.store().clone();
        let events = hearth_events::Events::start(store, dispatch, events);
        events::count_in_metrics(&events, state.node.metrics());
        events::count_triggers_in_metrics(&events, state.node.metrics());
        let _ = state.events.set(events);
    }
    let panics = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = panics.clone();
    state.node.metrics().read_at_scrape(
        "request_panics",
        "Requests whose handler panicked (a bug; each answered 500 and logged)",
        move || seen.load(std::sync::atomic::Ordering::Relaxed) as i64,
    );
    let boundary = panic_boundary(panics);
    let probes = Router::new()
        .route("/healthz", get(manage::healthz))
        .route("/readyz", get(manage::readyz))
        .with_state(state.clone())
        .layer(boundary.clone());
    let (documented, _) = api().split_for_parts();
    let app = documented
        // Registered by hand: a wildcard (`{*key}`: keys may hold `/`) and
        // invocation by any method, each described in `openapi::ApiDoc`.
        .route(
            "/v1/functions/{name}/kv/{*key}",
            get(kv::get).put(kv::put).delete(kv::delete),
        )
        .route("/console", get(console::root))
        .route("/console/", get(console::index))
        .route("/console/{*path}", get(console::asset))
        .route("/fn/{tenant}/{name}", any(invoke::invoke_root))
        // A trailing slash is the root sub-path, not an unknown route
        // (`{*path}` does not match an empty rest).
        .route("/fn/{tenant}/{name}/", any(invoke::invoke_root))
        .route("/fn/{tenant}/{name}/{*path}", any(invoke::invoke_path))
        .fallback(|| async { ApiError::NotFound("no such route; see /v1/openapi.json".into()) })
        .with_state(state.clone())
        .layer(boundary.clone());
    // Around the router, not inside it: the edge rewrites a tenant
    // origin's paths before they are routed.
    let app = App {
        domain: state.config.functions_domain.to_ascii_lowercase().into(),
        router: app,
        connection: None,
    };
    (app, probes)
}

/// Around every route: a handler that panics answers
/// [500](error::panicked) and is counted in `panics`; the connection and
/// the daemon go on.
fn panic_boundary(
    panics: Arc<std::sync::atomic::AtomicU64>,
) -> tower_http::catch_panic::CatchPanicLayer<
    impl Fn(Box<dyn std::any::Any + Send>) -> axum::response::Response + Clone + Send + Sync,
> {
    tower_http::catch_panic::CatchPanicLayer::custom(move |panic| {
        panics.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        error::panicked(panic)
    })
}

/// The routes whose `#[utoipa::path]` describes them, and the document
/// they make (served at `/v1/openapi.json`).
fn api() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(manage::healthz))
        .routes(routes!(manage::readyz))
        .routes(routes!(manage::metrics))
        .routes(routes!(openapi::document))
        .routes(routes!(manage::whoami))
        .routes(routes!(session::create, session::show, session::end))
        .routes(routes!(manage::status))
        .routes(routes!(manage::create_tenant))
        .routes(routes!(tokens::create, tokens::list))
        .routes(routes!(tokens::revoke))
        .routes(routes!(tokens::rotate))
        .routes(routes!(secrets::list))
        .routes(routes!(secrets::set, secrets::remove))
        .routes(routes!(manage::get_tenant, manage::put_tenant))
        .routes(routes!(manage::list_functions))
        .routes(routes!(
            manage::deploy,
            manage::get_function,
            manage::remove_function
        ))
        .routes(routes!(aliases::list))
        .routes(routes!(aliases::promote, aliases::remove))
        .routes(routes!(aliases::rollback))
        .routes(routes!(aliases::history))
        .routes(routes!(aliases::code))
        .routes(routes!(schedules::list_all))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::remove))
        .routes(routes!(triggers::list_all))
        .routes(routes!(triggers::list))
        .routes(routes!(triggers::pause))
        .routes(routes!(triggers::resume))
        .routes(routes!(triggers::remove))
        .routes(routes!(dlq::list, dlq::purge))
        .routes(routes!(dlq::replay))
        .routes(routes!(manage::logs))
        .routes(routes!(kv::list))
        .routes(routes!(recordings::list))
        .routes(routes!(recordings::list_all))
        .routes(routes!(manage::stats))
        .routes(routes!(recordings::replay_traffic))
        .routes(routes!(recordings::show))
        .routes(routes!(recordings::export))
        .routes(routes!(recordings::payload))
        .routes(routes!(recordings::replay))
        .routes(routes!(recordings::replay_file))
        .routes(routes!(cluster::members))
        .routes(routes!(report::chart))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    #[tokio::test]
    async fn a_handler_that_panics_answers_500_with_an_id_and_the_router_goes_on() {
        async fn boom() -> &'static str {
            panic!("failed reading /srv/hearth/secret")
        }
        let panics = Arc::new(AtomicU64::new(0));
        let app = Router::new()
            .route("/boom", get(boom))
            .route("/fine", get(|| async { "fine" }))
            .layer(panic_boundary(panics.clone()));
        let call = |path: &'static str| {
            app.clone()
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
        };
        let resp = call("/boom").await.unwrap();
        assert_eq!(resp.status(), 500);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["kind"], "internal", "{body}");
        assert!(
            body["invocation_id"]
                .as_str()
                .is_some_and(|id| id.len() == 32),
            "{body}"
        );
        assert!(
            !body.to_string().contains("/srv/hearth"),
            "the panic's message stays in the log: {body}"
        );
        assert_eq!(panics.load(Ordering::Relaxed), 1);
        let resp = call("/fine").await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(panics.load(Ordering::Relaxed), 1);
    }
}
