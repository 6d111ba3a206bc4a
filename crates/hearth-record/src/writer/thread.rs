//! The writer thread: each flush interval (or at once, in `sync`
//! durability) it takes the shards, seals one block per tenant, appends
//! the blocks to the current segment and syncs it, then commits their
//! index rows; it rotates segments and runs retention between turns.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;

use hearth_core::RecordPolicy;
use hearth_store::BlobEntry;

use super::{Ack, Durability, Job, RecordConfig, RecorderStats};
use crate::RecordError;
use crate::archive::{Archive, Sealer};
use crate::pending::{Pending, Shards, Summary, TenantTapes, append};
use crate::priority::WriterPriority;
use crate::recording::Hash;
use crate::segment::SEGMENT_MAGIC;

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

pub(super) struct Segment {
    pub(super) n: u64,
    pub(super) file: File,
    pub(super) len: u64,
    pub(super) opened: Instant,
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

pub(super) struct Writer {
    pub(super) archive: Arc<Archive>,
    pub(super) config: RecordConfig,
    pub(super) current: Segment,
    pub(super) shards: Arc<Shards>,
    /// Buffers kept from one flush to the next: the counts and lengths
    /// between a block's tapes and payloads, the sealer's, and the blocks
    /// to append.
    pub(super) sealer: Sealer,
    pub(super) glue: Vec<u8>,
    pub(super) out: Vec<u8>,
    /// Payloads already in the current segment, per tenant.
    pub(super) known: HashMap<String, HashSet<Hash>>,
    pub(super) stats: Arc<RecorderStats>,
    /// Retention settings of functions, per sweep.
    pub(super) policies: HashMap<(String, String), RecordPolicy>,
    pub(super) priority: Arc<WriterPriority>,
}

impl Writer {
    pub(super) fn new(
        archive: Arc<Archive>,
        config: RecordConfig,
        next: u64,
        shards: Arc<Shards>,
        stats: Arc<RecorderStats>,
        priority: Arc<WriterPriority>,
    ) -> Result<Writer, RecordError> {
        Ok(Writer {
            current: Segment::create(&archive, next)?,
            sealer: Sealer::new()?,
            glue: Vec::new(),
            out: Vec::new(),
            archive,
            config,
            known: HashMap::new(),
            stats,
            policies: HashMap::new(),
            shards,
            priority,
        })
    }

    pub(super) fn run(mut self, rx: mpsc::Receiver<Job>) {
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
            let mut pending = self.shards.take();
            let (count, bytes) = pending
                .iter()
                .fold((0, 0), |(c, b), p| (c + p.published.0, b + p.published.1));
            let result = self.write(&mut pending, None).map_err(|e| {
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
    pub(super) fn write(
        &mut self,
        pending: &mut [Pending],
        retire: Option<u64>,
    ) -> Result<(), RecordError> {
        let failed: u64 = pending.iter_mut().map(Pending::settle).sum();
        self.stats.dropped.fetch_add(failed, Ordering::Relaxed);
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
        self.archive.index().index_tapes(&rows, &blobs, retire)?;
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

    pub(super) fn rotate(&mut self) -> Result<(), RecordError> {
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
            streamed: None,
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
        assert_eq!(
            b.tenants["t"].unsplit.len(),
            2,
            "the tape after a large one waits too"
        );
        assert_eq!((a.settle(), b.settle()), (0, 0));
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
