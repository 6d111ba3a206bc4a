//! One invocation's conversation with a handler: the request out, then
//! logs and host calls in until the response (or an error) arrives. A
//! streaming invocation's handler may answer in pieces instead: `head`,
//! then `chunk`s of at most 64 KiB, then `end`.

use hearth_core::LogStream;
use hearth_core::{InvokeError, Request, Response};
use hearth_host::{HostCtx, OutboundRequest, ResponseHead, ResponseSink};
use serde_json::{Value, json};
use tokio::net::UnixStream;

use crate::proto::{Frame, read_frame, write_frame};

/// Where a path the caller must not see begins: the node's own directory
/// for the process tier (packages are imported from install caches under
/// it before a handler enters its sandbox, so their files keep host paths
/// in tracebacks), and what it is shown as.
pub(crate) struct HostPath<'a> {
    pub dir: &'a str,
}

/// What a tenant is shown of the node's directory.
const SHOWN_AS: &str = "/hearth";

impl HostPath<'_> {
    /// `text` with the node's directory replaced by [`SHOWN_AS`].
    pub fn scrub<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        if self.dir.len() > 1 && text.contains(self.dir) {
            text.replace(self.dir, SHOWN_AS).into()
        } else {
            text.into()
        }
    }
}

/// Sends the request and serves the handler's host calls until it
/// answers: whole (`Some`), or, given `out`, in pieces sent there (`None`).
/// Log lines and errors are given back with the node's paths scrubbed.
pub(crate) async fn converse(
    conn: &mut UnixStream,
    req: &Request,
    host: &HostCtx,
    (max_response, paths): (usize, &HostPath<'_>),
    mut out: Option<&mut ResponseSink>,
) -> std::io::Result<Result<Option<Response>, InvokeError>> {
    let meta = host.meta();
    let v = &meta.version;
    let header = json!({
        "op": "invoke",
        "id": meta.id.to_string(),
        "method": req.method,
        "path": req.path,
        "query": req.query,
        "headers": req.headers,
        // The invocation's start, from the taped clock: the Lambda event's
        // time and Node's frozen `Date`, without a host call to ask for it.
        "wall_ms": host.wall_clock_nanos() / 1_000_000,
        "tenant": v.tenant,
        "function": v.name,
        "version": v.version,
        "memory_mib": v.spec.limits.memory_mib,
        "remaining_ms": host.remaining().as_millis() as u64,
        "streaming": out.is_some(),
    });
    write_frame(conn, &header, &req.body).await?;
    // A response the handler sent before its work after the response
    // (`waitUntil`), which ends with `done`.
    let mut answered: Option<Response> = None;
    loop {
        let frame = read_frame(conn, max_response.max(1 << 20)).await?;
        match frame.str("op") {
            "log" => {
                let stream = if frame.str("stream") == "stderr" {
                    LogStream::Stderr
                } else {
                    LogStream::Log
                };
                let level = match frame.str("level") {
                    "" => "info",
                    l => l,
                };
                host.log(
                    stream,
                    level,
                    &paths.scrub(&String::from_utf8_lossy(&frame.body)),
                );
            }
            "call" => {
                let (reply, body) = host_call(host, &frame).await;
                write_frame(conn, &reply, &body).await?;
            }
            "response" => {
                // Streamed, the node bounds the body (`--max-stream-bytes`).
                if frame.body.len() > max_response && out.is_none() {
                    return Ok(Err(InvokeError::ResponseTooLarge {
                        limit_bytes: max_response,
                    }));
                }
                let response = Response {
                    status: status_of(&frame),
                    headers: frame.pairs("headers"),
                    body: frame.body.into(),
                };
                if frame.header.get("after").and_then(Value::as_bool) != Some(true) {
                    return Ok(Ok(Some(response)));
                }
                // Work after the response follows: the caller has it now
                // where the node lets it, and the exchange goes on.
                if out.is_none() {
                    host.answer_early(&response);
                }
                answered = Some(response);
            }
            "done" => {
                return match answered.take() {
                    Some(response) => Ok(Ok(Some(response))),
                    None => Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the handler said it was done before it answered",
                    )),
                };
            }
            "head" | "chunk" | "end" => {
                let Some(out) = out.as_deref_mut() else {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the handler streamed an invocation that does not stream",
                    ));
                };
                match frame.str("op") {
                    "head" => out.head(ResponseHead {
                        status: status_of(&frame),
                        headers: frame.pairs("headers"),
                        length: None,
                    }),
                    "chunk" if out.started() => {
                        if let Err(e) = out.send(frame.body.into()).await {
                            return Ok(Err(e));
                        }
                    }
                    "end" if out.started() => return Ok(Ok(None)),
                    _ => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "the handler streamed a body before its head",
                        ));
                    }
                }
            }
            "error" => {
                let msg = match frame.str("message") {
                    "" => "uncaught exception",
                    m => m,
                };
                return Ok(Err(InvokeError::Function(paths.scrub(msg).into_owned())));
            }
            other => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unexpected message {other:?} from the sandbox"),
                ));
            }
        }
    }
}

/// A response frame's status, or 500 if it is not one.
fn status_of(frame: &Frame) -> u16 {
    let status = frame
        .header
        .get("status")
        .and_then(Value::as_u64)
        .unwrap_or(200);
    if (100..=599).contains(&status) {
        status as u16
    } else {
        500
    }
}

/// Runs one host call a handler asked for; the reply header and body.
async fn host_call(host: &HostCtx, f: &Frame) -> (Value, Vec<u8>) {
    let hex_arg = |k: &str| hex::decode(f.str(k)).map_err(|_| format!("{k} must be hex"));
    let result: Result<(Value, Vec<u8>), String> = async {
        match f.str("call") {
            "kv_get" => {
                let v = host
                    .kv_get(hex_arg("key")?)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(match v {
                    Some(v) => (json!({"found": true}), v),
                    None => (json!({"found": false}), Vec::new()),
                })
            }
            "kv_set" => {
                host.kv_set(hex_arg("key")?, f.body.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok((json!({}), Vec::new()))
            }
            "kv_delete" => {
                let existed = host
                    .kv_delete(hex_arg("key")?)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok((json!({"existed": existed}), Vec::new()))
            }
            "kv_list" => {
                let keys = host
                    .kv_list(hex_arg("prefix")?)
                    .await
                    .map_err(|e| e.to_string())?;
                let keys: Vec<String> = keys.iter().map(hex::encode).collect();
                Ok((json!({"keys": keys}), Vec::new()))
            }
            "http_fetch" => {
                let headers = f.pairs("headers");
                let method = match f.str("method") {
                    "" => "GET",
                    m => m,
                };
                let resp = host
                    .http_fetch(OutboundRequest {
                        method: method.to_ascii_uppercase(),
                        url: f.str("url").to_string(),
                        headers,
                        body: f.body.clone(),
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                Ok((
                    json!({"status": resp.status, "headers": resp.headers}),
                    resp.body,
                ))
            }
            // Clocks and randomness come from the host so they are taped
            // (the helpers patch `time` and `os.urandom` to ask here).
            "clock_wall" => Ok((json!({"nanos": host.wall_clock_nanos()}), Vec::new())),
            "clock_monotonic" => Ok((json!({"nanos": host.monotonic_nanos()}), Vec::new())),
            "random" => {
                let n = f.header.get("n").and_then(Value::as_u64).unwrap_or(0) as usize;
                if n > 65_536 {
                    return Err(format!("at most 65536 random bytes per call, not {n}"));
                }
                let mut buf = vec![0u8; n];
                host.fill_random(&mut buf);
                Ok((json!({}), buf))
            }
            other => Err(format!("unknown host call {other:?}")),
        }
    }
    .await;
    match result {
        Ok(r) => r,
        Err(e) => (json!({"error": e}), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_directory_is_scrubbed_from_what_a_tenant_sees() {
        let paths = HostPath {
            dir: "/var/lib/hearth/data/proc",
        };
        let tb = "File \"/var/lib/hearth/data/proc/cache/pip/ab/tinypkg/__init__.py\", line 2";
        assert_eq!(
            paths.scrub(tb),
            "File \"/hearth/cache/pip/ab/tinypkg/__init__.py\", line 2"
        );
        assert!(matches!(
            paths.scrub("/code/handler.py"),
            std::borrow::Cow::Borrowed(_)
        ));
        // A directory of "/" would scrub every path: it is left alone.
        assert_eq!(HostPath { dir: "/" }.scrub("/code/x.py"), "/code/x.py");
    }
}
