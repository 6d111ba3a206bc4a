//! The seccomp filters sandboxes run under.
//!
//! An allow-list, on top of the unprivileged user and `no_new_privs`: a
//! sandbox may make the system calls in [`ALLOWED`] (the calls a Python or
//! Node.js program and the packages they load make, after Docker's default
//! profile), `clone` without namespace flags, `socket` of the families it
//! may use, and `personality` queries. Every other call fails with `EPERM`,
//! including any the kernel adds later. Left out on purpose: io_uring (its
//! operations, sockets among them, are not seen by seccomp), namespaces,
//! mounts, tracing other processes (`ptrace`, `process_vm_*`,
//! `pidfd_getfd`, `kcmp`), kernel keys, modules, BPF, perf, clocks,
//! `userfaultfd` and file handles. Internet sockets (`AF_INET`,
//! `AF_INET6`, `AF_PACKET`) fail too unless the function lists hosts it may
//! reach; outbound HTTP through the `hearth` module works either way,
//! because the node makes those requests.
//!
//! The node compiles the filters once (seccompiler, from Firecracker) and
//! writes them as raw BPF into the helpers' directory; the helper installs
//! one with `prctl(PR_SET_SECCOMP)` just before running user code.

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule,
};

/// The filter's file name (without `.bpf`) in the helpers' directory.
pub fn filter_name(network: bool) -> &'static str {
    if network { "net" } else { "nonet" }
}

/// The file name of a contained zygote's filter (see [`compile_zygote`]).
pub fn zygote_filter_name(network: bool) -> &'static str {
    if network {
        "zygote-net"
    } else {
        "zygote-nonet"
    }
}

/// Calls a sandbox may make with any arguments.
pub const ALLOWED: &[i64] = &[
    // Files and descriptors.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_lseek,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_fcntl,
    libc::SYS_ioctl,
    libc::SYS_flock,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_sync_file_range,
    libc::SYS_syncfs,
    libc::SYS_sync,
    libc::SYS_ftruncate,
    libc::SYS_truncate,
    libc::SYS_fallocate,
    libc::SYS_fadvise64,
    libc::SYS_readahead,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_getdents64,
    libc::SYS_getcwd,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_mkdirat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_umask,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_copy_file_range,
    libc::SYS_sendfile,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_vmsplice,
    libc::SYS_pipe2,
    libc::SYS_memfd_create,
    libc::SYS_inotify_init1,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    // Waiting on descriptors, events and timers.
    libc::SYS_ppoll,
    libc::SYS_pselect6,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    libc::SYS_signalfd4,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    // Old asynchronous I/O (each operation is an ordinary file operation).
    libc::SYS_io_setup,
    libc::SYS_io_destroy,
    libc::SYS_io_submit,
    libc::SYS_io_cancel,
    libc::SYS_io_getevents,
    // Memory.
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_msync,
    libc::SYS_mincore,
    libc::SYS_mlock,
    libc::SYS_mlock2,
    libc::SYS_munlock,
    libc::SYS_mlockall,
    libc::SYS_munlockall,
    libc::SYS_membarrier,
    libc::SYS_pkey_alloc,
    libc::SYS_pkey_free,
    libc::SYS_pkey_mprotect,
    // Processes and threads (clone is allowed below, without namespaces).
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_kill,
    libc::SYS_tkill,
    libc::SYS_tgkill,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal,
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_gettid,
    libc::SYS_getpgid,
    libc::SYS_setpgid,
    libc::SYS_getsid,
    libc::SYS_setsid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getresuid,
    libc::SYS_getresgid,
    libc::SYS_getgroups,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_setgroups,
    libc::SYS_capget,
    libc::SYS_capset,
    libc::SYS_prctl,
    libc::SYS_seccomp,
    libc::SYS_landlock_create_ruleset,
    libc::SYS_landlock_add_rule,
    libc::SYS_landlock_restrict_self,
    libc::SYS_getrlimit,
    libc::SYS_setrlimit,
    libc::SYS_prlimit64,
    libc::SYS_getrusage,
    libc::SYS_getpriority,
    libc::SYS_setpriority,
    libc::SYS_set_tid_address,
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_rseq,
    libc::SYS_futex,
    libc::SYS_futex_waitv,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getparam,
    libc::SYS_sched_setparam,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_getattr,
    libc::SYS_sched_setattr,
    libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min,
    libc::SYS_sched_rr_get_interval,
    libc::SYS_getcpu,
    libc::SYS_ioprio_get,
    libc::SYS_ioprio_set,
    // Signals.
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigpending,
    libc::SYS_rt_sigsuspend,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    // Time (reading it, sleeping, timers).
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_gettimeofday,
    libc::SYS_nanosleep,
    libc::SYS_getitimer,
    libc::SYS_setitimer,
    libc::SYS_timer_create,
    libc::SYS_timer_settime,
    libc::SYS_timer_gettime,
    libc::SYS_timer_getoverrun,
    libc::SYS_timer_delete,
    libc::SYS_times,
    // Sockets (socket itself is allowed below, by family).
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_shutdown,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    // System V IPC and message queues (in the sandbox's own IPC namespace).
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmdt,
    libc::SYS_shmctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
    // The machine, as far as a program asks about it.
    libc::SYS_uname,
    libc::SYS_sysinfo,
    libc::SYS_getrandom,
];

/// The x86-64 calls that later architectures dropped for their `*at`
/// forms, and x86's own.
#[cfg(target_arch = "x86_64")]
const ALLOWED_X86_64: &[i64] = &[
    libc::SYS_open,
    libc::SYS_creat,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_access,
    libc::SYS_getdents,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_unlink,
    libc::SYS_rename,
    libc::SYS_link,
    libc::SYS_symlink,
    libc::SYS_readlink,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_dup2,
    libc::SYS_pipe,
    libc::SYS_poll,
    libc::SYS_select,
    libc::SYS_epoll_create,
    libc::SYS_epoll_wait,
    libc::SYS_eventfd,
    libc::SYS_signalfd,
    libc::SYS_inotify_init,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_pause,
    libc::SYS_alarm,
    libc::SYS_time,
    libc::SYS_getpgrp,
    libc::SYS_arch_prctl,
    libc::SYS_modify_ldt,
];
#[cfg(not(target_arch = "x86_64"))]
const ALLOWED_X86_64: &[i64] = &[];

/// The namespace flags `clone` may not be given.
const NAMESPACES: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP) as u64;

/// Socket families no sandbox may open (`AF_VSOCK` reaches the hypervisor).
const NEVER_SOCKETS: &[i32] = &[libc::AF_VSOCK];

/// Socket families only a sandbox with network access may open.
const NETWORK_SOCKETS: &[i32] = &[libc::AF_INET, libc::AF_INET6, libc::AF_PACKET];

/// `personality` arguments a program may pass: a query (`0xffffffff`) and
/// the harmless personas Docker allows.
const PERSONAS: &[u64] = &[0, 0x0008, 0x20000, 0x20008, 0xffff_ffff];

/// A second filter, installed after the main one: `clone3` fails with
/// `ENOSYS`. It takes its flags in memory, where a filter cannot look, and
/// C libraries fall back to `clone` (whose flags the main filter checks)
/// only on `ENOSYS`, which is why this cannot be in the main filter.
pub fn compile_no_clone3() -> Result<Vec<u8>, BackendError> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )?;
    to_bytes(filter)
}

/// The namespaces a contained zygote may make for a sandbox: never a user
/// or mount namespace (nor a cgroup one).
const SANDBOX_NAMESPACES: u64 =
    (libc::CLONE_NEWNET | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) as u64;

/// Compiles the filter for a sandbox with or without internet sockets.
pub fn compile(network: bool) -> Result<Vec<u8>, BackendError> {
    to_bytes(filter(rules(network)?)?)
}

/// Compiles the filter of a zygote that imports a tenant's packages: a
/// sandbox's filter (so import-time code can do no more than a handler)
/// plus what the zygote needs to make its handlers' sandboxes, each of
/// which reaches only namespaces the zygote's own user namespace owns:
/// `unshare` of PID, IPC, UTS and network namespaces, `chroot` (by
/// descriptor, into the handler's root) and `sethostname`. A handler adds
/// its own filter on top, so it has none of these.
pub fn compile_zygote(network: bool) -> Result<Vec<u8>, BackendError> {
    to_bytes(filter(zygote_rules(network)?)?)
}

fn zygote_rules(network: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, BackendError> {
    let mut rules = rules(network)?;
    rules.insert(
        libc::SYS_unshare,
        vec![rule(vec![cond(
            0,
            SeccompCmpOp::MaskedEq(!SANDBOX_NAMESPACES & 0xffff_ffff),
            0,
        )?])?],
    );
    rules.insert(libc::SYS_chroot, Vec::new());
    rules.insert(libc::SYS_sethostname, Vec::new());
    Ok(rules)
}

fn cond(arg: u8, op: SeccompCmpOp, val: u64) -> Result<SeccompCondition, BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, val)
}

fn rule(c: Vec<SeccompCondition>) -> Result<SeccompRule, BackendError> {
    SeccompRule::new(c)
}

/// Refuses with `EPERM` every call not in `rules`.
fn filter(rules: BTreeMap<i64, Vec<SeccompRule>>) -> Result<SeccompFilter, BackendError> {
    SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch()?,
    )
}

/// A sandbox's rules: [`ALLOWED`] and the conditional calls.
fn rules(network: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(ALLOWED_X86_64)
        .map(|s| (*s, Vec::new()))
        .collect();
    // clone(2) for threads and processes, never for new namespaces; clone3
    // is allowed here, and the second filter answers it ENOSYS.
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(0, SeccompCmpOp::MaskedEq(NAMESPACES), 0)?])?],
    );
    rules.insert(libc::SYS_clone3, Vec::new());
    let refused: Vec<i32> = if network {
        NEVER_SOCKETS.to_vec()
    } else {
        NEVER_SOCKETS
            .iter()
            .chain(NETWORK_SOCKETS)
            .copied()
            .collect()
    };
    rules.insert(
        libc::SYS_socket,
        vec![rule(
            refused
                .iter()
                .map(|d| cond(0, SeccompCmpOp::Ne, *d as u64))
                .collect::<Result<_, _>>()?,
        )?],
    );
    rules.insert(
        libc::SYS_personality,
        PERSONAS
            .iter()
            .map(|p| rule(vec![cond(0, SeccompCmpOp::Eq, *p)?]))
            .collect::<Result<_, _>>()?,
    );
    Ok(rules)
}

fn arch() -> Result<seccompiler::TargetArch, BackendError> {
    std::env::consts::ARCH.try_into()
}

fn to_bytes(filter: SeccompFilter) -> Result<Vec<u8>, BackendError> {
    let program: BpfProgram = filter.try_into()?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for ins in &program {
        bytes.extend_from_slice(&ins.code.to_ne_bytes());
        bytes.push(ins.jt);
        bytes.push(ins.jf);
        bytes.extend_from_slice(&ins.k.to_ne_bytes());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls that reach past the sandbox: none may be on the allow-list.
    const NEVER: &[i64] = &[
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_process_madvise,
        libc::SYS_kcmp,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_syslog,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_mknod,
        libc::SYS_mknodat,
        libc::SYS_fanotify_init,
        libc::SYS_fanotify_mark,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_lookup_dcookie,
        libc::SYS_vhangup,
        libc::SYS_set_mempolicy,
        libc::SYS_mbind,
        libc::SYS_migrate_pages,
        libc::SYS_move_pages,
    ];

    #[test]
    fn nothing_that_reaches_past_the_sandbox_is_allowed() {
        let allowed: Vec<i64> = ALLOWED.iter().chain(ALLOWED_X86_64).copied().collect();
        for n in NEVER {
            assert!(!allowed.contains(n), "syscall {n} is on the allow-list");
        }
        let mut sorted = allowed.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), allowed.len(), "a call is listed twice");
    }

    #[test]
    fn a_zygote_may_make_sandboxes_but_no_user_or_mount_namespace() {
        let sandbox = rules(false).unwrap();
        let zygote = zygote_rules(false).unwrap();
        let extra: Vec<i64> = zygote
            .keys()
            .filter(|k| !sandbox.contains_key(k))
            .copied()
            .collect();
        assert_eq!(
            extra,
            [libc::SYS_chroot, libc::SYS_sethostname, libc::SYS_unshare]
        );
        for flag in [
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWNS,
            libc::CLONE_NEWCGROUP,
        ] {
            assert_ne!(flag as u64 & !SANDBOX_NAMESPACES, 0, "{flag:#x}");
        }
        assert!(compile_zygote(false).unwrap().len() > compile(false).unwrap().len());
    }

    #[test]
    fn filters_compile_to_whole_instructions_and_differ_on_network() {
        let with = compile(true).unwrap();
        let without = compile(false).unwrap();
        assert_eq!(with.len() % 8, 0);
        assert!(
            without.len() > with.len(),
            "the no-network filter has more socket conditions"
        );
    }
}
