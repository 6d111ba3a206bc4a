//! pip and npm run in a sandbox of their own: the real sandbox, the real
//! kernel, and in place of pip or npm a script that reports where it finds
//! itself (it is what they would be if subverted by what an index sent).

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use hearth_core::Runtime;
use hearth_host::deps::Package;
use hearth_proc::cgroup::{CgroupPool, Cgroups};
use hearth_proc::container::Base;
use hearth_proc::install::{InstallCache, InstallSandbox};

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root (the install sandbox is made only for a root node)"
    );
}

/// The sandbox a root node gives installs, with its run directory under
/// `run` and `helpers` in its roots' `/hearth`.
fn sandbox(
    run: &Path,
    helpers: &[(&str, &[u8])],
    index_hosts: Vec<String>,
    allow_private: bool,
) -> InstallSandbox {
    std::fs::create_dir_all(run.join("sb")).unwrap();
    InstallSandbox {
        base: Base::create(&run.join("base"), helpers, true).unwrap(),
        run_dir: run.to_path_buf(),
        uid: 65534,
        gid: 65534,
        index_hosts,
        allow_private,
    }
}

/// Asserts that no install's root is left under `run`.
fn assert_no_root_left(run: &Path) {
    let left: Vec<_> = std::fs::read_dir(run.join("sb")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// What a stand-in installer reaches for on the host: a directory anyone
/// may write and a file anyone may read. Only the sandbox's root keeps it
/// from them.
struct Bait {
    dir: tempfile::TempDir,
}

impl Bait {
    fn new() -> Bait {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        write(&dir.path().join("secret"), "node data", 0o644);
        Bait { dir }
    }

    fn marker(&self) -> std::path::PathBuf {
        self.dir.path().join("written-by-installer")
    }

    /// Shell lines reporting into directory `$t` who the installer is,
    /// what its `/` holds, and whether it wrote the marker or read the
    /// secret.
    fn probe(&self) -> String {
        let (marker, secret) = (self.marker(), self.dir.path().join("secret"));
        format!(
            "id -u > \"$t/uid\"\n\
             ls / > \"$t/root\"\n\
             if echo x > {marker:?} 2>/dev/null; then echo yes; else echo no; fi > \"$t/wrote\"\n\
             if cat {secret:?} >/dev/null 2>&1; then echo yes; else echo no; fi > \"$t/read\"\n"
        )
    }

    /// Asserts what [`Bait::probe`] reported into `dir`: the sandbox user,
    /// a root without the host's files, and the bait untouched.
    fn assert_held(&self, dir: &Path, installer: &str) {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(read("uid").trim(), "65534");
        let root: Vec<String> = read("root").lines().map(str::to_string).collect();
        for host_only in ["root", "home", "proc", "var", "work"] {
            assert!(
                !root.iter().any(|e| e == host_only),
                "{installer} saw /{host_only}: {root:?}"
            );
        }
        assert_eq!(read("wrote").trim(), "no");
        assert_eq!(read("read").trim(), "no");
        assert!(!self.marker().exists());
    }
}

#[tokio::test]
async fn pip_runs_unprivileged_in_a_root_holding_only_its_target_and_wheels() {
    assert_root();
    let data = tempfile::tempdir().unwrap();
    let wheels = tempfile::tempdir().unwrap();
    std::fs::set_permissions(wheels.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bait = Bait::new();
    let fake_pip = wheels.path().join("python3");
    write(
        &fake_pip,
        &format!(
            "#!/bin/sh\n\
             while [ \"$1\" != \"--target\" ]; do shift; done\n\
             t=\"$2\"\n\
             {}\
             echo 'X = 1' > \"$t/fakepkg.py\"\n",
            bait.probe()
        ),
        0o755,
    );
    let run = data.path().join("run");
    let cache = InstallCache::new(
        data.path().join("packages"),
        fake_pip,
        "/usr/bin/npm".into(),
        Some(wheels.path().to_path_buf()),
        Some(sandbox(&run, &[], Vec::new(), false)),
    )
    .unwrap();
    let pkg = Package {
        name: "fakepkg".into(),
        version: "1.0".into(),
        hash: None,
        tree: None,
    };
    let installed = cache.ensure(Runtime::Python, &pkg, false).await.unwrap();
    bait.assert_held(&installed.path, "pip");
    assert_eq!(installed.modules, ["fakepkg"]);
    // What it installed is the node's again, readable by sandboxes.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(installed.path.join("fakepkg.py")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o444), (0, 0o444));
    // Its root is gone.
    assert_no_root_left(&run);
}

/// This test's cgroups, removed with whatever is in them however it ends.
struct TestCgroups(Arc<CgroupPool>);

impl Drop for TestCgroups {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

#[tokio::test]
async fn npm_runs_unprivileged_in_a_cgroup_on_a_copy_of_the_offline_cache() {
    assert_root();
    let data = tempfile::tempdir().unwrap();
    let offline = tempfile::tempdir().unwrap();
    std::fs::set_permissions(offline.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cached = offline.path().join("npm/_cacache/index-v5/ab");
    std::fs::create_dir_all(&cached).unwrap();
    write(&cached.join("entry"), "cached\n", 0o644);
    let bait = Bait::new();
    // What npm does with its cache (rewrite an index file by replacing
    // it), what a subverted npm would try (write through to the original,
    // escape, stay behind), and a package.
    let fake_npm = offline.path().join("npm-cli");
    write(
        &fake_npm,
        &format!(
            "#!/bin/sh\n\
             while [ $# -gt 0 ]; do\n\
               case \"$1\" in --prefix) t=\"$2\"; shift;; --cache) c=\"$2\"; shift;; --offline) o=yes;; esac\n\
               shift\n\
             done\n\
             {probe}\
             echo \"$o\" > \"$t/offline\"\n\
             echo \"${{HTTPS_PROXY:-none}}\" > \"$t/proxy\"\n\
             cat \"$c/_cacache/index-v5/ab/entry\" > \"$t/cache-read\"\n\
             if echo poisoned >> \"$c/_cacache/index-v5/ab/entry\" 2>/dev/null; then echo yes; else echo no; fi > \"$t/cache-poisoned\"\n\
             echo rewritten > \"$c/x\" && mv \"$c/x\" \"$c/_cacache/index-v5/ab/entry\" && echo yes > \"$t/cache-replaced\"\n\
             sleep 300 </dev/null >/dev/null 2>&1 &\n\
             echo $! > \"$t/left-running\"\n\
             mkdir -p \"$t/node_modules/fakepkg\"\n\
             echo 'module.exports = 1' > \"$t/node_modules/fakepkg/index.js\"\n\
             echo '{{\"name\": \"fakepkg\", \"version\": \"1.0.0\"}}' > \"$t/node_modules/fakepkg/package.json\"\n",
            probe = bait.probe(),
        ),
        0o755,
    );
    let run = data.path().join("run");
    let instance = format!("test-install-{}", std::process::id());
    let pool = TestCgroups(Arc::new(
        CgroupPool::new(
            Cgroups::open(Path::new("/sys/fs/cgroup"), &instance, None).unwrap(),
            0,
            2,
        )
        .unwrap(),
    ));
    let cache = InstallCache::new(
        data.path().join("packages"),
        "/usr/bin/python3".into(),
        fake_npm,
        Some(offline.path().to_path_buf()),
        Some(sandbox(&run, &[], Vec::new(), false)),
    )
    .unwrap();
    cache.use_cgroups(pool.0.clone());
    let pkg = Package {
        name: "fakepkg".into(),
        version: "1.0.0".into(),
        hash: None,
        tree: None,
    };
    let installed = cache.ensure(Runtime::Node, &pkg, false).await.unwrap();
    let dir = installed.path.parent().unwrap();
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    bait.assert_held(dir, "npm");
    assert_eq!(read("offline").trim(), "yes");
    assert_eq!(
        read("proxy").trim(),
        "none",
        "offline, an install has no way out"
    );
    assert_eq!(read("cache-read"), "cached\n");
    assert_eq!(
        read("cache-replaced").trim(),
        "yes",
        "npm must be able to rewrite its index"
    );
    assert_eq!(read("cache-poisoned").trim(), "no");
    assert_eq!(
        std::fs::read_to_string(cached.join("entry")).unwrap(),
        "cached\n",
        "the offline cache itself is untouched"
    );
    // What it left running died with its cgroup.
    let pid: i32 = read("left-running").trim().parse().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let state = status
        .lines()
        .find(|l| l.starts_with("State:"))
        .unwrap_or("");
    assert!(
        state.is_empty() || state.contains("zombie"),
        "the installer's background process {pid} is still running ({state}); {:?}",
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
    );
    assert!(installed.path.join("fakepkg/index.js").exists());
    assert_no_root_left(&run);
}

#[tokio::test]
async fn an_online_install_reaches_only_the_package_index_through_the_proxy() {
    assert_root();
    // The "index", and a service on the host the installer must not reach.
    let index = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let index_port = index.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = index.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(b"index\n").await;
        }
    });
    let host_service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_service.local_addr().unwrap().port();
    let data = tempfile::tempdir().unwrap();
    // In place of pip: a probe, in Python, of what the network lets it do
    // (in the root's /hearth: an online node binds nothing else of the host).
    let probe = format!(
        "import os, socket, sys\n\
         t = sys.argv[sys.argv.index('--target') + 1]\n\
         def tryit(f):\n\
         \x20   try:\n\
         \x20       return f()\n\
         \x20   except OSError as e:\n\
         \x20       return 'refused: %s' % e.strerror\n\
         def direct():\n\
         \x20   socket.create_connection(('127.0.0.1', {host_port}), 2).close()\n\
         \x20   return 'reached'\n\
         def via_proxy(host, port):\n\
         \x20   proxy = os.environ['HTTPS_PROXY'].rsplit(':', 1)\n\
         \x20   s = socket.create_connection(('127.0.0.1', int(proxy[1])), 5)\n\
         \x20   s.sendall(b'CONNECT %s:%d HTTP/1.1\\r\\n\\r\\n' % (host.encode(), port))\n\
         \x20   answer = s.recv(4096)\n\
         \x20   if answer.startswith(b'HTTP/1.1 200'):\n\
         \x20       answer = answer.split(b'\\r\\n\\r\\n', 1)[1] or s.recv(4096)\n\
         \x20   return answer.decode().splitlines()[0]\n\
         open(t + '/direct', 'w').write(tryit(direct))\n\
         open(t + '/index', 'w').write(tryit(lambda: via_proxy('127.0.0.1', {index_port})))\n\
         open(t + '/other', 'w').write(tryit(lambda: via_proxy('127.0.0.1', {host_port})))\n\
         open(t + '/fakepkg.py', 'w').write('X = 1')\n",
    );
    let fake_pip = "#!/bin/sh\nexec /usr/bin/python3 /hearth/probe.py \"$@\"\n";
    let run = data.path().join("run");
    let helpers: [(&str, &[u8]); 2] = [
        ("probe.py", probe.as_bytes()),
        ("python3", fake_pip.as_bytes()),
    ];
    let sandbox = sandbox(
        &run,
        &helpers,
        vec![format!("127.0.0.1:{index_port}")],
        true,
    );
    std::fs::set_permissions(
        run.join("base/hearth/python3"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let cache = InstallCache::new(
        data.path().join("packages"),
        "/hearth/python3".into(),
        "/usr/bin/npm".into(),
        None,
        Some(sandbox),
    )
    .unwrap();
    let pkg = Package {
        name: "fakepkg".into(),
        version: "1.0".into(),
        hash: None,
        tree: None,
    };
    let installed = cache.ensure(Runtime::Python, &pkg, false).await.unwrap();
    let read = |name: &str| std::fs::read_to_string(installed.path.join(name)).unwrap();
    assert!(read("direct").starts_with("refused"), "{}", read("direct"));
    assert_eq!(read("index"), "index");
    assert!(read("other").contains("403"), "{}", read("other"));
    drop(host_service);
}

/// The process's peak resident memory, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// An installer that floods its error output (what a subverted pip could
/// do) costs the node only the tail it reports.
#[tokio::test]
async fn an_installer_flooding_its_output_is_not_held_in_memory() {
    let data = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let flood = bin.path().join("python3");
    write(
        &flood,
        "#!/bin/sh\nhead -c 300000000 /dev/zero\nhead -c 300000000 /dev/zero >&2\n\
         echo 'the last line' >&2\nexit 1\n",
        0o755,
    );
    let cache = InstallCache::new(
        data.path().join("packages"),
        flood,
        "/usr/bin/npm".into(),
        None,
        None,
    )
    .unwrap();
    let pkg = Package {
        name: "flood".into(),
        version: "1.0".into(),
        hash: None,
        tree: None,
    };
    let err = cache
        .ensure(Runtime::Python, &pkg, false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, hearth_proc::install::InstallError::Failed { .. }),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(
        err.ends_with("the last line"),
        "{}",
        &err[..err.len().min(300)]
    );
    assert!(err.len() < 8 << 10, "the error holds {} bytes", err.len());
    let peak = peak_rss();
    assert!(
        peak < 200 << 20,
        "the process peaked at {} MiB while the installer wrote 600 MB",
        peak >> 20
    );
}
