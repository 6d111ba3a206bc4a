//! The web console at `/console` (docs/console.md): a page and its
//! scripts, built into the binary. It holds no data and needs no token to
//! load; everything it shows comes from the API under the token the user
//! logs in with, so a tenant sees only its own.
//!
//! Tenants' data (names, bodies, logs) is shown by the page as text, and a
//! strict Content-Security-Policy keeps any script but these files from
//! running, should some of it ever reach the page as markup.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

/// Only these files, with these types: no path is looked up on disk.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../console/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../console/app.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../console/console.css"),
    ),
    (
        "vendor/htm-preact-3.1.1.module.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../console/vendor/htm-preact-3.1.1.module.js"),
    ),
    (
        "vendor/uPlot-1.6.32.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../console/vendor/uPlot-1.6.32.iife.min.js"),
    ),
    (
        "vendor/uPlot-1.6.32.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../console/vendor/uPlot-1.6.32.min.css"),
    ),
];

/// Scripts and styles from these files only; data from the API only
/// (images too: the trace report's charts are fetched with the token and
/// shown from `blob:` URLs); no framing, no forms posted elsewhere, no
/// `<base>`.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The web console (docs/console.md); `/console` redirects to `/console/`
///
/// The page lives at `/console/`, so its relative links work. It needs no
/// token to load: the user logs in on it, and its data comes from `/v1`.
#[utoipa::path(get, path = "/console", tag = "console", security(()),
    responses((status = 308, description = "To `/console/`, the console's page")))]
pub(crate) async fn root() -> Redirect {
    Redirect::permanent("/console/")
}

pub(crate) async fn index() -> Response {
    file("index.html")
}

/// One of the console's files (its scripts and styles, built into the binary)
#[utoipa::path(get, path = "/console/{path}", tag = "console", security(()),
    params(("path" = String, Path, description = "`app.js`, `console.css`, `vendor/…`")),
    responses((status = 200, description = "The file"),
        (status = 404, description = "No such console file")))]
pub(crate) async fn asset(Path(path): Path<String>) -> Response {
    file(&path)
}

/// Headers that make a file of ours be taken as `content_type` and
/// nothing else (`nosniff`), under the policy `csp`.
pub(crate) fn locked_down(h: &mut HeaderMap, content_type: &'static str, csp: &'static str) {
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

fn file(path: &str) -> Response {
    let Some((_, kind, bytes)) = FILES.iter().find(|(name, _, _)| *name == path) else {
        return (StatusCode::NOT_FOUND, "no such console file").into_response();
    };
    let mut resp = (*bytes).into_response();
    let h = resp.headers_mut();
    locked_down(h, kind, CSP);
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The libraries' names carry their versions; the console's own files
    // change with the binary.
    let cache = if path.starts_with("vendor/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    resp
}
