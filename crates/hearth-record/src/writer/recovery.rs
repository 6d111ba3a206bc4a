//! Repair at open, after a crash (see the order of writes in `writer.rs`).

use std::fs::OpenOptions;
use std::io::Write;

use hearth_store::BlobEntry;

use crate::RecordError;
use crate::archive::Archive;
use crate::pending::summarize;
use crate::segment::{self, SEGMENT_MAGIC};

/// Repairs the archive after a crash: cuts a torn tail off the newest
/// segment, and indexes whole blocks the index missed — at the newest
/// segment's end (a crash between sync and commit), or in any segment with
/// no rows at all (an index lost or from an older layout; retention never
/// leaves a segment without rows on disk).
pub(super) fn recover(archive: &Archive, segments: &[u64]) -> Result<(), RecordError> {
    let store = archive.index();
    for (i, &n) in segments.iter().enumerate() {
        let newest = i + 1 == segments.len();
        let indexed = store.last_indexed_offset(n)?;
        if !newest && indexed.is_some() {
            continue;
        }
        let path = archive.segment_path(n);
        let scan = segment::scan(&path)?;
        for offset in &scan.damaged {
            tracing::warn!(
                segment = %path.display(),
                offset,
                "a recording segment has a damaged block between whole ones; its tapes are lost, \
                 the blocks after it are kept"
            );
        }
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
            let body = match archive.open_block(&raw) {
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
