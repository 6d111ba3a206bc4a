//! A container's own cgroup namespace, made writable.
//!
//! A container runtime gives a container that is not privileged its cgroup
//! namespace's root (its own group) mounted read-only. Hearth's node pod
//! asks for `--remount-cgroupfs`: it remounts that mount read-write in the
//! container's mount namespace (CAP_SYS_ADMIN there), so it can put its
//! sandboxes in groups below its own, inside the pod's limits, instead of
//! being handed the host's whole hierarchy. The kernel still confines the
//! writes: with `nsdelegate` (systemd mounts cgroup2 so) a process cannot
//! move others across its namespace's root, and the root's own limits are
//! the kubelet's.
//!
//! It refuses what is not a container's own namespace: a read-only
//! cgroupfs elsewhere is the operator's protection (systemd's
//! `ProtectControlGroups=yes`), not the runtime's default.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What the hierarchy at the mount point looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    read_only: bool,
    /// cgroup v2 (`cgroup.controllers` at the mount point).
    v2: bool,
    /// The process's own group, as `/proc/self/cgroup` names it (`0::/…`).
    own_group: String,
    /// The mount point's group has `cgroup.type`: it is a namespace's root
    /// below the machine's (the machine's root has none).
    below_the_machine_root: bool,
}

/// What to do: nothing (already writable), remount, or refuse and why.
fn decide(m: &Mount) -> Result<bool, String> {
    if !m.read_only {
        return Ok(false);
    }
    if !m.v2 {
        return Err("--remount-cgroupfs works on cgroup v2 only; on v1 give the container a writable hierarchy (or run the node on a v2 host)".into());
    }
    if m.own_group != "/" || !m.below_the_machine_root {
        return Err(format!(
            "--remount-cgroupfs is for a container started in a cgroup namespace of its own, \
             and Hearth is in {} of {}: a read-only cgroup filesystem here is the operator's \
             choice (systemd's ProtectControlGroups=yes); remove the flag, or give Hearth a \
             delegated group (docs/systemd.md)",
            m.own_group,
            if m.below_the_machine_root {
                "a namespace"
            } else {
                "the machine's hierarchy"
            }
        ));
    }
    Ok(true)
}

/// Remounts `sysfs` read-write if it is a container's own read-only cgroup
/// v2 namespace root. Whether it remounted.
pub fn make_writable(sysfs: &Path) -> io::Result<bool> {
    let path = CString::new(sysfs.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs is plain old data, for which all zeroes is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes the one struct it is given; the path is a
    // valid C string.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let own_group = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_string();
    let mount = Mount {
        read_only: st.f_flag & libc::ST_RDONLY != 0,
        v2: sysfs.join("cgroup.controllers").exists(),
        own_group,
        below_the_machine_root: sysfs.join("cgroup.type").exists(),
    };
    if !decide(&mount).map_err(|why| io::Error::new(io::ErrorKind::PermissionDenied, why))? {
        return Ok(false);
    }
    // A bind remount changes only this mount's flags; the ones to keep
    // are given again (they would be cleared).
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    // SAFETY: mount(2) with a valid target path and null source, type and data.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!(
                "remounting {} read-write: {e} (the node's container needs CAP_SYS_ADMIN, and an \
                 AppArmor profile that allows the remount, as \
                 deploy/kubernetes/profiles/hearth-node.apparmor does)",
                sysfs.display()
            ),
        ));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> Mount {
        Mount {
            read_only: true,
            v2: true,
            own_group: "/".into(),
            below_the_machine_root: true,
        }
    }

    #[test]
    fn a_containers_read_only_namespace_root_is_remounted() {
        assert_eq!(decide(&container()), Ok(true));
    }

    #[test]
    fn a_writable_hierarchy_is_left_alone() {
        let m = Mount {
            read_only: false,
            ..container()
        };
        assert_eq!(decide(&m), Ok(false));
        // Writable, anything goes: the flag changes nothing there.
        let host = Mount {
            read_only: false,
            v2: false,
            own_group: "/user.slice".into(),
            below_the_machine_root: false,
        };
        assert_eq!(decide(&host), Ok(false));
    }

    #[test]
    fn an_operators_read_only_cgroupfs_is_refused_naming_why() {
        // systemd's ProtectControlGroups=yes: the machine's hierarchy, in
        // the service's group.
        let protected = Mount {
            own_group: "/system.slice/hearth.service".into(),
            below_the_machine_root: false,
            ..container()
        };
        let why = decide(&protected).unwrap_err();
        assert!(why.contains("ProtectControlGroups"), "{why}");
        // A namespace whose root is not this process's group.
        let elsewhere = Mount {
            own_group: "/pod/other".into(),
            ..container()
        };
        assert!(decide(&elsewhere).is_err());
        // The machine's root itself.
        let root = Mount {
            below_the_machine_root: false,
            ..container()
        };
        assert!(decide(&root).is_err());
    }

    #[test]
    fn v1_is_refused_with_what_to_do() {
        let m = Mount {
            v2: false,
            ..container()
        };
        assert!(decide(&m).unwrap_err().contains("v2 only"));
    }
}
