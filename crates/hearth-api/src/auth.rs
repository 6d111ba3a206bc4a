//! Bearer tokens, checked against the store and cached in memory (tokens
//! are never revoked in this version, so the cache cannot go stale).

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, header};
use hearth_store::{Principal, Store};

use crate::ApiError;

const MAX_CACHED: usize = 10_000;

#[derive(Default)]
pub(crate) struct TokenCache(RwLock<HashMap<String, Principal>>);

/// What every token Hearth issues begins with.
const TOKEN_PREFIX: &str = "hth_";

fn bearer(headers: &HeaderMap) -> Option<&str> {
    bearer_of(headers.get(header::AUTHORIZATION)?)
}

fn bearer_of(value: &HeaderValue) -> Option<&str> {
    let (scheme, token) = value.to_str().ok()?.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether an `Authorization` value carries a Hearth token, valid or not.
/// Such a header is Hearth's, and never reaches function code or tapes; a
/// function's own scheme (another bearer, Basic, …) passes through.
pub(crate) fn is_hearth_credential(value: &HeaderValue) -> bool {
    bearer_of(value).is_some_and(|t| t.starts_with(TOKEN_PREFIX))
}

impl TokenCache {
    /// The principal of the request's token; `None` if it carries none.
    pub async fn principal(
        &self,
        store: &Arc<dyn Store>,
        headers: &HeaderMap,
    ) -> Result<Option<Principal>, ApiError> {
        let Some(token) = bearer(headers) else {
            return Ok(None);
        };
        if let Some(p) = self.0.read().get(token) {
            return Ok(Some(p.clone()));
        }
        let (store, t) = (store.clone(), token.to_string());
        let found = tokio::task::spawn_blocking(move || store.authenticate(&t))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
        match found {
            Some(p) => {
                let mut map = self.0.write();
                if map.len() < MAX_CACHED {
                    map.insert(token.to_string(), p.clone());
                }
                Ok(Some(p))
            }
            None => Err(ApiError::Unauthorized("the token is not valid".into())),
        }
    }

    /// Like [`principal`](Self::principal), but a token is required.
    pub async fn require(
        &self,
        store: &Arc<dyn Store>,
        headers: &HeaderMap,
    ) -> Result<Principal, ApiError> {
        self.principal(store, headers).await?.ok_or_else(|| {
            ApiError::Unauthorized(
                "this call needs a token: send `Authorization: Bearer <token>`".into(),
            )
        })
    }
}
