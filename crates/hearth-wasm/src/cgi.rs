//! The WAGI guest contract: CGI environment in, CGI-style output out.

use bytes::Bytes;
use hearth_core::{Request, Response};

use crate::wasi::Strings;

/// The environment every invocation of a version shares: the function's
/// own variables, then the CGI/1.1 meta-variables that do not depend on
/// the request. Built once, at prepare. The function's variables come
/// first so that the first match of a name is the function's: compiled
/// JavaScript reads `env.NAME` that way (`hearth-jit`, `env_get`).
pub(crate) fn version_env<'a>(
    env: impl IntoIterator<Item = (&'a String, &'a String)>,
    function: &str,
    prefix: &str,
) -> Strings {
    let mut out = Strings::default();
    for (k, v) in env {
        out.push_var(k, v);
    }
    out.push_var("GATEWAY_INTERFACE", "CGI/1.1");
    out.push_var("SERVER_PROTOCOL", "HTTP/1.1");
    out.push_var(
        "SERVER_SOFTWARE",
        concat!("hearth/", env!("CARGO_PKG_VERSION")),
    );
    out.push_var("SCRIPT_NAME", prefix);
    out.push_var("X_FUNCTION_NAME", function);
    out
}

/// The CGI/1.1 meta-variables of one request, as WAGI passes them:
/// method, path, query, the body's `length` (none for a streamed request
/// sent without one), URI, and each header as `HTTP_NAME`. One buffer per
/// invocation; nothing else is allocated.
pub(crate) fn request_env(req: &Request, length: Option<u64>, prefix: &str) -> Strings {
    let headers: usize = req.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    let mut env = Strings::with_capacity(
        128 + 2 * (prefix.len() + req.path.len() + req.query.len())
            + headers
            + 8 * req.headers.len(),
    );
    let (method, path, query) = (req.method.as_str(), req.path.as_str(), req.query.as_str());
    env.push_var("REQUEST_METHOD", method);
    env.push_var("PATH_INFO", path);
    env.push_var("QUERY_STRING", query);
    if let Some(length) = length {
        env.push(&[b"CONTENT_LENGTH=", length.to_string().as_bytes()]);
    }
    let q: &[u8] = if query.is_empty() { b"" } else { b"?" };
    env.push(&[
        b"REQUEST_URI=",
        prefix.as_bytes(),
        path.as_bytes(),
        q,
        query.as_bytes(),
    ]);
    for (name, value) in &req.headers {
        if name.eq_ignore_ascii_case("content-type") {
            env.push_var("CONTENT_TYPE", value);
        } else if name.eq_ignore_ascii_case("authorization")
            || name.eq_ignore_ascii_case("content-length")
        {
            // Never hand the caller's credentials to the function; the
            // length is CONTENT_LENGTH above.
        } else {
            let upper: Vec<u8> = name
                .bytes()
                .map(|b| {
                    if b == b'-' {
                        b'_'
                    } else {
                        b.to_ascii_uppercase()
                    }
                })
                .collect();
            env.push(&[b"HTTP_", &upper, b"=", value.as_bytes()]);
        }
    }
    env
}

/// Splits a guest's stdout into a response: an optional CGI header block
/// (`Name: value` lines ended by an empty line; `Status: 404 Not Found`
/// sets the status, `Location:` alone means 302, `Content-Length:` is
/// dropped) followed by the body.
/// Output that does not open with such a block is all body.
pub fn parse_cgi_output(stdout: Bytes) -> Response {
    if let Some((headers, body_start)) = split_header_block(&stdout) {
        let mut status = None;
        let mut out = Vec::new();
        let mut has_location = false;
        for (k, v) in headers {
            if k.eq_ignore_ascii_case("status") {
                status = v
                    .split_whitespace()
                    .next()
                    .and_then(|s| s.parse::<u16>().ok());
            } else if k.eq_ignore_ascii_case("content-length") {
                // The daemon frames the body itself: a length the module
                // claims is not trusted.
            } else {
                has_location |= k.eq_ignore_ascii_case("location");
                out.push((k, v));
            }
        }
        let status = status
            .filter(|s| (100..=999).contains(s))
            .unwrap_or(if has_location { 302 } else { 200 });
        return Response {
            status,
            headers: out,
            body: stdout.slice(body_start..),
        };
    }
    Response {
        status: 200,
        headers: vec![("content-type".into(), "application/octet-stream".into())],
        body: stdout,
    }
}

/// The most a CGI header block may take, from the output's start.
const MAX_BLOCK: usize = 64 << 10;

/// Whether the start of `out` already tells how it will be read: a whole
/// header block, or no header block at all. False while it could still
/// become one (its last line is not finished and the lines before it are
/// headers), which only more output can settle.
pub(crate) fn head_is_known(out: &[u8]) -> bool {
    out.len() >= MAX_BLOCK || !matches!(header_block(out), Block::Unfinished)
}

/// The header block, if `out` opens with one, and where the body starts.
fn split_header_block(out: &[u8]) -> Option<(Vec<(String, String)>, usize)> {
    match header_block(out) {
        Block::Headers(headers, body_start) => Some((headers, body_start)),
        Block::None | Block::Unfinished => None,
    }
}

enum Block {
    Headers(Vec<(String, String)>, usize),
    /// The output does not open with a header block.
    None,
    /// Headers so far, and a line not yet ended.
    Unfinished,
}

fn header_block(out: &[u8]) -> Block {
    let window = &out[..out.len().min(MAX_BLOCK)];
    let mut headers = Vec::new();
    let mut pos = 0;
    loop {
        let Some(rel_end) = window[pos..].iter().position(|&b| b == b'\n') else {
            return Block::Unfinished;
        };
        let mut line = &window[pos..pos + rel_end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        pos += rel_end + 1;
        if line.is_empty() {
            return if headers.is_empty() {
                Block::None
            } else {
                Block::Headers(headers, pos)
            };
        }
        let Some((name, value)) = std::str::from_utf8(line)
            .ok()
            .and_then(|l| l.split_once(':'))
        else {
            return Block::None;
        };
        let is_token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !is_token {
            return Block::None;
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_block_sets_status_and_headers() {
        let r = parse_cgi_output(Bytes::from_static(
            b"Content-Type: text/plain\r\nStatus: 404 Not Found\r\n\r\nnope",
        ));
        assert_eq!(r.status, 404);
        assert_eq!(
            r.headers,
            vec![("Content-Type".to_string(), "text/plain".to_string())]
        );
        assert_eq!(&r.body[..], b"nope");
    }

    #[test]
    fn plain_output_is_all_body() {
        let r = parse_cgi_output(Bytes::from_static(b"hello world\n"));
        assert_eq!((r.status, &r.body[..]), (200, &b"hello world\n"[..]));
        let r = parse_cgi_output(Bytes::from_static(b"note: this is prose\nnot headers"));
        assert_eq!(
            &r.body[..],
            b"note: this is prose\nnot headers",
            "no blank line, no header block"
        );
        let r = parse_cgi_output(Bytes::from_static(b"a b: c\n\nx"));
        assert_eq!(
            &r.body[..],
            b"a b: c\n\nx",
            "a name with a space is not a header"
        );
    }

    #[test]
    fn location_alone_redirects() {
        let r = parse_cgi_output(Bytes::from_static(b"Location: /elsewhere\n\n"));
        assert_eq!(r.status, 302);
        assert!(r.body.is_empty());
    }

    #[test]
    fn cgi_env_maps_headers_and_hides_credentials() {
        let req = Request {
            method: "POST".into(),
            path: "/a/b".into(),
            query: "x=1".into(),
            headers: vec![
                ("content-type".into(), "text/plain".into()),
                ("x-trace-id".into(), "abc".into()),
                ("authorization".into(), "Bearer secret".into()),
            ],
            body: Bytes::from_static(b"hey"),
        };
        let request = request_env(&req, Some(3), "/fn/t/hello");
        let version = version_env([], "hello", "/fn/t/hello");
        let vars: Vec<(String, String)> = version
            .iter()
            .chain(request.iter())
            .map(|s| {
                let (k, v) = std::str::from_utf8(s).unwrap().split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("REQUEST_METHOD"), Some("POST"));
        assert_eq!(get("PATH_INFO"), Some("/a/b"));
        assert_eq!(get("QUERY_STRING"), Some("x=1"));
        assert_eq!(get("CONTENT_LENGTH"), Some("3"));
        assert_eq!(get("CONTENT_TYPE"), Some("text/plain"));
        assert_eq!(get("HTTP_X_TRACE_ID"), Some("abc"));
        assert_eq!(get("REQUEST_URI"), Some("/fn/t/hello/a/b?x=1"));
        assert_eq!(get("HTTP_AUTHORIZATION"), None);
        assert_eq!(get("SCRIPT_NAME"), Some("/fn/t/hello"));
        assert_eq!(get("GATEWAY_INTERFACE"), Some("CGI/1.1"));
        assert_eq!(get("X_FUNCTION_NAME"), Some("hello"));
        // A streamed request sent without a length has none in CGI.
        let streamed = request_env(&req, None, "/fn/t/hello");
        assert!(
            streamed.iter().all(|s| !s.starts_with(b"CONTENT_LENGTH=")),
            "no CONTENT_LENGTH"
        );
    }

    #[test]
    fn the_head_is_known_once_the_block_ends_or_cannot_be_one() {
        assert!(!head_is_known(b""));
        assert!(!head_is_known(b"Content-Type: text/pl"));
        assert!(!head_is_known(b"Content-Type: text/plain\r\nStatus: 2"));
        assert!(head_is_known(b"Content-Type: text/plain\r\n\r\n"));
        assert!(head_is_known(b"hello world\n"), "prose is body");
        assert!(head_is_known(b"\nbody after a blank line"));
        assert!(
            head_is_known(&[b'x'; MAX_BLOCK]),
            "past the window it is body"
        );
    }

    #[test]
    fn a_claimed_content_length_is_dropped() {
        let r = parse_cgi_output(Bytes::from_static(b"Content-Length: 99\r\n\r\nshort"));
        assert!(r.headers.is_empty(), "{:?}", r.headers);
        assert_eq!(&r.body[..], b"short");
    }
}

/// What a guest writes is tenant input: no bytes make the reader panic,
/// and a header block it finds is exactly what was written.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn no_output_makes_it_panic_or_answer_an_invalid_status(
            out in prop::collection::vec(any::<u8>(), 0..600),
        ) {
            let r = parse_cgi_output(Bytes::from(out.clone()));
            prop_assert!((100..=999).contains(&r.status));
            prop_assert!(out.ends_with(&r.body), "the body is what follows the head");
            prop_assert!(r.headers.iter().all(|(k, _)| !k.eq_ignore_ascii_case("content-length")));
            let _ = head_is_known(&out);
        }

        #[test]
        fn a_header_block_reads_back_as_written(
            headers in prop::collection::vec(("[A-Za-z][A-Za-z0-9_-]{0,12}", "[ -~&&[^:]]{0,20}"), 1..6),
            body in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let headers: Vec<(String, String)> = headers
                .into_iter()
                .filter(|(k, _)| {
                    !["status", "content-length"].contains(&k.to_ascii_lowercase().as_str())
                })
                .map(|(k, v)| (k, v.trim().to_string()))
                .collect();
            prop_assume!(!headers.is_empty());
            let mut out = Vec::new();
            for (k, v) in &headers {
                out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&body);
            let r = parse_cgi_output(Bytes::from(out));
            prop_assert_eq!(&r.headers, &headers);
            prop_assert_eq!(&r.body[..], &body[..]);
            let located = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("location"));
            prop_assert_eq!(r.status, if located { 302 } else { 200 });
        }
    }
}
