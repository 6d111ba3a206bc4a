//! Recordings as JSON for people and tools (the API and `hearth
//! recordings show --json`): bodies as text where they are text, cut at
//! [`TEXT_MAX_BYTES`], and host calls a page at a time. A recording can
//! hold tens of MiB; its view is a few hundred KiB at most, whatever it
//! holds. Whole payloads are bytes: [`payload`].

use serde_json::{Value, json};

use crate::{Outcome, Recording};
use hearth_host::HostEvent;

/// Bytes of a body shown as text in a view; the rest is left out, and
/// `truncated` says so.
pub const TEXT_MAX_BYTES: usize = 64 << 10;

/// Host calls in one page of a timeline, by default and at most.
pub const CALLS_PER_PAGE: usize = 200;
pub const CALLS_PER_PAGE_MAX: usize = 1000;

/// A body as JSON: its text (lossy for binary; its first
/// [`TEXT_MAX_BYTES`]) and its length.
fn body(bytes: &[u8]) -> Value {
    let shown = &bytes[..bytes.len().min(TEXT_MAX_BYTES)];
    json!({
        "text": String::from_utf8_lossy(shown),
        "bytes": bytes.len(),
        "binary": std::str::from_utf8(bytes).is_err(),
        "truncated": shown.len() < bytes.len(),
    })
}

/// Where a payload of a recording is: its request or response body, or
/// the bytes of host call `n` (1-based, as in the timeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadOf {
    Request,
    Response,
    Call(usize),
}

impl std::str::FromStr for PayloadOf {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "request" => Ok(PayloadOf::Request),
            "response" => Ok(PayloadOf::Response),
            n => n
                .parse()
                .map(PayloadOf::Call)
                .map_err(|_| format!("payload {n:?}: use request, response or a call's number")),
        }
    }
}

/// The whole bytes of one payload: a body, or what a host call carried
/// (a KV value, random bytes, a fetched body, a log message). `None`: the
/// call does not exist or carries no bytes.
pub fn payload(r: &Recording, of: PayloadOf) -> Option<&[u8]> {
    match of {
        PayloadOf::Request => Some(&r.request.body),
        PayloadOf::Response => match &r.outcome {
            Outcome::Response(resp) => Some(&resp.body),
            Outcome::Error { message, .. } => Some(message.as_bytes()),
        },
        PayloadOf::Call(n) => match r.tape.events.get(n.checked_sub(1)?)? {
            HostEvent::Random { bytes } => Some(bytes),
            HostEvent::KvGet { value, .. } => value.as_deref(),
            HostEvent::KvSet { value, .. } => Some(value),
            HostEvent::HttpFetch {
                result: Ok(resp), ..
            } => Some(&resp.body),
            HostEvent::Log { message, .. } => Some(message.as_bytes()),
            _ => None,
        },
    }
}

pub fn outcome(o: &Outcome) -> Value {
    match o {
        Outcome::Response(r) => json!({
            "kind": "ok",
            "status": r.status,
            "headers": r.headers,
            "body": body(&r.body),
        }),
        Outcome::Error {
            kind,
            status,
            message,
        } => json!({"kind": kind, "status": status, "message": message}),
    }
}

/// The timeline of one recording: request, host calls `offset + 1` to
/// `offset + limit` (each with its answer, for a person, how many payload
/// bytes it carries and, for a KV or HTTP call that went to the world,
/// when it started and how long it took), outcome.
pub fn timeline(r: &Recording, offset: usize, limit: usize) -> Value {
    let total = r.tape.events.len();
    let limit = limit.min(CALLS_PER_PAGE_MAX);
    let end = offset.saturating_add(limit).min(total);
    let calls: Vec<Value> = r
        .tape
        .events
        .get(offset.min(total)..end)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let n = offset + i + 1;
            let bytes = payload(r, PayloadOf::Call(n)).map(<[u8]>::len);
            let mut call =
                json!({"n": n, "call": e.call(), "answer": e.answer(), "payload_bytes": bytes});
            if let Some(t) = r.tape.timing(n - 1) {
                call["at_us"] = t.at_us.into();
                call["took_us"] = t.took_us.into();
            }
            call
        })
        .collect();
    json!({
        "id": r.id,
        "tenant": r.tenant,
        "function": r.function,
        "version": r.version,
        "artifact": r.artifact,
        "tier": r.tier.as_str(),
        "started_ms": r.started_ms,
        "duration_us": r.duration_us,
        // The trace it was in: its caller's, or the one it began.
        "trace_id": crate::trace_of(r),
        "request": {
            "method": r.request.method,
            "path": r.request.path,
            "query": r.request.query,
            "headers": r.request.headers,
            "body": body(&r.request.body),
        },
        // Bodies that streamed: the bodies above are their first bytes.
        "streamed": r.streamed,
        "calls": calls,
        "calls_total": total,
        "next_offset": (end < total).then_some(end),
        "outcome": outcome(&r.outcome),
    })
}
