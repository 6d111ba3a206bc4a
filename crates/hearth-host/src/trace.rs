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

use hearth_core::InvocationId;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Span, Tracer};

/// Longest `tracestate` taken from a request: the W3C minimum a vendor
/// must pass on. A longer one is dropped (the `traceparent` is still
/// used): every span of the trace would keep it until exported.
pub const MAX_TRACESTATE_BYTES: usize = 512;

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

    /// Marks the call failed: `kind` is its `error.type`, `why` the
    /// status's message.
    pub(crate) fn failed(&mut self, kind: &'static str, why: String) {
        self.0.set_attribute(KeyValue::new("error.type", kind));
        self.0.set_status(Status::error(why));
    }

    pub(crate) fn set(&mut self, attribute: KeyValue) {
        self.0.set_attribute(attribute);
    }
}

/// The caller's span, as a context to start a span under: from the
/// request's `traceparent` (and `tracestate`, within its bound); an
/// invalid or missing one gives a context without a span.
pub fn caller(headers: &[(String, String)]) -> Context {
    TraceContextPropagator::new().extract(&Headers(headers))
}

/// The trace invocation `id` is in, as 32 hex digits: its caller's, if its
/// request carried a valid `traceparent` (read as [`caller`] reads it),
/// else the one it began ([`InvocationId::trace_id`]). A tape keeps both,
/// so this is also which trace a taped invocation was in.
pub fn trace_of(id: InvocationId, headers: &[(String, String)]) -> String {
    let cx = caller(headers);
    let span = cx.span();
    let sc = span.span_context();
    if sc.is_valid() {
        sc.trace_id().to_string()
    } else {
        format!("{:032x}", id.trace_id())
    }
}

/// A request's headers as the propagator reads them: `traceparent`, and
/// `tracestate` up to [`MAX_TRACESTATE_BYTES`].
struct Headers<'a>(&'a [(String, String)]);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self
            .0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())?;
        within_bound(key, value)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// `value` of header `key`, unless it is a `tracestate` past its bound.
pub fn within_bound<'v>(key: &str, value: &'v str) -> Option<&'v str> {
    (key != "tracestate" || value.len() <= MAX_TRACESTATE_BYTES).then_some(value)
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
