//! Errors as HTTP responses: a status and `{"error": {"kind", "message"}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hearth_node::NodeError;
use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A request that cannot be served, as the caller will see it.
#[derive(Debug)]
pub enum ApiError {
    BadRequest(String),
    Unauthorized(String),
    Forbidden(String),
    NotFound(String),
    Conflict(String),
    TooLarge(String),
    /// 415: the body is not of a type the call takes.
    UnsupportedMediaType(String),
    /// 408: the request (its body) did not arrive in time.
    RequestTimeout(String),
    /// 429: no capacity now; try again shortly.
    TooManyRequests(String),
    /// 429: this client is past its rate; try again after the wait.
    RateLimited(String, std::time::Duration),
    Unavailable(String),
    Internal(String),
    /// 502: the node that should have answered failed.
    BadGateway(String),
    /// 502: a trigger's broker cannot be reached, or refused what its
    /// binding needs.
    Broker(String),
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
            ApiError::UnsupportedMediaType(m) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                m,
            ),
            ApiError::RequestTimeout(m) => (StatusCode::REQUEST_TIMEOUT, "request_timeout", m),
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", m),
            ApiError::TooManyRequests(m) => (StatusCode::TOO_MANY_REQUESTS, "no_capacity", m),
            ApiError::RateLimited(m, _) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited", m),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", m),
            ApiError::BadGateway(m) => (StatusCode::BAD_GATEWAY, "node_failed", m),
            ApiError::Broker(m) => (StatusCode::BAD_GATEWAY, "broker_failed", m),
            ApiError::GatewayTimeout(m) => (StatusCode::GATEWAY_TIMEOUT, "timeout", m),
            ApiError::QuotaExceeded(kind, m) => (StatusCode::INSUFFICIENT_STORAGE, kind, m),
        }
    }
}

/// The body of every error answer.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorBody<'a> {
    #[serde(borrow)]
    pub error: ErrorDetail<'a>,
    /// The failed invocation (invocation routes only; its tape and logs
    /// carry the same id).
    #[serde(default, skip_serializing_if = "Option::is_none", borrow)]
    pub invocation_id: Option<Cow<'a, str>>,
}

/// What failed, for programs (`kind`) and for people (`message`: the cause
/// and the fix).
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail<'a> {
    /// `bad_request`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `payload_too_large`, `request_timeout`, `no_capacity`, `rate_limited`,
    /// `unavailable`, `internal`, `node_failed`, `timeout`, a quota's name
    /// (`kv_quota_exceeded`, …), or an invocation's failure kind.
    #[schema(example = "not_found", value_type = String)]
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    #[schema(example = "function acme/resize does not exist", value_type = String)]
    #[serde(borrow)]
    pub message: Cow<'a, str>,
}

/// An error answer: `status` and the body, with `Retry-After` when trying
/// again shortly may work (503, 429).
pub(crate) fn error_response(
    status: StatusCode,
    kind: &str,
    message: &str,
    invocation_id: Option<&str>,
) -> Response {
    let body = ErrorBody {
        error: ErrorDetail {
            kind: kind.into(),
            message: message.into(),
        },
        invocation_id: invocation_id.map(Cow::Borrowed),
    };
    let mut resp = (status, Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// The answer to a request whose handler panicked (a bug in the daemon):
/// a 500 whose `invocation_id` names the panic in the daemon's log, where
/// a dropped connection would have said nothing. The panic's own message
/// stays in the log: it may name the host's paths.
pub(crate) fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let id = hearth_core::InvocationId::new().to_string();
    let what = match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => message,
        (None, Some(message)) => message.as_str(),
        (None, None) => "a panic without a message",
    };
    tracing::error!(invocation_id = %id, panic = %what, "a request's handler panicked; answered 500");
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the daemon failed while answering this request (a bug, logged with this invocation id); \
         the daemon is still up, so the request may be tried again",
        Some(&id),
    )
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind, message) = self.parts();
        if status.is_server_error() {
            tracing::error!(%kind, %message, "request failed");
        }
        let mut resp = error_response(status, kind, message, None);
        if let ApiError::RateLimited(_, wait) = &self {
            // Whole seconds, rounded up: never sooner than the bucket allows.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        resp
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        let msg = e.to_string();
        match e {
            NodeError::NotFound { .. }
            | NodeError::NoSuchVersion { .. }
            | NodeError::NoSuchAlias { .. } => ApiError::NotFound(msg),
            NodeError::Deploy(hearth_host::DeployError::Load(_)) => ApiError::Internal(msg),
            NodeError::Deploy(_) | NodeError::Invalid(_) | NodeError::RuntimeUnavailable(_) => {
                ApiError::BadRequest(msg)
            }
            NodeError::Store(e) => ApiError::from(e),
            NodeError::Internal(_) => ApiError::Internal(msg),
            NodeError::Conflict(_) => ApiError::Conflict(msg),
            NodeError::CodeQuota { .. } => ApiError::QuotaExceeded("code_quota_exceeded", msg),
            NodeError::DiskFull(_) => ApiError::QuotaExceeded("disk_full", msg),
            // The invocation route answers a refusal itself (its status,
            // pause and headers); elsewhere it is a plain 503.
            NodeError::Refused { .. } => ApiError::Unavailable(msg),
        }
    }
}

impl From<hearth_store::StoreError> for ApiError {
    fn from(e: hearth_store::StoreError) -> Self {
        match e {
            hearth_store::StoreError::TenantExists(_) => ApiError::Conflict(e.to_string()),
            hearth_store::StoreError::NoSuchTenant(_)
            | hearth_store::StoreError::NoSuchVersion { .. }
            | hearth_store::StoreError::NoSuchAlias { .. }
            | hearth_store::StoreError::NoSuchToken { .. } => ApiError::NotFound(e.to_string()),
            hearth_store::StoreError::NothingToRollBack { .. }
            | hearth_store::StoreError::TooManyAliases { .. }
            | hearth_store::StoreError::TooManyTokens { .. }
            | hearth_store::StoreError::TokenTaken
            | hearth_store::StoreError::TooManySecrets { .. }
            | hearth_store::StoreError::TooManySchedules { .. } => {
                ApiError::Conflict(e.to_string())
            }
            hearth_store::StoreError::QueueFull { .. } => ApiError::TooManyRequests(e.to_string()),
            hearth_store::StoreError::LiveAlias
            | hearth_store::StoreError::BadSplit(_)
            | hearth_store::StoreError::BadToken(_) => ApiError::BadRequest(e.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn seen(e: ApiError) -> (StatusCode, Option<String>, serde_json::Value) {
        let resp = e.into_response();
        let status = resp.status();
        let retry = resp
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn each_error_is_its_status_and_kind_and_only_capacity_says_retry() {
        let cases = [
            (ApiError::BadRequest("m".into()), 400, "bad_request"),
            (ApiError::Unauthorized("m".into()), 401, "unauthorized"),
            (ApiError::Forbidden("m".into()), 403, "forbidden"),
            (ApiError::NotFound("m".into()), 404, "not_found"),
            (ApiError::Conflict("m".into()), 409, "conflict"),
            (ApiError::TooLarge("m".into()), 413, "payload_too_large"),
            (ApiError::RequestTimeout("m".into()), 408, "request_timeout"),
            (ApiError::TooManyRequests("m".into()), 429, "no_capacity"),
            (
                ApiError::RateLimited("m".into(), std::time::Duration::from_millis(1500)),
                429,
                "rate_limited",
            ),
            (ApiError::Unavailable("m".into()), 503, "unavailable"),
            (ApiError::Internal("m".into()), 500, "internal"),
            (ApiError::BadGateway("m".into()), 502, "node_failed"),
            (ApiError::Broker("m".into()), 502, "broker_failed"),
            (ApiError::GatewayTimeout("m".into()), 504, "timeout"),
            (
                ApiError::QuotaExceeded("kv_quota_exceeded", "m".into()),
                507,
                "kv_quota_exceeded",
            ),
        ];
        for (error, status, kind) in cases {
            let (got, retry, body) = seen(error).await;
            assert_eq!(got.as_u16(), status, "{kind}");
            assert_eq!(
                body,
                serde_json::json!({"error": {"kind": kind, "message": "m"}})
            );
            assert_eq!(retry.is_some(), status == 429 || status == 503, "{kind}");
            if kind == "rate_limited" {
                assert_eq!(retry.as_deref(), Some("2"), "the wait, rounded up");
            }
        }
    }

    #[test]
    fn a_node_or_store_error_reaches_the_caller_as_what_it_means() {
        let status = |e: ApiError| e.parts().0.as_u16();
        let deploy = |d| ApiError::from(NodeError::Deploy(d));
        assert_eq!(
            status(deploy(hearth_host::DeployError::Invalid("x".into()))),
            400
        );
        assert_eq!(
            status(deploy(hearth_host::DeployError::NotAFunction("x".into()))),
            400
        );
        // A node that cannot load what it stored is its fault, not the caller's.
        assert_eq!(
            status(deploy(hearth_host::DeployError::Load("x".into()))),
            500
        );
        let missing = NodeError::NotFound {
            tenant: "t".into(),
            name: "f".into(),
        };
        assert_eq!(status(missing.into()), 404);
        let quota = ApiError::from(NodeError::CodeQuota {
            tenant: "t".into(),
            used: 1,
            adding: 2,
            quota: 2,
        });
        assert_eq!(quota.parts().0.as_u16(), 507);
        assert_eq!(quota.parts().1, "code_quota_exceeded");
        let kv = ApiError::from(hearth_store::StoreError::KvQuota {
            tenant: "t".into(),
            max_bytes: 10,
        });
        let (s, kind, message) = kv.parts();
        assert_eq!((s.as_u16(), kind), (507, "kv_quota_exceeded"));
        assert!(message.contains("remove keys first"), "{message}");
        let exists = hearth_store::StoreError::TenantExists("t".into());
        assert_eq!(status(exists.into()), 409);
        let corrupt = hearth_store::StoreError::Corrupt("x".into());
        assert_eq!(status(corrupt.into()), 500);
    }
}
