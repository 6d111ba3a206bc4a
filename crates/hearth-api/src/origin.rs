//! Whose origin a request is on: the operator's (console and API) or a
//! tenant's (its functions), and what that allows.
//!
//! A browser draws its security lines between origins: scripts of one
//! origin read the storage, cookies and service workers of that origin
//! only. Tenant code is hostile, so it never runs on the console's origin:
//!
//! - **Its own origin.** `{tenant}.{functions_domain}` serves the tenant's
//!   functions at `/{name}/…` (`--functions-domain`, default `localhost`,
//!   whose subdomains browsers resolve to the loopback address). There a
//!   function's page is an ordinary page of an origin only its tenant's
//!   functions share; it cannot set a cookie for a parent domain, and a
//!   service worker it registers covers at most its own `/{name}/`.
//! - **On the console's origin** (`/fn/{tenant}/{name}`, for API clients)
//!   every answer carries `Content-Security-Policy: sandbox …`: the browser
//!   gives the page an opaque origin of its own, so its scripts reach none
//!   of the console's storage, cookies or service workers, and it cannot
//!   register one. It sets no cookies and allows no service-worker scope.
//!
//! Either way, the console's session cookie and CSRF header never reach a
//! function ([`crate::session`]).

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Request, Uri, header};
use axum::response::Response;

/// What a page served from `/fn` on the console's origin may do: run its
/// scripts and forms, inside an opaque origin of its own.
pub(crate) const SANDBOX: &str =
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

const SERVICE_WORKER_ALLOWED: &str = "service-worker-allowed";

/// Where a request landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Site {
    /// The console's and the API's origin.
    Operator,
    /// `{tenant}.{functions_domain}`: that tenant's functions.
    Tenant(String),
}

/// The tenant whose origin `host` (a `Host` header: name and maybe port)
/// is under `domain` (lowercase), if it is one. Runs on every request:
/// it allocates only for a tenant's host.
fn tenant_of(host: &str, domain: &str) -> Option<String> {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    let cut = name.len().checked_sub(domain.len() + 1)?;
    let (label, dot_domain) = (name.get(..cut)?, name.get(cut..)?);
    if !(dot_domain.starts_with('.') && dot_domain[1..].eq_ignore_ascii_case(domain)) {
        return None;
    }
    let label = label.to_ascii_lowercase();
    hearth_core::validate_tenant_name(&label).ok()?;
    Some(label)
}

/// The request's site: a tenant's when its host is one under the
/// functions domain.
fn site(headers: &HeaderMap, uri: &Uri, domain: &str) -> Site {
    let host = uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()));
    match host.and_then(|h| tenant_of(h, domain)) {
        Some(t) => Site::Tenant(t),
        None => Site::Operator,
    }
}

/// The edge of every request, before it is routed: on a tenant's origin,
/// everything is that tenant's functions (`/{name}/…` becomes
/// `/fn/{tenant}/{name}/…`); on the operator's, the session cookie stands
/// for its token ([`crate::session::credential`]). The request carries its
/// [`Site`], which the invocation routes hold a function's answer to
/// ([`held_to_origin`]).
pub(crate) fn edge<B>(domain: &str, req: Request<B>) -> Request<B> {
    let (mut parts, body) = req.into_parts();
    let site = site(&parts.headers, &parts.uri, domain);
    let invokes = match &site {
        Site::Tenant(tenant) => {
            let to = format!("/fn/{tenant}{}", parts.uri.path());
            let rewritten = match parts.uri.query() {
                Some(q) => format!("{to}?{q}"),
                None => to,
            };
            // A path that does not parse again is left as it was: it then
            // meets no route of the operator's with a tenant's site, and
            // the invocation routes refuse it.
            if let Ok(uri) = rewritten.parse::<Uri>() {
                parts.uri = uri;
            }
            true
        }
        Site::Operator => parts.uri.path().starts_with("/fn/"),
    };
    crate::session::credential(&mut parts.headers, parts.uri.path(), &parts.method, invokes);
    if let Site::Tenant(_) = site {
        parts.extensions.insert(site);
    }
    Request::from_parts(parts, body)
}

/// The application with its edge: what the listener serves.
#[derive(Clone)]
pub struct App {
    pub(crate) router: axum::Router,
    pub(crate) domain: Arc<str>,
    /// The connection this copy serves ([`App::for_connection`]).
    pub(crate) connection: Option<crate::Connection>,
}

impl App {
    /// This application for one connection: requests that carry a body
    /// hold it against their client's share of the node's body budget as
    /// well as the node's, and pay for it from the client's body rate.
    pub fn for_connection(&self, connection: crate::Connection) -> App {
        App {
            connection: Some(connection),
            ..self.clone()
        }
    }
}

impl<B> tower::Service<Request<B>> for App
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    // The router's own future: the edge adds no box and no task.
    type Future = axum::routing::future::RouteFuture<std::convert::Infallible>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let mut req = edge(&self.domain, req);
        // Only a request with a body needs its client (an extension costs
        // an allocation per request).
        if let Some(connection) = &self.connection
            && (req.headers().contains_key(header::TRANSFER_ENCODING)
                || req
                    .headers()
                    .get(header::CONTENT_LENGTH)
                    .is_some_and(|n| n != "0"))
        {
            let client = connection.client_of(req.headers());
            req.extensions_mut().insert(client);
        }
        tower::Service::call(&mut self.router, req)
    }
}

/// The site an invocation request came through: a tenant's when the edge
/// routed it from that tenant's origin, else the operator's.
pub(crate) fn site_of<B>(req: &Request<B>) -> Site {
    req.extensions()
        .get::<Site>()
        .cloned()
        .unwrap_or(Site::Operator)
}

/// A function's answer, held to `site`: on the operator's origin
/// sandboxed, without cookies or service-worker scope; on its tenant's,
/// with cookies for that host only.
pub(crate) fn held_to_origin(h: &mut HeaderMap, site: &Site) {
    match site {
        Site::Operator => {
            h.remove(header::SET_COOKIE);
            h.remove(SERVICE_WORKER_ALLOWED);
            // Appended, not replacing: a function's own policy still holds
            // too (every policy given is enforced).
            h.append(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(SANDBOX),
            );
        }
        Site::Tenant(_) => {
            let cookies: Vec<HeaderValue> = h
                .get_all(header::SET_COOKIE)
                .iter()
                .filter_map(|c| host_only(c.to_str().ok()?).parse().ok())
                .collect();
            h.remove(header::SET_COOKIE);
            for c in cookies {
                h.append(header::SET_COOKIE, c);
            }
            // A worker may not claim a scope wider than the path it was
            // served from (the browser's default); Hearth allows no wider.
            h.remove(SERVICE_WORKER_ALLOWED);
        }
    }
}

/// A `Set-Cookie` value without its `Domain` attribute: a cookie a
/// function sets belongs to its tenant's host only, never to the
/// functions domain (every tenant's) or its parents.
fn host_only(cookie: &str) -> String {
    cookie
        .split(';')
        .filter(|part| {
            let key = part.split('=').next().unwrap_or_default().trim();
            !key.eq_ignore_ascii_case("domain")
        })
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_valid_tenant_label_right_under_the_functions_domain_is_a_tenants_origin() {
        let t = |h: &str| tenant_of(h, "fns.example.com");
        assert_eq!(t("acme.fns.example.com"), Some("acme".into()));
        assert_eq!(t("ACME.fns.example.com:8443"), Some("acme".into()));
        assert_eq!(t("acme.fns.example.com."), Some("acme".into()));
        assert_eq!(t("fns.example.com"), None, "the domain itself");
        assert_eq!(t("a.b.fns.example.com"), None, "two labels deep");
        assert_eq!(t("acmefns.example.com"), None, "not a label boundary");
        assert_eq!(t("acme.fns.example.com.evil"), None);
        assert_eq!(t("console.example.com"), None);
        assert_eq!(t("127.0.0.1:8080"), None);
        assert_eq!(t(""), None);
        assert_eq!(
            tenant_of("admin.localhost:1234", "localhost"),
            Some("admin".into())
        );
        assert_eq!(tenant_of("localhost:1234", "localhost"), None);
    }

    #[test]
    fn a_function_on_the_operators_origin_is_sandboxed_and_sets_nothing() {
        let mut h = HeaderMap::new();
        h.append(header::SET_COOKIE, HeaderValue::from_static("a=b"));
        h.append(SERVICE_WORKER_ALLOWED, HeaderValue::from_static("/"));
        h.append(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("img-src *"),
        );
        held_to_origin(&mut h, &Site::Operator);
        assert!(h.get(header::SET_COOKIE).is_none());
        assert!(h.get(SERVICE_WORKER_ALLOWED).is_none());
        let csp: Vec<_> = h.get_all(header::CONTENT_SECURITY_POLICY).iter().collect();
        assert_eq!(csp, ["img-src *", SANDBOX]);
    }

    #[test]
    fn on_its_own_origin_a_functions_cookies_are_its_hosts_only() {
        let mut h = HeaderMap::new();
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("a=b; Domain=localhost; Path=/; HttpOnly"),
        );
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("c=d;domain=.x"),
        );
        h.append(SERVICE_WORKER_ALLOWED, HeaderValue::from_static("/"));
        held_to_origin(&mut h, &Site::Tenant("acme".into()));
        let cookies: Vec<_> = h.get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(cookies, ["a=b; Path=/; HttpOnly", "c=d"]);
        assert!(h.get(SERVICE_WORKER_ALLOWED).is_none());
        assert!(h.get(header::CONTENT_SECURITY_POLICY).is_none());
    }
}
