//! How a gateway tells a node which invocation it forwards, and whether
//! this is the retry: the `Hearth-Attempt` header, `<id>.<n>.<mac>`.
//!
//! The id is the gateway's, the same on both attempts, so the node running
//! the retry finds what the first attempt journaled (see
//! `HostCtx::journaling`). The header is signed with a key derived from
//! the cluster's admin token (the gateway's own, the one nodes join with):
//! a client cannot name another invocation's id to be served its journal,
//! and a node ignores the header from anyone but its gateway.

use hearth_core::GatewayAttempt;
use hearth_core::InvocationId;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub const HEADER: &str = "hearth-attempt";

/// The key forwarded invocations are signed with.
#[derive(Clone)]
pub struct AttemptKey([u8; 32]);

impl std::fmt::Debug for AttemptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AttemptKey(..)")
    }
}

impl AttemptKey {
    /// Derived from the cluster's admin token, never the token itself.
    pub fn from_token(token: &str) -> AttemptKey {
        let mut h = Sha256::new();
        h.update(b"hearth attempt key\0");
        h.update(token.trim().as_bytes());
        AttemptKey(h.finalize().into())
    }

    fn mac(&self, message: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(message.as_bytes());
        mac
    }

    /// The header value for `attempt`.
    pub fn sign(&self, attempt: GatewayAttempt) -> String {
        let n = match (attempt.queued, attempt.retry) {
            (false, false) => 1,
            (false, true) => 2,
            (true, false) => 3,
            (true, true) => 4,
        };
        let message = format!("{}.{n}", attempt.id);
        let tag = self.mac(&message).finalize().into_bytes();
        format!("{message}.{}", hex::encode(tag))
    }

    /// The attempt a header names, if this key signed it.
    pub fn verify(&self, value: &str) -> Result<GatewayAttempt, String> {
        let bad = || format!("{HEADER} {value:?} is not one this cluster's gateway signed");
        let (message, tag) = value.rsplit_once('.').ok_or_else(bad)?;
        let tag = hex::decode(tag).map_err(|_| bad())?;
        self.mac(message).verify_slice(&tag).map_err(|_| bad())?;
        let (id, n) = message.split_once('.').ok_or_else(bad)?;
        let id = uuid::Uuid::parse_str(id).map_err(|_| bad())?;
        let (queued, retry) = match n {
            "1" => (false, false),
            "2" => (false, true),
            "3" => (true, false),
            "4" => (true, true),
            _ => return Err(bad()),
        };
        Ok(GatewayAttempt {
            id: InvocationId(id),
            retry,
            queued,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_attempts_verify_and_anything_else_does_not() {
        let key = AttemptKey::from_token("cluster-token");
        let first = GatewayAttempt {
            id: InvocationId::new(),
            retry: false,
            queued: false,
        };
        let header = key.sign(first);
        let back = key.verify(&header).unwrap();
        assert_eq!((back.id, back.retry), (first.id, false));
        let retry = key
            .verify(&key.sign(GatewayAttempt {
                retry: true,
                ..first
            }))
            .unwrap();
        assert!(retry.retry);
        let queued = key
            .verify(&key.sign(GatewayAttempt {
                queued: true,
                ..first
            }))
            .unwrap();
        assert!(queued.queued && !queued.retry);
        assert!(
            key.verify(&header.replacen(".1.", ".3.", 1)).is_err(),
            "an HTTP attempt turned into a queued one"
        );

        let other = AttemptKey::from_token("another cluster");
        assert!(other.verify(&header).is_err(), "another key");
        let forged = header.replacen(".1.", ".2.", 1);
        assert!(
            key.verify(&forged).is_err(),
            "a first attempt turned into a retry"
        );
        let other_id = format!("{}{}", InvocationId::new(), &header[32..]);
        assert!(key.verify(&other_id).is_err(), "another invocation's id");
        for junk in ["", "x", "a.b.c", &header[..header.len() - 2]] {
            assert!(key.verify(junk).is_err(), "{junk:?}");
        }
    }
}
