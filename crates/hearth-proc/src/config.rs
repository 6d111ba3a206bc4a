//! The process tier's settings, its caches switch, how isolated its
//! sandboxes are on this machine, and what it reports to `hearth status`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hearth_core::Colocation;
use hearth_host::ColocationPolicy;

/// Settings of the process tier.
#[derive(Debug, Clone)]
pub struct ProcConfig {
    /// Where the tier keeps code, packages and sandbox roots (`<data>/proc`).
    pub dir: PathBuf,
    pub python: PathBuf,
    pub node: PathBuf,
    /// npm, which installs Node.js packages.
    pub npm: PathBuf,
    /// A directory of wheels (and npm's cache in `npm/`) to install from
    /// without the network.
    pub offline_packages: Option<PathBuf>,
    /// The cgroup sandboxes go under (`--cgroup-parent`); `None`: see
    /// `cgroup`'s layouts.
    pub cgroup_parent: Option<PathBuf>,
    /// Remount a container's own read-only cgroup namespace read-write
    /// (`--remount-cgroupfs`, `cgroup::make_writable`).
    pub remount_cgroupfs: bool,
    /// Let the egress proxy reach this machine and private networks
    /// (the node's `--allow-private-egress`).
    pub allow_private_egress: bool,
    /// The package indexes installs may reach (`install.rs`).
    pub package_index_hosts: Vec<String>,
    /// Where installs fetch from instead of PyPI and npm's registry.
    pub registries: crate::install::Registries,
    /// Unprivileged user and group sandboxes run as.
    pub sandbox_uid: u32,
    /// Most sandboxes (running or paused) at once.
    pub max_sandboxes: usize,
    /// cgroups made ahead of time.
    pub warm_cgroups: usize,
    /// Generic sandbox roots (system directories and scratch mounted, no
    /// function yet) built ahead of time, so a cold start only binds code
    /// and packages.
    pub warm_roots: usize,
    /// Memory the paused handlers may hold before the oldest go.
    pub handler_cache_bytes: u64,
    /// How long a paused handler is kept without being used.
    pub keep_alive: Duration,
    /// Memory the zygotes may hold.
    pub zygote_budget_bytes: u64,
    /// Generic processes kept started per language (Python, Node.js),
    /// once a function of that language is prepared (`engine/pool.rs`).
    pub generic_pool: usize,
    pub scratch_mib: u32,
    pub max_pids: u32,
    pub cpu_percent: u32,
    pub max_response_bytes: usize,
    /// The most of a streamed request a handler is given (its Lambda event
    /// holds the body whole): the node's `max_body_bytes`.
    pub max_body_bytes: usize,
    /// Which of SOCK's three caches are on (all, unless measuring them).
    pub caches: Caches,
    /// Which functions may fork from the same package zygote
    /// (`zygote.rs`); asked at each new Python handler.
    pub colocation: Arc<dyn ColocationPolicy>,
}

/// SOCK's three caches. All are on by default; turning one off exists to
/// measure what it is worth (`bench/proc.sh`), as SOCK's Fig. 17 does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Caches {
    /// Packages installed once into a shared store. Off: each new Python
    /// handler installs its packages afresh (pip, without pip's own cache)
    /// into a directory of its own, and forks from the bare zygote.
    pub install: bool,
    /// Python zygotes with packages imported. Off: handlers fork from the
    /// bare zygote and import their packages themselves.
    pub import: bool,
    /// Paused handlers kept for the next invocation. Off: every invocation
    /// gets a new handler, destroyed after it.
    pub handler: bool,
    /// Zygotes learn the submodules their handlers import (`zygote.rs`).
    /// Off: they import only their packages' top-level modules.
    pub learn: bool,
}

impl Caches {
    pub const ALL: Caches = Caches {
        install: true,
        import: true,
        handler: true,
        learn: true,
    };

    /// Parses `all`, `none`, or a comma list of `install`, `import`,
    /// `handler`, `learn`.
    pub fn parse(s: &str) -> Result<Caches, UnknownCache> {
        let mut c = Caches {
            install: false,
            import: false,
            handler: false,
            learn: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => c = Caches::ALL,
                "none" => {}
                "install" => c.install = true,
                "import" => c.import = true,
                "handler" => c.handler = true,
                "learn" => c.learn = true,
                other => return Err(UnknownCache(other.to_string())),
            }
        }
        Ok(c)
    }
}

/// A cache name `--proc-caches` does not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown cache {0:?}: expected all, none, install, import, handler or learn")]
pub struct UnknownCache(pub String);

impl ProcConfig {
    pub fn new(dir: PathBuf) -> ProcConfig {
        ProcConfig {
            dir,
            python: "/usr/bin/python3".into(),
            node: "/usr/bin/node".into(),
            npm: "/usr/bin/npm".into(),
            offline_packages: None,
            cgroup_parent: None,
            remount_cgroupfs: false,
            allow_private_egress: false,
            registries: Default::default(),
            package_index_hosts: crate::install::DEFAULT_INDEX_HOSTS
                .map(String::from)
                .to_vec(),
            sandbox_uid: 65534,
            max_sandboxes: 64,
            warm_cgroups: 8,
            warm_roots: 4,
            handler_cache_bytes: 1 << 30,
            keep_alive: Duration::from_secs(300),
            zygote_budget_bytes: 512 << 20,
            generic_pool: 2,
            scratch_mib: 64,
            max_pids: 64,
            cpu_percent: 100,
            max_response_bytes: 6 << 20,
            max_body_bytes: 6 << 20,
            caches: Caches::ALL,
            colocation: Arc::new(Colocation::default()),
        }
    }
}

/// What the tier can and cannot enforce on this machine, for `hearth status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcStatus {
    pub cgroups: Option<String>,
    pub isolation: Isolation,
    pub caches: Caches,
    /// Plain sentences about what is weaker than intended.
    pub degraded: Vec<String>,
    pub paused_handlers: usize,
    pub generic_node_processes: usize,
    /// Pooled generic Python processes (only with cgroups: see
    /// `engine/pool.rs`).
    pub generic_python_processes: usize,
    /// New handlers that were taken from a generic pool, per language.
    pub handlers_from_pool: std::collections::BTreeMap<&'static str, u64>,
    pub zygotes: Vec<crate::zygote::ZygoteStatus>,
    /// The mode for tenants without an override of their own.
    pub colocation: Colocation,
}

/// How sandboxes are separated from the host and each other. seccomp and
/// `no_new_privs` apply in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Root: lean container (chroot), PID/IPC/UTS namespaces, uid 65534.
    Full,
    /// Not root: a user namespace owning PID/IPC/UTS namespaces, no
    /// capabilities; no chroot.
    UserNamespace,
    /// Not root and no user namespaces: seccomp only.
    None,
}

impl Isolation {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Isolation::Full => "full",
            Isolation::UserNamespace => "userns",
            Isolation::None => "none",
        }
    }

    /// Whether this kernel lets an unprivileged process make a user namespace.
    pub(crate) fn user_namespaces_work() -> bool {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("/bin/true");
        // SAFETY: the closure runs in the forked child and makes one
        // syscall, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        cmd.status().is_ok_and(|s| s.success())
    }
}

#[cfg(test)]
mod tests {
    use super::Caches;

    #[test]
    fn caches_parse_lists_and_refuses_unknown_names() {
        assert_eq!(Caches::parse("all").unwrap(), Caches::ALL);
        let none = Caches::parse("none").unwrap();
        assert!(!none.install && !none.import && !none.handler);
        let some = Caches::parse("install, handler").unwrap();
        assert!(some.install && !some.import && some.handler);
        assert_eq!(Caches::parse("install,zygote").unwrap_err().0, "zygote");
    }
}
