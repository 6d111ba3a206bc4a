//! Property tests for the recorder's hand-written byte handling, against
//! the libraries and invariants they stand in for:
//!
//! - the tape encoder ([`crate::encode`]) writes exactly postcard's bytes
//!   for any recording, so blocks keep one format and decode with serde;
//! - the segment framing ([`crate::segment`]) reads back every block it
//!   framed, and over a segment cut short or with any byte flipped it never
//!   panics and keeps only whole, intact blocks before the damage;
//! - an export file reads back as the recording it was made from, and any
//!   other bytes are refused with a reason, never a panic.

use bytes::Bytes;
use hearth_core::{Request, Response, Tier};
use hearth_host::{
    CallTime, CallTiming, HostError, HostEvent, OutboundRequest, OutboundResponse, Tape,
};
use proptest::prelude::*;

use crate::recording::tests::LIMITS;
use crate::recording::{Outcome, Recording, StoredRef};

fn text() -> impl Strategy<Value = String> {
    // Mostly short, sometimes past a one-byte varint length; any chars.
    prop_oneof![4 => ".{0,12}", 1 => ".{120,200}"]
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![4 => prop::collection::vec(any::<u8>(), 0..16), 1 => prop::collection::vec(any::<u8>(), 120..300)]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((text(), text()), 0..4)
}

fn host_error() -> impl Strategy<Value = HostError> {
    prop_oneof![
        text().prop_map(HostError::Denied),
        text().prop_map(HostError::Network),
        any::<usize>().prop_map(HostError::TooLarge),
        Just(HostError::Timeout),
        any::<u32>().prop_map(HostError::TooMany),
        any::<u64>().prop_map(HostError::KvQuota),
        Just(HostError::Ended),
    ]
}

fn event() -> impl Strategy<Value = HostEvent> {
    let request = (text(), text(), headers(), bytes()).prop_map(|(method, url, headers, body)| {
        OutboundRequest {
            method,
            url,
            headers,
            body,
        }
    });
    let response =
        (any::<u16>(), headers(), bytes()).prop_map(|(status, headers, body)| OutboundResponse {
            status,
            headers,
            body,
        });
    prop_oneof![
        any::<u64>().prop_map(|nanos| HostEvent::WallClock { nanos }),
        any::<u64>().prop_map(|nanos| HostEvent::MonotonicClock { nanos }),
        bytes().prop_map(|bytes| HostEvent::Random { bytes }),
        (bytes(), prop::option::of(bytes()))
            .prop_map(|(key, value)| HostEvent::KvGet { key, value }),
        (bytes(), bytes()).prop_map(|(key, value)| HostEvent::KvSet { key, value }),
        (bytes(), any::<bool>()).prop_map(|(key, existed)| HostEvent::KvDelete { key, existed }),
        (bytes(), prop::collection::vec(bytes(), 0..4))
            .prop_map(|(prefix, keys)| HostEvent::KvList { prefix, keys }),
        (
            request,
            prop_oneof![response.prop_map(Ok), host_error().prop_map(Err)]
        )
            .prop_map(|(request, result)| HostEvent::HttpFetch { request, result }),
        (text(), text()).prop_map(|(level, message)| HostEvent::Log { level, message }),
        any::<u64>().prop_map(|calls| HostEvent::Truncated { calls }),
        (
            bytes(),
            any::<u64>(),
            prop_oneof![any::<u64>().prop_map(Ok), text().prop_map(Err)]
        )
            .prop_map(|(key, delta, result)| HostEvent::KvIncrement { key, delta, result }),
        (bytes(), any::<bool>()).prop_map(|(key, exists)| HostEvent::KvExists { key, exists }),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        (any::<u16>(), headers(), bytes()).prop_map(|(status, headers, body)| {
            Outcome::Response(Response {
                status,
                headers,
                body: Bytes::from(body),
            })
        }),
        (text(), any::<u16>(), text()).prop_map(|(kind, status, message)| Outcome::Error {
            kind,
            status,
            message
        }),
    ]
}

prop_compose! {
    /// Any recording: every field over its whole range, any host calls.
    pub(crate) fn recording()(
        (id, tenant, function, artifact) in (text(), text(), text(), text()),
        version in any::<u32>(),
        tier in prop_oneof![Just(Tier::Wasm), Just(Tier::Js), Just(Tier::Process), Just(Tier::Compiled)],
        started_ms in any::<i64>(),
        duration_us in any::<u64>(),
        (method, path, query, request_headers, body) in (text(), text(), text(), headers(), bytes()),
        events in prop::collection::vec(event(), 0..8),
        times in prop::collection::vec((any::<u32>(), any::<u32>()), 0..8),
        outcome in outcome(),
    ) -> Recording {
        // Timings of some of the calls, in their order, as a host keeps them.
        let timings = times.into_iter().zip(0..events.len() as u32).map(|((at_us, took_us), call)| {
            CallTiming { call, time: CallTime { at_us, took_us } }
        }).collect();
        Recording {
            id, tenant, function, version, artifact, tier, started_ms, duration_us,
            request: Request { method, path, query, headers: request_headers, body: Bytes::from(body) },
            tape: Tape { events, timings },
            outcome,
            streamed: None,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_tape_encoder_writes_exactly_what_postcard_writes(r in recording()) {
        let mut by_hand = b"earlier".to_vec();
        crate::encode::encode_tape(&r.borrowed(), &mut by_hand).unwrap();
        prop_assert_eq!(&by_hand[..7], b"earlier");
        let serde = postcard::to_allocvec(&StoredRef { recording: r.borrowed(), refs: &[], streamed: None, timings: &r.tape.timings }).unwrap();
        prop_assert_eq!(&by_hand[7..], &serde[..]);
    }

    #[test]
    fn an_export_reads_back_as_its_recording(r in recording()) {
        prop_assert_eq!(Recording::import(&r.export(), LIMITS).unwrap(), r);
    }

    #[test]
    fn any_other_bytes_are_refused_as_a_tape_not_a_panic(file in prop::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(Recording::import(&file, LIMITS).is_err());
    }

    #[test]
    fn an_edited_export_is_refused(r in recording(), at in any::<prop::sample::Index>(), to in any::<u8>()) {
        let mut file = r.export();
        let i = at.index(file.len());
        prop_assume!(file[i] != to);
        file[i] = to;
        // Whatever the byte, the file is no longer this recording's.
        if let Ok(back) = Recording::import(&file, LIMITS) {
            // Only an edit JSON does not see (whitespace in the newline's
            // place) may leave the same recording.
            prop_assert_eq!(back, r);
        }
    }
}

mod segment {
    use std::io::Write;

    use super::*;
    use crate::segment::{SEGMENT_MAGIC, frame_into, scan};

    fn blocks() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
        prop::collection::vec(
            (
                "[a-z0-9-]{0,20}",
                prop::collection::vec(any::<u8>(), 0..300),
            ),
            1..6,
        )
    }

    fn segment(blocks: &[(String, Vec<u8>)]) -> Vec<u8> {
        let mut out = SEGMENT_MAGIC.to_vec();
        for (tenant, sealed) in blocks {
            frame_into(&mut out, tenant, |o| o.extend_from_slice(sealed));
        }
        out
    }

    fn scanned(bytes: &[u8]) -> crate::segment::Scan {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        scan(f.path()).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_framed_block_reads_back(blocks in blocks()) {
            let bytes = segment(&blocks);
            let s = scanned(&bytes);
            prop_assert_eq!(s.valid_end, bytes.len() as u64);
            let back: Vec<(String, Vec<u8>)> =
                s.blocks.into_iter().map(|(_, b)| (b.tenant, b.sealed)).collect();
            prop_assert_eq!(back, blocks);
        }

        #[test]
        fn a_torn_segment_keeps_only_the_intact_blocks_before_the_tear(
            blocks in blocks(),
            at in any::<prop::sample::Index>(),
        ) {
            let whole = segment(&blocks);
            let i = SEGMENT_MAGIC.len() + at.index(whole.len() - SEGMENT_MAGIC.len());
            let s = scanned(&whole[..i]);
            // Every block kept ends at or before the tear and is one of
            // those written, in order.
            prop_assert!(s.valid_end as usize <= i);
            prop_assert!(s.blocks.len() < blocks.len());
            for ((_, b), (tenant, sealed)) in s.blocks.iter().zip(&blocks) {
                prop_assert_eq!(&b.tenant, tenant);
                prop_assert_eq!(&b.sealed, sealed);
            }
        }

        #[test]
        fn a_flipped_byte_costs_only_its_own_block(
            blocks in blocks(),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let whole = segment(&blocks);
            let starts: Vec<usize> = (0..blocks.len()).map(|k| segment(&blocks[..k]).len()).collect();
            let i = SEGMENT_MAGIC.len() + at.index(whole.len() - SEGMENT_MAGIC.len());
            let hit = starts.iter().rposition(|&start| start <= i).unwrap();
            let mut bytes = whole.clone();
            bytes[i] ^= flip;
            // A magic flipped into another format's magic still frames a
            // block (its decoding fails later, when it is read).
            let magic = &bytes[starts[hit]..starts[hit] + 4];
            prop_assume!(![&b"HRB1"[..], b"HRB2", b"HRB3"].contains(&magic) || i >= starts[hit] + 4);
            let s = scanned(&bytes);
            let kept: Vec<(String, Vec<u8>)> =
                s.blocks.into_iter().map(|(_, b)| (b.tenant, b.sealed)).collect();
            let mut others = blocks.clone();
            others.remove(hit);
            if hit + 1 == blocks.len() {
                // Last, it cannot be told from a torn write: cut off.
                prop_assert_eq!(s.valid_end as usize, starts[hit]);
                prop_assert!(s.damaged.is_empty());
            } else {
                prop_assert_eq!(s.valid_end as usize, bytes.len());
                prop_assert_eq!(s.damaged, vec![starts[hit] as u64]);
            }
            prop_assert_eq!(kept, others);
        }

        #[test]
        fn any_bytes_after_the_magic_scan_without_a_panic(tail in prop::collection::vec(any::<u8>(), 0..600)) {
            let mut bytes = SEGMENT_MAGIC.to_vec();
            bytes.extend_from_slice(&tail);
            let s = scanned(&bytes);
            prop_assert!(s.valid_end as usize <= bytes.len());
        }
    }
}
