//! Outbound HTTP on a function's behalf, under its allow-list.

use std::time::Duration;

use futures::StreamExt;
use hearth_core::FunctionSpec;
use serde::{Deserialize, Serialize};

use crate::HostError;

/// A request a function asks the host to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    #[serde(with = "hearth_core::byte_strings")]
    pub body: Vec<u8>,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    #[serde(with = "hearth_core::byte_strings")]
    pub body: Vec<u8>,
}

/// Whether `policy` lets `request` leave the machine; its URL and method.
pub(crate) fn check(
    policy: &FunctionSpec,
    request: &OutboundRequest,
    private_egress: bool,
) -> Result<(reqwest::Url, reqwest::Method), HostError> {
    let url = reqwest::Url::parse(&request.url)
        .map_err(|e| HostError::Invalid(format!("bad URL {:?}: {e}", request.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HostError::Invalid(format!(
            "unsupported scheme {:?}",
            url.scheme()
        )));
    }
    let host = url
        .host_str()
        .ok_or_else(|| HostError::Invalid(format!("URL {:?} has no host", request.url)))?;
    let port = url.port_or_known_default().unwrap_or(80);
    if !policy.allows_host(host, port) {
        return Err(HostError::Denied(format!("{host}:{port}")));
    }
    if !private_egress && crate::egress::refused_literal(host).is_some() {
        return Err(HostError::Internal(format!("{host}:{port}")));
    }
    let method = reqwest::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| HostError::Invalid(format!("bad method {:?}", request.method)))?;
    Ok((url, method))
}

pub(crate) async fn fetch(
    client: &reqwest::Client,
    policy: &FunctionSpec,
    request: &OutboundRequest,
    timeout: Duration,
    (max_response_bytes, private_egress): (usize, bool),
    traceparent: Option<&str>,
) -> Result<OutboundResponse, HostError> {
    let (url, method) = check(policy, request, private_egress)?;
    let mut builder = client.request(method, url).timeout(timeout);
    for (k, v) in &request.headers {
        builder = builder.header(k, v);
    }
    // The trace's context, added as the request leaves (it is not on the
    // tape: a replay's request is the recorded one). A function that set
    // its own `traceparent` keeps it: it is tracing itself.
    if let Some(tp) = traceparent
        && !request
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("traceparent"))
    {
        builder = builder.header("traceparent", tp);
    }
    let send = async {
        let response = builder
            .body(request.body.clone())
            .send()
            .await
            .map_err(network)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        if response
            .content_length()
            .is_some_and(|n| n as usize > max_response_bytes)
        {
            return Err(HostError::TooLarge(max_response_bytes));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(network)?;
            if body.len() + chunk.len() > max_response_bytes {
                return Err(HostError::TooLarge(max_response_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(OutboundResponse {
            status,
            headers,
            body,
        })
    };
    tokio::time::timeout(timeout, send)
        .await
        .map_err(|_| HostError::Timeout)?
}

/// A failed request, with the causes reqwest keeps behind its own
/// message (which names neither a refused address nor a refused name).
fn network(e: reqwest::Error) -> HostError {
    if e.is_timeout() {
        return HostError::Timeout;
    }
    let mut message = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        message = format!("{message}: {c}");
        cause = c.source();
    }
    HostError::Network(message)
}
