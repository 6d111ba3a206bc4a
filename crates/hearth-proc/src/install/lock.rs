//! From what a bundle requires to its lock, installed: the deploy's half
//! of package handling.
//!
//! A bundle that carries `hearth.lock` (an artifact downloaded and
//! deployed again, or a lock a user keeps) installs exactly that. Any
//! other bundle with requirements is resolved now; the lock goes into the
//! artifact, so every node and every later start installs the same
//! packages, and a new release of a dependency never changes a deployed
//! version. What the resolution chose for the user — a version for an
//! unpinned requirement, a dependency the list left out — comes back as
//! warnings for the deploy's answer.

use hearth_core::Runtime;
use hearth_host::DeployedPackage;
use hearth_host::bundle::Bundle;
use hearth_host::deps::{LOCK_FILE, Lock, Package, Requirement};

use super::{InstallCache, InstallError};

/// A bundle whose packages are locked and installed.
pub struct Locked {
    /// The bundle with its lock (unchanged when it had one or needs none).
    pub bundle: Bundle,
    pub packages: Vec<DeployedPackage>,
    /// Python: the top-level modules the packages provide.
    pub modules: Vec<String>,
    pub warnings: Vec<String>,
}

impl InstallCache {
    /// Resolves `bundle`'s requirements (unless it carries a lock) and
    /// installs every locked package. `runtime` is Python or Node.js.
    pub async fn lock_bundle(
        &self,
        runtime: Runtime,
        bundle: Bundle,
        source_builds: bool,
    ) -> Result<Locked, InstallError> {
        let requirements = bundle.requirements(runtime)?;
        let carried = bundle.lock(runtime)?;
        let had_lock = carried.is_some();
        let (packages, warnings, fresh) = match carried {
            Some(lock) => (lock.packages, Vec::new(), Vec::new()),
            None if requirements.is_empty() => {
                return Ok(Locked {
                    bundle,
                    packages: Vec::new(),
                    modules: Vec::new(),
                    warnings: Vec::new(),
                });
            }
            None => {
                let resolved = self.resolve(runtime, &requirements, source_builds).await?;
                let packages: Vec<Package> = resolved.iter().map(|(p, _)| p.clone()).collect();
                let fresh = resolved
                    .iter()
                    .filter(|(_, f)| *f)
                    .map(|(p, _)| p.clone())
                    .collect();
                let warnings = choices(runtime, &requirements, &packages);
                (packages, warnings, fresh)
            }
        };
        let mut deployed = Vec::new();
        let mut modules = Vec::new();
        for p in &packages {
            let (installed, installed_now) =
                self.ensure_reporting(runtime, p, source_builds).await?;
            modules.extend(installed.modules);
            deployed.push(DeployedPackage {
                package: p.clone(),
                cached: !installed_now && !fresh.contains(p),
            });
        }
        let bundle = if had_lock {
            bundle
        } else {
            bundle.with_lock(&Lock::new(packages))
        };
        Ok(Locked {
            bundle,
            packages: deployed,
            modules,
            warnings,
        })
    }
}

/// What the resolution decided that the requirements did not say.
fn choices(runtime: Runtime, requirements: &[Requirement], locked: &[Package]) -> Vec<String> {
    let file = match runtime {
        Runtime::Python => "requirements.txt",
        _ => "package.json",
    };
    let version_of = |name: &str| {
        locked
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.version.as_str())
            .unwrap_or("?")
    };
    let mut warnings = Vec::new();
    let chosen: Vec<String> = requirements
        .iter()
        .filter(|r| r.exact.is_none())
        .map(|r| {
            let asked = match runtime {
                Runtime::Python => r.spec.clone(),
                _ => format!("{}@{}", r.name, r.spec),
            };
            format!("{asked} resolved to {}", version_of(&r.name))
        })
        .collect();
    if !chosen.is_empty() {
        warnings.push(format!(
            "{file} does not pin every package; this version keeps what was resolved now \
             ({LOCK_FILE}, shown by `hearth versions`): {}",
            chosen.join(", ")
        ));
    }
    let unlisted: Vec<String> = locked
        .iter()
        .filter(|p| !requirements.iter().any(|r| r.name == p.name))
        .map(|p| p.spec(runtime))
        .collect();
    if !unlisted.is_empty() {
        warnings.push(format!(
            "{file} leaves out dependencies of what it lists; installed and locked: {}",
            unlisted.join(", ")
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_name_what_was_chosen_and_what_was_added() {
        let reqs = hearth_host::deps::parse_requirements("Jinja2>=3\nsix==1.16.0\n").unwrap();
        let locked = |name: &str, version: &str| Package {
            name: name.into(),
            version: version.into(),
            hash: None,
            tree: None,
        };
        let lock = [
            locked("jinja2", "3.1.4"),
            locked("markupsafe", "2.1.5"),
            locked("six", "1.16.0"),
        ];
        let w = choices(Runtime::Python, &reqs, &lock);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("Jinja2>=3 resolved to 3.1.4") && !w[0].contains("six"),
            "{w:?}"
        );
        assert!(w[1].ends_with("markupsafe==2.1.5"), "{w:?}");
        let pinned = hearth_host::deps::parse_requirements("six==1.16.0\n").unwrap();
        assert!(choices(Runtime::Python, &pinned, &lock[2..]).is_empty());
    }
}
