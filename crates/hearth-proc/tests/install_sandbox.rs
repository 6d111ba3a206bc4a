//! pip runs in a sandbox of its own: the real sandbox, the real kernel, and
//! in place of pip a script that reports where it finds itself (it is what
//! pip would be if it were subverted by what an index sent it).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hearth_core::Runtime;
use hearth_proc::bundle::Package;
use hearth_proc::container::Base;
use hearth_proc::install::{InstallCache, InstallSandbox};

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn pip_runs_unprivileged_in_a_root_holding_only_its_target_and_wheels() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root (the install sandbox is made only for a root node)"
    );
    let data = tempfile::tempdir().unwrap();
    let wheels = tempfile::tempdir().unwrap();
    std::fs::set_permissions(wheels.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A host directory anyone may write, and a file anyone may read: only
    // the sandbox's root keeps the installer from them.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let secret = open.path().join("secret");
    write(&secret, "node data", 0o644);
    let marker = open.path().join("written-by-pip");
    let fake_pip = wheels.path().join("python3");
    write(
        &fake_pip,
        &format!(
            "#!/bin/sh\n\
             while [ \"$1\" != \"--target\" ]; do shift; done\n\
             t=\"$2\"\n\
             id -u > \"$t/uid\"\n\
             ls / > \"$t/root\"\n\
             if echo x > {marker:?} 2>/dev/null; then echo yes; else echo no; fi > \"$t/wrote\"\n\
             if cat {secret:?} >/dev/null 2>&1; then echo yes; else echo no; fi > \"$t/read\"\n\
             echo 'X = 1' > \"$t/fakepkg.py\"\n",
        ),
        0o755,
    );
    let run = data.path().join("run");
    std::fs::create_dir_all(run.join("sb")).unwrap();
    let base = Base::create(&run.join("base"), &[], true).unwrap();
    let cache = InstallCache::new(
        data.path().join("packages"),
        fake_pip,
        Some(wheels.path().to_path_buf()),
        Some(InstallSandbox {
            base,
            run_dir: run.clone(),
            uid: 65534,
            gid: 65534,
        }),
    )
    .unwrap();
    let pkg = Package {
        name: "fakepkg".into(),
        version: "1.0".into(),
    };
    let installed = cache.ensure(Runtime::Python, &pkg).await.unwrap();
    let read = |name: &str| std::fs::read_to_string(installed.path.join(name)).unwrap();
    assert_eq!(read("uid").trim(), "65534");
    let root: Vec<String> = read("root").lines().map(str::to_string).collect();
    for host_only in ["root", "home", "proc", "var", "work"] {
        assert!(
            !root.iter().any(|e| e == host_only),
            "pip saw /{host_only}: {root:?}"
        );
    }
    assert_eq!(read("wrote").trim(), "no");
    assert_eq!(read("read").trim(), "no");
    assert!(!marker.exists());
    assert_eq!(installed.modules, ["fakepkg"]);
    // What it installed is the node's again, readable by sandboxes.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(installed.path.join("fakepkg.py")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o444), (0, 0o444));
    // Its root is gone.
    let left: Vec<_> = std::fs::read_dir(run.join("sb")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}
