#!/usr/bin/python3
"""Writes hearth-node.json, the seccomp profile of Hearth's node pods.

Run it after changing a list below:

    /usr/bin/python3 deploy/kubernetes/profiles/generate-seccomp.py [OUT]

It needs libseccomp's Python binding (Debian: python3-seccomp), which
knows every syscall's name on each architecture. The profile allows every
syscall of the 64-bit x86 and Arm ABIs except the groups below, each
refused for the reason beside it: the container runtime's default profile
refuses the same (RuntimeDefault), apart from the few the sandbox builder
needs (ALLOWED_FOR_THE_SANDBOX_BUILDER). It is a plain OCI profile with no
conditions on capabilities, so containerd and CRI-O read it alike.
The Kubernetes tests check that this script writes what is committed
(crates/hearth/tests/all/kubernetes.rs), and run the node and the escapes
it refuses under it (crates/hearth/tests/all/hostile/node_pod.rs).
"""

import json
import pathlib
import sys

import seccomp

ARCHES = {
    # The 32-bit ABIs (i386, x32, arm) are not in the profile, so the kernel
    # kills a process that uses them: Hearth and the runtimes it ships are
    # 64-bit, and the compat entry points have been a source of kernel bugs.
    "SCMP_ARCH_X86_64": seccomp.Arch.X86_64,
    "SCMP_ARCH_AARCH64": seccomp.Arch.AARCH64,
}

# Refused with EPERM, as RuntimeDefault refuses them (group: why).
REFUSED = {
    "the host's kernel is not the node's to change":
        "init_module finit_module delete_module kexec_load kexec_file_load "
        "reboot swapon swapoff acct syslog vhangup",
    "the host's clocks are not the node's to set":
        "settimeofday clock_settime clock_adjtime",
    "reading or changing other processes' memory and state":
        "ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd "
        "perf_event_open lookup_dcookie",
    "kernel programs and page-fault handlers: large attack surfaces "
    "Hearth never uses":
        "bpf userfaultfd",
    "the kernel keyring is not namespaced":
        "add_key request_key keyctl",
    "opening files by handle escapes a chroot or a bind mount "
    "(the 'shocker' escape)":
        "open_by_handle_at name_to_handle_at",
    "quotas, I/O ports, NUMA policy and fanotify belong to the host":
        "quotactl quotactl_fd ioperm iopl mbind set_mempolicy "
        "set_mempolicy_home_node get_mempolicy move_pages migrate_pages "
        "fanotify_init fanotify_mark",
    "obsolete or never implemented":
        "_sysctl sysfs ustat uselib nfsservctl create_module "
        "get_kernel_syms query_module afs_syscall tuxcall security "
        "vserver getpmsg putpmsg epoll_ctl_old epoll_wait_old",
    "memory hidden from the kernel itself":
        "memfd_secret",
}

# Refused with ENOSYS, so that callers fall back to the old interface
# instead of failing (group: why).
UNIMPLEMENTED = {
    "the new mount API: Hearth mounts with mount(2), which the refusals of "
    "the AppArmor profile see; a library that tries these first falls back":
        "fsopen fsconfig fsmount fspick move_mount open_tree mount_setattr",
    "io_uring: a large attack surface, refused by RuntimeDefault; libuv and "
    "the others fall back to ordinary system calls":
        "io_uring_setup io_uring_enter io_uring_register",
}

# Allowed with conditions on their arguments, each a rule of its own (the
# profile allows a call any of them allows).
CONDITIONAL = [
    (
        "personality: only Linux's own (0, UNAME26, READ_IMPLIES_EXEC "
        "and their mix) and the query (0xffffffff), as RuntimeDefault",
        "personality",
        [[(0, "SCMP_CMP_EQ", v, 0)] for v in (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)],
    ),
    (
        "mknod: regular files, FIFOs, sockets and character devices (a "
        "sandbox root's /dev/null, /dev/zero, /dev/urandom), never a block "
        "device: with CAP_MKNOD a block node would open the host's disks",
        "mknod",
        [[(1, "SCMP_CMP_MASKED_EQ", 0o170000, t)] for t in (0, 0o100000, 0o010000, 0o140000, 0o020000)],
    ),
    (
        "mknodat: as mknod, its mode one argument later",
        "mknodat",
        [[(2, "SCMP_CMP_MASKED_EQ", 0o170000, t)] for t in (0, 0o100000, 0o010000, 0o140000, 0o020000)],
    ),
    (
        "socket: every family but AF_VSOCK (the host's hypervisor "
        "channel), as RuntimeDefault",
        "socket",
        [[(0, "SCMP_CMP_NE", 40, 0)]],
    ),
]

# Allowed although RuntimeDefault refuses them, or allows them only to a
# container that holds CAP_SYS_ADMIN (which the node does).
ALLOWED_FOR_THE_SANDBOX_BUILDER = {
    "pivot_root": "a zygote's imports move into their root before they fork "
    "handlers (RuntimeDefault refuses it outright)",
    "mount": "bind mounts, tmpfs and read-only remounts that make each "
    "sandbox's root",
    "umount2": "detaching the host's tree from a sandbox's mount namespace",
    "unshare": "the mount, PID, IPC, UTS, network, cgroup and user "
    "namespaces of sandboxes and zygotes",
    "setns": "installers joining the network namespace made for them",
    "chroot": "handlers and installers entering their roots",
    "sethostname": "naming each sandbox's UTS namespace",
    "setdomainname": "as sethostname",
    "clone": "processes and threads, with the namespace flags that "
    "sandboxes start with",
    "clone3": "as clone (RuntimeDefault answers ENOSYS without CAP_SYS_ADMIN)",
}


def names(groups):
    return {n for group in groups.values() for n in group.split()}


def every_syscall():
    out = set()
    for arch in ARCHES.values():
        for nr in range(0, 1024):
            try:
                out.add(seccomp.resolve_syscall(arch, nr).decode())
            except (ValueError, RuntimeError):
                pass
    return out


def profile():
    refused = names(REFUSED)
    unimplemented = names(UNIMPLEMENTED)
    conditional = {name for _, name, _ in CONDITIONAL}
    builder = set(ALLOWED_FOR_THE_SANDBOX_BUILDER)
    known = every_syscall()
    listed = refused | unimplemented | conditional | builder
    unknown = sorted(listed - known)
    assert not unknown, f"not a syscall on {list(ARCHES)}: {unknown}"
    syscalls = [
        {
            "comment": "Every other system call of the 64-bit ABIs, as "
            "RuntimeDefault allows them (deploy/kubernetes/profiles/generate-seccomp.py "
            "lists what is refused and why)",
            "names": sorted(known - listed),
            "action": "SCMP_ACT_ALLOW",
        },
    ]
    for name, why in ALLOWED_FOR_THE_SANDBOX_BUILDER.items():
        syscalls.append({"comment": f"The sandbox builder: {why}", "names": [name],
                         "action": "SCMP_ACT_ALLOW"})
    for why, name, rules in CONDITIONAL:
        for args in rules:
            syscalls.append({
                "comment": why,
                "names": [name],
                "action": "SCMP_ACT_ALLOW",
                "args": [{"index": i, "value": v, "valueTwo": v2, "op": op}
                         for i, op, v, v2 in args],
            })
    for why, group in UNIMPLEMENTED.items():
        syscalls.append({"comment": why, "names": group.split(),
                         "action": "SCMP_ACT_ERRNO", "errnoRet": 38})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": list(ARCHES),
        "syscalls": syscalls,
    }


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).with_name("hearth-node.json")
    out.write_text(json.dumps(profile(), indent=2) + "\n")
    print(f"wrote {out}")
