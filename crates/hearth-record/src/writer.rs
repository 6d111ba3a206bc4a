//! [`Recorder`]: the invocation path hands it a [`Recording`] and moves on;
//! one background thread batches, seals, appends, indexes and expires.
//!
//! Order of writes, which is what makes a crash harmless: block bytes are
//! appended and synced, then their index rows committed. A crash before the
//! sync can leave a torn block at a segment's tail: [`Recorder::open`] cuts
//! it off. A crash between sync and commit leaves whole blocks the index
//! does not name: `open` decodes and indexes them. A segment is
//! self-contained (payloads are deduplicated within it, never across), so
//! retention can delete one without breaking a tape elsewhere.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hearth_core::RecordPolicy;
use hearth_store::{BlobEntry, TapeEntry};
use tokio::sync::oneshot;

use crate::RecordError;
use crate::archive::{Archive, entry_of};
use crate::recording::{Hash, Recording, Stored};
use crate::segment::{self, BlockBody, SEGMENT_MAGIC};

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
    /// Segment files never take more than this; the oldest go first.
    pub max_bytes: u64,
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
    /// Approximate bytes of tapes handed over and not yet written.
    pub queued_bytes: AtomicU64,
}

type Ack = oneshot::Sender<Result<(), String>>;

enum Job {
    /// A tape, its size as counted in `queued_bytes`, and who waits for it.
    Record(Box<Recording>, u64, Option<Ack>),
    /// Write what is queued, then stop.
    Close,
    /// Write everything queued before this, then answer.
    Flush(Ack),
    /// Run retention now, then answer.
    Sweep(Ack),
}

pub struct Recorder {
    /// Shared by every invocation as it is: no lock and no clone per tape.
    tx: SyncSender<Job>,
    closed: AtomicBool,
    archive: Arc<Archive>,
    durability: Durability,
    stats: Arc<RecorderStats>,
    queue_bytes: u64,
    /// The writer, to unpark; and to join, once.
    writer: std::thread::Thread,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// Opens the archive, repairs the newest segment after a crash, and
    /// starts the writer thread.
    pub fn open(archive: Arc<Archive>, config: RecordConfig) -> Result<Recorder, RecordError> {
        let segments = archive.segments()?;
        if let Some(&last) = segments.last() {
            recover(&archive, last)?;
        }
        let next = segments.last().map_or(1, |n| n + 1);
        let stats = Arc::new(RecorderStats::default());
        let mut writer = Writer {
            current: Segment::create(&archive, next)?,
            archive: archive.clone(),
            config: config.clone(),
            known: HashMap::new(),
            stats: stats.clone(),
            policies: HashMap::new(),
        };
        if let Err(e) = writer.sweep() {
            tracing::warn!(error = %e, "recording retention failed");
        }
        let (tx, rx) = mpsc::sync_channel(config.queue);
        let thread = std::thread::Builder::new()
            .name("hearth-recorder".into())
            .spawn(move || writer.run(rx))?;
        Ok(Recorder {
            tx,
            closed: AtomicBool::new(false),
            writer: thread.thread().clone(),
            archive,
            durability: config.durability,
            stats,
            queue_bytes: config.queue_bytes,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub fn archive(&self) -> &Arc<Archive> {
        &self.archive
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.stats
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Hands a tape to the writer. In batched mode this never waits; in
    /// sync mode it returns once the tape is durable (or failed to be).
    pub async fn record(&self, recording: Recording) -> Result<(), RecordError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(RecordError::Closed);
        }
        let size = recording.approx_bytes();
        let queued = self.stats.queued_bytes.fetch_add(size, Ordering::Relaxed);
        match self.durability {
            Durability::Batched => {
                if queued + size > self.queue_bytes {
                    self.stats.queued_bytes.fetch_sub(size, Ordering::Relaxed);
                    self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                    return Err(RecordError::Overloaded);
                }
                match self
                    .tx
                    .try_send(Job::Record(Box::new(recording), size, None))
                {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        self.stats.queued_bytes.fetch_sub(size, Ordering::Relaxed);
                        match e {
                            TrySendError::Full(_) => {
                                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                                Err(RecordError::Overloaded)
                            }
                            TrySendError::Disconnected(_) => Err(RecordError::Closed),
                        }
                    }
                }
            }
            Durability::Sync => {
                let (ack, done) = oneshot::channel();
                let job = Job::Record(Box::new(recording), size, Some(ack));
                // A full queue makes this caller wait, on a blocking thread.
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || tx.send(job))
                    .await
                    .map_err(|_| RecordError::Closed)?
                    .map_err(|_| RecordError::Closed)?;
                done.await
                    .map_err(|_| RecordError::Closed)?
                    .map_err(RecordError::Write)
            }
        }
    }

    async fn ask(&self, job: impl FnOnce(Ack) -> Job) -> Result<(), RecordError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(RecordError::Closed);
        }
        let (ack, done) = oneshot::channel();
        let job = job(ack);
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || tx.send(job))
            .await
            .map_err(|_| RecordError::Closed)?
            .map_err(|_| RecordError::Closed)?;
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

    /// Writes what is queued and stops the writer.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        let _ = self.tx.send(Job::Close);
        self.writer.unpark();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.close();
    }
}

/// Makes the calling thread yield to invocations when the CPU is short: the
/// writer's work can wait a few milliseconds, a request should not.
fn lower_priority() {
    // SAFETY: setpriority on this thread's own id; no memory is touched.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
    if rc != 0 {
        tracing::debug!("could not lower the recorder thread's priority");
    }
}

/// What one turn of the writer gathered.
#[derive(Default)]
struct Gathered {
    batch: Vec<Recording>,
    /// Queued bytes the batch accounts for.
    bytes: u64,
    acks: Vec<Ack>,
    sweep: Option<Ack>,
    close: bool,
}

impl Gathered {
    fn take(&mut self, job: Job) {
        match job {
            Job::Record(r, size, ack) => {
                self.batch.push(*r);
                self.bytes += size;
                self.acks.extend(ack);
            }
            Job::Close => self.close = true,
            Job::Flush(ack) => self.acks.push(ack),
            Job::Sweep(ack) => self.sweep = Some(ack),
        }
    }
}

/// Cuts a torn tail off segment `n` and indexes whole blocks the index
/// missed.
fn recover(archive: &Archive, n: u64) -> Result<(), RecordError> {
    let path = archive.segment_path(n);
    let scan = segment::scan(&path)?;
    let store = archive.store();
    if scan.valid_end < scan.file_len {
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
    let indexed = store.last_indexed_offset(n)?;
    let mut tapes = Vec::new();
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
        tapes.extend(body.tapes.iter().map(|s| entry_of(&s.recording, n, offset)));
        blobs.extend(body.blobs.iter().map(|(h, _)| BlobEntry {
            tenant: raw.tenant.clone(),
            hash: hex::encode(h),
            segment: n,
            offset,
        }));
    }
    if !tapes.is_empty() {
        tracing::info!(
            count = tapes.len(),
            "indexed tapes written just before a crash"
        );
    }
    store.index_tapes(&tapes, &blobs)?;
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
        let mut file = OpenOptions::new()
            .create_new(true)
            .append(true)
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
    /// Payloads already in the current segment, per tenant.
    known: HashMap<String, HashSet<Hash>>,
    stats: Arc<RecorderStats>,
    /// Retention settings of functions, per sweep.
    policies: HashMap<(String, String), RecordPolicy>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
        lower_priority();
        let mut last_sweep = Instant::now();
        loop {
            let mut got = Gathered::default();
            match self.config.durability {
                // Batched: sleep one interval, then take everything queued.
                // Senders never wake this thread (a futex wake per
                // invocation cost more than writing the tape); a flush,
                // sweep or close unparks it.
                Durability::Batched => std::thread::park_timeout(self.config.flush_interval),
                // Sync: a caller is waiting; wake for it, then take what
                // else is queued with it (group commit).
                Durability::Sync => {
                    let wait = self
                        .config
                        .sweep_interval
                        .saturating_sub(last_sweep.elapsed());
                    match rx.recv_timeout(wait) {
                        Ok(job) => got.take(job),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => got.close = true,
                    }
                }
            }
            while !got.close && got.sweep.is_none() {
                match rx.try_recv() {
                    Ok(job) => got.take(job),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => got.close = true,
                }
            }
            let result = self.write(got.batch).map_err(|e| {
                tracing::error!(error = %e, "writing tapes failed");
                e.to_string()
            });
            self.stats
                .queued_bytes
                .fetch_sub(got.bytes, Ordering::Relaxed);
            for ack in got.acks {
                let _ = ack.send(result.clone());
            }
            if let Some(ack) = got.sweep {
                let r = self.sweep().map_err(|e| e.to_string());
                last_sweep = Instant::now();
                let _ = ack.send(r);
            } else if last_sweep.elapsed() >= self.config.sweep_interval {
                self.sweep_logged();
                last_sweep = Instant::now();
            }
            if got.close {
                return;
            }
        }
    }

    /// Seals `batch` into one block per tenant, appends, syncs, indexes.
    fn write(&mut self, batch: Vec<Recording>) -> Result<(), RecordError> {
        if batch.is_empty() {
            return Ok(());
        }
        let count = batch.len() as u64;
        let mut by_tenant: BTreeMap<String, Vec<Recording>> = BTreeMap::new();
        for r in batch {
            by_tenant.entry(r.tenant.clone()).or_default().push(r);
        }
        let n = self.current.n;
        let mut bytes = Vec::new();
        let mut tapes = Vec::new();
        let mut blobs = Vec::new();
        let mut added: Vec<(String, Hash)> = Vec::new();
        for (tenant, recordings) in by_tenant {
            let offset = self.current.len + bytes.len() as u64;
            let known = self.known.entry(tenant.clone()).or_default();
            let mut body = BlockBody::default();
            for r in recordings {
                tapes.push(entry_of(&r, n, offset));
                let (stored, payloads) = Stored::split(r);
                for (hash, data) in payloads {
                    if known.contains(&hash) || body.blobs.iter().any(|(h, _)| *h == hash) {
                        continue;
                    }
                    blobs.push(BlobEntry {
                        tenant: tenant.clone(),
                        hash: hex::encode(hash),
                        segment: n,
                        offset,
                    });
                    added.push((tenant.clone(), hash));
                    body.blobs.push((hash, data));
                }
                body.tapes.push(stored);
            }
            bytes.extend_from_slice(&self.archive.seal(&tenant, &body)?);
        }
        if let Err(e) = self
            .current
            .file
            .write_all(&bytes)
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
        self.archive.store().index_tapes(&tapes, &blobs)?;
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

    fn sweep_logged(&mut self) {
        if let Err(e) = self.sweep() {
            tracing::warn!(error = %e, "recording retention failed");
        }
    }

    /// How long `entry` is kept: its function's setting for its outcome, or
    /// the node's.
    fn keep_for(&mut self, entry: &TapeEntry) -> Duration {
        let key = (entry.tenant.clone(), entry.function.clone());
        let store = self.archive.store().clone();
        let policy = *self.policies.entry(key).or_insert_with(|| {
            store
                .get_version(&entry.tenant, &entry.function, None)
                .ok()
                .flatten()
                .map(|v| v.spec.record)
                .unwrap_or_default()
        });
        let secs = if entry.outcome == "ok" {
            policy.keep_ok_s
        } else {
            policy.keep_errors_s
        };
        secs.map_or(self.config.max_age, Duration::from_secs)
    }

    /// Retention: forget expired tapes; delete a closed segment once
    /// nothing in it is kept, or once it is older than the node's maximum
    /// age (copying forward tapes whose function keeps them longer); then
    /// delete the oldest segments while the total is over the size cap.
    fn sweep(&mut self) -> Result<(), RecordError> {
        self.policies.clear();
        let now = hearth_core::unix_time_ms();
        let store = self.archive.store().clone();
        let closed: Vec<u64> = self
            .archive
            .segments()?
            .into_iter()
            .filter(|&n| n != self.current.n)
            .collect();
        for &n in &closed {
            let entries = store.tapes_in_segment(n)?;
            let (mut kept, mut expired) = (Vec::new(), Vec::new());
            for e in entries {
                let age = Duration::from_millis(now.saturating_sub(e.started_ms).max(0) as u64);
                if age > self.keep_for(&e) {
                    expired.push(e.id);
                } else {
                    kept.push(e);
                }
            }
            let newest = kept.iter().map(|e| e.started_ms).max().unwrap_or(0);
            let segment_expired =
                now.saturating_sub(newest).max(0) as u128 > self.config.max_age.as_millis();
            if !expired.is_empty() {
                self.stats
                    .expired
                    .fetch_add(expired.len() as u64, Ordering::Relaxed);
                store.unindex_tapes(&expired)?;
            }
            if kept.is_empty() {
                self.delete_segment(n)?;
            } else if segment_expired {
                // Only tapes kept longer than the node's default are left:
                // move them to the current segment so this one can go.
                let mut moved = Vec::new();
                for e in &kept {
                    match self.archive.read_entry(e) {
                        Ok(r) => moved.push(r),
                        Err(err) => {
                            tracing::warn!(id = %e.id, error = %err, "cannot carry a tape forward")
                        }
                    }
                }
                self.write(moved)?;
                self.delete_segment(n)?;
            }
        }
        // The size cap is hard: oldest segments go whole.
        let mut remaining: Vec<u64> = self
            .archive
            .segments()?
            .into_iter()
            .filter(|&n| n != self.current.n)
            .collect();
        let archive = self.archive.clone();
        let size = |n: u64| {
            std::fs::metadata(archive.segment_path(n))
                .map(|m| m.len())
                .unwrap_or(0)
        };
        let mut total: u64 = remaining.iter().map(|&n| size(n)).sum::<u64>() + self.current.len;
        while total > self.config.max_bytes && !remaining.is_empty() {
            let n = remaining.remove(0);
            let lost = store.tapes_in_segment(n)?.len();
            tracing::warn!(
                segment = n,
                tapes = lost,
                "recordings are over their size limit; deleting the oldest segment"
            );
            self.stats.expired.fetch_add(lost as u64, Ordering::Relaxed);
            total = total.saturating_sub(size(n));
            self.delete_segment(n)?;
        }
        Ok(())
    }

    fn delete_segment(&mut self, n: u64) -> Result<(), RecordError> {
        // Index first: a crash in between leaves an unindexed file, which
        // the next sweep deletes, never an index row pointing at nothing.
        self.archive.store().unindex_segment(n, 0)?;
        match std::fs::remove_file(self.archive.segment_path(n)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
