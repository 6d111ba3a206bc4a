//! A model of the cgroup v2 kernel interface for unit tests: the rules the
//! kernel enforces that this code must respect, without a v2 machine.
//!
//! - A group's controller files (`memory.*`, `pids.*`, `cpu.*`) exist only
//!   when its parent enabled the controller in `cgroup.subtree_control`;
//!   writing any other file is `ENOENT`.
//! - `cgroup.subtree_control` takes only controllers the group itself
//!   offers (`cgroup.controllers`: the root's are the machine's); one
//!   unavailable controller fails the whole write with `ENOENT`.
//! - No internal processes: outside the root, a group with controllers
//!   enabled for its children holds no process (`EBUSY` either way).
//! - `rmdir` of a group with processes or children is `EBUSY`.
//! - `cgroup.kill` and SIGKILL end processes, frozen or not.
//! - The root has no `cgroup.type`, `cgroup.kill` or controller files.
//!
//! It also records every write to the root, which this code must never
//! make (the root is the init system's), and plays the calling process:
//! [`FakeV2::start_in`] says in which group it was started.
//!
//! Processes are numbers: [`FakeV2::spawn`] puts one in a group, as a fork
//! inside it would.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::fs::CgroupFs;

#[derive(Debug, Default)]
struct Group {
    subtree: BTreeSet<String>,
    procs: BTreeSet<i32>,
    frozen: bool,
    /// Values written to, or set by a test for, controller files.
    values: BTreeMap<String, String>,
}

#[derive(Debug)]
pub(crate) struct FakeV2 {
    root: PathBuf,
    /// The machine's controllers: the root's `cgroup.controllers`.
    available: BTreeSet<String>,
    groups: Mutex<BTreeMap<PathBuf, Group>>,
    killed: Mutex<Vec<i32>>,
    /// Files of the root written to.
    root_writes: Mutex<Vec<String>>,
    /// The calling process's pid.
    me: i32,
}

/// The calling process's pid in the model.
pub(crate) const ME: i32 = 4242;

fn err(code: i32, what: impl std::fmt::Display) -> io::Error {
    let e = io::Error::from_raw_os_error(code);
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl FakeV2 {
    /// A v2 hierarchy at `root` offering `controllers` (space-separated).
    pub fn new(root: &Path, controllers: &str) -> FakeV2 {
        let mut groups = BTreeMap::new();
        groups.insert(root.to_path_buf(), Group::default());
        FakeV2 {
            root: root.to_path_buf(),
            available: controllers.split_whitespace().map(str::to_string).collect(),
            groups: Mutex::new(groups),
            killed: Mutex::default(),
            root_writes: Mutex::default(),
            me: ME,
        }
    }

    /// The calling process ([`ME`]), started in group `dir` as systemd
    /// starts a service with `Delegate=yes`: the group made if missing,
    /// every controller enabled on each level above it.
    pub fn start_in(&self, dir: &Path) {
        let mut groups = self.groups.lock();
        for level in dir.ancestors().filter(|p| p.starts_with(&self.root)) {
            groups.entry(level.to_path_buf()).or_default();
            if level != dir {
                groups.get_mut(level).expect("just made").subtree = self.available.clone();
            }
        }
        groups
            .get_mut(dir)
            .expect("just made")
            .procs
            .insert(self.me);
    }

    /// The files of the root written to.
    pub fn root_writes(&self) -> Vec<String> {
        self.root_writes.lock().clone()
    }

    /// A process started in group `dir` (which must exist).
    pub fn spawn(&self, dir: &Path, pid: i32) {
        let mut groups = self.groups.lock();
        groups
            .get_mut(dir)
            .expect("spawn into a group that exists")
            .procs
            .insert(pid);
    }

    /// Sets a controller file's content, as the kernel would report it.
    pub fn set(&self, dir: &Path, file: &str, value: &str) {
        let mut groups = self.groups.lock();
        groups
            .get_mut(dir)
            .expect("a group that exists")
            .values
            .insert(file.into(), value.into());
    }

    pub fn has_group(&self, dir: &Path) -> bool {
        self.groups.lock().contains_key(dir)
    }

    pub fn frozen(&self, dir: &Path) -> bool {
        self.groups.lock().get(dir).is_some_and(|g| g.frozen)
    }

    pub fn killed(&self) -> Vec<i32> {
        self.killed.lock().clone()
    }

    /// The controllers group `dir` offers: the machine's at the root, else
    /// what its parent enabled.
    fn offered(&self, groups: &BTreeMap<PathBuf, Group>, dir: &Path) -> BTreeSet<String> {
        if dir == self.root {
            return self.available.clone();
        }
        dir.parent()
            .and_then(|p| groups.get(p))
            .map(|p| p.subtree.clone())
            .unwrap_or_default()
    }

    /// Whether `file` exists in group `dir`.
    fn has_file(&self, groups: &BTreeMap<PathBuf, Group>, dir: &Path, file: &str) -> bool {
        let root = dir == self.root;
        match file {
            "cgroup.procs" | "cgroup.controllers" | "cgroup.subtree_control" => true,
            "cgroup.kill" | "cgroup.freeze" | "cgroup.events" | "cgroup.type" => !root,
            _ => {
                let Some((controller, _)) = file.split_once('.') else {
                    return false;
                };
                // memory.swap.max: this machine accounts swap.
                !root && self.offered(groups, dir).contains(controller)
            }
        }
    }

    fn split(path: &Path) -> io::Result<(&Path, &str)> {
        let dir = path
            .parent()
            .ok_or_else(|| err(libc::ENOENT, path.display()))?;
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .ok_or_else(|| err(libc::ENOENT, path.display()))?;
        Ok((dir, file))
    }
}

impl CgroupFs for FakeV2 {
    fn read(&self, path: &Path) -> io::Result<String> {
        let groups = self.groups.lock();
        let (dir, file) = FakeV2::split(path)?;
        let Some(g) = groups.get(dir) else {
            return Err(err(libc::ENOENT, path.display()));
        };
        if !self.has_file(&groups, dir, file) {
            return Err(err(libc::ENOENT, path.display()));
        }
        let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(" ");
        Ok(match file {
            "cgroup.procs" => g.procs.iter().map(|p| format!("{p}\n")).collect(),
            "cgroup.controllers" => join(&self.offered(&groups, dir)) + "\n",
            "cgroup.subtree_control" => join(&g.subtree) + "\n",
            "cgroup.freeze" => format!("{}\n", u8::from(g.frozen)),
            "cgroup.type" => "domain\n".into(),
            "memory.events" => g
                .values
                .get(file)
                .cloned()
                .unwrap_or_else(|| "oom 0\noom_kill 0\n".into()),
            "memory.current" => g.values.get(file).cloned().unwrap_or_else(|| "0\n".into()),
            _ => g
                .values
                .get(file)
                .cloned()
                .unwrap_or_else(|| "max\n".into()),
        })
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        let mut groups = self.groups.lock();
        let (dir, file) = FakeV2::split(path)?;
        if !groups.contains_key(dir) || !self.has_file(&groups, dir, file) {
            return Err(err(libc::ENOENT, path.display()));
        }
        let is_root = dir == self.root;
        if is_root {
            self.root_writes.lock().push(file.to_string());
        }
        match file {
            "cgroup.subtree_control" => {
                let offered = self.offered(&groups, dir);
                let mut add = Vec::new();
                for token in value.split_whitespace() {
                    let (on, name) = match token.split_at(1) {
                        ("+", n) => (true, n),
                        ("-", n) => (false, n),
                        _ => return Err(err(libc::EINVAL, path.display())),
                    };
                    if !offered.contains(name) {
                        return Err(err(libc::ENOENT, path.display()));
                    }
                    add.push((on, name.to_string()));
                }
                let g = groups.get_mut(dir).expect("checked above");
                if !is_root && !g.procs.is_empty() {
                    return Err(err(libc::EBUSY, path.display()));
                }
                for (on, name) in add {
                    if on {
                        g.subtree.insert(name);
                    } else {
                        g.subtree.remove(&name);
                    }
                }
            }
            "cgroup.procs" => {
                let pid: i32 = value
                    .trim()
                    .parse()
                    .map_err(|_| err(libc::EINVAL, path.display()))?;
                if !is_root && !groups[dir].subtree.is_empty() {
                    return Err(err(libc::EBUSY, path.display()));
                }
                for g in groups.values_mut() {
                    g.procs.remove(&pid);
                }
                groups
                    .get_mut(dir)
                    .expect("checked above")
                    .procs
                    .insert(pid);
            }
            "cgroup.kill" => {
                let g = groups.get_mut(dir).expect("checked above");
                self.killed.lock().extend(g.procs.iter().copied());
                g.procs.clear();
            }
            "cgroup.freeze" => {
                groups.get_mut(dir).expect("checked above").frozen = value.trim() == "1";
            }
            "memory.max" | "memory.swap.max" | "pids.max" => {
                let v = value.trim();
                if v != "max" && v.parse::<u64>().is_err() {
                    return Err(err(libc::EINVAL, path.display()));
                }
                groups
                    .get_mut(dir)
                    .expect("checked above")
                    .values
                    .insert(file.into(), v.into());
            }
            "cpu.max" => {
                let mut parts = value.split_whitespace();
                let quota_ok = parts
                    .next()
                    .is_some_and(|q| q == "max" || q.parse::<u64>().is_ok());
                let period_ok = parts.next().is_none_or(|p| p.parse::<u64>().is_ok());
                if !quota_ok || !period_ok {
                    return Err(err(libc::EINVAL, path.display()));
                }
                groups
                    .get_mut(dir)
                    .expect("checked above")
                    .values
                    .insert(file.into(), value.trim().into());
            }
            _ => return Err(err(libc::EACCES, path.display())),
        }
        Ok(())
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        let mut groups = self.groups.lock();
        if groups.contains_key(path) {
            return Err(err(libc::EEXIST, path.display()));
        }
        if !path.parent().is_some_and(|p| groups.contains_key(p)) {
            return Err(err(libc::ENOENT, path.display()));
        }
        groups.insert(path.to_path_buf(), Group::default());
        Ok(())
    }

    fn mkdir_all(&self, path: &Path) -> io::Result<()> {
        let missing: Vec<&Path> = path
            .ancestors()
            .take_while(|p| !self.groups.lock().contains_key(*p))
            .collect();
        for dir in missing.into_iter().rev() {
            self.mkdir(dir)?;
        }
        Ok(())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        let mut groups = self.groups.lock();
        let Some(g) = groups.get(path) else {
            return Err(err(libc::ENOENT, path.display()));
        };
        let has_children = groups.keys().any(|k| k.parent() == Some(path));
        if !g.procs.is_empty() || has_children || path == self.root {
            return Err(err(libc::EBUSY, path.display()));
        }
        groups.remove(path);
        Ok(())
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.groups.lock().contains_key(path)
    }

    fn exists(&self, path: &Path) -> bool {
        let groups = self.groups.lock();
        groups.contains_key(path)
            || FakeV2::split(path).is_ok_and(|(dir, file)| {
                groups.contains_key(dir) && self.has_file(&groups, dir, file)
            })
    }

    fn subdirs(&self, path: &Path) -> Vec<OsString> {
        self.groups
            .lock()
            .keys()
            .filter(|k| k.parent() == Some(path))
            .filter_map(|k| k.file_name().map(OsString::from))
            .collect()
    }

    fn kill(&self, pid: i32) {
        let mut groups = self.groups.lock();
        for g in groups.values_mut() {
            if g.procs.remove(&pid) {
                self.killed.lock().push(pid);
            }
        }
    }

    fn own_group(&self) -> io::Result<String> {
        let groups = self.groups.lock();
        let (dir, _) = groups
            .iter()
            .find(|(_, g)| g.procs.contains(&self.me))
            .ok_or_else(|| err(libc::ENOENT, "/proc/self/cgroup"))?;
        let rel = dir.strip_prefix(&self.root).unwrap_or(dir);
        Ok(format!("/{}", rel.display()))
    }

    fn own_pid(&self) -> i32 {
        self.me
    }
}
