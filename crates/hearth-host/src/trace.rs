//! An invocation's OpenTelemetry trace, as the host sees it: the
//! invocation's span (started and ended by the node), and each KV or HTTP
//! call that goes to the world as a child span. An outbound `fetch` carries
//! its span in a W3C `traceparent` header, added when it is sent and never
//! put on the tape, so tapes and their replays are the same with tracing on
//! or off.
//!
//! Tracing off costs an invocation a `None` check, and one per such call.

mod forward;
pub use forward::{AttemptSpan, ForwardSpan};

use std::sync::atomic::{AtomicU32, Ordering};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Span, Tracer};

/// Child spans one invocation may make; past it, calls go unspanned (and
/// the invocation's span says how many): a function making 100,000 KV
/// calls must not flood the exporter's queue, which every tenant shares.
pub const MAX_CALL_SPANS: u32 = 64;

/// One invocation's trace: the context holding its span, and the tracer
/// its host calls' spans come from.
pub struct InvocationTrace {
    cx: Context,
    tracer: Tracer,
    /// Calls that asked for a span (past [`MAX_CALL_SPANS`], unspanned).
    calls: AtomicU32,
}

impl std::fmt::Debug for InvocationTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvocationTrace")
            .field("span", self.cx.span().span_context())
            .finish()
    }
}

impl InvocationTrace {
    /// `cx` holds the invocation's span, started by the node.
    pub fn new(cx: Context, tracer: Tracer) -> Self {
        InvocationTrace {
            cx,
            tracer,
            calls: AtomicU32::new(0),
        }
    }

    /// The context holding the invocation's span.
    pub fn context(&self) -> &Context {
        &self.cx
    }

    pub fn span_context(&self) -> SpanContext {
        self.cx.span().span_context().clone()
    }

    /// Host calls past [`MAX_CALL_SPANS`] that got no span.
    pub fn unspanned(&self) -> u32 {
        self.calls
            .load(Ordering::Relaxed)
            .saturating_sub(MAX_CALL_SPANS)
    }

    /// A child span for a host call now starting, ended when dropped;
    /// `None` past the invocation's budget of spans.
    pub(crate) fn call(&self, name: &'static str, attributes: Vec<KeyValue>) -> Option<CallSpan> {
        if self.calls.fetch_add(1, Ordering::Relaxed) >= MAX_CALL_SPANS {
            return None;
        }
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.cx);
        Some(CallSpan(span))
    }
}

/// A host call's span; ends when dropped.
pub(crate) struct CallSpan(Span);

impl CallSpan {
    /// The `traceparent` that makes a downstream service's span a child
    /// of this call's.
    pub(crate) fn traceparent(&self) -> String {
        traceparent(self.0.span_context())
    }

    /// Marks the call failed, with why.
    pub(crate) fn failed(&mut self, why: String) {
        self.0.set_status(Status::error(why));
    }

    pub(crate) fn set(&mut self, attribute: KeyValue) {
        self.0.set_attribute(attribute);
    }
}

/// A span context as a W3C `traceparent` header value (version `00`).
pub fn traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}
