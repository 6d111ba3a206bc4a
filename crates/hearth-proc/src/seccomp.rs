//! The seccomp filters sandboxes run under.
//!
//! A deny-list on top of the unprivileged user and `no_new_privs`: the
//! calls that reconfigure the kernel, reach into other processes, or make
//! namespaces fail with `EPERM`. Internet sockets (`AF_INET`, `AF_INET6`,
//! `AF_PACKET`) fail too unless the function lists hosts it may reach;
//! outbound HTTP through the `hearth` module works either way, because the
//! node makes those requests.
//!
//! The node compiles the filters once (seccompiler, from Firecracker) and
//! writes them as raw BPF into the helpers' directory; the helper installs
//! one with `prctl(PR_SET_SECCOMP)` just before running user code.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// The filter's file name (without `.bpf`) in the helpers' directory.
pub fn filter_name(network: bool) -> &'static str {
    if network { "net" } else { "nonet" }
}

const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_adjtimex,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_quotactl,
    libc::SYS_mknod,
    libc::SYS_mknodat,
];

/// A second filter, installed after the main one: `clone3` fails with
/// `ENOSYS`. It takes its flags in memory, where a filter cannot look, and
/// C libraries fall back to `clone` (whose flags the main filter checks)
/// only on `ENOSYS`, which is why this cannot be in the main filter.
pub fn compile_no_clone3() -> Result<Vec<u8>, String> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    to_bytes(rules, libc::ENOSYS)
}

/// Compiles the filter for a sandbox with or without internet sockets.
pub fn compile(network: bool) -> Result<Vec<u8>, String> {
    let cond = |arg, op, val: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, val).map_err(|e| e.to_string())
    };
    let rule = |c: Vec<SeccompCondition>| SeccompRule::new(c).map_err(|e| e.to_string());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|s| (*s, Vec::new())).collect();
    // New namespaces through clone(2): any one namespace flag set.
    rules.insert(
        libc::SYS_clone,
        [
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWNS,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWCGROUP,
        ]
        .iter()
        .map(|f| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f as u64), *f as u64)?]))
        .collect::<Result<_, _>>()?,
    );
    if !network {
        rules.insert(
            libc::SYS_socket,
            [libc::AF_INET, libc::AF_INET6, libc::AF_PACKET]
                .iter()
                .map(|d| rule(vec![cond(0, SeccompCmpOp::Eq, *d as u64)?]))
                .collect::<Result<_, _>>()?,
        );
    }
    to_bytes(rules, libc::EPERM)
}

fn to_bytes(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<Vec<u8>, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        std::env::consts::ARCH
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
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

    #[test]
    fn filters_compile_to_whole_instructions_and_differ_on_network() {
        let with = compile(true).unwrap();
        let without = compile(false).unwrap();
        assert_eq!(with.len() % 8, 0);
        assert!(
            without.len() > with.len(),
            "the no-network filter has socket rules"
        );
    }
}
