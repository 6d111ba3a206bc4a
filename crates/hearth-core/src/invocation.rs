//! What goes into a sandbox and what comes out.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Identifies one invocation; a UUIDv7, so ids sort by start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InvocationId(pub uuid::Uuid);

impl InvocationId {
    pub fn new() -> Self {
        InvocationId(uuid::Uuid::now_v7())
    }

    /// When the id was made, in ms since the Unix epoch: the timestamp a
    /// v7 id carries (`None` for other versions). Reading it back costs
    /// no clock read, which a tape's start time did per invocation.
    pub fn unix_ms(&self) -> Option<i64> {
        (self.0.get_version_num() == 7).then(|| (self.0.as_u128() >> 80) as i64)
    }
}

/// An invocation a cluster's gateway forwarded. The gateway names it, with
/// the same id on both attempts, so a retry on another node can find what
/// the first attempt journaled.
#[derive(Debug, Clone, Copy)]
pub struct GatewayAttempt {
    pub id: InvocationId,
    /// This is the second attempt: the first one's node failed.
    pub retry: bool,
}

impl Default for InvocationId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for InvocationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.simple().fmt(f)
    }
}

/// An HTTP request as a function sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub method: String,
    /// The sub-path after the function's name, always starting with `/`.
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    #[serde(with = "crate::byte_strings")]
    pub body: Bytes,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP response as a function produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    #[serde(with = "crate::byte_strings")]
    pub body: Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_carries_the_time_it_was_made() {
        let before = crate::unix_time_ms();
        let id = InvocationId::new();
        let after = crate::unix_time_ms();
        let ms = id.unix_ms().expect("a new id is v7");
        assert!(
            (before..=after).contains(&ms),
            "{before} <= {ms} <= {after}"
        );
        assert_eq!(InvocationId(uuid::Uuid::nil()).unix_ms(), None);
    }
}
