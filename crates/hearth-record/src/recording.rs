//! [`Recording`]: everything about one invocation that replay needs, and the
//! two ways it is written down — inside segment blocks (compact, large
//! payloads split out by hash) and as an export file (self-checking JSON).

use bytes::Bytes;
use hearth_core::{InvokeError, Request, Response, Tier};
use hearth_host::{CallTiming, HostEvent, Tape};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::RecordError;

/// How the function answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Response(Response),
    Error {
        /// [`InvokeError::kind`]: `timeout`, `trap`, …
        kind: String,
        /// The HTTP status the caller got.
        status: u16,
        message: String,
    },
}

impl Outcome {
    pub fn of(result: &Result<Response, InvokeError>) -> Outcome {
        match result {
            Ok(r) => Outcome::Response(r.clone()),
            Err(e) => Outcome::Error {
                kind: e.kind().to_string(),
                status: e.http_status(),
                message: e.to_string(),
            },
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            Outcome::Response(r) => r.status,
            Outcome::Error { status, .. } => *status,
        }
    }

    /// `ok`, or the failure's kind.
    pub fn kind(&self) -> &str {
        match self {
            Outcome::Response(_) => "ok",
            Outcome::Error { kind, .. } => kind,
        }
    }
}

/// The tape of one invocation, with what it ran and what it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    /// The invocation id (UUIDv7, hex).
    pub id: String,
    pub tenant: String,
    pub function: String,
    pub version: u32,
    /// sha256 of the code that ran: replay refuses other code under the
    /// same version number.
    pub artifact: String,
    pub tier: Tier,
    pub started_ms: i64,
    pub duration_us: u64,
    pub request: Request,
    /// Every host call and its answer, in order.
    pub tape: Tape,
    pub outcome: Outcome,
    /// Bodies that streamed: `request.body` and the response's body then
    /// hold only their first bytes, and this their whole length and hash.
    /// (Kept beside the recording in blocks and exports, not inside it, so
    /// that tapes without streamed bodies encode as they always have.)
    #[serde(skip)]
    pub streamed: Option<Streamed>,
}

/// What a tape keeps of bodies that streamed through an invocation instead
/// of arriving whole: the first bytes (in the recording's body) and, here,
/// how long each was and its BLAKE3 hash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Streamed {
    pub request: Option<BodyDigest>,
    pub response: Option<BodyDigest>,
}

/// A whole body's length and BLAKE3 hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BodyDigest {
    pub len: u64,
    #[serde(with = "hex::serde")]
    pub blake3: [u8; 32],
}

impl BodyDigest {
    /// Whether the tape's `kept` bytes are less than the whole body.
    pub fn cut(&self, kept: &[u8]) -> bool {
        self.len > kept.len() as u64
    }
}

impl Streamed {
    /// The request body, if it streamed and the tape holds only its start:
    /// such a request cannot be given to the function again.
    pub fn cut_request(&self, kept: &[u8]) -> Option<&BodyDigest> {
        self.request.as_ref().filter(|d| d.cut(kept))
    }
}

/// A tape by reference: what the recorder takes from an invocation, which
/// keeps its request, names and response where they are instead of copying
/// them into a [`Recording`]. It encodes exactly as the `Recording` with
/// the same contents does (`borrowed_and_owned_tapes_encode_alike`), so the
/// blocks hold one format whichever way a tape came in.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RecordingRef<'a> {
    pub id: &'a str,
    pub tenant: &'a str,
    pub function: &'a str,
    pub version: u32,
    pub artifact: &'a str,
    pub tier: Tier,
    pub started_ms: i64,
    pub duration_us: u64,
    pub request: &'a Request,
    pub tape: &'a Tape,
    pub outcome: OutcomeRef<'a>,
    /// Not part of the recording's own encoding (see [`Recording::streamed`]).
    #[serde(skip)]
    pub streamed: Option<&'a Streamed>,
}

/// [`Outcome`] by reference; same variants, same order.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum OutcomeRef<'a> {
    Response(&'a Response),
    Error {
        kind: &'a str,
        status: u16,
        message: &'a str,
    },
}

impl OutcomeRef<'_> {
    /// `ok`, or the failure's kind.
    pub fn kind(&self) -> &str {
        match self {
            OutcomeRef::Response(_) => "ok",
            OutcomeRef::Error { kind, .. } => kind,
        }
    }

    pub fn to_owned(&self) -> Outcome {
        match *self {
            OutcomeRef::Response(r) => Outcome::Response(r.clone()),
            OutcomeRef::Error {
                kind,
                status,
                message,
            } => Outcome::Error {
                kind: kind.to_string(),
                status,
                message: message.to_string(),
            },
        }
    }
}

impl Outcome {
    pub fn borrowed(&self) -> OutcomeRef<'_> {
        match self {
            Outcome::Response(r) => OutcomeRef::Response(r),
            Outcome::Error {
                kind,
                status,
                message,
            } => OutcomeRef::Error {
                kind,
                status: *status,
                message,
            },
        }
    }
}

impl Recording {
    pub fn borrowed(&self) -> RecordingRef<'_> {
        RecordingRef {
            id: &self.id,
            tenant: &self.tenant,
            function: &self.function,
            version: self.version,
            artifact: &self.artifact,
            tier: self.tier,
            started_ms: self.started_ms,
            duration_us: self.duration_us,
            request: &self.request,
            tape: &self.tape,
            outcome: self.outcome.borrowed(),
            streamed: self.streamed.as_ref(),
        }
    }
}

impl RecordingRef<'_> {
    pub fn to_owned(&self) -> Recording {
        Recording {
            id: self.id.to_string(),
            tenant: self.tenant.to_string(),
            function: self.function.to_string(),
            version: self.version,
            artifact: self.artifact.to_string(),
            tier: self.tier,
            started_ms: self.started_ms,
            duration_us: self.duration_us,
            request: self.request.clone(),
            tape: self.tape.clone(),
            outcome: self.outcome.to_owned(),
            streamed: self.streamed.cloned(),
        }
    }

    /// Whether a payload is large enough to be stored apart, by hash (or
    /// the tape has streamed bodies: both take the serde encoder, not
    /// [`encode_tape`](crate::encode::encode_tape)).
    pub(crate) fn has_large_payload(&self) -> bool {
        self.streamed.is_some()
            || self.request.body.len() >= BLOB_MIN_BYTES
            || matches!(self.outcome, OutcomeRef::Response(r) if r.body.len() >= BLOB_MIN_BYTES)
            || self.tape.events.iter().any(|e| {
                matches!(e, HostEvent::HttpFetch { result: Ok(r), .. } if r.body.len() >= BLOB_MIN_BYTES)
            })
    }

    /// Roughly what this tape holds in memory, for bounding the queue.
    pub fn approx_bytes(&self) -> u64 {
        let events: usize = self
            .tape
            .events
            .iter()
            .map(HostEvent::approx_bytes)
            .sum::<usize>()
            + std::mem::size_of_val(self.tape.timings.as_slice());
        let response = match self.outcome {
            OutcomeRef::Response(r) => r.body.len(),
            OutcomeRef::Error { message, .. } => message.len(),
        };
        (256 + self.request.body.len() + response + events) as u64
    }
}

/// Payloads at least this large are stored once per segment, by hash.
pub const BLOB_MIN_BYTES: usize = 4096;

/// Whose body a split-out payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Slot {
    Request,
    Response,
    /// The response body of the host call at this index.
    Fetch(u32),
}

pub(crate) type Hash = [u8; 32];

/// A recording as it sits in a block: large payloads replaced by hashes.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub recording: Recording,
    pub refs: Vec<(Slot, Hash)>,
    /// [`Recording::streamed`]; not in blocks of the first format.
    pub streamed: Option<Streamed>,
    /// The tape's [`Tape::timings`]; only in blocks of the third format.
    pub timings: Vec<CallTiming>,
}

/// [`Stored`] in blocks of the first format (`HRB1`), from before bodies
/// streamed.
#[derive(Debug, Deserialize)]
pub(crate) struct StoredV1 {
    pub recording: Recording,
    pub refs: Vec<(Slot, Hash)>,
}

/// [`Stored`] in blocks of the second format (`HRB2`), from before host
/// calls were timed.
#[derive(Debug, Deserialize)]
pub(crate) struct StoredV2 {
    pub recording: Recording,
    pub refs: Vec<(Slot, Hash)>,
    pub streamed: Option<Streamed>,
}

impl From<StoredV1> for Stored {
    fn from(v1: StoredV1) -> Stored {
        Stored {
            recording: v1.recording,
            refs: v1.refs,
            streamed: None,
            timings: Vec::new(),
        }
    }
}

impl From<StoredV2> for Stored {
    fn from(v2: StoredV2) -> Stored {
        Stored {
            recording: v2.recording,
            refs: v2.refs,
            streamed: v2.streamed,
            timings: Vec::new(),
        }
    }
}

/// [`Stored`] of a tape with no payload to split, by reference: the bytes
/// [`encode_tape`](crate::encode::encode_tape) writes by hand, which its
/// tests compare with serde's.
#[cfg(test)]
#[derive(Serialize)]
pub(crate) struct StoredRef<'a> {
    pub recording: RecordingRef<'a>,
    pub refs: &'a [(Slot, Hash)],
    pub streamed: Option<&'a Streamed>,
    pub timings: &'a [CallTiming],
}

pub(crate) fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

impl Stored {
    /// Takes every large payload out of `recording`; returns them with the
    /// stored form.
    pub fn split(mut recording: Recording) -> (Stored, Vec<(Hash, Vec<u8>)>) {
        let mut refs = Vec::new();
        let mut blobs = Vec::new();
        let streamed = recording.streamed.take();
        let timings = std::mem::take(&mut recording.tape.timings);
        // Small bodies stay where they are, uncopied: most tapes have none
        // to split.
        let mut take = |slot: Slot, body: Vec<u8>| {
            let hash = sha256(&body);
            refs.push((slot, hash));
            blobs.push((hash, body));
        };
        if recording.request.body.len() >= BLOB_MIN_BYTES {
            take(
                Slot::Request,
                std::mem::take(&mut recording.request.body).into(),
            );
        }
        if let Outcome::Response(r) = &mut recording.outcome
            && r.body.len() >= BLOB_MIN_BYTES
        {
            take(Slot::Response, std::mem::take(&mut r.body).into());
        }
        for (i, event) in recording.tape.events.iter_mut().enumerate() {
            if let HostEvent::HttpFetch {
                result: Ok(response),
                ..
            } = event
                && response.body.len() >= BLOB_MIN_BYTES
            {
                take(Slot::Fetch(i as u32), std::mem::take(&mut response.body));
            }
        }
        (
            Stored {
                recording,
                refs,
                streamed,
                timings,
            },
            blobs,
        )
    }

    /// Puts the payloads back; `find` looks one up by hash.
    pub fn join(
        self,
        mut find: impl FnMut(&Hash) -> Result<Vec<u8>, RecordError>,
    ) -> Result<Recording, RecordError> {
        let mut r = self.recording;
        r.streamed = self.streamed;
        r.tape.timings = self.timings;
        for (slot, hash) in &self.refs {
            let body = find(hash)?;
            if sha256(&body) != *hash {
                return Err(RecordError::Corrupt(
                    "a stored payload does not match its hash".into(),
                ));
            }
            match *slot {
                Slot::Request => r.request.body = Bytes::from(body),
                Slot::Response => match &mut r.outcome {
                    Outcome::Response(resp) => resp.body = Bytes::from(body),
                    Outcome::Error { .. } => {
                        return Err(RecordError::Corrupt(
                            "a response body without a response".into(),
                        ));
                    }
                },
                Slot::Fetch(i) => match r.tape.events.get_mut(i as usize) {
                    Some(HostEvent::HttpFetch {
                        result: Ok(resp), ..
                    }) => resp.body = body,
                    _ => {
                        return Err(RecordError::Corrupt(format!(
                            "payload for host call {i}, which is not a fetch"
                        )));
                    }
                },
            }
        }
        Ok(r)
    }
}

/// The export format written now: byte strings as base64.
const EXPORT_FORMAT: &str = "hearth-tape/2";

/// The first export format, whose byte strings were arrays of numbers; it
/// is still read (its checksum covers the same text).
const EXPORT_FORMAT_V1: &str = "hearth-tape/1";

/// An exported tape: the recording and the parts kept beside it, each as
/// its JSON text, so that the checksum covers exactly the text that is
/// decoded and can be checked before anything is decoded.
#[derive(Serialize, Deserialize)]
struct Export<'a> {
    #[serde(borrow)]
    format: Cow<'a, str>,
    /// sha256 (hex) of `recording`, then `streamed` and `timings` if
    /// present, as they stand in the file: a tape edited by hand is refused
    /// instead of replayed as if it were real traffic.
    #[serde(borrow)]
    checksum: Cow<'a, str>,
    #[serde(borrow)]
    recording: &'a RawValue,
    /// [`Recording::streamed`].
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    streamed: Option<&'a RawValue>,
    /// [`Tape::timings`].
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    timings: Option<&'a RawValue>,
}

impl Export<'_> {
    fn checksum(&self) -> String {
        let mut sha = Sha256::new();
        sha.update(self.recording.get());
        for part in [self.streamed, self.timings].into_iter().flatten() {
            sha.update(part.get());
        }
        hex::encode(sha.finalize())
    }
}

/// How much of an exported tape a node will read: bounded before anything
/// is decoded, so a crafted file costs at most its own size to refuse.
#[derive(Debug, Clone, Copy)]
pub struct ImportLimits {
    /// The file, in bytes.
    pub max_bytes: usize,
    /// Host calls on the tape.
    pub max_events: usize,
}

impl ImportLimits {
    /// The largest tape a node with these limits records, exported: a
    /// request and a response body of the largest sizes and a full tape
    /// budget, as base64 (4 bytes for 3), plus room for names and headers;
    /// and as many host calls as the budget holds at the smallest.
    pub fn for_node(max_body: usize, max_response: usize, tape_budget: usize) -> ImportLimits {
        let payload = max_body + max_response + tape_budget;
        ImportLimits {
            max_bytes: payload / 3 * 4 + (1 << 20),
            max_events: tape_budget / std::mem::size_of::<HostEvent>() + 1,
        }
    }
}

/// Counts a JSON array's items without keeping them, refusing more than
/// the limit it is given.
struct CountAtMost(usize);

impl<'de> serde::de::DeserializeSeed<'de> for CountAtMost {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for CountAtMost {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "at most {} host calls", self.0)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut n = 0;
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
            n += 1;
            if n > self.0 {
                return Err(serde::de::Error::custom(format!(
                    "the tape has more than {} host calls, more than this node records in one \
                     tape (--max-tape-bytes)",
                    self.0
                )));
            }
        }
        Ok(())
    }
}

/// The events of a recording's tape, counted (other fields skipped).
fn count_events(recording: &RawValue, most: usize) -> Result<(), serde_json::Error> {
    struct Events(usize);
    impl<'de> serde::de::DeserializeSeed<'de> for Events {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Events {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a recording")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            // The recording, then inside it the tape: `events` is counted.
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match key.as_ref() {
                    "tape" => map.next_value_seed(Events(self.0))?,
                    "events" => map.next_value_seed(CountAtMost(self.0))?,
                    _ => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut d = serde_json::Deserializer::from_str(recording.get());
    serde::de::DeserializeSeed::deserialize(Events(most), &mut d)
}

impl Recording {
    /// The tape as a file a person can keep next to a test: compact JSON
    /// (byte strings as base64), with a checksum.
    pub fn export(&self) -> Vec<u8> {
        let raw = |json: Vec<u8>| {
            RawValue::from_string(String::from_utf8(json).expect("serde_json writes UTF-8"))
                .expect("serde_json writes JSON")
        };
        let recording = raw(serde_json::to_vec(self).expect("a recording always serializes"));
        let streamed = self
            .streamed
            .as_ref()
            .map(|s| raw(serde_json::to_vec(s).expect("a digest always serializes")));
        let timings = (!self.tape.timings.is_empty()).then(|| {
            raw(serde_json::to_vec(&self.tape.timings).expect("timings always serialize"))
        });
        let mut export = Export {
            format: EXPORT_FORMAT.into(),
            checksum: "".into(),
            recording: &recording,
            streamed: streamed.as_deref(),
            timings: timings.as_deref(),
        };
        let checksum = export.checksum();
        export.checksum = checksum.into();
        let mut out = serde_json::to_vec(&export).expect("a recording always serializes");
        out.push(b'\n');
        out
    }

    /// Reads an exported tape, refusing one that is larger than `limits`,
    /// truncated, edited or not a tape at all; the size, the checksum and
    /// the number of host calls are checked before the tape is decoded.
    pub fn import(file: &[u8], limits: ImportLimits) -> Result<Recording, RecordError> {
        if file.len() > limits.max_bytes {
            return Err(RecordError::BadTape(format!(
                "the tape file is {} bytes, more than this node replays ({} bytes: its largest \
                 request, response and tape, exported)",
                file.len(),
                limits.max_bytes
            )));
        }
        let export: Export = serde_json::from_slice(file).map_err(|e| {
            if e.is_eof() {
                RecordError::BadTape(format!("the file ends early (truncated?): {e}"))
            } else {
                RecordError::BadTape(format!("not a Hearth tape: {e}"))
            }
        })?;
        if export.format != EXPORT_FORMAT && export.format != EXPORT_FORMAT_V1 {
            return Err(RecordError::BadTape(format!(
                "tape format {:?} is not {EXPORT_FORMAT:?} (or the older {EXPORT_FORMAT_V1:?})",
                export.format
            )));
        }
        // A fuzzer cannot forge checksums, so under `cfg(fuzzing)` (the
        // fuzz targets' build) a tape's own is not checked, and what
        // follows it is reached.
        if export.checksum() != export.checksum && !cfg!(fuzzing) {
            return Err(RecordError::BadTape(
                "the tape was changed after it was exported (checksum mismatch)".into(),
            ));
        }
        count_events(export.recording, limits.max_events)
            .map_err(|e| RecordError::BadTape(e.to_string()))?;
        let bad = |e: serde_json::Error| RecordError::BadTape(format!("not a Hearth tape: {e}"));
        let mut recording: Recording = serde_json::from_str(export.recording.get()).map_err(bad)?;
        if let Some(s) = export.streamed {
            recording.streamed = serde_json::from_str(s.get()).map_err(bad)?;
        }
        if let Some(t) = export.timings {
            recording.tape.timings = serde_json::from_str(t.get()).map_err(bad)?;
        }
        Ok(recording)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hearth_host::{OutboundRequest, OutboundResponse};

    /// A node's default limits: 6 MiB requests, 16 MiB responses, 4 MiB tapes.
    pub const LIMITS: ImportLimits = ImportLimits {
        max_bytes: 35 << 20,
        max_events: 40_000,
    };

    pub fn sample(body_len: usize) -> Recording {
        Recording {
            id: hearth_core::InvocationId::new().to_string(),
            tenant: "acme".into(),
            function: "f".into(),
            version: 1,
            artifact: "ab".repeat(32),
            tier: Tier::Wasm,
            started_ms: hearth_core::unix_time_ms(),
            duration_us: 120,
            request: Request {
                method: "POST".into(),
                path: "/".into(),
                query: "a=1".into(),
                headers: vec![("x-k".into(), "v".into())],
                body: Bytes::from(vec![7u8; body_len]),
            },
            tape: Tape {
                events: vec![
                    HostEvent::WallClock { nanos: 5 },
                    HostEvent::HttpFetch {
                        request: OutboundRequest {
                            method: "GET".into(),
                            url: "http://x/".into(),
                            headers: vec![],
                            body: vec![],
                        },
                        result: Ok(OutboundResponse {
                            status: 200,
                            headers: vec![],
                            body: vec![1u8; body_len],
                        }),
                    },
                ],
                timings: vec![CallTiming {
                    call: 1,
                    time: hearth_host::CallTime {
                        at_us: 40,
                        took_us: 900,
                    },
                }],
            },
            outcome: Outcome::Response(Response {
                status: 200,
                headers: vec![],
                body: Bytes::from(vec![9u8; body_len]),
            }),
            streamed: None,
        }
    }

    #[test]
    fn borrowed_and_owned_tapes_encode_alike() {
        let mut failed = sample(10);
        failed.outcome = Outcome::Error {
            kind: "trap".into(),
            status: 500,
            message: "unreachable".into(),
        };
        let mut bare = sample(0);
        bare.tape = Tape::default();
        bare.request.headers.clear();
        for r in [sample(10), failed, bare] {
            let owned = postcard::to_allocvec(&Stored {
                recording: r.clone(),
                refs: Vec::new(),
                streamed: None,
                timings: r.tape.timings.clone(),
            })
            .unwrap();
            let borrowed = postcard::to_allocvec(&StoredRef {
                recording: r.borrowed(),
                refs: &[],
                streamed: None,
                timings: &r.tape.timings,
            })
            .unwrap();
            assert_eq!(owned, borrowed);
            let back: Stored = postcard::from_bytes(&borrowed).unwrap();
            assert_eq!(back.join(|_| unreachable!()).unwrap(), r);
            assert_eq!(r.borrowed().to_owned(), r);
        }
        assert!(!sample(BLOB_MIN_BYTES - 1).borrowed().has_large_payload());
        assert!(sample(BLOB_MIN_BYTES).borrowed().has_large_payload());
    }

    #[test]
    fn large_payloads_split_out_and_join_back() {
        let r = sample(BLOB_MIN_BYTES);
        let (stored, blobs) = Stored::split(r.clone());
        assert_eq!(stored.refs.len(), 3);
        assert_eq!(blobs.len(), 3);
        assert!(stored.recording.request.body.is_empty());
        let joined = stored
            .join(|h| Ok(blobs.iter().find(|(b, _)| b == h).unwrap().1.clone()))
            .unwrap();
        assert_eq!(joined, r);

        let small = sample(10);
        let (stored, blobs) = Stored::split(small.clone());
        assert!(blobs.is_empty() && stored.refs.is_empty());
        assert_eq!(stored.join(|_| unreachable!()).unwrap(), small);
    }

    #[test]
    fn exports_refuse_edits_and_truncation() {
        let r = sample(10);
        let file = r.export();
        assert_eq!(Recording::import(&file, LIMITS).unwrap(), r);

        let text = String::from_utf8(file.clone()).unwrap();
        let edited = text.replacen("\"POST\"", "\"PUT\"", 1);
        assert_ne!(edited, text);
        let err = Recording::import(edited.as_bytes(), LIMITS).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");

        let err = Recording::import(&file[..file.len() / 2], LIMITS).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        let err = Recording::import(b"hello", LIMITS).unwrap_err();
        assert!(err.to_string().contains("not a Hearth tape"), "{err}");
    }

    #[test]
    fn exports_hold_bytes_as_base64() {
        let r = sample(3000);
        let file = r.export();
        let text = std::str::from_utf8(&file).unwrap();
        assert!(
            text.starts_with(r#"{"format":"hearth-tape/2","#),
            "{}",
            &text[..40]
        );
        assert!(
            text.contains(r#""body":"BwcH"#),
            "the request body is base64"
        );
        assert!(!text.contains("7,7,7"), "no byte is a number of its own");
        // Three payloads of 3,000 bytes, as base64, and little else.
        assert!(file.len() < 3 * 4000 + 1500, "{} bytes", file.len());
    }

    #[test]
    fn a_tape_of_the_first_export_format_still_reads() {
        // Written by the exporter of `hearth-tape/1`: bytes as numbers.
        let file = include_bytes!("../tests/data/tape-v1.json");
        let r = Recording::import(file, LIMITS).unwrap();
        assert_eq!(&r.request.body[..], &[7u8; 10]);
        assert!(
            matches!(&r.tape.events[1], HostEvent::HttpFetch { result: Ok(o), .. } if o.body == [1u8; 10])
        );
        assert_eq!(r.tape.timings.len(), 1);
        let edited = String::from_utf8(file.to_vec())
            .unwrap()
            .replacen("[7,", "[8,", 1);
        let err = Recording::import(edited.as_bytes(), LIMITS).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        // Exported again, it is the current format and the same recording.
        assert_eq!(Recording::import(&r.export(), LIMITS).unwrap(), r);
    }

    #[test]
    fn imports_are_bounded_before_they_are_decoded() {
        let mut r = sample(10);
        let file = r.export();
        let small = ImportLimits {
            max_bytes: file.len() - 1,
            max_events: 100,
        };
        let err = Recording::import(&file, small).unwrap_err();
        assert!(
            err.to_string().contains("more than this node replays"),
            "{err}"
        );

        r.tape.events = vec![HostEvent::WallClock { nanos: 1 }; 101];
        let err = Recording::import(
            &r.export(),
            ImportLimits {
                max_events: 100,
                ..LIMITS
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("more than 100 host calls"),
            "{err}"
        );
        r.tape.events.pop();
        let ok = Recording::import(
            &r.export(),
            ImportLimits {
                max_events: 100,
                ..LIMITS
            },
        );
        assert_eq!(ok.unwrap(), r);

        // A node's own limits take its largest tape, exported.
        let node = ImportLimits::for_node(6 << 20, 16 << 20, 4 << 20);
        assert!(node.max_bytes >= (26 << 20) / 3 * 4, "{node:?}");
        assert!(
            node.max_events >= (4 << 20) / size_of::<HostEvent>(),
            "{node:?}"
        );
    }

    fn streamed(mut r: Recording) -> Recording {
        r.streamed = Some(Streamed {
            request: Some(BodyDigest {
                len: 1 << 30,
                blake3: [3; 32],
            }),
            response: None,
        });
        r
    }

    #[test]
    fn streamed_digests_survive_blocks_and_exports() {
        for r in [streamed(sample(10)), streamed(sample(BLOB_MIN_BYTES))] {
            let (stored, blobs) = Stored::split(r.clone());
            let bytes = postcard::to_allocvec(&stored).unwrap();
            let back: Stored = postcard::from_bytes(&bytes).unwrap();
            let joined = back
                .join(|h| Ok(blobs.iter().find(|(b, _)| b == h).unwrap().1.clone()))
                .unwrap();
            assert_eq!(joined, r);
            assert_eq!(Recording::import(&r.export(), LIMITS).unwrap(), r);
        }
        // The digests are under the export's checksum.
        let r = streamed(sample(10));
        let text = String::from_utf8(r.export()).unwrap();
        let edited = text.replacen("1073741824", "1073741825", 1);
        assert_ne!(edited, text);
        let err = Recording::import(edited.as_bytes(), LIMITS).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        // A tape without them exports as before they existed.
        assert!(
            !String::from_utf8(sample(10).export())
                .unwrap()
                .contains("streamed")
        );
        // The request can be given again only if the tape holds it whole.
        let digest = r.streamed.as_ref().unwrap();
        assert!(digest.cut_request(&r.request.body).is_some());
        assert!(Streamed::default().cut_request(b"").is_none());
    }

    #[test]
    fn blocks_of_earlier_formats_still_read() {
        #[derive(Serialize)]
        struct V1<'a> {
            tapes: Vec<(RecordingRef<'a>, Vec<(Slot, Hash)>)>,
            blobs: Vec<(Hash, Vec<u8>)>,
        }
        #[derive(Serialize)]
        struct StoredV2Ref<'a> {
            recording: RecordingRef<'a>,
            refs: Vec<(Slot, Hash)>,
            streamed: Option<&'a Streamed>,
        }
        #[derive(Serialize)]
        struct V2<'a> {
            tapes: Vec<StoredV2Ref<'a>>,
            blobs: Vec<(Hash, Vec<u8>)>,
        }
        let r = streamed(sample(10));
        let untimed = Recording {
            tape: Tape::of(r.tape.events.clone()),
            ..r.clone()
        };
        let v1 = postcard::to_allocvec(&V1 {
            tapes: vec![(r.borrowed(), Vec::new())],
            blobs: Vec::new(),
        })
        .unwrap();
        let v2 = postcard::to_allocvec(&V2 {
            tapes: vec![StoredV2Ref {
                recording: r.borrowed(),
                refs: Vec::new(),
                streamed: r.streamed.as_ref(),
            }],
            blobs: Vec::new(),
        })
        .unwrap();
        let read = |format, bytes: &[u8]| {
            let mut body = crate::segment::BlockBody::decode(format, bytes).unwrap();
            assert_eq!(body.tapes.len(), 1);
            body.tapes.pop().unwrap().join(|_| unreachable!()).unwrap()
        };
        assert_eq!(
            read(1, &v1),
            Recording {
                streamed: None,
                ..untimed.clone()
            }
        );
        assert_eq!(read(2, &v2), untimed);
        // Read as a later format, the same bytes do not decode: the magic
        // is what tells them apart.
        assert!(crate::segment::BlockBody::decode(2, &v1).is_err());
        assert!(crate::segment::BlockBody::decode(3, &v2).is_err());
    }
}
