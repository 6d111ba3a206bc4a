//! Gated promotion: before an alias moves to a new version, the newest
//! tapes of the version it points at are replayed against the new one
//! (each in a fresh sandbox, its KV and network answered from its tape:
//! nothing live is read or written), and the move is refused unless every
//! replay answers as the tape did, or the caller accepts the differences.
//! Through a gateway every node replays the tapes it holds.

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::recordings::{MAX_REPLAYED, Replayed, TrafficQuery, TrafficReplay, replay_here};
use crate::{ApiError, AppState};

/// Which tapes a gate replays, and whether it lets differences through.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// Replay at most this many of the newest tapes (default 100, at most
    /// 10,000; through a gateway, on each node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<u32>,
    /// Only tapes newer than this: `90s`, `15m`, `1h`, `2d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Move even if some replays differ (they are answered all the same).
    #[serde(default)]
    pub accept_diff: bool,
}

/// What a gate found.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct GateResult {
    /// The version whose tapes were replayed (where the alias pointed).
    pub tapes_of: u32,
    /// The version they were replayed against.
    pub against: u32,
    pub replayed: usize,
    /// Replays whose response differs from the recorded one.
    pub changed: usize,
    /// Replays that did something their tape did not.
    pub diverged: usize,
    /// Replays that were not identical (changed, diverged, or both).
    pub not_identical: usize,
    /// The first of them (at most 100 from each node), oldest first.
    pub differing: Vec<Replayed>,
    /// Whether the move went ahead: every replay identical, or
    /// `accept_diff`.
    pub passed: bool,
    /// How long the replays took.
    pub took_ms: u64,
    /// Through a gateway: the nodes that did not answer (their tapes were
    /// not replayed, and the gate does not pass without them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreachable: Vec<crate::recordings::Unreachable>,
}

/// Replays the newest tapes `gate` picks of `name`'s version `tapes_of`
/// against `against`.
pub(crate) async fn run(
    s: &AppState,
    headers: &HeaderMap,
    (tenant, name): (&str, &str),
    (tapes_of, against): (u32, u32),
    gate: &Gate,
) -> Result<GateResult, ApiError> {
    let last = gate.last.unwrap_or(100);
    if last == 0 || last > MAX_REPLAYED {
        return Err(ApiError::BadRequest(format!(
            "a gate replays 1 to {MAX_REPLAYED} tapes, not {last}"
        )));
    }
    let started = std::time::Instant::now();
    let traffic = TrafficQuery {
        against: Some(against),
        last: Some(last),
        status: None,
        since: gate.since.clone(),
        version: Some(tapes_of),
        differing_only: Some(true),
    };
    let replay: TrafficReplay = match &s.gateway {
        None => replay_here(s, tenant, name, traffic).await?,
        Some(g) => {
            let query = {
                let mut q = form_urlencoded::Serializer::new(String::new());
                q.append_pair("against", &against.to_string())
                    .append_pair("last", &last.to_string())
                    .append_pair("version", &tapes_of.to_string())
                    .append_pair("differing_only", "true");
                if let Some(since) = &gate.since {
                    q.append_pair("since", since);
                }
                q.finish()
            };
            let path = format!("/v1/functions/{name}/replay?{query}");
            let merged = hearth_cluster::fanout::replay_traffic(g, &path, headers)
                .await
                .map_err(crate::cluster::fanout_error)?;
            serde_json::from_value(merged)
                .map_err(|e| ApiError::Internal(format!("the nodes' replays did not merge: {e}")))?
        }
    };
    let unreachable = replay.unreachable.unwrap_or_default();
    let passed = replay.replayed > 0
        && unreachable.is_empty()
        && (replay.differing == 0 || gate.accept_diff);
    Ok(GateResult {
        tapes_of,
        against,
        replayed: replay.replayed,
        changed: replay.changed,
        diverged: replay.diverged,
        not_identical: replay.differing,
        differing: replay.results,
        passed,
        took_ms: started.elapsed().as_millis() as u64,
        unreachable,
    })
}

/// Why a gate that did not pass refused the move, naming the fix.
pub(crate) fn refusal(name: &str, result: &GateResult) -> String {
    let GateResult {
        tapes_of, against, ..
    } = result;
    if result.replayed == 0 {
        return format!(
            "the gate found no tapes of {name}@{tapes_of} to replay against version {against}: \
             send it traffic first, widen the window (since), or promote without the gate"
        );
    }
    if !result.unreachable.is_empty() {
        return format!(
            "the gate could not replay the tapes of {} node(s) that did not answer: try again, \
             or promote without the gate",
            result.unreachable.len()
        );
    }
    let ids: Vec<String> = result
        .differing
        .iter()
        .take(5)
        .map(|r| format!("{} ({})", r.id, r.verdict))
        .collect();
    format!(
        "the gate refused version {against}: {} of {} tapes of version {tapes_of} replay \
         differently ({}{}); see `gate.differing`, or accept the differences (accept_diff, \
         `hearth promote --gate --accept-diff`)",
        result.not_identical,
        result.replayed,
        ids.join(", "),
        if result.not_identical > ids.len() {
            ", …"
        } else {
            ""
        }
    )
}
