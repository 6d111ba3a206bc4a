//! Bearer tokens, checked against the store and cached in memory for
//! [`RECHECK`]: a revoked token stops working on every node and gateway
//! within that and one store query (while one request asks again, the
//! others take the grant as it was), with no message between them to
//! lose.
//!
//! Each call names the scope it needs. Tenant-wide calls refuse a token
//! limited to one function ([`TokenCache::require`]); calls on one
//! function take it for that function ([`TokenCache::require_for`]);
//! lists take it and show only its function
//! ([`TokenCache::require_listing`]).

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use hearth_store::{Principal, Scope, Store};

use crate::ApiError;

const MAX_CACHED: usize = 10_000;

/// How long a token's grant is trusted before the store is asked again.
pub(crate) const RECHECK: Duration = Duration::from_millis(500);

struct Cached {
    /// Shared with the requests that use it: a cache hit allocates nothing.
    principal: Arc<Principal>,
    checked: Instant,
    /// A request is asking the store again: the others meanwhile take
    /// the grant as it was (for that query's time, and at most another
    /// [`RECHECK`]), so a busy token costs one query per period, not one
    /// per request that arrives while it is stale.
    refreshing: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
pub(crate) struct TokenCache(RwLock<HashMap<String, Cached>>);

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

/// `ms` as a UTC date and time, for messages.
pub(crate) fn when(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
        Err(_) => format!("{ms} ms after the epoch"),
    }
}

/// Refuses a token whose scope does not allow `needed`.
pub(crate) fn check_scope(p: &Principal, needed: Scope) -> Result<(), ApiError> {
    if p.scope().allows(needed) {
        return Ok(());
    }
    let why = match needed {
        Scope::Admin => "it is the operator's",
        Scope::Deploy => "it changes the tenant's functions",
        Scope::Invoke => "it runs a function",
        Scope::Read => "it reads the tenant's functions and their records",
    };
    Err(ApiError::Forbidden(format!(
        "this call needs a token with scope {needed} ({why}); this token's scope is {}: \
         `hearth token create --scope {needed}` makes one",
        p.scope()
    )))
}

/// Refuses a token limited to a function other than `function`.
pub(crate) fn check_function(p: &Principal, function: &str) -> Result<(), ApiError> {
    match &p.grant.function {
        Some(only) if only != function => Err(ApiError::Forbidden(format!(
            "this token may act only on function {only}, not {function}"
        ))),
        _ => Ok(()),
    }
}

/// The caller's tenant, once its token may make a call that needs
/// `needed` on function `name` and the tenant has that function (404
/// otherwise, as for every function route).
pub(crate) async fn function_owner(
    s: &crate::AppState,
    headers: &HeaderMap,
    name: &str,
    needed: Scope,
) -> Result<String, ApiError> {
    let p = s
        .auth
        .require_for(s.node.store(), headers, needed, name)
        .await?;
    if s.node
        .store()
        .list_versions(&p.tenant, name)
        .await?
        .is_empty()
    {
        return Err(ApiError::NotFound(format!(
            "function {}/{name} does not exist",
            p.tenant
        )));
    }
    Ok(p.tenant.clone())
}

impl TokenCache {
    /// The principal of the request's token; `None` if it carries none.
    /// An unknown or expired token is refused.
    pub async fn principal(
        &self,
        store: &Arc<dyn Store>,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<Principal>>, ApiError> {
        let Some(token) = bearer(headers) else {
            return Ok(None);
        };
        let cached = self.0.read().get(token).and_then(|c| {
            let age = c.checked.elapsed();
            let fresh = age < RECHECK
                || (age < 2 * RECHECK
                    && c.refreshing.swap(true, std::sync::atomic::Ordering::AcqRel));
            fresh.then(|| Arc::clone(&c.principal))
        });
        let p = match cached {
            Some(p) => p,
            None => {
                let found = store.authenticate(token).await?;
                let Some(p) = found.map(Arc::new) else {
                    self.0.write().remove(token);
                    return Err(ApiError::Unauthorized(
                        "the token is not valid: it was revoked, or never issued".into(),
                    ));
                };
                let mut map = self.0.write();
                if map.len() >= MAX_CACHED {
                    map.retain(|_, c| c.checked.elapsed() < RECHECK);
                }
                if map.len() < MAX_CACHED {
                    map.insert(
                        token.to_string(),
                        Cached {
                            principal: p.clone(),
                            checked: Instant::now(),
                            refreshing: Default::default(),
                        },
                    );
                }
                p
            }
        };
        if let Some(at) = p.grant.expires_ms
            && p.expired(hearth_core::unix_time_ms())
        {
            return Err(ApiError::Unauthorized(format!(
                "the token {} expired at {}: make a new one (`hearth token create`) and \
                 revoke this one (`hearth token revoke {}`)",
                p.id,
                when(at),
                p.id
            )));
        }
        Ok(Some(p))
    }

    /// The request's principal, whatever it may do; a token is required.
    pub async fn caller(
        &self,
        store: &Arc<dyn Store>,
        headers: &HeaderMap,
    ) -> Result<Arc<Principal>, ApiError> {
        self.principal(store, headers).await?.ok_or_else(|| {
            ApiError::Unauthorized(
                "this call needs a token: send `Authorization: Bearer <token>`".into(),
            )
        })
    }

    /// A token whose scope allows `needed` on every function of its
    /// tenant: one limited to a function is refused.
    pub async fn require(
        &self,
        store: &Arc<dyn Store>,
        headers: &HeaderMap,
        needed: Scope,
    ) -> Result<Arc<Principal>, ApiError> {
        let p = self.require_listing(store, headers, needed).await?;
        if let Some(only) = &p.grant.function {
            return Err(ApiError::Forbidden(format!(
                "this token may act only on function {only}, and this call spans the tenant's \
                 functions: use a token made without --function"
            )));
        }
        Ok(p)
    }

    /// A token whose scope allows `needed` on `function`.
    pub async fn require_for(
        &self,
        store: &Arc<dyn Store>,
        headers: &HeaderMap,
        needed: Scope,
        function: &str,
    ) -> Result<Arc<Principal>, ApiError> {
        let p = self.require_listing(store, headers, needed).await?;
        check_function(&p, function)?;
        Ok(p)
    }

    /// A token whose scope allows `needed`, limited to a function or not:
    /// the caller shows it only `p.grant.function`'s part.
    pub async fn require_listing(
        &self,
        store: &Arc<dyn Store>,
        headers: &HeaderMap,
        needed: Scope,
    ) -> Result<Arc<Principal>, ApiError> {
        let p = self.caller(store, headers).await?;
        check_scope(&p, needed)?;
        Ok(p)
    }

    /// Drops the token `id` from this cache at once (it was revoked here;
    /// elsewhere it goes within [`RECHECK`]).
    pub fn forget(&self, id: &str) {
        self.0.write().retain(|_, c| c.principal.id != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_store::{Grant, SqliteStore};

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
        let (token, _) = store
            .create_token("acme", &Grant::of(Scope::Deploy))
            .await
            .unwrap();
        let cache = TokenCache::default();

        assert!(
            cache
                .principal(&store, &HeaderMap::new())
                .await
                .unwrap()
                .is_none()
        );
        let required = cache.caller(&store, &HeaderMap::new()).await.unwrap_err();
        assert!(matches!(required, ApiError::Unauthorized(_)));
        let forged = cache.principal(&store, &headers("Bearer hth_forged")).await;
        assert!(matches!(forged, Err(ApiError::Unauthorized(_))));

        let p = cache
            .require(&store, &headers(&format!("Bearer {token}")), Scope::Read)
            .await
            .unwrap();
        assert_eq!((p.tenant.as_str(), p.scope()), ("acme", Scope::Deploy));
        assert_eq!(cache.0.read().len(), 1, "a valid token is cached");
        assert!(
            cache.0.read().get("hth_forged").is_none(),
            "an invalid one is not"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_revoked_token_fails_once_its_grant_is_rechecked_and_at_once_where_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        store.create_tenant("acme").await.unwrap();
        let grant = Grant::of(Scope::Read);
        let (a, made_a) = store.create_token("acme", &grant).await.unwrap();
        let (b, made_b) = store.create_token("acme", &grant).await.unwrap();
        let (here, elsewhere) = (TokenCache::default(), TokenCache::default());
        let (a, b) = (
            headers(&format!("Bearer {a}")),
            headers(&format!("Bearer {b}")),
        );
        for cache in [&here, &elsewhere] {
            cache.caller(&store, &a).await.unwrap();
            cache.caller(&store, &b).await.unwrap();
        }
        store.revoke_token("acme", &made_a.id).await.unwrap();
        store.revoke_token("acme", &made_b.id).await.unwrap();
        here.forget(&made_a.id);
        assert!(here.caller(&store, &a).await.is_err(), "forgotten here");
        // Elsewhere the grant holds until it is checked again.
        assert!(elsewhere.caller(&store, &a).await.is_ok());
        tokio::time::sleep(RECHECK).await;
        assert!(elsewhere.caller(&store, &a).await.is_err());
        assert!(elsewhere.caller(&store, &b).await.is_err());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn scopes_functions_and_expiry_are_enforced_with_the_fix_named() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        store.create_tenant("acme").await.unwrap();
        let cache = TokenCache::default();
        let make = async |grant: Grant| {
            let (t, _) = store.create_token("acme", &grant).await.unwrap();
            headers(&format!("Bearer {t}"))
        };
        let read = make(Grant::of(Scope::Read)).await;
        let err = cache
            .require(&store, &read, Scope::Deploy)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ApiError::Forbidden(m) if m.contains("--scope deploy")),
            "{err:?}"
        );
        cache.require(&store, &read, Scope::Read).await.unwrap();

        let only_f = make(Grant {
            function: Some("f".into()),
            ..Grant::of(Scope::Deploy)
        })
        .await;
        cache
            .require_for(&store, &only_f, Scope::Deploy, "f")
            .await
            .unwrap();
        assert!(matches!(
            cache.require_for(&store, &only_f, Scope::Read, "g").await,
            Err(ApiError::Forbidden(_))
        ));
        assert!(matches!(
            cache.require(&store, &only_f, Scope::Read).await,
            Err(ApiError::Forbidden(m)) if m.contains("without --function")
        ));
        let p = cache
            .require_listing(&store, &only_f, Scope::Read)
            .await
            .unwrap();
        assert_eq!(p.grant.function.as_deref(), Some("f"));

        let expired = make(Grant {
            expires_ms: Some(hearth_core::unix_time_ms() - 1),
            ..Grant::of(Scope::Deploy)
        })
        .await;
        assert!(matches!(
            cache.caller(&store, &expired).await,
            Err(ApiError::Unauthorized(m)) if m.contains("expired") && m.contains("hearth token create")
        ));
    }
}
