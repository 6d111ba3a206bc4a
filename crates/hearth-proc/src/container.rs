//! Lean containers (SOCK §4.1): a root stitched from bind mounts, no copying.
//!
//! A sandbox's root is a directory under `<run>/sb/<id>` holding:
//!
//! | path | what | mode |
//! |---|---|---|
//! | `/usr` (+ `bin`, `lib`, … as on the host) | the host's system files | read-only bind |
//! | `/etc` | a minimal etc made by the node (no `shadow`, no host config) | read-only bind |
//! | `/dev` | `null`, `zero`, `random`, `urandom` | read-only bind |
//! | `/hearth` | the helper programs | read-only bind |
//! | `/code` | the function version's unpacked code | read-only bind |
//! | packages | each package the function asked for, at the path the zygote imported it from | read-only bind |
//! | `/tmp` | scratch: a size-limited tmpfs, also home of the node's Unix socket | read-write |
//!
//! The mounts live in the node's own mount namespace (SOCK: no mount
//! namespace on the hot path); the sandbox sees only its root through
//! `chroot`. Every mount this node makes is under its data directory, so
//! [`sweep`] can find and remove them all (at start, after a `kill -9`, and
//! at shutdown) by reading `/proc/self/mountinfo`.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

/// The read-only trees every root shares: made once per node.
#[derive(Debug, Clone)]
pub struct Base {
    /// Host system directories to bind (`/usr`, and on hosts without a
    /// merged /usr also `/bin`, `/lib`, …), and the symlinks that stand for
    /// them on merged-/usr hosts.
    system: Vec<SystemEntry>,
    pub etc: PathBuf,
    pub dev: PathBuf,
    pub hearth: PathBuf,
}

#[derive(Debug, Clone)]
enum SystemEntry {
    Bind(&'static str),
    Link(&'static str, PathBuf),
}

const SYSTEM_DIRS: [&str; 6] = ["usr", "bin", "sbin", "lib", "lib64", "lib32"];

impl Base {
    /// Prepares `<dir>/etc`, `<dir>/dev` and `<dir>/hearth` (the helpers).
    /// `devices`: make /dev nodes (needs root; without root there is no
    /// chroot, so sandboxes use the host's /dev).
    pub fn create(dir: &Path, helpers: &[(&str, &[u8])], devices: bool) -> io::Result<Base> {
        let mut system = Vec::new();
        for name in SYSTEM_DIRS {
            let host = Path::new("/").join(name);
            match fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() => {
                    system.push(SystemEntry::Link(name, fs::read_link(&host)?))
                }
                Ok(m) if m.is_dir() => system.push(SystemEntry::Bind(name)),
                _ => {}
            }
        }
        let etc = dir.join("etc");
        fs::create_dir_all(&etc)?;
        for (name, text) in [
            (
                "passwd",
                "root:x:0:0:root:/:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/tmp:/usr/sbin/nologin\n",
            ),
            ("group", "root:x:0:\nnogroup:x:65534:\n"),
            ("hosts", "127.0.0.1 localhost\n::1 localhost\n"),
            ("hostname", "sandbox\n"),
            (
                "nsswitch.conf",
                "passwd: files\ngroup: files\nhosts: files\n",
            ),
        ] {
            fs::write(etc.join(name), text)?;
        }
        // The dynamic linker's cache and TLS roots are public and speed things up.
        for name in ["ld.so.cache", "localtime"] {
            let _ = fs::copy(Path::new("/etc").join(name), etc.join(name));
        }
        let dev = dir.join("dev");
        fs::create_dir_all(&dev)?;
        for (name, minor) in [("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)] {
            let path = dev.join(name);
            if devices && !path.exists() {
                let c = cstr(&path)?;
                // SAFETY: `c` is a valid NUL-terminated path.
                let rc = unsafe {
                    libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, minor))
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
                fs::set_permissions(&path, fs::Permissions::from_mode(0o666))?;
            }
        }
        let hearth = dir.join("hearth");
        fs::create_dir_all(&hearth)?;
        for (name, bytes) in helpers {
            fs::write(hearth.join(name), bytes)?;
        }
        Ok(Base {
            system,
            etc,
            dev,
            hearth,
        })
    }
}

/// One sandbox's root and its mounts; unmounted and removed on [`Root::destroy`].
#[derive(Debug)]
pub struct Root {
    pub path: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Root {
    /// Builds a root at `path` (which must not exist): the base, the code,
    /// the packages (host paths, mounted at the same path inside) and a
    /// scratch tmpfs of `scratch_mib`.
    /// Builds the generic part of a root: system directories, the base's
    /// etc, dev and helpers, and the scratch tmpfs. Nothing here depends on
    /// a function, so roots can be built ahead of time; [`Root::attach`]
    /// adds a function's code and packages.
    pub fn build(path: &Path, base: &Base, scratch_mib: u32) -> io::Result<Root> {
        fs::create_dir(path)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
        let mut root = Root {
            path: path.to_path_buf(),
            mounts: Vec::new(),
        };
        match root.populate(base, &base.etc, scratch_mib) {
            Ok(()) => Ok(root),
            Err(e) => {
                root.destroy();
                Err(e)
            }
        }
    }

    /// A root for a package install: the system files and the host's
    /// `/etc` (name resolution and TLS roots, for reaching the index),
    /// read-only; each of `writable` writable and each of `readable`
    /// read-only, at their host paths; a small scratch tmpfs. Nothing else
    /// of the host.
    pub fn build_for_install(
        path: &Path,
        base: &Base,
        writable: &[&Path],
        readable: &[PathBuf],
    ) -> io::Result<Root> {
        fs::create_dir(path)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
        let mut root = Root {
            path: path.to_path_buf(),
            mounts: Vec::new(),
        };
        let populated = (|| {
            root.populate(base, Path::new("/etc"), 64)?;
            for p in readable {
                root.bind_ro(p, p.strip_prefix("/").unwrap_or(p), true)?;
            }
            for p in writable {
                root.bind_rw(p, p.strip_prefix("/").unwrap_or(p))?;
            }
            Ok(())
        })();
        match populated {
            Ok(()) => Ok(root),
            Err(e) => {
                root.destroy();
                Err(e)
            }
        }
    }

    fn populate(&mut self, base: &Base, etc: &Path, scratch_mib: u32) -> io::Result<()> {
        for entry in &base.system {
            match entry {
                SystemEntry::Link(name, target) => symlink(target, self.path.join(name))?,
                SystemEntry::Bind(name) => {
                    self.bind_ro(&Path::new("/").join(name), Path::new(name), true)?
                }
            }
        }
        self.bind_ro(etc, Path::new("etc"), true)?;
        self.bind_ro(&base.dev, Path::new("dev"), false)?;
        self.bind_ro(&base.hearth, Path::new("hearth"), true)?;
        // Scratch before packages: a data directory under /tmp puts
        // package mount points inside it.
        let tmp = self.path.join("tmp");
        fs::create_dir(&tmp)?;
        mount(
            Some(Path::new("tmpfs")),
            &tmp,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&format!("size={}m,mode=1777", scratch_mib.max(1))),
        )?;
        self.mounts.push(tmp);
        Ok(())
    }

    /// Gives the root a function: its code at `/code` and its installed
    /// packages read-only at their host paths.
    pub fn attach(&mut self, code: Option<&Path>, packages: &[PathBuf]) -> io::Result<()> {
        if let Some(code) = code {
            self.bind_code(code)?;
        }
        for p in packages {
            let inside = p.strip_prefix("/").unwrap_or(p);
            self.bind_ro(p, inside, true)?;
        }
        Ok(())
    }

    /// Mounts a version's code at `/code`. Done at build time for Python
    /// handlers; a generic Node process gets it when it is given a function.
    pub fn bind_code(&mut self, code: &Path) -> io::Result<()> {
        self.bind_ro(code, Path::new("code"), true)
    }

    /// Mounts the packages of an npm `node_modules` directory at
    /// `/node_modules/<name>`, where Node's resolver looks last (after the
    /// code's own `node_modules`). The first package to claim a name wins.
    pub fn bind_node_modules(&mut self, node_modules: &Path) -> io::Result<()> {
        for entry in fs::read_dir(node_modules)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let inside = Path::new("node_modules").join(&name);
            if self.path.join(&inside).exists() {
                continue;
            }
            self.bind_ro(&entry.path(), &inside, true)?;
        }
        Ok(())
    }

    /// The host path of `inside` (an absolute path within the sandbox).
    pub fn host_path(&self, inside: &str) -> PathBuf {
        self.path.join(inside.trim_start_matches('/'))
    }

    fn bind_ro(&mut self, source: &Path, inside: &Path, nodev: bool) -> io::Result<()> {
        let target = self.path.join(inside);
        if source.is_dir() {
            fs::create_dir_all(&target)?;
        } else {
            fs::create_dir_all(target.parent().unwrap_or(&self.path))?;
            fs::write(&target, b"")?;
        }
        let extra = libc::MS_NOSUID | if nodev { libc::MS_NODEV } else { 0 };
        mount(
            Some(source),
            &target,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
        self.mounts.push(target.clone());
        // A bind mount is read-write until remounted read-only.
        mount(
            None,
            &target,
            None,
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | extra,
            None,
        )
    }

    fn bind_rw(&mut self, source: &Path, inside: &Path) -> io::Result<()> {
        let target = self.path.join(inside);
        fs::create_dir_all(&target)?;
        mount(Some(source), &target, None, libc::MS_BIND, None)?;
        self.mounts.push(target);
        Ok(())
    }

    /// Unmounts everything and removes the directory. Never fails loudly:
    /// what cannot be removed now is found by [`sweep`] later.
    pub fn destroy(&mut self) {
        for m in self.mounts.drain(..).rev() {
            let _ = umount(&m);
        }
        if let Err(e) = remove_tree_on_one_fs(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "sandbox root not removed");
        }
    }
}

/// Removes a directory tree without crossing into mounts (a stale mount
/// would otherwise expose host files to `remove_dir_all`).
fn remove_tree_on_one_fs(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::symlink_metadata(path)?.dev();
    fn walk(p: &Path, dev: u64) -> io::Result<()> {
        for entry in fs::read_dir(p)? {
            let entry = entry?;
            let meta = fs::symlink_metadata(entry.path())?;
            if meta.is_dir() {
                if meta.dev() != dev {
                    return Err(io::Error::other(format!(
                        "{} is still a mount point",
                        entry.path().display()
                    )));
                }
                walk(&entry.path(), dev)?;
                fs::remove_dir(entry.path())?;
            } else {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
    walk(path, dev)?;
    fs::remove_dir(path)
}

/// Unmounts every mount at or below `dir` (deepest first). Returns how many.
pub fn sweep(dir: &Path) -> usize {
    let Ok(dir) = dir.canonicalize() else {
        return 0;
    };
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return 0;
    };
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| p.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.dedup();
    let mut n = 0;
    for p in points {
        if umount(&p).is_ok() {
            n += 1;
        }
    }
    n
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> PathBuf {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains NUL"))
}

fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(cstr).transpose()?;
    let target_c = cstr(target)?;
    let text = |s: &str| CString::new(s).map_err(|_| io::Error::other("mount option contains NUL"));
    let fstype = fstype.map(text).transpose()?;
    let data = data.map(text).transpose()?;
    // SAFETY: every pointer is either null or a valid NUL-terminated string
    // that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target_c.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!("mount on {}: {e}", target.display()),
        ))
    }
}

fn umount(target: &Path) -> io::Result<()> {
    let c = cstr(target)?;
    // SAFETY: `c` is a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(
            unescape_mountinfo(r"/tmp/a\040b\134c"),
            PathBuf::from("/tmp/a b\\c")
        );
        assert_eq!(unescape_mountinfo("/plain"), PathBuf::from("/plain"));
    }
}
