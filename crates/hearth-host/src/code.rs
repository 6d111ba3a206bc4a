//! A version's code as an engine reads it: by content hash, from wherever
//! the node keeps artifacts. Engines depend on this seam, not on the
//! store: they read an artifact only when they have nothing of their own
//! cached for the version (a compiled module, bytecode, unpacked files).

use std::path::Path;

use hearth_store::{ArtifactStore, StoreError};

/// Where an engine reads artifacts.
pub trait Artifacts: Send + Sync {
    /// The artifact named by `hash` (sha256, hex), whole.
    fn read(&self, hash: &str) -> Result<Vec<u8>, StoreError>;
}

/// Code every member of a cluster can reach by hash: a deploy publishes
/// its artifact there before its version names it, and a node fetches
/// what it does not have (checking the bytes against the hash before
/// keeping them). The cluster's store is one (`hearth-cluster`'s
/// `SharedArtifacts`); a node alone has none.
#[async_trait::async_trait]
pub trait ArtifactSource: Send + Sync + 'static {
    async fn fetch(&self, hash: &str) -> Result<Vec<u8>, String>;
    async fn publish(&self, hash: &str, bytes: bytes::Bytes) -> Result<(), String>;
}

impl Artifacts for ArtifactStore {
    fn read(&self, hash: &str) -> Result<Vec<u8>, StoreError> {
        self.get(hash)
    }
}

/// The content hash that names an artifact (sha256, hex): an engine
/// names what it caches by it.
pub fn content_hash(bytes: &[u8]) -> String {
    hearth_store::sha256_hex(bytes)
}

/// Writes `bytes` to `dest` whole or not at all (a temporary file in
/// `tmp_dir`, synced, then renamed), as artifacts are written: for an
/// engine's own cache.
pub fn write_whole(tmp_dir: &Path, dest: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    hearth_store::write_atomically(tmp_dir, dest, bytes)
}
