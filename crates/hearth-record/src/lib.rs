//! Always-on recording (SESAME '23, "Always-On Recording"): every
//! invocation's tape — request, each host call with its answer, response —
//! kept cheaply enough to leave on, and readable only by its tenant.
//!
//! ```text
//! invocation ──Recording──▶ postcard, into a shard ──▶ writer thread
//!                                                      │ takes the shards each flush interval
//!                                                      │ one block per tenant: zstd → ChaCha20-Poly1305
//!                                                      ▼
//!                        segments/NNNN.seg (append, crc32 per block)
//!                        + index rows in the store: one per block and function
//!                          (tape_blocks), one per large payload (tape_blobs)
//! ```
//!
//! Reading goes through [`Archive`]: index rows → blocks → decrypt → tapes.
//! Replay itself (running a tape again) is the node's job; this crate keeps
//! tapes and compares outcomes ([`diff`]).

mod archive;
pub mod diff;
mod encode;
mod keys;
mod pending;
mod priority;
#[cfg(test)]
mod proptests;
mod recording;
mod segment;
pub mod view;
mod writer;

pub use archive::{Archive, trace_of};
pub use pending::Queued;
pub use recording::{
    BLOB_MIN_BYTES, BodyDigest, ImportLimits, Outcome, OutcomeRef, Recording, RecordingRef,
    Streamed,
};
pub use writer::{Durability, RecordConfig, Recorder, RecorderStats};

use displaydoc::Display;
use thiserror::Error;

#[derive(Debug, Display, Error)]
pub enum RecordError {
    /// no recording {0} (it may have expired, or belong to someone else)
    NotFound(String),
    /// that recording has expired
    Expired,
    /// recording data is damaged: {0}
    Corrupt(String),
    /// recording {0} was in a block of the node's recordings that is damaged on disk, and is lost (the node's other tapes are unaffected)
    Damaged(String),
    /// {0}
    BadTape(String),
    /// the recorder is overloaded; this tape was dropped
    Overloaded,
    /// the recorder is shut down
    Closed,
    /// writing tapes failed: {0}
    Write(String),
    /// recording I/O failed: {0}
    Io(#[from] std::io::Error),
    /// recording index failed: {0}
    Store(#[from] hearth_store::StoreError),
}
