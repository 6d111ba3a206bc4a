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
//! install scripts (`--ignore-scripts`). A package's import-time code runs
//! in a contained zygote (see `zygote.rs`).
//!
//! When the node is root, pip itself runs in a sandbox of its own
//! ([`InstallSandbox`]): chrooted into a root holding the system files,
//! the host's `/etc` (to resolve and verify the index) and nothing else
//! of the host but the install's own directories (its target and a
//! scratch beside it, writable) and the offline wheels (read-only); as
//! the sandbox user, with `no_new_privs`, an address-space limit and a
//! time limit. So what pip parses from an index
//! is parsed without root and out of reach of the node's data. npm still
//! runs as the daemon's user (its offline cache lives in the daemon's home).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_core::Runtime;

use crate::bundle::Package;
use crate::container::{Base, Root};

/// How pip is confined when the node is root.
#[derive(Debug, Clone)]
pub struct InstallSandbox {
    /// The system trees of its root.
    pub base: Base,
    /// Where its roots are made.
    pub run_dir: PathBuf,
    /// The sandbox user and group it runs as.
    pub uid: u32,
    pub gid: u32,
}

/// Address space pip may map (it is Python: this bounds its memory).
const INSTALL_ADDRESS_SPACE: u64 = 2 << 30;
/// How long one install may take.
const INSTALL_TIME: Duration = Duration::from_secs(600);

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
    sandbox: Option<InstallSandbox>,
    next_root: AtomicU64,
    /// One install at a time per package; others wait and then find it.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl InstallCache {
    pub fn new(
        dir: PathBuf,
        python: PathBuf,
        offline: Option<PathBuf>,
        sandbox: Option<InstallSandbox>,
    ) -> std::io::Result<Self> {
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
        if let (Some(sandbox), Some(offline)) = (&sandbox, &offline) {
            readable_by_others(offline).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "--offline-packages {}: {e}; installs run as the sandbox user (uid {}), \
                         who must be able to read the directory and its wheels \
                         (chmod o+rx on it, o+r on its files)",
                        offline.display(),
                        sandbox.uid
                    ),
                )
            })?;
        }
        Ok(InstallCache {
            dir,
            python,
            offline,
            sandbox,
            next_root: AtomicU64::new(0),
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
        let what = format!("pip install {}", pkg.spec(Runtime::Python));
        let Some(sandbox) = &self.sandbox else {
            return run(cmd, &what).await;
        };
        let n = self.next_root.fetch_add(1, Ordering::Relaxed);
        let path = sandbox.run_dir.join("sb").join(format!("i{n}"));
        let readable: Vec<PathBuf> = self.offline.iter().cloned().collect();
        // pip's downloads and unpacking, on disk beside the target (a wheel
        // can be larger than the root's scratch tmpfs); it caches nothing,
        // the cache would go with the root.
        let mut scratch = target.as_os_str().to_owned();
        scratch.push("-scratch");
        let scratch = PathBuf::from(scratch);
        cmd.arg("--no-cache-dir");
        let confined = (|| {
            std::fs::create_dir_all(&scratch)?;
            chown_tree(target, sandbox.uid, sandbox.gid)?;
            chown_tree(&scratch, sandbox.uid, sandbox.gid)?;
            let writable = [target, scratch.as_path()];
            let root = Root::build_for_install(&path, &sandbox.base, &writable, &readable)?;
            confine(&mut cmd, &root.path, sandbox.uid, sandbox.gid, &scratch)?;
            Ok::<_, std::io::Error>(root)
        })();
        let mut root = match confined {
            Ok(root) => root,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&scratch);
                return Err(format!("{what}: could not make its sandbox: {e}"));
            }
        };
        let result = match tokio::time::timeout(INSTALL_TIME, run(cmd, &what)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "{what} took more than {} s",
                INSTALL_TIME.as_secs()
            )),
        };
        root.destroy();
        let _ = std::fs::remove_dir_all(&scratch);
        // What pip wrote becomes the node's again: sandboxes read it, none
        // may change it.
        chown_tree(target, 0, 0).map_err(|e| format!("{what}: {e}"))?;
        result
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

/// Makes `cmd` start chrooted into `root` as `uid`/`gid`, with no
/// supplementary groups, `no_new_privs`, [`INSTALL_ADDRESS_SPACE`] and an
/// environment of its own, whose home and temporary files are `scratch`.
fn confine(
    cmd: &mut tokio::process::Command,
    root: &Path,
    uid: u32,
    gid: u32,
    scratch: &Path,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let root = std::ffi::CString::new(root.as_os_str().as_bytes())?;
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", scratch)
        .env("TMPDIR", scratch)
        .env("LANG", "C.UTF-8");
    let fail = || Err(std::io::Error::last_os_error());
    // SAFETY: between fork and exec the closure makes only system calls
    // (async-signal-safe) on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                return fail();
            }
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return fail();
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return fail();
            }
            let limit = libc::rlimit {
                rlim_cur: INSTALL_ADDRESS_SPACE,
                rlim_max: INSTALL_ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return fail();
            }
            Ok(())
        });
    }
    Ok(())
}

/// Whether users other than the owner may list `dir` and read its files
/// (the sandbox's root binds `dir` itself, so the directories above it do
/// not matter).
fn readable_by_others(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode())
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    if mode(dir)? & 0o005 != 0o005 {
        return Err(format!("{} is not open to other users", dir.display()));
    }
    for e in std::fs::read_dir(dir).map_err(|e| e.to_string())?.flatten() {
        let path = e.path();
        if path.is_file() && mode(&path)? & 0o004 == 0 {
            return Err(format!("{} is not readable by other users", path.display()));
        }
    }
    Ok(())
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
