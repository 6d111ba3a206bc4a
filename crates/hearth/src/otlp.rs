//! The OTLP/HTTP exporter of the node's traces (`--otlp-endpoint`): the
//! node makes spans (`hearth_node::trace`) and knows no HTTP; the binary
//! hands it this exporter, which sends them with Hearth's own reqwest on
//! the daemon's runtime.

use std::time::Duration;

use bytes::Bytes;
use hearth_node::trace::Tracing;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};

/// The node's tracing, exporting to the OTLP/HTTP collector at `endpoint`
/// (its base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`: spans go to
/// `{endpoint}/v1/traces`); `node` and `ratio` as [`Tracing::new`] takes
/// them. Call inside a Tokio runtime: the exporter sends on it.
pub fn tracing(endpoint: &str, node: &str, ratio: f64) -> Result<Tracing, String> {
    let url = url::Url::parse(endpoint)
        .map_err(|e| format!("--otlp-endpoint {endpoint:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "--otlp-endpoint {endpoint:?}: use an http:// or https:// URL of an OTLP/HTTP collector (port 4318 by convention)"
        ));
    }
    let traces = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let client = OtlpClient {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot make the OTLP client: {e}"))?,
        runtime: tokio::runtime::Handle::current(),
        failures: Failures::default(),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces)
        .build()
        .map_err(|e| format!("cannot make the OTLP exporter: {e}"))?;
    Ok(Tracing::new(exporter, node, ratio))
}

/// OTLP over Hearth's own reqwest, on the daemon's runtime (the SDK's batch
/// thread waits on the send; the request runs on the runtime).
#[derive(Debug)]
struct OtlpClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
    failures: Failures,
}

/// How often a collector that cannot be reached is said so in the log.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Sends that failed, said in the log at most once per [`WARN_EVERY`]
/// (with how many were not said): a collector that is down loses spans,
/// and the operator should know, but not once per batch.
#[derive(Debug, Default)]
struct Failures(parking_lot::Mutex<(Option<std::time::Instant>, u64)>);

impl Failures {
    fn failed(&self, url: &str, why: &str) {
        let mut last = self.0.lock();
        let now = std::time::Instant::now();
        if last.0.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
            last.1 += 1;
            return;
        }
        let unsaid = std::mem::take(&mut last.1);
        last.0 = Some(now);
        tracing::warn!(
            collector = url,
            error = why,
            failures_not_logged = unsaid,
            "spans could not be sent to the OTLP collector; they are dropped (said at most once a minute)"
        );
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let url = request.uri().to_string();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let response = http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let answer = match sent.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match answer {
            Ok((status, body)) => {
                if !status.is_success() {
                    self.failures.failed(&url, &format!("it answered {status}"));
                }
                Ok(http::Response::builder().status(status).body(body)?)
            }
            Err(why) => {
                self.failures.failed(&url, &why);
                Err(why.into())
            }
        }
    }
}
