//! [`Archive`]: the segment directory, its keys and its index — reading
//! tapes back, and sealing blocks for the writer.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hearth_store::{Store, TapeEntry, TapeQuery};

use crate::RecordError;
use crate::keys::Keys;
use crate::recording::{Hash, Recording};
use crate::segment::{self, BlockBody};

/// zstd level for blocks: tapes are small and repetitive, and level 3
/// already finds most of what there is while costing little CPU.
const ZSTD_LEVEL: i32 = 3;

pub struct Archive {
    dir: PathBuf,
    keys: Keys,
    store: Arc<dyn Store>,
}

impl Archive {
    /// The archive in `dir` (made if missing), indexed in `store`.
    pub fn open(dir: &Path, store: Arc<dyn Store>) -> Result<Archive, RecordError> {
        std::fs::create_dir_all(dir.join("segments"))?;
        let keys = Keys::open(&dir.join("master.key"))?;
        Ok(Archive {
            dir: dir.to_path_buf(),
            keys,
            store,
        })
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
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

    pub(crate) fn seal(&self, tenant: &str, body: &BlockBody) -> Result<Vec<u8>, RecordError> {
        // Sized up front: growing a vector of thousands of tapes by
        // doubling was most of the writer's copying.
        let guess =
            body.tapes.len() * 512 + body.blobs.iter().map(|(_, b)| b.len() + 40).sum::<usize>();
        let plain = postcard::to_extend(body, Vec::with_capacity(guess))
            .map_err(|e| RecordError::Corrupt(format!("cannot encode a block: {e}")))?;
        let packed = zstd::bulk::compress(&plain, ZSTD_LEVEL)?;
        Ok(segment::frame(tenant, &self.keys.seal(tenant, &packed)))
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
        self.open_block(&raw.tenant, &raw.sealed)
    }

    pub(crate) fn open_block(&self, tenant: &str, sealed: &[u8]) -> Result<BlockBody, RecordError> {
        let packed = self.keys.open_sealed(tenant, sealed)?;
        let plain = zstd::stream::decode_all(&packed[..])?;
        postcard::from_bytes(&plain)
            .map_err(|e| RecordError::Corrupt(format!("a block does not decode: {e}")))
    }

    /// Lists `tenant`'s tapes.
    pub fn list(&self, tenant: &str, query: &TapeQuery) -> Result<Vec<TapeEntry>, RecordError> {
        Ok(self.store.list_tapes(tenant, query)?)
    }

    /// Reads one of `tenant`'s tapes; another tenant's id is `NotFound`.
    pub fn read(&self, tenant: &str, id: &str) -> Result<Recording, RecordError> {
        let entry = self
            .store
            .find_tape(tenant, id)?
            .ok_or_else(|| RecordError::NotFound(id.to_string()))?;
        self.read_entry(&entry)
    }

    pub(crate) fn read_entry(&self, entry: &TapeEntry) -> Result<Recording, RecordError> {
        let mut body = self.read_body(&entry.tenant, entry.segment, entry.offset)?;
        self.take_from(&mut body, entry)
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

    /// Reads many tapes, decoding each block once (a block holds every tape
    /// of a flush interval): for replaying traffic. Tapes that expired
    /// since they were listed are left out.
    pub fn read_many(&self, entries: &[TapeEntry]) -> Result<Vec<Recording>, RecordError> {
        let mut out = Vec::with_capacity(entries.len());
        let mut block: Option<((u64, u64), BlockBody)> = None;
        for e in entries {
            let at = (e.segment, e.offset);
            if block.as_ref().is_none_or(|(k, _)| *k != at) {
                match self.read_body(&e.tenant, e.segment, e.offset) {
                    Ok(b) => block = Some((at, b)),
                    Err(RecordError::Expired) => continue,
                    Err(err) => return Err(err),
                }
            }
            let (_, body) = block.as_mut().expect("just read");
            out.push(self.take_from(body, e)?);
        }
        Ok(out)
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
            .store
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

/// The index row of a tape written at (`segment`, `offset`).
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
