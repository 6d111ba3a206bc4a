//! The cgroup filesystem as the pool uses it: every read, write, `mkdir`,
//! `rmdir` and kill goes through [`CgroupFs`], so unit tests can put a
//! model of the kernel in its place (youki's `Syscall` seam). [`Kernel`]
//! is the real thing; `fake.rs` holds the test double.

use std::ffi::OsString;
use std::fmt::Debug;
use std::fs;
use std::io;
use std::path::Path;

/// What the cgroup code asks of the cgroup filesystem and of signals.
pub(crate) trait CgroupFs: Send + Sync + Debug {
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Writes a control file; errors name the file.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    /// Creates one directory (`AlreadyExists` if it is there).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and any missing parents.
    fn mkdir_all(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty group (`EBUSY` while the kernel still tears one
    /// down, or while it holds processes or children).
    fn rmdir(&self, path: &Path) -> io::Result<()>;
    fn is_dir(&self, path: &Path) -> bool;
    fn exists(&self, path: &Path) -> bool;
    /// The names of the directories in `path` (none if it is missing).
    fn subdirs(&self, path: &Path) -> Vec<OsString>;
    /// Sends SIGKILL to `pid`.
    fn kill(&self, pid: i32);
    /// This process's v2 group, as a path in the hierarchy (`/` for its
    /// root), from `/proc/self/cgroup`.
    fn own_group(&self) -> io::Result<String>;
    /// This process's id.
    fn own_pid(&self) -> i32;
}

/// The running kernel's `/sys/fs/cgroup` and `kill(2)`.
#[derive(Debug)]
pub(crate) struct Kernel;

impl CgroupFs for Kernel {
    fn read(&self, path: &Path) -> io::Result<String> {
        fs::read_to_string(path)
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        fs::write(path, value)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn mkdir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn subdirs(&self, path: &Path) -> Vec<OsString> {
        fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name())
            .collect()
    }

    fn kill(&self, pid: i32) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    fn own_group(&self) -> io::Result<String> {
        let text = fs::read_to_string("/proc/self/cgroup")?;
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_string)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "/proc/self/cgroup names no cgroup v2 group",
                )
            })
    }

    fn own_pid(&self) -> i32 {
        std::process::id() as i32
    }
}
