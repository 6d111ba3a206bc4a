//! The gateway's side of the HTTP surface: which nodes it knows
//! (`/v1/cluster/nodes`; they join and report through the cluster's store,
//! not here), invocations forwarded to the node the placer picks, and
//! questions about recordings sent to every node. Cluster calls need an
//! admin token.
//!
//! Only the HTTP is here (authorization, status codes, response bodies):
//! what is forwarded and how is `hearth_cluster::forward`, placement and
//! the retry `hearth_cluster::gateway`, the fan-out and how its answers
//! add up `hearth_cluster::fanout`.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use hearth_cluster::fanout::{self, FanoutError};
use hearth_cluster::forward::{Outgoing, OutgoingBody};
use hearth_cluster::gateway::MemberView;
use hearth_cluster::{Gateway, GatewayError};
use hearth_core::FunctionVersion;
use hearth_node::trace::Tracing;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ErrorBody;
use crate::invoke::{INVOCATION_ID, TRACEPARENT};
use crate::{ApiError, AppState};

type S = State<Arc<AppState>>;

/// The gateway, or 404 on a node that is not one.
async fn gateway_for_admin(s: &AppState, headers: &HeaderMap) -> Result<Arc<Gateway>, ApiError> {
    let p = s.auth.caller(s.node.store(), headers).await?;
    if !p.is_admin() {
        return Err(ApiError::Forbidden(
            "cluster calls need an admin token".into(),
        ));
    }
    s.gateway
        .clone()
        .ok_or_else(|| ApiError::NotFound("this Hearth is not a gateway (--role gateway)".into()))
}

/// A gateway's nodes.
#[derive(Serialize, ToSchema)]
pub(crate) struct Members {
    nodes: Vec<MemberView>,
}

/// A gateway's nodes: alive or why not, capacity, memory committed, functions loaded (admin)
#[utoipa::path(get, path = "/v1/cluster/nodes", tag = "cluster",
    responses((status = 200, body = Members), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn members(State(s): S, headers: HeaderMap) -> Result<Json<Members>, ApiError> {
    let g = gateway_for_admin(&s, &headers).await?;
    Ok(Json(Members { nodes: g.members() }))
}

/// Sends an invocation to the node the placer picks, pinned to the version
/// the gateway resolved ([`hearth_cluster::forward`] has the rules). When
/// spans are exported, the gateway's span over it is the client's
/// `traceparent`, and the node's: in a sampled trace each attempt's span
/// under it takes its place there.
pub(crate) async fn forward(
    g: &Arc<Gateway>,
    tracing: Option<&Tracing>,
    function: &FunctionVersion,
    method: http::Method,
    uri: &http::Uri,
    mut headers: HeaderMap,
    body: OutgoingBody,
) -> Result<Response, ApiError> {
    let span = tracing.map(|t| t.forwarding(function, method.as_str(), &headers));
    let traceparent = span.as_ref().map(|span| {
        HeaderValue::from_str(&span.traceparent()).expect("a traceparent is hex and dashes")
    });
    // What the node gets, unless an attempt span takes its place.
    if let Some(tp) = &traceparent {
        headers.insert(TRACEPARENT, tp.clone());
    }
    let out = Outgoing {
        span: span.as_ref(),
        ..Outgoing::pinned(function, method, uri, headers, body)
    };
    let done = g.forward(&out).await.map_err(|e| {
        let (kind, error) = match e {
            GatewayError::NoNodes | GatewayError::Busy(_) => {
                ("unavailable", ApiError::Unavailable(e.to_string()))
            }
            GatewayError::NoRoom(_) => ("no_room", ApiError::TooManyRequests(e.to_string())),
            GatewayError::Failed(_) => ("node_failed", ApiError::BadGateway(e.to_string())),
            GatewayError::Timeout { .. } => ("timeout", ApiError::GatewayTimeout(e.to_string())),
        };
        if let Some(span) = &span {
            span.failed(kind, e.to_string());
        }
        error
    })?;
    if let Some(span) = &span {
        let invocation = done
            .headers
            .get(INVOCATION_ID)
            .and_then(|v| v.to_str().ok());
        span.answered(
            invocation,
            &done.node,
            done.retried_from.as_deref(),
            done.status,
        );
    }
    let mut headers = done.client_headers();
    if let Some(tp) = traceparent {
        headers.insert(TRACEPARENT, tp);
    }
    // The span ends when the body has gone to the client (or it left).
    let body = futures::StreamExt::map(done.body, move |chunk| {
        let _until_the_body_ends = &span;
        chunk
    });
    let mut resp = Response::new(Body::from_stream(body));
    *resp.status_mut() = StatusCode::from_u16(done.status).unwrap_or(StatusCode::BAD_GATEWAY);
    *resp.headers_mut() = headers;
    Ok(resp)
}

/// The request body a gateway sends on: whole when it fits in what the
/// gateway holds (`--max-body-bytes`, read within `--body-timeout`), so
/// another node can be asked if the first fails; a longer one streams to
/// its node as the client sends it (that node bounds it), once. What it
/// holds counts against `--max-buffered-mib` over every connection
/// (503 past it), for as long as the returned permit is kept.
pub(crate) async fn outgoing_body(
    s: &AppState,
    headers: &HeaderMap,
    body: Body,
    client: Option<&crate::ClientShare>,
) -> Result<(OutgoingBody, crate::body::BodyHeld), ApiError> {
    use futures::StreamExt;
    let limit = s.config.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Ok((
            OutgoingBody::streaming(body.into_data_stream()),
            Default::default(),
        ));
    }
    let mut permit = crate::body::BodyHeld::default();
    let budget = crate::body::BodyBudget {
        node: &s.buffered,
        client,
    };
    if let Some(n) = declared.map(|n| n as usize)
        && let Err(refused) = permit.prepay(budget, n)
    {
        if n <= crate::body::DRAIN_BYTES {
            crate::body::drain(body.into_data_stream(), 0, crate::body::DRAIN_BYTES).await;
        }
        return Err(refused);
    }
    let mut rest = body.into_data_stream();
    let deadline = tokio::time::Instant::now() + s.config.body_timeout;
    let mut held = bytes::BytesMut::new();
    loop {
        let next = tokio::time::timeout_at(deadline, rest.next()).await;
        let chunk = match next {
            Err(_) => {
                return Err(ApiError::RequestTimeout(format!(
                    "the request body did not arrive whole within {} ms",
                    s.config.body_timeout.as_millis()
                )));
            }
            Ok(None) => return Ok((OutgoingBody::Whole(held.freeze()), permit)),
            Ok(Some(Err(e))) => {
                return Err(ApiError::BadRequest(format!(
                    "failed to read the request body: {e}"
                )));
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        if held.len() + chunk.len() > limit {
            let start = futures::stream::iter([Ok(held.freeze()), Ok(chunk)]);
            return Ok((OutgoingBody::streaming(start.chain(rest)), permit));
        }
        if let Err(refused) = permit.hold(budget, chunk.len()) {
            // What is still coming is read past, so the client sees the
            // answer rather than a reset connection.
            let seen = held.len() + chunk.len();
            let up_to = seen.saturating_add(crate::body::DRAIN_BYTES);
            crate::body::drain(rest, seen, up_to).await;
            return Err(refused);
        }
        held.extend_from_slice(&chunk);
    }
}

// ---- recordings in a cluster: each node keeps its own, the gateway asks all

/// A fan-out's failure as the caller sees it.
pub(crate) fn fanout_error(e: FanoutError) -> ApiError {
    match e {
        FanoutError::NodeError { .. } => ApiError::BadGateway(e.to_string()),
        FanoutError::NotFound { .. } => ApiError::NotFound(e.to_string()),
    }
}

/// `GET /v1/recordings/{id}[/export]` and `POST /v1/recordings/{id}/replay`
/// on a gateway: the node holding the tape answers, its bytes passed on
/// as they are.
pub(crate) async fn recording_on_its_node(
    g: &Gateway,
    method: http::Method,
    id: &str,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (node, status, bytes) = fanout::on_recordings_node(g, method, id, path_and_query, headers)
        .await
        .map_err(fanout_error)?;
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        HeaderName::from_static(hearth_cluster::forward::NODE_HEADER),
        HeaderValue::try_from(node.as_ref()).expect("a hex id is a valid header value"),
    );
    Ok(resp)
}
