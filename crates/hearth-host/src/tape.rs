//! What the host answered, in order: the record of one invocation's
//! nondeterminism.

use serde::{Deserialize, Serialize};

use crate::{HostError, OutboundRequest, OutboundResponse};

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
        #[serde(with = "hearth_core::byte_strings")]
        bytes: Vec<u8>,
    },
    KvGet {
        #[serde(with = "hearth_core::byte_strings")]
        key: Vec<u8>,
        #[serde(with = "hearth_core::byte_strings::option")]
        value: Option<Vec<u8>>,
    },
    KvSet {
        #[serde(with = "hearth_core::byte_strings")]
        key: Vec<u8>,
        #[serde(with = "hearth_core::byte_strings")]
        value: Vec<u8>,
    },
    KvDelete {
        #[serde(with = "hearth_core::byte_strings")]
        key: Vec<u8>,
        existed: bool,
    },
    KvList {
        #[serde(with = "hearth_core::byte_strings")]
        prefix: Vec<u8>,
        #[serde(with = "hearth_core::byte_strings::list")]
        keys: Vec<Vec<u8>>,
    },
    HttpFetch {
        request: OutboundRequest,
        result: Result<OutboundResponse, HostError>,
    },
    Log {
        level: String,
        message: String,
    },
    /// The tape ends here because the invocation used up its tape budget:
    /// `calls` more clock, randomness and log calls were answered and not
    /// recorded (KV and HTTP calls past the budget were refused).
    Truncated {
        calls: u64,
    },
    /// An atomic add to a KV counter (after `Truncated`: tapes written
    /// before it existed keep their variant numbers).
    KvIncrement {
        #[serde(with = "hearth_core::byte_strings")]
        key: Vec<u8>,
        delta: u64,
        /// The new value, or why the value could not be incremented.
        result: Result<u64, String>,
    },
    /// Whether a KV key holds a value (without the value: asking costs the
    /// tape the key, not what it holds).
    KvExists {
        #[serde(with = "hearth_core::byte_strings")]
        key: Vec<u8>,
        exists: bool,
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
            HostEvent::Truncated { .. } => "truncated",
            HostEvent::KvIncrement { .. } => "kv.increment",
            HostEvent::KvExists { .. } => "kv.exists",
        }
    }

    /// Roughly what this event holds in memory: the enum and what it
    /// points to. What per-invocation tape budgets are counted in.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<HostEvent>()
            + match self {
                HostEvent::Random { bytes } => bytes.len(),
                HostEvent::KvGet { key, value } => key.len() + value.as_ref().map_or(0, Vec::len),
                HostEvent::KvSet { key, value } => key.len() + value.len(),
                HostEvent::KvDelete { key, .. } | HostEvent::KvExists { key, .. } => key.len(),
                HostEvent::KvIncrement { key, result, .. } => {
                    key.len() + result.as_ref().err().map_or(0, String::len)
                }
                HostEvent::KvList { prefix, keys } => {
                    prefix.len() + keys.iter().map(|k| 24 + k.len()).sum::<usize>()
                }
                HostEvent::HttpFetch { request, result } => {
                    let headers = |h: &[(String, String)]| -> usize {
                        h.iter().map(|(k, v)| 48 + k.len() + v.len()).sum()
                    };
                    request.method.len()
                        + request.url.len()
                        + headers(&request.headers)
                        + request.body.len()
                        + match result {
                            Ok(r) => headers(&r.headers) + r.body.len(),
                            Err(e) => e.to_string().len(),
                        }
                }
                HostEvent::Log { level, message } => level.len() + message.len(),
                HostEvent::WallClock { .. }
                | HostEvent::MonotonicClock { .. }
                | HostEvent::Truncated { .. } => 0,
            }
    }
}

impl HostEvent {
    /// Whether the world failed this call: an HTTP call that got no answer
    /// or a 5xx, a counter that would not increment. A retry asks such a
    /// call again rather than be given the failure (what caused a retry
    /// may be just that).
    pub fn failed(&self) -> bool {
        match self {
            HostEvent::HttpFetch { result, .. } => {
                result.as_ref().map_or(true, |r| r.status >= 500)
            }
            HostEvent::KvIncrement { result, .. } => result.is_err(),
            _ => false,
        }
    }

    /// The call and its arguments, for a person: `kv.get "count"`.
    pub fn call(&self) -> String {
        match self {
            HostEvent::WallClock { .. } | HostEvent::MonotonicClock { .. } => {
                self.name().to_string()
            }
            HostEvent::Random { bytes } => format!("random {} bytes", bytes.len()),
            HostEvent::KvGet { key, .. } => format!("kv.get {}", shown(key)),
            HostEvent::KvSet { key, value } => {
                format!("kv.set {} = {}", shown(key), shown(value))
            }
            HostEvent::KvDelete { key, .. } => format!("kv.delete {}", shown(key)),
            HostEvent::KvExists { key, .. } => format!("kv.exists {}", shown(key)),
            HostEvent::KvIncrement { key, delta, .. } => {
                format!("kv.increment {} by {delta}", shown(key))
            }
            HostEvent::KvList { prefix, .. } => format!("kv.list {}", shown(prefix)),
            HostEvent::HttpFetch { request, .. } => {
                format!("http.fetch {} {}", request.method, request.url)
            }
            HostEvent::Log { level, message } => format!("log {level} {message:?}"),
            HostEvent::Truncated { calls } => {
                format!("(the tape's budget ran out: {calls} more calls were not recorded)")
            }
        }
    }

    /// What the host answered, for a person.
    pub fn answer(&self) -> String {
        match self {
            HostEvent::WallClock { nanos } | HostEvent::MonotonicClock { nanos } => {
                format!("{nanos} ns")
            }
            HostEvent::Random { bytes } => short_hex(bytes),
            HostEvent::KvGet { value, .. } => value.as_deref().map_or("(none)".into(), shown),
            HostEvent::KvSet { .. } | HostEvent::Log { .. } => "ok".into(),
            HostEvent::Truncated { .. } => "-".into(),
            HostEvent::KvDelete { existed, .. } => {
                if *existed { "deleted" } else { "(absent)" }.into()
            }
            HostEvent::KvList { keys, .. } => format!("{} keys", keys.len()),
            HostEvent::KvExists { exists, .. } => exists.to_string(),
            HostEvent::KvIncrement { result, .. } => match result {
                Ok(n) => n.to_string(),
                Err(e) => format!("error: {e}"),
            },
            HostEvent::HttpFetch { result, .. } => match result {
                Ok(r) => format!("{} ({} bytes)", r.status, r.body.len()),
                Err(e) => format!("error: {e}"),
            },
        }
    }
}

/// Bytes as a quoted string if they are short text, else their size.
fn shown(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if s.len() <= 80 => format!("{s:?}"),
        Ok(s) => format!("{:?}… ({} bytes)", &s[..s.floor_char_boundary(60)], b.len()),
        Err(_) => format!("<{} bytes>", b.len()),
    }
}

fn short_hex(b: &[u8]) -> String {
    let hex: String = b.iter().take(16).map(|x| format!("{x:02x}")).collect();
    if b.len() > 16 {
        format!("{hex}…")
    } else {
        hex
    }
}

/// Where a replay stopped following its tape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Divergence {
    /// 1-based position on the tape (log calls count, as in a timeline).
    pub at: usize,
    /// The call the tape holds there (`None`: the tape had ended).
    pub recorded: Option<String>,
    /// The call the code made instead (`None`: the code made no more calls).
    pub asked: Option<String>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "diverged at call {}: the tape holds {}, the code asked for {}",
            self.at,
            self.recorded.as_deref().unwrap_or("nothing more"),
            self.asked.as_deref().unwrap_or("nothing more")
        )
    }
}

/// The host calls of one invocation, in the order they were answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tape {
    pub events: Vec<HostEvent>,
    /// When its KV and HTTP calls ran, for a timeline: replay does not
    /// read them. Not in a tape's own encoding (`hearth-record` keeps them
    /// beside it), so tapes from before them decode as they did.
    #[serde(skip)]
    pub timings: Vec<CallTiming>,
}

impl Tape {
    /// A tape of `events`, without timings.
    pub fn of(events: Vec<HostEvent>) -> Tape {
        Tape {
            events,
            timings: Vec::new(),
        }
    }

    /// Appends `event`, and when it ran if `time` says.
    pub fn push(&mut self, event: HostEvent, time: Option<CallTime>) {
        if let Some(time) = time {
            let call = self.events.len() as u32;
            self.timings.push(CallTiming { call, time });
        }
        self.events.push(event);
    }

    /// Each event with its timing, if it has one, in order.
    pub fn into_timed(self) -> impl Iterator<Item = (HostEvent, Option<CallTime>)> {
        let mut timings = self.timings.into_iter().peekable();
        self.events.into_iter().enumerate().map(move |(i, event)| {
            let time = timings.next_if(|t| t.call as usize == i).map(|t| t.time);
            (event, time)
        })
    }

    /// The timing of event `index`, if it has one.
    pub fn timing(&self, index: usize) -> Option<CallTime> {
        let i = self
            .timings
            .binary_search_by_key(&index, |t| t.call as usize)
            .ok()?;
        Some(self.timings[i].time)
    }
}

/// When one host call ran, in microseconds from its invocation's start
/// (each saturating at `u32::MAX`, 71 minutes: past any timeout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallTime {
    /// When the call started.
    pub at_us: u32,
    /// How long the host took to answer it.
    pub took_us: u32,
}

impl CallTime {
    /// A call that began at `began` and has just been answered, in an
    /// invocation that started at `started`.
    pub fn since(started: std::time::Instant, began: std::time::Instant) -> CallTime {
        let us = |d: std::time::Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        CallTime {
            at_us: us(began.saturating_duration_since(started)),
            took_us: us(began.elapsed()),
        }
    }
}

/// [`CallTime`] of the event at index `call` of a tape's events; a tape's
/// timings are in the order of their calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallTiming {
    pub call: u32,
    pub time: CallTime,
}
