//! cgroups for sandboxes: one interface over v1 and v2, and a pool.
//!
//! Creating a cgroup costs a handful of `mkdir`s and writes; SOCK (§4.1)
//! keeps a pool of pre-made ones and hands them out, which is what
//! [`CgroupPool`] does. A cgroup is returned after the sandbox in it is
//! dead: its processes are killed, it is checked empty and its OOM counter
//! is re-read as the new baseline.
//!
//! Layouts:
//! * **v1** (this project's CI machines): one hierarchy per controller,
//!   `/sys/fs/cgroup/{memory,pids,cpu,freezer}/hearth/<instance>/<n>`.
//! * **v2** (most users' machines): one directory
//!   `/sys/fs/cgroup/hearth/<instance>/<n>`, with the memory, pids and cpu
//!   controllers enabled in the parents' `cgroup.subtree_control`.
//!
//! `<instance>` is derived from the node's data directory, so a restarted
//! node finds and removes what a killed one left behind, and two nodes on
//! one machine never touch each other's groups.
//!
//! Everything is plain file I/O under a root directory, so unit tests run
//! against a temporary directory laid out like sysfs.

use parking_lot::Mutex;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup interface the machine offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

const V1_CONTROLLERS: [&str; 4] = ["memory", "pids", "cpu", "freezer"];

/// Limits applied to one sandbox's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    pub memory_bytes: u64,
    pub max_pids: u32,
    /// CPU time per period, as a percentage of one core (100 = one core).
    pub cpu_percent: u32,
}

/// A hierarchy of sandbox cgroups for one node.
#[derive(Debug)]
pub struct Cgroups {
    version: CgroupVersion,
    /// v1: one directory per controller; v2: a single directory.
    bases: Vec<PathBuf>,
}

impl Cgroups {
    /// Finds the machine's cgroup interface under `sysfs` (normally
    /// `/sys/fs/cgroup`) and creates this instance's parent groups, first
    /// removing any a previous run of the same instance left behind.
    pub fn open(sysfs: &Path, instance: &str) -> io::Result<Cgroups> {
        let version = detect(sysfs).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "no usable cgroup hierarchy under {} (need v2 with the memory controller, or v1 memory+pids+cpu+freezer)",
                    sysfs.display()
                ),
            )
        })?;
        let bases: Vec<PathBuf> = match version {
            CgroupVersion::V1 => V1_CONTROLLERS
                .iter()
                .map(|c| sysfs.join(c).join("hearth").join(instance))
                .collect(),
            CgroupVersion::V2 => vec![sysfs.join("hearth").join(instance)],
        };
        let cgroups = Cgroups { version, bases };
        cgroups.remove_all();
        for base in &cgroups.bases {
            fs::create_dir_all(base)?;
        }
        if version == CgroupVersion::V2 {
            // Controllers must be enabled on every level above a leaf.
            let top = sysfs.join("hearth");
            for dir in [sysfs, &top, &cgroups.bases[0]] {
                let _ = fs::write(dir.join("cgroup.subtree_control"), "+memory +pids +cpu");
            }
        }
        Ok(cgroups)
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Creates sandbox group `n` (or takes over a leftover of that name).
    fn create(&self, n: usize) -> io::Result<Cgroup> {
        let dirs: Vec<PathBuf> = self.bases.iter().map(|b| b.join(n.to_string())).collect();
        for d in &dirs {
            match fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let cg = Cgroup {
            version: self.version,
            dirs,
            oom_baseline: 0,
        };
        Ok(cg)
    }

    /// Kills everything in this instance's groups and removes them. Used at
    /// start (leftovers of a killed node) and at shutdown.
    ///
    /// A group is taken whole, across every v1 hierarchy at once: its
    /// processes can be frozen, and only the freezer hierarchy thaws them
    /// (a frozen process cannot die). Taken one hierarchy at a time, each
    /// group waited out the kill's and the removal's time limits in every
    /// other hierarchy: minutes for a node killed with its handlers paused.
    pub fn remove_all(&self) {
        let mut names = std::collections::BTreeSet::new();
        for base in &self.bases {
            for entry in fs::read_dir(base).into_iter().flatten().flatten() {
                if entry.path().is_dir() {
                    names.insert(entry.file_name());
                }
            }
        }
        for name in names {
            let cg = Cgroup {
                version: self.version,
                dirs: self.bases.iter().map(|b| b.join(&name)).collect(),
                oom_baseline: 0,
            };
            cg.kill_all();
            for dir in cg.dirs.iter().filter(|d| d.exists()) {
                remove_dir_when_released(dir);
            }
        }
        for base in &self.bases {
            remove_dir_when_released(base);
        }
    }
}

/// Writes a control file; errors name the file.
fn write(path: impl AsRef<Path>, value: impl AsRef<[u8]>) -> io::Result<()> {
    let path = path.as_ref();
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Removes an emptied cgroup. The kernel refuses (EBUSY) for a moment
/// after the last process died, while it is still being torn down.
fn remove_dir_when_released(dir: &Path) {
    // Killed processes leave the group only once the kernel has torn them
    // down; with tens of MiB each (Node.js handlers) that took over 100 ms
    // here. Wait up to five seconds, backing off.
    let give_up = std::time::Instant::now() + Duration::from_secs(5);
    let mut pause = Duration::from_millis(2);
    while std::time::Instant::now() < give_up {
        match fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            _ => return,
        }
    }
    tracing::warn!(dir = %dir.display(), "cgroup still busy; left in place");
}

/// Which interface `sysfs` offers, if any usable one.
pub fn detect(sysfs: &Path) -> Option<CgroupVersion> {
    if let Ok(controllers) = fs::read_to_string(sysfs.join("cgroup.controllers"))
        && controllers.split_whitespace().any(|c| c == "memory")
    {
        return Some(CgroupVersion::V2);
    }
    if V1_CONTROLLERS.iter().all(|c| sysfs.join(c).is_dir()) {
        return Some(CgroupVersion::V1);
    }
    None
}

/// One sandbox's cgroup (a directory per v1 controller, or one v2 directory).
#[derive(Debug)]
pub struct Cgroup {
    version: CgroupVersion,
    dirs: Vec<PathBuf>,
    /// OOM kills counted before the current sandbox moved in.
    oom_baseline: u64,
}

impl Cgroup {
    fn dir(&self, controller: &str) -> &Path {
        match self.version {
            CgroupVersion::V2 => &self.dirs[0],
            CgroupVersion::V1 => {
                let i = V1_CONTROLLERS
                    .iter()
                    .position(|c| *c == controller)
                    .unwrap_or(0);
                &self.dirs[i.min(self.dirs.len() - 1)]
            }
        }
    }

    /// Memory (and swap) and process-count limits, no CPU limit.
    fn set_memory_and_pids(&self, memory_bytes: u64, max_pids: u32) -> io::Result<()> {
        match self.version {
            CgroupVersion::V1 => {
                let mem = self.dir("memory");
                // Swap would let a sandbox exceed its limit slowly instead of
                // being stopped; where the kernel accounts swap, cap it too.
                // memory+swap may never be below memory: lift it first, so a
                // pooled group can take a larger limit than its last user's.
                let bytes = memory_bytes.to_string();
                let memsw = mem.join("memory.memsw.limit_in_bytes");
                let _ = fs::write(&memsw, "-1");
                write(mem.join("memory.limit_in_bytes"), &bytes)?;
                let _ = fs::write(&memsw, &bytes);
                write(self.dir("pids").join("pids.max"), max_pids.to_string())
            }
            CgroupVersion::V2 => {
                let d = &self.dirs[0];
                write(d.join("memory.max"), memory_bytes.to_string())?;
                let _ = fs::write(d.join("memory.swap.max"), "0");
                write(d.join("pids.max"), max_pids.to_string())
            }
        }
    }

    pub fn set_limits(&self, limits: CgroupLimits) -> io::Result<()> {
        const PERIOD_US: u64 = 100_000;
        let quota = PERIOD_US * u64::from(limits.cpu_percent.max(1)) / 100;
        self.set_memory_and_pids(limits.memory_bytes, limits.max_pids)?;
        match self.version {
            CgroupVersion::V1 => {
                let cpu = self.dir("cpu");
                write(cpu.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
                write(cpu.join("cpu.cfs_quota_us"), quota.to_string())?;
            }
            CgroupVersion::V2 => {
                write(self.dirs[0].join("cpu.max"), format!("{quota} {PERIOD_US}"))?;
            }
        }
        Ok(())
    }

    /// Moves process `pid` (and, in v1, only that process) into the group.
    pub fn add(&self, pid: i32) -> io::Result<()> {
        for d in &self.dirs {
            fs::write(d.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// The `cgroup.procs` file of each of the group's directories: a
    /// process that writes `0` to each moves itself in (how a child joins
    /// its group between fork and exec, before it can fork again).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The processes in the group.
    pub fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Stops every process in the group where it stands (SOCK's paused
    /// handlers). Does not wait for the freeze to complete.
    pub fn freeze(&self) -> io::Result<()> {
        match self.version {
            CgroupVersion::V1 => fs::write(self.dir("freezer").join("freezer.state"), "FROZEN"),
            CgroupVersion::V2 => fs::write(self.dirs[0].join("cgroup.freeze"), "1"),
        }
    }

    pub fn thaw(&self) -> io::Result<()> {
        match self.version {
            CgroupVersion::V1 => fs::write(self.dir("freezer").join("freezer.state"), "THAWED"),
            CgroupVersion::V2 => fs::write(self.dirs[0].join("cgroup.freeze"), "0"),
        }
    }

    /// Bytes of memory charged to the group.
    pub fn memory_bytes(&self) -> u64 {
        let file = match self.version {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        };
        fs::read_to_string(self.dir("memory").join(file))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    fn oom_kills_total(&self) -> u64 {
        let (file, key) = match self.version {
            CgroupVersion::V1 => ("memory.oom_control", "oom_kill"),
            CgroupVersion::V2 => ("memory.events", "oom_kill"),
        };
        let text = fs::read_to_string(self.dir("memory").join(file)).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Whether the kernel's OOM killer struck in this group since the
    /// current sandbox moved in.
    pub fn oom_killed(&self) -> bool {
        self.oom_kills_total() > self.oom_baseline
    }

    /// Sends SIGKILL to everything in the group, thawing it first (a frozen
    /// process cannot die), until the group is empty or a second passes.
    pub fn kill_all(&self) -> bool {
        if self.version == CgroupVersion::V2 && self.dirs[0].join("cgroup.kill").exists() {
            let _ = fs::write(self.dirs[0].join("cgroup.kill"), "1");
        }
        let give_up = Instant::now() + Duration::from_secs(1);
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            for pid in &pids {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            let _ = self.thaw();
            if Instant::now() > give_up {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Pre-made cgroups, handed out and returned (SOCK's cgroup pool).
#[derive(Debug)]
pub struct CgroupPool {
    cgroups: Cgroups,
    free: Mutex<PoolState>,
    max: usize,
    /// The root zygote's pid and the `cgroup.procs` of the group it lives
    /// in, for [`CgroupPool::prewarm`].
    anchor: Mutex<Option<(PathBuf, i32)>>,
}

#[derive(Debug, Default)]
struct PoolState {
    idle: Vec<Cgroup>,
    created: usize,
}

impl CgroupPool {
    /// Creates `warm` groups now; more are made on demand, up to `max`.
    pub fn new(cgroups: Cgroups, warm: usize, max: usize) -> io::Result<CgroupPool> {
        let pool = CgroupPool {
            cgroups,
            free: Mutex::new(PoolState::default()),
            max,
            anchor: Mutex::new(None),
        };
        {
            let mut state = pool.free.lock();
            for _ in 0..warm.min(max) {
                let n = state.created;
                let cg = pool.cgroups.create(n)?;
                state.created += 1;
                state.idle.push(cg);
            }
        }
        Ok(pool)
    }

    pub fn version(&self) -> CgroupVersion {
        self.cgroups.version
    }

    /// A cgroup with `limits` applied, or `None` when `max` are in use.
    pub fn take(&self, limits: CgroupLimits) -> io::Result<Option<Cgroup>> {
        let cg = {
            let mut state = self.free.lock();
            match state.idle.pop() {
                Some(cg) => Some(cg),
                None if state.created < self.max => {
                    let n = state.created;
                    state.created += 1;
                    drop(state);
                    Some(self.cgroups.create(n)?)
                }
                None => None,
            }
        };
        let Some(mut cg) = cg else { return Ok(None) };
        cg.set_limits(limits)?;
        cg.oom_baseline = cg.oom_kills_total();
        Ok(Some(cg))
    }

    /// Returns a group after its sandbox has ended: kills what is left in
    /// it; only an empty group goes back into the pool.
    pub fn give_back(&self, cg: Cgroup) {
        if !cg.kill_all() {
            tracing::warn!(dir = %cg.dirs[0].display(), "cgroup did not empty; not reused");
            return;
        }
        let _ = cg.thaw();
        self.free.lock().idle.push(cg);
    }

    /// Moves the root zygote (and so, at fork, everything it makes until
    /// moved on) into this node's `zygotes` group, where its memory is
    /// accounted and limited: every zygote together may hold at most
    /// `memory_bytes` and `max_pids` processes, so a package that
    /// allocates or forks without end when imported is stopped there (the
    /// kernel kills the largest zygote), not by the machine. Remembers the
    /// root for `prewarm`.
    pub fn adopt_zygote(&self, pid: i32, memory_bytes: u64, max_pids: u32) -> io::Result<()> {
        let dirs: Vec<PathBuf> = self
            .cgroups
            .bases
            .iter()
            .map(|b| b.join("zygotes"))
            .collect();
        for dir in &dirs {
            match fs::create_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        let group = Cgroup {
            version: self.cgroups.version,
            dirs,
            oom_baseline: 0,
        };
        group.set_memory_and_pids(memory_bytes, max_pids)?;
        group.add(pid)?;
        let procs = group.dirs[0].join("cgroup.procs");
        *self.anchor.lock() = Some((procs, pid));
        Ok(())
    }

    /// Starts the RCU grace period the next migration would wait for.
    ///
    /// Moving a process between cgroups takes a per-machine lock whose
    /// writer, after a quiet spell, waits one RCU grace period (7–15 ms
    /// measured here; later moves within that period are nearly free, see
    /// `rcu_sync_enter`). Re-writing the root zygote into the group it is
    /// already in takes that same lock and changes nothing, so calling this
    /// off-thread when a sandbox starts overlaps the wait with the fork.
    pub fn prewarm(&self) {
        if let Some((procs, pid)) = self.anchor.lock().clone() {
            let _ = fs::write(procs, pid.to_string());
        }
    }

    /// Number of groups waiting in the pool.
    pub fn idle(&self) -> usize {
        self.free.lock().idle.len()
    }

    /// Kills every sandbox process and removes every group of this node.
    pub fn shutdown(&self) {
        self.free.lock().idle.clear();
        self.cgroups.remove_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A temporary directory laid out like sysfs stands in for the kernel:
    // the files the code writes are checked. The real kernel is exercised
    // by the end-to-end tests.
    fn fake_v1() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for c in V1_CONTROLLERS {
            fs::create_dir(dir.path().join(c)).unwrap();
        }
        dir
    }

    #[test]
    fn detects_v1_and_v2_and_nothing() {
        let v1 = fake_v1();
        assert_eq!(detect(v1.path()), Some(CgroupVersion::V1));
        let v2 = tempfile::tempdir().unwrap();
        fs::write(
            v2.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        assert_eq!(detect(v2.path()), Some(CgroupVersion::V2));
        let none = tempfile::tempdir().unwrap();
        fs::write(none.path().join("cgroup.controllers"), "\n").unwrap();
        assert_eq!(detect(none.path()), None);
        assert!(Cgroups::open(none.path(), "x").is_err());
    }

    #[test]
    fn v1_limits_land_in_each_controller() {
        let sys = fake_v1();
        let pool = CgroupPool::new(Cgroups::open(sys.path(), "t1").unwrap(), 2, 3).unwrap();
        assert_eq!(pool.idle(), 2);
        let limits = CgroupLimits {
            memory_bytes: 64 << 20,
            max_pids: 32,
            cpu_percent: 50,
        };
        let cg = pool.take(limits).unwrap().unwrap();
        let read = |c: &str, f: &str| fs::read_to_string(cg.dir(c).join(f)).unwrap();
        assert_eq!(
            read("memory", "memory.limit_in_bytes"),
            (64u64 << 20).to_string()
        );
        assert_eq!(read("pids", "pids.max"), "32");
        assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");
        cg.freeze().unwrap();
        assert_eq!(read("freezer", "freezer.state"), "FROZEN");
        // The pool grows to its maximum and then says no.
        let a = pool.take(limits).unwrap().unwrap();
        let b = pool.take(limits).unwrap().unwrap();
        assert!(pool.take(limits).unwrap().is_none());
        pool.give_back(a);
        assert!(pool.take(limits).unwrap().is_some());
        drop(b);
    }

    #[test]
    fn v2_writes_one_directory_and_counts_ooms_from_a_baseline() {
        let sys = tempfile::tempdir().unwrap();
        fs::write(sys.path().join("cgroup.controllers"), "memory pids cpu\n").unwrap();
        let pool = CgroupPool::new(Cgroups::open(sys.path(), "t2").unwrap(), 1, 4).unwrap();
        let dir = sys.path().join("hearth/t2/0");
        fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        let limits = CgroupLimits {
            memory_bytes: 1 << 20,
            max_pids: 8,
            cpu_percent: 200,
        };
        let cg = pool.take(limits).unwrap().unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("cpu.max")).unwrap(),
            "200000 100000"
        );
        assert!(
            !cg.oom_killed(),
            "an OOM before this sandbox is not its OOM"
        );
        fs::write(dir.join("memory.events"), "oom 2\noom_kill 2\n").unwrap();
        assert!(cg.oom_killed());
    }

    #[test]
    fn leftovers_of_the_same_instance_are_removed_at_open() {
        let sys = fake_v1();
        let stale = sys.path().join("memory/hearth/t3/7");
        fs::create_dir_all(&stale).unwrap();
        let _cgroups = Cgroups::open(sys.path(), "t3").unwrap();
        assert!(!stale.exists());
        // Another instance's groups are left alone.
        let other = sys.path().join("memory/hearth/other/0");
        fs::create_dir_all(&other).unwrap();
        let _again = Cgroups::open(sys.path(), "t3").unwrap();
        assert!(other.exists());
    }
}
