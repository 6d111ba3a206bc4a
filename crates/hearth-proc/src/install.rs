//! The install cache (SOCK §4.3): each pinned package installed once.
//!
//! `<dir>/python/<name>-<version>/` holds what `pip install --no-deps
//! --target` produced; `<dir>/node/<name>-<version>/node_modules/` what
//! `npm install` produced. Sandboxes get the directories they need as
//! read-only bind mounts; zygotes import from the same paths. An install
//! happens in a temporary directory renamed into place, so a crash never
//! leaves a half-installed package that looks complete.
//!
//! With `offline` set, pip installs only from that directory of wheels
//! (`--no-index --find-links`) and npm only from its cache (`--offline`).
//!
//! No package's own code runs at install: pip takes wheels only (a source
//! distribution's build backend is arbitrary code) and npm runs no
//! install scripts (`--ignore-scripts`). Installs still run as the
//! daemon's user, outside any sandbox; a package's import-time code runs
//! in a zygote (see `zygote.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hearth_core::Runtime;

use crate::bundle::Package;

/// A package ready to map into sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub package: Package,
    /// The directory to put on the import path (`sys.path` entry, or a
    /// `node_modules` directory).
    pub path: PathBuf,
    /// Python: the top-level modules it provides (what a zygote imports).
    pub modules: Vec<String>,
}

#[derive(Debug)]
pub struct InstallCache {
    dir: PathBuf,
    python: PathBuf,
    offline: Option<PathBuf>,
    /// One install at a time per package; others wait and then find it.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl InstallCache {
    pub fn new(dir: PathBuf, python: PathBuf, offline: Option<PathBuf>) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir.join("python"))?;
        std::fs::create_dir_all(dir.join("node"))?;
        // Leftovers of installs a crash interrupted.
        for sub in ["python", "node"] {
            for e in std::fs::read_dir(dir.join(sub))?.flatten() {
                if e.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(InstallCache {
            dir,
            python,
            offline,
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// Installs `pkg` unless it is already there.
    pub async fn ensure(&self, runtime: Runtime, pkg: &Package) -> Result<Installed, String> {
        let sub = if runtime == Runtime::Python {
            "python"
        } else {
            "node"
        };
        let final_dir = self.dir.join(sub).join(pkg.dir_name());
        let lock = self
            .locks
            .lock()
            .unwrap()
            .entry(format!("{sub}/{}", pkg.dir_name()))
            .or_default()
            .clone();
        let _guard = lock.lock().await;
        if !final_dir.exists() {
            let tmp =
                self.dir
                    .join(sub)
                    .join(format!(".tmp-{}-{}", pkg.dir_name(), std::process::id()));
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
            let result = match runtime {
                Runtime::Python => self.pip(pkg, &tmp, true).await,
                _ => self.npm(pkg, &tmp).await,
            };
            if let Err(e) = result {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            make_world_readable(&tmp);
            std::fs::rename(&tmp, &final_dir).map_err(|e| e.to_string())?;
        }
        Ok(match runtime {
            Runtime::Python => Installed {
                package: pkg.clone(),
                modules: python_modules(&final_dir),
                path: final_dir,
            },
            _ => Installed {
                package: pkg.clone(),
                path: final_dir.join("node_modules"),
                modules: Vec::new(),
            },
        })
    }

    /// Installs a Python package into `dir` as if nothing were cached:
    /// neither this store nor pip's download cache is used. Only for
    /// measuring what the install cache saves (`ProcConfig::caches`).
    pub async fn install_uncached(&self, pkg: &Package, dir: &Path) -> Result<Installed, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        self.pip(pkg, dir, false).await?;
        make_world_readable(dir);
        Ok(Installed {
            package: pkg.clone(),
            modules: python_modules(dir),
            path: dir.to_path_buf(),
        })
    }

    async fn pip(&self, pkg: &Package, target: &Path, pip_cache: bool) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new(&self.python);
        cmd.args([
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args([
            "--no-input",
            "--quiet",
            "--root-user-action=ignore",
            // Wheels only: a source distribution's build runs its code
            // here, as this daemon's user, with the host's filesystem.
            "--only-binary=:all:",
            "--target",
        ])
        .arg(target)
        .arg(pkg.spec(Runtime::Python));
        if !pip_cache {
            cmd.arg("--no-cache-dir");
        }
        if let Some(dir) = &self.offline {
            cmd.arg("--no-index").arg("--find-links").arg(dir);
        }
        run(cmd, &format!("pip install {}", pkg.spec(Runtime::Python))).await
    }

    async fn npm(&self, pkg: &Package, target: &Path) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new("npm");
        cmd.args([
            "install",
            "--no-save",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
        ])
        .args(["--no-package-lock", "--loglevel=error", "--prefix"])
        .arg(target)
        .arg(pkg.spec(Runtime::Node));
        if self.offline.is_some() {
            cmd.arg("--offline");
        }
        run(cmd, &format!("npm install {}", pkg.spec(Runtime::Node))).await
    }
}

async fn run(mut cmd: tokio::process::Command, what: &str) -> Result<(), String> {
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let out = cmd
        .output()
        .await
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" / ");
    Err(format!("{what} failed: {tail}"))
}

/// Sandboxes run as an unprivileged user: packages must be readable by all.
fn make_world_readable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fn walk(p: &Path) {
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            return;
        };
        if meta.file_type().is_symlink() {
            return;
        }
        let mode = meta.permissions().mode();
        let want = if meta.is_dir() {
            mode | 0o755
        } else {
            mode | 0o444
        };
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(want));
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(p)
        {
            for e in entries.flatten() {
                walk(&e.path());
            }
        }
    }
    walk(dir);
}

/// The importable top-level names a pip `--target` directory provides.
pub fn python_modules(dir: &Path) -> Vec<String> {
    // Wheels list them in top_level.txt; fall back to the directory.
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".dist-info")
                && let Ok(text) = std::fs::read_to_string(e.path().join("top_level.txt"))
            {
                out.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with('_'))
                        .map(|l| l.replace('/', ".")),
                );
            }
        }
    }
    if out.is_empty()
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if name.starts_with('_')
                || name.ends_with(".dist-info")
                || name.ends_with(".data")
                || name == "bin"
            {
                continue;
            }
            if path.is_dir() && path.join("__init__.py").exists() {
                out.push(name);
            } else if let Some(m) = name.strip_suffix(".py") {
                out.push(m.to_string());
            } else if name.ends_with(".so")
                && let Some(m) = name.split('.').next()
            {
                out.push(m.to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
