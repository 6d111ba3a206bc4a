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
//!   `/sys/fs/cgroup/{memory,pids,cpu,freezer}/<parent>/<instance>/<n>`,
//!   `<parent>` being `hearth` unless the operator names one.
//! * **v2** (most users' machines): the root of the hierarchy belongs to
//!   the init system, so a node works only in a group delegated to it
//!   (systemd's `Delegate=yes`, a container's own cgroup namespace, or the
//!   operator's `--cgroup-parent`), never above it. Started alone in its
//!   own group (a systemd service), the node moves itself into a leaf,
//!   `<own>/daemon`, since v2 lets only leaves hold processes, and puts
//!   its sandboxes beside it: `<own>/<instance>/<n>`. Named a parent, it
//!   stays where it is and uses `<parent>/<instance>/<n>`. The memory and
//!   pids controllers (and cpu, where delegated) are enabled in
//!   `cgroup.subtree_control` from the delegated group down. Memory and
//!   pids limits are required; without the cpu controller a sandbox's CPU
//!   share is not capped (its deadline still holds) and
//!   [`Cgroups::cpu_limited`] says so. Because the sandboxes are in the
//!   service's own group, its limits cover them and stopping (or killing)
//!   the service ends them.
//!
//! `<instance>` is derived from the node's data directory, so a restarted
//! node finds and removes what a killed one left behind, and two nodes on
//! one machine never touch each other's groups.
//!
//! All I/O goes through [`fs::CgroupFs`]: the kernel in production, and in
//! unit tests a model of cgroup v2's rules (`fake.rs`) or, for v1, a
//! temporary directory laid out like sysfs. The real v1 kernel is
//! exercised end to end.

#[cfg(test)]
mod fake;
mod fs;
mod remount;

pub use remount::make_writable;

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs::{CgroupFs, Kernel};

/// Which cgroup interface the machine offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

const V1_CONTROLLERS: [&str; 4] = ["memory", "pids", "cpu", "freezer"];
/// v2 controllers a sandbox cannot do without: its memory and its
/// processes must be bounded.
const V2_REQUIRED: [&str; 2] = ["memory", "pids"];
/// v1: the group under each controller's root that holds every node's
/// groups, unless the operator names another.
const V1_PARENT: &str = "hearth";
/// v2: the leaf a node started alone in its own group moves itself into.
pub const DAEMON_LEAF: &str = "daemon";
/// How to give a node a group of its own, for the errors that need one.
const DELEGATE_HINT: &str = "run Hearth as a systemd service with Delegate=yes \
     (deploy/systemd/hearth.service), under `systemd-run --scope -p Delegate=yes`, \
     in a container with its own cgroup namespace, or name a delegated group with \
     --cgroup-parent";

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
    /// Whether CPU limits can be set (v1 always; v2 with the cpu controller).
    cpu: bool,
    fs: Arc<dyn CgroupFs>,
}

impl Cgroups {
    /// Finds the machine's cgroup interface under `sysfs` (normally
    /// `/sys/fs/cgroup`) and creates this instance's parent groups, first
    /// removing any a previous run of the same instance left behind.
    /// `parent` is the operator's `--cgroup-parent`, a path in the
    /// hierarchy (`/hearth.slice/nodes`); without it see the module's
    /// layouts.
    pub fn open(sysfs: &Path, instance: &str, parent: Option<&Path>) -> io::Result<Cgroups> {
        Cgroups::open_with(Arc::new(Kernel), sysfs, instance, parent)
    }

    fn open_with(
        fs: Arc<dyn CgroupFs>,
        sysfs: &Path,
        instance: &str,
        parent: Option<&Path>,
    ) -> io::Result<Cgroups> {
        let version = detect(fs.as_ref(), sysfs).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "no usable cgroup hierarchy under {} (need v2 with the memory and pids controllers, or v1 memory+pids+cpu+freezer)",
                    sysfs.display()
                ),
            )
        })?;
        let relative = |p: &Path| p.strip_prefix("/").unwrap_or(p).to_path_buf();
        let (bases, cpu) = match version {
            CgroupVersion::V1 => {
                let parent = parent.map_or_else(|| PathBuf::from(V1_PARENT), relative);
                let bases = V1_CONTROLLERS
                    .iter()
                    .map(|c| sysfs.join(c).join(&parent).join(instance))
                    .collect();
                (bases, true)
            }
            CgroupVersion::V2 => {
                let delegated = delegated_v2(fs.as_ref(), sysfs, parent.map(relative))?;
                let offered = controllers(fs.as_ref(), &delegated);
                (vec![delegated.join(instance)], offered.contains("cpu"))
            }
        };
        let cgroups = Cgroups {
            version,
            bases,
            cpu,
            fs,
        };
        cgroups.remove_all();
        for base in &cgroups.bases {
            cgroups.fs.mkdir_all(base)?;
        }
        if version == CgroupVersion::V2 {
            // Controllers must be enabled on every level above a leaf, from
            // the delegated group (whose parent offers them) down.
            let mut wanted: Vec<&str> = V2_REQUIRED.to_vec();
            if cpu {
                wanted.push("cpu");
            }
            let base = &cgroups.bases[0];
            let delegated = base.parent().unwrap_or(base);
            for dir in [delegated, base] {
                enable(cgroups.fs.as_ref(), dir, &wanted)?;
            }
        }
        Ok(cgroups)
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Whether sandboxes get a CPU limit (false on a v2 machine that does
    /// not offer the cpu controller).
    pub fn cpu_limited(&self) -> bool {
        self.cpu
    }

    fn group(&self, dirs: Vec<PathBuf>) -> Cgroup {
        Cgroup {
            version: self.version,
            dirs,
            oom_baseline: 0,
            cpu: self.cpu,
            fs: self.fs.clone(),
        }
    }

    /// Creates sandbox group `name` (or takes over a leftover of that name).
    fn create(&self, name: &str) -> io::Result<Cgroup> {
        let dirs: Vec<PathBuf> = self.bases.iter().map(|b| b.join(name)).collect();
        for d in &dirs {
            match self.fs.mkdir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.group(dirs))
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
        let mut names = BTreeSet::new();
        for base in &self.bases {
            names.extend(self.fs.subdirs(base));
        }
        for name in names {
            let cg = self.group(self.bases.iter().map(|b| b.join(&name)).collect());
            cg.kill_all();
            for dir in cg.dirs.iter().filter(|d| self.fs.exists(d)) {
                remove_dir_when_released(self.fs.as_ref(), dir);
            }
        }
        for base in &self.bases {
            remove_dir_when_released(self.fs.as_ref(), base);
        }
    }
}

/// The controllers a v2 group offers its children (`cgroup.controllers`).
fn controllers(fs: &dyn CgroupFs, dir: &Path) -> BTreeSet<String> {
    fs.read(&dir.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Enables `wanted` for `dir`'s children, writing only what is not enabled
/// yet (the kernel refuses the whole write if one controller is not
/// available).
fn enable(fs: &dyn CgroupFs, dir: &Path, wanted: &[&str]) -> io::Result<()> {
    let file = dir.join("cgroup.subtree_control");
    let enabled = fs.read(&file).unwrap_or_default();
    let missing: Vec<String> = wanted
        .iter()
        .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    fs.write(&file, &missing.join(" "))
}

/// Removes an emptied cgroup. The kernel refuses (EBUSY) for a moment
/// after the last process died, while it is still being torn down.
fn remove_dir_when_released(fs: &dyn CgroupFs, dir: &Path) {
    // Killed processes leave the group only once the kernel has torn them
    // down; with tens of MiB each (Node.js handlers) that took over 100 ms
    // here. Wait up to five seconds, backing off.
    let give_up = Instant::now() + Duration::from_secs(5);
    let mut pause = Duration::from_millis(2);
    while Instant::now() < give_up {
        match fs.rmdir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            _ => return,
        }
    }
    tracing::warn!(dir = %dir.display(), "cgroup still busy; left in place");
}

/// The v2 group delegated to this node, under which it may make groups:
/// the operator's `parent` (made if missing), or else the group the node
/// was started in, which it must have to itself (it moves into
/// [`DAEMON_LEAF`] there). Never the root of the hierarchy: that is the
/// init system's.
fn delegated_v2(fs: &dyn CgroupFs, sysfs: &Path, parent: Option<PathBuf>) -> io::Result<PathBuf> {
    let refuse = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    if let Some(parent) = parent {
        let dir = sysfs.join(&parent);
        if dir == sysfs {
            return Err(refuse(format!(
                "--cgroup-parent / is the root of the cgroup hierarchy, which only the init system may write; {DELEGATE_HINT}"
            )));
        }
        fs.mkdir_all(&dir)?;
        require_v2_controllers(fs, &dir)?;
        return Ok(dir);
    }
    let own = fs.own_group()?;
    let dir = sysfs.join(own.trim_start_matches('/'));
    // The root alone has no `cgroup.type` (a container's namespace root,
    // below the machine's, has one).
    if !fs.exists(&dir.join("cgroup.type")) {
        return Err(refuse(format!(
            "Hearth runs in the root of the cgroup hierarchy, which only the init system may write; {DELEGATE_HINT}"
        )));
    }
    let me = fs.own_pid();
    let others: Vec<i32> = pids_in(fs, &dir).into_iter().filter(|p| *p != me).collect();
    if !others.is_empty() {
        return Err(refuse(format!(
            "Hearth shares its cgroup {own} with other processes ({}), and cgroup v2 puts \
             groups only below a group without processes: {DELEGATE_HINT}",
            others
                .iter()
                .take(5)
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    require_v2_controllers(fs, &dir)?;
    let leaf = dir.join(DAEMON_LEAF);
    match fs.mkdir(&leaf) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    fs.write(&leaf.join("cgroup.procs"), &me.to_string())?;
    Ok(dir)
}

/// Whether v2 group `dir` offers what a sandbox needs.
fn require_v2_controllers(fs: &dyn CgroupFs, dir: &Path) -> io::Result<()> {
    let offered = controllers(fs, dir);
    let missing: Vec<&str> = V2_REQUIRED
        .into_iter()
        .filter(|c| !offered.contains(*c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "the cgroup {} is not given the {} controller(s) by its parent: a systemd \
             service with Delegate=yes is given every controller; for a group of your own, \
             enable them in its parent's cgroup.subtree_control",
            dir.display(),
            missing.join(" and ")
        ),
    ))
}

/// The processes in group `dir`.
fn pids_in(fs: &dyn CgroupFs, dir: &Path) -> Vec<i32> {
    fs.read(&dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Which interface `sysfs` offers, if any usable one.
fn detect(fs: &dyn CgroupFs, sysfs: &Path) -> Option<CgroupVersion> {
    let offered = controllers(fs, sysfs);
    if V2_REQUIRED.iter().all(|c| offered.contains(*c)) {
        return Some(CgroupVersion::V2);
    }
    if V1_CONTROLLERS.iter().all(|c| fs.is_dir(&sysfs.join(c))) {
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
    /// Whether a CPU limit can be set.
    cpu: bool,
    fs: Arc<dyn CgroupFs>,
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

    fn write(&self, controller: &str, file: &str, value: &str) -> io::Result<()> {
        self.fs.write(&self.dir(controller).join(file), value)
    }

    fn read(&self, controller: &str, file: &str) -> String {
        self.fs
            .read(&self.dir(controller).join(file))
            .unwrap_or_default()
    }

    /// Memory (and swap) and process-count limits, no CPU limit.
    fn set_memory_and_pids(&self, memory_bytes: u64, max_pids: u32) -> io::Result<()> {
        let bytes = memory_bytes.to_string();
        match self.version {
            CgroupVersion::V1 => {
                // Swap would let a sandbox exceed its limit slowly instead of
                // being stopped; where the kernel accounts swap, cap it too.
                // memory+swap may never be below memory: lift it first, so a
                // pooled group can take a larger limit than its last user's.
                let _ = self.write("memory", "memory.memsw.limit_in_bytes", "-1");
                self.write("memory", "memory.limit_in_bytes", &bytes)?;
                let _ = self.write("memory", "memory.memsw.limit_in_bytes", &bytes);
            }
            CgroupVersion::V2 => {
                self.write("memory", "memory.max", &bytes)?;
                // Absent where the kernel does not account swap.
                let _ = self.write("memory", "memory.swap.max", "0");
            }
        }
        self.write("pids", "pids.max", &max_pids.to_string())
    }

    pub fn set_limits(&self, limits: CgroupLimits) -> io::Result<()> {
        const PERIOD_US: u64 = 100_000;
        let quota = PERIOD_US * u64::from(limits.cpu_percent.max(1)) / 100;
        self.set_memory_and_pids(limits.memory_bytes, limits.max_pids)?;
        if !self.cpu {
            return Ok(());
        }
        match self.version {
            CgroupVersion::V1 => {
                self.write("cpu", "cpu.cfs_period_us", &PERIOD_US.to_string())?;
                self.write("cpu", "cpu.cfs_quota_us", &quota.to_string())
            }
            CgroupVersion::V2 => self.write("cpu", "cpu.max", &format!("{quota} {PERIOD_US}")),
        }
    }

    /// Moves process `pid` (and, in v1, only that process) into the group.
    pub fn add(&self, pid: i32) -> io::Result<()> {
        for d in &self.dirs {
            self.fs.write(&d.join("cgroup.procs"), &pid.to_string())?;
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
        pids_in(self.fs.as_ref(), &self.dirs[0])
    }

    /// Stops every process in the group where it stands (SOCK's paused
    /// handlers). Does not wait for the freeze to complete.
    pub fn freeze(&self) -> io::Result<()> {
        match self.version {
            CgroupVersion::V1 => self.write("freezer", "freezer.state", "FROZEN"),
            CgroupVersion::V2 => self.write("freezer", "cgroup.freeze", "1"),
        }
    }

    pub fn thaw(&self) -> io::Result<()> {
        match self.version {
            CgroupVersion::V1 => self.write("freezer", "freezer.state", "THAWED"),
            CgroupVersion::V2 => self.write("freezer", "cgroup.freeze", "0"),
        }
    }

    /// Bytes of memory charged to the group.
    pub fn memory_bytes(&self) -> u64 {
        let file = match self.version {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        };
        self.read("memory", file).trim().parse().unwrap_or(0)
    }

    fn oom_kills_total(&self) -> u64 {
        let file = match self.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        self.read("memory", file)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(k, _)| *k == "oom_kill")
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
        let kill = self.dirs[0].join("cgroup.kill");
        if self.version == CgroupVersion::V2 && self.fs.exists(&kill) {
            let _ = self.fs.write(&kill, "1");
        }
        let give_up = Instant::now() + Duration::from_secs(1);
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            for pid in pids {
                self.fs.kill(pid);
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
                let cg = pool.cgroups.create(&n.to_string())?;
                state.created += 1;
                state.idle.push(cg);
            }
        }
        Ok(pool)
    }

    pub fn version(&self) -> CgroupVersion {
        self.cgroups.version
    }

    /// Whether sandboxes get a CPU limit ([`Cgroups::cpu_limited`]).
    pub fn cpu_limited(&self) -> bool {
        self.cgroups.cpu_limited()
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
                    Some(self.cgroups.create(&n.to_string())?)
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
        let group = self.cgroups.create("zygotes")?;
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
            let _ = self.cgroups.fs.write(&procs, &pid.to_string());
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
    use std::fs as stdfs;

    use super::fake::FakeV2;
    use super::*;

    // v1: a temporary directory laid out like sysfs stands in for the
    // kernel and the files the code writes are checked; the real v1 kernel
    // is exercised by the end-to-end tests. v2: `FakeV2` models the rules
    // the v2 kernel enforces.
    fn fake_v1() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for c in V1_CONTROLLERS {
            stdfs::create_dir(dir.path().join(c)).unwrap();
        }
        dir
    }

    const LIMITS: CgroupLimits = CgroupLimits {
        memory_bytes: 64 << 20,
        max_pids: 32,
        cpu_percent: 50,
    };

    /// A v2 machine offering `controllers`, the caller started alone in
    /// the delegated group of a systemd service; the machine's root, and
    /// that group.
    fn v2(controllers: &str) -> (Arc<FakeV2>, PathBuf) {
        let root = PathBuf::from("/sys/fs/cgroup");
        let fake = Arc::new(FakeV2::new(&root, controllers));
        fake.start_in(&root.join(SERVICE));
        (fake, root)
    }

    const SERVICE: &str = "system.slice/hearth.service";

    #[test]
    fn detects_v1_and_v2_and_nothing() {
        let v1 = fake_v1();
        assert_eq!(detect(&Kernel, v1.path()), Some(CgroupVersion::V1));
        let (fake, root) = v2("cpuset cpu io memory pids");
        assert_eq!(detect(fake.as_ref(), &root), Some(CgroupVersion::V2));
        let (no_pids, root) = v2("cpu io memory");
        assert_eq!(detect(no_pids.as_ref(), &root), None);
        assert!(Cgroups::open_with(no_pids, &root, "x", None).is_err());
        let none = tempfile::tempdir().unwrap();
        stdfs::write(none.path().join("cgroup.controllers"), "\n").unwrap();
        assert_eq!(detect(&Kernel, none.path()), None);
        assert!(Cgroups::open(none.path(), "x", None).is_err());
    }

    #[test]
    fn v1_limits_land_in_each_controller() {
        let sys = fake_v1();
        let pool = CgroupPool::new(Cgroups::open(sys.path(), "t1", None).unwrap(), 2, 3).unwrap();
        assert_eq!(pool.idle(), 2);
        let cg = pool.take(LIMITS).unwrap().unwrap();
        let read = |c: &str, f: &str| stdfs::read_to_string(cg.dir(c).join(f)).unwrap();
        assert_eq!(
            read("memory", "memory.limit_in_bytes"),
            (64u64 << 20).to_string()
        );
        assert_eq!(read("pids", "pids.max"), "32");
        assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");
        cg.freeze().unwrap();
        assert_eq!(read("freezer", "freezer.state"), "FROZEN");
        // The pool grows to its maximum and then says no.
        let a = pool.take(LIMITS).unwrap().unwrap();
        let b = pool.take(LIMITS).unwrap().unwrap();
        assert!(pool.take(LIMITS).unwrap().is_none());
        pool.give_back(a);
        assert!(pool.take(LIMITS).unwrap().is_some());
        drop(b);
    }

    #[test]
    fn leftovers_of_the_same_instance_are_removed_at_open() {
        let sys = fake_v1();
        let stale = sys.path().join("memory/hearth/t3/7");
        stdfs::create_dir_all(&stale).unwrap();
        let _cgroups = Cgroups::open(sys.path(), "t3", None).unwrap();
        assert!(!stale.exists());
        // Another instance's groups are left alone.
        let other = sys.path().join("memory/hearth/other/0");
        stdfs::create_dir_all(&other).unwrap();
        let _again = Cgroups::open(sys.path(), "t3", None).unwrap();
        assert!(other.exists());
    }

    /// The controllers are enabled down to the sandboxes' parent, so the
    /// limits' files exist where the pool writes them.
    #[test]
    fn v2_enables_controllers_on_every_level_and_the_limits_land() {
        let (fake, root) = v2("cpuset cpu io memory pids");
        let pool = CgroupPool::new(
            Cgroups::open_with(fake.clone(), &root, "t", None).unwrap(),
            1,
            4,
        )
        .unwrap();
        assert!(pool.cgroups.cpu_limited());
        let cg = pool.take(LIMITS).unwrap().unwrap();
        let dir = root.join(SERVICE).join("t/0");
        let read = |f: &str| fake.read(&dir.join(f)).unwrap();
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "32");
        assert_eq!(read("cpu.max"), "50000 100000");
        drop(cg);
    }

    /// Regression: a v2 machine that does not delegate the cpu controller
    /// refused the whole `+memory +pids +cpu` write, so no controller was
    /// enabled below the root, a sandbox's `memory.max` did not exist, and
    /// every Python and Node.js invocation failed at launch ("cgroup setup
    /// failed").
    #[test]
    fn v2_without_the_cpu_controller_still_limits_memory_and_pids() {
        let (fake, root) = v2("io memory pids");
        let pool = CgroupPool::new(
            Cgroups::open_with(fake.clone(), &root, "t", None).unwrap(),
            1,
            4,
        )
        .unwrap();
        assert!(!pool.cgroups.cpu_limited());
        let _cg = pool.take(LIMITS).unwrap().unwrap();
        let dir = root.join(SERVICE).join("t/0");
        assert_eq!(
            fake.read(&dir.join("memory.max")).unwrap(),
            (64u64 << 20).to_string()
        );
        assert_eq!(fake.read(&dir.join("pids.max")).unwrap(), "32");
        assert!(!fake.exists(&dir.join("cpu.max")));
    }

    /// A sandbox's life on v2: limits, a process, a pause, an OOM counted
    /// from its own baseline, then killed and its group reused; and the
    /// zygotes' group beside the sandboxes (no process in a parent).
    #[test]
    fn v2_a_sandbox_group_lives_and_is_reused() {
        let (fake, root) = v2("cpu memory pids");
        let pool = CgroupPool::new(
            Cgroups::open_with(fake.clone(), &root, "t", None).unwrap(),
            1,
            1,
        )
        .unwrap();
        pool.adopt_zygote(100, 256 << 20, 64).unwrap();
        let zygotes = root.join(SERVICE).join("t/zygotes");
        assert_eq!(fake.read(&zygotes.join("cgroup.procs")).unwrap(), "100\n");
        assert_eq!(fake.read(&zygotes.join("pids.max")).unwrap(), "64");

        let dir = root.join(SERVICE).join("t/0");
        fake.set(&dir, "memory.events", "oom 1\noom_kill 1\n");
        let cg = pool.take(LIMITS).unwrap().unwrap();
        assert!(
            !cg.oom_killed(),
            "an OOM before this sandbox is not its OOM"
        );
        cg.add(7).unwrap();
        fake.spawn(&dir, 8); // a child it forked
        assert_eq!(cg.pids(), [7, 8]);
        cg.freeze().unwrap();
        assert!(fake.frozen(&dir));
        fake.set(&dir, "memory.events", "oom 2\noom_kill 2\n");
        assert!(cg.oom_killed());
        pool.prewarm(); // the root zygote written into its own group again
        assert_eq!(fake.read(&zygotes.join("cgroup.procs")).unwrap(), "100\n");

        pool.give_back(cg);
        assert_eq!(fake.killed(), [7, 8]);
        assert!(!fake.frozen(&dir), "returned thawed");
        assert_eq!(pool.idle(), 1);
        assert!(pool.take(LIMITS).unwrap().is_some());

        pool.shutdown();
        assert!(!fake.has_group(&root.join(SERVICE).join("t")));
        assert!(fake.killed().contains(&100), "the zygotes went with it");
    }

    #[test]
    fn v2_leftovers_of_the_same_instance_are_killed_and_removed_at_open() {
        let (fake, root) = v2("memory pids");
        let svc = root.join(SERVICE);
        for dir in ["t/3", "other/0"] {
            fake.mkdir_all(&svc.join(dir)).unwrap();
        }
        fake.spawn(&svc.join("t/3"), 42);
        fake.spawn(&svc.join("other/0"), 43);
        let _cgroups = Cgroups::open_with(fake.clone(), &root, "t", None).unwrap();
        assert!(!fake.has_group(&svc.join("t/3")));
        assert_eq!(fake.killed(), [42]);
        assert!(fake.has_group(&svc.join("other/0")));
    }

    /// Started alone in its service's delegated group, the node moves into
    /// a leaf of it and puts its sandboxes beside it, enabling controllers
    /// from that group down and never writing the root.
    #[test]
    fn v2_a_service_moves_itself_into_a_leaf_and_never_writes_the_root() {
        let (fake, root) = v2("cpu io memory pids");
        let svc = root.join(SERVICE);
        let pool = CgroupPool::new(
            Cgroups::open_with(fake.clone(), &root, "t", None).unwrap(),
            1,
            2,
        )
        .unwrap();
        assert_eq!(
            fake.own_group().unwrap(),
            format!("/{SERVICE}/{DAEMON_LEAF}")
        );
        assert_eq!(fake.read(&svc.join("cgroup.procs")).unwrap(), "");
        assert_eq!(
            fake.read(&svc.join("cgroup.subtree_control")).unwrap(),
            "cpu memory pids\n"
        );
        let _cg = pool.take(LIMITS).unwrap().unwrap();
        assert_eq!(fake.read(&svc.join("t/0/cpu.max")).unwrap(), "50000 100000");
        pool.shutdown();
        assert!(!fake.has_group(&svc.join("t")));
        assert!(
            fake.has_group(&svc.join(DAEMON_LEAF)),
            "the node is still in it"
        );
        assert_eq!(fake.root_writes(), Vec::<String>::new());
    }

    /// The root is the init system's, and a group shared with other
    /// processes cannot have groups below it: both are refused with what
    /// to do, and nothing is made.
    #[test]
    fn v2_refuses_the_root_and_a_shared_group_naming_the_fix() {
        let root = PathBuf::from("/sys/fs/cgroup");
        let at_root = Arc::new(FakeV2::new(&root, "memory pids"));
        at_root.start_in(&root);
        let e = Cgroups::open_with(at_root.clone(), &root, "t", None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(
            e.to_string().contains("root of the cgroup hierarchy"),
            "{e}"
        );
        assert!(e.to_string().contains("Delegate=yes"), "{e}");
        assert!(at_root.subdirs(&root).is_empty());
        assert_eq!(at_root.root_writes(), Vec::<String>::new());

        let scope = "user.slice/user-0.slice/session-1.scope";
        let shared = Arc::new(FakeV2::new(&root, "memory pids"));
        shared.start_in(&root.join(scope));
        shared.spawn(&root.join(scope), 77); // the login shell
        let e = Cgroups::open_with(shared.clone(), &root, "t", None).unwrap_err();
        assert!(e.to_string().contains("shares its cgroup"), "{e}");
        assert!(e.to_string().contains("77"), "{e}");
        assert!(e.to_string().contains("--cgroup-parent"), "{e}");
        assert!(shared.subdirs(&root.join(scope)).is_empty());

        let e = Cgroups::open_with(shared.clone(), &root, "t", Some(Path::new("/"))).unwrap_err();
        assert!(
            e.to_string().contains("root of the cgroup hierarchy"),
            "{e}"
        );
        assert_eq!(shared.root_writes(), Vec::<String>::new());
    }

    /// Named a delegated parent, the node stays where it is and makes its
    /// groups below the parent; a parent whose own parent gives it no
    /// memory controller is refused, naming the file to write.
    #[test]
    fn v2_an_operators_parent_is_used_as_named() {
        let root = PathBuf::from("/sys/fs/cgroup");
        let fake = Arc::new(FakeV2::new(&root, "memory pids"));
        let svc = root.join("system.slice/tests.service");
        fake.start_in(&svc.join("runner"));
        let parent = Path::new("/system.slice/tests.service/nodes");
        let pool = CgroupPool::new(
            Cgroups::open_with(fake.clone(), &root, "t", Some(parent)).unwrap(),
            1,
            1,
        )
        .unwrap();
        assert_eq!(
            fake.own_group().unwrap(),
            "/system.slice/tests.service/runner"
        );
        assert!(!pool.cpu_limited());
        let _cg = pool.take(LIMITS).unwrap().unwrap();
        assert_eq!(fake.read(&svc.join("nodes/t/0/pids.max")).unwrap(), "32");
        assert_eq!(fake.root_writes(), Vec::<String>::new());

        let ungiven = Path::new("/system.slice/tests.service/runner/below");
        let e = Cgroups::open_with(fake.clone(), &root, "u", Some(ungiven)).unwrap_err();
        assert!(e.to_string().contains("cgroup.subtree_control"), "{e}");
    }

    /// The double is only worth what it refuses: the kernel's rules that
    /// the tests above rely on.
    #[test]
    fn the_v2_double_refuses_what_the_kernel_refuses() {
        let root = PathBuf::from("/sys/fs/cgroup");
        let fake = FakeV2::new(&root, "memory pids");
        let a = root.join("a");
        fake.mkdir(&a).unwrap();
        let no_controller = fake.write(&a.join("memory.max"), "1").unwrap_err();
        assert_eq!(no_controller.kind(), io::ErrorKind::NotFound);
        let unavailable = fake
            .write(&root.join("cgroup.subtree_control"), "+memory +cpu")
            .unwrap_err();
        assert_eq!(unavailable.kind(), io::ErrorKind::NotFound);
        fake.write(&root.join("cgroup.subtree_control"), "+memory")
            .unwrap();
        fake.write(&a.join("memory.max"), "1").unwrap();
        fake.mkdir(&a.join("b")).unwrap();
        fake.write(&a.join("cgroup.subtree_control"), "+memory")
            .unwrap();
        let internal = fake.write(&a.join("cgroup.procs"), "1").unwrap_err();
        assert_eq!(internal.raw_os_error(), None, "wrapped with its path");
        assert!(
            internal.to_string().contains("/sys/fs/cgroup/a"),
            "{internal}"
        );
        let c = root.join("c");
        fake.mkdir(&c).unwrap();
        fake.write(&c.join("cgroup.procs"), "2").unwrap();
        assert!(
            fake.write(&c.join("cgroup.subtree_control"), "+memory")
                .is_err(),
            "no controllers for the children of a group with processes"
        );
        assert!(fake.rmdir(&a).is_err(), "a group with children stays");
        assert!(fake.rmdir(&c).is_err(), "a group with processes stays");
    }
}
