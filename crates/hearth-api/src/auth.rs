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

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
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
        let found = store.authenticate(token).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_store::{Role, SqliteStore};

    fn headers(authorization: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(authorization).unwrap(),
        );
        h
    }

    #[test]
    fn only_a_bearer_token_of_hearths_is_a_hearth_credential() {
        let is = |v: &str| is_hearth_credential(&HeaderValue::from_str(v).unwrap());
        assert!(is("Bearer hth_abc"));
        assert!(
            is("bearer  hth_abc "),
            "the scheme is case-insensitive, the token trimmed"
        );
        assert!(!is("Bearer someone-elses-token"));
        assert!(!is("Basic aHRoX2FiYzp4"));
        assert!(!is("hth_abc"), "no scheme, no credential");
        assert_eq!(bearer(&headers("BEARER tok")), Some("tok"));
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn tokens_are_checked_against_the_store_and_a_missing_one_is_required_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        store.create_tenant("acme").await.unwrap();
        let token = store.create_token("acme", Role::Member).await.unwrap();
        let cache = TokenCache::default();

        assert!(
            cache
                .principal(&store, &HeaderMap::new())
                .await
                .unwrap()
                .is_none()
        );
        let required = cache.require(&store, &HeaderMap::new()).await.unwrap_err();
        assert!(matches!(required, ApiError::Unauthorized(_)));
        let forged = cache.principal(&store, &headers("Bearer hth_forged")).await;
        assert!(matches!(forged, Err(ApiError::Unauthorized(_))));

        let p = cache
            .require(&store, &headers(&format!("Bearer {token}")))
            .await
            .unwrap();
        assert_eq!((p.tenant.as_str(), p.role), ("acme", Role::Member));
        assert_eq!(cache.0.read().len(), 1, "a valid token is cached");
        assert!(
            cache.0.read().get("hth_forged").is_none(),
            "an invalid one is not"
        );
    }
}
