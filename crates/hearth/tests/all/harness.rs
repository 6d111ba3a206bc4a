//! Starting and talking to a real daemon.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const HEARTH: &str = env!("CARGO_BIN_EXE_hearth");

/// This crate's directory, read when the test runs (cargo sets it), not when
/// it was compiled: a clone elsewhere sharing the cargo target dir may reuse
/// this binary, and must read its own files.
pub fn crate_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

pub fn example(name: &str) -> Vec<u8> {
    let path = crate_dir().join("../../examples/wasm").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A running `hearth up`, killed when dropped.
pub struct Daemon {
    child: Child,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub url: String,
    pub token: String,
    pub http: reqwest::Client,
}

impl Daemon {
    pub fn start() -> Daemon {
        Self::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Daemon {
        Self::start_with_env(args, &[])
    }

    /// Starts in a fresh data directory with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let mut cmd = Command::new(HEARTH);
        cmd.envs(env.iter().copied());
        let mut d = Self::spawn(cmd, &dir, args);
        d._tmp = Some(tmp);
        d
    }

    /// Starts with `args`, its log (stderr) written to the file at `log`
    /// instead of the test's output.
    pub fn start_logging_to(args: &[&str], log: &Path) -> Daemon {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let mut cmd = Command::new(HEARTH);
        cmd.stderr(std::fs::File::create(log).unwrap());
        let mut d = Self::spawn(cmd, &dir, args);
        d._tmp = Some(tmp);
        d
    }

    /// Starts as an unprivileged user (uid = gid = `uid`), from a copy of
    /// the binary that user can execute, in a data directory it owns.
    pub fn start_as_user(uid: u32) -> Daemon {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = tmp.path().join("hearth");
        std::fs::copy(HEARTH, &bin).unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
        let mut cmd = Command::new(&bin);
        cmd.uid(uid).gid(uid).env("HOME", &dir);
        let mut d = Self::spawn(cmd, &dir, &[]);
        d._tmp = Some(tmp);
        d
    }

    /// Starts as root in a mount namespace of its own where the cgroup
    /// filesystem is read-only, as systemd's `ProtectControlGroups=yes`
    /// and most containers leave it.
    pub fn start_with_read_only_cgroups() -> Daemon {
        use std::ffi::CString;
        use std::os::unix::process::CommandExt;
        let points: Vec<CString> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| *m == "/sys/fs/cgroup" || m.starts_with("/sys/fs/cgroup/"))
            .map(|m| CString::new(m).unwrap())
            .collect();
        assert!(!points.is_empty(), "no cgroup filesystem to make read-only");
        let mut cmd = Command::new(HEARTH);
        // SAFETY: between fork and exec only unshare(2) and mount(2) run,
        // on strings made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let none = std::ptr::null::<libc::c_char>();
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::mount(
                        none,
                        c"/".as_ptr(),
                        none,
                        libc::MS_REC | libc::MS_SLAVE,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                for p in &points {
                    let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
                    if libc::mount(none, p.as_ptr(), none, flags, std::ptr::null()) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let mut d = Self::spawn(cmd, &dir, &[]);
        d._tmp = Some(tmp);
        d
    }

    /// Starts confined as a pod's container is (`security`: its
    /// capabilities and seccomp profile), in a fresh data directory.
    pub fn start_confined(security: &crate::pod_security::PodSecurity, args: &[&str]) -> Daemon {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let mut d = Self::spawn(security.command(HEARTH), &dir, args);
        d._tmp = Some(tmp);
        d
    }

    /// Starts on an existing data directory (for restarts).
    pub fn start_in(dir: &Path, args: &[&str]) -> Daemon {
        Self::spawn(Command::new(HEARTH), dir, args)
    }

    fn spawn(mut cmd: Command, dir: &Path, args: &[&str]) -> Daemon {
        cmd.arg("--data-dir").arg(dir).arg("up");
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd
            .args(args)
            .env("HEARTH_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start hearth");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            // A killed daemon leaves its server.json behind: wait for ours.
            if let Ok(text) = std::fs::read_to_string(dir.join("server.json"))
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
                && v["pid"].as_u64() == Some(pid as u64)
            {
                break v["url"].as_str().unwrap().to_string();
            }
            let exited = child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= deadline {
                // Whatever it made before failing goes too.
                let _ = child.kill();
                let _ = child.wait();
                remove_leftovers_of_killed(dir);
                panic!("hearth did not start within 60 s (exit: {exited:?})");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let token = std::fs::read_to_string(dir.join("token"))
            .unwrap()
            .trim()
            .to_string();
        Daemon {
            child,
            dir: dir.to_path_buf(),
            _tmp: None,
            url,
            token,
            http: reqwest::Client::new(),
        }
    }

    /// The daemon's resident memory now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib_of(self.pid())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill9(&mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// GET `path` with the admin token; the body as JSON.
    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        self.get(path).send().await.unwrap().json().await.unwrap()
    }

    /// Waits until at least `n` invocations are in flight on the node (its
    /// status, as the admin sees it), at most 20 s: calls sent ahead have
    /// been admitted and are running.
    pub async fn until_in_flight(&self, n: u64) {
        until(
            &format!("{n} invocations in flight"),
            Duration::from_secs(20),
            async || {
                let status = self.get_json("/v1/status").await;
                status["in_flight"].as_u64().unwrap_or(0) >= n
            },
        )
        .await;
    }

    /// Waits until nothing is in flight on the node, at most 20 s: an
    /// answered call's slot may be given back just after its answer.
    pub async fn until_idle(&self) {
        until("nothing in flight", Duration::from_secs(20), async || {
            let status = self.get_json("/v1/status").await;
            status["in_flight"].as_u64() == Some(0)
        })
        .await;
    }

    /// GET `path` with `token` (a tenant's); the body as JSON.
    pub async fn get_json_as(&self, token: &str, path: &str) -> serde_json::Value {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(token);
        r.send().await.unwrap().json().await.unwrap()
    }

    /// Deploys `code` as `name` with `token` (a tenant's); `query` names
    /// the runtime and the rest. The response, whatever its status.
    pub async fn deploy_as(
        &self,
        token: &str,
        name: &str,
        query: &[(&str, &str)],
        code: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/functions/{name}", self.url))
            .query(query)
            .bearer_auth(token)
            .body(code)
            .send()
            .await
            .unwrap()
    }

    /// A POST to `tenant`'s function `name`, with `token`.
    pub fn invoke_as(&self, token: &str, tenant: &str, name: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}/fn/{tenant}/{name}", self.url))
            .bearer_auth(token)
    }

    /// GET `path` with the admin token; the body as text.
    pub async fn get_text(&self, path: &str) -> String {
        self.get(path).send().await.unwrap().text().await.unwrap()
    }

    /// Creates tenant `name` (which must be new); its token.
    pub async fn create_tenant(&self, name: &str) -> String {
        let r = self
            .post("/v1/tenants")
            .json(&serde_json::json!({ "name": name }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "creating tenant {name}");
        let v: serde_json::Value = r.json().await.unwrap();
        v["token"].as_str().unwrap().to_string()
    }

    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .delete(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// Deploys `code` as `name` with extra query settings; returns the JSON.
    pub async fn deploy(
        &self,
        name: &str,
        code: Vec<u8>,
        query: &[(&str, &str)],
    ) -> serde_json::Value {
        let resp = self.deploy_raw(name, code, query).await;
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert_eq!(status, 201, "deploy {name}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    pub async fn deploy_raw(
        &self,
        name: &str,
        code: Vec<u8>,
        query: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut q = vec![("runtime", "wasm")];
        q.extend_from_slice(query);
        self.post(&format!("/v1/functions/{name}"))
            .query(&q)
            .body(code)
            .send()
            .await
            .unwrap()
    }

    /// POSTs `body` as JSON to admin's function `name` (`query` is
    /// appended to the URL, e.g. `?a=b`): the status and response body.
    pub async fn call(&self, name: &str, query: &str, body: &str) -> (u16, String) {
        let r = self
            .post(&format!("/fn/admin/{name}{query}"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Invokes admin's function `name` with `body`; its response body, which
    /// must come with 200.
    pub async fn invoke_body(&self, name: &str, body: String) -> String {
        let resp = self
            .post(&format!("/fn/admin/{name}"))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 200, "{name}: {text}");
        text
    }

    /// Invokes admin's function `name` with `body`.
    pub async fn invoke(&self, name: &str, body: &'static [u8]) -> reqwest::Response {
        self.post(&format!("/fn/admin/{name}"))
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// Replays recording `id` against the version that made it: the report.
    pub async fn replay(&self, id: &str) -> serde_json::Value {
        let resp = self
            .post(&format!("/v1/recordings/{id}/replay"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.json().await.unwrap()
    }

    /// The id of admin's function `name`'s newest tape once it has `n`
    /// (the recorder writes in batches).
    pub async fn newest_tape(&self, name: &str, n: usize) -> String {
        self.newest_tape_as(&self.token, name, n).await
    }

    /// The id of the token's tenant's function `name`'s newest tape once
    /// it has `n`.
    pub async fn newest_tape_as(&self, token: &str, name: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let v = self
                .get_json_as(token, &format!("/v1/functions/{name}/recordings"))
                .await;
            let tapes = v["recordings"].as_array().cloned().unwrap_or_default();
            if tapes.len() >= n {
                return tapes[0]["id"].as_str().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "{name} never had {n} tapes");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// POSTs `chunks` chunks of 64 KiB of `x` to `path` without a length
    /// (chunked) over a raw connection that reads the answer while it
    /// sends: reqwest reads nothing until its body is sent, so an early
    /// answer (a refusal, an echo) would stall it or break its pipe. What
    /// the daemon answered, within 20 s.
    pub async fn post_chunked_reading(&self, path: &str, chunks: usize) -> String {
        let addr = self.url.trim_start_matches("http://");
        let (mut rx, mut tx) = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap()
            .into_split();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Transfer-Encoding: chunked\r\n\r\n",
            self.token
        );
        let send = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(head.as_bytes()).await?;
            let chunk = [b"10000\r\n".as_slice(), &[b'x'; 64 << 10], b"\r\n"].concat();
            for _ in 0..chunks {
                tx.write_all(&chunk).await?;
            }
            tx.write_all(b"0\r\n\r\n").await
        });
        let mut answer = Vec::new();
        let read = tokio::io::AsyncReadExt::read_to_end(&mut rx, &mut answer);
        let _ = tokio::time::timeout(Duration::from_secs(20), read).await;
        let _ = send.await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// The recording of invocation `id`, once the writer has stored it
    /// (it batches); the test fails if that takes over 15 s.
    pub async fn recording_when_written(&self, id: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = self
                .http
                .get(format!("{}/v1/recordings/{id}", self.url))
                .bearer_auth(&self.token)
                .send()
                .await
                .unwrap();
            if r.status() == 200 {
                return r.json().await.unwrap();
            }
            assert!(Instant::now() < deadline, "{id} was never recorded");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Logs of `name`, polled until `pred` holds (the writer batches);
    /// the test fails if it does not within 30 s.
    pub async fn logs_until(
        &self,
        name: &str,
        pred: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v: serde_json::Value = self
                .get(&format!("/v1/functions/{name}/logs"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let lines = v["lines"].as_array().cloned().unwrap_or_default();
            if pred(&lines) {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "{name}'s logs did not come to what the test waits for within 30 s: {lines:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Daemon {
    /// SIGTERM, so the daemon removes its sandboxes, mounts and cgroups;
    /// SIGKILL if it has not stopped after thirty seconds (a loaded,
    /// parallel test run can make an orderly shutdown slow; a SIGKILL
    /// leaves mounts behind).
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            // Killed (kill9): nothing removed its mounts and cgroups.
            remove_leftovers_of_killed(&self.dir);
            return;
        }
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                // An orderly stop leaves no mount behind (a refill racing
                // the shutdown once did).
                let left = mounts_under(&self.dir);
                if !left.is_empty() {
                    remove_leftovers_of_killed(&self.dir);
                    if !std::thread::panicking() {
                        panic!("the daemon stopped and left mounts: {left:?}");
                    }
                }
                // A group the kernel still held busy past the daemon's
                // five seconds of retries (a loaded run's slow teardown)
                // is left in place by the daemon; the test run removes it.
                let groups: Vec<PathBuf> = ["memory", "pids", "cpu", "cpu,cpuacct", "freezer", ""]
                    .iter()
                    .map(|c| instance_dir(&self.dir, c))
                    .filter(|d| d.exists())
                    .collect();
                if !groups.is_empty() {
                    eprintln!("the daemon stopped and left cgroups (removing them): {groups:?}");
                    remove_leftovers_of_killed(&self.dir);
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_leftovers_of_killed(&self.dir);
    }
}

/// Where a node with data directory `data` keeps its cgroups of `controller`
/// (named after a hash of its process-tier directory).
pub fn instance_dir(data: &Path, controller: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup")
        .join(controller)
        .join("hearth")
        .join(hearth_proc::instance_name(&data.join("proc")))
}

/// Mount points below `dir`, as /proc/mounts names them.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// Removes the mounts (its sandboxes' read-only binds) and the (empty)
/// cgroups a killed daemon left, unless a daemon restarted on the same data
/// directory owns them now. A node restarted there would remove them
/// itself; a test's directory is never reused.
pub(crate) fn remove_leftovers_of_killed(dir: &Path) {
    let restarted = std::fs::read_to_string(dir.join("server.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["pid"].as_u64())
        .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
    if restarted {
        return;
    }
    fn rmdir_tree(d: &Path) {
        if let Ok(entries) = std::fs::read_dir(d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    rmdir_tree(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(d);
    }
    // Deepest first, detached: a bind under another comes off before it.
    let mut mounts = mounts_under(dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let Ok(c) = std::ffi::CString::new(m) else {
            continue;
        };
        // SAFETY: `c` is a valid NUL-terminated path for the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
    // cgroup v1 (a directory per controller) and v2 (one, "" here).
    for c in ["memory", "pids", "cpu", "cpu,cpuacct", "freezer", ""] {
        let d = instance_dir(dir, c);
        if d.exists() {
            rmdir_tree(&d);
        }
    }
}

/// Modules the node's zygotes imported because their handlers did (the
/// import cache's learning), summed over its zygotes.
pub async fn zygote_modules_learned(d: &Daemon) -> u64 {
    let status = d.get_json("/v1/status").await;
    status["tiers"]["process"]["details"]["zygotes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["learned"].as_u64().unwrap())
        .sum()
}

/// The JSON error body's kind and message.
/// Waits until `ready` says so, asking every 10 ms; fails the test,
/// naming `what` it waited for, if that takes longer than `within`.
pub async fn until(what: &str, within: Duration, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready().await {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn error_of(resp: reqwest::Response) -> (u16, String, String) {
    let status = resp.status().as_u16();
    let v: serde_json::Value = resp.json().await.unwrap();
    (
        status,
        v["error"]["kind"].as_str().unwrap_or_default().to_string(),
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// `send().await.unwrap().json().await.unwrap()`, for tests that only want the JSON.
pub trait JsonExt {
    async fn json_value(self) -> serde_json::Value;
}

impl JsonExt for reqwest::RequestBuilder {
    async fn json_value(self) -> serde_json::Value {
        self.send().await.unwrap().json().await.unwrap()
    }
}

/// The names in a `GET /v1/functions` answer.
pub fn function_names(list: &serde_json::Value) -> Vec<String> {
    list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// An uncompressed tar of `(path, text)` files.
pub fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (p, text) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, p, text.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

/// Sends `spin` (a request that runs until its deadline), and while it
/// runs checks that admin's function `ok` answers "ok" within `within`;
/// then asserts the spinning request ended with 504 `timeout`.
pub async fn spin_times_out_while_ok_answers(d: &Daemon, spin: &str, within: Duration) {
    let spinning = tokio::spawn({
        let req = d.post(spin);
        async move { req.send().await.unwrap() }
    });
    d.until_in_flight(1).await;
    let t = Instant::now();
    let r = d.post("/fn/admin/ok").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ok");
    assert!(
        t.elapsed() < within,
        "ok waited {:?} beside {spin}",
        t.elapsed()
    );
    let (status, kind, _) = error_of(spinning.await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (504, "timeout"), "{spin}");
}

/// The resident memory of process `pid` now, in KiB (`VmRSS`).
pub fn rss_kib_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// The address this machine would send from (no packet leaves): upstreams
/// a sandbox reaches through its proxy listen there, since loopback inside
/// a sandbox is the sandbox's own.
pub fn own_address() -> std::net::IpAddr {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("192.0.2.1:9").unwrap();
    probe.local_addr().unwrap().ip()
}
