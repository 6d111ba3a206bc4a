//! A tenant's secrets on the node: set (sealed before the store sees
//! them), removed, checked when a deploy binds them, and opened when a
//! version that binds them is prepared. A change forgets the prepared
//! code of every function whose versions bind the secret, so the next
//! invocation runs with the value now stored: rotation needs no deploy.

use std::collections::BTreeMap;

use hearth_core::{FunctionSpec, FunctionVersion};

use super::{Node, NodeError};
use crate::SecretBox;

impl Node {
    fn secret_box(&self) -> Result<&SecretBox, NodeError> {
        keeping(self.secrets.as_deref())
    }

    /// Sets the tenant's secret `name` to `value` (made, or rotated);
    /// whether it is new.
    pub async fn set_secret(
        &self,
        tenant: &str,
        name: &str,
        value: &[u8],
    ) -> Result<bool, NodeError> {
        hearth_core::validate_env_name("secret name", name)
            .map_err(|e| NodeError::Invalid(e.to_string()))?;
        crate::secrets::check_value(name, value).map_err(NodeError::Invalid)?;
        let sealed = self.secret_box()?.seal(tenant, name, value);
        let new = self.store.put_secret(tenant, name, &sealed).await?;
        self.forget_secret(tenant, name);
        Ok(new)
    }

    /// Removes the tenant's secret `name`; whether it had one. Refused
    /// while a function's live version binds it: that function would
    /// fail at its next cold start.
    pub async fn remove_secret(&self, tenant: &str, name: &str) -> Result<bool, NodeError> {
        if let Some(binding) = self.live_secret_bindings(tenant).await?.get(name) {
            return Err(NodeError::Conflict(format!(
                "secret {name} is bound by the live version of {}: promote a version without it \
                 (or remove the function) first",
                binding.join(", ")
            )));
        }
        let removed = self.store.remove_secret(tenant, name).await?;
        self.forget_secret(tenant, name);
        Ok(removed)
    }

    /// Which of the tenant's functions' live versions bind each secret:
    /// secret name → `["name@N"]`. One store query, and one more per
    /// function whose live version is not its newest.
    pub async fn live_secret_bindings(
        &self,
        tenant: &str,
    ) -> Result<BTreeMap<String, Vec<String>>, NodeError> {
        let mut bound: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for f in self.store.list_functions(tenant).await? {
            let Some(live) = f.live else { continue };
            let spec = if f.latest.version == live {
                f.latest.spec
            } else {
                match self.store.get_version(tenant, &f.name, Some(live)).await? {
                    Some(v) => v.spec,
                    None => continue,
                }
            };
            for secret in spec.secrets.into_values() {
                bound
                    .entry(secret)
                    .or_default()
                    .push(format!("{}@{live}", f.name));
            }
        }
        Ok(bound)
    }

    /// Forgets the prepared code of the tenant's functions that bind the
    /// secret `name` (it changed here, or on another member).
    pub fn forget_secret(&self, tenant: &str, name: &str) {
        let forgotten = self
            .table
            .remove_where(tenant, |v| v.spec.secrets.values().any(|s| s == name));
        if let Some(jit) = &self.jit {
            let now = hearth_core::unix_time_ms();
            for function in &forgotten {
                jit.forget_secret_change(tenant, function, now);
            }
        }
    }

    /// Refuses a deploy whose bindings cannot work: a variable that is
    /// not one, one also set by `env`, or a secret the tenant does not
    /// have (another tenant's is as missing as one nobody has).
    pub(super) async fn check_bindings(
        &self,
        tenant: &str,
        spec: &FunctionSpec,
    ) -> Result<(), NodeError> {
        if spec.secrets.is_empty() {
            return Ok(());
        }
        self.secret_box()?;
        for (var, secret) in &spec.secrets {
            hearth_core::validate_env_name("environment variable", var)
                .map_err(|e| NodeError::Invalid(e.to_string()))?;
            if spec.env.contains_key(var) {
                return Err(NodeError::Invalid(format!(
                    "{var} is set both by env and by secret {secret}: drop one"
                )));
            }
            if self.store.sealed_secret(tenant, secret).await?.is_none() {
                return Err(NodeError::Invalid(format!(
                    "tenant {tenant} has no secret {secret}: set it first (`hearth secret set \
                     {secret}`)"
                )));
            }
        }
        Ok(())
    }

    /// The value of `tenant`'s secret `name`, opened now: what a trigger's
    /// broker credentials name.
    pub async fn secret_value(&self, tenant: &str, name: &str) -> Result<String, NodeError> {
        let secret_box = keeping(self.secrets.as_deref())?;
        let missing = || {
            NodeError::Invalid(format!(
                "tenant {tenant} has no secret {name} this node can open: set it (`hearth \
                 secret set {name}`)"
            ))
        };
        let sealed = self
            .store
            .sealed_secret(tenant, name)
            .await?
            .ok_or_else(missing)?;
        secret_box
            .open(tenant, name, &sealed)
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(missing)
    }

    /// `v` with its bound secrets' values in its environment, opened from
    /// the store now; `None` if it binds none.
    pub(super) async fn with_secret_values(
        &self,
        v: &FunctionVersion,
    ) -> Result<Option<FunctionVersion>, NodeError> {
        with_secret_values(self.store.as_ref(), self.secrets.as_deref(), v).await
    }
}

/// The node's secret box, or why it has none.
fn keeping(secrets: Option<&SecretBox>) -> Result<&SecretBox, NodeError> {
    secrets.ok_or_else(|| {
        NodeError::Invalid(
            "this node keeps no secrets (it was started without a secrets key)".into(),
        )
    })
}

/// `v` with its bound secrets' values (from `store`, opened with
/// `secret_box`) in its environment; `None` if it binds none. What the
/// isolate and the compiled path both prepare a version with.
pub(crate) async fn with_secret_values(
    store: &dyn hearth_store::Store,
    secret_box: Option<&SecretBox>,
    v: &FunctionVersion,
) -> Result<Option<FunctionVersion>, NodeError> {
    if v.spec.secrets.is_empty() {
        return Ok(None);
    }
    let secret_box = keeping(secret_box)?;
    let mut values = BTreeMap::new();
    for (var, secret) in &v.spec.secrets {
        let missing = || {
            NodeError::Conflict(format!(
                "{}@{} binds secret {secret}, which tenant {} no longer has (or this node \
                 cannot open): set it again (`hearth secret set {secret}`) or promote a \
                 version without it",
                v.name, v.version, v.tenant
            ))
        };
        let sealed = store
            .sealed_secret(&v.tenant, secret)
            .await?
            .ok_or_else(missing)?;
        let value = secret_box
            .open(&v.tenant, secret, &sealed)
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(missing)?;
        values.insert(var.clone(), value);
    }
    Ok(Some(FunctionVersion {
        spec: crate::secrets::with_values(&v.spec, values),
        ..v.clone()
    }))
}
