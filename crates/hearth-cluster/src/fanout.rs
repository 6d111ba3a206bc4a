//! Questions a gateway asks every node, for what each node keeps to itself
//! (its recordings, and the replays that run beside them), and how the
//! answers are put together into one.
//!
//! The caller's credentials are passed on (tokens live in the shared
//! store, so every node knows them); a node that did not answer is named
//! in the result's `unreachable`, so the caller knows what it is not
//! seeing; a node's own error (a status other than 200 or 404) is the
//! caller's error.

use std::sync::Arc;

use bytes::Bytes;
use displaydoc::Display;
use http::{HeaderMap, Method, header};
use serde_json::{Value, json};
use thiserror::Error;

use crate::Gateway;

/// A node that did not answer, and why.
pub type Unanswered = (Arc<str>, String);

/// Why a question to every node has no answer.
#[derive(Debug, Display, Error)]
pub enum FanoutError {
    /// node {node} answered {status}: {text}
    NodeError {
        node: Arc<str>,
        status: u16,
        text: String,
    },
    /// no recording {id} on any node{also}
    NotFound { id: String, also: String },
}

/// What a fan-out passes on of the caller's headers: its credentials and
/// the body's type.
fn passed_on(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for h in [header::AUTHORIZATION, header::CONTENT_TYPE] {
        if let Some(v) = headers.get(&h) {
            out.insert(h, v.clone());
        }
    }
    out
}

/// `path` with the caller's query, as a node is asked the same request.
pub fn with_query(path: String, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    }
}

/// The `unreachable` list of a result.
pub fn unreachable(failed: &[Unanswered]) -> Value {
    json!(
        failed
            .iter()
            .map(|(node, why)| json!({"node": node.as_ref(), "error": why}))
            .collect::<Vec<_>>()
    )
}

/// Each node's JSON answer to `path`, and the nodes that did not answer.
/// A node that has none (404) is left out.
async fn ask_all(
    g: &Gateway,
    method: Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<(Vec<(Arc<str>, Value)>, Vec<Unanswered>), FanoutError> {
    let mut answers = Vec::new();
    let mut failed = Vec::new();
    for (node, answer) in g
        .ask_nodes(method, path, &passed_on(headers), Bytes::new())
        .await
    {
        match answer {
            Ok((200, bytes)) => match serde_json::from_slice(&bytes) {
                Ok(v) => answers.push((node, v)),
                Err(e) => failed.push((node, format!("unreadable answer: {e}"))),
            },
            Ok((404, _)) => {}
            Ok((status, bytes)) => {
                return Err(FanoutError::NodeError {
                    node,
                    status,
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                });
            }
            Err(e) => failed.push((node, e)),
        }
    }
    Ok((answers, failed))
}

/// `GET /v1/functions/{name}/recordings` (`function` given) or `GET
/// /v1/recordings` across the cluster: every node's tapes, newest first
/// (ids sort by time), each with its node, at most `limit`; for one
/// function, also how many are on machines whose nodes left.
pub async fn recordings(
    g: &Gateway,
    tenant: &str,
    function: Option<&str>,
    query: Option<&str>,
    limit: usize,
    headers: &HeaderMap,
) -> Result<Value, FanoutError> {
    let path = match function {
        Some(name) => format!("/v1/functions/{name}/recordings"),
        None => "/v1/recordings".to_string(),
    };
    let (answers, failed) = ask_all(g, Method::GET, &with_query(path, query), headers).await?;
    let recordings = merge_recordings(answers, limit);
    // A full page has a next, older than its oldest: every node lists
    // from there.
    let next_before = (recordings.len() >= limit.max(1))
        .then(|| recordings.last().map(|e| e["id"].clone()))
        .flatten();
    let mut merged = json!({
        "tenant": tenant,
        "recordings": recordings,
        "unreachable": unreachable(&failed),
    });
    if let Some(next) = next_before {
        merged["next_before"] = next;
    }
    if let Some(name) = function {
        merged["name"] = name.into();
        // Tapes on machines whose nodes left: out of reach until a node
        // starts there again.
        merged["away"] = json!(g.away_tapes(tenant, name).await);
    }
    Ok(merged)
}

/// `GET /v1/stats` across the cluster: each function's minutes, summed
/// over the nodes. A minute's p50 and p99 are the highest any node saw (a
/// bound: quantiles do not add).
pub async fn stats(g: &Gateway, tenant: &str, headers: &HeaderMap) -> Result<Value, FanoutError> {
    let (answers, failed) = ask_all(g, Method::GET, "/v1/stats", headers).await?;
    let mut functions: std::collections::BTreeMap<String, std::collections::BTreeMap<i64, Value>> =
        Default::default();
    for (_, answer) in answers {
        let Some(fs) = answer["functions"].as_object() else {
            continue;
        };
        for (name, minutes) in fs {
            let merged = functions.entry(name.clone()).or_default();
            for m in minutes.as_array().into_iter().flatten() {
                let t = m["t_ms"].as_i64().unwrap_or_default();
                let into = merged.entry(t).or_insert_with(
                    || json!({"t_ms": t, "count": 0, "errors": 0, "refused": 0, "p50_ms": 0.0, "p99_ms": 0.0}),
                );
                for k in ["count", "errors", "refused"] {
                    into[k] = json!(into[k].as_u64().unwrap_or(0) + m[k].as_u64().unwrap_or(0));
                }
                for k in ["p50_ms", "p99_ms"] {
                    into[k] = json!(
                        into[k]
                            .as_f64()
                            .unwrap_or(0.0)
                            .max(m[k].as_f64().unwrap_or(0.0))
                    );
                }
            }
        }
    }
    let functions: serde_json::Map<String, Value> = functions
        .into_iter()
        .map(|(name, minutes)| (name, Value::from(minutes.into_values().collect::<Vec<_>>())))
        .collect();
    Ok(json!({
        "tenant": tenant,
        "functions": functions,
        "unreachable": unreachable(&failed),
    }))
}

fn merge_recordings(answers: Vec<(Arc<str>, Value)>, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    for (node, mut answer) in answers {
        if let Some(list) = answer["recordings"].as_array_mut() {
            for mut r in list.drain(..) {
                r["node"] = json!(node.as_ref());
                all.push(r);
            }
        }
    }
    all.sort_by(|a, b| b["id"].as_str().cmp(&a["id"].as_str()));
    all.truncate(limit);
    all
}

/// The answer of the node that holds recording `id` to `path_and_query`
/// (`GET /v1/recordings/{id}[/…]`, `POST …/replay`: a replay runs there,
/// beside its tape): the node, its status and its bytes as they are.
pub async fn on_recordings_node(
    g: &Gateway,
    method: Method,
    id: &str,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<(Arc<str>, u16, Bytes), FanoutError> {
    let mut failed = Vec::new();
    let mut found = None;
    for (node, answer) in g
        .ask_nodes(method, path_and_query, &passed_on(headers), Bytes::new())
        .await
    {
        match answer {
            Ok((404, _)) => {}
            Ok((status, bytes)) if found.is_none() => found = Some((node, status, bytes)),
            Ok(_) => {}
            Err(e) => failed.push((node, e)),
        }
    }
    found.ok_or_else(|| FanoutError::NotFound {
        id: id.to_string(),
        also: if failed.is_empty() {
            String::new()
        } else {
            format!(
                "; {} node(s) did not answer: {}",
                failed.len(),
                unreachable(&failed)
            )
        },
    })
}

/// `POST /v1/functions/{name}/replay?against=N…` across the cluster: every
/// node replays its own recorded traffic; the reports are added up.
pub async fn replay_traffic(
    g: &Gateway,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<Value, FanoutError> {
    let (answers, failed) = ask_all(g, Method::POST, path_and_query, headers).await?;
    let mut total = sum_replays(answers);
    total["unreachable"] = unreachable(&failed);
    Ok(total)
}

fn sum_replays(answers: Vec<(Arc<str>, Value)>) -> Value {
    let mut total =
        json!({"replayed": 0, "changed": 0, "diverged": 0, "differing": 0, "results": []});
    for (node, answer) in answers {
        for key in ["replayed", "changed", "diverged", "differing"] {
            let sum = total[key].as_u64().unwrap_or(0) + answer[key].as_u64().unwrap_or(0);
            total[key] = json!(sum);
        }
        for key in ["name", "against"] {
            total[key] = answer[key].clone();
        }
        if let (Some(all), Some(results)) = (
            total["results"].as_array_mut(),
            answer["results"].as_array(),
        ) {
            for r in results {
                let mut r = r.clone();
                r["node"] = json!(node.as_ref());
                all.push(r);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordings_from_every_node_are_merged_newest_first_within_the_limit() {
        let answers = vec![
            (
                "a".into(),
                json!({"recordings": [{"id": "01"}, {"id": "04"}]}),
            ),
            (
                "b".into(),
                json!({"recordings": [{"id": "03"}, {"id": "02"}]}),
            ),
        ];
        let merged = merge_recordings(answers, 3);
        let ids: Vec<(&str, &str)> = merged
            .iter()
            .map(|r| (r["id"].as_str().unwrap(), r["node"].as_str().unwrap()))
            .collect();
        assert_eq!(ids, [("04", "a"), ("03", "b"), ("02", "b")]);
    }

    #[test]
    fn replay_reports_are_added_up_and_each_result_names_its_node() {
        let answers = vec![
            (
                "a".into(),
                json!({"name": "f", "against": 2, "replayed": 3, "changed": 1, "diverged": 0,
                       "results": [{"id": "x"}]}),
            ),
            (
                "b".into(),
                json!({"name": "f", "against": 2, "replayed": 2, "changed": 0, "diverged": 1,
                       "results": [{"id": "y"}]}),
            ),
        ];
        let total = sum_replays(answers);
        assert_eq!(
            (&total["replayed"], &total["changed"], &total["diverged"]),
            (&json!(5), &json!(1), &json!(1))
        );
        assert_eq!(total["against"], 2);
        assert_eq!(total["results"][1], json!({"id": "y", "node": "b"}));
    }
}
