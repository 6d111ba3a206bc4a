//! Tapes handed over and not yet written, already in their on-disk form.
//!
//! An invocation encodes its own tape (postcard) into a shard picked by its
//! thread, and drops the `Recording` right there. Measured under load on
//! `hello`: handing the writer a heap object per invocation and letting it
//! free them all at each flush doubled p99 (a writer that only dropped its
//! batch gave +115–156%; one that leaked it, +16%), and indexing a row per tape was a third of the writer's
//! time. Here the writer only takes byte buffers and per-function
//! summaries ([`Summary`], which become the index's [`TapeBlock`] rows).
//!
//! A tenant's tapes, back to back, are exactly postcard's encoding of the
//! block's tape list after its length prefix, so the writer assembles a
//! [`BlockBody`](crate::segment::BlockBody)'s bytes without decoding
//! anything.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hearth_store::TapeBlock;
use rustc_hash::FxHashMap;

use crate::RecordError;
use crate::encode::encode_tape;
use crate::recording::{Hash, Recording, RecordingRef, Stored};

/// What waits in one shard.
#[derive(Default)]
pub(crate) struct Pending {
    /// FxHash, not SipHash: keys are names the node already checked, and
    /// the two SipHash lookups per tape were a sixth of handing it over.
    pub tenants: FxHashMap<String, TenantTapes>,
    pub count: u64,
    pub bytes: u64,
    /// How much of `count` and `bytes` is counted in the recorder's
    /// [`Queued`] (see [`Shards::push`]): the writer counts out exactly
    /// that when it takes the batch.
    pub published: (u64, u64),
}

/// One tenant's tapes in a [`Pending`].
#[derive(Default)]
pub(crate) struct TenantTapes {
    /// postcard(`Stored`) of each tape, back to back.
    pub tapes: Vec<u8>,
    pub count: u64,
    /// Large payloads split out of these tapes (not yet deduplicated
    /// against the segment: the writer knows what it holds).
    pub blobs: Vec<(Hash, Vec<u8>)>,
    /// Tapes with a large payload, handed over whole: splitting one out
    /// hashes it (SHA-256, its address in the segment) and copies it, a
    /// few milliseconds a megabyte that the writer's thread spends at its
    /// own priority ([`Pending::settle`]) instead of the invocation's.
    pub unsplit: Vec<Recording>,
    pub functions: FxHashMap<String, Summary>,
}

/// A batch's buffer larger than this is freed after a flush instead of
/// kept for the next: a burst should not pin its memory for good.
const KEEP_BUFFER_BYTES: usize = 8 << 20;

impl Pending {
    /// Empties this batch, keeping its buffers (up to a size) for the next:
    /// growing them from nothing each flush cost page faults on the
    /// invocations' threads.
    pub fn clear(&mut self) {
        for t in self.tenants.values_mut() {
            if t.tapes.capacity() > KEEP_BUFFER_BYTES {
                t.tapes = Vec::new();
            }
            t.tapes.clear();
            t.count = 0;
            t.blobs.clear();
            t.unsplit.clear();
            t.functions.clear();
        }
        self.count = 0;
        self.bytes = 0;
        self.published = (0, 0);
    }

    /// Tapes and bytes in this batch not yet counted in [`Queued`].
    fn unpublished(&self) -> (u64, u64) {
        (self.count - self.published.0, self.bytes - self.published.1)
    }

    /// Encodes `r` into this batch; returns the bytes it added. A tape
    /// with a payload to split out is copied once to split it; the rest
    /// (nearly all) are encoded from where they are, by
    /// [`encode_tape`].
    pub fn push(&mut self, r: RecordingRef<'_>) -> Result<u64, RecordError> {
        let summary = Summary::of(&r)?;
        let tenant = match self.tenants.get_mut(r.tenant) {
            Some(t) => t,
            None => self.tenants.entry(r.tenant.to_string()).or_default(),
        };
        // After one tape handed over whole, the tenant's later ones are
        // too: a block keeps its tapes in the order they came.
        let added = if !tenant.unsplit.is_empty() || r.has_large_payload() {
            tenant.unsplit.push(r.to_owned());
            r.approx_bytes()
        } else {
            let before = tenant.tapes.len();
            if let Err(e) = encode_tape(&r, &mut tenant.tapes) {
                tenant.tapes.truncate(before);
                return Err(RecordError::Corrupt(format!("cannot encode a tape: {e}")));
            }
            (tenant.tapes.len() - before) as u64
        };
        note(&mut tenant.functions, summary, r.function);
        tenant.count += 1;
        self.count += 1;
        self.bytes += added;
        Ok(added)
    }

    /// On the writer's thread, before the batch is written
    /// (the writer's `write` does it): splits the
    /// large payloads out of the tapes handed over whole and encodes
    /// them. Returns how many could not be encoded (dropped, and logged).
    pub fn settle(&mut self) -> u64 {
        let mut failed = 0;
        for tenant in self.tenants.values_mut() {
            for r in std::mem::take(&mut tenant.unsplit) {
                let (stored, payloads) = Stored::split(r);
                let before = tenant.tapes.len();
                if let Err(e) = append(&stored, &mut tenant.tapes) {
                    tenant.tapes.truncate(before);
                    tenant.count -= 1;
                    failed += 1;
                    tracing::error!(error = %e, "cannot encode a tape; dropped");
                    continue;
                }
                tenant.blobs.extend(payloads);
            }
        }
        failed
    }
}

/// postcard's encoding of `value`, appended to `out` (whose earlier tapes
/// stay put whatever happens). `to_extend` pushes bytes into the `Vec`
/// directly; `to_io` went through `io::Write` for every field.
pub(crate) fn append<T: serde::Serialize>(value: &T, out: &mut Vec<u8>) -> postcard::Result<()> {
    struct Tail<'a>(&'a mut Vec<u8>);
    impl Extend<u8> for Tail<'_> {
        fn extend<I: IntoIterator<Item = u8>>(&mut self, bytes: I) {
            self.0.extend(bytes)
        }
    }
    postcard::to_extend(value, Tail(out)).map(drop)
}

/// Where invocations put their tapes: a few mutex-guarded batches, one
/// picked per thread, so concurrent invocations rarely meet on a lock and
/// the writer takes each whole in a swap.
///
/// A handover touches only its own shard's cache lines. Under `perf` in a
/// daemon serving `hello` from two workers, the lines the workers shared
/// were most of a handover's cost beyond encoding: reading the queue's
/// global counts before each tape (0.13 µs per request: a line the other
/// worker had just written), and taking a lock whose line held a
/// neighbour's lock too (0.24 µs in `push` itself, with the thread-local
/// lookup). So each shard has lines of its own, and a shard counts its
/// tapes into the global [`Queued`] only every [`PUBLISH_TAPES`] tapes or
/// [`PUBLISH_BYTES`] bytes (see [`push`](Self::push) for what that
/// changes about the queue's bound). After: no time in reading the
/// counts, 0.12 µs in `push` itself.
pub(crate) struct Shards {
    shards: Box<[Shard]>,
    /// Emptied batches with their buffers, to swap in for full ones.
    spare: Mutex<Vec<Pending>>,
    limit: QueueLimit,
}

/// How many tapes, or bytes of them, may wait to be written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueLimit {
    pub tapes: u64,
    pub bytes: u64,
    /// Refuse a tape past the limit (`batched`); `sync` durability takes
    /// every tape, its callers waiting for the writer anyway.
    pub refuse: bool,
}

/// A shard publishes its count to [`Queued`] after this many tapes…
const PUBLISH_TAPES: u64 = 64;
/// …or this many bytes, whichever comes first.
const PUBLISH_BYTES: u64 = 64 << 10;

/// One shard, alone on its cache lines (128 bytes: two lines, as the
/// adjacent-line prefetcher pairs them).
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<ShardState>);

#[derive(Default)]
struct ShardState {
    pending: Pending,
    /// Room left in the queue (tapes, bytes) when this shard last looked
    /// at [`Queued`]. Stale by what other shards did since: it is only
    /// trusted to let a tape in, never to turn one away.
    room: Option<(u64, u64)>,
    /// Tapes handed over to this shard since the recorder opened.
    handed: u64,
}

/// What a handover found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued.
    Queued,
    /// Queued, and the queue is more than half full: the writer should
    /// hurry.
    Crowded,
}

impl Shards {
    pub fn new(n: usize, limit: QueueLimit) -> Shards {
        Shards {
            shards: (0..n.max(1)).map(|_| Shard::default()).collect(),
            spare: Mutex::default(),
            limit,
        }
    }

    /// Encodes `recording` into this thread's shard, or refuses it with
    /// [`RecordError::Overloaded`] when the queue is full.
    ///
    /// A tape is refused only after a fresh look at `queued`, with the
    /// same rule as one global count would give: the tapes already
    /// waiting, this shard's unpublished ones and this one, against the
    /// limit. A tape is let in on the shard's last look when that showed
    /// room, so the queue can exceed its limit by what other shards took
    /// since: less than `PUBLISH_TAPES` tapes (or `PUBLISH_BYTES` bytes,
    /// plus one tape) per shard.
    ///
    /// The counts are raised while the shard is locked: the writer takes a
    /// shard under the same lock and then lowers the counts by what it
    /// took, so it can never lower them by a tape not yet counted (which
    /// wrapped them below zero when the writer ran between the two).
    pub fn push(
        &self,
        recording: RecordingRef<'_>,
        queued: &Queued,
    ) -> Result<Pushed, RecordError> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local!(static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed));
        let i = MINE.with(|m| *m) % self.shards.len();
        let mut shard = self.shards[i].0.lock();
        let shard = &mut *shard;
        let limit = self.limit;
        let (tapes, bytes) = shard.pending.unpublished();
        let approx = recording.approx_bytes();
        let fits = |(t, b): (u64, u64)| tapes < t && bytes + approx <= b;
        if !shard.room.is_some_and(fits) {
            let room = limit.room(queued.get());
            shard.room = Some(room);
            if limit.refuse && !fits(room) {
                return Err(RecordError::Overloaded);
            }
        }
        shard.pending.push(recording)?;
        shard.handed += 1;
        let (tapes, bytes) = shard.pending.unpublished();
        if tapes < PUBLISH_TAPES && bytes < PUBLISH_BYTES {
            return Ok(Pushed::Queued);
        }
        let now = queued.add(tapes, bytes);
        shard.pending.published = (shard.pending.count, shard.pending.bytes);
        shard.room = Some(limit.room(now));
        Ok(if now.0 > limit.tapes / 2 || now.1 > limit.bytes / 2 {
            Pushed::Crowded
        } else {
            Pushed::Queued
        })
    }

    /// Tapes handed over since the recorder opened.
    pub fn handed(&self) -> u64 {
        self.shards.iter().map(|s| s.0.lock().handed).sum()
    }

    /// Everything pending, leaving the shards empty; give the batches
    /// back with [`recycle`](Self::recycle) once written, and count out
    /// of [`Queued`] what each batch had `published`.
    pub fn take(&self) -> Vec<Pending> {
        let mut spare = self.spare.lock();
        let mut out = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.0.lock();
            if shard.pending.count > 0 {
                out.push(std::mem::replace(
                    &mut shard.pending,
                    spare.pop().unwrap_or_default(),
                ));
            }
        }
        out
    }

    pub fn recycle(&self, mut used: Vec<Pending>) {
        used.iter_mut().for_each(Pending::clear);
        self.spare.lock().extend(used);
    }
}

impl QueueLimit {
    /// Room left with `queued` (tapes, bytes) waiting.
    fn room(&self, (tapes, bytes): (u64, u64)) -> (u64, u64) {
        (
            self.tapes.saturating_sub(tapes),
            self.bytes.saturating_sub(bytes),
        )
    }
}

/// Tapes (and their encoded bytes) handed over and not yet written, as
/// far as the shards have published them: short by under `PUBLISH_TAPES`
/// tapes (or `PUBLISH_BYTES` bytes) per shard.
#[derive(Debug, Default)]
pub struct Queued {
    tapes: AtomicU64,
    bytes: AtomicU64,
}

impl Queued {
    /// (tapes, bytes) now.
    pub fn get(&self) -> (u64, u64) {
        (
            self.tapes.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// Counts tapes in; returns the counts after.
    fn add(&self, tapes: u64, bytes: u64) -> (u64, u64) {
        (
            self.tapes.fetch_add(tapes, Ordering::Relaxed) + tapes,
            self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes,
        )
    }

    /// Counts written tapes out; returns the counts after. Only what a
    /// batch taken by [`Shards::take`] had published is counted out, and
    /// that was counted in under its shard's lock before the take could
    /// see it.
    pub(crate) fn remove(&self, tapes: u64, bytes: u64) -> (u64, u64) {
        (
            self.tapes.fetch_sub(tapes, Ordering::Relaxed) - tapes,
            self.bytes.fetch_sub(bytes, Ordering::Relaxed) - bytes,
        )
    }
}

/// One function's tapes in one block, as the index keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    first_id: IdText,
    last_id: IdText,
    first_ms: i64,
    last_ms: i64,
    count: u32,
    errors: u32,
    min_version: u32,
    max_version: u32,
}

/// An invocation id as the index keeps and orders it: its text (the 32
/// hex digits the node makes), compared byte by byte. Only the length is
/// checked: any 32-character id orders consistently as text. Comparing
/// the text directly, instead of parsing it into a number first, took
/// summarizing a tape from 74 to a few ns (the parse was the largest
/// single cost of a handover, in process). The text is held as its two
/// halves, big-endian: they order as the bytes do, and compare in two
/// instructions where the bytes took a `memcmp` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct IdText(u128, u128);

/// Length of an invocation id ([`InvocationId`](hearth_core::InvocationId)
/// as hex, without dashes); the recorder takes no other.
const ID_LEN: usize = 32;

impl IdText {
    fn of(id: &str) -> Result<IdText, RecordError> {
        let text: &[u8; ID_LEN] = id.as_bytes().try_into().map_err(|_| {
            RecordError::BadTape(format!(
                "a tape's id must be {ID_LEN} characters long, as the 32 hex digits of an invocation id are, not {id:?}"
            ))
        })?;
        let (high, low) = text.split_at(16);
        Ok(IdText(
            u128::from_be_bytes(high.try_into().expect("16 of 32 bytes")),
            u128::from_be_bytes(low.try_into().expect("16 of 32 bytes")),
        ))
    }

    fn text(&self) -> String {
        let mut bytes = [0u8; ID_LEN];
        bytes[..16].copy_from_slice(&self.0.to_be_bytes());
        bytes[16..].copy_from_slice(&self.1.to_be_bytes());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Summary {
    pub fn of(r: &RecordingRef<'_>) -> Result<Summary, RecordError> {
        let id = IdText::of(r.id)?;
        Ok(Summary {
            first_id: id,
            last_id: id,
            first_ms: r.started_ms,
            last_ms: r.started_ms,
            count: 1,
            errors: u32::from(r.outcome.kind() != "ok"),
            min_version: r.version,
            max_version: r.version,
        })
    }

    pub fn merge(&mut self, o: &Summary) {
        self.first_id = self.first_id.min(o.first_id);
        self.last_id = self.last_id.max(o.last_id);
        self.first_ms = self.first_ms.min(o.first_ms);
        self.last_ms = self.last_ms.max(o.last_ms);
        self.count += o.count;
        self.errors += o.errors;
        self.min_version = self.min_version.min(o.min_version);
        self.max_version = self.max_version.max(o.max_version);
    }

    pub fn row(&self, tenant: &str, function: &str, segment: u64, offset: u64) -> TapeBlock {
        TapeBlock {
            tenant: tenant.to_string(),
            function: function.to_string(),
            segment,
            offset,
            first_id: self.first_id.text(),
            last_id: self.last_id.text(),
            first_ms: self.first_ms,
            last_ms: self.last_ms,
            count: self.count,
            errors: self.errors,
            min_version: self.min_version,
            max_version: self.max_version,
            ok_expired: false,
        }
    }
}

/// The summaries of `tapes`, per function (for blocks read back from disk).
pub(crate) fn summarize<'a>(
    tapes: impl IntoIterator<Item = &'a Recording>,
) -> Result<FxHashMap<String, Summary>, RecordError> {
    let mut out = FxHashMap::default();
    for r in tapes {
        note(&mut out, Summary::of(&r.borrowed())?, r.function.as_str());
    }
    Ok(out)
}

/// Adds a tape's summary to its function's (allocating a key only for
/// the function's first tape in the batch).
fn note(functions: &mut FxHashMap<String, Summary>, summary: Summary, function: &str) {
    match functions.get_mut(function) {
        Some(s) => s.merge(&summary),
        None => {
            functions.insert(function.to_string(), summary);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::tests::sample;

    /// The index orders blocks by id as text; a summary keeps the least
    /// and greatest id as text too, and the recorder takes no id it could
    /// not keep that way.
    #[test]
    fn summaries_keep_the_first_and_last_id_and_refuse_other_ids() {
        let tapes: Vec<Recording> = (0..50).map(|_| sample(10)).collect();
        let mut batch = Pending::default();
        // Out of order, as concurrent invocations finish.
        for t in tapes.iter().rev().step_by(2).chain(tapes.iter().step_by(2)) {
            batch.push(t.borrowed()).unwrap();
        }
        let row = batch.tenants["acme"].functions["f"].row("acme", "f", 1, 0);
        let ids: Vec<&str> = tapes.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(row.first_id, *ids.iter().min().unwrap());
        assert_eq!(row.last_id, *ids.iter().max().unwrap());
        assert_eq!(row.count, 50);

        let (count, bytes) = (batch.count, batch.bytes);
        let mut odd = sample(10);
        odd.id = "ff".into();
        let err = batch.push(odd.borrowed()).unwrap_err();
        assert!(matches!(err, RecordError::BadTape(_)), "{err}");
        assert!(err.to_string().contains("32 hex digits"), "{err}");
        assert_eq!((batch.count, batch.bytes), (count, bytes));
        let body = summarize([&tapes[0], &odd]).unwrap_err();
        assert!(matches!(body, RecordError::BadTape(_)));
    }

    /// Invocations push while the writer takes and counts out, as under
    /// load. Counting in after the shard's lock was let go (the old order)
    /// let a take count out a tape not yet counted in, and the count
    /// wrapped below zero: a debug build panics on the overflow.
    #[test]
    fn counts_never_fall_below_what_was_taken_under_concurrent_pushes() {
        let shards = Shards::new(4, UNBOUNDED);
        let queued = Queued::default();
        let tape = sample(10);
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..5_000 {
                        shards.push(tape.borrowed(), &queued).unwrap();
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                });
            }
            s.spawn(|| {
                let mut taken = 0;
                loop {
                    let finished = done.load(Ordering::Relaxed) == 4;
                    let batches = shards.take();
                    for p in &batches {
                        queued.remove(p.published.0, p.published.1);
                        taken += p.count;
                    }
                    shards.recycle(batches);
                    if finished {
                        break;
                    }
                }
                assert_eq!(taken, 20_000);
            });
        });
        assert_eq!(queued.get(), (0, 0));
        assert_eq!(shards.handed(), 20_000);
    }

    const UNBOUNDED: QueueLimit = QueueLimit {
        tapes: u64::MAX,
        bytes: u64::MAX,
        refuse: true,
    };

    /// One thread sees the bound exactly, though it publishes its count
    /// only every `PUBLISH_TAPES` tapes: the 150th tape fits, the 151st is
    /// refused, and once the writer has taken the batch there is room
    /// again. `sync` (not refusing) takes every tape.
    #[test]
    fn a_full_queue_refuses_a_tape_only_after_looking_again() {
        let tape = sample(10);
        for refuse in [true, false] {
            let limit = QueueLimit {
                tapes: 150,
                bytes: u64::MAX,
                refuse,
            };
            let (shards, queued) = (Shards::new(4, limit), Queued::default());
            let pushed: Vec<_> = (0..151)
                .map(|_| shards.push(tape.borrowed(), &queued))
                .collect();
            assert!(pushed[..150].iter().all(Result::is_ok));
            assert!(matches!(pushed[63], Ok(Pushed::Queued)), "64 of 150");
            assert!(matches!(pushed[127], Ok(Pushed::Crowded)), "128 of 150");
            assert_eq!(
                pushed[150].as_ref().err().map(ToString::to_string),
                refuse.then(|| RecordError::Overloaded.to_string()),
            );
            assert_eq!(queued.get().0, 128, "published at 64 and 128 tapes");
            for p in shards.take() {
                queued.remove(p.published.0, p.published.1);
            }
            assert_eq!(queued.get(), (0, 0));
            assert!(shards.push(tape.borrowed(), &queued).is_ok());
            assert_eq!(shards.handed(), if refuse { 151 } else { 152 });
        }
    }

    /// A shard publishes by bytes too, and says when the queue is more
    /// than half full (the writer's cue to hurry).
    #[test]
    fn a_shard_publishes_large_tapes_at_once_and_says_when_the_queue_is_crowded() {
        let big = sample(PUBLISH_BYTES as usize);
        let (shards, queued) = (Shards::new(1, UNBOUNDED), Queued::default());
        shards.push(big.borrowed(), &queued).unwrap();
        let (tapes, one) = queued.get();
        assert_eq!(tapes, 1, "published at once");
        let limit = QueueLimit {
            tapes: 1000,
            bytes: 5 * one,
            refuse: true,
        };
        let (shards, queued) = (Shards::new(1, limit), Queued::default());
        let push = || shards.push(big.borrowed(), &queued).unwrap();
        assert_eq!(push(), Pushed::Queued);
        assert_eq!(push(), Pushed::Queued);
        assert_eq!(push(), Pushed::Crowded);
    }
}
