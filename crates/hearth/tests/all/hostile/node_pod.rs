//! A tenant who got out of its sandbox into the node: what the node pod's
//! confinement (deploy/kubernetes/base/node.yaml's capabilities and
//! seccomp profile, deploy/kubernetes/profiles/hearth-node.json) still
//! refuses it, and that the process tier works under exactly that
//! confinement. The node runs as root with CAP_SYS_ADMIN; what it must not
//! reach is the host. Refusing `mount -t cgroup` (the `release_agent`
//! escape) is the AppArmor profile's part: no AppArmor here, so
//! `scripts/vm/cgroup-v2-job.sh` checks it on the Debian VM.

use crate::harness::{Daemon, tar_of};
use crate::pod_security::PodSecurity;
use crate::process::write_wheel;
use hearth_test_support::require;

/// Runs `probe` (Python) as the node pod's root runs, and answers each
/// `name=result` line it prints as a pair.
fn confined_python(probe: &str) -> Vec<(String, String)> {
    let out = PodSecurity::of_node()
        .command("/usr/bin/python3")
        .args(["-c", probe])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn the_node_pods_confinement_refuses_the_host_escapes_its_capabilities_would_allow() {
    require!(Python, Seccomp);
    let dir = tempfile::tempdir().unwrap();
    let probe = format!(
        r#"
import ctypes, errno, os, stat
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(L(nr), *args)
    print("%s=%s" % (name, "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]))
def node(name, kind):
    try:
        os.mknod({dir:?} + "/" + name, kind | 0o600, os.makedev(8, 0))
        print(name + "=ok")
    except OSError as e:
        print(name + "=" + errno.errorcode[e.errno])
# A block device node opens the host's disk; a character one is what a
# sandbox root's /dev needs.
node("mknod_block", stat.S_IFBLK)
node("mknod_char", stat.S_IFCHR)
# The new mount API would mount a cgroup hierarchy where AppArmor's mount
# rules do not look.
call("fsopen_cgroup", {fsopen}, ctypes.c_char_p(b"cgroup"), L(0))
call("bpf", {bpf}, L(0), None, L(0))
call("keyctl", {keyctl}, L(0), L(-3), L(0))
call("io_uring_setup", {io_uring}, L(1), None)
call("perf_event_open", {perf}, None, L(0), L(-1), L(-1), L(0))
call("open_by_handle_at", {handle}, L(-100), None, L(0))
call("kexec_load", {kexec}, L(0), L(0), None, L(0))
call("init_module", {init_module}, None, L(0), ctypes.c_char_p(b""))
call("ptrace_attach_parent", {ptrace}, L(16), L(os.getppid()), None, None)
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("CapEff:"):
            print("cap_eff=" + line.split()[1])
# What it needs: user namespaces for zygotes (last: the new namespace
# grants every capability within it).
call("unshare_user", {unshare}, L(0x10000000))
"#,
        dir = dir.path().to_str().unwrap(),
        fsopen = libc::SYS_fsopen,
        bpf = libc::SYS_bpf,
        keyctl = libc::SYS_keyctl,
        io_uring = libc::SYS_io_uring_setup,
        perf = libc::SYS_perf_event_open,
        handle = libc::SYS_open_by_handle_at,
        kexec = libc::SYS_kexec_load,
        init_module = libc::SYS_init_module,
        ptrace = libc::SYS_ptrace,
        unshare = libc::SYS_unshare,
    );
    let got = confined_python(&probe);
    let result = |name: &str| {
        got.iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("{name} not probed: {got:?}"))
            .1
            .as_str()
    };
    // Refused by the profile although root with these capabilities may:
    // each comes back otherwise without hearth-node.json.
    assert_eq!(result("mknod_block"), "EPERM", "{got:?}");
    assert_eq!(result("bpf"), "EPERM", "{got:?}");
    assert_eq!(result("keyctl"), "EPERM", "{got:?}");
    assert_eq!(result("perf_event_open"), "EPERM", "{got:?}");
    // Answered as if the kernel lacked them, so callers fall back.
    assert_eq!(result("fsopen_cgroup"), "ENOSYS", "{got:?}");
    assert_eq!(result("io_uring_setup"), "ENOSYS", "{got:?}");
    // Refused by the capabilities the pod lacks as well.
    for name in ["open_by_handle_at", "kexec_load", "init_module"] {
        assert_eq!(result(name), "EPERM", "{name}: {got:?}");
    }
    assert_ne!(result("ptrace_attach_parent"), "ok", "{got:?}");
    // What the sandbox builder needs still works.
    assert_eq!(result("mknod_char"), "ok", "{got:?}");
    assert_eq!(result("unshare_user"), "ok", "{got:?}");
    // Exactly the manifest's capabilities are in effect.
    let eff = u64::from_str_radix(result("cap_eff"), 16).unwrap();
    let expected = PodSecurity::of_node()
        .capabilities
        .iter()
        .map(|c| 1u64 << capability_number(c))
        .fold(0, |a, b| a | b);
    assert_eq!(eff, expected, "{got:?}");
}

/// A capability's bit (linux/capability.h) from its name.
fn capability_number(name: &str) -> u32 {
    const NAMES: &[&str] = &[
        "chown",
        "dac_override",
        "dac_read_search",
        "fowner",
        "fsetid",
        "kill",
        "setgid",
        "setuid",
        "setpcap",
        "linux_immutable",
        "net_bind_service",
        "net_broadcast",
        "net_admin",
        "net_raw",
        "ipc_lock",
        "ipc_owner",
        "sys_module",
        "sys_rawio",
        "sys_chroot",
        "sys_ptrace",
        "sys_pacct",
        "sys_admin",
        "sys_boot",
        "sys_nice",
        "sys_resource",
        "sys_time",
        "sys_tty_config",
        "mknod",
    ];
    NAMES
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("capability {name}")) as u32
}

/// The process tier under the node pod's confinement: a Python function
/// with a package (an installer in a network namespace of its own, a
/// zygote that pivots into its root), a Node.js one and a JavaScript one
/// answer, and the node reports nothing degraded.
#[tokio::test]
async fn the_process_tier_runs_under_the_node_pods_capabilities_and_seccomp_profile() {
    require!(Python, Node, Seccomp);
    let wheels = tempfile::tempdir().unwrap();
    write_wheel(wheels.path());
    let d = Daemon::start_confined(
        &PodSecurity::of_node(),
        &["--offline-packages", wheels.path().to_str().unwrap()],
    );
    let py = tar_of(&[
        (
            "handler.py",
            "import tinypkg\ndef handler(e, c):\n    return {'statusCode': 200, 'body': 'py ' + tinypkg.VERSION}\n",
        ),
        ("requirements.txt", "TinyPkg==1.2.0\n"),
    ]);
    d.deploy("py", py, &[("runtime", "python"), ("file_name", "fn.tar")])
        .await;
    d.deploy(
        "nd",
        b"exports.handler = async () => ({ statusCode: 200, body: 'node ' + process.version });\n"
            .to_vec(),
        &[("runtime", "node"), ("file_name", "index.js")],
    )
    .await;
    d.deploy(
        "js",
        b"export default { fetch() { return new Response('js'); } };\n".to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    for (name, starts) in [("py", "py 1.2.0"), ("nd", "node v"), ("js", "js")] {
        let (status, body) = d.call(name, "", "").await;
        assert_eq!(status, 200, "{name}: {body}");
        assert!(body.starts_with(starts), "{name}: {body}");
    }
    let status: serde_json::Value = d.get_json("/v1/status").await;
    assert_eq!(status["degraded"], serde_json::json!([]), "{status}");
    assert_eq!(
        status["tiers"]["process"]["details"]["isolation"], "full",
        "{status}"
    );
}
