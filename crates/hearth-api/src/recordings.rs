//! Recordings and replay under `/v1`: a tenant lists, reads, exports and
//! replays its own tapes, and nobody else's (another tenant's id is a 404,
//! like an id that never existed).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use hearth_node::ReplayReport;
use hearth_record::{Archive, RecordError, Recording, view};
use hearth_store::TapeQuery;
use serde_json::{Value, json};

use crate::invoke::read_body;
use crate::query::{number, params};
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

impl From<RecordError> for ApiError {
    fn from(e: RecordError) -> Self {
        let msg = e.to_string();
        match e {
            RecordError::NotFound(_) | RecordError::Expired => ApiError::NotFound(msg),
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

/// `status=error`, `status=500`, `since=1h`, `version=N`, `limit=N`.
fn tape_query(
    function: Option<String>,
    p: &BTreeMap<String, String>,
) -> Result<TapeQuery, ApiError> {
    let mut q = TapeQuery {
        function,
        version: number(p, "version")?,
        limit: number(p, "limit")?.unwrap_or(100),
        ..TapeQuery::default()
    };
    match p.get("status").map(String::as_str) {
        None | Some("any") => {}
        Some("error") => q.errors_only = true,
        Some(code) => {
            q.status = Some(code.parse().map_err(|_| {
                ApiError::BadRequest(format!("status {code:?}: use error, any or an HTTP status"))
            })?)
        }
    }
    if let Some(since) = p.get("since") {
        let secs = hearth_core::parse_duration_s(since).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "since {since:?}: use a duration like 90s, 15m, 1h, 2d"
            ))
        })?;
        q.since_ms = Some(hearth_core::unix_time_ms() - (secs as i64) * 1000);
    }
    Ok(q)
}

/// `GET /v1/functions/{name}/recordings`
pub(crate) async fn list(
    State(s): S,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    let q = tape_query(Some(name.clone()), &params(query.clone()))?;
    if let Some(g) = &s.gateway {
        let limit = q.limit as usize;
        return hearth_cluster::fanout::recordings(
            g,
            &p.tenant,
            &name,
            query.as_deref(),
            limit,
            &headers,
        )
        .await
        .map(Json)
        .map_err(crate::cluster::fanout_error);
    }
    let tenant = p.tenant.clone();
    let tapes = with_archive(&s, move |a| a.list(&tenant, &q)).await?;
    Ok(Json(
        json!({"tenant": p.tenant, "name": name, "recordings": tapes}),
    ))
}

async fn read(s: &AppState, tenant: &str, id: &str) -> Result<Recording, ApiError> {
    let (t, i) = (tenant.to_string(), id.to_string());
    with_archive(s, move |a| a.read(&t, &i)).await
}

/// `GET /v1/recordings/{id}[?offset=N&limit=N]`: the timeline, a page of
/// host calls at a time.
pub(crate) async fn show(
    State(s): S,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if let Some(g) = &s.gateway {
        let path =
            hearth_cluster::fanout::with_query(format!("/v1/recordings/{id}"), query.as_deref());
        return crate::cluster::recording_on_its_node(g, http::Method::GET, &id, &path, &headers)
            .await;
    }
    let params = params(query);
    let offset: u32 = number(&params, "offset")?.unwrap_or(0);
    let limit: u32 = number(&params, "limit")?.unwrap_or(view::CALLS_PER_PAGE as u32);
    let rec = read(&s, &p.tenant, &id).await?;
    Ok(Json(view::timeline(&rec, offset as usize, limit as usize)).into_response())
}

/// `GET /v1/recordings/{id}/payload?of=request|response|N`: one payload's
/// bytes, whole (views cut them).
pub(crate) async fn payload(
    State(s): S,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if let Some(g) = &s.gateway {
        let path = hearth_cluster::fanout::with_query(
            format!("/v1/recordings/{id}/payload"),
            query.as_deref(),
        );
        return crate::cluster::recording_on_its_node(g, http::Method::GET, &id, &path, &headers)
            .await;
    }
    let of: view::PayloadOf = params(query)
        .get("of")
        .ok_or_else(|| ApiError::BadRequest("say which payload: of=request, response or N".into()))?
        .parse()
        .map_err(ApiError::BadRequest)?;
    let rec = read(&s, &p.tenant, &id).await?;
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

/// `GET /v1/recordings/{id}/export`: the tape as a file.
pub(crate) async fn export(
    State(s): S,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
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
    let file = read(&s, &p.tenant, &id).await?.export();
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

fn report_json(r: &ReplayReport) -> Value {
    json!({
        "id": r.id,
        "function": r.function,
        "recorded_version": r.recorded_version,
        "replayed_version": r.replayed_version,
        "code_changed": r.code_changed,
        "tier": r.tier.as_str(),
        "identical": r.identical,
        "divergence": r.divergence,
        "verdict": match (&r.divergence, r.identical) {
            (_, true) => "identical".to_string(),
            (Some(d), _) => d.to_string(),
            (None, false) => "the response differs".to_string(),
        },
        "recorded": view::outcome(&r.recorded),
        "replayed": view::outcome(&r.replayed),
        "diff": r.diff,
        "logs": r.logs,
        "duration_us": r.duration.as_micros() as u64,
    })
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

/// `POST /v1/recordings/{id}/replay[?version=N]`
pub(crate) async fn replay(
    State(s): S,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    let version = number(&params(query.clone()), "version")?;
    if let Some(g) = &s.gateway {
        let path = hearth_cluster::fanout::with_query(
            format!("/v1/recordings/{id}/replay"),
            query.as_deref(),
        );
        return crate::cluster::recording_on_its_node(g, http::Method::POST, &id, &path, &headers)
            .await;
    }
    let rec = read(&s, &p.tenant, &id).await?;
    Ok(Json(report_json(
        &replay_one(&s, &p.tenant, &rec, version).await?,
    ))
    .into_response())
}

/// `POST /v1/replay[?version=N]` with an exported tape as the body: runs
/// a tape kept outside Hearth (a test case) against this node's function
/// of the same name.
pub(crate) async fn replay_file(
    State(s): S,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    let version = number(&params(query), "version")?;
    let file = read_body(
        &headers,
        body,
        (s.config.max_code_bytes, s.config.body_timeout),
        "tape",
    )
    .await?;
    let rec = Recording::import(&file)?;
    Ok(Json(report_json(
        &replay_one(&s, &p.tenant, &rec, version).await?,
    )))
}

/// `POST /v1/functions/{name}/replay?against=N[&last=N][&since=1h][&status=…]`:
/// recorded traffic of `name` against version N; which responses changed.
pub(crate) async fn replay_traffic(
    State(s): S,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let p = s.auth.require(s.node.store(), &headers).await?;
    if let Some(g) = &s.gateway {
        let path = hearth_cluster::fanout::with_query(
            format!("/v1/functions/{name}/replay"),
            query.as_deref(),
        );
        return hearth_cluster::fanout::replay_traffic(g, &path, &headers)
            .await
            .map(Json)
            .map_err(crate::cluster::fanout_error);
    }
    let params = params(query);
    let against: u32 = number(&params, "against")?.ok_or_else(|| {
        ApiError::BadRequest("say which version to replay against: against=N".into())
    })?;
    let target = s.node.resolve(&p.tenant, &name, Some(against)).await?;
    let mut q = tape_query(Some(name.clone()), &params)?;
    q.limit = number(&params, "last")?.unwrap_or(q.limit);
    let tenant = p.tenant.clone();
    let recordings = with_archive(&s, move |a| a.recordings(&tenant, &q)).await?;
    let mut results = Vec::new();
    let (mut changed, mut diverged) = (0, 0);
    // Oldest first: the order the traffic came in.
    for rec in recordings.iter().rev() {
        let report = s.node.replay(rec, &target).await?;
        changed += usize::from(report.diff.is_some());
        diverged += usize::from(report.divergence.is_some());
        results.push(report_json(&report));
    }
    Ok(Json(json!({
        "name": name,
        "against": against,
        "replayed": results.len(),
        "changed": changed,
        "diverged": diverged,
        "results": results,
    })))
}
