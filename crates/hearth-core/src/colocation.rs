//! Colocation: which invocations may share one runtime (Hydra §4.1).
//!
//! A *runtime* here is a process or interpreter that outlives one
//! invocation and that more than one function could use: in the simulator
//! an instance, on a real node a Python zygote holding imported packages.
//! Sandboxes inside a runtime (a forked handler, a wasm instance, a JS
//! isolate) are never shared between functions, whatever the mode.

use serde::{Deserialize, Serialize};

/// Which invocations may share one runtime instance on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Colocation {
    /// Any function of any tenant (Hydra*).
    Full,
    /// Functions of the same tenant (Hydra; the default).
    #[default]
    Tenant,
    /// Invocations of the same function, concurrently (like Knative).
    Function,
    /// Nothing: one invocation per instance at a time (like OpenWhisk).
    None,
}

impl Colocation {
    pub const ALL: [Colocation; 4] = [
        Colocation::Full,
        Colocation::Tenant,
        Colocation::Function,
        Colocation::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Colocation::Full => "full",
            Colocation::Tenant => "tenant",
            Colocation::Function => "function",
            Colocation::None => "none",
        }
    }
}

impl std::str::FromStr for Colocation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Colocation::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("colocation mode must be full, tenant, function or none, not {s:?}")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_refuse_others() {
        for m in Colocation::ALL {
            assert_eq!(m.as_str().parse::<Colocation>().unwrap(), m);
        }
        assert!(
            "some"
                .parse::<Colocation>()
                .unwrap_err()
                .contains("full, tenant")
        );
    }
}
