//! What a node's versions installed beside their artifacts (packages),
//! counted in their tenants' code quota and swept when no stored version
//! names them any more (docs/security.md, "One tenant deploys code until
//! the disk is full").

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_core::FunctionSpec;
use hearth_host::Engine;

use super::{Node, NodeError};

/// How long what a version installed is taken as read ([`Node::code_bytes`]).
pub(super) const INSTALLED_FOR: Duration = Duration::from_secs(60);

/// Package directories and sizes per (artifact, runtime, source builds).
pub(super) type InstalledCache =
    HashMap<(String, hearth_core::Runtime, bool), (Instant, Arc<[(PathBuf, u64)]>)>;

/// Whether the file at `path` is a bundle (a tar archive), read from its
/// first 512 bytes.
fn is_tar(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 512];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| hearth_host::bundle::is_tar(&head))
}

/// What a tenant keeps deployed on a node ([`Node::code_bytes`]).
#[derive(Debug, Default)]
pub struct CodeHeld {
    /// Its versions' artifacts, by hash.
    pub artifacts: std::collections::HashSet<String>,
    /// The directories of packages its versions installed here.
    pub packages: std::collections::HashSet<PathBuf>,
}

impl Node {
    /// Bytes of code `tenant` keeps deployed: each artifact its versions
    /// name, and each package they installed on this node, once.
    pub async fn code_bytes(&self, tenant: &str) -> Result<(u64, CodeHeld), NodeError> {
        let mut versions = Vec::new();
        for f in self.store.list_functions(tenant).await? {
            versions.extend(self.store.list_versions(tenant, &f.name).await?);
        }
        let hashes: std::collections::HashSet<String> =
            versions.iter().map(|v| v.artifact.clone()).collect();
        // Another gateway's deploys are counted too: their code comes from
        // the cluster (once; it is kept).
        for h in &hashes {
            self.ensure_artifact(h).await?;
        }
        let artifacts = self.artifacts.clone();
        let engines: Vec<Arc<dyn Engine>> = self.engines.values().cloned().collect();
        let cache = self.installed_cache.clone();
        tokio::task::spawn_blocking(move || {
            let mut bytes: u64 = hashes
                .iter()
                .filter_map(|h| std::fs::metadata(artifacts.path_of(h)).ok())
                .map(|m| m.len())
                .sum();
            let mut packages = std::collections::HashSet::new();
            let mut read = std::collections::HashSet::new();
            for v in versions.iter().filter(|v| v.spec.runtime.has_packages()) {
                let key = (v.artifact.clone(), v.spec.runtime, v.spec.source_builds);
                if !read.insert(key.clone()) {
                    continue;
                }
                let fresh = cache
                    .lock()
                    .get(&key)
                    .filter(|(at, _)| at.elapsed() < INSTALLED_FOR)
                    .map(|(_, dirs)| dirs.clone());
                let dirs = match fresh {
                    Some(dirs) => dirs,
                    None => {
                        let Ok(code) = std::fs::read(artifacts.path_of(&v.artifact)) else {
                            continue;
                        };
                        let dirs: Arc<[(PathBuf, u64)]> = engines
                            .iter()
                            .flat_map(|e| e.installed(Some(&v.spec), &code))
                            .collect();
                        cache.lock().insert(key, (Instant::now(), dirs.clone()));
                        dirs
                    }
                };
                for (dir, size) in dirs.iter() {
                    if packages.insert(dir.clone()) {
                        bytes += size;
                    }
                }
            }
            (
                bytes,
                CodeHeld {
                    artifacts: hashes,
                    packages,
                },
            )
        })
        .await
        .map_err(|e| NodeError::Internal(e.to_string()))
    }

    /// What the engines installed for a version of `spec` with this
    /// artifact (its packages, with their sizes).
    pub(super) async fn installed(
        &self,
        spec: &FunctionSpec,
        artifact: bytes::Bytes,
    ) -> Vec<(PathBuf, u64)> {
        if !spec.runtime.has_packages() {
            return Vec::new();
        }
        let engines: Vec<Arc<dyn Engine>> = self.engines.values().cloned().collect();
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || {
            engines
                .iter()
                .flat_map(|e| e.installed(Some(&spec), &artifact))
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    /// Removes installed packages and unpacked code no stored version needs
    /// (after a function is removed), waiting for deploys in flight: what
    /// they installed is not yet named by a version. In the background; a
    /// sweep asked for while one runs is folded into it.
    pub(super) fn sweep_installed(self: &Arc<Self>) {
        if self
            .sweep_wanted
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let node = self.clone();
        tokio::spawn(async move {
            let _alone = node.installing.write().await;
            node.sweep_wanted
                .store(false, std::sync::atomic::Ordering::Release);
            node.installed_cache.lock().clear();
            let referenced: std::collections::HashSet<String> =
                match node.store.referenced_artifacts().await {
                    Ok(hashes) => hashes.into_iter().collect(),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not sweep installed packages");
                        return;
                    }
                };
            let artifacts = node.artifacts.clone();
            let engines: Vec<Arc<dyn Engine>> = node.engines.values().cloned().collect();
            // Reading bundles and removing directories: off the runtime.
            let swept = tokio::task::spawn_blocking(move || {
                let mut keep = std::collections::HashSet::new();
                for h in &referenced {
                    // Only bundles (tar files) install anything: a module
                    // is not read past its first bytes.
                    let path = artifacts.path_of(h);
                    if !is_tar(&path) {
                        continue;
                    }
                    let Ok(code) = std::fs::read(&path) else {
                        continue;
                    };
                    for e in &engines {
                        keep.extend(e.installed(None, &code).into_iter().map(|(d, _)| d));
                    }
                }
                engines
                    .iter()
                    .map(|e| e.sweep_installed(&keep, &referenced))
                    .sum::<u64>()
            })
            .await;
            match swept {
                Ok(0) => {}
                Ok(freed) => {
                    tracing::info!(bytes = freed, "installed packages no version needs removed")
                }
                Err(e) => tracing::warn!(error = %e, "the package sweep failed"),
            }
        });
    }
}
