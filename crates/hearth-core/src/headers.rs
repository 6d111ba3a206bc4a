//! HTTP header names with a meaning to Hearth itself, shared by the node
//! that answers an invocation and the gateway that forwards it.

/// The response header a node sets when it refused an invocation before
/// running any of it ([`crate::InvokeError::Overloaded`]: at its
/// concurrency limit, or out of sandboxes; [`crate::InvokeError::MemoryFull`]:
/// its memory reserved by running invocations). A gateway may place such an
/// invocation on another node; a function's own header of this name is
/// dropped, so only the node can say it.
pub const REFUSED_HEADER: &str = "hearth-refused";

/// The request header that says an invocation is an event, not an HTTP
/// call (`scheduled`: a schedule's firing; docs/events.md), so a function's
/// runtime gives it the event's shape. Only the platform sets it: a node
/// takes it out of every request that does not come from Hearth's queue
/// (a [`crate::GatewayAttempt`] that is `queued`), and a gateway out of
/// every client's, so no caller can pass a request off as a firing.
pub const EVENT_HEADER: &str = "hearth-event";

/// Whether a header (lowercase, as `http` names are) belongs to one
/// connection and not to the message: never passed from a function's
/// response to the client, nor from a client through a gateway to a node
/// (RFC 9110 §7.6.1; the body's framing is the server's to set).
pub fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "content-length"
            | "upgrade"
            | "te"
            | "trailer"
    )
}
