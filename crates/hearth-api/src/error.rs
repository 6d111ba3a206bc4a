//! Errors as HTTP responses: a status and `{"error": {"kind", "message"}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hearth_node::NodeError;
use serde_json::json;

/// A request that cannot be served, as the caller will see it.
#[derive(Debug)]
pub enum ApiError {
    BadRequest(String),
    Unauthorized(String),
    Forbidden(String),
    NotFound(String),
    Conflict(String),
    TooLarge(String),
    /// 408: the request (its body) did not arrive in time.
    RequestTimeout(String),
    /// 429: no capacity now; try again shortly.
    TooManyRequests(String),
    Unavailable(String),
    Internal(String),
    /// 502: the node that should have answered failed.
    BadGateway(String),
    /// 504: the node did not answer in time.
    GatewayTimeout(String),
    /// 507: a tenant's storage quota would be exceeded.
    QuotaExceeded(&'static str, String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, &str) {
        match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, "bad_request", m),
            ApiError::Unauthorized(m) => (StatusCode::UNAUTHORIZED, "unauthorized", m),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, "forbidden", m),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "not_found", m),
            ApiError::Conflict(m) => (StatusCode::CONFLICT, "conflict", m),
            ApiError::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", m),
            ApiError::RequestTimeout(m) => (StatusCode::REQUEST_TIMEOUT, "request_timeout", m),
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", m),
            ApiError::TooManyRequests(m) => (StatusCode::TOO_MANY_REQUESTS, "no_capacity", m),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", m),
            ApiError::BadGateway(m) => (StatusCode::BAD_GATEWAY, "node_failed", m),
            ApiError::GatewayTimeout(m) => (StatusCode::GATEWAY_TIMEOUT, "timeout", m),
            ApiError::QuotaExceeded(kind, m) => (StatusCode::INSUFFICIENT_STORAGE, kind, m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind, message) = self.parts();
        if status.is_server_error() {
            tracing::error!(%kind, %message, "request failed");
        }
        let mut resp = (
            status,
            Json(json!({"error": {"kind": kind, "message": message}})),
        )
            .into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        let msg = e.to_string();
        match e {
            NodeError::NotFound { .. } | NodeError::NoSuchVersion { .. } => ApiError::NotFound(msg),
            NodeError::Deploy(hearth_host::DeployError::Load(_)) => ApiError::Internal(msg),
            NodeError::Deploy(_) | NodeError::Invalid(_) | NodeError::RuntimeUnavailable(_) => {
                ApiError::BadRequest(msg)
            }
            NodeError::Store(_) | NodeError::Internal(_) => ApiError::Internal(msg),
            NodeError::CodeQuota { .. } => ApiError::QuotaExceeded("code_quota_exceeded", msg),
        }
    }
}

impl From<hearth_store::StoreError> for ApiError {
    fn from(e: hearth_store::StoreError) -> Self {
        match e {
            hearth_store::StoreError::TenantExists(_) => ApiError::Conflict(e.to_string()),
            hearth_store::StoreError::NoSuchTenant(_) => ApiError::NotFound(e.to_string()),
            hearth_store::StoreError::KvQuota { tenant, max_bytes } => ApiError::QuotaExceeded(
                "kv_quota_exceeded",
                format!(
                    "tenant {tenant}'s KV would hold more than {max_bytes} bytes: remove keys first"
                ),
            ),
            other => ApiError::Internal(other.to_string()),
        }
    }
}
