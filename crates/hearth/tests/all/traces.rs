//! OpenTelemetry traces end to end: a real OTLP/HTTP receiver (the
//! collector's protobuf, decoded with the project's own `opentelemetry-proto`
//! types) takes the daemon's spans, and an upstream takes the function's
//! `fetch` with its `traceparent`.

use hearth_test_support::require;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;

use crate::harness::Daemon;

/// Every span an OTLP/HTTP receiver on loopback was sent, and the
/// `service.instance.id` of the resource each came with.
#[derive(Clone, Default)]
pub(crate) struct Collector(Arc<Mutex<Vec<(String, Span)>>>);

impl Collector {
    /// Listens on 127.0.0.1:0; its base URL (the `--otlp-endpoint`).
    pub(crate) async fn start(&self) -> String {
        let spans = self.0.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let spans = spans.clone();
                async move {
                    let req = ExportTraceServiceRequest::decode(body).unwrap();
                    for rs in req.resource_spans {
                        let instance = rs
                            .resource
                            .as_ref()
                            .and_then(|r| string_attr(&r.attributes, "service.instance.id"))
                            .unwrap_or_default();
                        for ss in rs.scope_spans {
                            for span in ss.spans {
                                spans.lock().unwrap().push((instance.clone(), span));
                            }
                        }
                    }
                    // An empty ExportTraceServiceResponse.
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    /// The spans received so far.
    pub(crate) fn spans(&self) -> Vec<(String, Span)> {
        self.0.lock().unwrap().clone()
    }

    /// Waits (at most 15 s: the exporter sends every half second) for a
    /// span `found` picks out.
    pub(crate) async fn wait_for(&self, what: &str, found: impl Fn(&Span) -> bool) -> Span {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some((_, s)) = self.spans().into_iter().find(|(_, s)| found(s)) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} span arrived; got {:?}",
                self.spans()
                    .iter()
                    .map(|(_, s)| &s.name)
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the span of invocation `id`.
    pub(crate) async fn invocation(&self, id: &str) -> Span {
        self.wait_for("invocation", |s| {
            string_attr(&s.attributes, "faas.invocation_id").as_deref() == Some(id)
        })
        .await
    }
}

pub(crate) fn string_attr(
    attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<String> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            Value::IntValue(i) => Some(i.to_string()),
            _ => None,
        }
    })
}

/// The value of attribute `key`, typed.
fn attr_value(
    attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.clone())
}

/// An upstream that answers a price and keeps the `traceparent` of each
/// request it got.
async fn upstream(seen: Arc<Mutex<Vec<Option<String>>>>) -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/price",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let seen = seen.clone();
            async move {
                let tp = headers
                    .get("traceparent")
                    .map(|v| v.to_str().unwrap().to_string());
                seen.lock().unwrap().push(tp);
                "42"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Fetches a price in the isolate, then needs Node (`require("fs")`): the
/// process tier re-runs it, its fetch answered from the first attempt's tape.
const FETCHES_THEN_FALLS_BACK: &str = r#"
exports.handler = async (event) => {
  const r = await fetch(process.env.PRICE_URL);
  const price = Number(await r.text());
  return { price, node: require("fs").existsSync("/code/index.js") };
};
"#;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Invokes `name` with `body` as a call inside the caller's trace
/// (`TRACE_ID`, `CALLER_SPAN`): its 200 response, its invocation id and
/// the `traceparent` it came back with.
async fn call_in_trace(d: &Daemon, name: &str, body: &str) -> (reqwest::Response, String, String) {
    let resp = d
        .post(&format!("/fn/admin/{name}"))
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let header = |h: &str| resp.headers()[h].to_str().unwrap().to_string();
    let (id, back) = (header("hearth-invocation-id"), header("traceparent"));
    (resp, id, back)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn an_invocation_is_a_span_under_the_callers_with_its_fetch_as_a_child_and_its_fallback_as_an_event()
 {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let up = upstream(seen.clone()).await;
    let d = Daemon::start_with(&[
        "--allow-private-egress",
        "true",
        "--otlp-endpoint",
        &endpoint,
    ]);
    let price_url = format!("http://{up}/price");
    d.deploy(
        "priced",
        FETCHES_THEN_FALLS_BACK.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.js"),
            ("allow_host", &up.to_string()),
            ("env", &format!("PRICE_URL={price_url}")),
        ],
    )
    .await;

    let (resp, id, back) = call_in_trace(&d, "priced", "{}").await;
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"price": 42, "node": true}));

    // The invocation: a server span under the caller's, in its trace.
    let inv = collector.invocation(&id).await;
    assert_eq!(hex(&inv.trace_id), TRACE_ID, "in the caller's trace");
    assert_eq!(
        hex(&inv.parent_span_id),
        CALLER_SPAN,
        "under the caller's span"
    );
    assert_eq!(inv.kind, SpanKind::Server as i32);
    assert_eq!(inv.name, "priced");
    let attr = |k: &str| string_attr(&inv.attributes, k);
    assert_eq!(attr("faas.name").as_deref(), Some("priced"));
    // OpenTelemetry's conventions type them: a version is a string,
    // a cold start a boolean, a port an integer.
    let port: i64 = d.url.rsplit(':').next().unwrap().parse().unwrap();
    for (key, want) in [
        ("faas.version", Value::StringValue("1".into())),
        ("faas.coldstart", Value::BoolValue(true)),
        ("url.path", Value::StringValue("/fn/admin/priced".into())),
        ("url.scheme", Value::StringValue("http".into())),
        ("server.address", Value::StringValue("127.0.0.1".into())),
        ("server.port", Value::IntValue(port)),
    ] {
        assert_eq!(attr_value(&inv.attributes, key), Some(want), "{key}");
    }
    assert_eq!(attr("hearth.tenant").as_deref(), Some("admin"));
    assert_eq!(attr("hearth.node").as_deref(), Some(d.url.as_str()));
    assert_eq!(
        attr("hearth.tier").as_deref(),
        Some("process"),
        "Node answered"
    );
    assert_eq!(attr("http.response.status_code").as_deref(), Some("200"));
    // The client got the invocation's own span back.
    assert_eq!(back, format!("00-{TRACE_ID}-{}-01", hex(&inv.span_id)));

    // The fallback, as an event saying where it went and why.
    let fallback = inv
        .events
        .iter()
        .find(|e| e.name == "fallback")
        .unwrap_or_else(|| panic!("no fallback event: {:?}", inv.events));
    assert_eq!(
        string_attr(&fallback.attributes, "hearth.to_tier").as_deref(),
        Some("process")
    );
    assert!(
        string_attr(&fallback.attributes, "hearth.reason")
            .unwrap()
            .contains("\"fs\""),
        "{fallback:?}"
    );

    // The fetch: a client span under the invocation's, that reached the
    // upstream once (the process tier's fetch came from the tape) and
    // carried its own span there.
    let fetch = collector
        .wait_for("http.fetch", |s| {
            s.name == "http.fetch" && s.parent_span_id == inv.span_id
        })
        .await;
    assert_eq!(fetch.trace_id, inv.trace_id);
    assert_eq!(fetch.kind, SpanKind::Client as i32);
    assert_eq!(
        string_attr(&fetch.attributes, "url.full").as_deref(),
        Some(price_url.as_str())
    );
    assert_eq!(
        string_attr(&fetch.attributes, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(
        fetch.start_time_unix_nano >= inv.start_time_unix_nano
            && fetch.end_time_unix_nano <= inv.end_time_unix_nano,
        "the call lies within the invocation"
    );
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![Some(format!("00-{TRACE_ID}-{}-01", hex(&fetch.span_id)))],
        "the upstream was asked once, under the fetch's span"
    );
    let children: Vec<_> = collector
        .spans()
        .into_iter()
        .filter(|(_, s)| s.parent_span_id == inv.span_id)
        .map(|(_, s)| s.name)
        .collect();
    assert_eq!(
        children,
        ["http.fetch"],
        "one child: the one call that left"
    );

    // Its log lines carry the trace: the fallback's note, at least.
    let logs = d
        .get_json(&format!("/v1/functions/priced/logs?invocation={id}"))
        .await;
    let lines = logs["lines"].as_array().unwrap();
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .unwrap()
            .contains("running it in the process tier")),
        "{logs}"
    );
    for l in lines {
        assert_eq!(l["trace_id"], TRACE_ID, "{l}");
    }

    // The tape is the same as without tracing: the injected header is not
    // on it, so the replay is identical.
    d.recording_when_written(&id).await;
    let replay = d.replay(&id).await;
    assert_eq!(replay["verdict"], "identical", "{replay}");
}

/// A 5xx the function answers itself is its span's error, as a failure
/// is (OpenTelemetry's HTTP server convention), with the status as
/// `error.type`; a second call to a loaded function is not a cold start.
#[tokio::test]
async fn a_functions_own_5xx_is_its_spans_error_and_a_warm_call_is_not_cold() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let d = Daemon::start_with(&["--otlp-endpoint", &endpoint]);
    let busy = r#"export default { fetch() { return new Response("busy", { status: 503 }); } };"#;
    d.deploy(
        "busy",
        busy.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let resp = d.post("/fn/admin/busy").send().await.unwrap();
        assert_eq!(resp.status(), 503);
        ids.push(
            resp.headers()["hearth-invocation-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    let first = collector.invocation(&ids[0]).await;
    let status = first.status.clone().unwrap_or_default();
    assert_eq!(status.code, StatusCode::Error as i32, "{status:?}");
    assert_eq!(status.message, "the function answered 503");
    assert_eq!(
        string_attr(&first.attributes, "error.type").as_deref(),
        Some("503")
    );
    assert_eq!(
        attr_value(&first.attributes, "faas.coldstart"),
        Some(Value::BoolValue(true))
    );
    let second = collector.invocation(&ids[1]).await;
    assert_eq!(
        attr_value(&second.attributes, "faas.coldstart"),
        Some(Value::BoolValue(false)),
        "loaded by the first call"
    );
}

#[tokio::test]
async fn a_malformed_traceparent_starts_a_new_trace_and_tracing_off_sends_none() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let d = Daemon::start_with(&["--otlp-endpoint", &endpoint]);
    d.deploy("hello", crate::harness::example("hello.wat"), &[])
        .await;
    // Hostile or broken: wrong lengths, non-hex, the all-zero trace id,
    // a version this parser does not know with a bad shape.
    let bad = [
        format!("00-{TRACE_ID}-{CALLER_SPAN}"),
        format!("00-{}-{CALLER_SPAN}-01", "zz".repeat(16)),
        format!("00-{}-{CALLER_SPAN}-01", "0".repeat(32)),
        format!("ff-{TRACE_ID}-{CALLER_SPAN}-01"),
        format!("00-{TRACE_ID}-{CALLER_SPAN}-01-{}", "x".repeat(10_000)),
    ];
    for tp in &bad {
        let resp = d
            .post("/fn/admin/hello")
            .header("traceparent", tp)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let id = resp.headers()["hearth-invocation-id"]
            .to_str()
            .unwrap()
            .to_string();
        let back = resp.headers()["traceparent"].to_str().unwrap().to_string();
        let span = collector.invocation(&id).await;
        assert!(span.parent_span_id.is_empty(), "a root span for {tp:.80}");
        assert_ne!(hex(&span.trace_id), TRACE_ID, "a new trace for {tp:.80}");
        assert!(back.starts_with(&format!("00-{}-", hex(&span.trace_id))));
    }

    // Without the flag: no traceparent back.
    let off = Daemon::start();
    off.deploy("hello", crate::harness::example("hello.wat"), &[])
        .await;
    let resp = off.post("/fn/admin/hello").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("traceparent").is_none());
}

/// A wasi:http component's response streams out as it writes it; its
/// caller still gets the invocation's span as `traceparent`, and the span
/// reaches the collector once the body has gone.
#[tokio::test]
async fn a_streamed_response_carries_its_span_too() {
    require!(ComponentTools);
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let d = Daemon::start_with(&["--otlp-endpoint", &endpoint]);
    d.deploy("echo", crate::components::component("echo"), &[])
        .await;
    let (resp, id, back) = call_in_trace(&d, "echo", "streamed").await;
    assert_eq!(resp.text().await.unwrap(), "streamed");
    let span = collector.invocation(&id).await;
    assert_eq!(hex(&span.trace_id), TRACE_ID);
    assert_eq!(hex(&span.parent_span_id), CALLER_SPAN);
    assert_eq!(
        back,
        format!("00-{TRACE_ID}-{}-01", hex(&span.span_id)),
        "the span the collector got"
    );
}

/// Through a gateway the trace has two more hops: the gateway's span is
/// the caller's child, each attempt to send the call to a node is a client
/// span under it, and the node's invocation span is the attempt's; the
/// client gets the gateway's span. A call whose node died is retried on
/// another: the failed attempt is a span of its own, with the error and
/// the dead node, and the gateway's span has an event naming it.
#[tokio::test(flavor = "multi_thread")]
async fn through_a_gateway_each_attempt_is_a_span_the_nodes_is_under_and_a_retry_is_an_event() {
    require!(Postgres);
    use crate::cluster::{alive, gateway_with, members_until, node};
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let pg = hearth_test_support::TempPostgres::start().unwrap();
    let store = pg.create_database("traces").unwrap();
    let traced = ["--otlp-endpoint", endpoint.as_str()];
    // Heartbeats far enough apart that the dead node below is still a
    // member when the next call is placed on it (three missed take it
    // out: at 200 ms a busy machine could miss the window).
    let gw = gateway_with(&store, &[&traced[..], &["--heartbeat-ms", "3000"]].concat());
    let mut nodes: Vec<Daemon> = (0..2).map(|_| node(&gw, &store, &traced)).collect();
    let members = members_until(&gw, "two nodes join", |m| alive(m) == 2).await;
    let url_of = |id: &str| {
        members.iter().find(|n| n["id"] == id).unwrap()["url"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let spans_of = |id: &str| {
        let id = id.to_string();
        let collector = collector.clone();
        async move {
            let gateway = collector
                .wait_for("gateway", |s| {
                    s.name == "forward hello"
                        && string_attr(&s.attributes, "faas.invocation_id").as_deref() == Some(&id)
                })
                .await;
            let node = collector
                .wait_for("node", |s| {
                    s.name == "hello"
                        && string_attr(&s.attributes, "faas.invocation_id").as_deref() == Some(&id)
                })
                .await;
            (gateway, node)
        }
    };
    let instance_of = |span: &Span| {
        collector
            .spans()
            .into_iter()
            .find(|(_, s)| s.span_id == span.span_id)
            .unwrap()
            .0
    };

    let (resp, id, back) = call_in_trace(&gw, "hello", "").await;
    let ran_on = resp.headers()["hearth-node"].to_str().unwrap().to_string();
    let (forward, invocation) = spans_of(&id).await;
    assert_eq!(hex(&forward.trace_id), TRACE_ID);
    assert_eq!(hex(&forward.parent_span_id), CALLER_SPAN);
    assert_eq!(forward.kind, SpanKind::Server as i32);
    assert_eq!(instance_of(&forward), gw.url);
    assert_eq!(
        string_attr(&forward.attributes, "hearth.node").as_deref(),
        Some(ran_on.as_str())
    );
    assert_eq!(
        string_attr(&forward.attributes, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(forward.events.is_empty(), "{:?}", forward.events);
    let sent = attempt_above(&collector, &invocation).await;
    assert_eq!(sent.parent_span_id, forward.span_id);
    assert_eq!(
        (sent.name.as_str(), sent.kind),
        ("POST", SpanKind::Client as i32)
    );
    assert_eq!(instance_of(&sent), gw.url);
    let node_port = url_of(&ran_on).rsplit(':').next().unwrap().to_string();
    for (key, value) in [
        ("hearth.node", Some(ran_on.as_str())),
        ("server.address", Some("127.0.0.1")),
        ("server.port", Some(node_port.as_str())),
        ("http.response.status_code", Some("200")),
        ("http.request.resend_count", None),
    ] {
        assert_eq!(
            string_attr(&sent.attributes, key).as_deref(),
            value,
            "{key}"
        );
    }
    assert_eq!(hex(&invocation.trace_id), TRACE_ID);
    assert_eq!(instance_of(&invocation), url_of(&ran_on));
    assert_eq!(back, format!("00-{TRACE_ID}-{}-01", hex(&forward.span_id)));

    // hello's node dies; the next call goes there first (its function's
    // node, before a missed heartbeat takes it out), fails, and is retried.
    let victim = nodes.iter().position(|n| n.url == url_of(&ran_on)).unwrap();
    nodes[victim].kill9();
    let (resp, id, _) = call_in_trace(&gw, "hello", "").await;
    let from = resp.headers()["hearth-retried-from"].to_str().unwrap();
    assert_eq!(from, ran_on);
    let (forward, invocation) = spans_of(&id).await;
    let retry = forward.events.iter().find(|e| e.name == "retry");
    let retry = retry.unwrap_or_else(|| panic!("no retry event: {:?}", forward.events));
    assert_eq!(
        string_attr(&retry.attributes, "hearth.failed_node").as_deref(),
        Some(ran_on.as_str())
    );
    let resent = attempt_above(&collector, &invocation).await;
    assert_eq!(resent.parent_span_id, forward.span_id);
    assert_eq!(
        string_attr(&resent.attributes, "http.request.resend_count").as_deref(),
        Some("1")
    );
    assert_ne!(instance_of(&invocation), url_of(&ran_on));
    let lost = collector
        .wait_for("the failed attempt", |s| {
            s.parent_span_id == forward.span_id && s.span_id != resent.span_id
        })
        .await;
    for (key, value) in [
        ("hearth.node", Some(ran_on.as_str())),
        ("error.type", Some("node_failed")),
        ("http.response.status_code", None),
    ] {
        assert_eq!(
            string_attr(&lost.attributes, key).as_deref(),
            value,
            "{key}"
        );
    }
    let status = lost.status.as_ref().unwrap();
    assert_eq!(status.code, StatusCode::Error as i32);
    assert!(status.message.contains("Connection refused"), "{status:?}");
}

/// The gateway's span for the attempt that `invocation` (a node's span)
/// was sent in.
async fn attempt_above(collector: &Collector, invocation: &Span) -> Span {
    let parent = invocation.parent_span_id.clone();
    collector
        .wait_for("the attempt", |s| s.span_id == parent)
        .await
}

/// `--otlp-sample-ratio 0`: no trace that begins here is exported, yet each
/// invocation still has a trace id (in its `traceparent`, flag `00`, and
/// on its log lines); a caller's sampled `traceparent` is followed.
#[tokio::test]
async fn a_sample_ratio_drops_new_traces_and_a_sampled_caller_is_followed() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let d = Daemon::start_with(&["--otlp-endpoint", &endpoint, "--otlp-sample-ratio", "0"]);
    d.deploy(
        "logs",
        b"exports.handler = async () => { console.log('a line'); return 'ok'; };".to_vec(),
        &[("runtime", "js"), ("file_name", "index.js")],
    )
    .await;
    let mut unsampled = Vec::new();
    for _ in 0..5 {
        let resp = d.post("/fn/admin/logs").send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let header = |h: &str| resp.headers()[h].to_str().unwrap().to_string();
        let (id, back) = (header("hearth-invocation-id"), header("traceparent"));
        let parts: Vec<&str> = back.split('-').collect();
        assert_eq!(parts.len(), 4, "{back}");
        assert_eq!(
            (parts[1].len(), parts[3]),
            (32, "00"),
            "not sampled: {back}"
        );
        unsampled.push((id, parts[1].to_string()));
    }

    let (_, id, back) = call_in_trace(&d, "logs", "").await;
    let span = collector.invocation(&id).await;
    assert_eq!(hex(&span.trace_id), TRACE_ID);
    assert_eq!(hex(&span.parent_span_id), CALLER_SPAN);
    assert!(back.ends_with("-01"), "{back}");
    // The exporter sends in order: the earlier ones would have come by now.
    for (id, trace) in &unsampled {
        assert!(
            !collector.spans().iter().any(|(_, s)| string_attr(
                &s.attributes,
                "faas.invocation_id"
            )
            .as_deref()
                == Some(id.as_str())),
            "{id} was exported"
        );
        let logs = d
            .get_json(&format!("/v1/functions/logs/logs?invocation={id}"))
            .await;
        let lines = logs["lines"].as_array().unwrap();
        assert!(!lines.is_empty(), "{logs}");
        assert!(
            lines.iter().all(|l| l["trace_id"] == trace.as_str()),
            "{logs}"
        );
    }
}

/// A collector that cannot be reached loses the spans, and the log says
/// so once, not once per batch (the exporter sends every half second).
#[tokio::test]
async fn an_unreachable_collector_is_logged_once_a_minute() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("daemon.log");
    let d = Daemon::start_logging_to(&["--otlp-endpoint", &endpoint], &log);
    d.deploy("hello", crate::harness::example("hello.wat"), &[])
        .await;
    let said = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("spans could not be sent to the OTLP collector")
            .count()
    };
    let calls = async || {
        for _ in 0..5 {
            assert_eq!(d.call("hello", "", "").await.0, 200);
        }
    };
    calls().await;
    crate::harness::until(
        "the collector's failure in the log",
        Duration::from_secs(15),
        async || said() >= 1,
    )
    .await;
    assert!(
        std::fs::read_to_string(&log).unwrap().contains(&endpoint),
        "names the collector"
    );
    // Four more batches fail: a window for warnings that must not come.
    for _ in 0..4 {
        calls().await;
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert_eq!(said(), 1, "{}", std::fs::read_to_string(&log).unwrap());
}

/// A KV call is a client span by OpenTelemetry's database conventions
/// (the key's length, never the key); an invocation that begins a trace
/// gives it a trace id its tape leads back to, so a trace id found in a
/// collector finds its invocations, as a caller's trace id does.
#[tokio::test]
async fn kv_calls_are_database_spans_and_a_trace_id_finds_its_invocations() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let d = Daemon::start_with(&["--otlp-endpoint", &endpoint]);
    let counts = r#"export default { async fetch() {
      await hearth.kv.set("secret-key-1", "v");
      await hearth.kv.set("secret-key-2", "v");
      const keys = await hearth.kv.list("secret-");
      return new Response(String(keys.length));
    } };"#;
    d.deploy(
        "counts",
        counts.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let resp = d.post("/fn/admin/counts").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let began = resp.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(resp.text().await.unwrap(), "2");

    let inv = collector.invocation(&began).await;
    let list = collector
        .wait_for("kv.list", |s| {
            s.name == "kv.list" && s.parent_span_id == inv.span_id
        })
        .await;
    assert_eq!(list.kind, SpanKind::Client as i32);
    for (key, want) in [
        ("db.system.name", Value::StringValue("hearth.kv".into())),
        ("db.operation.name", Value::StringValue("list".into())),
        ("db.namespace", Value::StringValue("admin".into())),
        ("db.collection.name", Value::StringValue("counts".into())),
        ("hearth.kv.key_bytes", Value::IntValue(7)),
        ("db.response.returned_rows", Value::IntValue(2)),
    ] {
        assert_eq!(attr_value(&list.attributes, key), Some(want), "{key}");
    }
    let sets: Vec<Span> = collector
        .spans()
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == "kv.set" && s.parent_span_id == inv.span_id)
        .collect();
    assert_eq!(sets.len(), 2);
    for s in &sets {
        assert_eq!(
            string_attr(&s.attributes, "db.operation.name").as_deref(),
            Some("set")
        );
        assert!(
            !format!("{:?}", s.attributes).contains("secret-key"),
            "the key is not on the span: {:?}",
            s.attributes
        );
    }

    // The trace this invocation began: found by its id, alone.
    let trace = hex(&inv.trace_id);
    assert_ne!(trace, began, "the trace id is the id mixed, not the id");
    d.recording_when_written(&began).await;
    let found = d
        .get_json(&format!("/v1/recordings?trace_id={trace}"))
        .await;
    let ids = listed_ids(&found);
    assert_eq!(ids, [began.as_str()], "{found}");

    // A caller's trace, two calls in it: both found, newest first, in
    // upper case too; the first call's, which is not in it, is not.
    let (_, first, _) = call_in_trace(&d, "counts", "").await;
    let (_, second, _) = call_in_trace(&d, "counts", "").await;
    d.recording_when_written(&second).await;
    let found = d
        .get_json(&format!(
            "/v1/functions/counts/recordings?trace_id={}",
            TRACE_ID.to_uppercase()
        ))
        .await;
    let ids = listed_ids(&found);
    assert_eq!(ids, [second.as_str(), first.as_str()], "{found}");
    // Paged, one at a time: each page names the next.
    let page = d.get_json("/v1/functions/counts/recordings?limit=1").await;
    assert_eq!(page["recordings"][0]["id"], second.as_str());
    assert_eq!(page["next_before"], second.as_str());
    let page = d
        .get_json(&format!(
            "/v1/functions/counts/recordings?limit=1&before={second}"
        ))
        .await;
    assert_eq!(page["recordings"][0]["id"], first.as_str(), "{page}");

    // A trace id that is not one is refused, saying what one is.
    let resp = d
        .get("/v1/recordings?trace_id=not-a-trace")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body = resp.text().await.unwrap();
    assert!(body.contains("32 hex digits"), "{body}");
}

/// The ids a tape listing names, in its order.
fn listed_ids(listing: &serde_json::Value) -> Vec<&str> {
    listing["recordings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn an_async_call_is_a_span_in_its_callers_trace_and_a_firing_a_timer() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let d = Daemon::start_with(&["--otlp-endpoint", &endpoint]);
    let code = "export default { fetch() { return new Response('ok'); }, scheduled() {} };";
    d.deploy(
        "later",
        code.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let resp = d
        .post("/fn/admin/later")
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .header("hearth-invocation-type", "Event")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let id = resp.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    // It runs later, from the queue, as a span of the trace that queued it.
    let span = collector.invocation(&id).await;
    assert_eq!(hex(&span.trace_id), TRACE_ID);
    assert_eq!(hex(&span.parent_span_id), CALLER_SPAN);
    assert_eq!(
        string_attr(&span.attributes, "faas.trigger").as_deref(),
        Some("http")
    );

    d.deploy(
        "later",
        code.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("schedule", "@every 1s"),
        ],
    )
    .await;
    let fired = collector
        .wait_for("a firing", |s| {
            string_attr(&s.attributes, "faas.trigger").as_deref() == Some("timer")
        })
        .await;
    assert_eq!(
        string_attr(&fired.attributes, "faas.name").as_deref(),
        Some("later")
    );
    assert!(
        fired.parent_span_id.is_empty(),
        "a firing begins its own trace"
    );
}
