//! The data directory is the daemon's alone: every tenant's code, KV
//! values, logs and tapes are in it. It is made (or made again) mode 0700,
//! and what Hearth keeps in it is readable by the owner only.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;

/// Below these, sandboxes' lean roots and their code: the process tier
/// owns their modes (a sandbox's unprivileged user must read its code;
/// nothing outside a chroot can reach them past the 0700 directory).
const OWNED_BY_THE_PROCESS_TIER: &[&str] = &["proc"];

/// Creates `dir` 0700, or takes away group and other access from it and
/// from what Hearth keeps in it, warning if the directory or a file was
/// open to others (a data directory from an older Hearth, or one copied
/// with a wide umask).
/// Creates an empty `hearth.db` 0600 if there is none, so that SQLite's
/// database and its `-wal` and `-shm` files (which take the database's
/// mode) are never readable by others.
pub fn secure(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("failed to create {}", dir.display()))?;
    let mut fixed = Vec::new();
    restrict(dir, false, &mut fixed)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !OWNED_BY_THE_PROCESS_TIER
            .iter()
            .any(|n| entry.file_name() == *n)
        {
            restrict(&entry.path(), true, &mut fixed)?;
        }
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join("hearth.db"))
        .with_context(|| format!("failed to create {}", dir.join("hearth.db").display()))?;
    if !fixed.is_empty() {
        tracing::warn!(
            paths = fixed.len(),
            first = %fixed[0],
            "the data directory was readable by other users; group and other access removed"
        );
    }
    Ok(())
}

/// Takes group and other bits off `path` (and, `deep`, all below it).
fn restrict(path: &Path, deep: bool, fixed: &mut Vec<String>) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("failed to read {}", path.display()))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o077))
            .with_context(|| format!("failed to restrict {}", path.display()))?;
        // A directory below the 0700 root, made with the usual umask, let
        // nobody in; a file or the root itself did.
        if !(deep && meta.is_dir()) {
            fixed.push(path.display().to_string());
        }
    }
    if deep && meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            restrict(&entry?.path(), true, fixed)?;
        }
    }
    Ok(())
}
