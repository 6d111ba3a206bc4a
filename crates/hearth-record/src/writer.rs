//! [`Recorder`]: the invocation path encodes its [`Recording`] into a shard
//! ([`crate::pending`]) and moves on; one background thread takes the
//! shards each flush interval, seals, appends, indexes and expires.
//!
//! Order of writes, which is what makes a crash harmless: block bytes are
//! appended and synced, then their index rows (one per block and function)
//! committed. A crash before the
//! sync can leave a torn block at a segment's tail: [`Recorder::open`] cuts
//! it off. A crash between sync and commit leaves whole blocks the index
//! does not name: `open` decodes and indexes them. A segment is
//! self-contained (payloads are deduplicated within it, never across), so
//! retention can delete one without breaking a tape elsewhere.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hearth_core::RecordPolicy;
use hearth_store::BlobEntry;
use tokio::sync::oneshot;

use crate::RecordError;
use crate::archive::{Archive, Sealer};
use crate::pending::{
    Pending, Pushed, QueueLimit, Queued, Shards, Summary, TenantTapes, append, summarize,
};
use crate::priority::WriterPriority;
use crate::recording::{Hash, RecordingRef};
use crate::segment::{self, SEGMENT_MAGIC};

mod retention;

/// When an invocation's tape counts as kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Written within one flush interval; a crash loses at most that.
    Batched,
    /// The response waits until the tape is on disk and indexed.
    Sync,
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "batched" => Ok(Durability::Batched),
            "sync" => Ok(Durability::Sync),
            other => Err(format!("durability must be batched or sync, not {other:?}")),
        }
    }
}

/// Settings of the recorder.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    pub durability: Durability,
    /// How long tapes wait in memory to be written together (batched mode).
    pub flush_interval: Duration,
    /// A segment is closed past this size…
    pub segment_bytes: u64,
    /// …or this age.
    pub segment_age: Duration,
    /// Tapes older than this are deleted unless their function keeps them
    /// longer (see [`RecordPolicy`]).
    pub max_age: Duration,
    /// Segment files never take more than this; the tenant holding the
    /// most loses its oldest tapes first (see `writer/retention.rs`).
    pub max_bytes: u64,
    /// No tenant's tapes take more than this; its oldest go first.
    pub max_tenant_bytes: u64,
    /// How often retention runs.
    pub sweep_interval: Duration,
    /// Tapes waiting to be written before new ones are dropped (and counted).
    pub queue: usize,
    /// Bytes of tapes waiting to be written before new ones are dropped:
    /// a flood of large requests must not turn the queue into the largest
    /// thing in memory.
    pub queue_bytes: u64,
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig {
            durability: Durability::Batched,
            flush_interval: Duration::from_millis(200),
            segment_bytes: 64 << 20,
            segment_age: Duration::from_secs(3600),
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_bytes: 1 << 30,
            max_tenant_bytes: u64::MAX,
            sweep_interval: Duration::from_secs(60),
            queue: 65_536,
            queue_bytes: 256 << 20,
        }
    }
}

/// Counters of the recorder, for metrics.
#[derive(Debug, Default)]
pub struct RecorderStats {
    pub tapes: AtomicU64,
    pub dropped: AtomicU64,
    /// Bytes appended to segments.
    pub bytes: AtomicU64,
    pub expired: AtomicU64,
    /// Bytes of segment files each tenant's tapes take, as of the last
    /// sweep.
    pub tenant_bytes: Mutex<HashMap<String, u64>>,
    /// Tapes handed over and not yet written, and their encoded bytes.
    /// Each shard adds its tapes in batches (see `Shards::push`), so
    /// this is short by under 64 tapes (or 64 KiB) per shard.
    pub queued: Queued,
}

type Ack = oneshot::Sender<Result<(), String>>;

/// What the writer is asked besides writing tapes (which it finds in the
/// shards on its own).
enum Job {
    /// Write what is pending, then stop.
    Close,
    /// Write everything handed over before this, then answer.
    Flush(Ack),
    /// Run retention now, then answer.
    Sweep(Ack),
}

/// How many shards tapes are encoded into: more than there are worker
/// threads, so two rarely share a lock.
const SHARDS: usize = 16;

pub struct Recorder {
    shards: Arc<Shards>,
    /// Shared by every caller as it is (`Sender` is `Sync`).
    tx: Sender<Job>,
    closed: AtomicBool,
    archive: Arc<Archive>,
    durability: Durability,
    max_tenant_bytes: u64,
    stats: Arc<RecorderStats>,
    /// The writer, to unpark; and to join, once.
    writer: std::thread::Thread,
    priority: Arc<WriterPriority>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// Opens the archive, repairs it after a crash, and starts the writer
    /// thread.
    pub fn open(archive: Arc<Archive>, config: RecordConfig) -> Result<Recorder, RecordError> {
        let segments = archive.segments()?;
        recover(&archive, &segments)?;
        let next = segments.last().map_or(1, |n| n + 1);
        let stats = Arc::new(RecorderStats::default());
        let shards = Arc::new(Shards::new(
            SHARDS,
            QueueLimit {
                tapes: config.queue as u64,
                bytes: config.queue_bytes,
                refuse: config.durability == Durability::Batched,
            },
        ));
        let priority = Arc::new(WriterPriority::new(config.durability));
        let mut writer = Writer {
            priority: priority.clone(),
            current: Segment::create(&archive, next)?,
            sealer: Sealer::new()?,
            glue: Vec::new(),
            out: Vec::new(),
            archive: archive.clone(),
            config: config.clone(),
            known: HashMap::new(),
            stats: stats.clone(),
            policies: HashMap::new(),
            shards: shards.clone(),
        };
        if let Err(e) = writer.sweep() {
            tracing::warn!(error = %e, "recording retention failed");
        }
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("hearth-recorder".into())
            .spawn(move || writer.run(rx))?;
        Ok(Recorder {
            shards,
            tx,
            closed: AtomicBool::new(false),
            writer: thread.thread().clone(),
            archive,
            durability: config.durability,
            max_tenant_bytes: config.max_tenant_bytes,
            stats,
            thread: Mutex::new(Some(thread)),
            priority,
        })
    }

    pub fn archive(&self) -> &Arc<Archive> {
        &self.archive
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.stats
    }

    /// Room one tenant's tapes may take.
    pub fn max_tenant_bytes(&self) -> u64 {
        self.max_tenant_bytes
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Tapes handed over since this recorder opened (written, waiting, or
    /// lost to a failed write; not those refused as `Overloaded`).
    pub fn handed(&self) -> u64 {
        self.shards.handed()
    }

    /// Hands a tape to the writer. In batched mode this never waits (a
    /// full queue drops the tape, counted); in sync mode it returns once
    /// the tape is durable (or failed to be).
    pub async fn record(&self, recording: RecordingRef<'_>) -> Result<(), RecordError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(RecordError::Closed);
        }
        match self.shards.push(recording, &self.stats.queued) {
            Ok(Pushed::Queued) => {}
            // Half full: a writer that drains each flush never gets here
            // (70k tapes/s fill a seventh of the queue per interval).
            Ok(Pushed::Crowded) => self.priority.raise(),
            Err(e) => {
                if matches!(e, RecordError::Overloaded) {
                    self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
        }
        match self.durability {
            Durability::Batched => Ok(()),
            // Every caller waiting at once is written in one go (group
            // commit): the writer takes all shards per wake-up.
            Durability::Sync => self.ask(Job::Flush).await,
        }
    }

    async fn ask(&self, job: impl FnOnce(Ack) -> Job) -> Result<(), RecordError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(RecordError::Closed);
        }
        let (ack, done) = oneshot::channel();
        self.tx.send(job(ack)).map_err(|_| RecordError::Closed)?;
        self.writer.unpark();
        done.await
            .map_err(|_| RecordError::Closed)?
            .map_err(RecordError::Write)
    }

    /// Waits until every tape handed over so far is written and indexed.
    pub async fn flush(&self) -> Result<(), RecordError> {
        self.ask(Job::Flush).await
    }

    /// Runs retention now.
    pub async fn sweep(&self) -> Result<(), RecordError> {
        self.ask(Job::Sweep).await
    }

    /// Writes what is pending and stops the writer.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        let _ = self.tx.send(Job::Close);
        self.writer.unpark();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.close();
    }
}

/// What one turn of the writer was asked.
#[derive(Default)]
struct Asked {
    acks: Vec<Ack>,
    sweep: Option<Ack>,
    close: bool,
}

impl Asked {
    fn take(&mut self, job: Job) {
        match job {
            Job::Close => self.close = true,
            Job::Flush(ack) => self.acks.push(ack),
            Job::Sweep(ack) => self.sweep = Some(ack),
        }
    }
}

/// Repairs the archive after a crash: cuts a torn tail off the newest
/// segment, and indexes whole blocks the index missed — at the newest
/// segment's end (a crash between sync and commit), or in any segment with
/// no rows at all (an index lost or from an older layout; retention never
/// leaves a segment without rows on disk).
fn recover(archive: &Archive, segments: &[u64]) -> Result<(), RecordError> {
    let store = archive.store();
    for (i, &n) in segments.iter().enumerate() {
        let newest = i + 1 == segments.len();
        let indexed = store.last_indexed_offset(n)?;
        if !newest && indexed.is_some() {
            continue;
        }
        let path = archive.segment_path(n);
        let scan = segment::scan(&path)?;
        if newest && scan.valid_end < scan.file_len {
            tracing::warn!(
                segment = %path.display(),
                cut = scan.file_len - scan.valid_end,
                "a recording segment ends in a torn write (a crash mid-write); cutting it off"
            );
            let file = OpenOptions::new().write(true).open(&path)?;
            if scan.valid_end == 0 {
                file.set_len(0)?;
                (&file).write_all(SEGMENT_MAGIC)?;
            } else {
                file.set_len(scan.valid_end)?;
            }
            file.sync_all()?;
            store.unindex_segment(n, scan.valid_end)?;
        }
        let mut rows = Vec::new();
        let mut blobs = Vec::new();
        for (offset, raw) in scan.blocks {
            if indexed.is_some_and(|i| offset <= i) {
                continue;
            }
            let body = match archive.open_block(&raw.tenant, &raw.sealed) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(offset, error = %e, "skipping an unreadable recording block");
                    continue;
                }
            };
            let summaries = match summarize(body.tapes.iter().map(|s| &s.recording)) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(offset, error = %e, "skipping a recording block with a bad tape");
                    continue;
                }
            };
            rows.extend(
                summaries
                    .iter()
                    .map(|(f, s)| s.row(&raw.tenant, f, n, offset)),
            );
            blobs.extend(body.blobs.iter().map(|(h, _)| BlobEntry {
                tenant: raw.tenant.clone(),
                hash: hex::encode(h),
                segment: n,
                offset,
            }));
        }
        if !rows.is_empty() {
            let tapes: u32 = rows.iter().map(|r| r.count).sum();
            tracing::info!(segment = n, tapes, "indexed tapes the index did not know");
        }
        store.index_tapes(&rows, &blobs, None)?;
    }
    Ok(())
}

struct Segment {
    n: u64,
    file: File,
    len: u64,
    opened: Instant,
}

impl Segment {
    fn create(archive: &Archive, n: u64) -> Result<Segment, RecordError> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(archive.segment_path(n))?;
        file.write_all(SEGMENT_MAGIC)?;
        file.sync_all()?;
        Ok(Segment {
            n,
            file,
            len: SEGMENT_MAGIC.len() as u64,
            opened: Instant::now(),
        })
    }
}

struct Writer {
    archive: Arc<Archive>,
    config: RecordConfig,
    current: Segment,
    shards: Arc<Shards>,
    /// Buffers kept from one flush to the next: the counts and lengths
    /// between a block's tapes and payloads, the sealer's, and the blocks
    /// to append.
    sealer: Sealer,
    glue: Vec<u8>,
    out: Vec<u8>,
    /// Payloads already in the current segment, per tenant.
    known: HashMap<String, HashSet<Hash>>,
    stats: Arc<RecorderStats>,
    /// Retention settings of functions, per sweep.
    policies: HashMap<(String, String), RecordPolicy>,
    priority: Arc<WriterPriority>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
        self.priority.lower();
        let mut last_sweep = Instant::now();
        loop {
            let mut asked = Asked::default();
            match self.config.durability {
                // Batched: sleep one interval, then take everything pending.
                // Invocations never wake this thread (a futex wake per
                // invocation cost more than writing the tape); a flush,
                // sweep or close unparks it.
                Durability::Batched => std::thread::park_timeout(self.config.flush_interval),
                // Sync: a caller is waiting; wake for it, then take what
                // else is pending with it (group commit).
                Durability::Sync => {
                    let wait = self
                        .config
                        .sweep_interval
                        .saturating_sub(last_sweep.elapsed());
                    match rx.recv_timeout(wait) {
                        Ok(job) => asked.take(job),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => asked.close = true,
                    }
                }
            }
            while !asked.close && asked.sweep.is_none() {
                match rx.try_recv() {
                    Ok(job) => asked.take(job),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => asked.close = true,
                }
            }
            // Taken after the jobs: a caller's tape is in a shard before
            // its flush job is sent.
            let pending = self.shards.take();
            let (count, bytes) = pending
                .iter()
                .fold((0, 0), |(c, b), p| (c + p.published.0, b + p.published.1));
            let result = self.write(&pending, None).map_err(|e| {
                tracing::error!(error = %e, "writing tapes failed");
                e.to_string()
            });
            self.shards.recycle(pending);
            let (queued, queued_bytes) = self.stats.queued.remove(count, bytes);
            if self.priority.raised.load(Ordering::Relaxed)
                && queued < self.config.queue as u64 / 32
                && queued_bytes < self.config.queue_bytes / 32
            {
                self.priority.lower();
            }
            for ack in asked.acks {
                let _ = ack.send(result.clone());
            }
            if let Some(ack) = asked.sweep {
                let r = self.sweep().map_err(|e| e.to_string());
                last_sweep = Instant::now();
                let _ = ack.send(r);
            } else if last_sweep.elapsed() >= self.config.sweep_interval {
                self.sweep_logged();
                last_sweep = Instant::now();
            }
            if asked.close {
                return;
            }
        }
    }

    /// Seals `pending` into one block per tenant, appends, syncs, and
    /// indexes a row per block and function (in the same transaction
    /// forgetting segment `retire`, whose tapes these are, when retention
    /// moves them forward).
    fn write(&mut self, pending: &[Pending], retire: Option<u64>) -> Result<(), RecordError> {
        let mut by_tenant: BTreeMap<&str, Vec<&TenantTapes>> = BTreeMap::new();
        for p in pending {
            for (tenant, tapes) in p.tenants.iter().filter(|(_, t)| t.count > 0) {
                by_tenant.entry(tenant).or_default().push(tapes);
            }
        }
        if by_tenant.is_empty() && retire.is_none() {
            return Ok(());
        }
        let n = self.current.n;
        self.out.clear();
        let mut rows = Vec::new();
        let mut blobs = Vec::new();
        let mut added: Vec<(String, Hash)> = Vec::new();
        let mut count = 0;
        for (tenant, parts) in by_tenant {
            let offset = self.current.len + self.out.len() as u64;
            let known = self.known.entry(tenant.to_string()).or_default();
            let mut summaries: HashMap<&str, Summary> = HashMap::new();
            let mut new_blobs: Vec<&(Hash, Vec<u8>)> = Vec::new();
            for part in &parts {
                count += part.count;
                for (f, s) in &part.functions {
                    summaries.entry(f).and_modify(|m| m.merge(s)).or_insert(*s);
                }
                for blob in &part.blobs {
                    if !known.contains(&blob.0) && !new_blobs.iter().any(|b| b.0 == blob.0) {
                        new_blobs.push(blob);
                    }
                }
            }
            for (hash, _) in &new_blobs {
                blobs.push(BlobEntry {
                    tenant: tenant.to_string(),
                    hash: hex::encode(hash),
                    segment: n,
                    offset,
                });
                added.push((tenant.to_string(), *hash));
            }
            rows.extend(summaries.iter().map(|(f, s)| s.row(tenant, f, n, offset)));
            let body = block_body(&parts, &new_blobs, &mut self.glue)?;
            self.archive
                .seal_into(&mut self.sealer, tenant, &body, &mut self.out)?;
        }
        let bytes = &self.out;
        if let Err(e) = self
            .current
            .file
            .write_all(bytes)
            .and_then(|()| self.current.file.sync_data())
        {
            // Never leave a half block for the next append to follow.
            let _ = self.current.file.set_len(self.current.len);
            return Err(e.into());
        }
        self.current.len += bytes.len() as u64;
        for (tenant, hash) in added {
            self.known.entry(tenant).or_default().insert(hash);
        }
        self.archive.store().index_tapes(&rows, &blobs, retire)?;
        self.stats.tapes.fetch_add(count, Ordering::Relaxed);
        self.stats
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if self.current.len >= self.config.segment_bytes
            || self.current.opened.elapsed() >= self.config.segment_age
        {
            self.rotate()?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), RecordError> {
        self.current = Segment::create(&self.archive, self.current.n + 1)?;
        self.known.clear();
        Ok(())
    }
}

/// The body of a block holding `parts`' tapes and `blobs`, as pieces
/// whose concatenation is postcard's encoding of a
/// [`BlockBody`](crate::segment::BlockBody): the tapes where the
/// invocations encoded them, the payloads where they are, and the few
/// bytes between them (counts and lengths) in `glue`.
fn block_body<'a>(
    parts: &[&'a TenantTapes],
    blobs: &[&'a (Hash, Vec<u8>)],
    glue: &'a mut Vec<u8>,
) -> Result<Vec<&'a [u8]>, RecordError> {
    let encode = |e: postcard::Error| RecordError::Corrupt(format!("cannot encode a block: {e}"));
    glue.clear();
    let tapes: usize = parts.iter().map(|p| p.count as usize).sum();
    append(&tapes, glue).map_err(encode)?;
    let tapes_end = glue.len();
    append(&blobs.len(), glue).map_err(encode)?;
    // Each payload's hash and length, as postcard writes a `(Hash, Vec<u8>)`.
    let mut heads = Vec::with_capacity(blobs.len());
    for (hash, bytes) in blobs {
        let start = glue.len();
        append(hash, glue).map_err(encode)?;
        append(&bytes.len(), glue).map_err(encode)?;
        heads.push(start..glue.len());
    }
    let glue: &'a [u8] = glue;
    let mut pieces = Vec::with_capacity(parts.len() + 2 + 2 * blobs.len());
    pieces.push(&glue[..tapes_end]);
    pieces.extend(parts.iter().map(|p| &p.tapes[..]));
    pieces.push(&glue[tapes_end..heads.first().map_or(glue.len(), |h| h.start)]);
    for (head, (_, bytes)) in heads.into_iter().zip(blobs) {
        pieces.push(&glue[head]);
        pieces.push(bytes);
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{Recording, Stored};
    use crate::segment::BlockBody;

    fn tape(id: u128, function: &str, body: Vec<u8>) -> Recording {
        Recording {
            id: format!("{id:032x}"),
            tenant: "t".into(),
            function: function.into(),
            version: 3,
            artifact: "ab".into(),
            tier: hearth_core::Tier::Wasm,
            started_ms: 1000 + id as i64,
            duration_us: 7,
            request: hearth_core::Request {
                body: body.into(),
                ..Default::default()
            },
            tape: Default::default(),
            outcome: crate::Outcome::Error {
                kind: "trap".into(),
                status: 500,
                message: "x".into(),
            },
        }
    }

    /// The writer's shortcut must be byte for byte what decoding expects.
    #[test]
    fn assembled_block_is_postcard_of_the_block_body() {
        let big = vec![7u8; crate::BLOB_MIN_BYTES];
        let tapes = [
            tape(1, "f", b"a".to_vec()),
            tape(2, "g", big),
            tape(3, "f", vec![]),
        ];
        let (mut a, mut b) = (Pending::default(), Pending::default());
        a.push(tapes[0].borrowed()).unwrap();
        b.push(tapes[1].borrowed()).unwrap();
        b.push(tapes[2].borrowed()).unwrap();
        let parts: Vec<TenantTapes> = [a, b]
            .into_iter()
            .map(|mut p| p.tenants.remove("t").unwrap())
            .collect();
        let blobs: Vec<_> = parts.iter().flat_map(|p| &p.blobs).collect();
        let mut glue = b"stale".to_vec();
        let plain = block_body(&parts.iter().collect::<Vec<_>>(), &blobs, &mut glue)
            .unwrap()
            .concat();

        let mut expected = BlockBody::default();
        for t in &tapes {
            let (stored, payloads) = Stored::split(t.clone());
            expected.tapes.push(stored);
            expected.blobs.extend(payloads);
        }
        assert_eq!(plain, postcard::to_allocvec(&expected).unwrap());
        let f = parts[0].functions["f"];
        let mut both = f;
        both.merge(&parts[1].functions["f"]);
        let row = both.row("t", "f", 1, 8);
        assert_eq!((row.count, row.errors), (2, 2));
        assert_eq!(row.first_id, format!("{:032x}", 1));
        assert_eq!(row.last_id, format!("{:032x}", 3));
    }
}
