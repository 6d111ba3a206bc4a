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
//! Eviction keeps the zygotes' memory within a budget; the one freed first
//! is the one whose benefit per byte is smallest: recent forks × import
//! time saved, divided by its proportional set size. The root stays.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{UnixListener, UnixStream};

use hearth_core::Colocation;

use crate::bundle::Package;
use crate::install::Installed;
use crate::proto::{Frame, read_frame, write_frame};

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

/// One zygote, for `hearth status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ZygoteStatus {
    pub pid: i32,
    pub packages: usize,
    pub pss_bytes: u64,
    pub forks: u64,
    /// `None` for the root, which holds nothing and serves everyone.
    pub scope: Option<Scope>,
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
    /// How long importing its packages took (what a fork from it saves).
    pub import_ms: u64,
    control: tokio::sync::Mutex<UnixStream>,
    forks: AtomicU64,
    last_fork: Mutex<Instant>,
    /// The root zygote is our child; dropping this kills it.
    _child: Option<tokio::process::Child>,
}

impl Zygote {
    /// Sends one command and waits for its reply (one at a time).
    pub async fn command(&self, header: Value) -> Result<Value, String> {
        let mut control = self.control.lock().await;
        let exchange = async {
            write_frame(&mut *control, &header, &[]).await?;
            read_frame(&mut *control, 1 << 20).await
        };
        let Frame { header, .. } = tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .map_err(|_| format!("zygote {} did not answer", self.pid))?
            .map_err(|e| format!("zygote {}: {e}", self.pid))?;
        if let Some(err) = header.get("error").and_then(Value::as_str) {
            return Err(err.to_string());
        }
        Ok(header)
    }

    /// Notes a fork from this zygote (for eviction).
    pub fn used(&self) {
        self.forks.fetch_add(1, Ordering::Relaxed);
        *self.last_fork.lock().unwrap() = Instant::now();
    }

    /// Proportional set size in bytes (shared pages split among sharers).
    pub fn pss_bytes(&self) -> u64 {
        pss_bytes(self.pid)
    }

    fn kill(&self) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
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
    pub async fn start(config: ZygoteConfig) -> Result<ZygoteTree, String> {
        std::fs::create_dir_all(&config.run_dir).map_err(|e| e.to_string())?;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(|e| e.to_string())?;
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
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", config.python.display()))?;
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
        ours.set_nonblocking(true).map_err(|e| e.to_string())?;
        let control = UnixStream::from_std(ours).map_err(|e| e.to_string())?;
        let pid = child.id().unwrap_or(0) as i32;
        let root = Arc::new(Zygote {
            id: 0,
            pid,
            packages: BTreeSet::new(),
            scope: None,
            paths: Vec::new(),
            import_ms: 0,
            control: tokio::sync::Mutex::new(control),
            forks: AtomicU64::new(0),
            last_fork: Mutex::new(Instant::now()),
            _child: Some(child),
        });
        root.command(json!({"op": "ping"}))
            .await
            .map_err(|e| format!("the root zygote did not start: {e}"))?;
        Ok(ZygoteTree {
            config,
            zygotes: Mutex::new(vec![root]),
            next_id: AtomicU64::new(1),
            creating: tokio::sync::Mutex::new(()),
        })
    }

    pub fn root(&self) -> Arc<Zygote> {
        self.zygotes.lock().unwrap()[0].clone()
    }

    /// The best zygote in `scope` for a function needing `installed`,
    /// making one with exactly that set when none exists yet. Falls back to
    /// the best existing match if a new zygote cannot be made.
    pub async fn for_packages(&self, installed: &[Installed], scope: &Scope) -> Arc<Zygote> {
        let want: BTreeSet<Package> = installed.iter().map(|i| i.package.clone()).collect();
        let exact =
            |z: &Zygote| z.packages == want && (z.id == 0 || z.scope.as_ref() == Some(scope));
        let best = self.best(&want, scope);
        if exact(&best) {
            return best;
        }
        let _one = self.creating.lock().await;
        let best = self.best(&want, scope);
        if exact(&best) {
            return best;
        }
        match self.fork_child(&best, installed, scope).await {
            Ok(z) => {
                self.zygotes.lock().unwrap().push(z.clone());
                self.evict();
                z
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not make a zygote; forking from a smaller one");
                best
            }
        }
    }

    /// The zygote in `scope` with the most packages, all of them in
    /// `want`; the root if there is none.
    pub fn best(&self, want: &BTreeSet<Package>, scope: &Scope) -> Arc<Zygote> {
        let zygotes = self.zygotes.lock().unwrap();
        zygotes
            .iter()
            .filter(|z| z.scope.as_ref() == Some(scope) && z.packages.is_subset(want))
            .max_by_key(|z| z.packages.len())
            .cloned()
            .unwrap_or_else(|| zygotes[0].clone())
    }

    async fn fork_child(
        &self,
        parent: &Zygote,
        installed: &[Installed],
        scope: &Scope,
    ) -> Result<Arc<Zygote>, String> {
        let started = Instant::now();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sock_path = self.config.run_dir.join(format!("z{id}.sock"));
        let _ = std::fs::remove_file(&sock_path);
        let listener = UnixListener::bind(&sock_path).map_err(|e| e.to_string())?;
        let new: Vec<&Installed> = installed
            .iter()
            .filter(|i| !parent.packages.contains(&i.package))
            .collect();
        let paths: Vec<PathBuf> = installed.iter().map(|i| i.path.clone()).collect();
        let modules: Vec<&String> = new.iter().flat_map(|i| &i.modules).collect();
        let reply = parent
            .command(json!({
                "op": "fork_zygote",
                "connect": sock_path,
                "paths": paths,
                "modules": modules,
            }))
            .await;
        let accepted = async {
            reply?;
            let (mut stream, _) = tokio::time::timeout(Duration::from_secs(120), listener.accept())
                .await
                .map_err(|_| "the new zygote did not connect".to_string())?
                .map_err(|e| e.to_string())?;
            let ready = tokio::time::timeout(Duration::from_secs(300), read_frame(&mut stream, 0))
                .await
                .map_err(|_| "the new zygote did not finish importing".to_string())?
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((stream, ready))
        }
        .await;
        let _ = std::fs::remove_file(&sock_path);
        let (stream, ready) = accepted?;
        let pid = ready.header.get("pid").and_then(Value::as_i64).unwrap_or(0) as i32;
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
            import_ms: started.elapsed().as_millis() as u64,
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
            "zygote ready"
        );
        Ok(Arc::new(z))
    }

    /// Frees zygotes until their memory is within the budget.
    pub fn evict(&self) {
        let mut zygotes = self.zygotes.lock().unwrap();
        loop {
            let total: u64 = zygotes.iter().map(|z| z.pss_bytes()).sum();
            if total <= self.config.memory_budget_bytes || zygotes.len() <= 1 {
                return;
            }
            let now = Instant::now();
            let victim = (1..zygotes.len()).min_by(|&a, &b| {
                benefit_per_byte(&zygotes[a], now).total_cmp(&benefit_per_byte(&zygotes[b], now))
            });
            let Some(i) = victim else { return };
            let z = zygotes.remove(i);
            tracing::info!(zygote = z.id, "zygote evicted (import cache over budget)");
            z.kill();
        }
    }

    /// Every zygote, for status.
    pub fn describe(&self) -> Vec<ZygoteStatus> {
        self.zygotes
            .lock()
            .unwrap()
            .iter()
            .map(|z| ZygoteStatus {
                pid: z.pid,
                packages: z.packages.len(),
                pss_bytes: z.pss_bytes(),
                forks: z.forks.load(Ordering::Relaxed),
                scope: z.scope.clone(),
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
        for z in self.zygotes.lock().unwrap().iter() {
            z.kill();
        }
    }
}

impl Drop for ZygoteTree {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Benefit of keeping a zygote per byte it costs: forks it served, decayed
/// by idleness (halving every minute), times the import time each saves.
fn benefit_per_byte(z: &Zygote, now: Instant) -> f64 {
    let idle_min = now
        .duration_since(*z.last_fork.lock().unwrap())
        .as_secs_f64()
        / 60.0;
    let recent = (z.forks.load(Ordering::Relaxed) as f64 + 1.0) * 0.5f64.powf(idle_min);
    recent * (z.import_ms.max(1) as f64) / (z.pss_bytes().max(1) as f64)
}
