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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_of_a_repeated_key_wins_and_a_bad_number_is_named() {
        let p = params(Some("limit=5&name=a%20b&limit=7".into()));
        assert_eq!(p["name"], "a b");
        assert_eq!(number::<usize>(&p, "limit").unwrap(), Some(7));
        assert_eq!(number::<usize>(&p, "absent").unwrap(), None);
        let bad = params(Some("limit=ten".into()));
        let Err(ApiError::BadRequest(m)) = number::<usize>(&bad, "limit") else {
            panic!("a 400");
        };
        assert!(m.contains("limit") && m.contains("ten"), "{m}");
        assert!(params(None).is_empty());
    }
}
