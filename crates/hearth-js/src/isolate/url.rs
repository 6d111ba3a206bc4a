//! The WHATWG URL Standard for the prelude's `URL` and `URLSearchParams`,
//! from the `url` crate (Servo's implementation, run against the WPT URL
//! tests): the prelude keeps only the objects' shape, and every parse,
//! setter and form encoding happens here.
//!
//! A parsed URL crosses the bridge as its components, in [`PARTS`] order:
//! the prelude reads them without another call and sends `href` back with
//! a setter's name and value.

use rquickjs::function::Opt;
use rquickjs::{Ctx, Function, Object};
use url::{Url, quirks};

/// The components a parsed URL crosses the bridge as, in this order (the
/// prelude indexes them).
pub(super) const PARTS: [&str; 11] = [
    "href", "origin", "protocol", "username", "password", "host", "hostname", "port", "pathname",
    "search", "hash",
];

fn parts(url: &Url) -> Vec<String> {
    vec![
        quirks::href(url).to_string(),
        quirks::origin(url),
        quirks::protocol(url).to_string(),
        quirks::username(url).to_string(),
        quirks::password(url).to_string(),
        quirks::host(url).to_string(),
        quirks::hostname(url).to_string(),
        quirks::port(url).to_string(),
        quirks::pathname(url).to_string(),
        quirks::search(url).to_string(),
        quirks::hash(url).to_string(),
    ]
}

/// `new URL(input, base)`: the components, or `None` where the standard
/// says the parse fails (the prelude throws its `TypeError`).
fn parse(input: &str, base: Option<&str>) -> Option<Vec<String>> {
    let base = match base {
        Some(b) => Some(Url::parse(b).ok()?),
        None => None,
    };
    Url::options()
        .base_url(base.as_ref())
        .parse(input)
        .ok()
        .map(|u| parts(&u))
}

/// A URL's setter: the components after it. Setting `href` to something
/// that does not parse is `None` (the standard throws); other setters
/// ignore a value they cannot take, as the standard says.
fn set(href: &str, field: &str, value: &str) -> Option<Vec<String>> {
    let mut url = Url::parse(href).ok()?;
    match field {
        "href" => quirks::set_href(&mut url, value).ok()?,
        "protocol" => drop(quirks::set_protocol(&mut url, value)),
        "username" => drop(quirks::set_username(&mut url, value)),
        "password" => drop(quirks::set_password(&mut url, value)),
        "host" => drop(quirks::set_host(&mut url, value)),
        "hostname" => drop(quirks::set_hostname(&mut url, value)),
        "port" => drop(quirks::set_port(&mut url, value)),
        "pathname" => quirks::set_pathname(&mut url, value),
        "search" => quirks::set_search(&mut url, value),
        "hash" => quirks::set_hash(&mut url, value),
        _ => return None,
    }
    Some(parts(&url))
}

/// `application/x-www-form-urlencoded` parsing, as `URLSearchParams` takes
/// a string (a leading `?` is the caller's to strip).
fn form_parse(s: &str) -> Vec<Vec<String>> {
    form_urlencoded::parse(s.as_bytes())
        .map(|(k, v)| vec![k.into_owned(), v.into_owned()])
        .collect()
}

/// The serialization `URLSearchParams.toString()` gives.
fn form_serialize(pairs: Vec<Vec<String>>) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for pair in &pairs {
        if let [k, v] = pair.as_slice() {
            out.append_pair(k, v);
        }
    }
    out.finish()
}

/// Adds `urlParts`, `urlParse`, `urlSet`, `formParse` and `formSerialize`
/// to the bridge.
pub(super) fn install<'js>(ctx: &Ctx<'js>, h: &Object<'js>) -> rquickjs::Result<()> {
    h.set("urlParts", PARTS.to_vec())?;
    h.set(
        "urlParse",
        Function::new(ctx.clone(), |input: String, base: Opt<String>| {
            parse(&input, base.0.as_deref())
        })?,
    )?;
    h.set(
        "urlSet",
        Function::new(ctx.clone(), |href: String, field: String, value: String| {
            set(&href, &field, &value)
        })?,
    )?;
    h.set(
        "formParse",
        Function::new(ctx.clone(), |s: String| form_parse(&s))?,
    )?;
    h.set("formSerialize", Function::new(ctx.clone(), form_serialize)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_in_the_order_the_prelude_reads_them() {
        let p = parse("https://u:p@example.com:8443/a/../b?x=1#y", None).unwrap();
        let got: Vec<(&str, &str)> = PARTS
            .iter()
            .copied()
            .zip(p.iter().map(String::as_str))
            .collect();
        assert_eq!(
            got,
            [
                ("href", "https://u:p@example.com:8443/b?x=1#y"),
                ("origin", "https://example.com:8443"),
                ("protocol", "https:"),
                ("username", "u"),
                ("password", "p"),
                ("host", "example.com:8443"),
                ("hostname", "example.com"),
                ("port", "8443"),
                ("pathname", "/b"),
                ("search", "?x=1"),
                ("hash", "#y"),
            ]
        );
        assert!(parse("/relative", None).is_none());
        assert!(parse("/relative", Some("not a base")).is_none());
        assert_eq!(
            parse("c?d", Some("http://h/a/b")).unwrap()[0],
            "http://h/a/c?d"
        );
    }

    #[test]
    fn setters_follow_the_standard() {
        let s = |field, value| set("http://h/p?q#f", field, value).map(|p| p[0].clone());
        assert_eq!(s("port", "8080").as_deref(), Some("http://h:8080/p?q#f"));
        assert_eq!(s("port", "nope").as_deref(), Some("http://h/p?q#f"));
        assert_eq!(s("search", "").as_deref(), Some("http://h/p#f"));
        assert!(s("href", "::").is_none());
        assert_eq!(
            form_serialize(form_parse("a=1+2&b=%C3%A9&c")),
            "a=1+2&b=%C3%A9&c="
        );
    }
}
