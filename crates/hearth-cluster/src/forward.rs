//! What a gateway sends a node for one invocation, and what of the node's
//! answer reaches the client: the forwarding rules, kept apart from the
//! HTTP server that takes the request (`hearth-api`) and from placement
//! and retry ([`crate::gateway`]).
//!
//! - The path is pinned to the version the gateway resolved
//!   (`/fn/{tenant}/{name}@{version}[/rest]`), so every node runs the same
//!   code whatever it has cached.
//! - Of the client's headers, `Host`, `Hearth-Version` (the path pins the
//!   version) and `Hearth-Attempt` (only the gateway may name an attempt)
//!   are dropped, and so is every hop-by-hop header.
//! - The client gets the node's status and headers (hop-by-hop ones
//!   dropped), `Hearth-Node` naming the node that answered and, after a
//!   retry, `Hearth-Retried-From` naming the one that failed first.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};

use hearth_core::{FunctionVersion, is_hop_by_hop};
use hearth_host::trace::ForwardSpan;

/// How much longer than the function's own timeout the gateway waits for a
/// node: a cold start (a process-tier runtime, an artifact fetch) comes
/// before the function's clock starts.
pub const NODE_GRACE: Duration = Duration::from_secs(10);

/// The response header naming the node that answered.
pub const NODE_HEADER: &str = "hearth-node";
/// The response header naming the node that failed before a retry.
pub const RETRIED_FROM_HEADER: &str = "hearth-retried-from";

/// An invocation to forward.
pub struct Outgoing<'a> {
    pub tenant: &'a str,
    pub function: &'a str,
    /// The function's memory limit: what it commits on its node.
    pub memory_mib: u64,
    /// How long to wait for the node's answer.
    pub timeout: Duration,
    pub method: Method,
    /// `/fn/…` with the query, as the node should see it.
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: OutgoingBody,
    /// The gateway's span over the invocation, when it is traced (its
    /// `traceparent` is in `headers`): in a sampled trace each attempt is
    /// a span under it, whose `traceparent` the node gets instead.
    pub span: Option<&'a ForwardSpan>,
    /// An invocation from the event queue: its id and whether an earlier
    /// attempt vanished (the node follows its journal); `None` for a
    /// client's request, which the gateway names.
    pub queued: Option<hearth_core::GatewayAttempt>,
}

/// An invocation's request body as the gateway sends it on.
pub enum OutgoingBody {
    /// Held whole: it can be sent again, to another node, if the first
    /// fails before answering.
    Whole(Bytes),
    /// Longer than the gateway holds (`--max-body-bytes`): it streams to
    /// the node as the client sends it, so it can be sent only once.
    Streaming(std::sync::Mutex<Option<reqwest::Body>>),
}

impl OutgoingBody {
    /// A body that streams as `chunks` arrive.
    pub fn streaming<S, E>(chunks: S) -> OutgoingBody
    where
        S: futures::Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let body = reqwest::Body::wrap_stream(chunks);
        OutgoingBody::Streaming(std::sync::Mutex::new(Some(body)))
    }

    /// The body for one attempt; `None` once a streaming one was sent.
    pub(crate) fn take(&self) -> Option<reqwest::Body> {
        match self {
            OutgoingBody::Whole(b) => Some(reqwest::Body::from(b.clone())),
            OutgoingBody::Streaming(b) => b.lock().expect("not poisoned").take(),
        }
    }

    /// Whether another attempt could send it again.
    pub(crate) fn resendable(&self) -> bool {
        matches!(self, OutgoingBody::Whole(_))
    }
}

/// A node's answer body, passed on as the node sends it.
pub type ForwardedBody =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

impl Forwarded {
    /// This answer with `held` (its lease, its attempt's span) dropped
    /// only once its body has passed.
    pub(crate) fn holding<T: Send + 'static>(self, held: T) -> Forwarded {
        use futures::StreamExt;
        let body = self.body.map(move |chunk| {
            let _held = &held;
            chunk
        });
        Forwarded {
            body: Box::pin(body),
            ..self
        }
    }
}

/// A node's answer.
pub struct Forwarded {
    pub status: u16,
    pub headers: HeaderMap,
    /// Streams: a retry happens only before the node answered, so nothing
    /// needs the body whole.
    pub body: ForwardedBody,
    /// The node that answered.
    pub node: Arc<str>,
    /// The node that failed first, if this was a retry.
    pub retried_from: Option<Arc<str>>,
}

impl<'a> Outgoing<'a> {
    /// The invocation of `function` a client sent the gateway as `method`
    /// `uri` (`/fn/{tenant}/{name}[@v][/rest]`), as its node is to get it.
    pub fn pinned(
        function: &'a FunctionVersion,
        method: Method,
        uri: &Uri,
        mut headers: HeaderMap,
        body: OutgoingBody,
    ) -> Outgoing<'a> {
        // Kept raw (still percent-encoded): the node decodes it as the
        // gateway did.
        let raw = uri.path().strip_prefix("/fn/").unwrap_or_default();
        let mut parts = raw.splitn(3, '/');
        let (tenant, name) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        let name = name.split('@').next().unwrap_or_default();
        let rest = parts.next().map(|r| format!("/{r}")).unwrap_or_default();
        let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        for h in [
            header::HOST,
            HeaderName::from_static("hearth-version"),
            HeaderName::from_static(crate::attempt::HEADER),
            HeaderName::from_static(hearth_core::EVENT_HEADER),
        ] {
            headers.remove(h);
        }
        let hop_by_hop: Vec<HeaderName> = headers
            .keys()
            .filter(|k| is_hop_by_hop(k.as_str()))
            .cloned()
            .collect();
        for h in hop_by_hop {
            headers.remove(h);
        }
        Outgoing {
            tenant: &function.tenant,
            function: &function.name,
            memory_mib: u64::from(function.spec.limits.memory_mib),
            timeout: Duration::from_millis(function.spec.limits.timeout_ms) + NODE_GRACE,
            method,
            path_and_query: format!("/fn/{tenant}/{name}@{}{rest}{query}", function.version),
            headers,
            body,
            span: None,
            queued: None,
        }
    }
}

impl Forwarded {
    /// The headers the client gets with the node's answer.
    pub fn client_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in &self.headers {
            if !is_hop_by_hop(k.as_str()) {
                h.append(k.clone(), v.clone());
            }
        }
        let node = |id: &str| HeaderValue::try_from(id).expect("a hex id is a valid header value");
        h.insert(HeaderName::from_static(NODE_HEADER), node(&self.node));
        if let Some(first) = &self.retried_from {
            h.insert(HeaderName::from_static(RETRIED_FROM_HEADER), node(first));
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hearth_core::{FunctionSpec, Runtime};

    fn function() -> FunctionVersion {
        let mut spec = FunctionSpec::new(Runtime::Wasm);
        spec.limits.memory_mib = 64;
        spec.limits.timeout_ms = 500;
        FunctionVersion {
            tenant: "acme".into(),
            name: "f".into(),
            version: 7,
            artifact: "00".repeat(32),
            spec,
            created_at_ms: 0,
        }
    }

    #[test]
    fn the_node_gets_the_pinned_version_and_none_of_the_connections_headers() {
        let f = function();
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("host", "gateway:8080"),
            ("hearth-version", "3"),
            ("hearth-attempt", "forged"),
            ("connection", "close"),
            ("transfer-encoding", "chunked"),
            ("x-mine", "kept"),
        ] {
            headers.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let uri: Uri = "/fn/acme/f@3/a%20b/c?x=1&y".parse().unwrap();
        let out = Outgoing::pinned(
            &f,
            Method::POST,
            &uri,
            headers,
            OutgoingBody::Whole(Bytes::new()),
        );
        assert_eq!(out.path_and_query, "/fn/acme/f@7/a%20b/c?x=1&y");
        let names: Vec<&str> = out.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-mine"]);
        assert_eq!(out.memory_mib, 64);
        assert_eq!(out.timeout, Duration::from_millis(500) + NODE_GRACE);

        let bare = Outgoing::pinned(
            &f,
            Method::GET,
            &"/fn/acme/f".parse().unwrap(),
            HeaderMap::new(),
            OutgoingBody::Whole(Bytes::new()),
        );
        assert_eq!(bare.path_and_query, "/fn/acme/f@7");
    }

    #[test]
    fn the_client_learns_which_node_answered_and_which_failed_first() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        let answer = Forwarded {
            status: 200,
            headers,
            body: Box::pin(futures::stream::empty()),
            node: "n2".into(),
            retried_from: Some("n1".into()),
        };
        let h = answer.client_headers();
        assert!(h.get(header::CONNECTION).is_none());
        assert_eq!(h[header::CONTENT_TYPE], "text/plain");
        assert_eq!(h[NODE_HEADER], "n2");
        assert_eq!(h[RETRIED_FROM_HEADER], "n1");
    }
}
