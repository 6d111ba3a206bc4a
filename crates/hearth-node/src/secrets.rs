//! Tenants' secrets: sealed here before they reach the store, opened
//! here when a version that binds them is prepared.
//!
//! Each tenant's key is HKDF-SHA256 of the node's secrets key and the
//! tenant's name, so one tenant's sealed value opens with no other's key;
//! the tenant and the secret's name are also the cipher's associated
//! data, so a sealed value moved to another name or tenant does not open.
//! A single node's key is 32 random bytes in its data directory; a
//! cluster's is derived from the cluster key every member holds, so every
//! member opens what any sealed, and the database alone opens nothing.

use std::collections::BTreeMap;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hearth_core::FunctionSpec;
use hkdf::Hkdf;
use rand::Rng;
use sha2::Sha256;

/// The most bytes a secret's value may have.
pub const MAX_SECRET_BYTES: usize = 4096;

const NONCE_BYTES: usize = 12;

/// Seals and opens tenants' secrets.
pub struct SecretBox {
    master: [u8; 32],
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

impl SecretBox {
    /// A box whose keys derive from `master`.
    pub fn new(master: [u8; 32]) -> SecretBox {
        SecretBox { master }
    }

    /// The box of a Hearth outside a cluster: its key is 32 random bytes
    /// in the file at `path` (mode 0600), made on first start. Losing the
    /// file loses every secret's value (they are set again); the key is
    /// never in the database.
    pub fn in_file(path: &std::path::Path) -> Result<SecretBox, String> {
        match std::fs::read(path) {
            Ok(bytes) => {
                let master = bytes
                    .try_into()
                    .map_err(|_| format!("{} is not a 32-byte key", path.display()))?;
                Ok(SecretBox { master })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut master = [0u8; 32];
                rand::rng().fill_bytes(&mut master);
                // Whole or not at all: half a key would lock every secret away.
                hearth_store::write_secret(path, &master).map_err(|e| e.to_string())?;
                Ok(SecretBox { master })
            }
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// A cluster's box: its key derived from the cluster key, which every
    /// member holds.
    pub fn from_cluster_key(cluster_key: &[u8]) -> SecretBox {
        let mut master = [0u8; 32];
        Hkdf::<Sha256>::new(Some(b"hearth secrets master v1"), cluster_key)
            .expand(b"secrets", &mut master)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        SecretBox { master }
    }

    fn cipher(&self, tenant: &str) -> ChaCha20Poly1305 {
        let mut key = [0u8; 32];
        Hkdf::<Sha256>::new(Some(b"hearth secrets v1"), &self.master)
            .expand(tenant.as_bytes(), &mut key)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        ChaCha20Poly1305::new(Key::from_slice(&key))
    }

    fn aad(tenant: &str, name: &str) -> Vec<u8> {
        [tenant.as_bytes(), b"\0", name.as_bytes()].concat()
    }

    /// `nonce || ciphertext || tag` of `value`, for `tenant`'s `name`.
    pub fn seal(&self, tenant: &str, name: &str, value: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let aad = Self::aad(tenant, name);
        let sealed = self
            .cipher(tenant)
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value,
                    aad: &aad,
                },
            )
            .expect("ChaCha20-Poly1305 encryption does not fail for in-memory input");
        [&nonce[..], &sealed].concat()
    }

    /// The value `sealed` holds, if it is `tenant`'s `name` sealed with
    /// this box's key.
    pub fn open(&self, tenant: &str, name: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_BYTES {
            return None;
        }
        let (nonce, body) = sealed.split_at(NONCE_BYTES);
        let aad = Self::aad(tenant, name);
        self.cipher(tenant)
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: &aad,
                },
            )
            .ok()
    }
}

/// Refuses a value no tier could take as an environment variable.
pub fn check_value(name: &str, value: &[u8]) -> Result<(), String> {
    if value.len() > MAX_SECRET_BYTES {
        return Err(format!(
            "secret {name} is {} bytes; a secret holds at most {MAX_SECRET_BYTES}",
            value.len()
        ));
    }
    if std::str::from_utf8(value).is_err() || value.contains(&0) {
        return Err(format!(
            "secret {name} is not UTF-8 text without NUL: an environment variable cannot hold \
             it (encode binary values, e.g. as base64)"
        ));
    }
    Ok(())
}

/// `spec` with its secrets' `values` added to its environment (what the
/// tiers prepare the version with).
pub(crate) fn with_values(spec: &FunctionSpec, values: BTreeMap<String, String>) -> FunctionSpec {
    let mut spec = spec.clone();
    spec.env.extend(values);
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_as_its_tenants_and_names() {
        let sb = SecretBox::new([7; 32]);
        let sealed = sb.seal("acme", "DB", b"hunter2");
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            sb.open("acme", "DB", &sealed).as_deref(),
            Some(&b"hunter2"[..])
        );
        assert_eq!(sb.open("zeta", "DB", &sealed), None, "another tenant");
        assert_eq!(sb.open("acme", "API", &sealed), None, "another name");
        assert_eq!(SecretBox::new([8; 32]).open("acme", "DB", &sealed), None);
        assert_ne!(
            sealed,
            sb.seal("acme", "DB", b"hunter2"),
            "a nonce each time"
        );

        // Every member of a cluster derives the same box from its key.
        let (a, b) = (
            SecretBox::from_cluster_key(b"k"),
            SecretBox::from_cluster_key(b"k"),
        );
        assert_eq!(
            b.open("acme", "DB", &a.seal("acme", "DB", b"v")).as_deref(),
            Some(&b"v"[..])
        );
        assert_eq!(
            SecretBox::from_cluster_key(b"other").open("acme", "DB", &a.seal("acme", "DB", b"v")),
            None
        );
    }

    #[test]
    fn a_value_is_bounded_text() {
        assert!(check_value("A", b"ok").is_ok());
        assert!(check_value("A", &[b'x'; MAX_SECRET_BYTES + 1]).is_err());
        assert!(check_value("A", b"a\0b").is_err());
        assert!(check_value("A", &[0xff, 0xfe]).is_err());
    }
}
