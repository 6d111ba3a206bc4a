//! The install cache (SOCK §4.3): each locked package installed once.
//!
//! At deploy, [`InstallCache::resolve`] turns what a bundle requires into
//! its lock (`deps.rs`): pip's resolver over the whole requirements list
//! (`pip install --dry-run --report`: every package, dependencies
//! included, with its file's sha256), npm for each dependency's range.
//! Every package of a lock is then installed by itself:
//! `<dir>/python/<name>-<version>-<h>/` holds what `pip install --no-deps
//! --require-hashes --target` produced (the file must have the locked
//! hash); `<dir>/node/<name>-<version>-<h>/node_modules/` what `npm
//! install` produced (its integrity must be the locked one). Sandboxes get the directories they need as
//! read-only bind mounts; zygotes import from the same paths. An install
//! happens in a temporary directory renamed into place, so a crash never
//! leaves a half-installed package that looks complete.
//!
//! With `offline` set, pip installs only from that directory of wheels
//! (`--no-index --find-links`) and npm only from its cache (`--offline`).
//!
//! No package's own code runs at install: pip takes wheels only (a source
//! distribution's build backend is arbitrary code) and npm runs no
//! install scripts (`--ignore-scripts`). A package's import-time code runs
//! in a contained zygote (see `zygote.rs`).
//!
//! When the node is root, pip and npm run in a sandbox of their own
//! ([`InstallSandbox`]): chrooted into a root holding the system files,
//! the host's `/etc` (to resolve and verify the index) and nothing else
//! of the host but the install's own directories (its target and a
//! scratch beside it, writable) and the offline packages (read-only); as
//! the sandbox user, with `no_new_privs`, a time limit, and in a cgroup
//! of its own (memory and process limits; whatever the installer leaves
//! running is killed with it before the node takes its files back). Its
//! network namespace has only `lo`, where a proxy of the node's
//! (`egress.rs`) listens that lets out only the package indexes
//! ([`InstallSandbox::index_hosts`]); installing offline, it has no proxy
//! and so no network. So what pip or npm parses from an index is parsed
//! without root, out of reach of the node's data, and what it might do
//! with the network reaches only the indexes.
//!
//! npm's offline cache is `<offline>/npm` (what `npm cache add --cache
//! <offline>/npm` fills). npm rewrites a cache's index as it reads it and
//! takes a cache it cannot write for a miss, so each install gets a copy
//! of its own in its scratch: directories made afresh, files hard links
//! to the cache's (which the sandbox user cannot write).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use hearth_core::Runtime;

use displaydoc::Display;
use hearth_host::deps::{NpmTree, Package, Requirement};
use thiserror::Error;

use crate::cgroup::CgroupPool;

mod lock;
mod sandbox;

pub use lock::Locked;
use sandbox::{Confinement, INSTALL_MEMORY};
pub use sandbox::{DEFAULT_INDEX_HOSTS, InstallSandbox};

/// Why packages could not be resolved or installed. Each names the
/// command (`what`: `pip install six==1.16.0`, `npm ci left-pad@1.3.0`) and
/// says what to do where there is something to do.
#[derive(Debug, Display, Error)]
pub enum InstallError {
    /// {what}: {source}
    Io {
        what: String,
        source: std::io::Error,
    },
    /// {what}: could not start: {source}
    Start {
        what: String,
        source: std::io::Error,
    },
    /// {what}: could not make its sandbox: {source}
    Sandbox {
        what: String,
        source: std::io::Error,
    },
    /// {what} took more than {seconds} s
    TooLong { what: String, seconds: u64 },
    /// {what} failed: {output}
    Failed { what: String, output: String },
    /// {what}: the index's file for it is not the one locked ({hash}); it changed since the version was locked. Deploy again to lock what the index has now (pip said: {output})
    HashChanged {
        what: String,
        hash: String,
        output: String,
    },
    /// {what}: {why}
    Unusable { what: String, why: String },
    /// {0}
    Bundle(#[from] hearth_host::bundle::BundleError),
}

impl InstallError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> InstallError {
        let what = what.into();
        move |source| InstallError::Io { what, source }
    }
}

/// How long one install may take.
const INSTALL_TIME: Duration = Duration::from_secs(600);

/// The largest resolution report the node reads (pip's report carries each
/// package's metadata, descriptions included).
const MAX_REPORT: u64 = 32 << 20;

/// A package ready to map into sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub package: Package,
    /// The directory to put on the import path (`sys.path` entry, or a
    /// `node_modules` directory).
    pub path: PathBuf,
    /// Python: the top-level modules it provides (what a zygote imports).
    pub modules: Vec<String>,
    /// Whether pip could build it from source (the function opted in).
    pub source_builds: bool,
}

/// The cache's directories: wheel-only Python installs, Python installs a
/// function let pip build from source, npm installs.
const SUBDIRS: [&str; 3] = ["python", "python-src", "node"];

/// Which of [`SUBDIRS`] a package of `runtime` goes in.
fn subdir(runtime: Runtime, source_builds: bool) -> &'static str {
    match (runtime == Runtime::Python, source_builds) {
        (true, false) => "python",
        (true, true) => "python-src",
        (false, _) => "node",
    }
}

/// Bytes of the files under `path` (not following links).
pub fn dir_bytes(path: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

/// Where installs fetch from instead of the public indexes (a mirror or a
/// private registry; its host must be among the sandbox's index hosts).
#[derive(Debug, Clone, Default)]
pub struct Registries {
    /// pip's `--index-url`.
    pub pip_index_url: Option<String>,
    /// npm's `--registry`.
    pub npm_registry: Option<String>,
}

#[derive(Debug)]
pub struct InstallCache {
    dir: PathBuf,
    python: PathBuf,
    npm: PathBuf,
    offline: Option<PathBuf>,
    registries: Registries,
    sandbox: Option<InstallSandbox>,
    /// Where sandboxed installs get their cgroups (once the node has them).
    cgroups: std::sync::OnceLock<Arc<CgroupPool>>,
    next_root: AtomicU64,
    /// One install at a time per package; others wait and then find it.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl InstallCache {
    /// `python` runs pip, `npm` is npm's command.
    pub fn new(
        dir: PathBuf,
        python: PathBuf,
        npm: PathBuf,
        offline: Option<PathBuf>,
        sandbox: Option<InstallSandbox>,
    ) -> std::io::Result<Self> {
        for sub in SUBDIRS {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        // Leftovers of installs a crash interrupted.
        for sub in SUBDIRS {
            for e in std::fs::read_dir(dir.join(sub))?.flatten() {
                if e.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        if let (Some(sandbox), Some(offline)) = (&sandbox, &offline) {
            readable_by_others(offline).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "--offline-packages {}: {e}; installs run as the sandbox user (uid {}), \
                         who must be able to read the directory and everything in it \
                         (chmod -R o+rX)",
                        offline.display(),
                        sandbox.uid
                    ),
                )
            })?;
        }
        Ok(InstallCache {
            dir,
            python,
            npm,
            offline,
            registries: Registries::default(),
            sandbox,
            cgroups: std::sync::OnceLock::new(),
            next_root: AtomicU64::new(0),
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// Fetches from `registries` instead of the public indexes.
    pub fn with_registries(mut self, registries: Registries) -> Self {
        self.registries = registries;
        self
    }

    /// Gives sandboxed installs cgroups from `pool` (made after this cache,
    /// so a bad setting here stops the start before any cgroup exists).
    pub fn use_cgroups(&self, pool: Arc<CgroupPool>) {
        let _ = self.cgroups.set(pool);
    }

    /// Where `pkg` is (or would be) installed.
    pub fn dir_of(&self, runtime: Runtime, pkg: &Package, source_builds: bool) -> PathBuf {
        self.dir
            .join(subdir(runtime, source_builds))
            .join(pkg.dir_name())
    }

    /// Removes every installed package whose directory is not in `keep`;
    /// returns the bytes freed. Installs in progress (`.tmp-…`) are left.
    pub fn remove_all_but(&self, keep: &std::collections::HashSet<PathBuf>) -> u64 {
        let mut freed = 0;
        for sub in SUBDIRS {
            for e in std::fs::read_dir(self.dir.join(sub))
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = e.path();
                if e.file_name().to_string_lossy().starts_with(".tmp-") || keep.contains(&path) {
                    continue;
                }
                let bytes = dir_bytes(&path);
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => {
                        freed += bytes;
                        tracing::info!(package = %path.display(), bytes, "removed: no version needs it");
                    }
                    Err(e) => {
                        tracing::warn!(package = %path.display(), error = %e, "could not remove")
                    }
                }
            }
        }
        freed
    }

    /// The lock held while `key` (`<subdir>/<dir name>`) is installed.
    fn lock_of(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .entry(key.to_string())
            .or_default()
            .clone()
    }

    /// Installs `pkg` unless it is already there. With `source_builds`, a
    /// Python package without a wheel is built from source; what such
    /// installs make is kept apart from wheel-only installs, so a function
    /// that did not opt in never imports what a build made.
    pub async fn ensure(
        &self,
        runtime: Runtime,
        pkg: &Package,
        source_builds: bool,
    ) -> Result<Installed, InstallError> {
        Ok(self.ensure_reporting(runtime, pkg, source_builds).await?.0)
    }

    /// [`Self::ensure`], and whether this call installed it (false: it was
    /// in the cache).
    pub async fn ensure_reporting(
        &self,
        runtime: Runtime,
        pkg: &Package,
        source_builds: bool,
    ) -> Result<(Installed, bool), InstallError> {
        let python = runtime == Runtime::Python;
        let source_builds = python && source_builds;
        let sub = subdir(runtime, source_builds);
        let final_dir = self.dir_of(runtime, pkg, source_builds);
        let lock = self.lock_of(&format!("{sub}/{}", pkg.dir_name()));
        let _guard = lock.lock().await;
        let fresh = !final_dir.exists();
        if fresh {
            let tmp =
                self.dir
                    .join(sub)
                    .join(format!(".tmp-{}-{}", pkg.dir_name(), std::process::id()));
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&tmp)
                .map_err(InstallError::io(format!("cannot create {}", tmp.display())))?;
            let started = std::time::Instant::now();
            let result = match runtime {
                Runtime::Python => self.pip(pkg, &tmp, true, source_builds).await,
                _ => self
                    .npm(&pkg.name, &pkg.version, &tmp, pkg.tree.as_ref())
                    .await
                    .and_then(|got| is_locked(pkg, &got)),
            };
            if let Err(e) = result {
                tracing::warn!(package = %pkg.spec(runtime), error = %e, "install failed");
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            tracing::info!(
                package = %pkg.spec(runtime),
                elapsed = ?started.elapsed(),
                "installed"
            );
            make_world_readable(&tmp);
            std::fs::rename(&tmp, &final_dir).map_err(InstallError::io(format!(
                "cannot move {} into place",
                tmp.display()
            )))?;
        }
        let installed = match runtime {
            Runtime::Python => Installed {
                package: pkg.clone(),
                modules: python_modules(&final_dir),
                path: final_dir,
                source_builds,
            },
            _ => Installed {
                package: pkg.clone(),
                path: final_dir.join("node_modules"),
                modules: Vec::new(),
                source_builds,
            },
        };
        Ok((installed, fresh))
    }

    /// Resolves what a bundle requires into the exact packages to install,
    /// each with its file's hash: for Python, pip's resolver over the whole
    /// list (so dependencies the list leaves out are found), as the install
    /// will run (wheels only unless `source_builds`, from the same index);
    /// for Node.js, npm resolves each range, and what it installs becomes
    /// the cache's copy of that exact package (the returned flag: installed
    /// by this call).
    pub async fn resolve(
        &self,
        runtime: Runtime,
        requirements: &[Requirement],
        source_builds: bool,
    ) -> Result<Vec<(Package, bool)>, InstallError> {
        let work = self.dir.join(if runtime == Runtime::Python {
            "python"
        } else {
            "node"
        });
        let n = self
            .next_root
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if runtime != Runtime::Python {
            let mut out = Vec::new();
            for r in requirements {
                let tmp = work.join(format!(".tmp-resolve-{}-{n}", std::process::id()));
                let _ = std::fs::remove_dir_all(&tmp);
                std::fs::create_dir_all(&tmp)
                    .map_err(InstallError::io(format!("cannot create {}", tmp.display())))?;
                let result = self.npm(&r.name, &r.spec, &tmp, None).await;
                let resolved = match result {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&tmp);
                        return Err(e);
                    }
                };
                // What was just installed is that exact package: keep it.
                let final_dir = work.join(resolved.dir_name());
                let lock = self.lock_of(&format!("node/{}", resolved.dir_name()));
                let _guard = lock.lock().await;
                let fresh = !final_dir.exists();
                if fresh {
                    make_world_readable(&tmp);
                    std::fs::rename(&tmp, &final_dir).map_err(InstallError::io(format!(
                        "cannot move {} into place",
                        tmp.display()
                    )))?;
                } else {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
                out.push((resolved, fresh));
            }
            return Ok(out);
        }
        let tmp = work.join(format!(".tmp-resolve-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)
            .map_err(InstallError::io(format!("cannot create {}", tmp.display())))?;
        let report = tmp.join("report.json");
        let mut cmd = self.pip_command(source_builds);
        cmd.args(["--dry-run", "--ignore-installed", "--report"])
            .arg(&report);
        let lines: Vec<&str> = requirements.iter().map(|r| r.spec.as_str()).collect();
        let what = "pip install -r requirements.txt (resolving)";
        let result = self
            .run_installer(cmd, what, &tmp, Some(INSTALL_MEMORY), |cmd, scratch, _| {
                let file = scratch.join("requirements.txt");
                std::fs::write(&file, lines.join("\n") + "\n")?;
                cmd.arg("-r").arg(file);
                Ok(())
            })
            .await
            .and_then(|()| {
                read_report(&report).map_err(|why| InstallError::Unusable {
                    what: what.to_string(),
                    why,
                })
            });
        let _ = std::fs::remove_dir_all(&tmp);
        Ok(result?.into_iter().map(|p| (p, false)).collect())
    }

    /// Installs a Python package into `dir` as if nothing were cached:
    /// neither this store nor pip's download cache is used. Only for
    /// measuring what the install cache saves (`ProcConfig::caches`).
    pub async fn install_uncached(
        &self,
        pkg: &Package,
        dir: &Path,
        source_builds: bool,
    ) -> Result<Installed, InstallError> {
        std::fs::create_dir_all(dir)
            .map_err(InstallError::io(format!("cannot create {}", dir.display())))?;
        self.pip(pkg, dir, false, source_builds).await?;
        make_world_readable(dir);
        Ok(Installed {
            package: pkg.clone(),
            modules: python_modules(dir),
            path: dir.to_path_buf(),
            source_builds,
        })
    }

    /// `pip install` with what every use of it shares: quiet, no prompts,
    /// wheels only unless the function opted into source builds (a source
    /// distribution's build runs its code, in the install sandbox), from
    /// the node's index or offline wheels.
    fn pip_command(&self, source_builds: bool) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.python);
        cmd.args(["-m", "pip", "install", "--disable-pip-version-check"])
            .args([
                "--no-input",
                "--quiet",
                "--root-user-action=ignore",
                if source_builds {
                    "--prefer-binary"
                } else {
                    "--only-binary=:all:"
                },
            ]);
        if let Some(dir) = &self.offline {
            cmd.arg("--no-index").arg("--find-links").arg(dir);
        } else if let Some(url) = &self.registries.pip_index_url {
            cmd.arg("--index-url").arg(url);
            // pip ignores a plain-HTTP index unless told to trust it; the
            // operator named it.
            if let Some(rest) = url.strip_prefix("http://") {
                let host = rest.split(['/', ':']).next().unwrap_or_default();
                cmd.arg("--trusted-host").arg(host);
            }
        }
        cmd
    }

    /// Installs `pkg` alone into `target`; a locked hash must match the
    /// file pip fetches.
    async fn pip(
        &self,
        pkg: &Package,
        target: &Path,
        pip_cache: bool,
        source_builds: bool,
    ) -> Result<(), InstallError> {
        let mut cmd = self.pip_command(source_builds);
        cmd.arg("--no-deps").arg("--target").arg(target);
        // A sandboxed pip's cache would go with its root.
        if !pip_cache || self.sandbox.is_some() {
            cmd.arg("--no-cache-dir");
        }
        let (line, hashed) = match &pkg.hash {
            Some(hash) => (format!("{} --hash={hash}", pkg.spec(Runtime::Python)), true),
            None => (pkg.spec(Runtime::Python), false),
        };
        let what = format!("pip install {}", pkg.spec(Runtime::Python));
        self.run_installer(
            cmd,
            &what,
            target,
            Some(INSTALL_MEMORY),
            |cmd, scratch, _| {
                // A hash is an option of a requirements file's line.
                let file = scratch.join("requirements.txt");
                std::fs::write(&file, format!("{line}\n"))?;
                if hashed {
                    cmd.arg("--require-hashes");
                }
                cmd.arg("-r").arg(file);
                Ok(())
            },
        )
        .await
        .map_err(|e| match (e, &pkg.hash) {
            (InstallError::Failed { what, output }, Some(hash))
                if output.contains("Expected sha256") =>
            {
                InstallError::HashChanged {
                    what,
                    hash: hash.clone(),
                    output,
                }
            }
            (e, _) => e,
        })
    }

    /// Installs `name@range` into `target` and reads back what npm chose:
    /// the exact version, its integrity and the whole tree. With `tree`
    /// (a locked one), installs exactly that tree instead (`npm ci` of a
    /// lockfile made from it).
    async fn npm(
        &self,
        name: &str,
        range: &str,
        target: &Path,
        tree: Option<&NpmTree>,
    ) -> Result<Package, InstallError> {
        let spec = format!("{name}@{range}");
        let mut cmd = tokio::process::Command::new(&self.npm);
        match tree {
            Some(tree) => {
                let dependencies = serde_json::json!({ name: range });
                let mut packages = serde_json::Map::new();
                packages.insert(
                    String::new(),
                    serde_json::json!({ "dependencies": dependencies }),
                );
                packages.extend(tree.0.clone());
                let lockfile = serde_json::json!({
                    "name": "hearth-install",
                    "lockfileVersion": 3,
                    "requires": true,
                    "packages": packages,
                });
                let manifest = serde_json::json!({
                    "name": "hearth-install",
                    "dependencies": dependencies,
                });
                let write = |file: &str, v: &serde_json::Value| {
                    std::fs::write(target.join(file), v.to_string()).map_err(InstallError::io(
                        format!("npm ci {spec}: cannot write {file}"),
                    ))
                };
                write("package.json", &manifest)?;
                write("package-lock.json", &lockfile)?;
                cmd.args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"]);
            }
            None => {
                cmd.args([
                    "install",
                    "--no-save",
                    "--ignore-scripts",
                    "--no-audit",
                    "--no-fund",
                    "--no-package-lock",
                ]);
            }
        }
        cmd.args(["--loglevel=error", "--prefix"]).arg(target);
        if tree.is_none() {
            cmd.arg(&spec);
        }
        let offline_cache = self.offline.as_ref().map(|d| d.join("npm"));
        if offline_cache.is_some() {
            cmd.arg("--offline");
        } else if let Some(url) = &self.registries.npm_registry {
            cmd.arg("--registry").arg(url);
        }
        let what = match tree {
            Some(_) => format!("npm ci {spec}"),
            None => format!("npm install {spec}"),
        };
        self.run_installer(cmd, &what, target, None, |cmd, scratch, owner| {
            let cache = scratch.join("cache");
            match &offline_cache {
                Some(offline) if offline.is_dir() => link_tree(offline, &cache, owner)?,
                _ => make_dir_of(&cache, owner)?,
            }
            cmd.arg("--cache").arg(&cache);
            Ok(())
        })
        .await?;
        npm_installed(target, name).map_err(|why| InstallError::Unusable { what, why })
    }

    /// Runs installer `cmd`, which writes into `target`, with a scratch
    /// directory beside it (its home and temporary files) that `prepare`
    /// may fill first. Confined when the node is root (see the module's
    /// documentation); `address_space` caps what each of its processes
    /// may map.
    async fn run_installer(
        &self,
        mut cmd: tokio::process::Command,
        what: &str,
        target: &Path,
        address_space: Option<u64>,
        prepare: impl FnOnce(
            &mut tokio::process::Command,
            &Path,
            Option<(u32, u32)>,
        ) -> std::io::Result<()>,
    ) -> Result<(), InstallError> {
        // On disk beside the target: a download can be larger than a
        // root's scratch tmpfs.
        let mut scratch = target.as_os_str().to_owned();
        scratch.push("-scratch");
        let scratch = PathBuf::from(scratch);
        let owner = self.sandbox.as_ref().map(|s| (s.uid, s.gid));
        let mut held = Confinement::default();
        let ready = (|| {
            std::fs::create_dir_all(&scratch)?;
            if let Some((uid, gid)) = owner {
                chown_tree(target, uid, gid)?;
                chown_tree(&scratch, uid, gid)?;
            }
            prepare(&mut cmd, &scratch, owner)?;
            match &self.sandbox {
                Some(sandbox) => self.confine(
                    &mut cmd,
                    sandbox,
                    &scratch,
                    target,
                    address_space,
                    &mut held,
                ),
                None => Ok(()),
            }
        })();
        let result = match ready {
            Ok(()) => match tokio::time::timeout(INSTALL_TIME, run(cmd, what)).await {
                Ok(r) => r,
                Err(_) => Err(InstallError::TooLong {
                    what: what.to_string(),
                    seconds: INSTALL_TIME.as_secs(),
                }),
            },
            Err(source) => Err(InstallError::Sandbox {
                what: what.to_string(),
                source,
            }),
        };
        held.release(self.cgroups.get()).await;
        let _ = std::fs::remove_dir_all(&scratch);
        if owner.is_some() {
            // What it wrote becomes the node's again: sandboxes read it,
            // none may change it.
            chown_tree(target, 0, 0).map_err(InstallError::io(format!(
                "{what}: cannot give {} back to the node",
                target.display()
            )))?;
        }
        result
    }
}

/// Bytes of an installer's error output the node keeps: the tail its
/// error message quotes. The rest is read and dropped, so an installer
/// that floods its output costs the node nothing.
const KEPT_OUTPUT: usize = 4 << 10;

async fn run(mut cmd: tokio::process::Command, what: &str) -> Result<(), InstallError> {
    use tokio::io::AsyncReadExt;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| InstallError::Start {
        what: what.to_string(),
        source,
    })?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let mut tail = Vec::with_capacity(2 * KEPT_OUTPUT);
    let mut chunk = [0u8; 8192];
    let mut keep = |bytes: &[u8]| {
        tail.extend_from_slice(bytes);
        if tail.len() > 2 * KEPT_OUTPUT {
            tail.drain(..tail.len() - KEPT_OUTPUT);
        }
    };
    // Until it exits: a process it left behind may hold the pipe open.
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            read = stderr.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break child.wait().await,
                Ok(n) => keep(&chunk[..n]),
            },
        }
    };
    // What it wrote just before it exited, for a moment at most.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(100);
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, stderr.read(&mut chunk)).await
        && n > 0
    {
        keep(&chunk[..n]);
    }
    let status = status.map_err(InstallError::io(what))?;
    if status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&tail[tail.len().saturating_sub(KEPT_OUTPUT)..]);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines[lines.len().saturating_sub(3)..].join(" / ");
    Err(InstallError::Failed {
        what: what.to_string(),
        output: last,
    })
}

/// Whether what npm installed, `got`, is the locked package `want`: its
/// version, and its integrity and tree where the lock has them.
fn is_locked(want: &Package, got: &Package) -> Result<(), InstallError> {
    let spec = want.spec(Runtime::Node);
    let not = |what: String, why: String| Err(InstallError::Unusable { what, why });
    if got.version != want.version {
        return not(
            format!("npm install {spec}"),
            format!("npm installed version {}", got.version),
        );
    }
    if want.hash.is_some() && got.hash != want.hash {
        return not(
            format!("npm install {spec}"),
            format!(
                "the registry's file has integrity {}, not the locked {}",
                got.hash.as_deref().unwrap_or("(none)"),
                want.hash.as_deref().unwrap_or_default()
            ),
        );
    }
    if want.tree.is_some() && got.tree != want.tree {
        return not(
            format!("npm ci {spec}"),
            "what npm installed is not the locked tree".into(),
        );
    }
    Ok(())
}

/// The packages a `pip install --dry-run --report` would install.
fn read_report(path: &Path) -> Result<Vec<Package>, String> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_REPORT + 1).read_to_end(&mut text))
        .map_err(|e| format!("pip's resolution report: {e}"))?;
    if text.len() as u64 > MAX_REPORT {
        return Err(format!(
            "pip's resolution report is larger than {} MiB",
            MAX_REPORT >> 20
        ));
    }
    #[derive(serde::Deserialize)]
    struct Report {
        install: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        metadata: Metadata,
        download_info: serde_json::Value,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        name: String,
        version: String,
    }
    let report: Report =
        serde_json::from_slice(&text).map_err(|e| format!("pip's resolution report: {e}"))?;
    let packages: Vec<Package> = report
        .install
        .into_iter()
        .map(|i| {
            // `hashes` since pip 23.1; before, one `hash` as `algo=hex`.
            let archive = &i.download_info["archive_info"];
            let sha256 = archive["hashes"]["sha256"]
                .as_str()
                .or_else(|| archive["hash"].as_str()?.strip_prefix("sha256="))
                .map(|h| format!("sha256:{h}"));
            Package {
                name: hearth_host::deps::normalize_python_name(&i.metadata.name),
                version: i.metadata.version,
                hash: sha256,
                tree: None,
            }
        })
        .collect();
    let lock = hearth_host::deps::Lock::new(packages);
    lock.check(Runtime::Python)
        .map_err(|e| format!("pip resolved to something that cannot be locked: {e}"))?;
    Ok(lock.packages)
}

/// The version and integrity of the package `name` npm installed under
/// `prefix` (from npm's own record of the tree, `.package-lock.json`).
fn npm_installed(prefix: &Path, name: &str) -> Result<Package, String> {
    let modules = prefix.join("node_modules");
    let record: serde_json::Value = std::fs::read(modules.join(".package-lock.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let entry = &record["packages"][format!("node_modules/{name}")];
    let version = match entry["version"].as_str() {
        Some(v) => v.to_string(),
        None => {
            let manifest: serde_json::Value =
                std::fs::read(modules.join(name).join("package.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .ok_or("npm installed no package.json for it")?;
            manifest["version"]
                .as_str()
                .ok_or("its package.json names no version")?
                .to_string()
        }
    };
    let package = Package {
        name: name.to_string(),
        version,
        hash: entry["integrity"].as_str().map(str::to_string),
        // Without npm's record there is no tree to lock, only the version.
        tree: record
            .get("packages")
            .is_some()
            .then(|| NpmTree::from_npm(&record)),
    };
    let mut lock = hearth_host::deps::Lock::new(vec![package]);
    lock.check(Runtime::Node)
        .map_err(|e| format!("npm installed something that cannot be locked: {e}"))?;
    Ok(lock.packages.remove(0))
}

/// Makes directory `dir`, owned by `owner` when given.
fn make_dir_of(dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Makes `dst` a copy of the tree at `src` whose directories are new (and
/// `owner`'s) and whose files are hard links to `src`'s: the installer may
/// replace any file of its copy, and cannot write into the originals
/// (root's, not writable by others; a file others may write, or one on
/// another file system, is copied instead). Links in `src` are left out.
fn link_tree(src: &Path, dst: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    make_dir_of(dst, owner)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&from)?;
        if meta.is_dir() {
            link_tree(&from, &to, owner)?;
        } else if meta.is_file() {
            let shared = meta.permissions().mode() & 0o022 == 0;
            if !shared || std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to)?;
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o444))?;
            }
        }
    }
    Ok(())
}

/// Whether users other than the owner may list `dir` and every directory
/// in it and read every file (the sandbox's root binds `dir` itself, so
/// the directories above it do not matter).
fn readable_by_others(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    walk_tree(dir, &mut |path, meta| {
        let mode = meta.permissions().mode();
        let open = if meta.is_dir() {
            mode & 0o005 == 0o005
        } else {
            !meta.is_file() || mode & 0o004 != 0
        };
        if open {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "{} is not open to other users",
                path.display()
            )))
        }
    })
}

/// Calls `f` on `path` and everything below it, never following a link.
fn walk_tree(
    path: &Path,
    f: &mut dyn FnMut(&Path, &std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    f(path, &meta)?;
    if meta.is_dir() {
        for e in std::fs::read_dir(path)? {
            walk_tree(&e?.path(), f)?;
        }
    }
    Ok(())
}

/// Gives a directory tree (not following links) to `uid`/`gid`.
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    walk_tree(dir, &mut |p, _| {
        std::os::unix::fs::lchown(p, Some(uid), Some(gid))
    })
}

/// Sandboxes run as an unprivileged user: packages must be readable by all.
fn make_world_readable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = walk_tree(dir, &mut |p, meta| {
        if meta.file_type().is_symlink() {
            return Ok(());
        }
        let mode = meta.permissions().mode();
        let want = if meta.is_dir() {
            mode | 0o755
        } else {
            mode | 0o444
        };
        // One file that cannot be changed does not stop the others.
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(want));
        Ok(())
    });
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
