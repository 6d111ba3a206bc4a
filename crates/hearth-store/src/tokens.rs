//! Tokens: what each may do (its scope), on which of its tenant's
//! functions, and until when. The store keeps a token's SHA-256 and
//! these, never the token itself.

use serde::{Deserialize, Serialize};

use crate::StoreError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Everything, on every tenant: the operator's (tenants, node-wide
    /// figures, metrics, the cluster's members).
    Admin,
    /// Everything on its own tenant's functions: deploy, promote and roll
    /// back, write KV, replay, invoke, read, and manage the tenant's
    /// tokens (none broader than itself).
    Deploy,
    /// Invoke the tenant's private functions, and nothing else.
    Invoke,
    /// Read the tenant's functions, versions, logs, stats and tapes (the
    /// console), and nothing else.
    Read,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Admin => "admin",
            Scope::Deploy => "deploy",
            Scope::Invoke => "invoke",
            Scope::Read => "read",
        }
    }

    /// Whether a token of this scope may make a call that needs `needed`.
    pub fn allows(self, needed: Scope) -> bool {
        match self {
            Scope::Admin => true,
            Scope::Deploy => needed != Scope::Admin,
            Scope::Invoke | Scope::Read => needed == self,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Scope::Admin),
            "deploy" => Ok(Scope::Deploy),
            "invoke" => Ok(Scope::Invoke),
            "read" => Ok(Scope::Read),
            other => Err(format!(
                "no scope {other:?}: a token's scope is admin, deploy, invoke or read"
            )),
        }
    }
}

/// What a new token may do: the grant it is made with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Grant {
    pub scope: Scope,
    /// Only this function of the tenant (none: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// When it stops working, in Unix milliseconds (none: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    /// A label for lists (`ci`, `grafana`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Grant {
    /// A grant of `scope` on every function, for good.
    pub fn of(scope: Scope) -> Grant {
        Grant {
            scope,
            function: None,
            expires_ms: None,
            name: None,
        }
    }

    /// Whether a token with this grant may make one with `other`: no
    /// broader scope, no function it cannot reach, no later expiry.
    pub fn covers(&self, other: &Grant) -> bool {
        let scope = match self.scope {
            Scope::Admin => true,
            Scope::Deploy => other.scope != Scope::Admin,
            Scope::Invoke | Scope::Read => other.scope == self.scope,
        };
        let function = match (&self.function, &other.function) {
            (None, _) => true,
            (Some(mine), Some(theirs)) => mine == theirs,
            (Some(_), None) => false,
        };
        let expiry = match (self.expires_ms, other.expires_ms) {
            (None, _) => true,
            (Some(mine), Some(theirs)) => theirs <= mine,
            (Some(_), None) => false,
        };
        scope && function && expiry
    }

    /// Refuses a label that would not print on one line.
    pub fn check(&self) -> Result<(), StoreError> {
        if let Some(name) = &self.name
            && (name.is_empty()
                || name.len() > MAX_TOKEN_NAME
                || name.chars().any(|c| c.is_control()))
        {
            return Err(StoreError::BadToken(format!(
                "a token's name is 1 to {MAX_TOKEN_NAME} characters on one line, not {name:?}"
            )));
        }
        if let Some(f) = &self.function {
            hearth_core::validate_function_name(f).map_err(|e| {
                StoreError::BadToken(format!("--function {f:?} cannot name a function: {e}"))
            })?;
        }
        Ok(())
    }
}

/// The longest label a token may have.
const MAX_TOKEN_NAME: usize = 64;

/// How many tokens one tenant may hold (expired ones count until revoked).
pub const MAX_TOKENS_PER_TENANT: u32 = 100;

/// A token as the store knows it (never the token itself): whose it is,
/// what it may do, and its id, which lists and revocations name it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Principal {
    pub tenant: String,
    /// The first 16 hex digits of the token's SHA-256: not a secret.
    pub id: String,
    #[serde(flatten)]
    pub grant: Grant,
    pub created_ms: i64,
}

impl Principal {
    pub fn scope(&self) -> Scope {
        self.grant.scope
    }

    pub fn is_admin(&self) -> bool {
        self.grant.scope == Scope::Admin
    }

    /// Whether the token has expired at `now_ms`.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.grant.expires_ms.is_some_and(|at| at <= now_ms)
    }
}

/// A token's id: the first 16 hex digits of its hash.
pub(crate) const ID_DIGITS: usize = 16;

/// A new random token: `hth_` and 48 hex digits.
pub(crate) fn new_token() -> String {
    let secret: [u8; 24] = rand::random();
    format!("hth_{}", hex::encode(secret))
}

/// A token added again: a no-op if it is the same tenant's with the same
/// scope and function, refused otherwise.
pub(crate) fn same_token(
    had: Principal,
    tenant: &str,
    grant: &Grant,
) -> Result<Principal, StoreError> {
    if had.tenant == tenant
        && had.grant.scope == grant.scope
        && had.grant.function == grant.function
    {
        Ok(had)
    } else {
        Err(StoreError::TokenTaken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_allows_itself_and_only_admin_and_deploy_allow_more() {
        let all = [Scope::Admin, Scope::Deploy, Scope::Invoke, Scope::Read];
        for s in all {
            assert!(s.allows(s));
            assert_eq!(s.as_str().parse::<Scope>(), Ok(s));
        }
        assert!(all.iter().all(|&n| Scope::Admin.allows(n)));
        assert!(!Scope::Deploy.allows(Scope::Admin));
        assert!(Scope::Deploy.allows(Scope::Read) && Scope::Deploy.allows(Scope::Invoke));
        assert!(!Scope::Read.allows(Scope::Invoke) && !Scope::Invoke.allows(Scope::Read));
        assert!("member".parse::<Scope>().is_err());
    }

    #[test]
    fn a_grant_covers_only_grants_no_broader_than_itself() {
        let deploy = Grant::of(Scope::Deploy);
        let on = |scope, f: &str| Grant {
            function: Some(f.into()),
            ..Grant::of(scope)
        };
        assert!(deploy.covers(&Grant::of(Scope::Read)));
        assert!(deploy.covers(&on(Scope::Invoke, "f")));
        assert!(!deploy.covers(&Grant::of(Scope::Admin)));
        assert!(!on(Scope::Deploy, "f").covers(&deploy), "another function");
        assert!(!on(Scope::Deploy, "f").covers(&on(Scope::Read, "g")));
        assert!(on(Scope::Deploy, "f").covers(&on(Scope::Read, "f")));
        assert!(!Grant::of(Scope::Read).covers(&Grant::of(Scope::Invoke)));
        let until = |ms| Grant {
            expires_ms: Some(ms),
            ..Grant::of(Scope::Deploy)
        };
        assert!(!until(10).covers(&deploy), "outliving its maker");
        assert!(until(10).covers(&until(5)) && !until(5).covers(&until(10)));
    }
}
