//! [`Archive`]: the segment directory, its keys and its index — reading
//! tapes back, and sealing blocks for the writer.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hearth_core::FunctionVersion;
use hearth_store::{BlockQuery, Store, StoreError, TapeBlock, TapeEntry, TapeIndex, TapeQuery};
use parking_lot::Mutex;

use crate::RecordError;
use crate::keys::Keys;
use crate::recording::{Hash, Recording, Stored};
use crate::segment::{self, BlockBody};

/// zstd level for blocks: tapes are small and repetitive, so level 1
/// (zstd's fast strategy) already finds most of what there is; the writer
/// shares the invocations' cores, and level 3's double-fast matcher was
/// most of its CPU (`bench/RESULTS.md` §6).
const ZSTD_LEVEL: i32 = 1;

/// What sealing blocks reuses from one flush to the next: a zstd context
/// (its tables are over a megabyte), the small pieces of a body gathered
/// into one run, and the compressed bytes. Allocating them afresh each
/// flush cost page faults that showed on every request.
pub(crate) struct Sealer {
    zstd: zstd::bulk::Compressor<'static>,
    gathered: Vec<u8>,
    packed: Vec<u8>,
}

/// A piece of a block's body at least this large is compressed as a zstd
/// frame of its own, from where it lies; smaller ones are copied together
/// and compressed as one. Under load a block's tapes are a few shards'
/// buffers of hundreds of kilobytes each: copying them into one buffer
/// first was 40% of the writer's CPU (`hearth-bench record` under
/// `perf`), a copy of memory another core had just written. A frame
/// starts with no history, so each costs a few bytes of ratio; zstd
/// decodes concatenated frames as the concatenation of their contents.
const OWN_FRAME_BYTES: usize = 64 << 10;

impl Sealer {
    pub(crate) fn new() -> Result<Sealer, RecordError> {
        Ok(Sealer {
            zstd: zstd::bulk::Compressor::new(ZSTD_LEVEL)?,
            gathered: Vec::new(),
            packed: Vec::new(),
        })
    }

    /// Compresses `body` (its pieces back to back) into `packed`.
    fn pack(&mut self, body: &[&[u8]]) -> std::io::Result<()> {
        self.packed.clear();
        self.gathered.clear();
        for piece in body {
            if piece.len() < OWN_FRAME_BYTES {
                self.gathered.extend_from_slice(piece);
                continue;
            }
            append_frame(&mut self.zstd, &self.gathered, &mut self.packed)?;
            self.gathered.clear();
            append_frame(&mut self.zstd, piece, &mut self.packed)?;
        }
        append_frame(&mut self.zstd, &self.gathered, &mut self.packed)
    }
}

/// Appends `src` to `packed` as one zstd frame (nothing if it is empty).
fn append_frame(
    zstd: &mut zstd::bulk::Compressor<'static>,
    src: &[u8],
    packed: &mut Vec<u8>,
) -> std::io::Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    packed.reserve(zstd::zstd_safe::compress_bound(src.len()));
    let end = packed.len() as u64;
    let mut tail = std::io::Cursor::new(packed);
    tail.set_position(end);
    zstd.compress_to_buffer(src, &mut tail).map(drop)
}

/// The registry's async calls, for the writer thread: each is run to
/// its end on the runtime the archive was opened on (or, opened outside
/// any, a small one of its own).
struct Registry {
    store: Arc<dyn Store>,
    runtime: tokio::runtime::Handle,
    /// The runtime of its own, when there was none to share.
    _own: Option<tokio::runtime::Runtime>,
}

impl Registry {
    fn new(store: Arc<dyn Store>) -> Result<Registry, RecordError> {
        let (runtime, own) = match tokio::runtime::Handle::try_current() {
            Ok(handle) => (handle, None),
            Err(_) => {
                let own = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("hearth-record-registry")
                    .enable_all()
                    .build()?;
                (own.handle().clone(), Some(own))
            }
        };
        Ok(Registry {
            store,
            runtime,
            _own: own,
        })
    }

    fn newest_version(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        let ask = || {
            self.runtime
                .block_on(self.store.get_version(tenant, name, None))
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return ask();
        }
        // On a thread that drives the runtime (the sweep as the recorder
        // opens), which must not block on it: a thread of its own waits.
        std::thread::scope(|s| s.spawn(ask).join())
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// A block read for a listing: its tapes (taken out as they are used) and
/// payloads.
type Decoded = (Vec<Option<Stored>>, Vec<(Hash, Vec<u8>)>);

pub struct Archive {
    dir: PathBuf,
    keys: Keys,
    index: Arc<dyn TapeIndex>,
    registry: Registry,
    /// Blocks that failed to read (checksum, decryption, decoding, I/O):
    /// their tapes are lost, and only theirs.
    damaged: Mutex<HashSet<(u64, u64)>>,
}

impl Archive {
    /// The archive in `dir` (made if missing), indexed in `index`; its
    /// retention asks `registry` for functions' settings.
    pub fn open(
        dir: &Path,
        index: Arc<dyn TapeIndex>,
        registry: Arc<dyn Store>,
    ) -> Result<Archive, RecordError> {
        std::fs::create_dir_all(dir.join("segments"))?;
        let keys = Keys::open(&dir.join("master.key"))?;
        Ok(Archive {
            dir: dir.to_path_buf(),
            keys,
            index,
            registry: Registry::new(registry)?,
            damaged: Mutex::default(),
        })
    }

    /// How many blocks were found damaged since the node started.
    pub fn damaged_blocks(&self) -> usize {
        self.damaged.lock().len()
    }

    /// [`read_body`](Self::read_body), with a damaged block noted (and
    /// logged once) and answered `Ok(None)`: a bad block costs its own
    /// tapes, never a listing or a retention pass over others.
    fn read_body_or_damaged(
        &self,
        tenant: &str,
        segment: u64,
        offset: u64,
    ) -> Result<Option<BlockBody>, RecordError> {
        match self.read_body(tenant, segment, offset) {
            Ok(body) => Ok(Some(body)),
            Err(e @ (RecordError::Corrupt(_) | RecordError::Io(_))) => {
                if self.damaged.lock().insert((segment, offset)) {
                    tracing::warn!(
                        segment,
                        offset,
                        "a tape block is damaged and its tapes are lost: {e}"
                    );
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    pub fn index(&self) -> &Arc<dyn TapeIndex> {
        &self.index
    }

    /// The newest version of tenant/name, asked from a thread that is not
    /// the runtime's (the recorder's writer).
    pub(crate) fn newest_version(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        self.registry.newest_version(tenant, name)
    }

    pub(crate) fn segment_path(&self, n: u64) -> PathBuf {
        self.dir.join("segments").join(format!("{n:016x}.seg"))
    }

    /// Segment numbers on disk, oldest first.
    pub(crate) fn segments(&self) -> Result<Vec<u64>, RecordError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(self.dir.join("segments"))? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(n) = name
                .strip_suffix(".seg")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
            {
                out.push(n);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Bytes of segment files on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.segments()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|n| std::fs::metadata(self.segment_path(n)).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Compresses, encrypts and frames a block whose body is `body`'s
    /// pieces back to back, appending the block to `out`.
    pub(crate) fn seal_into(
        &self,
        sealer: &mut Sealer,
        tenant: &str,
        body: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        sealer.pack(body)?;
        segment::frame_into(out, tenant, |out| {
            self.keys.seal_into(tenant, &sealer.packed, out)
        });
        Ok(())
    }

    /// Decrypts and decodes the block at (`segment`, `offset`), which must
    /// belong to `tenant`.
    pub(crate) fn read_body(
        &self,
        tenant: &str,
        segment: u64,
        offset: u64,
    ) -> Result<BlockBody, RecordError> {
        let file = File::open(self.segment_path(segment)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                RecordError::Expired
            } else {
                e.into()
            }
        })?;
        let raw = segment::read_block(&file, offset)?;
        if raw.tenant != tenant {
            return Err(RecordError::Corrupt(
                "the index points at another tenant's block".into(),
            ));
        }
        self.open_block(&raw)
    }

    pub(crate) fn open_block(&self, raw: &segment::RawBlock) -> Result<BlockBody, RecordError> {
        let packed = self.keys.open_sealed(&raw.tenant, &raw.sealed)?;
        let plain = zstd::stream::decode_all(&packed[..])?;
        BlockBody::decode(raw.format, &plain)
            .map_err(|e| RecordError::Corrupt(format!("a block does not decode: {e}")))
    }

    /// Lists `tenant`'s tapes, newest first.
    pub fn list(&self, tenant: &str, query: &TapeQuery) -> Result<Vec<TapeEntry>, RecordError> {
        Ok(self.select(tenant, query)?.0)
    }

    /// The tapes [`list`](Self::list) names, whole: for replaying traffic.
    /// Each block is decoded once however many of its tapes are taken.
    pub fn recordings(
        &self,
        tenant: &str,
        query: &TapeQuery,
    ) -> Result<Vec<Recording>, RecordError> {
        let (entries, mut blocks) = self.select(tenant, query)?;
        let mut out = Vec::with_capacity(entries.len());
        for e in &entries {
            let (tapes, blobs) = blocks
                .get_mut(&(e.segment, e.offset))
                .expect("select keeps the blocks it lists from");
            let at = tapes
                .iter()
                .position(|s| s.as_ref().is_some_and(|s| s.recording.id == e.id))
                .expect("select lists tapes of its blocks");
            let stored = tapes[at].take().expect("just found");
            match stored.join(|hash| self.blob(e, blobs, hash)) {
                Ok(r) => out.push(r),
                // A payload in a damaged block: this tape is lost.
                Err(why @ (RecordError::Corrupt(_) | RecordError::Io(_))) => {
                    tracing::warn!(id = %e.id, "a tape's payload is damaged: {why}")
                }
                Err(other) => return Err(other),
            }
        }
        Ok(out)
    }

    /// Walks `tenant`'s index rows newest first, decoding their blocks,
    /// until no block left can hold a tape newer than the `limit`-th found.
    /// Returns the tapes found and the decoded blocks they are in.
    #[allow(clippy::type_complexity)]
    fn select(
        &self,
        tenant: &str,
        q: &TapeQuery,
    ) -> Result<
        (
            Vec<TapeEntry>,
            HashMap<(u64, u64), (Vec<Option<Stored>>, Vec<(Hash, Vec<u8>)>)>,
        ),
        RecordError,
    > {
        let limit = if q.limit == 0 { 100 } else { q.limit as usize };
        let mut page = BlockQuery {
            function: q.function.clone(),
            errors_only: q.errors_only,
            since_ms: q.since_ms,
            version: q.version,
            before: q.before.clone(),
            after: None,
            limit: 32,
        };
        let mut found: Vec<TapeEntry> = Vec::new();
        let mut blocks: HashMap<(u64, u64), Decoded> = HashMap::new();
        'pages: loop {
            let rows = self.index.list_blocks(tenant, &page)?;
            for row in &rows {
                if found.len() >= limit {
                    found.sort_unstable_by(|a, b| b.id.cmp(&a.id));
                    found.truncate(limit);
                    if row.last_id < found[limit - 1].id {
                        break 'pages;
                    }
                }
                let (tapes, _) = match blocks.entry((row.segment, row.offset)) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        match self.read_body_or_damaged(tenant, row.segment, row.offset) {
                            Ok(Some(b)) => {
                                e.insert((b.tapes.into_iter().map(Some).collect(), b.blobs))
                            }
                            Ok(None) | Err(RecordError::Expired) => continue,
                            Err(e) => return Err(e),
                        }
                    }
                };
                found.extend(
                    tapes
                        .iter()
                        .flatten()
                        .map(|s| &s.recording)
                        .filter(|r| shows(row, r) && matches(q, r))
                        .map(|r| entry_of(r, row.segment, row.offset)),
                );
            }
            match rows.last() {
                Some(last) if rows.len() == page.limit as usize => page.after = Some(last.cursor()),
                _ => break,
            }
        }
        found.sort_unstable_by(|a, b| b.id.cmp(&a.id));
        found.truncate(limit);
        Ok((found, blocks))
    }

    /// Reads one of `tenant`'s tapes; another tenant's id, or an expired
    /// one, is `NotFound`.
    pub fn read(&self, tenant: &str, id: &str) -> Result<Recording, RecordError> {
        let rows = self.index.blocks_holding(tenant, id)?;
        let mut tried = Vec::new();
        let mut damaged = false;
        for row in &rows {
            let key = (row.segment, row.offset);
            if tried.contains(&key) {
                continue;
            }
            tried.push(key);
            let mut body = match self.read_body_or_damaged(tenant, row.segment, row.offset) {
                Ok(Some(b)) => b,
                Ok(None) => {
                    damaged = true;
                    continue;
                }
                Err(RecordError::Expired) => continue,
                Err(e) => return Err(e),
            };
            let Some(at) = body.tapes.iter().position(|s| s.recording.id == id) else {
                continue;
            };
            // Visible through its own function's row of this block.
            let r = &body.tapes[at].recording;
            if !rows
                .iter()
                .any(|x| (x.segment, x.offset) == key && shows(x, r))
            {
                break;
            }
            let entry = entry_of(r, row.segment, row.offset);
            return self.take_from(&mut body, &entry);
        }
        if damaged {
            return Err(RecordError::Damaged(id.to_string()));
        }
        Err(RecordError::NotFound(id.to_string()))
    }

    /// The tapes `rows` still show, whole (retention moving them forward).
    pub(crate) fn read_rows(&self, rows: &[TapeBlock]) -> Result<Vec<Recording>, RecordError> {
        let mut out = Vec::new();
        for row in rows {
            let mut body = match self.read_body_or_damaged(&row.tenant, row.segment, row.offset) {
                Ok(Some(b)) => b,
                Ok(None) | Err(RecordError::Expired) => continue,
                Err(e) => return Err(e),
            };
            let blobs = std::mem::take(&mut body.blobs);
            for stored in body.tapes {
                if shows(row, &stored.recording) {
                    let entry = entry_of(&stored.recording, row.segment, row.offset);
                    out.push(stored.join(|hash| self.blob(&entry, &blobs, hash))?);
                }
            }
        }
        Ok(out)
    }

    /// Takes `entry`'s tape out of its decoded block.
    fn take_from(&self, body: &mut BlockBody, entry: &TapeEntry) -> Result<Recording, RecordError> {
        let at = body
            .tapes
            .iter()
            .position(|s| s.recording.id == entry.id)
            .ok_or_else(|| {
                RecordError::Corrupt(format!("tape {} is not in its block", entry.id))
            })?;
        let stored = body.tapes.swap_remove(at);
        stored.join(|hash| self.blob(entry, &body.blobs, hash))
    }

    /// A payload by hash: in the tape's own block, or in an earlier block of
    /// the same segment (segments are self-contained, see the writer).
    fn blob(
        &self,
        entry: &TapeEntry,
        here: &[(Hash, Vec<u8>)],
        hash: &Hash,
    ) -> Result<Vec<u8>, RecordError> {
        if let Some((_, b)) = here.iter().find(|(h, _)| h == hash) {
            return Ok(b.clone());
        }
        let hex = hex::encode(hash);
        let found = self
            .index
            .find_blob(&entry.tenant, &hex, entry.segment)?
            .ok_or_else(|| RecordError::Corrupt(format!("payload {hex} is missing")))?;
        let body = self.read_body(&entry.tenant, found.segment, found.offset)?;
        body.blobs
            .into_iter()
            .find(|(h, _)| h == hash)
            .map(|(_, b)| b)
            .ok_or_else(|| RecordError::Corrupt(format!("payload {hex} is not in its block")))
    }
}

/// Whether `row` shows `r`: a tape of its function, and not a success
/// whose retention ran out while the block's failures are kept.
fn shows(row: &TapeBlock, r: &Recording) -> bool {
    r.function == row.function && !(row.ok_expired && r.outcome.kind() == "ok")
}

fn matches(q: &TapeQuery, r: &Recording) -> bool {
    (!q.errors_only || r.outcome.kind() != "ok")
        && q.status.is_none_or(|s| s == r.outcome.status())
        && q.since_ms.is_none_or(|s| r.started_ms >= s)
        && q.version.is_none_or(|v| v == r.version)
        && q.min_duration_us.is_none_or(|d| r.duration_us >= d)
        && q.before.as_ref().is_none_or(|b| r.id < *b)
        && q.trace_id.as_ref().is_none_or(|t| *t == trace_of(r))
}

/// The trace a taped invocation was in (`hearth_host::trace::trace_of`).
pub fn trace_of(r: &Recording) -> String {
    match r.id.parse() {
        Ok(id) => hearth_host::trace::trace_of(id, &r.request.headers),
        // Not an id this node made: no trace it began.
        Err(_) => String::new(),
    }
}

/// What a listing shows of a tape in the block at (`segment`, `offset`).
pub(crate) fn entry_of(r: &Recording, segment: u64, offset: u64) -> TapeEntry {
    TapeEntry {
        id: r.id.clone(),
        tenant: r.tenant.clone(),
        function: r.function.clone(),
        version: r.version,
        tier: r.tier.as_str().to_string(),
        started_ms: r.started_ms,
        duration_us: r.duration_us as i64,
        status: r.outcome.status(),
        outcome: r.outcome.kind().to_string(),
        segment,
        offset,
    }
}
