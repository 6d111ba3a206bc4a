//! Making and unmaking sandboxes: a root (from the pool of generic roots),
//! a cgroup (from the cgroup pool), a process forked by a zygote or spawned
//! through one, and its connection; destruction.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hearth_core::{FunctionVersion, InvokeError, Runtime};
use serde_json::{Value, json};
use tokio::net::UnixListener;

use super::{Inner, ProcEngine};
use crate::cgroup::{CgroupLimits, CgroupPool};
use crate::container::Root;
use crate::handler::{Handler, LiveGuard};
use crate::install::Installed;
use crate::zygote::{Zygote, ZygoteError};

/// What a zygote needs to make a sandbox (the op is added by the caller).
pub(super) struct LaunchSpec {
    header: Value,
    /// The sandbox's root, sent as a descriptor.
    root: Option<PathBuf>,
}

impl LaunchSpec {
    pub(super) fn set(&mut self, key: &str, value: Value) {
        self.header[key] = value;
    }

    /// Asks `zygote` to make the sandbox with command `op`.
    pub(super) async fn send(mut self, zygote: &Zygote, op: &str) -> Result<Value, ZygoteError> {
        self.header["op"] = json!(op);
        zygote
            .command_with_dir(self.header, self.root.as_deref())
            .await
    }
}

impl ProcEngine {
    /// Makes a sandbox: root, cgroup, a process from `fork` (a zygote
    /// command returning its pid) and its connection.
    pub(super) async fn launch<F, Fut>(
        &self,
        code: Option<&Path>,
        packages: &[PathBuf],
        limits: CgroupLimits,
        egress: Option<Arc<FunctionVersion>>,
        fork: F,
    ) -> Result<Handler, InvokeError>
    where
        F: FnOnce(LaunchSpec) -> Fut,
        Fut: std::future::Future<Output = Result<Value, ZygoteError>>,
    {
        let inner = &self.0;
        if inner.live.load(Ordering::Relaxed) >= inner.config.max_sandboxes as u64 {
            // Make room by dropping the least recently used paused handler.
            let victim = inner.handlers.lock().idle.pop_front();
            match victim {
                Some(h) => inner.destroy(h),
                None => return Err(InvokeError::Overloaded),
            }
        }
        if inner.cgroups.is_some() {
            let inner = self.0.clone();
            tokio::task::spawn_blocking(move || inner.cgroups.as_deref().map(CgroupPool::prewarm));
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let cgroup = match &inner.cgroups {
            Some(pool) => match pool.take(limits) {
                Ok(Some(cg)) => Some(cg),
                Ok(None) => return Err(InvokeError::Overloaded),
                Err(e) => return Err(InvokeError::Crashed(format!("cgroup setup failed: {e}"))),
            },
            None => None,
        };
        let mut handler = Handler {
            key: None,
            pid: 0,
            conn: None,
            cgroup,
            root: None,
            memory: 0,
            idle_since: Instant::now(),
            private_packages: None,
            egress: None,
            zygote: None,
            cpu_charged: Duration::ZERO,
            lowered: false,
            _live: LiveGuard::new(&inner.live),
        };
        let (root_path, socket_host, socket_inside) = if inner.root {
            let root = inner.take_root().and_then(|mut root| {
                let attached = root.attach(code, packages);
                handler.root = Some(root);
                attached
            });
            if let Err(e) = root {
                inner.destroy(handler);
                return Err(InvokeError::Crashed(format!(
                    "sandbox root setup failed: {e}"
                )));
            }
            let root = handler.root.as_ref().expect("just attached");
            let host = root.host_path("/tmp/hearth.sock");
            (
                Some(root.host_path("/")),
                host,
                "/tmp/hearth.sock".to_string(),
            )
        } else {
            let dir = inner.config.dir.join("run/sb").join(id.to_string());
            let _ = std::fs::create_dir_all(&dir);
            let host = dir.join("hearth.sock");
            let s = host.display().to_string();
            (None, host, s)
        };
        let network = egress.is_some();
        // A network namespace needs a real one (not `none`); its way out is
        // the egress proxy, on a socket beside the node's.
        let netns = inner.isolation != crate::Isolation::None;
        let egress_inside = if root_path.is_some() {
            "/tmp/egress.sock".to_string()
        } else {
            socket_host
                .with_file_name("egress.sock")
                .display()
                .to_string()
        };
        if let Some(version) = egress.filter(|_| netns) {
            let host = socket_host.with_file_name("egress.sock");
            match UnixListener::bind(&host) {
                Ok(l) => {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777));
                    let allowed = crate::egress::Allowed {
                        hosts: version.spec.allowed_hosts.clone().into(),
                        fix: "deploy the function with --allow-host to allow it",
                        private: inner.config.allow_private_egress,
                        budget: inner
                            .outbound
                            .get()
                            .map(|o| (o.clone(), Arc::from(version.tenant.as_str()))),
                    };
                    handler.egress = Some(crate::egress::Relay(crate::egress::serve(
                        crate::egress::Listener::Unix(l),
                        allowed,
                    )));
                }
                Err(e) => {
                    inner.destroy(handler);
                    return Err(InvokeError::Crashed(format!(
                        "cannot listen for the sandbox's egress: {e}"
                    )));
                }
            }
        }
        let listener = match UnixListener::bind(&socket_host) {
            Ok(l) => l,
            Err(e) => {
                inner.destroy(handler);
                return Err(InvokeError::Crashed(format!(
                    "cannot listen for the sandbox: {e}"
                )));
            }
        };
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&socket_host, std::fs::Permissions::from_mode(0o777));
        }
        let spec = LaunchSpec {
            root: root_path,
            header: json!({
            "uid": inner.config.sandbox_uid,
            "gid": inner.config.sandbox_uid,
            "isolation": inner.isolation.as_str(),
            "extra_memory_bytes": if inner.cgroups.is_none() { limits.memory_bytes } else { 0 },
            "seccomp": crate::seccomp::filter_name(network),
            // A network of its own, with only loopback: no host interfaces,
            // no host loopback services, no other sandbox's abstract Unix
            // sockets. A function with allowed hosts goes out through the
            // egress proxy, which enforces its allow-list.
            "netns": netns,
            "egress": if network && netns { Some(egress_inside) } else { None },
            "socket": socket_inside,
            "hostname": format!("sandbox-{id}"),
            }),
        };
        let root_ready = started.elapsed();
        let reply = fork(spec).await;
        let forked = started.elapsed();
        if let Err(e) = reply {
            inner.destroy(handler);
            return Err(InvokeError::Crashed(format!(
                "could not start the sandbox: {e}"
            )));
        }
        let stream = match tokio::time::timeout(Duration::from_secs(10), listener.accept()).await {
            Ok(Ok((stream, _))) => stream,
            Ok(Err(e)) => {
                inner.destroy(handler);
                return Err(InvokeError::Crashed(format!(
                    "the sandbox did not connect: {e}"
                )));
            }
            Err(_) => {
                inner.destroy(handler);
                return Err(InvokeError::Crashed(
                    "the sandbox did not connect within 10 s".into(),
                ));
            }
        };
        let connected = started.elapsed();
        // Its pid as this node sees it, from the connection: the zygote's
        // answer counts in the zygote's PID namespace.
        let Some(pid) = stream.peer_cred().ok().and_then(|c| c.pid()) else {
            inner.destroy(handler);
            return Err(InvokeError::Crashed("the sandbox's pid is unknown".into()));
        };
        handler.pid = pid;
        // Into the cgroup before the node sends anything: user code runs
        // only after a message from us, so limits hold from its first line.
        if let Some(cg) = &handler.cgroup
            && let Err(e) = cg.add(pid)
        {
            inner.destroy(handler);
            return Err(InvokeError::Crashed(format!(
                "cannot move the sandbox into its cgroup: {e}"
            )));
        }
        tracing::debug!(
            ?root_ready,
            ?forked,
            ?connected,
            joined = ?started.elapsed(),
            "sandbox launched"
        );
        handler.conn = Some(stream);
        Ok(handler)
    }

    /// Installs packages for one handler alone, as if there were no
    /// install cache (see [`Caches::install`]).
    pub(super) async fn install_privately(
        &self,
        packages: &[Installed],
    ) -> Result<(Vec<Installed>, PathBuf), InvokeError> {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let dir = self.0.config.dir.join("run/pkgs").join(id.to_string());
        let mut out = Vec::new();
        for (i, p) in packages.iter().enumerate() {
            match self
                .0
                .installs
                .install_uncached(&p.package, &dir.join(i.to_string()), p.source_builds)
                .await
            {
                Ok(installed) => out.push(installed),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(InvokeError::Crashed(format!(
                        "installing {} failed: {e}",
                        p.package.spec(Runtime::Python)
                    )));
                }
            }
        }
        Ok((out, dir))
    }

    /// Starts one generic Node.js process (no function yet).
    pub(super) async fn launch_node(&self) -> Result<Handler, InvokeError> {
        let tree = self.zygotes().await?;
        let root = tree.root();
        let node = self.0.config.node.clone();
        let limits = super::pool::generic_limits(&self.0);
        let helper = if self.0.root {
            "/hearth/helper.mjs".to_string()
        } else {
            self.0.base.hearth.join("helper.mjs").display().to_string()
        };
        // Network sockets stay closed for generic processes; outbound HTTP
        // goes through the host.
        self.launch(None, &[], limits, None, |mut spec| async move {
            spec.set("keep_stderr", json!(true));
            // V8 reserves far more address space than it uses: no RLIMIT_AS.
            spec.set("extra_memory_bytes", json!(0));
            spec.set("argv", json!([node, helper]));
            spec.set(
                "env",
                json!({"PATH": "/usr/bin:/bin", "HOME": "/tmp", "NODE_PATH": "/node_modules"}),
            );
            spec.send(&root, "spawn").await
        })
        .await
    }
}

impl Inner {
    /// A generic root from the pool, or a new one if the pool is empty.
    /// The pool is refilled once the new sandbox is running (mounting
    /// beside a starting sandbox slows it down on a small machine).
    pub(super) fn take_root(&self) -> std::io::Result<Root> {
        let pooled = self.roots.lock().pop();
        match pooled {
            Some(root) => Ok(root),
            None => self.build_root(),
        }
    }

    fn build_root(&self) -> std::io::Result<Root> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let path = self.config.dir.join("run/sb").join(format!("r{id}"));
        Root::build(&path, &self.base, self.config.scratch_mib)
    }

    /// Keeps `warm_roots` generic roots built, in the background.
    pub(super) fn fill_roots(self: &Arc<Self>) {
        if !self.root
            || self.closed.load(Ordering::Acquire)
            || self.config.warm_roots == 0
            || self.roots.lock().len() >= self.config.warm_roots
            || self.roots_filling.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let inner = self.clone();
        tokio::task::spawn_blocking(move || {
            while inner.roots.lock().len() < inner.config.warm_roots
                && !inner.closed.load(Ordering::Acquire)
            {
                match inner.build_root() {
                    Ok(mut root) if inner.closed.load(Ordering::Acquire) => root.destroy(),
                    Ok(root) => inner.roots.lock().push(root),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not build a sandbox root ahead of time");
                        break;
                    }
                }
            }
            inner.roots_filling.store(false, Ordering::Release);
        });
    }

    /// Destroys a handler off the async threads (unmounting and waiting for
    /// processes to die take a moment).
    pub(super) fn destroy(self: &Arc<Self>, h: Handler) {
        let inner = self.clone();
        tokio::task::spawn_blocking(move || inner.destroy_now(h));
    }

    pub(super) fn destroy_now(&self, mut h: Handler) {
        h.conn = None;
        if let Some(cg) = h.cgroup.take() {
            match &self.cgroups {
                Some(pool) => pool.give_back(cg),
                None => drop(cg),
            }
        } else if h.pid > 0 {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(h.pid, libc::SIGCONT);
                libc::kill(h.pid, libc::SIGKILL);
            }
        }
        if let Some(mut root) = h.root.take() {
            root.destroy();
        }
        if let Some(dir) = h.private_packages.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        drop(h);
    }
}
