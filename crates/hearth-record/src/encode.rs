//! A tape's block encoding, written by hand for the common case: no
//! payload to split out (so no refs). It produces exactly postcard's bytes
//! for [`StoredRef`](crate::recording::StoredRef) — the test below holds it
//! to that over every field shape — so blocks keep one format, and
//! decoding stays serde's.
//!
//! Why by hand: in the daemon, serde's derived encoder for a tape was
//! about 6.7 KB of code (plus 3 KB for the request, 2 KB per sequence),
//! run once per invocation after the request's own work has pushed it out
//! of the instruction cache. `perf` on `hello` under load put it at
//! 0.45–0.67 µs per tape, against ~0.12 µs in a hot loop; the samples sat
//! on its entry and its copy loops. This encoder is under 1 KB of code:
//! varints and strings, each through one small function.
//!
//! postcard's rules used here: unsigned integers above `u8` are LEB128
//! varints, signed ones zig-zagged first; strings and byte strings are a
//! varint length then the bytes; a sequence is a varint count then its
//! items; an enum is its variant's index as a varint, then its fields;
//! a struct is its fields in order.

use hearth_core::Tier;

use crate::recording::{OutcomeRef, RecordingRef};

/// Appends postcard's encoding of `Stored { recording: r, refs: [],
/// streamed: None, timings: r.tape.timings }` to `out`. On error (only from a host call's serde encoding) `out` may hold
/// part of the tape: the caller cuts it back.
pub(crate) fn encode_tape(r: &RecordingRef<'_>, out: &mut Vec<u8>) -> postcard::Result<()> {
    let q = r.request;
    let strings = [r.id, r.tenant, r.function, r.artifact];
    let head = Room::bound(15 + 2 * q.headers.len())
        + strings.iter().map(|s| s.len()).sum::<usize>()
        + q.method.len()
        + q.path.len()
        + q.query.len()
        + header_bytes(&q.headers)
        + q.body.len();
    Room::fill(out, head, |o| {
        strings[..3].iter().for_each(|s| o.str(s));
        o.varint(r.version.into());
        o.str(r.artifact);
        o.varint(tier_index(r.tier));
        o.varint(zigzag(r.started_ms));
        o.varint(r.duration_us);
        o.str(&q.method);
        o.str(&q.path);
        o.str(&q.query);
        o.headers(&q.headers);
        o.bytes(&q.body);
        o.varint(r.tape.events.len() as u64);
    });
    for event in &r.tape.events {
        crate::pending::append(event, out)?;
    }
    match r.outcome {
        OutcomeRef::Response(response) => {
            let tail = Room::bound(6 + 2 * response.headers.len())
                + header_bytes(&response.headers)
                + response.body.len();
            Room::fill(out, tail, |o| {
                o.varint(0);
                o.varint(response.status.into());
                o.headers(&response.headers);
                o.bytes(&response.body);
            });
        }
        OutcomeRef::Error {
            kind,
            status,
            message,
        } => {
            let tail = Room::bound(6) + kind.len() + message.len();
            Room::fill(out, tail, |o| {
                o.varint(1);
                o.str(kind);
                o.varint(status.into());
                o.str(message);
            });
        }
    }
    let timings = &r.tape.timings;
    Room::fill(out, Room::bound(3 + 3 * timings.len()), |o| {
        o.varint(0); // no refs
        o.varint(0); // no streamed bodies
        o.varint(timings.len() as u64);
        for t in timings {
            o.varint(t.call.into());
            o.varint(t.time.at_us.into());
            o.varint(t.time.took_us.into());
        }
    });
    Ok(())
}

fn header_bytes(headers: &[(String, String)]) -> usize {
    headers.iter().map(|(n, v)| n.len() + v.len()).sum()
}

/// The variant's index, as serde numbers `Tier`'s variants (declaration
/// order; the test checks every variant against postcard).
fn tier_index(tier: Tier) -> u64 {
    match tier {
        Tier::Wasm => 0,
        Tier::Js => 1,
        Tier::Process => 2,
        Tier::Compiled => 3,
    }
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

/// Room at the end of a `Vec`, sized beforehand for what is written into
/// it, then cut to what was. Writing a byte here is a store and an
/// index; pushing it onto the `Vec` reloaded and checked the `Vec`'s
/// length and capacity each time, which made the varints the largest
/// single cost of a handover under `perf`.
struct Room<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Room<'_> {
    /// Bytes enough for `varints` varints (ten bytes each, at most) plus
    /// the bytes counted beside them.
    fn bound(varints: usize) -> usize {
        10 * varints
    }

    /// Runs `write` on `bound` bytes of room after `out`'s end, keeping
    /// what it wrote. Panics if it writes more: `bound` is computed from
    /// the same fields.
    fn fill(out: &mut Vec<u8>, bound: usize, write: impl FnOnce(&mut Room<'_>)) {
        let start = out.len();
        out.resize(start + bound, 0);
        let mut room = Room {
            buf: &mut out[start..],
            at: 0,
        };
        write(&mut room);
        let written = room.at;
        out.truncate(start + written);
    }

    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.buf[self.at] = n as u8 | 0x80;
            self.at += 1;
            n >>= 7;
        }
        self.buf[self.at] = n as u8;
        self.at += 1;
    }

    fn bytes(&mut self, b: &[u8]) {
        self.varint(b.len() as u64);
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn headers(&mut self, headers: &[(String, String)]) {
        self.varint(headers.len() as u64);
        for (name, value) in headers {
            self.str(name);
            self.str(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hearth_core::{Request, Response};
    use hearth_host::{
        CallTime, CallTiming, HostError, HostEvent, OutboundRequest, OutboundResponse, Tape,
    };

    use super::*;
    use crate::recording::{Outcome, Recording, StoredRef};

    fn serde_bytes(r: &Recording) -> Vec<u8> {
        postcard::to_allocvec(&StoredRef {
            recording: r.borrowed(),
            refs: &[],
            streamed: None,
            timings: &r.tape.timings,
        })
        .unwrap()
    }

    fn by_hand(r: &Recording) -> Vec<u8> {
        let mut out = b"earlier".to_vec();
        encode_tape(&r.borrowed(), &mut out).unwrap();
        assert_eq!(&out[..7], b"earlier", "appends, keeping what was there");
        out.split_off(7)
    }

    /// Every shape a field can take: each tier, both outcomes, empty and
    /// long (multi-byte length) strings, varints at their byte
    /// boundaries, negative times, and every kind of host call.
    #[test]
    fn writes_exactly_what_postcard_writes() {
        let long = "é".repeat(200);
        let events = vec![
            HostEvent::WallClock { nanos: u64::MAX },
            HostEvent::MonotonicClock { nanos: 127 },
            HostEvent::Random {
                bytes: vec![1, 2, 3],
            },
            HostEvent::KvGet {
                key: b"k".to_vec(),
                value: None,
            },
            HostEvent::KvGet {
                key: b"k".to_vec(),
                value: Some(vec![0; 300]),
            },
            HostEvent::KvSet {
                key: vec![],
                value: b"v".to_vec(),
            },
            HostEvent::KvDelete {
                key: b"k".to_vec(),
                existed: true,
            },
            HostEvent::KvList {
                prefix: b"p".to_vec(),
                keys: vec![b"pa".to_vec(), vec![]],
            },
            HostEvent::HttpFetch {
                request: OutboundRequest {
                    method: "POST".into(),
                    url: "http://example.test/".into(),
                    headers: vec![("a".into(), "b".into())],
                    body: b"x".to_vec(),
                },
                result: Ok(OutboundResponse {
                    status: 404,
                    headers: vec![],
                    body: long.clone().into_bytes(),
                }),
            },
            HostEvent::HttpFetch {
                request: OutboundRequest {
                    method: "GET".into(),
                    url: "http://nowhere.test/".into(),
                    headers: vec![],
                    body: vec![],
                },
                result: Err(HostError::Denied("no".into())),
            },
            HostEvent::Log {
                level: "info".into(),
                message: long.clone(),
            },
        ];
        let base = Recording {
            id: "0192f0c4a1b27c3d8e9f0a1b2c3d4e5f".into(),
            tenant: "acme".into(),
            function: "f".into(),
            version: 1,
            artifact: "ab".repeat(32),
            tier: Tier::Wasm,
            started_ms: 1_700_000_000_000,
            duration_us: 40,
            request: Request {
                method: "GET".into(),
                path: "/".into(),
                query: String::new(),
                headers: vec![("host".into(), "127.0.0.1:8080".into())],
                body: Bytes::new(),
            },
            tape: Tape::default(),
            outcome: Outcome::Response(Response {
                status: 200,
                headers: vec![("content-type".into(), "text/plain".into())],
                body: Bytes::from_static(b"hello\n"),
            }),
            streamed: None,
        };
        let mut cases = vec![base.clone()];
        for tier in [Tier::Wasm, Tier::Js, Tier::Process, Tier::Compiled] {
            cases.push(Recording {
                tier,
                ..base.clone()
            });
        }
        for n in [0, 127, 128, 16_383, 16_384, u32::MAX] {
            cases.push(Recording {
                version: n,
                duration_us: u64::from(n) << 20,
                ..base.clone()
            });
        }
        for ms in [0, -1, 63, -64, 64, i64::MIN, i64::MAX] {
            cases.push(Recording {
                started_ms: ms,
                ..base.clone()
            });
        }
        let mut r = base.clone();
        r.tenant = long.clone();
        r.function = String::new();
        r.request = Request {
            method: "POST".into(),
            path: format!("/{long}"),
            query: "a=1&b=2".into(),
            headers: (0..130).map(|i| (format!("x-{i}"), long.clone())).collect(),
            body: Bytes::from(vec![9; 200]),
        };
        r.tape = Tape {
            events,
            timings: [0, 8, 9]
                .into_iter()
                .zip([(0, 0), (127, 128), (u32::MAX, 16_384)])
                .map(|(call, (at_us, took_us))| CallTiming {
                    call,
                    time: CallTime { at_us, took_us },
                })
                .collect(),
        };
        cases.push(r.clone());
        r.outcome = Outcome::Error {
            kind: "trap".into(),
            status: 500,
            message: long.clone(),
        };
        cases.push(r);
        cases.push(Recording {
            outcome: Outcome::Response(Response {
                status: u16::MAX,
                headers: vec![],
                body: Bytes::new(),
            }),
            ..base
        });
        for (i, case) in cases.iter().enumerate() {
            assert_eq!(by_hand(case), serde_bytes(case), "case {i}");
        }
    }
}
