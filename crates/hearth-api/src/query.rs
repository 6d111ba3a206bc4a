//! Query-string settings of the management API.

use std::collections::BTreeMap;

use crate::ApiError;

/// The query string as key → value (the last of a repeated key wins).
pub(crate) fn params(query: Option<String>) -> BTreeMap<String, String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// The number under `k`, if given; a 400 naming it if it is not one.
pub(crate) fn number<T: std::str::FromStr>(
    p: &BTreeMap<String, String>,
    k: &str,
) -> Result<Option<T>, ApiError> {
    p.get(k)
        .map(|v| {
            v.parse()
                .map_err(|_| ApiError::BadRequest(format!("{k} {v:?} is not a number")))
        })
        .transpose()
}
