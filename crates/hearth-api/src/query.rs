//! Query-string settings of the management API: each route takes a struct
//! of its settings (which is also what `/v1/openapi.json` describes), read
//! by [`Query`]. An unknown setting, a repeated one, or a value of the
//! wrong type is a 400 naming the setting, never silently ignored.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::ApiError;

/// A route's query settings, `T`, or a 400 that names what is wrong.
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parse(parts.uri.query().unwrap_or_default()).map(Query)
    }
}

/// `query` (`a=1&b=x`, percent-encoded) as `T`.
pub(crate) fn parse<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs = || form_urlencoded::parse(query.as_bytes());
    serde_path_to_error::deserialize(serde_urlencoded::Deserializer::new(pairs())).map_err(|e| {
        let setting = e.path().to_string();
        let why = e.into_inner();
        match pairs().find(|(k, _)| *k == setting) {
            Some((_, value)) => ApiError::BadRequest(format!("{setting} {value:?}: {why}")),
            None => ApiError::BadRequest(format!("query {query:?}: {why}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        limit: Option<u32>,
        name: Option<String>,
    }

    fn refused(query: &str) -> String {
        match parse::<Settings>(query) {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{query}: a 400, not {other:?}"),
        }
    }

    #[test]
    fn settings_are_read_and_bad_ones_are_named() {
        let s: Settings = parse("limit=7&name=a%20b").unwrap();
        assert_eq!(
            s,
            Settings {
                limit: Some(7),
                name: Some("a b".into())
            }
        );
        assert_eq!(
            parse::<Settings>("").unwrap(),
            Settings {
                limit: None,
                name: None
            }
        );
        let m = refused("limit=ten");
        assert!(m.starts_with("limit \"ten\""), "{m}");
        let m = refused("limt=5");
        assert!(
            m.contains("unknown field `limt`") && m.contains("`limit`"),
            "{m}"
        );
        let m = refused("limit=5&limit=7");
        assert!(m.contains("duplicate field `limit`"), "{m}");
    }
}
