//! `ANY /fn/{tenant}/{name}[@version][/{*path}]`: invoke a function.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use hearth_core::{FunctionVersion, InvokeError, Request};
use hearth_node::NodeError;
use hearth_node::Pin;
use hearth_store::Scope;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, ResponsesBuilder};

use crate::body::{BodyBudget, BodyHeld, read_body_within};
use crate::{ApiError, AppState, auth};

/// The function an invocation names.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read by the extractor as a tuple; here for the document
struct Target {
    tenant: String,
    /// `name`, or `name@version` to pin a version.
    name: String,
}

/// What an invocation answers: the function's response, or an error body
/// whose `kind` names the failure.
struct Answers;

impl utoipa::IntoResponses for Answers {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let error = ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("ErrorBody")))
            .build();
        let mut answers = ResponsesBuilder::new().response(
            "200",
            ResponseBuilder::new().description("The function's response"),
        );
        for (status, why) in [
            (
                404,
                "No such function or version, or one that is not public and \
                 the caller is not its tenant: the same answer, so that it \
                 does not tell which",
            ),
            (413, "The request body is too large"),
            (
                429,
                "The tenant's share of the node (invocations or memory) is in use (`Retry-After`)",
            ),
            (
                500,
                "The function failed: `kind` says how (`trap`, `timeout`, `out_of_memory`, …)",
            ),
            (502, "Through a gateway: the node failed"),
            (
                503,
                "Overloaded: the node's concurrency or memory is in use, or unavailable (`Retry-After`)",
            ),
            (504, "Through a gateway: the node did not answer in time"),
        ] {
            answers = answers.response(
                status.to_string(),
                ResponseBuilder::new()
                    .description(why)
                    .content("application/json", error.clone()),
            );
        }
        answers.build().into()
    }
}

/// Invoke a function
///
/// Any method; the request reaches the function as sent (a sub-path after
/// the name too: `/fn/{tenant}/{name}/{path}`). A token is needed unless
/// the function was deployed public. The answer is the function's, with
/// `Hearth-Invocation-Id`, `Hearth-Version` and `Hearth-Start` (not on a
/// refusal, which started nothing; through a gateway also `Hearth-Node`
/// and `Hearth-Retried-From`).
#[utoipa::path(method(get, post, put, patch, delete, head, options),
    path = "/fn/{tenant}/{name}", tag = "invoke", security((), ("bearer" = [])),
    params(Target, ("Hearth-Version" = Option<u32>, Header, description = "Pins a version")),
    request_body(content = Vec<u8>, content_type = "*/*"),
    responses(Answers))]
pub(crate) async fn invoke_root(
    State(s): State<Arc<AppState>>,
    Path((tenant, name)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let site = crate::origin::site_of(&request);
    let resp = run(&s, &tenant, &name, "/".into(), request).await?;
    Ok(held(resp, &site))
}

/// Invoke a function at a sub-path
///
/// As `/fn/{tenant}/{name}`; the function sees `/{path}` as its path.
#[utoipa::path(method(get, post, put, patch, delete, head, options),
    path = "/fn/{tenant}/{name}/{path}", tag = "invoke", security((), ("bearer" = [])),
    params(Target, ("path" = String, Path, description = "The rest of the path, passed on"),
        ("Hearth-Version" = Option<u32>, Header, description = "Pins a version")),
    request_body(content = Vec<u8>, content_type = "*/*"),
    responses(Answers))]
pub(crate) async fn invoke_path(
    State(s): State<Arc<AppState>>,
    Path((tenant, name, path)): Path<(String, String, String)>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let site = crate::origin::site_of(&request);
    let resp = run(&s, &tenant, &name, format!("/{path}"), request).await?;
    Ok(held(resp, &site))
}

/// A function's answer, held to the origin it is served from
/// ([`crate::origin::held_to_origin`]).
fn held(mut resp: Response, site: &crate::origin::Site) -> Response {
    crate::origin::held_to_origin(resp.headers_mut(), site);
    resp
}

/// `name`, `name@3` or `name@canary`, and a `Hearth-Version` header (a
/// number or an alias, winning over the path), say which version runs:
/// `live` unless pinned.
fn split_version<'a>(
    name: &'a str,
    headers: &'a HeaderMap,
) -> Result<(&'a str, Pin<'a>), ApiError> {
    let pin = |v: &'a str| -> Result<Pin<'a>, ApiError> {
        if let Ok(n) = v.parse::<u32>() {
            return Ok(Pin::Version(n));
        }
        hearth_core::validate_alias_name(v).map_err(|_| {
            ApiError::BadRequest(format!(
                "{v:?} is neither a version number nor an alias name (a-z, 0-9, '-', '_', \
                 starting with a letter)"
            ))
        })?;
        Ok(Pin::Alias(v))
    };
    let (name, mut chosen) = match name.split_once('@') {
        Some((n, v)) => (n, pin(v)?),
        None => (name, Pin::LIVE),
    };
    if let Some(h) = headers.get(VERSION) {
        chosen = pin(h.to_str().unwrap_or_default())?;
    }
    Ok((name, chosen))
}

/// Where an alias splits its calls between two versions, which one this
/// call runs: a `Hearth-Split-Key` (a user id, a session) always draws
/// the same number, so that caller stays on one side; without one, a
/// uniform random draw.
fn split_draw(headers: &HeaderMap) -> u8 {
    match headers.get(SPLIT_KEY) {
        Some(key) => {
            let hash = blake3::hash(key.as_bytes());
            let first: [u8; 8] = hash.as_bytes()[..8]
                .try_into()
                .expect("a blake3 hash has 32 bytes");
            (u64::from_le_bytes(first) % 100) as u8
        }
        None => hearth_node::random_draw(),
    }
}

/// A name no function has (deploys refuse `/` in a name).
const NO_FUNCTION: &str = "/";

/// The function a caller asked for, if it may invoke it.
///
/// A caller that is not authenticated as the function's tenant gets one and
/// the same 404 for a function that does not exist, a version that does not
/// exist, and a private function: which names and how many versions another
/// tenant has are not its business. The tenant itself is told which it was.
///
/// The 404 takes the same path whichever it was, so that its timing tells
/// nothing either: the function table, one store query and the caller's
/// token. A missing function misses the table and asks the store; a
/// private one the node holds answers from the table, and for a caller not
/// of its tenant the store is asked the same question of a name that finds
/// nothing (constant work, not a sleep). What is left: the first probe of
/// a private function the node does not hold yet decodes its row (then
/// holds it), one sample that costs a few µs more than a miss.
async fn visible_function(
    s: &AppState,
    tenant: &str,
    name: &str,
    (version, draw): (Pin<'_>, u8),
    headers: &HeaderMap,
) -> Result<Arc<FunctionVersion>, ApiError> {
    let held = s.node.resolve_held(tenant, name, version, draw);
    let asked_store = held.is_none();
    let found = match held {
        Some(f) if f.spec.public => return Ok(f),
        Some(f) => Ok(f),
        None => match s.node.resolve_from_store(tenant, name, version, draw).await {
            Ok(f) if f.spec.public => return Ok(f),
            other => other,
        },
    };
    // Only a token that may invoke this function makes the caller its
    // tenant: any other sees a private function as missing.
    let is_tenant = match s.auth.principal(s.node.store(), headers).await {
        Ok(Some(p)) => {
            p.tenant == tenant
                && p.scope().allows(Scope::Invoke)
                && crate::auth::check_function(&p, name).is_ok()
        }
        Ok(None) | Err(ApiError::Unauthorized(_)) => false,
        Err(e) => return Err(e),
    };
    let hidden_from_caller = !is_tenant
        && matches!(
            found,
            Ok(_)
                | Err(NodeError::NotFound { .. }
                    | NodeError::NoSuchVersion { .. }
                    | NodeError::NoSuchAlias { .. })
        );
    if !hidden_from_caller {
        return found.map_err(ApiError::from);
    }
    if !asked_store {
        // The store query a missing function's lookup made: one that finds
        // nothing (a name no function can have; found, a row would be
        // decoded, which a miss never costs).
        let _ = s
            .node
            .resolve_from_store(tenant, NO_FUNCTION, version, draw)
            .await;
    }
    let asked = match version {
        Pin::LIVE => format!("{tenant}/{name}"),
        pinned => format!("{tenant}/{name}@{pinned}"),
    };
    Err(ApiError::NotFound(format!(
        "no function {asked} that this caller may invoke: it does not exist, or it is \
         private and needs `Authorization: Bearer <token>` with a token of tenant {tenant:?}"
    )))
}

/// Headers every invocation answers with (named once: a `&str` name is
/// parsed again on each insert).
pub(crate) const INVOCATION_ID: HeaderName = HeaderName::from_static("hearth-invocation-id");
pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const VERSION: HeaderName = HeaderName::from_static("hearth-version");
const SPLIT_KEY: HeaderName = HeaderName::from_static("hearth-split-key");
const INVOCATION_TYPE: HeaderName = HeaderName::from_static("hearth-invocation-type");
const START: HeaderName = HeaderName::from_static("hearth-start");

/// The request is taken whole (not as `HeaderMap`, `Method`, `Uri`
/// extractors, which clone them): this is the invocation hot path.
async fn run(
    s: &AppState,
    tenant: &str,
    name: &str,
    path: String,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let client = parts.extensions.get::<crate::ClientShare>();
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let (name, version) = split_version(name, &headers)?;
    let draw = split_draw(&headers);
    // A cluster member trusts the header only with its gateway's signature.
    let attempt = headers.get(hearth_cluster::attempt::HEADER);
    let forwarded = match (&s.attempt_key, attempt) {
        (Some(key), Some(value)) => Some(
            key.verify(value.to_str().unwrap_or_default())
                .map_err(ApiError::Forbidden)?,
        ),
        _ => None,
    };
    let function = if forwarded.is_some_and(|f| f.queued) {
        // The gateway's queue, not a client: no token to check.
        s.node.resolve(tenant, name, version).await?
    } else {
        visible_function(s, tenant, name, (version, draw), &headers).await?
    };
    if is_async(&headers) && forwarded.is_none() {
        let (body, _held) = read_request_body(s, &headers, body, client).await?;
        let req = Request {
            method: method.as_str().to_string(),
            path,
            query: uri.query().unwrap_or_default().to_string(),
            headers: passed_on(&headers, false),
            body,
        };
        return enqueued(s, &function, &req).await;
    }
    if let Some(g) = &s.gateway {
        // What the gateway holds of the body counts until it is sent on
        // (and, whole, until no retry needs it).
        let (body, _held) = crate::cluster::outgoing_body(s, &headers, body, client).await?;
        let tracing = s.node.tracing();
        return crate::cluster::forward(g, tracing, &function, method, &uri, headers, body).await;
    }
    let req = Request {
        method: method.as_str().to_string(),
        path,
        query: uri.query().unwrap_or_default().to_string(),
        headers: passed_on(&headers, forwarded.is_some_and(|f| f.queued)),
        body: Default::default(),
    };
    let from_gateway = forwarded.is_some();
    // A node or tenant at its limit refuses here, before it prepares.
    let ready = match s.node.ready(&function, forwarded).await {
        Err(hearth_node::NodeError::Refused { id, error }) => {
            let resp = failed(&error, id, from_gateway).await;
            return Ok(stamped(resp, id, function.version, None));
        }
        ready => ready?,
    };
    if ready.streams() {
        // Boxed: its state would otherwise make every invocation's future,
        // which axum moves and boxes, the size of a streaming one.
        let streamed = stream(s, &function, ready, req, (&headers, body), forwarded);
        return Box::pin(streamed).await;
    }
    // Held until the invocation has answered: what many unfinished or
    // unanswered calls buffer is bounded for the node.
    let (body, held) = read_request_body(s, &headers, body, client).await?;
    let req = Request { body, ..req };
    let outcome = s
        .node
        .invoke_ready(&function, ready, req, forwarded)
        .await?;
    drop(held);
    let (resp, start) = match outcome.result {
        Ok(r) => (
            answer((r.status, r.headers), Body::from(r.body)),
            Some(outcome.start),
        ),
        Err(e) => (
            failed(&e, outcome.id, from_gateway).await,
            (!e.is_refusal()).then_some(outcome.start),
        ),
    };
    let resp = stamped(resp, outcome.id, outcome.version, start);
    Ok(traced(resp, outcome.traceparent.as_deref()))
}

/// The request's headers as its function sees them: without Hearth's
/// credential, a gateway's attempt, or (unless it comes from the queue,
/// `queued`) the event header only the queue may set.
fn passed_on(headers: &HeaderMap, queued: bool) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(k, v)| *k != header::AUTHORIZATION || !auth::is_hearth_credential(v))
        .filter(|(k, _)| {
            let k = k.as_str();
            k != hearth_cluster::attempt::HEADER
                && k != INVOCATION_TYPE.as_str()
                && (queued || k != hearth_core::EVENT_HEADER)
        })
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Whether the caller asked for the invocation to run later
/// (`Hearth-Invocation-Type: Event`, Lambda's `InvocationType`).
fn is_async(headers: &HeaderMap) -> bool {
    headers
        .get(INVOCATION_TYPE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"event"))
}

/// Queues `req` to run later and answers 202 with its id at once
/// (docs/events.md): it runs from the store's queue, retried on failure,
/// and ends in the function's dead letters if every attempt fails.
async fn enqueued(
    s: &AppState,
    function: &FunctionVersion,
    req: &Request,
) -> Result<Response, ApiError> {
    let Some(events) = s.events.get() else {
        return Err(ApiError::Unavailable(
            "this Hearth runs no queued invocations (a cluster's node): send async \
             invocations to a gateway"
                .into(),
        ));
    };
    let id = hearth_core::InvocationId::new();
    events
        .enqueue_async(
            (&function.tenant, &function.name, function.version),
            req,
            id,
        )
        .await?;
    let body = serde_json::json!({ "invocation_id": id.to_string(), "status": "queued" });
    let mut resp = answer(
        (
            StatusCode::ACCEPTED.as_u16(),
            vec![("content-type".into(), "application/json".into())],
        ),
        Body::from(body.to_string()),
    );
    let v = HeaderValue::from_str(&id.to_string()).expect("an id is hex");
    resp.headers_mut().insert(INVOCATION_ID, v);
    let v = HeaderValue::from(function.version);
    resp.headers_mut().insert(VERSION, v);
    Ok(resp)
}

/// `resp` with the invocation's span as `traceparent`, if it was traced:
/// so the caller can find it in its traces.
fn traced(mut resp: Response, traceparent: Option<&str>) -> Response {
    if let Some(tp) = traceparent {
        let tp = HeaderValue::from_str(tp).expect("a traceparent is hex and dashes");
        resp.headers_mut().insert(TRACEPARENT, tp);
    }
    resp
}

/// An invocation's request body, whole, within the node's limits.
async fn read_request_body(
    s: &AppState,
    headers: &HeaderMap,
    body: Body,
    client: Option<&crate::ClientShare>,
) -> Result<(bytes::Bytes, BodyHeld), ApiError> {
    let limits = (s.config.max_body_bytes, s.config.body_timeout);
    let budget = BodyBudget {
        node: &s.buffered,
        client,
    };
    read_body_within(headers, body, limits, "request body", Some(budget)).await
}

/// Invokes a function whose tier streams: its request body is handed on
/// as it arrives, its response is sent as the function writes it.
async fn stream(
    s: &AppState,
    function: &Arc<hearth_core::FunctionVersion>,
    ready: hearth_node::Ready,
    req: Request,
    (headers, body): (&HeaderMap, Body),
    forwarded: Option<hearth_core::GatewayAttempt>,
) -> Result<Response, ApiError> {
    use futures::StreamExt;
    let limit = s.node.max_stream_bytes();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::TooLarge(format!(
            "the request body is larger than the limit of {limit} bytes on a streamed body \
             (--max-stream-bytes)"
        )));
    }
    let body = body.into_data_stream().map(|chunk| {
        chunk.map_err(|e| InvokeError::Disconnected(format!("its request body broke off: {e}")))
    });
    let body = Box::pin(stalls_after(body, s.config.body_timeout));
    let from_gateway = forwarded.is_some();
    let st = s
        .node
        .invoke_streaming(function, ready, req, body, forwarded)
        .await?;
    let start = match &st.head {
        Err(e) if e.is_refusal() => None,
        _ => Some(st.start),
    };
    let resp = match st.head {
        Ok(head) => {
            let length = head.length;
            let mut resp = answer((head.status, head.headers), Body::from_stream(st.body));
            if let Some(length) = length {
                resp.headers_mut()
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            }
            resp
        }
        Err(e) => failed(&e, st.id, from_gateway).await,
    };
    let resp = stamped(resp, st.id, st.version, start);
    Ok(traced(resp, st.traceparent.as_deref()))
}

/// `body`, ended with [`InvokeError::RequestStalled`] when no chunk of it
/// comes for `idle`: a caller trickling a streamed body holds the
/// function's sandbox only that long between chunks (a whole body must
/// arrive within the same time).
fn stalls_after(
    body: impl futures::Stream<Item = Result<bytes::Bytes, InvokeError>> + Send + 'static,
    idle: std::time::Duration,
) -> impl futures::Stream<Item = Result<bytes::Bytes, InvokeError>> + Send + 'static {
    use futures::StreamExt;
    futures::stream::unfold(Some(Box::pin(body)), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(chunk)) => Some((chunk, Some(body))),
            Ok(None) => None,
            Err(_) => {
                let idle_ms = idle.as_millis() as u64;
                Some((Err(InvokeError::RequestStalled { idle_ms }), None))
            }
        }
    })
}

/// The function's own response: its status, its headers but those that
/// are the connection's, and `body`.
fn answer((status, headers): (u16, Vec<(String, String)>), body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    for (k, v) in headers {
        let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) else {
            continue;
        };
        if !hearth_core::is_hop_by_hop(k.as_str()) && k != hearth_core::REFUSED_HEADER {
            h.append(k, v);
        }
    }
    resp
}

/// How long a call refused because its tenant is at its share waits for
/// its 429. A client that retries at once, as a flood does, then makes at
/// most four calls a second per connection, and refusals cost the node
/// (and the other tenants on its cores) little; a client that waits out
/// its `Retry-After` (1 s) loses nothing. Not for a gateway's attempts:
/// the gateway places a refused call elsewhere at once.
const REFUSAL_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether `e` refuses a call because its own tenant holds its share of
/// the node (running invocations or reserved memory), not the node's.
fn refused_for_its_tenant(e: &InvokeError) -> bool {
    matches!(
        e,
        InvokeError::TenantBusy { .. } | InvokeError::TenantMemoryFull { .. }
    )
}

/// The error body answered for an invocation that failed; a refusal for
/// the tenant's own share after [`REFUSAL_PAUSE`] unless a gateway asked.
async fn failed(e: &InvokeError, id: hearth_core::InvocationId, from_gateway: bool) -> Response {
    if !from_gateway && refused_for_its_tenant(e) {
        tokio::time::sleep(REFUSAL_PAUSE).await;
    }
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let id = id.to_string();
    let mut resp = crate::error::error_response(status, e.kind(), &e.to_string(), Some(&id));
    if matches!(e, InvokeError::Overloaded | InvokeError::MemoryFull { .. }) {
        resp.headers_mut().insert(
            hearth_core::REFUSED_HEADER,
            HeaderValue::from_static(e.kind()),
        );
    }
    resp
}

/// `resp` with the headers every invocation answers with, and how it
/// started (none for a refusal, which started nothing).
fn stamped(
    mut resp: Response,
    id: hearth_core::InvocationId,
    version: u32,
    start: Option<hearth_node::StartKind>,
) -> Response {
    let h = resp.headers_mut();
    // The id as hex without `fmt`'s machinery (which was about 1% of a
    // hello invocation's CPU under load).
    let mut hex = [0u8; 32];
    let hex = id.0.simple().encode_lower(&mut hex);
    h.insert(
        INVOCATION_ID,
        HeaderValue::from_str(hex).expect("a hex id is a valid header value"),
    );
    h.insert(VERSION, HeaderValue::from(version));
    if let Some(start) = start {
        h.insert(START, HeaderValue::from_static(start.as_str()));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_version(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(VERSION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn a_version_is_pinned_by_the_path_or_the_header() {
        let none = HeaderMap::new();
        assert_eq!(split_version("f", &none).unwrap(), ("f", Pin::LIVE));
        assert_eq!(split_version("f@3", &none).unwrap(), ("f", Pin::Version(3)));
        assert_eq!(
            split_version("f@canary", &none).unwrap(),
            ("f", Pin::Alias("canary"))
        );
        let four = with_version("4");
        assert_eq!(split_version("f", &four).unwrap(), ("f", Pin::Version(4)));
        assert_eq!(
            split_version("f@3", &four).unwrap(),
            ("f", Pin::Version(4)),
            "the header wins"
        );
        let staging = with_version("staging");
        assert_eq!(
            split_version("f@3", &staging).unwrap(),
            ("f", Pin::Alias("staging"))
        );
        for bad in ["f@X", "f@-1", "f@", "f@3x"] {
            assert!(
                matches!(split_version(bad, &none), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            split_version("f", &with_version("Latest!")),
            Err(ApiError::BadRequest(_))
        ));
    }
}
