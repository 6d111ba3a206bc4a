//! OpenTelemetry traces of invocations (docs/observability.md), sent to
//! the exporter the binary makes when the operator names a collector
//! (`--otlp-endpoint`: OTLP over HTTP, `hearth/src/otlp.rs`); off
//! otherwise, when an invocation pays one `None` check for it.
//!
//! Every invocation is a server span: a child of the caller's, if the
//! request carried a valid W3C `traceparent`, else the root of a new trace.
//! Its KV and HTTP calls are its children ([`hearth_host::trace`]); the
//! js tier's fallback to the process tier, compiled code leaving for the
//! isolate and a gateway's retry are events on it.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use hearth_core::{FunctionVersion, InvocationId, Request, Tier};
use hearth_host::trace::{ForwardSpan, InvocationTrace};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceContextExt, TraceId, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler,
    SdkTracerProvider, SpanExporter, Tracer,
};

pub use hearth_host::trace::MAX_TRACESTATE_BYTES;
use hearth_host::trace::within_bound;

/// Spans waiting for the exporter, at most; past it new ones are dropped
/// (and counted by the SDK), so a collector that is slow or down costs a
/// bounded amount of memory.
const MAX_QUEUED_SPANS: usize = 8192;

thread_local! {
    /// The trace id the next new trace on this thread takes: set by
    /// [`Tracing::begin`] around the one span it starts.
    static BEGINS: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Ids as the SDK's random generator makes them, except a trace that an
/// invocation begins, whose id is the invocation's
/// ([`InvocationId::trace_id`]: a tape then says which trace it began,
/// and a trace id found in a collector leads to its tapes). The SDK takes
/// no trace id from a span builder, so [`BEGINS`] hands it over, on the
/// thread starting the span, for that one span.
#[derive(Debug, Default)]
struct InvocationTraceIds(RandomIdGenerator);

impl IdGenerator for InvocationTraceIds {
    fn new_trace_id(&self) -> TraceId {
        BEGINS.take().unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

/// The node's tracer and where its spans go.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: Tracer,
    node: String,
    /// How callers reach this node: `https` where its URL says so.
    scheme: &'static str,
}

impl Tracing {
    /// Sends spans to `exporter` (the binary makes an OTLP/HTTP one for
    /// `--otlp-endpoint`), in batches. `node` names this node in every
    /// span. Of the traces that begin here (no valid `traceparent` came),
    /// `ratio` are sampled, chosen by trace id; one that came follows its
    /// caller's sampled flag.
    pub fn new(exporter: impl SpanExporter + 'static, node: &str, ratio: f64) -> Tracing {
        let batches = BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUED_SPANS)
            .with_scheduled_delay(Duration::from_millis(500))
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batches)
            .build();
        let resource = Resource::builder()
            .with_service_name("hearth")
            .with_attribute(KeyValue::new("service.instance.id", node.to_string()))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)));
        let provider = SdkTracerProvider::builder()
            .with_id_generator(InvocationTraceIds::default())
            .with_sampler(sampler)
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "hearth");
        Tracing {
            provider,
            tracer,
            node: node.to_string(),
            scheme: if node.starts_with("https://") {
                "https"
            } else {
                "http"
            },
        }
    }

    /// Starts the span of invocation `id` of `v`, under the caller's
    /// `traceparent` if `req` has a valid one. Its attributes follow
    /// OpenTelemetry's FaaS and HTTP server conventions (`faas.*`,
    /// `http.request.method`, `url.*`, `server.*` from the `Host` the
    /// caller named), and Hearth's own (`hearth.*`).
    pub(crate) fn begin(
        &self,
        v: &FunctionVersion,
        id: InvocationId,
        req: &Request,
    ) -> Arc<InvocationTrace> {
        let parent = hearth_host::trace::caller(&req.headers);
        if !parent.span().span_context().is_valid() {
            BEGINS.set(Some(TraceId::from(id.trace_id())));
        }
        let mut attributes = vec![
            KeyValue::new("faas.invocation_id", id.to_string()),
            KeyValue::new("faas.name", v.name.clone()),
            KeyValue::new("faas.version", v.version.to_string()),
            // A schedule's firing or a broker's message (the header only
            // the queue and the triggers may set): OpenTelemetry's
            // `timer` and `pubsub`.
            KeyValue::new(
                "faas.trigger",
                match req.header(hearth_core::EVENT_HEADER) {
                    Some("scheduled") => "timer",
                    Some("nats") => "pubsub",
                    _ => "http",
                },
            ),
            KeyValue::new("hearth.tenant", v.tenant.clone()),
            KeyValue::new("hearth.node", self.node.clone()),
            KeyValue::new("http.request.method", req.method.clone()),
            // The function's path (a version pinned in it, `name@N`, is
            // `faas.version`; its root is the function's own).
            KeyValue::new(
                "url.path",
                format!(
                    "/fn/{}/{}{}",
                    v.tenant,
                    v.name,
                    if req.path == "/" { "" } else { &req.path }
                ),
            ),
            KeyValue::new("url.scheme", self.scheme),
        ];
        if let Some((host, port)) = req
            .header("host")
            .and_then(|h| host_and_port(h, self.scheme))
        {
            attributes.push(KeyValue::new("server.address", host.to_string()));
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        let span = self
            .tracer
            .span_builder(v.name.clone())
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        // Unused if the provider has shut down: not left for another span.
        BEGINS.take();
        Arc::new(InvocationTrace::new(
            Context::current_with_span(span),
            self.tracer.clone(),
        ))
    }

    /// Starts a gateway's span over an invocation of `v` it forwards,
    /// under the caller's `traceparent` if `headers` has a valid one.
    pub fn forwarding(
        &self,
        v: &FunctionVersion,
        method: &str,
        headers: &http::HeaderMap,
    ) -> ForwardSpan {
        let parent = TraceContextPropagator::new().extract(&HeaderMapOf(headers));
        let span = self
            .tracer
            .span_builder(format!("forward {}", v.name))
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("faas.name", v.name.clone()),
                KeyValue::new("faas.version", v.version.to_string()),
                KeyValue::new("hearth.tenant", v.tenant.clone()),
                KeyValue::new("hearth.gateway", self.node.clone()),
                KeyValue::new("http.request.method", method.to_string()),
            ])
            .start_with_context(&self.tracer, &parent);
        ForwardSpan::new(Context::current_with_span(span), self.tracer.clone())
    }

    /// Flushes what is queued and stops exporting (at shutdown).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "the trace exporter did not shut down cleanly");
        }
    }
}

/// Ends an invocation's span: the tier that answered, whether it started
/// cold, and how it ended. A failure, or a 5xx the function answered
/// itself, is the span's error (`error.type` its kind, or the status).
pub(crate) fn end(
    trace: &InvocationTrace,
    tier: Tier,
    cold: bool,
    status: u16,
    failure: Option<(&str, String)>,
) {
    let span = trace.context().span();
    span.set_attribute(KeyValue::new("hearth.tier", tier.as_str()));
    span.set_attribute(KeyValue::new("faas.coldstart", cold));
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(status),
    ));
    let unspanned = trace.unspanned();
    if unspanned > 0 {
        span.set_attribute(KeyValue::new(
            "hearth.unspanned_calls",
            i64::from(unspanned),
        ));
    }
    match failure {
        Some((kind, message)) => {
            span.set_attribute(KeyValue::new("error.type", kind.to_string()));
            span.set_status(Status::error(message));
        }
        None if status >= 500 => {
            span.set_attribute(KeyValue::new("error.type", status.to_string()));
            span.set_status(Status::error(format!("the function answered {status}")));
        }
        None => {}
    }
    span.end();
}

/// The host and port a `Host` header names (the scheme's default port
/// where it names none); `None` for one that is not a host.
fn host_and_port<'a>(host: &'a str, scheme: &str) -> Option<(&'a str, u16)> {
    let default = if scheme == "https" { 443 } else { 80 };
    let (name, port) = match host.rsplit_once(':') {
        // `[::1]:8080`, `example.com:8080`; a bare IPv6 `[::1]` has no port.
        Some((name, port)) if !port.ends_with(']') => (name, port.parse().ok()?),
        _ => (host, default),
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    (!name.is_empty()).then_some((name, port))
}

/// An event on the invocation's span.
pub(crate) fn event(trace: &InvocationTrace, name: &'static str, attributes: Vec<KeyValue>) {
    trace.context().span().add_event(name, attributes);
}

/// The request's headers as [`hearth_host::trace::caller`] reads them, for a request a gateway holds as an `http::HeaderMap`.
struct HeaderMapOf<'a>(&'a http::HeaderMap);

impl Extractor for HeaderMapOf<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        within_bound(key, self.0.get(key)?.to_str().ok()?)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_host_names_its_port_or_the_schemes() {
        use super::host_and_port;
        assert_eq!(
            host_and_port("example.com:8080", "http"),
            Some(("example.com", 8080))
        );
        assert_eq!(
            host_and_port("example.com", "https"),
            Some(("example.com", 443))
        );
        assert_eq!(host_and_port("[::1]:3000", "http"), Some(("::1", 3000)));
        assert_eq!(host_and_port("[::1]", "http"), Some(("::1", 80)));
        assert_eq!(host_and_port("x:notaport", "http"), None);
        assert_eq!(host_and_port(":80", "http"), None);
    }

    use super::*;
    use opentelemetry::trace::SpanContext;

    fn extracted(headers: &[(&str, &str)]) -> SpanContext {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        hearth_host::trace::caller(&headers)
            .span()
            .span_context()
            .clone()
    }

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_tracestate_is_kept_up_to_its_bound_and_dropped_past_it() {
        let short = "vendor=abc";
        let sc = extracted(&[("traceparent", TP), ("tracestate", short)]);
        assert!(sc.is_valid());
        assert_eq!(sc.trace_state().header(), short);
        let long = format!("vendor={}", "a".repeat(MAX_TRACESTATE_BYTES));
        let sc = extracted(&[("Traceparent", TP), ("tracestate", &long)]);
        assert!(sc.is_valid(), "the traceparent still counts");
        assert_eq!(
            sc.trace_state().header(),
            "",
            "the long tracestate is dropped"
        );
    }

    #[test]
    fn a_gateways_header_map_is_read_with_the_same_bound() {
        let mut h = http::HeaderMap::new();
        h.insert("traceparent", TP.parse().unwrap());
        let long = format!("vendor={}", "a".repeat(MAX_TRACESTATE_BYTES));
        h.insert("tracestate", long.parse().unwrap());
        let cx = TraceContextPropagator::new().extract(&HeaderMapOf(&h));
        let sc = cx.span().span_context().clone();
        assert_eq!(hearth_host::trace::traceparent(&sc), TP);
        assert_eq!(sc.trace_state().header(), "");
        h.insert("tracestate", "vendor=abc".parse().unwrap());
        let cx = TraceContextPropagator::new().extract(&HeaderMapOf(&h));
        assert_eq!(
            cx.span().span_context().trace_state().header(),
            "vendor=abc"
        );
    }

    #[test]
    fn a_traceparent_read_is_the_one_written() {
        let sc = extracted(&[("traceparent", TP)]);
        assert_eq!(hearth_host::trace::traceparent(&sc), TP);
    }
}
