//! Encryption at rest: one key per tenant, derived from the node's master key.
//!
//! The master key is 32 random bytes in `recordings/master.key` (mode 0600),
//! made on first start. A tenant's key is HKDF-SHA256(master, tenant), so
//! a block sealed for one tenant cannot be opened with another's key, and
//! the tenant name is also bound into every block as associated data. Keys
//! are derived, not stored, so there is nothing per tenant to back up; the
//! cost is that forgetting a tenant's tapes means deleting them (there is no
//! per-tenant key to throw away).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hkdf::Hkdf;
use rand::Rng;
use sha2::Sha256;

use crate::RecordError;

const NONCE_BYTES: usize = 12;

pub(crate) struct Keys {
    master: [u8; 32],
    ciphers: Mutex<HashMap<String, Arc<ChaCha20Poly1305>>>,
}

impl Keys {
    /// Reads the master key at `path`, making it first if there is none.
    pub fn open(path: &Path) -> Result<Keys, RecordError> {
        let master = match std::fs::read(path) {
            Ok(bytes) => bytes.try_into().map_err(|_| {
                RecordError::Corrupt(format!("{} is not a 32-byte key", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                rand::rng().fill_bytes(&mut key);
                // Written whole or not at all: half a key would lock every
                // tape away.
                hearth_store::write_secret(path, &key)?;
                key
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Keys {
            master,
            ciphers: Mutex::default(),
        })
    }

    fn cipher(&self, tenant: &str) -> Arc<ChaCha20Poly1305> {
        let mut ciphers = self.ciphers.lock();
        ciphers
            .entry(tenant.to_string())
            .or_insert_with(|| {
                let mut key = [0u8; 32];
                Hkdf::<Sha256>::new(Some(b"hearth tapes v1"), &self.master)
                    .expand(tenant.as_bytes(), &mut key)
                    .expect("32 bytes is a valid HKDF-SHA256 output length");
                Arc::new(ChaCha20Poly1305::new(Key::from_slice(&key)))
            })
            .clone()
    }

    /// Appends `nonce || ciphertext` of `plain` under `tenant`'s key to
    /// `out` (encrypting in place there: no buffer of its own).
    pub fn seal_into(&self, tenant: &str, plain: &[u8], out: &mut Vec<u8>) {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        out.extend_from_slice(&nonce);
        let start = out.len();
        out.extend_from_slice(plain);
        let tag = self
            .cipher(tenant)
            .encrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                tenant.as_bytes(),
                &mut out[start..],
            )
            .expect("ChaCha20-Poly1305 encryption does not fail for in-memory input");
        out.extend_from_slice(&tag);
    }

    pub fn open_sealed(&self, tenant: &str, sealed: &[u8]) -> Result<Vec<u8>, RecordError> {
        if sealed.len() < NONCE_BYTES {
            return Err(RecordError::Corrupt("a sealed block is too short".into()));
        }
        let (nonce, body) = sealed.split_at(NONCE_BYTES);
        self.cipher(tenant)
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: tenant.as_bytes(),
                },
            )
            .map_err(|_| {
                RecordError::Corrupt("a block does not decrypt with its tenant's key".into())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_block_opens_only_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::open(&dir.path().join("master.key")).unwrap();
        let mut sealed = b"before".to_vec();
        keys.seal_into("a", b"secret request", &mut sealed);
        let sealed = sealed.strip_prefix(b"before").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(keys.open_sealed("a", sealed).unwrap(), b"secret request");
        assert!(keys.open_sealed("b", sealed).is_err());

        // The same master key after a restart opens it again.
        let again = Keys::open(&dir.path().join("master.key")).unwrap();
        assert_eq!(again.open_sealed("a", sealed).unwrap(), b"secret request");
        let mode = std::fs::metadata(dir.path().join("master.key")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    }
}
