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

    /// The W3C trace id of a trace this invocation begins (its caller sent
    /// none): its own id, mixed so that the low 64 bits, which a ratio
    /// sampler reads, are random (a UUIDv7 keeps its clock in the high
    /// bits and its randomness in the low). The mix is a bijection, so a
    /// trace id leads back to the invocation ([`Self::from_trace_id`]) and
    /// a tape, which keeps the id, says which trace it began.
    pub fn trace_id(&self) -> u128 {
        let id = self.0.as_u128();
        let (high, low) = ((id >> 64) as u64, id as u64);
        (u128::from(low) << 64) | u128::from(high ^ mix(low))
    }

    /// The invocation whose [`trace_id`](Self::trace_id) is `trace`, if it
    /// is one (a UUIDv7: any other trace id began elsewhere).
    pub fn from_trace_id(trace: u128) -> Option<InvocationId> {
        let low = (trace >> 64) as u64;
        let high = trace as u64 ^ mix(low);
        let id = uuid::Uuid::from_u128((u128::from(high) << 64) | u128::from(low));
        (id.get_version_num() == 7 && id.get_variant() == uuid::Variant::RFC4122)
            .then_some(InvocationId(id))
    }
}

impl std::str::FromStr for InvocationId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s).map(InvocationId)
    }
}

/// SplitMix64's finalizer: every bit of `x` moves about half of the
/// output's (a fixed, public permutation: it hides nothing, it spreads).
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// An invocation whose id was given to the node: forwarded by a cluster's
/// gateway, which gives both of its attempts the same id so a retry on
/// another node can find what the first attempt journaled; or run from
/// the event queue (`queued`), whose every attempt has the id it was
/// queued with.
#[derive(Debug, Clone, Copy)]
pub struct GatewayAttempt {
    pub id: InvocationId,
    /// An earlier attempt ended without an answer (its node, or the
    /// queue's claimer, failed): this one follows its journal.
    pub retry: bool,
    /// From the event queue: its journal outlives its answer (the queue
    /// forgets it when it settles the invocation, so a claimer that dies
    /// after the answer leaves a journal for the next to follow), and its
    /// request's `hearth-event` header is the platform's.
    pub queued: bool,
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

    #[test]
    fn a_trace_id_leads_back_to_the_invocation_that_began_it() {
        for _ in 0..10_000 {
            let id = InvocationId::new();
            assert_eq!(InvocationId::from_trace_id(id.trace_id()), Some(id));
        }
        // W3C's example trace id began elsewhere.
        assert_eq!(
            InvocationId::from_trace_id(0x4bf92f3577b34da6a3ce929d0e0e4736),
            None
        );
    }

    /// OpenTelemetry's ratio sampler keeps a trace when the low 64 bits
    /// of its id, shifted right by one, fall under ratio × 2^63: those bits
    /// must be uniform for a ratio to mean anything. A UUIDv7's own low
    /// bits start with its variant (`10`), so unmixed none would be kept
    /// at ratio 0.5.
    #[test]
    fn a_ratio_sampler_keeps_its_share_of_the_traces_invocations_begin() {
        let n = 20_000;
        for ratio in [0.1, 0.5, 0.9] {
            let bound = (ratio * (1u64 << 63) as f64) as u64;
            let kept = (0..n)
                .filter(|_| ((InvocationId::new().trace_id() as u64) >> 1) < bound)
                .count();
            let share = kept as f64 / n as f64;
            assert!((share - ratio).abs() < 0.02, "{ratio}: kept {share}");
        }
    }
}
