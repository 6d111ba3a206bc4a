//! A sandbox that wants out: the system calls it may make.

use crate::harness::Daemon;
use hearth_test_support::require;

/// Calls each `(name, number, args)` through libc's `syscall` and answers
/// with `name=errno` lines (0: the call succeeded).
fn probe(calls: &[(&str, i64, &str)]) -> String {
    let mut py = String::from(
        "import ctypes\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         libc.syscall.restype = ctypes.c_long\n\
         L = ctypes.c_long\n\
         def handler(event, context):\n    out = []\n",
    );
    for (name, nr, args) in calls {
        py.push_str(&format!(
            "    ctypes.set_errno(0)\n    \
             r = libc.syscall(L({nr}){args})\n    \
             out.append('{name}=%d' % (0 if r >= 0 else ctypes.get_errno()))\n"
        ));
    }
    py.push_str("    return {'statusCode': 200, 'body': '\\n'.join(out)}\n");
    py
}

#[tokio::test]
async fn a_sandbox_may_make_only_the_calls_on_its_allow_list() {
    require!(Python);
    let d = Daemon::start();
    let refused: &[(&str, i64, &str)] = &[
        // io_uring's operations (sockets among them) pass seccomp unseen.
        ("io_uring_setup", libc::SYS_io_uring_setup, ", L(1), None"),
        (
            "io_uring_enter",
            libc::SYS_io_uring_enter,
            ", L(-1), L(0), L(0), L(0), None, L(0)",
        ),
        (
            "io_uring_register",
            libc::SYS_io_uring_register,
            ", L(-1), L(0), None, L(0)",
        ),
        // Reaching into another process.
        ("pidfd_getfd", libc::SYS_pidfd_getfd, ", L(-1), L(-1), L(0)"),
        (
            "process_madvise",
            libc::SYS_process_madvise,
            ", L(-1), None, L(0), L(0), L(0)",
        ),
        // A call this list has never heard of: an allow-list refuses it,
        // where a deny-list would let the kernel answer ENOSYS.
        ("unknown", 1000, ""),
        // Internet sockets without allowed hosts.
        (
            "socket_inet",
            libc::SYS_socket,
            &format!(", L({}), L(1), L(0)", libc::AF_INET),
        ),
    ];
    let allowed: &[(&str, i64, &str)] = &[
        ("getpid", libc::SYS_getpid, ""),
        (
            "socket_unix",
            libc::SYS_socket,
            &format!(", L({}), L(1), L(0)", libc::AF_UNIX),
        ),
    ];
    let all: Vec<_> = refused.iter().chain(allowed).cloned().collect();
    d.deploy(
        "probe",
        probe(&all).into_bytes(),
        &[("runtime", "python"), ("file_name", "handler.py")],
    )
    .await;
    let body = d.invoke_body("probe", String::new()).await;
    let errno: std::collections::HashMap<&str, i32> = body
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    for (name, _, _) in refused {
        assert_eq!(errno[name], libc::EPERM, "{name} was not refused: {body}");
    }
    for (name, _, _) in allowed {
        assert_eq!(errno[name], 0, "{name} was refused: {body}");
    }
}

/// A source distribution `<name>-1.0.tar.gz` in `dir` whose PEP 517 build
/// backend is `backend`, in the archive itself (`backend-path`): it needs
/// nothing from an index, so pip would run it even offline.
fn write_sdist(dir: &std::path::Path, name: &str, backend: &str) {
    let pyproject =
        "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n";
    let pkg_info = format!("Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n");
    let file = std::fs::File::create(dir.join(format!("{name}-1.0.tar.gz"))).unwrap();
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (path, text) in [
        ("backend.py", backend),
        ("pyproject.toml", pyproject),
        ("PKG-INFO", pkg_info.as_str()),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        let path = format!("{name}-1.0/{path}");
        tar.append_data(&mut h, path, text.as_bytes()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

/// `evilpkg`, whose build writes `marker`: what pip would run, as the
/// daemon's user, to install it.
fn write_marking_sdist(dir: &std::path::Path, marker: &std::path::Path) {
    let backend = format!(
        "open({:?}, 'w').write('built')\ndef build_wheel(*a, **k):\n    raise RuntimeError('no')\n",
        marker.display().to_string()
    );
    write_sdist(dir, "evilpkg", &backend);
}

#[tokio::test]
async fn no_package_code_runs_at_install() {
    require!(Python, Node);
    let packages = tempfile::tempdir().unwrap();
    let marker = packages.path().join("built-by-setup-py");
    write_marking_sdist(packages.path(), &marker);
    let d = Daemon::start_with(&["--offline-packages", packages.path().to_str().unwrap()]);
    let bundle = crate::harness::tar_of(&[
        ("handler.py", "def handler(e, c):\n    return 'ok'\n"),
        ("requirements.txt", "evilpkg==1.0\n"),
    ]);
    let r = d
        .deploy_raw(
            "evil",
            bundle,
            &[("runtime", "python"), ("file_name", "fn.tar")],
        )
        .await;
    let (status, _, msg) = crate::harness::error_of(r).await;
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("evilpkg==1.0"), "{msg}");
    assert!(
        !marker.exists(),
        "a source distribution's build ran at deploy"
    );
    // A dependency that is a path is refused before npm sees it.
    let node = crate::harness::tar_of(&[
        ("index.js", "exports.handler = async () => 'ok';\n"),
        (
            "package.json",
            r#"{"dependencies": {"../../../tmp/x": "1.0.0"}}"#,
        ),
    ]);
    let r = d
        .deploy_raw(
            "pathdep",
            node,
            &[("runtime", "node"), ("file_name", "fn.tar")],
        )
        .await;
    let (status, _, msg) = crate::harness::error_of(r).await;
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("../../../tmp/x"), "{msg}");
}

/// The lock pins each file by its hash: an index or mirror that serves
/// other bytes for a locked version (a replaced release, a tampered
/// mirror) fails the install instead of running them. The bundle here
/// carries its lock, as an artifact taken from one node to another does.
#[tokio::test]
async fn a_locked_package_whose_file_changed_is_refused() {
    require!(Python);
    use sha2::Digest;
    let wheels = tempfile::tempdir().unwrap();
    let w = wheels.path();
    crate::process::write_wheel_of(w, "tinypkg", "1.2.0", "VERSION = 'genuine'\n");
    let genuine = std::fs::read(w.join("tinypkg-1.2.0-py3-none-any.whl")).unwrap();
    let lock = serde_json::json!({"hearth_lock": 1, "packages": [{
        "name": "tinypkg", "version": "1.2.0",
        "hash": format!("sha256:{}", hex_of(&sha2::Sha256::digest(&genuine))),
    }]});
    // The index now serves other bytes under the same name and version.
    crate::process::write_wheel_of(w, "tinypkg", "1.2.0", "VERSION = 'substituted'\n");
    let d = Daemon::start_with(&["--offline-packages", w.to_str().unwrap()]);
    let code = "import tinypkg\ndef handler(e, c):\n    return tinypkg.VERSION\n";
    let bundle = crate::harness::tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "tinypkg==1.2.0\n"),
        ("hearth.lock", &lock.to_string()),
    ]);
    let q = [("runtime", "python"), ("file_name", "fn.tar")];
    let (status, _, msg) = crate::harness::error_of(d.deploy_raw("locked", bundle, &q).await).await;
    assert_eq!(status, 400, "{msg}");
    assert!(
        msg.contains("tinypkg==1.2.0") && msg.contains("not the one locked"),
        "{msg}"
    );
    // Without a lock the same requirement installs what the index has now.
    let bundle = crate::harness::tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "tinypkg==1.2.0\n"),
    ]);
    d.deploy("unlocked", bundle, &q).await;
    assert_eq!(
        d.call("unlocked", "", "{}").await,
        (200, "substituted".into())
    );
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `srcpkg`, whose build backend builds a real wheel whose module
/// says where the build ran: its user, the root it saw, and whether it
/// reached the node's API at `api_port`.
fn write_probing_sdist(dir: &std::path::Path, api_port: u16) {
    let backend = format!(
        r#"import base64, hashlib, os, socket, zipfile
def _probe():
    p = {{"uid": os.getuid(), "root": sorted(os.listdir("/"))}}
    try:
        socket.create_connection(("127.0.0.1", {api_port}), 2).close()
        p["api"] = "reached"
    except OSError as e:
        p["api"] = e.errno
    return p
def get_requires_for_build_wheel(config_settings=None):
    return []
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "srcpkg-1.0-py3-none-any.whl"
    files = {{
        "srcpkg.py": "BUILT = %r\n" % (_probe(),),
        "srcpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: srcpkg\nVersion: 1.0\n",
        "srcpkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "srcpkg-1.0.dist-info/top_level.txt": "srcpkg\n",
    }}
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
        record.append("srcpkg-1.0.dist-info/RECORD,,")
        z.writestr("srcpkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return name
"#
    );
    write_sdist(dir, "srcpkg", &backend);
}

/// A package without a wheel is built only for a function that opts in
/// (`source_builds`), and its build runs in the install sandbox: the
/// sandbox user, a root without the host's files, no network.
#[tokio::test]
async fn a_source_build_runs_only_when_asked_and_then_in_the_install_sandbox() {
    require!(Python);
    use std::os::unix::fs::PermissionsExt;
    let packages = tempfile::tempdir().unwrap();
    std::fs::set_permissions(packages.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The API's port is known once the daemon runs; the sdist is read at
    // the first deploy, so it is written after the start.
    let d = Daemon::start_with(&["--offline-packages", packages.path().to_str().unwrap()]);
    let api_port: u16 = d.url.rsplit(':').next().unwrap().parse().unwrap();
    write_probing_sdist(packages.path(), api_port);
    let bundle = || {
        crate::harness::tar_of(&[
            (
                "handler.py",
                "import json, srcpkg\ndef handler(e, c):\n    return json.dumps(srcpkg.BUILT)\n",
            ),
            ("requirements.txt", "srcpkg==1.0\n"),
        ])
    };
    let query = [("runtime", "python"), ("file_name", "fn.tar")];
    let r = d.deploy_raw("built", bundle(), &query).await;
    let (status, _, msg) = crate::harness::error_of(r).await;
    assert_eq!(status, 400, "without the opt-in, wheels only: {msg}");
    let mut opted = query.to_vec();
    opted.push(("source_builds", "true"));
    d.deploy("built", bundle(), &opted).await;
    let built: serde_json::Value =
        serde_json::from_str(&d.invoke_body("built", String::new()).await).unwrap();
    assert_eq!(built["uid"], 65534, "{built}");
    let root: Vec<&str> = built["root"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for host_only in ["root", "home", "proc", "work"] {
        assert!(
            !root.contains(&host_only),
            "the build saw /{host_only}: {built}"
        );
    }
    assert_ne!(
        built["api"], "reached",
        "the build reached the node's API: {built}"
    );
}

/// What a package's import-time code tries, as the `probe` module's
/// globals: which user it is, whether it sees the host's files, the
/// daemon's token or a world-writable host directory, and which calls it
/// may make.
fn probe_package(token: &std::path::Path, open_dir: &std::path::Path) -> String {
    format!(
        r#"import ctypes, os, signal, socket, time
IMPORTED_AT = time.time()
PROBE = {{"uid": os.getuid(), "root": sorted(os.listdir("/"))}}
def attempt(name, f):
    try:
        f()
        PROBE[name] = "done"
    except OSError as e:
        PROBE[name] = e.errno
attempt("read_token", lambda: open({token:?}).read())
attempt("write_host", lambda: open({marker:?}, "w").write("x"))
attempt("inet_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
libc = ctypes.CDLL(None, use_errno=True)
def in_child(name, nr, *args):
    # In a child, so that a call that works changes nothing here.
    old = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.syscall(nr, *args) >= 0 else ctypes.get_errno())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    signal.signal(signal.SIGCHLD, old)
    PROBE[name] = "done" if code == 0 else code
in_child("io_uring_setup", {uring}, 1, None)
in_child("new_user_ns", {unshare}, {newuser})
# An unknown file system: refused (ENODEV) even for root, if it gets that far.
in_child("mount", {mount}, b"none", b"/", b"nosuchfs", 0, None)
"#,
        token = token.display().to_string(),
        marker = open_dir.join("written-at-import").display().to_string(),
        uring = libc::SYS_io_uring_setup,
        unshare = libc::SYS_unshare,
        newuser = libc::CLONE_NEWUSER,
        mount = libc::SYS_mount,
    )
}

#[tokio::test]
async fn a_packages_import_time_code_runs_contained_in_its_zygote() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    // A host directory anyone may write: only the zygote's root keeps
    // import-time code out of it.
    let open_dir = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(open_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    crate::process::write_wheel_of(
        wheels.path(),
        "probe",
        "1.0",
        &probe_package(&d.dir.join("token"), open_dir.path()),
    );
    let handler = "import probe, json\ndef handler(e, c):\n    return {'probe': probe.PROBE, 'imported_at': probe.IMPORTED_AT}\n";
    let bundle = crate::harness::tar_of(&[
        ("handler.py", handler),
        ("requirements.txt", "probe==1.0\n"),
    ]);
    for name in ["p1", "p2"] {
        d.deploy(
            name,
            bundle.clone(),
            &[("runtime", "python"), ("file_name", "fn.tar")],
        )
        .await;
    }
    let (s1, b1) = d.call("p1", "", "").await;
    let (s2, b2) = d.call("p2", "", "").await;
    assert_eq!((s1, s2), (200, 200), "{b1} {b2}");
    let v1: serde_json::Value = serde_json::from_str(&b1).unwrap();
    let v2: serde_json::Value = serde_json::from_str(&b2).unwrap();
    assert_eq!(
        v1["imported_at"], v2["imported_at"],
        "the package was imported once, by a zygote both handlers forked from"
    );
    let probe = &v1["probe"];
    assert_eq!(probe["uid"], 65534, "import-time code ran as root: {probe}");
    let root: Vec<&str> = probe["root"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for host_only in ["root", "home", "proc", "sys", "var"] {
        assert!(
            !root.contains(&host_only),
            "import-time code saw the host's /{host_only}: {root:?}"
        );
    }
    assert_eq!(probe["read_token"], libc::ENOENT, "{probe}");
    assert_eq!(probe["write_host"], libc::ENOENT, "{probe}");
    assert!(!open_dir.path().join("written-at-import").exists());
    for call in ["inet_socket", "io_uring_setup", "new_user_ns", "mount"] {
        assert_eq!(probe[call], libc::EPERM, "{call}: {probe}");
    }
    // A function that lists hosts forks from a zygote of its own kind,
    // contained the same way, whose filter lets internet sockets be made
    // (they reach only the sandbox's loopback and its egress proxy).
    d.deploy(
        "p3",
        bundle,
        &[
            ("runtime", "python"),
            ("file_name", "fn.tar"),
            ("allow_host", "example.com:443"),
        ],
    )
    .await;
    let (s3, b3) = d.call("p3", "", "").await;
    assert_eq!(s3, 200, "{b3}");
    let v3: serde_json::Value = serde_json::from_str(&b3).unwrap();
    assert_ne!(v3["imported_at"], v1["imported_at"], "{v3}");
    let probe = &v3["probe"];
    assert_eq!(probe["uid"], 65534, "{probe}");
    assert_eq!(probe["read_token"], libc::ENOENT, "{probe}");
    assert_eq!(probe["inet_socket"], "done", "{probe}");
    for call in ["io_uring_setup", "new_user_ns", "mount"] {
        assert_eq!(probe[call], libc::EPERM, "{call}: {probe}");
    }
}

/// Installs run as the sandbox user: an offline package directory it could
/// not read is refused when the node starts, not at the first deploy.
#[test]
fn an_offline_package_directory_the_installer_cannot_read_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let wheels = tempfile::tempdir().unwrap();
    std::fs::set_permissions(wheels.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crate::harness::HEARTH)
        .arg("--data-dir")
        .arg(data.path())
        .args(["up", "--listen", "127.0.0.1:0", "--offline-packages"])
        .arg(wheels.path())
        .env("HEARTH_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--offline-packages") && err.contains("chmod -R o+rX"),
        "{err}"
    );
    // Refused before anything was made that a stop would have to remove.
    for controller in ["memory", "pids", "cpu", "freezer", ""] {
        let dir = crate::harness::instance_dir(data.path(), controller);
        assert!(!dir.exists(), "{} was left behind", dir.display());
    }
}
