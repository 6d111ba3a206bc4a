//! The contract between the node and each tier's engine.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use displaydoc::Display;
use hearth_core::{
    Colocation, FunctionSpec, FunctionVersion, InvokeError, Request, Response, Tier,
};
use thiserror::Error;

use crate::{Artifacts, HostCtx};

/// Code to compile: as a user uploaded it, or as another tier of the
/// same runtime made it into an artifact.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// The uploaded file's name, if known (`handler.py`, `fn.tar.gz`).
    pub file_name: Option<String>,
    pub code: Vec<u8>,
    /// The code is an artifact (a canonical tar a tier made), to be read
    /// exactly; an upload is read as [`crate::Bundle::from_upload`] reads
    /// it (one top directory stripped).
    pub artifact: bool,
}

impl Source {
    /// A tier's artifact, handed to the next tier of its runtime.
    pub fn artifact(file_name: Option<String>, code: Vec<u8>) -> Source {
        Source {
            file_name,
            code,
            artifact: true,
        }
    }
}

impl From<Vec<u8>> for Source {
    fn from(code: Vec<u8>) -> Source {
        Source {
            file_name: None,
            code,
            artifact: false,
        }
    }
}

/// Code an engine has accepted at deploy time.
#[derive(Debug, Clone, Default)]
pub struct Compiled {
    /// The canonical artifact to store (for example `.wat` text becomes
    /// binary Wasm; a bundle gains its lock); its sha256 names it.
    pub artifact: Vec<u8>,
    /// Time spent checking and compiling the code.
    pub compile_ms: u64,
    /// Time spent resolving and installing its packages.
    pub install_ms: u64,
    /// Its lock's packages, each with whether the install cache had it.
    pub packages: Vec<DeployedPackage>,
    /// What the deployer should know: choices made for them (a range
    /// resolved, a dependency their list left out), settings that cannot
    /// take effect as written.
    pub warnings: Vec<String>,
}

/// A locked package as a deploy reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeployedPackage {
    #[serde(flatten)]
    pub package: crate::deps::Package,
    /// Already installed on this node before the deploy.
    pub cached: bool,
}

/// Why an engine refused code at deploy time or could not load it later.
#[derive(Debug, Display, Error)]
pub enum DeployError {
    /// invalid module: {0}
    Invalid(String),
    /// the module is not a function Hearth can run: {0}
    NotAFunction(String),
    /// could not load the function's code: {0}
    Load(String),
}

/// An artifact or cache file an engine could not read or write: the code
/// could not be loaded.
impl From<hearth_store::StoreError> for DeployError {
    fn from(e: hearth_store::StoreError) -> DeployError {
        DeployError::Load(e.to_string())
    }
}

/// Which colocation mode governs a tenant's functions. A tier asks it each
/// time it is about to give a function a runtime that another function
/// could also be using (a Python zygote), so a changed override applies to
/// the next cold start.
#[async_trait::async_trait]
pub trait ColocationPolicy: Send + Sync + std::fmt::Debug {
    async fn mode_for(&self, tenant: &str) -> Colocation;
    /// The mode of tenants without an override (the cluster's).
    fn default_mode(&self) -> Colocation;
}

/// One mode for every tenant.
#[async_trait::async_trait]
impl ColocationPolicy for Colocation {
    async fn mode_for(&self, _tenant: &str) -> Colocation {
        *self
    }
    fn default_mode(&self) -> Colocation {
        *self
    }
}

/// One tier's implementation: heavy work once per version, fast sandboxes after.
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    fn tier(&self) -> Tier;

    /// Validates code at deploy time, does whatever ahead-of-time work the
    /// tier can (compiling, caching, installing packages), and returns the
    /// artifact to store.
    async fn compile(&self, spec: &FunctionSpec, source: Source) -> Result<Compiled, DeployError>;

    /// Makes a version ready to instantiate, reading its code from
    /// `artifacts` if the tier has nothing cached for it. Called once per
    /// version per process; the node caches the result.
    async fn prepare(
        &self,
        version: &FunctionVersion,
        artifacts: &Arc<dyn Artifacts>,
    ) -> Result<Arc<dyn Prepared>, DeployError>;

    /// What this tier enforces on this machine and what it holds now, for
    /// `hearth status`.
    fn status(&self) -> EngineStatus {
        EngineStatus::default()
    }

    /// The tier's warm pools: pre-started or pre-allocated instances a new
    /// invocation could take now, by kind. Cheap: nodes send it in every
    /// heartbeat.
    fn pool_free(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// What a version with this spec and artifact has installed on this
    /// node beside its artifact (packages), each directory with its size
    /// in bytes: counted in its tenant's code quota. Without a spec, what
    /// any version with this artifact may have installed (for keeping).
    /// Blocking (it may read the artifact and walk directories).
    fn installed(&self, _spec: Option<&FunctionSpec>, _artifact: &[u8]) -> Vec<(PathBuf, u64)> {
        Vec::new()
    }

    /// Removes what the tier installed or unpacked that no version needs
    /// any more: `keep` holds every directory [`installed`](Self::installed)
    /// named for a stored version, `artifacts` every stored version's
    /// artifact hash. Returns the bytes freed. Blocking.
    fn sweep_installed(&self, _keep: &HashSet<PathBuf>, _artifacts: &HashSet<String>) -> u64 {
        0
    }
}

/// One tier's report for `hearth status`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EngineStatus {
    /// Plain sentences about protections this machine cannot give (for
    /// example no cgroups when not root). Empty when nothing is degraded.
    pub degraded: Vec<String>,
    /// Tier-specific figures (sandboxes, zygotes, pools).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub details: serde_json::Value,
}

/// A version ready to run: compiled module, bytecode or zygote.
#[async_trait]
pub trait Prepared: Send + Sync + 'static {
    /// Makes a fresh sandbox. Fails with [`InvokeError::Overloaded`] when
    /// the tier has no room for another.
    async fn instantiate(&self) -> Result<Box<dyn Sandbox>, InvokeError>;

    /// Makes a sandbox that shares nothing with the ones serving traffic:
    /// not a warm instance (whose globals earlier invocations changed), and
    /// not kept warm after (so nothing it does reaches later traffic). For
    /// replays. Tiers whose every sandbox is fresh need not override it.
    async fn instantiate_isolated(&self) -> Result<Box<dyn Sandbox>, InvokeError> {
        self.instantiate().await
    }

    /// Whether its sandboxes take bodies as streams
    /// ([`Sandbox::invoke_streaming`]) rather than whole.
    fn streams(&self) -> bool {
        false
    }
}

/// One isolated execution context; runs one invocation at a time.
#[async_trait]
pub trait Sandbox: Send {
    /// Runs `req`. The request is borrowed: the node keeps it for the
    /// tape and for a retry in the next tier, so no tier copies it for
    /// them (bodies are `Bytes`: a tier that needs its own is a refcount).
    async fn invoke(&mut self, req: &Request, host: HostCtx) -> Result<Response, InvokeError>;

    /// Runs `req` with its body arriving through `body` (`req.body` is
    /// empty) and its response leaving through `out`, for tiers whose
    /// [`Prepared::streams`]. `Ok` when the response went out whole; on
    /// `Err` the caller ends `out` with it.
    async fn invoke_streaming(
        &mut self,
        req: &Request,
        body: crate::BodyStream,
        host: HostCtx,
        out: &mut crate::ResponseSink,
    ) -> Result<(), InvokeError> {
        let _ = (req, body, host, out);
        Err(InvokeError::Crashed(
            "this tier does not stream bodies (its Prepared::streams is false)".into(),
        ))
    }
}
