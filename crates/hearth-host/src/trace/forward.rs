//! A gateway's spans: one over each invocation it forwards, and one per
//! attempt to send it to a node (docs/observability.md). The node's
//! tracer starts them (`hearth_node::trace::Tracing::forward`); the
//! gateway (`hearth-cluster`) notes what happened on them.

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::Tracer;

/// A gateway's span over one invocation it forwards, with the node that
/// answered, and a retry as an event naming the node that failed first.
/// Each attempt to send it to a node is a client span under it, when the
/// trace is sampled ([`ForwardSpan::attempt`]): the parent of that node's
/// invocation span.
/// It ends when dropped: with the response's body, which streams from the
/// node through the gateway.
pub struct ForwardSpan {
    cx: Context,
    tracer: Tracer,
}

impl ForwardSpan {
    /// The span of `cx`, whose attempts `tracer` starts.
    pub fn new(cx: Context, tracer: Tracer) -> ForwardSpan {
        ForwardSpan { cx, tracer }
    }

    /// This span as the `traceparent` the client gets.
    pub fn traceparent(&self) -> String {
        super::traceparent(self.cx.span().span_context())
    }

    /// Starts the span of one attempt to send the invocation as `method`
    /// to node `node` at `url` (its base URL); `resend` counts the
    /// attempts before it. The span names the node's address, not the
    /// request's URL, whose query is the caller's. `None` when this trace
    /// is not sampled: its attempts would not be exported either, and the
    /// node gets this span as `traceparent` instead.
    pub fn attempt(&self, method: &str, node: &str, url: &str, resend: u32) -> Option<AttemptSpan> {
        if !self.cx.span().is_recording() {
            return None;
        }
        let mut attributes = vec![
            KeyValue::new("hearth.node", node.to_string()),
            KeyValue::new("http.request.method", method.to_string()),
        ];
        if let Ok(url) = url::Url::parse(url) {
            if let Some(host) = url.host_str() {
                attributes.push(KeyValue::new("server.address", host.to_string()));
            }
            if let Some(port) = url.port_or_known_default() {
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
        }
        if resend > 0 {
            attributes.push(KeyValue::new(
                "http.request.resend_count",
                i64::from(resend),
            ));
        }
        let span = self
            .tracer
            .span_builder(method.to_string())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.cx);
        Some(AttemptSpan(Context::current_with_span(span)))
    }

    /// The node answered `status`: `node` ran invocation `invocation`,
    /// after `retried_from` failed, if it did.
    pub fn answered(
        &self,
        invocation: Option<&str>,
        node: &str,
        retried_from: Option<&str>,
        status: u16,
    ) {
        let span = self.cx.span();
        if let Some(first) = retried_from {
            span.add_event(
                "retry",
                vec![KeyValue::new("hearth.failed_node", first.to_string())],
            );
        }
        if let Some(id) = invocation {
            span.set_attribute(KeyValue::new("faas.invocation_id", id.to_string()));
        }
        span.set_attribute(KeyValue::new("hearth.node", node.to_string()));
        answered(&self.cx, status);
    }

    /// No node answered: `kind` and `message` are the gateway's error.
    pub fn failed(&self, kind: &str, message: String) {
        failed(&self.cx, kind, message);
    }
}

impl Drop for ForwardSpan {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// One attempt of a gateway to send an invocation to a node: the node gets
/// its `traceparent`, so the node's invocation span is its child. It ends
/// when dropped: when the attempt failed, or with the response's body.
pub struct AttemptSpan(Context);

impl AttemptSpan {
    /// This span as the `traceparent` the node gets.
    pub fn traceparent(&self) -> String {
        super::traceparent(self.0.span().span_context())
    }

    /// The node answered `status`.
    pub fn answered(&self, status: u16) {
        answered(&self.0, status);
    }

    /// The attempt failed before the node answered, or the node refused
    /// it: `kind` (`timeout`, `refused`, `node_failed`) and why.
    pub fn failed(&self, kind: &str, message: String) {
        failed(&self.0, kind, message);
    }
}

impl Drop for AttemptSpan {
    fn drop(&mut self) {
        self.0.span().end();
    }
}

/// Notes on the span of `cx` that the node answered `status` (a 5xx is
/// an error).
fn answered(cx: &Context, status: u16) {
    let span = cx.span();
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(status),
    ));
    if status >= 500 {
        span.set_status(Status::error(format!("the node answered {status}")));
    }
}

/// Marks the span of `cx` as failed with `kind` and `message`.
fn failed(cx: &Context, kind: &str, message: String) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("error.type", kind.to_string()));
    span.set_status(Status::error(message));
}
