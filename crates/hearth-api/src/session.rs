//! The console's session: its token in a cookie no page script can read.
//!
//! `POST /v1/session` with a token sets `__Host-hearth-session`: HttpOnly
//! (no script reads it), `Secure` and host-only with `Path=/` (the
//! `__Host-` prefix makes the browser refuse it otherwise, so no other
//! host can plant or read one), `SameSite=Strict` (no other site's page
//! sends it). The cookie alone authenticates nothing but `GET
//! /v1/session`: every other call needs the `Hearth-Csrf` header too,
//! which the answer gives and which only the console's own scripts, on
//! its own origin, can read. A page elsewhere that gets the browser to
//! send the cookie cannot send the header.
//!
//! The cookie and the header are Hearth's: neither reaches function code,
//! its tapes, or its logs.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::{ApiError, AppState};

/// The cookie's name.
pub(crate) const COOKIE: &str = "__Host-hearth-session";
/// The header that proves a call comes from the console's own scripts.
pub(crate) const CSRF: HeaderName = HeaderName::from_static("hearth-csrf");

/// The CSRF value of a session holding `token`: derived from it, so the
/// node keeps nothing per session, and useless without the cookie.
fn csrf_of(token: &str) -> String {
    let key = blake3::derive_key("hearth 2026-11 console session csrf", token.as_bytes());
    blake3::Hash::from_bytes(key).to_hex()[..32].to_string()
}

/// The session token in a `Cookie` header value, if there is one.
fn token_in(cookie: &str) -> Option<&str> {
    cookie.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE).then_some(value.trim())
    })
}

/// Applies the session to a request at the edge: a request without
/// `Authorization` whose session cookie comes with its CSRF header (or
/// that asks `GET /v1/session`) is authenticated as the cookie's token.
/// On an invocation, the cookie and the CSRF header are then taken out
/// (whatever else the caller's `Cookie` holds stays).
pub(crate) fn credential(h: &mut HeaderMap, path: &str, method: &Method, invokes: bool) {
    if !h.contains_key(header::COOKIE) {
        return;
    }
    let token = h
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|c| token_in(c.to_str().ok()?))
        .next()
        .map(str::to_owned);
    if let Some(token) = token
        && !h.contains_key(header::AUTHORIZATION)
    {
        let asks_session = path == "/v1/session" && method == Method::GET;
        let proved = h
            .get(CSRF)
            .is_some_and(|v| v.as_bytes() == csrf_of(&token).as_bytes());
        if (asks_session || proved)
            && let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}"))
        {
            h.insert(header::AUTHORIZATION, v);
        }
    }
    if invokes {
        let kept: Vec<HeaderValue> = h
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|c| {
                let rest: Vec<&str> = c
                    .to_str()
                    .ok()?
                    .split(';')
                    .map(str::trim)
                    .filter(|p| p.split('=').next() != Some(COOKIE))
                    .collect();
                (!rest.is_empty() && rest != [""]).then(|| rest.join("; ").parse().ok())?
            })
            .collect();
        h.remove(header::COOKIE);
        for c in kept {
            h.append(header::COOKIE, c);
        }
        h.remove(CSRF);
    }
}

/// A login: the token, in the body (or as `Authorization`).
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct Login {
    token: Option<String>,
}

/// Who a session is, and the CSRF value its calls must carry.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SessionInfo {
    tenant: String,
    scope: hearth_store::Scope,
    /// Send as `Hearth-Csrf` with every call made under the cookie.
    csrf: String,
}

impl SessionInfo {
    /// The session of `p`, whose token is `token`.
    fn of(p: &hearth_store::Principal, token: &str) -> SessionInfo {
        SessionInfo {
            scope: p.scope(),
            tenant: p.tenant.clone(),
            csrf: csrf_of(token),
        }
    }
}

fn cookie(value: &str, max_age: Option<u32>) -> HeaderValue {
    let age = max_age
        .map(|s| format!("; Max-Age={s}"))
        .unwrap_or_default();
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/; Secure; HttpOnly; SameSite=Strict{age}"
    ))
    .expect("a token is a valid cookie value")
}

/// Log in: the console's session
///
/// Checks the token (any that may read the whole tenant: scope read,
/// deploy or admin) and sets it as an HttpOnly, `SameSite=Strict`,
/// host-only session cookie. Calls under the cookie need the answer's
/// `csrf` as the `Hearth-Csrf` header. A JSON body is required, so a form
/// of another site cannot log a browser in.
#[utoipa::path(post, path = "/v1/session", tag = "console", security(()),
    request_body = Login,
    responses((status = 200, body = SessionInfo, description = "Logged in; `Set-Cookie` holds the session"),
        (status = 401, description = "The token is not valid"),
        (status = 415, description = "Not a JSON body")))]
pub(crate) async fn create(
    State(s): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return Err(ApiError::UnsupportedMediaType(
            "log in with a JSON body: {\"token\": \"hth_…\"}".into(),
        ));
    }
    let login: Login = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("the login is not valid JSON: {e}")))?;
    let mut with_token = headers.clone();
    if let Some(t) = &login.token {
        let v = HeaderValue::from_str(&format!("Bearer {}", t.trim()))
            .map_err(|_| ApiError::Unauthorized("the token is not valid".into()))?;
        with_token.insert(header::AUTHORIZATION, v);
    }
    // The console reads the tenant's functions: a token that may not (one
    // only to invoke, or limited to one function) cannot log in.
    let p = s
        .auth
        .require(s.node.store(), &with_token, hearth_store::Scope::Read)
        .await?;
    let token = crate::auth::bearer(&with_token)
        .unwrap_or_default()
        .to_string();
    let info = SessionInfo::of(&p, &token);
    let mut resp = Json(info).into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, cookie(&token, None));
    Ok(resp)
}

/// The console's session: who it is, and its CSRF value
#[utoipa::path(get, path = "/v1/session", tag = "console",
    responses((status = 200, body = SessionInfo, description = "The session's principal"),
        (status = 401, description = "No session")))]
pub(crate) async fn show(
    State(s): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<SessionInfo>, ApiError> {
    let p = s.auth.caller(s.node.store(), &headers).await?;
    let token = crate::auth::bearer(&headers).unwrap_or_default();
    Ok(Json(SessionInfo::of(&p, token)))
}

/// Log out: the session cookie is cleared
#[utoipa::path(delete, path = "/v1/session", tag = "console", security(()),
    responses((status = 204, description = "The cookie is cleared")))]
pub(crate) async fn end() -> Response {
    let mut resp = axum::http::StatusCode::NO_CONTENT.into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, cookie("", Some(0)));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_cookie_authenticates_only_with_its_csrf_value() {
        let csrf = csrf_of("hth_t");
        let cookie = format!("x=1; {COOKIE}=hth_t");
        let mut h = with(&[("cookie", &cookie), ("hearth-csrf", &csrf)]);
        credential(&mut h, "/v1/functions", &Method::POST, false);
        assert_eq!(h["authorization"], "Bearer hth_t");

        let mut h = with(&[("cookie", &cookie)]);
        credential(&mut h, "/v1/functions", &Method::POST, false);
        assert!(h.get("authorization").is_none(), "no CSRF header, no token");
        let mut h = with(&[("cookie", &cookie), ("hearth-csrf", "guess")]);
        credential(&mut h, "/v1/functions", &Method::GET, false);
        assert!(h.get("authorization").is_none(), "a wrong CSRF value");

        let mut h = with(&[("cookie", &cookie)]);
        credential(&mut h, "/v1/session", &Method::GET, false);
        assert_eq!(h["authorization"], "Bearer hth_t", "the session asks");
    }

    #[test]
    fn an_invocation_never_sees_the_session() {
        let csrf = csrf_of("hth_t");
        let cookie = format!("x=1; {COOKIE}=hth_t; y=2");
        let mut h = with(&[("cookie", &cookie), ("hearth-csrf", &csrf)]);
        credential(&mut h, "/fn/a/f", &Method::GET, true);
        assert_eq!(h["cookie"], "x=1; y=2");
        assert!(h.get("hearth-csrf").is_none());
        assert_eq!(
            h["authorization"], "Bearer hth_t",
            "the console may invoke a private function (and the token is stripped later)"
        );

        let mut h = with(&[("cookie", &format!("{COOKIE}=hth_t"))]);
        credential(&mut h, "/fn/a/f", &Method::GET, true);
        assert!(h.get("cookie").is_none());
        assert!(h.get("authorization").is_none());
    }
}
