//! A tenant's secrets as the store keeps them: sealed by the node before
//! they arrive (the store never sees a value), listed by name.

use serde::{Deserialize, Serialize};

use crate::StoreError;

/// How many secrets one tenant may hold.
pub const MAX_SECRETS_PER_TENANT: u32 = 100;

/// The most bytes a secret's sealed form may take (a 4 KiB value, its
/// nonce and its tag).
pub const MAX_SEALED_SECRET_BYTES: usize = 4096 + 12 + 16;

/// A secret as listed: its name and when it was set, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretInfo {
    pub name: String,
    pub created_ms: i64,
    /// When its value last changed (a rotation).
    pub updated_ms: i64,
}

/// Refuses a sealed value larger than any the node seals.
pub(crate) fn check_sealed(sealed: &[u8]) -> Result<(), StoreError> {
    if sealed.len() > MAX_SEALED_SECRET_BYTES {
        return Err(StoreError::Corrupt(format!(
            "a sealed secret of {} bytes is larger than any the node seals",
            sealed.len()
        )));
    }
    Ok(())
}
