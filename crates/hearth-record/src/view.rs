//! Recordings as JSON for people and tools (the API and `hearth
//! recordings show --json`): bodies as text where they are text.

use serde_json::{Value, json};

use crate::{Outcome, Recording};

/// A body as JSON: its text (lossy for binary) and its length.
fn body(bytes: &[u8]) -> Value {
    json!({
        "text": String::from_utf8_lossy(bytes),
        "bytes": bytes.len(),
        "binary": std::str::from_utf8(bytes).is_err(),
    })
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

/// The timeline of one recording: request, each host call and its answer,
/// outcome.
pub fn timeline(r: &Recording) -> Value {
    let calls: Vec<Value> = r
        .tape
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"n": i + 1, "call": e.call(), "answer": e.answer(), "event": e}))
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
        "request": {
            "method": r.request.method,
            "path": r.request.path,
            "query": r.request.query,
            "headers": r.request.headers,
            "body": body(&r.request.body),
        },
        "calls": calls,
        "outcome": outcome(&r.outcome),
    })
}
