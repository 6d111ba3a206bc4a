//! The import cache (SOCK §4.2): a tree of Python zygotes.
//!
//! The root zygote is a Python interpreter with the helper loaded and
//! nothing else imported. A function whose requirements are the package set
//! `R` forks its handlers from the zygote whose imported set `Z` is the
//! largest with `Z ⊆ R`; never from one that imported a package the
//! function did not ask for (that package's import side effects would be
//! visible to it). When no zygote has exactly `R`, one is forked from the
//! best match and imports the rest, so the next handler of that set starts
//! with everything imported.
//!
//! Colocation (Hydra §4.1) decides who may fork from a zygote. The root
//! holds nothing and serves everyone. A zygote with packages belongs to a
//! [`Scope`]: in `full` mode one per package set serves every tenant; in
//! `tenant` mode (the default) each tenant gets its own; in `function`
//! mode each function; in `none` there are no package zygotes and every
//! handler forks from the root and imports its packages itself. A
//! function's zygote is looked for, and made, only within its scope.
//!
//! The tree also learns what handlers import (SOCK §4.2's import cache
//! imports what functions use, not only package names): a handler reports
//! the modules of its packages that loading it imported (`PIL.Image` where
//! the zygote imported `PIL`), and a zygote that lacks some is replaced,
//! in the background, by a child that imports them too — so the next
//! handler of that package set, another function's or the next version's,
//! starts with them imported. Zygotes that every tenant shares (`full`)
//! do not learn: one tenant's handler would choose what another's imports.
//!
//! Native libraries read some environment variables once, when they load
//! (OpenMP's and the BLAS libraries' thread counts: `OMP_NUM_THREADS`,
//! `OPENBLAS_NUM_THREADS`, …), which is when a zygote imports the package.
//! So a zygote imports with the function's values of those variables
//! ([`import_env`]) and serves only functions with the same values: a
//! function deployed with `--env OMP_NUM_THREADS=1` gets its own zygote.
//!
//! Eviction keeps the zygotes' memory within a budget; the one freed first
//! is the one whose benefit per byte is smallest: recent forks × import
//! time saved, divided by its proportional set size. The root stays.
//!
//! A package zygote runs a tenant's code (whatever its packages do when
//! imported), so when the node is root it is contained before it imports
//! anything ([`Containment`]): it is the sandbox user, in a user namespace
//! of its own with mount, PID, IPC, UTS and network namespaces, its whole
//! file system a lean root holding only its packages, under a seccomp
//! filter that is a handler's plus the calls that make a handler's
//! sandbox. Zygotes for functions that list hosts are kept apart from the
//! others: their filter lets internet sockets be made (which reach only
//! loopback and, from a handler, its egress proxy). Its handlers' roots,
//! which it cannot see, are sent to it as directory descriptors. The root
//! zygote imports no tenant's code and stays privileged to make the others.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use displaydoc::Display;
use serde_json::{Value, json};
use thiserror::Error;
use tokio::net::{UnixListener, UnixStream};

use hearth_core::Colocation;

use crate::container::Root;
use crate::install::Installed;
use crate::proto::{Frame, read_frame, send_fd, write_frame};
use hearth_host::deps::Package;

/// Why a zygote could not be started, asked or made.
#[derive(Debug, Display, Error)]
pub enum ZygoteError {
    /// cannot start {python}: {source}
    Start {
        python: PathBuf,
        source: std::io::Error,
    },
    /// the root zygote did not start: {0}
    RootDidNotStart(Box<ZygoteError>),
    /// {what}: {source}
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    /// zygote {pid} did not answer within 30 s
    NoAnswer { pid: i32 },
    /// zygote {pid}: {source}
    Broken { pid: i32, source: std::io::Error },
    /// {0}
    Refused(String),
    /// cannot build the zygote's root: {0}
    Root(std::io::Error),
    /// the new zygote did not {0} in time
    Late(&'static str),
    /// the new zygote's pid is unknown
    NoPid,
    /// the new zygote ended while importing ({0}): a package crashed it, or took more than the zygotes' memory limit
    DiedImporting(std::io::Error),
    /// zygote {pid} was retired (replaced or evicted) before it was asked
    Retired { pid: i32 },
    /// zygote {pid} had stopped answering before it was asked
    BrokenBefore { pid: i32 },
}

impl ZygoteError {
    fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ZygoteError {
        move |source| ZygoteError::Io { what, source }
    }
}

/// Who may fork from a package zygote.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(tag = "shared_by", content = "of", rename_all = "snake_case")]
pub enum Scope {
    /// Any function of any tenant (`full`).
    Anyone,
    /// The named tenant's functions (`tenant`).
    Tenant(String),
    /// One function, `tenant/name` (`function`).
    Function(String),
}

impl Scope {
    /// The scope a function's zygote has under `mode`; `None` when the
    /// mode allows no shared runtime (`none`: fork from the root).
    pub fn for_function(mode: Colocation, tenant: &str, name: &str) -> Option<Scope> {
        match mode {
            Colocation::Full => Some(Scope::Anyone),
            Colocation::Tenant => Some(Scope::Tenant(tenant.to_string())),
            Colocation::Function => Some(Scope::Function(format!("{tenant}/{name}"))),
            Colocation::None => None,
        }
    }
}

/// Prefixes of the environment variables native libraries read when they
/// load: OpenMP (GNU and Intel), MKL, OpenBLAS, GotoBLAS, BLIS, numexpr,
/// Accelerate.
pub const IMPORT_ENV_PREFIXES: [&str; 8] = [
    "OMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO_",
    "BLIS_",
    "NUMEXPR_",
    "VECLIB_",
];

/// The part of a function's environment its packages' native libraries
/// read at import: what its zygote must import with.
pub fn import_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, _)| IMPORT_ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Most modules a zygote learns from its handlers, beyond its packages.
const MAX_LEARNED: usize = 256;

/// Most modules one handler's report may add.
const MAX_REPORTED: usize = 64;

/// One zygote, for `hearth status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ZygoteStatus {
    pub pid: i32,
    pub packages: usize,
    /// Modules it imported because its handlers did (`PIL.Image`).
    pub learned: usize,
    pub pss_bytes: u64,
    pub forks: u64,
    /// `None` for the root, which holds nothing and serves everyone.
    pub scope: Option<Scope>,
    /// Whether it may open internet sockets (for functions with allowed hosts).
    pub network: bool,
    /// Whether it runs contained (see the module's documentation).
    pub contained: bool,
}

/// One zygote process and the channel the node commands it through.
#[derive(Debug)]
pub struct Zygote {
    pub id: u64,
    pub pid: i32,
    pub packages: BTreeSet<Package>,
    /// `None` only for the root.
    pub scope: Option<Scope>,
    /// Import paths (install-cache directories) the zygote has on sys.path.
    pub paths: Vec<PathBuf>,
    /// The environment it imported with ([`import_env`]); empty for the root.
    pub env: BTreeMap<String, String>,
    /// Modules it imported beyond its packages' own, learned from the
    /// handlers of the zygote it replaced.
    pub learned: BTreeSet<String>,
    /// Set once a child that imports more is being made to replace it.
    replacing: std::sync::atomic::AtomicBool,
    /// Set when it is retired: it takes no more commands.
    retired: std::sync::atomic::AtomicBool,
    /// Set when a command found it dead or got no answer: its channel is
    /// closed or out of step, so it takes no more commands either.
    broken: std::sync::atomic::AtomicBool,
    /// How long importing its packages took (what a fork from it saves).
    pub import_ms: u64,
    /// Made for functions with allowed hosts: its filter lets internet
    /// sockets be made (they reach its own loopback and, from a handler,
    /// the egress proxy). The root serves both kinds.
    pub network: bool,
    /// Its lean root, when it is contained.
    root: Option<Root>,
    control: tokio::sync::Mutex<UnixStream>,
    forks: AtomicU64,
    last_fork: Mutex<Instant>,
    /// The root zygote is our child; dropping this kills it.
    _child: Option<tokio::process::Child>,
}

impl Zygote {
    /// Sends one command and waits for its reply (one at a time).
    pub async fn command(&self, header: Value) -> Result<Value, ZygoteError> {
        self.command_with_dir(header, None).await
    }

    /// Sends one command with the directory `dir` as a descriptor (a
    /// sandbox's root, which a contained zygote cannot see by its path).
    pub async fn command_with_dir(
        &self,
        mut header: Value,
        dir: Option<&Path>,
    ) -> Result<Value, ZygoteError> {
        let dir = dir
            .map(std::fs::File::open)
            .transpose()
            .map_err(ZygoteError::io("cannot open the sandbox root"))?;
        if dir.is_some() {
            header["fds"] = json!(1);
        }
        let mut control = self.control.lock().await;
        // A caller that chose this zygote before it was retired is told so
        // (and chooses again) instead of writing to a zygote on its way out.
        if self.is_retired() {
            return Err(ZygoteError::Retired { pid: self.pid });
        }
        if self.is_broken() {
            return Err(ZygoteError::BrokenBefore { pid: self.pid });
        }
        let exchange = async {
            write_frame(&mut *control, &header, &[]).await?;
            if let Some(dir) = &dir {
                use std::os::fd::AsFd;
                send_fd(&control, dir.as_fd()).await?;
            }
            read_frame(&mut *control, 1 << 20).await
        };
        let answered = tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .map_err(|_| ZygoteError::NoAnswer { pid: self.pid })
            .and_then(|read| {
                read.map_err(|source| ZygoteError::Broken {
                    pid: self.pid,
                    source,
                })
            });
        let Frame { header, .. } = answered.inspect_err(|_| {
            self.broken.store(true, Ordering::Release);
        })?;
        if let Some(err) = header.get("error").and_then(Value::as_str) {
            return Err(ZygoteError::Refused(err.to_string()));
        }
        Ok(header)
    }

    /// Notes a fork from this zygote (for eviction).
    pub fn used(&self) {
        self.forks.fetch_add(1, Ordering::Relaxed);
        *self.last_fork.lock() = Instant::now();
    }

    /// Proportional set size in bytes (shared pages split among sharers).
    pub fn pss_bytes(&self) -> u64 {
        pss_bytes(self.pid)
    }

    fn kill(&self) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    /// Whether it was retired: it takes no more commands.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Whether a command found it dead or unanswering (a package's code
    /// ended it, the kernel killed it): it takes no more commands.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Whether it ended while still serving: a command found it broken,
    /// or its channel is at end-of-file between commands (a zygote never
    /// writes unasked, and its files close as it exits). A retired zygote
    /// closes its channel on purpose, and is not counted.
    pub fn has_ended(&self) -> bool {
        if self.is_broken() {
            return true;
        }
        if self.is_retired() {
            return false;
        }
        let Ok(control) = self.control.try_lock() else {
            return false; // a command is being answered
        };
        use rustix::net::{RecvFlags, recv};
        let mut byte = [0u8; 1];
        let ended = match recv(&*control, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Ok((0, _)) => true,
            Ok(_) => false,
            Err(e) => e != rustix::io::Errno::AGAIN,
        };
        if ended {
            self.broken.store(true, Ordering::Release);
        }
        ended
    }

    /// Whether its handlers ended with it: a contained zygote is PID 1 of
    /// its handlers' PID namespace, and the kernel kills them as it exits
    /// (a paused one as soon as it is thawed).
    pub fn took_its_handlers(&self) -> bool {
        self.root.is_some() && self.has_ended()
    }

    /// Stops it serving. A contained zygote is PID 1 of its namespace and
    /// its handlers would die with it: it is asked to leave once they have.
    ///
    /// It is told only between commands: the signal waits for the command
    /// channel, so a command already being answered (a fork) completes,
    /// and any command after it is refused as [`ZygoteError::Retired`]
    /// without reaching the zygote. (Signalled in the middle of a reply,
    /// a zygote died and its fork failed with a broken pipe.)
    fn retire(self: &Arc<Self>) {
        self.retired.store(true, Ordering::Release);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let this = self.clone();
                runtime.spawn(async move {
                    let _between_commands = this.control.lock().await;
                    this.ask_to_leave();
                });
            }
            Err(_) => self.ask_to_leave(),
        }
    }

    /// SIGTERM to a contained zygote (it leaves once its handlers have),
    /// SIGKILL to any other.
    fn ask_to_leave(&self) {
        if self.root.is_some() {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
        } else {
            self.kill();
        }
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // Its namespace keeps its own copy of the mounts for as long as it
        // lives; the node's copy goes now.
        if let Some(root) = &mut self.root {
            root.destroy();
        }
    }
}

/// PSS of a process, from `/proc/<pid>/smaps_rollup`.
pub fn pss_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Settings for the zygote tree.
#[derive(Debug, Clone)]
pub struct ZygoteConfig {
    pub python: PathBuf,
    pub helper: PathBuf,
    /// Where the node listens for new zygotes to connect.
    pub run_dir: PathBuf,
    pub memory_budget_bytes: u64,
    /// How to contain package zygotes; `None` when the node is not root
    /// (then they run as the node's user, like its sandboxes).
    pub contain: Option<Containment>,
}

/// What a contained zygote is made of.
#[derive(Clone)]
pub struct Containment {
    /// Gives a generic lean root (system files, helpers, scratch) for it:
    /// the process tier's pool of roots built ahead of time.
    pub roots: Arc<dyn Fn() -> std::io::Result<Root> + Send + Sync>,
    /// The sandbox user and group it becomes.
    pub uid: u32,
    pub gid: u32,
}

impl std::fmt::Debug for Containment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Containment")
            .field("uid", &self.uid)
            .field("gid", &self.gid)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub struct ZygoteTree {
    config: ZygoteConfig,
    zygotes: Mutex<Vec<Arc<Zygote>>>,
    next_id: AtomicU64,
    /// One zygote creation at a time, so two functions with the same new
    /// package set do not build it twice.
    creating: tokio::sync::Mutex<()>,
}

impl ZygoteTree {
    /// Starts the root zygote.
    pub async fn start(config: ZygoteConfig) -> Result<ZygoteTree, ZygoteError> {
        std::fs::create_dir_all(&config.run_dir)
            .map_err(ZygoteError::io("cannot create the zygotes' run directory"))?;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(ZygoteError::io("cannot make the root zygote's socket"))?;
        let mut cmd = tokio::process::Command::new(&config.python);
        // -I: ignore PYTHON* variables and the user's site; -S: no site
        // packages at all: a function sees only the packages it asked for.
        cmd.arg("-I").arg("-S").arg(&config.helper).arg("zygote");
        cmd.env_clear()
            .env("PYTHONHASHSEED", "0")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            // Not the daemon's own stdout/stderr: every sandbox descends from
            // this process, and if the daemon is killed outright a frozen
            // orphan holding the daemon's pipes would keep whoever reads
            // them (a terminal's pager, a test runner) waiting forever.
            // What the tree writes to stderr goes to the daemon's log.
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        use std::os::fd::AsRawFd;
        let fd = theirs.as_raw_fd();
        // SAFETY: dup2 is async-signal-safe; `fd` stays open until spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|source| ZygoteError::Start {
            python: config.python.clone(),
            source,
        })?;
        drop(theirs);
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(target: "hearth_proc::zygote", "{line}");
                }
            });
        }
        let control = ours
            .set_nonblocking(true)
            .and_then(|()| UnixStream::from_std(ours))
            .map_err(ZygoteError::io("cannot use the root zygote's socket"))?;
        let pid = child.id().unwrap_or(0) as i32;
        let root = Arc::new(Zygote {
            id: 0,
            pid,
            packages: BTreeSet::new(),
            scope: None,
            paths: Vec::new(),
            env: BTreeMap::new(),
            learned: BTreeSet::new(),
            replacing: Default::default(),
            retired: Default::default(),
            broken: Default::default(),
            import_ms: 0,
            network: false,
            root: None,
            control: tokio::sync::Mutex::new(control),
            forks: AtomicU64::new(0),
            last_fork: Mutex::new(Instant::now()),
            _child: Some(child),
        });
        root.command(json!({"op": "ping"}))
            .await
            .map_err(|e| ZygoteError::RootDidNotStart(Box::new(e)))?;
        Ok(ZygoteTree {
            config,
            zygotes: Mutex::new(vec![root]),
            next_id: AtomicU64::new(1),
            creating: tokio::sync::Mutex::new(()),
        })
    }

    pub fn root(&self) -> Arc<Zygote> {
        self.zygotes.lock()[0].clone()
    }

    /// The best zygote in `scope` for a function needing `installed`
    /// (with internet sockets if `network`), making one with exactly that
    /// set when none exists yet. Falls back to the best existing match if
    /// a new zygote cannot be made.
    pub async fn for_packages(
        &self,
        installed: &[Installed],
        scope: &Scope,
        network: bool,
        env: &BTreeMap<String, String>,
    ) -> Arc<Zygote> {
        let want: BTreeSet<Package> = installed.iter().map(|i| i.package.clone()).collect();
        let exact = |z: &Zygote| {
            z.packages == want
                && (z.id == 0
                    || (z.scope.as_ref() == Some(scope) && z.network == network && z.env == *env))
        };
        let best = self.best(&want, scope, network, env);
        if exact(&best) {
            return best;
        }
        let _one = self.creating.lock().await;
        let best = self.best(&want, scope, network, env);
        if exact(&best) {
            return best;
        }
        match self
            .fork_child(&best, installed, scope, network, env, &BTreeSet::new())
            .await
        {
            Ok(z) => {
                self.zygotes.lock().push(z.clone());
                self.evict(Some(z.id));
                z
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not make a zygote; forking from a smaller one");
                best
            }
        }
    }

    /// The zygote in `scope` (and of `network`, imported with `env`) with
    /// the most packages, all of them in `want`; the root if there is none.
    pub fn best(
        &self,
        want: &BTreeSet<Package>,
        scope: &Scope,
        network: bool,
        env: &BTreeMap<String, String>,
    ) -> Arc<Zygote> {
        let zygotes = self.zygotes.lock();
        zygotes
            .iter()
            .filter(|z| {
                z.scope.as_ref() == Some(scope)
                    && z.network == network
                    && z.env == *env
                    && z.packages.is_subset(want)
            })
            .max_by_key(|z| z.packages.len())
            .cloned()
            .unwrap_or_else(|| zygotes[0].clone())
    }

    /// Notes that a handler forked from `zygote` for the packages
    /// `installed` imported `reported` while loading. Modules of those
    /// packages that the zygote lacks are imported by a child of it that
    /// then takes its place (see the module's documentation).
    pub async fn learn(&self, zygote: &Arc<Zygote>, installed: &[Installed], reported: &[String]) {
        let Some(scope) = zygote.scope.clone() else {
            return;
        };
        let packages: BTreeSet<Package> = installed.iter().map(|i| i.package.clone()).collect();
        if scope == Scope::Anyone || zygote.packages != packages {
            return;
        }
        let tops: BTreeSet<&str> = installed
            .iter()
            .flat_map(|i| i.modules.iter().map(String::as_str))
            .collect();
        let new: Vec<&String> = reported
            .iter()
            .filter(|m| is_module_name(m))
            .filter(|m| tops.contains(m.split('.').next().unwrap_or_default()))
            .filter(|m| !tops.contains(m.as_str()) && !zygote.learned.contains(*m))
            .take(MAX_REPORTED)
            .collect();
        if new.is_empty()
            || zygote.learned.len() + new.len() > MAX_LEARNED
            || zygote.replacing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let _one = self.creating.lock().await;
        if !self.zygotes.lock().iter().any(|z| Arc::ptr_eq(z, zygote)) {
            return; // evicted meanwhile
        }
        let mut learned = zygote.learned.clone();
        learned.extend(new.into_iter().cloned());
        match self
            .fork_child(
                zygote,
                installed,
                &scope,
                zygote.network,
                &zygote.env,
                &learned,
            )
            .await
        {
            Ok(child) => {
                let mut zygotes = self.zygotes.lock();
                match zygotes.iter().position(|z| Arc::ptr_eq(z, zygote)) {
                    Some(i) => zygotes[i] = child.clone(),
                    None => {
                        child.retire();
                        return;
                    }
                }
                drop(zygotes);
                tracing::info!(replaced = zygote.id, zygote = child.id, learned = ?child.learned, "zygote learned its handlers' imports");
                zygote.retire();
                self.evict(Some(child.id));
            }
            Err(e) => tracing::warn!(error = %e, "a zygote could not learn its handlers' imports"),
        }
    }

    /// Forks from `parent` a zygote for `installed` that imports the
    /// packages `parent` lacks, then the modules in `learned`, with `env`
    /// set first.
    async fn fork_child(
        &self,
        parent: &Zygote,
        installed: &[Installed],
        scope: &Scope,
        network: bool,
        env: &BTreeMap<String, String>,
        learned: &BTreeSet<String>,
    ) -> Result<Arc<Zygote>, ZygoteError> {
        let started = Instant::now();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let new: Vec<&Installed> = installed
            .iter()
            .filter(|i| !parent.packages.contains(&i.package))
            .collect();
        let paths: Vec<PathBuf> = installed.iter().map(|i| i.path.clone()).collect();
        let modules: Vec<&String> = new
            .iter()
            .flat_map(|i| &i.modules)
            .chain(learned.iter().filter(|m| !parent.learned.contains(*m)))
            .collect();
        let mut header = json!({
            "op": "fork_zygote",
            "paths": paths,
            "modules": modules,
            "env": env,
        });
        // Contained, it connects from inside its root; otherwise through
        // the run directory.
        let root = match &self.config.contain {
            Some(c) => {
                let mut root = (c.roots)().map_err(ZygoteError::Root)?;
                if let Err(e) = root.attach(None, &paths) {
                    root.destroy();
                    return Err(ZygoteError::Root(e));
                }
                header["contain"] = json!(true);
                header["root"] = json!(root.path);
                header["uid"] = json!(c.uid);
                header["gid"] = json!(c.gid);
                header["seccomp"] = json!(crate::seccomp::zygote_filter_name(network));
                header["pivot_root_nr"] = json!(libc::SYS_pivot_root);
                Some(root)
            }
            None => None,
        };
        let (listen_at, connect) = match &root {
            Some(root) => (
                root.host_path("/tmp/zygote.sock"),
                "/tmp/zygote.sock".into(),
            ),
            None => {
                let path = self.config.run_dir.join(format!("z{id}.sock"));
                let shown = path.display().to_string();
                (path, shown)
            }
        };
        header["connect"] = json!(connect);
        let made = async {
            let _ = std::fs::remove_file(&listen_at);
            let listener = UnixListener::bind(&listen_at)
                .map_err(ZygoteError::io("cannot listen for the new zygote"))?;
            if root.is_some() {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&listen_at, std::fs::Permissions::from_mode(0o777))
                    .map_err(ZygoteError::io("cannot open the new zygote's socket to it"))?;
            }
            parent
                .command_with_dir(header, root.as_ref().map(|r| r.path.as_path()))
                .await?;
            let (mut stream, _) = tokio::time::timeout(Duration::from_secs(120), listener.accept())
                .await
                .map_err(|_| ZygoteError::Late("connect"))?
                .map_err(ZygoteError::io("cannot accept the new zygote"))?;
            // Its pid as this node sees it (a contained zygote is PID 1 of
            // its own namespace, and its parent may be in another).
            let pid = stream
                .peer_cred()
                .ok()
                .and_then(|c| c.pid())
                .ok_or(ZygoteError::NoPid)?;
            let ready = tokio::time::timeout(Duration::from_secs(300), read_frame(&mut stream, 0))
                .await
                .map_err(|_| ZygoteError::Late("finish importing"))?
                .map_err(ZygoteError::DiedImporting)?;
            Ok::<_, ZygoteError>((stream, pid, ready))
        }
        .await;
        let _ = std::fs::remove_file(&listen_at);
        let (stream, pid, ready) = match made {
            Ok(made) => made,
            Err(e) => {
                if let Some(mut root) = root {
                    root.destroy();
                }
                return Err(e);
            }
        };
        if let Some(failed) = ready.header.get("failed").and_then(Value::as_array)
            && !failed.is_empty()
        {
            tracing::warn!(?failed, "a zygote could not import some modules");
        }
        parent.used();
        let z = Zygote {
            id,
            pid,
            packages: installed.iter().map(|i| i.package.clone()).collect(),
            scope: Some(scope.clone()),
            paths,
            env: env.clone(),
            learned: learned.clone(),
            replacing: Default::default(),
            retired: Default::default(),
            broken: Default::default(),
            import_ms: started.elapsed().as_millis() as u64,
            network,
            root,
            control: tokio::sync::Mutex::new(stream),
            forks: AtomicU64::new(0),
            last_fork: Mutex::new(Instant::now()),
            _child: None,
        };
        tracing::info!(
            zygote = id,
            pid,
            packages = ?z.packages.iter().map(|p| p.spec(hearth_core::Runtime::Python)).collect::<Vec<_>>(),
            import_ms = z.import_ms,
            scope = ?z.scope,
            contained = z.root.is_some(),
            "zygote ready"
        );
        Ok(Arc::new(z))
    }

    /// Frees zygotes until their memory is within the budget; never
    /// `keep` (the one just made, about to be forked from, however large).
    pub fn evict(&self, keep: Option<u64>) {
        let mut zygotes = self.zygotes.lock();
        loop {
            let total: u64 = zygotes.iter().map(|z| z.pss_bytes()).sum();
            if total <= self.config.memory_budget_bytes || zygotes.len() <= 1 {
                return;
            }
            let now = Instant::now();
            let victim = (1..zygotes.len())
                .filter(|&i| Some(zygotes[i].id) != keep)
                .min_by(|&a, &b| {
                    benefit_per_byte(&zygotes[a], now)
                        .total_cmp(&benefit_per_byte(&zygotes[b], now))
                });
            let Some(i) = victim else { return };
            let z = zygotes.remove(i);
            tracing::info!(zygote = z.id, "zygote evicted (import cache over budget)");
            z.retire();
        }
    }

    /// Takes `zygote` out of the tree if a command found it broken, so
    /// the next choice forks from another (or makes a new one); whether it
    /// was. The root stays: the others are forked from it.
    pub fn drop_broken(&self, zygote: &Arc<Zygote>) -> bool {
        if !zygote.is_broken() || zygote.id == 0 {
            return false;
        }
        let mut zygotes = self.zygotes.lock();
        if let Some(i) = zygotes.iter().position(|z| Arc::ptr_eq(z, zygote)) {
            zygotes.remove(i);
            tracing::warn!(
                zygote = zygote.id,
                pid = zygote.pid,
                "zygote dropped: it died or stopped answering"
            );
        }
        drop(zygotes);
        zygote.retire();
        true
    }

    /// Every zygote, for status.
    pub fn describe(&self) -> Vec<ZygoteStatus> {
        self.zygotes
            .lock()
            .iter()
            .map(|z| ZygoteStatus {
                pid: z.pid,
                packages: z.packages.len(),
                learned: z.learned.len(),
                pss_bytes: z.pss_bytes(),
                forks: z.forks.load(Ordering::Relaxed),
                scope: z.scope.clone(),
                network: z.network,
                contained: z.root.is_some(),
            })
            .collect()
    }

    pub fn run_dir(&self) -> &Path {
        &self.config.run_dir
    }
}

impl ZygoteTree {
    /// Kills every zygote (their sandboxes are killed through their cgroups).
    pub fn shutdown(&self) {
        for z in self.zygotes.lock().iter() {
            z.kill();
        }
    }
}

impl Drop for ZygoteTree {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A dotted Python module name (`PIL.Image`), not too long: what a
/// handler reports is checked before a zygote imports it.
fn is_module_name(name: &str) -> bool {
    name.len() <= 128
        && name.split('.').all(|part| {
            part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// Benefit of keeping a zygote per byte it costs: forks it served, decayed
/// by idleness (halving every minute), times the import time each saves.
fn benefit_per_byte(z: &Zygote, now: Instant) -> f64 {
    let idle_min = now.duration_since(*z.last_fork.lock()).as_secs_f64() / 60.0;
    let recent = (z.forks.load(Ordering::Relaxed) as f64 + 1.0) * 0.5f64.powf(idle_min);
    recent * (z.import_ms.max(1) as f64) / (z.pss_bytes().max(1) as f64)
}

#[cfg(test)]
mod tests {
    /// The node retires a contained zygote between commands, but Python
    /// runs the SIGTERM handler at its next bytecode, which can be inside
    /// `send_frame` with the reply's bytes gone. Here the signal lands
    /// exactly there: the zygote must still leave through `exit()` (code
    /// 0, waiting for its children when it is their namespace's PID 1),
    /// not die of an uncaught `Retire` — which, as PID 1, would take the
    /// zygote that replaced it with it.
    #[test]
    fn a_retirement_landing_as_a_reply_is_sent_leaves_through_exit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("helper.py"), crate::HELPER_PY).unwrap();
        let script = r#"
import os, signal, socket, sys
sys.path.insert(0, sys.argv[1])
import helper
node, zygote_end = socket.socketpair()
sent = helper.send_frame
def then_retired(sock, header, body=b""):
    sent(sock, header, body)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):
        pass  # the handler runs here, inside send_frame
helper.send_frame = then_retired
signal.signal(signal.SIGTERM, helper._retire)
pid = os.fork()
if pid == 0:
    node.close()
    helper.Zygote(zygote_end, {}).serve()
    os._exit(3)
zygote_end.close()
sent(node, {"op": "ping"})
header, _ = helper.recv_frame(node)
assert header["pid"] == pid, header
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"#;
        let out = std::process::Command::new("python3")
            .args(["-I", "-c", script])
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "0",
            "the zygote did not leave through exit(): {stderr}"
        );
    }
}
