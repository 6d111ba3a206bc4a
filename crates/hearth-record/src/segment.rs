//! Segment files: an 8-byte header, then blocks, append only.
//!
//! ```text
//! segment  = "HRTHSEG1" block*
//! block    = "HRB3" len:u32le crc32:u32le rest        (crc32 of rest)
//! rest     = tenant_len:u16le tenant sealed
//! sealed   = nonce[12] ChaCha20-Poly1305(zstd(postcard(BlockBody)))
//! ```
//!
//! Blocks of earlier formats still read: `HRB1` (before bodies streamed)
//! holds [`StoredV1`], without the streamed bodies' digests; `HRB2`
//! (before host calls were timed) holds [`StoredV2`], without timings.
//!
//! The tenant is in clear so a reader knows which key opens the block; the
//! checksum finds torn or flipped bytes before decryption is attempted, so
//! a crash mid-write is told apart from tampering.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::RecordError;
use crate::recording::{Hash, Stored, StoredV1, StoredV2};

pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"HRTHSEG1";
const BLOCK_MAGIC: &[u8; 4] = b"HRB3";
const BLOCK_MAGIC_V2: &[u8; 4] = b"HRB2";
const BLOCK_MAGIC_V1: &[u8; 4] = b"HRB1";
const HEADER_BYTES: usize = 12;
/// No block is larger: a length past it is damage, not a huge block.
const MAX_BLOCK_BYTES: usize = 1 << 30;

/// What one block holds: one tenant's tapes of one batch, and the large
/// payloads they were the first in their segment to reference.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct BlockBody {
    pub tapes: Vec<Stored>,
    pub blobs: Vec<(Hash, Vec<u8>)>,
}

/// [`BlockBody`] of an earlier format: `S` is how it stored a tape.
#[derive(Deserialize)]
struct BlockBodyOf<S> {
    tapes: Vec<S>,
    blobs: Vec<(Hash, Vec<u8>)>,
}

impl<S: Into<Stored>> BlockBodyOf<S> {
    fn upgrade(self) -> BlockBody {
        BlockBody {
            tapes: self.tapes.into_iter().map(Into::into).collect(),
            blobs: self.blobs,
        }
    }
}

impl BlockBody {
    /// Decodes the plain body of a block of `format` ([`RawBlock::format`]).
    pub(crate) fn decode(format: u8, plain: &[u8]) -> postcard::Result<BlockBody> {
        match format {
            1 => Ok(postcard::from_bytes::<BlockBodyOf<StoredV1>>(plain)?.upgrade()),
            2 => Ok(postcard::from_bytes::<BlockBodyOf<StoredV2>>(plain)?.upgrade()),
            _ => postcard::from_bytes(plain),
        }
    }
}

/// Appends one block to `out`: its header, `tenant`, and the sealed body
/// that `seal` appends after them.
pub(crate) fn frame_into(out: &mut Vec<u8>, tenant: &str, seal: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(BLOCK_MAGIC);
    out.extend_from_slice(&[0; 8]); // length and checksum, once known
    out.extend_from_slice(&(tenant.len() as u16).to_le_bytes());
    out.extend_from_slice(tenant.as_bytes());
    seal(out);
    let rest = start + HEADER_BYTES;
    let len = (out.len() - rest) as u32;
    let crc = crc32fast::hash(&out[rest..]);
    out[start + 4..start + 8].copy_from_slice(&len.to_le_bytes());
    out[start + 8..rest].copy_from_slice(&crc.to_le_bytes());
}

/// A block read back and checked: its format, tenant, sealed body and
/// length.
pub(crate) struct RawBlock {
    /// 1 for `HRB1`, 2 for `HRB2`, 3 for `HRB3`.
    pub format: u8,
    pub tenant: String,
    pub sealed: Vec<u8>,
    pub len: u64,
}

/// Reads the block at `offset`; `Err` says why it is not a whole, intact
/// block (which, at a segment's tail, means a torn write).
pub(crate) fn read_block(file: &File, offset: u64) -> Result<RawBlock, RecordError> {
    let mut header = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut header, offset)
        .map_err(|_| RecordError::Corrupt(format!("no whole block header at byte {offset}")))?;
    let format = match &header[..4] {
        m if m == BLOCK_MAGIC => 3,
        m if m == BLOCK_MAGIC_V2 => 2,
        m if m == BLOCK_MAGIC_V1 => 1,
        _ => {
            return Err(RecordError::Corrupt(format!(
                "no block starts at byte {offset}"
            )));
        }
    };
    let word = |at: usize| {
        u32::from_le_bytes(
            header[at..at + 4]
                .try_into()
                .expect("4 bytes of the header"),
        )
    };
    let (len, crc) = (word(4) as usize, word(8));
    if !(2..=MAX_BLOCK_BYTES).contains(&len) {
        return Err(RecordError::Corrupt(format!(
            "block at byte {offset} has length {len}"
        )));
    }
    let mut rest = vec![0u8; len];
    file.read_exact_at(&mut rest, offset + HEADER_BYTES as u64)
        .map_err(|_| RecordError::Corrupt(format!("block at byte {offset} is cut short")))?;
    if crc32fast::hash(&rest) != crc {
        return Err(RecordError::Corrupt(format!(
            "block at byte {offset} fails its checksum"
        )));
    }
    let tenant_len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
    if 2 + tenant_len > rest.len() {
        return Err(RecordError::Corrupt(format!(
            "block at byte {offset} is malformed"
        )));
    }
    let tenant = String::from_utf8(rest[2..2 + tenant_len].to_vec())
        .map_err(|_| RecordError::Corrupt(format!("block at byte {offset} is malformed")))?;
    let sealed = rest.split_off(2 + tenant_len);
    Ok(RawBlock {
        format,
        tenant,
        sealed,
        len: (HEADER_BYTES + len) as u64,
    })
}

/// Blocks of a segment, in order, as (offset, block).
pub(crate) struct Scan {
    pub blocks: Vec<(u64, RawBlock)>,
    /// Where the intact part ends: a torn tail starts here.
    pub valid_end: u64,
    pub file_len: u64,
    /// Offsets where bytes that are not an intact block lie between intact
    /// ones: damage on disk, not a torn write (which is only ever last).
    pub damaged: Vec<u64>,
}

/// Where the next intact block after a bad one at `bad` starts, if any:
/// the next offset that starts with a block's magic and reads whole.
fn next_intact(file: &File, bad: u64, file_len: u64) -> Option<u64> {
    let mut rest = vec![0u8; (file_len - bad) as usize];
    file.read_exact_at(&mut rest, bad).ok()?;
    (1..rest.len().saturating_sub(HEADER_BYTES))
        .filter(|&i| {
            let m = &rest[i..i + 4];
            m == BLOCK_MAGIC || m == BLOCK_MAGIC_V2 || m == BLOCK_MAGIC_V1
        })
        .map(|i| bad + i as u64)
        .find(|&at| read_block(file, at).is_ok())
}

/// Reads a whole segment. A block that is not intact ends it (a torn
/// tail) unless an intact block follows: then it is damage, noted and
/// passed over, and the blocks after it still count.
pub(crate) fn scan(path: &Path) -> Result<Scan, RecordError> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut magic = [0u8; 8];
    if file.read_exact_at(&mut magic, 0).is_err() || &magic != SEGMENT_MAGIC {
        // A crash between creating the file and writing its header.
        return Ok(Scan {
            blocks: Vec::new(),
            valid_end: 0,
            file_len,
            damaged: Vec::new(),
        });
    }
    let mut offset = SEGMENT_MAGIC.len() as u64;
    let mut blocks = Vec::new();
    let mut damaged = Vec::new();
    while offset < file_len {
        match read_block(&file, offset) {
            Ok(block) => {
                let next = offset + block.len;
                blocks.push((offset, block));
                offset = next;
            }
            Err(_) => match next_intact(&file, offset, file_len) {
                Some(next) => {
                    damaged.push(offset);
                    offset = next;
                }
                None => break,
            },
        }
    }
    Ok(Scan {
        blocks,
        valid_end: offset,
        file_len,
        damaged,
    })
}
