//! Invocations whose bodies stream ([`Node::invoke_streaming`]): the
//! request is handed to the function as it arrives, the response to the
//! caller as the function writes it (`docs/wasm-tier.md`, "Streaming
//! bodies").
//!
//! The invocation may outlive the call that starts it: once its head is
//! out it goes on in a task of its own, which holds the admission permit,
//! the tenant's share and the sandbox until the response's last byte is
//! taken, then counts, logs and tapes it as a whole invocation is.

use std::sync::Arc;

use hearth_core::{FunctionVersion, InvocationId, InvokeError, Request, Response};
use hearth_host::{BodyStream, HostCtx, Kept, ResponseHead, ResponseSink, Tee};
use hearth_record::{BodyDigest, Streamed};

use hearth_core::GatewayAttempt;

use super::{Node, NodeError, Ready, StartKind};

/// Bytes of each streamed body a tape keeps, at most; less when the
/// function's tape budget is small (a quarter of it).
pub const KEPT_BYTES: usize = 64 << 10;

/// A streaming invocation once its head is known.
pub struct Streaming {
    pub id: InvocationId,
    pub version: u32,
    pub start: StartKind,
    /// The function's status and headers, or why there is no response
    /// (then `body` is empty).
    pub head: Result<ResponseHead, InvokeError>,
    /// The response body, as the function writes it. It ends in an error
    /// if the function fails after its head went out.
    pub body: BodyStream,
    /// Its span as a W3C `traceparent`, when the node exports traces (the
    /// span ends when the body does).
    pub traceparent: Option<Box<str>>,
}

impl Node {
    /// Runs one invocation of `v` (made [`ready`](Self::ready) in a tier
    /// that [streams](Ready::streams)) with its request body arriving
    /// through `body`; answers once the function has set its response's
    /// head, or failed before it. `req.body` is empty.
    pub async fn invoke_streaming(
        self: &Arc<Self>,
        v: &Arc<FunctionVersion>,
        ready: Ready,
        req: Request,
        body: BodyStream,
        forwarded: Option<GatewayAttempt>,
    ) -> Result<Streaming, NodeError> {
        let Ready {
            prepared,
            tier,
            start,
        } = ready;
        let (mut admitted, host) = match self.begin(v, forwarded, &req, true).await {
            Ok(begun) => begun,
            Err(refused) => {
                return Ok(Streaming {
                    id: refused.id,
                    version: v.version,
                    start,
                    head: Err(refused
                        .result
                        .expect_err("a refused invocation has no response")),
                    body: Box::pin(futures::stream::empty()),
                    traceparent: None,
                });
            }
        };
        // Its answer goes through the sink: a whole response cannot leave
        // early here (`Answer::early` then fails and counts nothing), a
        // finished body can (`HostCtx::answer_streamed_early`).
        drop(admitted.answered.take());
        let (id, started, taping) = (admitted.id, admitted.started, admitted.taping);
        let traceparent = admitted
            .meta
            .trace
            .as_ref()
            .map(|t| hearth_host::trace::traceparent(&t.span_context()).into_boxed_str());
        // An invocation without a tape keeps nothing of its bodies and
        // hashes none: hashing was nearly half the daemon's CPU streaming.
        let keep = taping.map_or(0, |_| kept_bytes(&host));
        let max = self.config.max_stream_bytes;
        let request_tee = Arc::new(parking_lot::Mutex::new(Tee::new(keep, max)));
        let body = hearth_host::teed(body, request_tee.clone());
        let (mut sink, source) = ResponseSink::new(keep, max);
        let (head, response_body) = source.split();

        let node = self.clone();
        let version = v.version;
        let v = v.clone();
        let mut invocation = Box::pin(async move {
            let result = match prepared.instantiate().await {
                Ok(sandbox) => node.stream_in(sandbox, &req, body, &host, &mut sink).await,
                Err(e) => Err(e),
            };
            node.end_journal(forwarded, &host, &admitted.meta);
            // A request that did not arrive whole fails the invocation,
            // whatever the function made of it.
            let result = match request_tee.lock().failure() {
                Some(e) => Err(e.clone()),
                None => result,
            };
            // So does one past its tape budget; a response still whole in
            // the sink is then answered as this error.
            let result = super::within_tape_budget(&host, result);
            let (sent_head, response) = sink.end(&result);
            let request = std::mem::replace(&mut *request_tee.lock(), Tee::new(0, 0)).finish();
            // Bodies kept whole need no digest; a tape with neither cut is
            // a tape like any other.
            let streamed = Streamed {
                request: digest(&request),
                response: digest(&response),
            };
            let streamed = (streamed != Streamed::default()).then_some(streamed);
            let result = as_taped(result, sent_head, response.start);
            let done = node.finish(&v, id, started, (start, tier), Some(host), result);
            let req = Request {
                body: request.start,
                ..req
            };
            node.record(&v, tier, taping, (&req, streamed.as_ref()), done)
                .await;
            drop(admitted);
        });

        // Run here until the head is known: a response the function
        // finished before its head went out (most are) then needs no other
        // task, and no wake-ups across threads. One still streaming goes
        // on in a task of its own.
        let mut head = head;
        let head = tokio::select! {
            biased;
            () = &mut invocation => head.await,
            head = &mut head => {
                tokio::spawn(invocation);
                head
            }
        };
        let head = head.unwrap_or_else(|_| {
            Err(InvokeError::Crashed(
                "the invocation ended without an answer".into(),
            ))
        });
        let body: BodyStream = match head {
            Ok(_) => response_body,
            Err(_) => Box::pin(futures::stream::empty()),
        };
        Ok(Streaming {
            id,
            version,
            start,
            head,
            body,
            traceparent,
        })
    }
}

impl Node {
    /// Replays a streamed invocation in `sandbox`: its request body (whole
    /// on the tape) in one piece, its response body read and let go as it
    /// comes. The response as taped (its first bytes) and its digest.
    pub(super) async fn replay_streaming(
        &self,
        sandbox: Box<dyn hearth_host::Sandbox>,
        request: &Request,
        host: &HostCtx,
    ) -> (Result<Response, InvokeError>, Option<BodyDigest>) {
        let head = Request {
            body: Default::default(),
            ..request.clone()
        };
        let body: BodyStream = Box::pin(futures::stream::iter([Ok(request.body.clone())]));
        let (mut sink, source) = ResponseSink::new(kept_bytes(host), self.config.max_stream_bytes);
        let drained = tokio::spawn(futures::StreamExt::for_each(source.split().1, |_| async {}));
        let result = self.stream_in(sandbox, &head, body, host, &mut sink).await;
        let (sent_head, kept) = sink.end(&result);
        let _ = drained.await;
        let digest = digest(&kept);
        (as_taped(result, sent_head, kept.start), digest)
    }

    /// [`attempt_in`](Node::attempt_in) for a streaming sandbox: runs
    /// `req` in it, counted as live, and waits for the calls it left.
    async fn stream_in(
        &self,
        mut sandbox: Box<dyn hearth_host::Sandbox>,
        req: &Request,
        body: BodyStream,
        host: &HostCtx,
        sink: &mut ResponseSink,
    ) -> Result<(), InvokeError> {
        self.metrics.live_sandboxes.inc();
        let result = self
            .long_runs
            .run(
                sandbox.invoke_streaming(req, body, host.clone(), sink),
                host.meta().cpu.as_deref(),
            )
            .await;
        host.settle().await;
        drop(sandbox);
        self.metrics.live_sandboxes.dec();
        result
    }
}

/// A streamed response as its tape keeps it: its head and `start`, the
/// first bytes of its body.
fn as_taped(
    result: Result<(), InvokeError>,
    head: Option<ResponseHead>,
    start: bytes::Bytes,
) -> Result<Response, InvokeError> {
    result?;
    let head =
        head.ok_or_else(|| InvokeError::Crashed("the response ended before its head".into()))?;
    Ok(Response {
        status: head.status,
        headers: head.headers,
        body: start,
    })
}

/// Bytes of each streamed body `host`'s tape keeps.
pub(super) fn kept_bytes(host: &HostCtx) -> usize {
    (host.tape_budget() / 4).min(KEPT_BYTES)
}

/// The digest a tape keeps of a body cut to its first bytes; `None` for a
/// body it keeps whole.
pub(super) fn digest(kept: &Kept) -> Option<BodyDigest> {
    Some(BodyDigest {
        len: kept.len,
        blake3: kept.blake3?,
    })
}
