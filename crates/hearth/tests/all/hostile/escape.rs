//! A sandbox that wants out: the system calls it may make.

use crate::harness::Daemon;

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

/// A source distribution whose build writes `marker`: what pip would run,
/// as the daemon's user, to install it. Its build backend is in the
/// archive and needs nothing from an index (PEP 517 `backend-path`), so
/// pip would run it even offline.
fn write_sdist(dir: &std::path::Path, marker: &std::path::Path) {
    let backend = format!(
        "open({:?}, 'w').write('built')\ndef build_wheel(*a, **k):\n    raise RuntimeError('no')\n",
        marker.display().to_string()
    );
    let pyproject =
        "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n";
    let pkg_info = "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n";
    let file = std::fs::File::create(dir.join("evilpkg-1.0.tar.gz")).unwrap();
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (path, text) in [
        ("evilpkg-1.0/backend.py", backend.as_str()),
        ("evilpkg-1.0/pyproject.toml", pyproject),
        ("evilpkg-1.0/PKG-INFO", pkg_info),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, path, text.as_bytes()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

#[tokio::test]
async fn no_package_code_runs_at_install() {
    let packages = tempfile::tempdir().unwrap();
    let marker = packages.path().join("built-by-setup-py");
    write_sdist(packages.path(), &marker);
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
