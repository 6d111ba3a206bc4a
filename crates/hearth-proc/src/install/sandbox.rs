//! How an installer runs when the node is root: in a root, cgroup and
//! network namespace of its own, as the sandbox user (see `mod.rs`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::cgroup::{Cgroup, CgroupLimits, CgroupPool};
use crate::container::{Base, Root};
use crate::egress;

use super::InstallCache;

/// How pip and npm are confined when the node is root.
#[derive(Debug, Clone)]
pub struct InstallSandbox {
    /// The system trees of its root.
    pub base: Base,
    /// Where its roots are made.
    pub run_dir: PathBuf,
    /// The sandbox user and group it runs as.
    pub uid: u32,
    pub gid: u32,
    /// The package indexes it may reach (`host` or `host:port`).
    pub index_hosts: Vec<String>,
    /// Let its proxy reach this machine and private networks (an index
    /// on the node's network).
    pub allow_private: bool,
}

/// Where pip and npm fetch from unless the operator says otherwise: PyPI's
/// index and files, and npm's registry.
pub const DEFAULT_INDEX_HOSTS: [&str; 3] = [
    "pypi.org:443",
    "files.pythonhosted.org:443",
    "registry.npmjs.org:443",
];

/// Memory one install may use: its cgroup's limit, and the address space
/// pip may map (a second bound, and the only one without cgroups; not for
/// npm, whose V8 reserves far more address space than it uses).
pub(super) const INSTALL_MEMORY: u64 = 2 << 30;
/// Processes and threads one install may run at once (npm's Node.js has
/// about a dozen threads).
const INSTALL_PIDS: u32 = 128;

impl InstallCache {
    /// Builds the installer's root and cgroup (into `held`, which the
    /// caller undoes) and makes `cmd` start inside them.
    pub(super) fn confine(
        &self,
        cmd: &mut tokio::process::Command,
        sandbox: &InstallSandbox,
        scratch: &Path,
        target: &Path,
        address_space: Option<u64>,
        held: &mut Confinement,
    ) -> std::io::Result<()> {
        let mut procs = Vec::new();
        if let Some(pool) = self.cgroups.get() {
            let limits = CgroupLimits {
                memory_bytes: INSTALL_MEMORY,
                max_pids: INSTALL_PIDS,
                cpu_percent: 100,
            };
            let cgroup = pool.take(limits)?.ok_or_else(|| {
                std::io::Error::other(
                    "the node runs as many sandboxes as it may (--max-sandboxes); try again",
                )
            })?;
            procs = cgroup.procs_files();
            held.cgroup = Some(cgroup);
        }
        let n = self.next_root.fetch_add(1, Ordering::Relaxed);
        let path = sandbox.run_dir.join("sb").join(format!("i{n}"));
        let readable: Vec<PathBuf> = self.offline.iter().cloned().collect();
        let root = Root::build_for_install(&path, &sandbox.base, &[target, scratch], &readable)?;
        let root_path = root.path.clone();
        held.root = Some(root);
        // Online, a proxy to the indexes; offline, no way out at all.
        let (netns, listener) = network_namespace(self.offline.is_none())?;
        let mut proxy = None;
        if let Some(listener) = listener {
            proxy = Some(listener.local_addr()?.port());
            listener.set_nonblocking(true)?;
            let allowed = egress::Allowed {
                hosts: sandbox.index_hosts.clone().into(),
                fix: "installs reach only the package indexes the node names (--package-index-host)",
                private: sandbox.allow_private,
                budget: None,
            };
            let listener = egress::Listener::Tcp(tokio::net::TcpListener::from_std(listener)?);
            held.proxy = Some(egress::Relay(egress::serve(listener, allowed)));
        }
        let jail = Jail {
            root: &root_path,
            uid: sandbox.uid,
            gid: sandbox.gid,
            home: scratch,
            address_space,
            cgroup_procs: &procs,
            netns: netns.as_raw_fd(),
            proxy,
        };
        held.netns = Some(netns);
        jail.apply(cmd)
    }
}

/// What a confined install holds until it ends.
#[derive(Default)]
pub(super) struct Confinement {
    root: Option<Root>,
    cgroup: Option<Cgroup>,
    netns: Option<OwnedFd>,
    /// Stops the proxy when dropped.
    proxy: Option<egress::Relay>,
}

impl Confinement {
    /// Undoes it once the installer has exited: whatever it left running
    /// is killed with its cgroup (given back to `pool`) before its root is
    /// unmounted and the caller takes its files back.
    pub(super) async fn release(mut self, pool: Option<&Arc<CgroupPool>>) {
        if let (Some(cgroup), Some(pool)) = (self.cgroup.take(), pool) {
            let pool = pool.clone();
            let _ = tokio::task::spawn_blocking(move || pool.give_back(cgroup)).await;
        }
        if let Some(mut root) = self.root.take() {
            root.destroy();
        }
    }
}

/// A new network namespace whose only interface is `lo`, up, and when
/// `listen`, a listener on its `127.0.0.1`. Made on a thread of its own,
/// which alone enters the namespace and then ends; the listener and the
/// returned descriptor keep the namespace.
fn network_namespace(listen: bool) -> std::io::Result<(OwnedFd, Option<std::net::TcpListener>)> {
    std::thread::spawn(move || {
        // SAFETY: unshare(2) changes only this thread's namespaces.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        loopback_up()?;
        let listener = match listen {
            true => Some(std::net::TcpListener::bind("127.0.0.1:0")?),
            false => None,
        };
        let ns = std::fs::File::open("/proc/thread-self/ns/net")?;
        Ok((OwnedFd::from(ns), listener))
    })
    .join()
    .map_err(|_| std::io::Error::other("the network namespace's thread panicked"))?
}

/// Brings up `lo` in the calling thread's network namespace.
fn loopback_up() -> std::io::Result<()> {
    /// `struct ifreq` with its `ifr_flags` member.
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _rest: [u8; 22],
    }
    // SAFETY: socket(2) has no preconditions; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _rest: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: both ioctls read and write an ifreq, which `req` is.
    unsafe {
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The daemon's environment variables an installer keeps: where to find
/// the certificates TLS trusts (Node.js reads only the first; OpenSSL,
/// pip and requests the others).
const TRUST_VARS: [&str; 5] = [
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
];

/// How an installer's process starts: in its cgroup and network
/// namespace, chrooted into `root` as `uid`/`gid` with no supplementary
/// groups, `no_new_privs`, and an environment of its own whose home and
/// temporary files are `home` and whose proxy is on `proxy`.
struct Jail<'a> {
    root: &'a Path,
    uid: u32,
    gid: u32,
    home: &'a Path,
    address_space: Option<u64>,
    cgroup_procs: &'a [PathBuf],
    netns: RawFd,
    proxy: Option<u16>,
}

impl Jail<'_> {
    fn apply(&self, cmd: &mut tokio::process::Command) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let cstr = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes());
        let root = cstr(self.root)?;
        let procs = self
            .cgroup_procs
            .iter()
            .map(|p| cstr(p))
            .collect::<Result<Vec<_>, _>>()?;
        let (uid, gid, address_space, netns) = (self.uid, self.gid, self.address_space, self.netns);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.home)
            .env("TMPDIR", self.home)
            .env("LANG", "C.UTF-8");
        // The operator's TLS trust (an index behind a private CA); paths
        // under /etc or /usr, which its root shows.
        for var in TRUST_VARS {
            if let Some(value) = std::env::var_os(var) {
                cmd.env(var, value);
            }
        }
        if let Some(port) = self.proxy {
            // What pip (requests) and npm each read.
            let url = format!("http://127.0.0.1:{port}");
            for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                cmd.env(var, &url);
            }
            cmd.env("npm_config_proxy", &url)
                .env("npm_config_https_proxy", &url);
        }
        let fail = || Err(std::io::Error::last_os_error());
        // SAFETY: between fork and exec the closure makes only system calls
        // (async-signal-safe) on memory allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(netns, libc::CLONE_NEWNET) != 0 {
                    return fail();
                }
                // Into its group first: nothing it starts is outside it.
                for procs in &procs {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return fail();
                    }
                    let written = libc::write(fd, c"0".as_ptr().cast(), 1);
                    libc::close(fd);
                    if written != 1 {
                        return fail();
                    }
                }
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
                if let Some(bytes) = address_space {
                    let limit = libc::rlimit {
                        rlim_cur: bytes,
                        rlim_max: bytes,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                        return fail();
                    }
                }
                Ok(())
            });
        }
        Ok(())
    }
}
