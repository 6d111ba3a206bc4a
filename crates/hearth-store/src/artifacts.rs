//! Content-addressed artifact files.
//!
//! ```text
//! <root>/sha256/<hex>          complete artifacts, never rewritten
//! <root>/tmp/<random>          writes in flight; swept at open
//! ```
//! A write lands in `tmp/`, is fsynced, renamed into `sha256/`, and the
//! directory fsynced. Rename is atomic, so a reader sees either no file or
//! the whole file.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::StoreError;

/// The hex sha256 of `bytes`: the name of an artifact.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Immutable files named by the sha256 of their content.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    root: PathBuf,
}

impl ArtifactStore {
    /// Opens (creating if needed) the artifact directory and removes writes
    /// that a crash left behind.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        for dir in ["sha256", "tmp"] {
            let path = root.join(dir);
            fs::create_dir_all(&path).map_err(|e| StoreError::io("create directory", &path, e))?;
        }
        let tmp = root.join("tmp");
        let entries = fs::read_dir(&tmp).map_err(|e| StoreError::io("read directory", &tmp, e))?;
        for entry in entries.flatten() {
            let _ = fs::remove_file(entry.path());
        }
        Ok(ArtifactStore { root })
    }

    pub fn path_of(&self, hash: &str) -> PathBuf {
        self.root.join("sha256").join(hash)
    }

    pub fn contains(&self, hash: &str) -> bool {
        is_hash(hash) && self.path_of(hash).is_file()
    }

    /// Stores `bytes` durably and returns their hash. Idempotent.
    pub fn put(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let hash = sha256_hex(bytes);
        let dest = self.path_of(&hash);
        if dest.is_file() {
            return Ok(hash);
        }
        write_atomically(&self.root.join("tmp"), &dest, bytes)?;
        Ok(hash)
    }

    /// Reads an artifact and checks it still hashes to its name.
    pub fn get(&self, hash: &str) -> Result<Vec<u8>, StoreError> {
        if !is_hash(hash) {
            return Err(StoreError::MissingArtifact(hash.to_string()));
        }
        let path = self.path_of(hash);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::MissingArtifact(hash.to_string()));
            }
            Err(e) => return Err(StoreError::io("read", path, e)),
        };
        let actual = sha256_hex(&bytes);
        if actual != hash {
            return Err(StoreError::CorruptArtifact {
                hash: hash.to_string(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Deletes artifacts no longer in `keep`. Returns how many were removed.
    pub fn retain(&self, keep: &std::collections::HashSet<String>) -> Result<usize, StoreError> {
        let dir = self.root.join("sha256");
        let mut removed = 0;
        for entry in fs::read_dir(&dir).map_err(|e| StoreError::io("read directory", &dir, e))? {
            let entry = entry.map_err(|e| StoreError::io("read directory", &dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name) && fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

fn is_hash(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Writes `bytes` to `dest` so that `dest` is either absent or complete, even
/// across a crash: temp file in `tmp_dir` (same filesystem), fsync, rename,
/// fsync of the destination directory. The file is the owner's alone
/// (tenants' code, compiled or not, is not for other local users).
pub fn write_atomically(tmp_dir: &Path, dest: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    write_atomically_with_mode(tmp_dir, dest, bytes, 0o600)
}

/// [`write_atomically`] for a secret (a token, a key): readable by the
/// owner only, from the moment the file exists.
pub fn write_secret(dest: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    write_atomically_with_mode(dir, dest, bytes, 0o600)
}

fn write_atomically_with_mode(
    tmp_dir: &Path,
    dest: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = tmp_dir.join(format!(
        ".{}.{}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(|e| StoreError::io("create", &tmp, e))?;
        file.write_all(bytes)
            .map_err(|e| StoreError::io("write", &tmp, e))?;
        file.sync_all()
            .map_err(|e| StoreError::io("sync", &tmp, e))?;
        fs::rename(&tmp, dest).map_err(|e| StoreError::io("rename into place", dest, e))?;
        if let Some(parent) = dest.parent() {
            let dir = File::open(parent).map_err(|e| StoreError::io("open", parent, e))?;
            dir.sync_all()
                .map_err(|e| StoreError::io("sync", parent, e))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_then_get_round_trips_and_detects_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path()).unwrap();
        let hash = store.put(b"hello").unwrap();
        assert_eq!(hash, sha256_hex(b"hello"));
        assert_eq!(store.get(&hash).unwrap(), b"hello");
        assert_eq!(store.put(b"hello").unwrap(), hash, "idempotent");

        fs::write(store.path_of(&hash), b"tampered").unwrap();
        assert!(matches!(
            store.get(&hash),
            Err(StoreError::CorruptArtifact { .. })
        ));
        assert!(matches!(
            store.get(&sha256_hex(b"absent")),
            Err(StoreError::MissingArtifact(_))
        ));
        assert!(matches!(
            store.get("../etc/passwd"),
            Err(StoreError::MissingArtifact(_))
        ));
    }

    #[test]
    fn retain_keeps_only_what_is_referenced() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path()).unwrap();
        let keep = store.put(b"kept").unwrap();
        let drop = store.put(b"dropped").unwrap();
        let removed = store.retain(&[keep.clone()].into_iter().collect()).unwrap();
        assert_eq!(removed, 1);
        assert!(store.contains(&keep));
        assert!(!store.contains(&drop));
    }

    #[test]
    fn open_sweeps_abandoned_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path()).unwrap();
        fs::write(dir.path().join("tmp").join("half-written"), b"x").unwrap();
        drop(store);
        ArtifactStore::open(dir.path()).unwrap();
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }
}
