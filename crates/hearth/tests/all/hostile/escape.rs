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
        ("io_uring_enter", libc::SYS_io_uring_enter, ", L(-1), L(0), L(0), L(0), None, L(0)"),
        ("io_uring_register", libc::SYS_io_uring_register, ", L(-1), L(0), None, L(0)"),
        // Reaching into another process.
        ("pidfd_getfd", libc::SYS_pidfd_getfd, ", L(-1), L(-1), L(0)"),
        ("process_madvise", libc::SYS_process_madvise, ", L(-1), None, L(0), L(0), L(0)"),
        // A call this list has never heard of: an allow-list refuses it,
        // where a deny-list would let the kernel answer ENOSYS.
        ("unknown", 1000, ""),
        // Internet sockets without allowed hosts.
        ("socket_inet", libc::SYS_socket, &format!(", L({}), L(1), L(0)", libc::AF_INET)),
    ];
    let allowed: &[(&str, i64, &str)] = &[
        ("getpid", libc::SYS_getpid, ""),
        ("socket_unix", libc::SYS_socket, &format!(", L({}), L(1), L(0)", libc::AF_UNIX)),
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
