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
//!
//! Here: the [`Recorder`] the node holds and its settings. The writer
//! thread is `thread.rs`, the repair at open `recovery.rs`, and what the
//! writer keeps and drops `retention.rs`.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::RecordError;
use crate::archive::Archive;
use crate::pending::{Pushed, QueueLimit, Queued, Shards};
use crate::priority::WriterPriority;
use crate::recording::RecordingRef;

mod recovery;
mod retention;
mod thread;

use recovery::recover;
use thread::Writer;

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
        let mut writer = Writer::new(
            archive.clone(),
            config.clone(),
            next,
            shards.clone(),
            stats.clone(),
            priority.clone(),
        )?;
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
