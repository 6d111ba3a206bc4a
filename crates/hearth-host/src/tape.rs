//! What the host answered, in order: the record of one invocation's
//! nondeterminism.

use serde::{Deserialize, Serialize};

use crate::{OutboundRequest, OutboundResponse};

/// One host call and the answer the sandbox got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostEvent {
    /// Nanoseconds since the Unix epoch.
    WallClock {
        nanos: u64,
    },
    /// Nanoseconds on a clock that only moves forward.
    MonotonicClock {
        nanos: u64,
    },
    Random {
        bytes: Vec<u8>,
    },
    KvGet {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
    KvSet {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    KvDelete {
        key: Vec<u8>,
        existed: bool,
    },
    KvList {
        prefix: Vec<u8>,
        keys: Vec<Vec<u8>>,
    },
    HttpFetch {
        request: OutboundRequest,
        result: Result<OutboundResponse, String>,
    },
    Log {
        level: String,
        message: String,
    },
}

impl HostEvent {
    /// The call's name, as a guest would recognise it.
    pub fn name(&self) -> &'static str {
        match self {
            HostEvent::WallClock { .. } => "clock.wall",
            HostEvent::MonotonicClock { .. } => "clock.monotonic",
            HostEvent::Random { .. } => "random",
            HostEvent::KvGet { .. } => "kv.get",
            HostEvent::KvSet { .. } => "kv.set",
            HostEvent::KvDelete { .. } => "kv.delete",
            HostEvent::KvList { .. } => "kv.list",
            HostEvent::HttpFetch { .. } => "http.fetch",
            HostEvent::Log { .. } => "log",
        }
    }
}

/// The host calls of one invocation, in the order they were answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tape {
    pub events: Vec<HostEvent>,
}
