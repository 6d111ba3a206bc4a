#!/usr/bin/python3
"""Runs a command under an OCI seccomp profile, loaded as runc loads one.

    /usr/bin/python3 scripts/seccomp-exec.py [--no-new-privs] PROFILE.json -- COMMAND...

The tests use it to run Hearth's node under deploy/kubernetes/profiles/
hearth-node.json as a container runtime would: libseccomp (Debian:
python3-seccomp) builds the filter, a name the running kernel's
architecture lacks is skipped (as runc skips it), rules for one call are
alternatives, a rule's conditions all hold, and no_new_privs is set only
when asked (a pod with allowPrivilegeEscalation: false), so loading the
filter needs CAP_SYS_ADMIN otherwise.
"""

import errno
import json
import os
import sys

import seccomp

OPS = {
    "SCMP_CMP_EQ": seccomp.EQ,
    "SCMP_CMP_NE": seccomp.NE,
    "SCMP_CMP_LT": seccomp.LT,
    "SCMP_CMP_LE": seccomp.LE,
    "SCMP_CMP_GT": seccomp.GT,
    "SCMP_CMP_GE": seccomp.GE,
    "SCMP_CMP_MASKED_EQ": seccomp.MASKED_EQ,
}
ARCHES = {
    "SCMP_ARCH_X86_64": seccomp.Arch.X86_64,
    "SCMP_ARCH_X86": seccomp.Arch.X86,
    "SCMP_ARCH_X32": seccomp.Arch.X32,
    "SCMP_ARCH_AARCH64": seccomp.Arch.AARCH64,
    "SCMP_ARCH_ARM": seccomp.Arch.ARM,
}


def action(kind, errno_ret):
    if kind == "SCMP_ACT_ALLOW":
        return seccomp.ALLOW
    if kind == "SCMP_ACT_ERRNO":
        return seccomp.ERRNO(errno_ret)
    if kind == "SCMP_ACT_KILL_PROCESS":
        return seccomp.KILL_PROCESS
    if kind in ("SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD"):
        return seccomp.KILL
    raise SystemExit(f"seccomp-exec: action {kind} is not supported here")


def load(profile, no_new_privs):
    default_errno = profile.get("defaultErrnoRet", errno.EPERM)
    f = seccomp.SyscallFilter(action(profile["defaultAction"], default_errno))
    f.set_attr(seccomp.Attr.CTL_NNP, 1 if no_new_privs else 0)
    # The binding gives the machine's token unsigned and its Arch values
    # signed: compare them as 32-bit words.
    native = seccomp.system_arch() & 0xFFFFFFFF
    arches = [ARCHES[a] for a in profile.get("architectures", [])]
    if arches and native not in [int(a) & 0xFFFFFFFF for a in arches]:
        raise SystemExit(f"seccomp-exec: the profile has no rules for this machine ({native})")
    for a in arches:
        if int(a) & 0xFFFFFFFF != native:
            f.add_arch(a)
    for rule in profile["syscalls"]:
        act = action(rule["action"], rule.get("errnoRet", default_errno))
        args = [
            seccomp.Arg(a["index"], OPS[a["op"]], a["value"], a.get("valueTwo", 0))
            for a in rule.get("args") or []
        ]
        for name in rule["names"]:
            if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) == -1:
                continue
            f.add_rule(act, name, *args)
    f.load()


def main():
    argv = sys.argv[1:]
    no_new_privs = argv[:1] == ["--no-new-privs"]
    if no_new_privs:
        argv = argv[1:]
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit(__doc__)
    with open(argv[0]) as f:
        load(json.load(f), no_new_privs)
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main()
