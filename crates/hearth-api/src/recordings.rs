//! Recordings and replay under `/v1`: a tenant lists, reads, exports and
//! replays its own tapes, and nobody else's (another tenant's id is a 404,
//! like an id that never existed).

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use hearth_node::ReplayReport;
use hearth_record::{Archive, RecordError, Recording, view};
use hearth_store::{Principal, Scope, TapeEntry, TapeQuery};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::body::read_body;
use crate::error::ErrorBody;
use crate::query::Query;
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

impl From<RecordError> for ApiError {
    fn from(e: RecordError) -> Self {
        let msg = e.to_string();
        match e {
            RecordError::NotFound(_) | RecordError::Expired | RecordError::Damaged(_) => {
                ApiError::NotFound(msg)
            }
            RecordError::BadTape(_) => ApiError::BadRequest(msg),
            RecordError::Overloaded | RecordError::Closed => ApiError::Unavailable(msg),
            _ => ApiError::Internal(msg),
        }
    }
}

fn archive(s: &AppState) -> Result<Arc<Archive>, ApiError> {
    s.node
        .recorder()
        .map(|r| r.archive().clone())
        .ok_or_else(|| {
            ApiError::Unavailable("recording is off on this node (HEARTH_RECORD=false)".into())
        })
}

async fn with_archive<T: Send + 'static>(
    s: &AppState,
    f: impl FnOnce(&Archive) -> Result<T, RecordError> + Send + 'static,
) -> Result<T, ApiError> {
    let a = archive(s)?;
    Ok(tokio::task::spawn_blocking(move || f(&a))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??)
}

/// Which of a function's tapes to list.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct TapeFilter {
    /// `error`, `any`, or an HTTP status.
    #[param(example = "error")]
    status: Option<String>,
    /// Only tapes this recent: `90s`, `15m`, `1h`, `2d`.
    #[param(example = "1h")]
    since: Option<String>,
    /// Only tapes of this version.
    version: Option<u32>,
    /// Only invocations that took at least this many milliseconds.
    slower_than_ms: Option<u64>,
    /// Only invocations in this trace (32 hex digits): its caller's, from
    /// the request's `traceparent`, or the one the invocation began.
    #[param(example = "4bf92f3577b34da6a3ce929d0e0e4736")]
    trace_id: Option<String>,
    /// Only invocations older than this one: the previous page's
    /// `next_before`.
    before: Option<String>,
    /// At most this many, newest first.
    #[param(default = 100)]
    limit: Option<u32>,
}

/// Which of a tenant's tapes to list: [`TapeFilter`]'s, and a function.
/// Its fields repeat rather than `#[serde(flatten)]` a `TapeFilter`: a
/// flattened query string reaches the inner struct as text only, so its
/// numbers would no longer parse (serde-rs/serde#1183, axum#1753); and
/// `deny_unknown_fields` does not work with `flatten`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct AllTapesFilter {
    /// Only this function's tapes.
    function: Option<String>,
    /// `error`, `any`, or an HTTP status.
    #[param(example = "error")]
    status: Option<String>,
    /// Only tapes this recent: `90s`, `15m`, `1h`, `2d`.
    #[param(example = "1h")]
    since: Option<String>,
    /// Only tapes of this version.
    version: Option<u32>,
    /// Only invocations that took at least this many milliseconds.
    slower_than_ms: Option<u64>,
    /// Only invocations in this trace (32 hex digits): its caller's, from
    /// the request's `traceparent`, or the one the invocation began.
    #[param(example = "4bf92f3577b34da6a3ce929d0e0e4736")]
    trace_id: Option<String>,
    /// Only invocations older than this one: the previous page's
    /// `next_before`.
    before: Option<String>,
    /// At most this many, newest first.
    #[param(default = 100, maximum = 1000)]
    limit: Option<u32>,
}

/// Tapes a listing of all the tenant's functions returns at most.
const MAX_LISTED: u32 = 1000;

impl TapeFilter {
    fn query(&self, function: Option<String>) -> Result<TapeQuery, ApiError> {
        let mut q = TapeQuery {
            function,
            version: self.version,
            min_duration_us: self.slower_than_ms.map(|ms| ms.saturating_mul(1000)),
            trace_id: self
                .trace_id
                .as_deref()
                .map(|t| hex_id("trace_id", t, "a trace id"))
                .transpose()?,
            before: self
                .before
                .as_deref()
                .map(|b| hex_id("before", b, "an invocation id"))
                .transpose()?,
            limit: self.limit.unwrap_or(100),
            ..TapeQuery::default()
        };
        match self.status.as_deref() {
            None | Some("any") => {}
            Some("error") => q.errors_only = true,
            Some(code) => {
                q.status = Some(code.parse().map_err(|_| {
                    ApiError::BadRequest(format!(
                        "status {code:?}: use error, any or an HTTP status"
                    ))
                })?)
            }
        }
        if let Some(since) = &self.since {
            let secs = hearth_core::parse_duration_s(since).ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "since {since:?}: use a duration like 90s, 15m, 1h, 2d"
                ))
            })?;
            q.since_ms = Some(hearth_core::unix_time_ms() - (secs as i64) * 1000);
        }
        Ok(q)
    }
}

/// `value` of query parameter `name` in lower case, if it is 32 hex digits
/// and not all zeros (what `what` is: a trace or an invocation id).
fn hex_id(name: &str, value: &str, what: &str) -> Result<String, ApiError> {
    if value.len() == 32
        && value.bytes().all(|b| b.is_ascii_hexdigit())
        && value.bytes().any(|b| b != b'0')
    {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(ApiError::BadRequest(format!(
            "{name} {value:?} is not {what}: give its 32 hex digits"
        )))
    }
}

/// The page after `listed`, if it was full: older than its oldest.
fn next_before(listed: &[TapeEntry], limit: u32) -> Option<String> {
    (listed.len() >= limit.max(1) as usize).then(|| listed.last().map(|e| e.id.clone()))?
}

/// A function's tapes.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Recordings {
    pub tenant: String,
    pub name: String,
    /// Newest first. Through a gateway each also names its `node`.
    pub recordings: Vec<TapeEntry>,
    /// The page was full: the next is the one `before` this id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_before: Option<String>,
    /// Through a gateway: the nodes that did not answer, so the list may
    /// lack their tapes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<Vec<Unreachable>>,
}

/// A node a gateway's question did not reach.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Unreachable {
    pub node: String,
    pub error: String,
}

/// A function's tapes, newest first (docs/recording.md)
///
/// Through a gateway: every node's, merged.
#[utoipa::path(get, path = "/v1/functions/{name}/recordings", tag = "recordings",
    params(("name" = String, Path), TapeFilter),
    responses((status = 200, body = Recordings), (status = 400, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub(crate) async fn list(
    State(s): S,
    Path(name): Path<String>,
    Query(filter): Query<TapeFilter>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_for(s.node.store(), &headers, Scope::Read, &name)
        .await?;
    let q = filter.query(Some(name.clone()))?;
    let limit = q.limit;
    let recordings = match listed(&s, &p.tenant, Some(&name), q, query, &headers).await? {
        Listed::Merged(merged) => return Ok(Json(merged).into_response()),
        Listed::Here(recordings) => recordings,
    };
    Ok(Json(Recordings {
        tenant: p.tenant.clone(),
        name,
        next_before: next_before(&recordings, limit),
        recordings,
        unreachable: None,
    })
    .into_response())
}

/// What a tape listing found.
enum Listed {
    /// Through a gateway: every node's tapes, merged, as the answer.
    Merged(Value),
    /// This node's tapes.
    Here(Vec<TapeEntry>),
}

/// The tapes `q` asks for, of `function` or (`None`) of all the tenant's
/// functions: through a gateway every node's, else this node's.
async fn listed(
    s: &AppState,
    tenant: &str,
    function: Option<&str>,
    q: TapeQuery,
    query: Option<String>,
    headers: &HeaderMap,
) -> Result<Listed, ApiError> {
    if let Some(g) = &s.gateway {
        let limit = q.limit as usize;
        return hearth_cluster::fanout::recordings(
            g,
            tenant,
            function,
            query.as_deref(),
            limit,
            headers,
        )
        .await
        .map(Listed::Merged)
        .map_err(crate::cluster::fanout_error);
    }
    let tenant = tenant.to_string();
    let here = with_archive(s, move |a| a.list(&tenant, &q)).await?;
    Ok(Listed::Here(here))
}

/// The tenant's tapes.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct TenantRecordings {
    pub tenant: String,
    /// Newest first. Through a gateway each also names its `node`.
    pub recordings: Vec<TapeEntry>,
    /// The page was full: the next is the one `before` this id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_before: Option<String>,
    /// Through a gateway: the nodes that did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<Vec<Unreachable>>,
}

/// The tenant's tapes of all its functions, newest first
///
/// The console's live list. Through a gateway: every node's, merged.
#[utoipa::path(get, path = "/v1/recordings", tag = "recordings",
    params(AllTapesFilter),
    responses((status = 200, body = TenantRecordings), (status = 400, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub(crate) async fn list_all(
    State(s): S,
    Query(f): Query<AllTapesFilter>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Read)
        .await?;
    // A token limited to one function lists that function's tapes alone.
    if let Some(asked) = &f.function {
        crate::auth::check_function(&p, asked)?;
    }
    let function = p.grant.function.clone().or(f.function);
    let filter = TapeFilter {
        status: f.status,
        since: f.since,
        version: f.version,
        slower_than_ms: f.slower_than_ms,
        trace_id: f.trace_id,
        before: f.before,
        limit: Some(f.limit.unwrap_or(100).min(MAX_LISTED)),
    };
    let q = filter.query(function)?;
    let limit = q.limit;
    let recordings = match listed(&s, &p.tenant, None, q, query, &headers).await? {
        Listed::Merged(merged) => return Ok(Json(merged).into_response()),
        Listed::Here(recordings) => recordings,
    };
    Ok(Json(TenantRecordings {
        tenant: p.tenant.clone(),
        next_before: next_before(&recordings, limit),
        recordings,
        unreachable: None,
    })
    .into_response())
}

/// The caller's tape `id`: one of another function than a token limited
/// to one may touch is as missing as another tenant's.
async fn read(s: &AppState, p: &Principal, id: &str) -> Result<Recording, ApiError> {
    let (t, i) = (p.tenant.clone(), id.to_string());
    let rec = with_archive(s, move |a| a.read(&t, &i)).await?;
    if crate::auth::check_function(p, &rec.function).is_err() {
        return Err(ApiError::NotFound(format!(
            "no recording {id} of a function this token may read"
        )));
    }
    Ok(rec)
}

/// A page of a timeline's host calls.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Page {
    /// The first call shown (0-based).
    #[param(default = 0)]
    offset: Option<u32>,
    /// At most this many calls.
    #[param(default = 200, maximum = 1000)]
    limit: Option<u32>,
}

/// One tape's timeline
///
/// The request, a page of host calls with their answers
/// (`calls: [{n, call, answer, payload_bytes, at_us, took_us}]`,
/// `calls_total`, `next_offset`), and the outcome; bodies shown up to
/// 64 KiB (whole ones from `/payload`). `at_us` and `took_us` (from the
/// invocation's start) are on the KV and HTTP calls that reached the
/// world.
#[utoipa::path(get, path = "/v1/recordings/{id}", tag = "recordings",
    params(("id" = String, Path), Page),
    responses((status = 200, body = Object, description = "The timeline"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn show(
    State(s): S,
    Path(id): Path<String>,
    Query(page): Query<Page>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Read)
        .await?;
    if let Some(g) = &s.gateway {
        let path =
            hearth_cluster::fanout::with_query(format!("/v1/recordings/{id}"), query.as_deref());
        return crate::cluster::recording_on_its_node(g, http::Method::GET, &id, &path, &headers)
            .await;
    }
    let offset = page.offset.unwrap_or(0);
    let limit = page.limit.unwrap_or(view::CALLS_PER_PAGE as u32);
    let rec = read(&s, &p, &id).await?;
    Ok(Json(view::timeline(&rec, offset as usize, limit as usize)).into_response())
}

/// Which payload of a tape.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Which {
    /// `request`, `response`, or a host call's number (as in the timeline).
    #[param(required = true, example = "response")]
    of: Option<String>,
}

/// One payload's bytes, whole (timelines cut them)
#[utoipa::path(get, path = "/v1/recordings/{id}/payload", tag = "recordings",
    params(("id" = String, Path), Which),
    responses(
        (status = 200, description = "The payload's bytes", content_type = "application/octet-stream"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn payload(
    State(s): S,
    Path(id): Path<String>,
    Query(which): Query<Which>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Read)
        .await?;
    if let Some(g) = &s.gateway {
        let path = hearth_cluster::fanout::with_query(
            format!("/v1/recordings/{id}/payload"),
            query.as_deref(),
        );
        return crate::cluster::recording_on_its_node(g, http::Method::GET, &id, &path, &headers)
            .await;
    }
    let of: view::PayloadOf = which
        .of
        .ok_or_else(|| ApiError::BadRequest("say which payload: of=request, response or N".into()))?
        .parse()
        .map_err(ApiError::BadRequest)?;
    let rec = read(&s, &p, &id).await?;
    let bytes = view::payload(&rec, of)
        .ok_or_else(|| ApiError::NotFound(format!("recording {id} has no payload {of:?}")))?
        .to_vec();
    Ok((
        [(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/octet-stream"),
        )],
        bytes,
    )
        .into_response())
}

/// One tape as a self-checking file (JSON with a sha256)
#[utoipa::path(get, path = "/v1/recordings/{id}/export", tag = "recordings",
    params(("id" = String, Path)),
    responses((status = 200, description = "The tape file", content_type = "application/json"),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn export(
    State(s): S,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Read)
        .await?;
    let attachment = header::HeaderValue::try_from(format!("attachment; filename=\"{id}.tape\""))
        .map_err(|_| ApiError::BadRequest(format!("{id:?} is not a recording id")))?;
    if let Some(g) = &s.gateway {
        // The node holding it exports it, byte for byte.
        let path = format!("/v1/recordings/{id}/export");
        let mut resp =
            crate::cluster::recording_on_its_node(g, http::Method::GET, &id, &path, &headers)
                .await?;
        if resp.status().is_success() {
            resp.headers_mut()
                .insert(header::CONTENT_DISPOSITION, attachment);
        }
        return Ok(resp);
    }
    let file = read(&s, &p, &id).await?.export();
    Ok((
        [
            (
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            ),
            (header::CONTENT_DISPOSITION, attachment),
        ],
        file,
    )
        .into_response())
}

/// What a replay found.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Replayed {
    /// The tape's invocation id.
    pub id: String,
    pub function: String,
    pub recorded_version: u32,
    pub replayed_version: u32,
    /// The code differs from the code the tape was made with.
    pub code_changed: bool,
    /// The tier that ran the replay: `wasm`, `js` or `process`.
    pub tier: String,
    /// Same host calls in the same order, and the same response.
    pub identical: bool,
    /// Where the replay first did something the tape did not.
    pub divergence: Option<hearth_host::Divergence>,
    /// `identical`, the divergence in words, or `the response differs`.
    pub verdict: String,
    /// The recorded outcome: `{kind: ok, status, headers, body}` or the
    /// failure.
    #[schema(value_type = Object)]
    pub recorded: Value,
    /// The replay's outcome, as `recorded`.
    #[schema(value_type = Object)]
    pub replayed: Value,
    /// `-` recorded, `+` replayed; absent when the outcomes are equal.
    pub diff: Option<String>,
    /// What the replay logged (not added to the function's logs).
    pub logs: Vec<String>,
    pub duration_us: u64,
}

impl From<ReplayReport> for Replayed {
    fn from(r: ReplayReport) -> Replayed {
        let verdict = match (&r.divergence, r.identical) {
            (_, true) => "identical".to_string(),
            (Some(d), _) => d.to_string(),
            (None, false) => "the response differs".to_string(),
        };
        Replayed {
            recorded: view::outcome(&r.recorded),
            replayed: view::outcome(&r.replayed),
            id: r.id,
            function: r.function,
            recorded_version: r.recorded_version,
            replayed_version: r.replayed_version,
            code_changed: r.code_changed,
            tier: r.tier.as_str().to_string(),
            identical: r.identical,
            divergence: r.divergence,
            verdict,
            diff: r.diff,
            logs: r.logs,
            duration_us: r.duration.as_micros() as u64,
        }
    }
}

/// The version a tape is replayed against.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Against {
    /// Default: the version that made the tape.
    version: Option<u32>,
}

/// Replays `rec` against `version` (default: the version that made it) of
/// the caller's function with the tape's name.
async fn replay_one(
    s: &AppState,
    tenant: &str,
    rec: &Recording,
    version: Option<u32>,
) -> Result<ReplayReport, ApiError> {
    let target = s
        .node
        .resolve(tenant, &rec.function, Some(version.unwrap_or(rec.version)))
        .await?;
    Ok(s.node.replay(rec, &target).await?)
}

/// Replay one tape: identical, or where it diverged and how the response differs
#[utoipa::path(post, path = "/v1/recordings/{id}/replay", tag = "recordings",
    params(("id" = String, Path), Against),
    responses((status = 200, body = Replayed), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn replay(
    State(s): S,
    Path(id): Path<String>,
    Query(Against { version }): Query<Against>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Deploy)
        .await?;
    if let Some(g) = &s.gateway {
        let path = hearth_cluster::fanout::with_query(
            format!("/v1/recordings/{id}/replay"),
            query.as_deref(),
        );
        return crate::cluster::recording_on_its_node(g, http::Method::POST, &id, &path, &headers)
            .await;
    }
    let rec = read(&s, &p, &id).await?;
    let report = replay_one(&s, &p.tenant, &rec, version).await?;
    Ok(Json(Replayed::from(report)).into_response())
}

/// Replay an exported tape (the body) against the caller's function of its name
///
/// A tape kept outside Hearth, as a test case.
#[utoipa::path(post, path = "/v1/replay", tag = "recordings", params(Against),
    request_body(content = Object, description = "A tape file from `/export`"),
    responses((status = 200, body = Replayed), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn replay_file(
    State(s): S,
    Query(Against { version }): Query<Against>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Replayed>, ApiError> {
    let p = s
        .auth
        .require_listing(s.node.store(), &headers, Scope::Deploy)
        .await?;
    // Bounded by this node's largest tape before a byte of it is decoded.
    let limits = s.config.replay_file;
    let file = read_body(
        &headers,
        body,
        (limits.max_bytes, s.config.body_timeout),
        "tape",
    )
    .await?;
    let rec = Recording::import(&file, limits)?;
    crate::auth::check_function(&p, &rec.function)?;
    let report = replay_one(&s, &p.tenant, &rec, version).await?;
    Ok(Json(report.into()))
}

/// Recorded traffic to replay, and the version to replay it against.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct TrafficQuery {
    /// The version to replay against.
    #[param(required = true)]
    pub(crate) against: Option<u32>,
    /// At most this many tapes, the newest (replayed oldest first).
    #[param(default = 100, maximum = 10000)]
    pub(crate) last: Option<u32>,
    /// As in the recordings list.
    pub(crate) status: Option<String>,
    /// As in the recordings list.
    pub(crate) since: Option<String>,
    /// Only tapes made by this version.
    pub(crate) version: Option<u32>,
    /// Answer only the replays that were not identical, and at most 100
    /// of them (the counts still cover every replay).
    pub(crate) differing_only: Option<bool>,
}

/// Tapes one replay of traffic replays at most.
pub(crate) const MAX_REPLAYED: u32 = 10_000;

/// Replays a `differing_only` answer shows at most.
const MAX_DIFFERING_SHOWN: usize = 100;

/// Recorded traffic, replayed against a version.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct TrafficReplay {
    pub name: String,
    pub against: u32,
    pub replayed: usize,
    /// Replays whose response differs from the recorded one.
    pub changed: usize,
    /// Replays that did something the tape did not.
    pub diverged: usize,
    /// Replays that were not identical (changed, diverged, or both).
    #[serde(default)]
    pub differing: usize,
    /// Oldest first: the order the traffic came in (with
    /// `differing_only`, those not identical, at most 100). Through a
    /// gateway each also names its `node`.
    pub results: Vec<Replayed>,
    /// Through a gateway: the nodes that did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<Vec<Unreachable>>,
}

/// Replay recorded traffic against a version: which responses changed
///
/// Through a gateway: every node replays its own tapes.
#[utoipa::path(post, path = "/v1/functions/{name}/replay", tag = "recordings",
    params(("name" = String, Path), TrafficQuery),
    responses((status = 200, body = TrafficReplay), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn replay_traffic(
    State(s): S,
    Path(name): Path<String>,
    Query(traffic): Query<TrafficQuery>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s
        .auth
        .require_for(s.node.store(), &headers, Scope::Deploy, &name)
        .await?;
    if let Some(g) = &s.gateway {
        let path = hearth_cluster::fanout::with_query(
            format!("/v1/functions/{name}/replay"),
            query.as_deref(),
        );
        return hearth_cluster::fanout::replay_traffic(g, &path, &headers)
            .await
            .map(|merged| Json(merged).into_response())
            .map_err(crate::cluster::fanout_error);
    }
    Ok(Json(replay_here(&s, &p.tenant, &name, traffic).await?).into_response())
}

/// Replays `name`'s tapes that `traffic` picks against its version
/// `against`, on this node (the tapes it holds), oldest first. Each runs
/// in a fresh sandbox whose KV and network calls are answered from its
/// tape: nothing live is read or written.
pub(crate) async fn replay_here(
    s: &AppState,
    tenant: &str,
    name: &str,
    traffic: TrafficQuery,
) -> Result<TrafficReplay, ApiError> {
    let against = traffic.against.ok_or_else(|| {
        ApiError::BadRequest("say which version to replay against: against=N".into())
    })?;
    let target = s.node.resolve(tenant, name, Some(against)).await?;
    let filter = TapeFilter {
        status: traffic.status,
        since: traffic.since,
        version: traffic.version,
        slower_than_ms: None,
        trace_id: None,
        before: None,
        limit: Some(traffic.last.unwrap_or(100).clamp(1, MAX_REPLAYED)),
    };
    let q = filter.query(Some(name.to_string()))?;
    let t = tenant.to_string();
    let recordings = with_archive(s, move |a| a.recordings(&t, &q)).await?;
    let differing_only = traffic.differing_only.unwrap_or(false);
    let mut results = Vec::new();
    let (mut changed, mut diverged, mut differing) = (0, 0, 0);
    // Oldest first: the order the traffic came in.
    for rec in recordings.iter().rev() {
        let report = s.node.replay(rec, &target).await?;
        changed += usize::from(report.diff.is_some());
        diverged += usize::from(report.divergence.is_some());
        differing += usize::from(!report.identical);
        // Held until the answer: a gate of thousands of tapes keeps only
        // what it shows.
        if !differing_only || (!report.identical && results.len() < MAX_DIFFERING_SHOWN) {
            results.push(Replayed::from(report));
        }
    }
    Ok(TrafficReplay {
        name: name.to_string(),
        against,
        replayed: recordings.len(),
        changed,
        diverged,
        differing,
        results,
        unreachable: None,
    })
}
