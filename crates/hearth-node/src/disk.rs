//! The data directory's disk: a full one is a fault the node shows and
//! survives, not one that stops the operator from freeing space.
//!
//! A watcher reads the file system's free space every second. Below
//! `--min-free-disk-mib` the disk is *full*: `/v1/status` and `hearth
//! status` say so, `/readyz` is 503, and what would grow the data
//! directory (deploys, new tenants, KV writes through the API, tapes, log
//! lines) is refused (507) or dropped and counted, while invocations keep
//! running.
//!
//! Deletes must work even when something else filled the disk to its last
//! byte: SQLite needs room in its write-ahead log to delete. So the node
//! keeps a *reserve*, a file of `--disk-reserve-mib` it allocated while
//! there was room; a delete on a full disk first gives the reserve back.
//! Until there is room to allocate it again (the threshold and the reserve
//! both free), the disk stays full.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The file the reserve is kept in, inside the data directory.
const RESERVE_FILE: &str = "disk-reserve";

/// How often the watcher reads the free space.
const EVERY: Duration = Duration::from_secs(1);

/// The data directory's disk, and what the node keeps of it.
#[derive(Debug, Clone)]
pub struct DiskConfig {
    /// The data directory.
    pub dir: PathBuf,
    /// Below this many free bytes the disk is full (`--min-free-disk-mib`;
    /// `None`: 2% of the file system, between 64 MiB and 1 GiB).
    pub min_free_bytes: Option<u64>,
    /// Bytes set aside for deletes on a full disk (`--disk-reserve-mib`).
    pub reserve_bytes: u64,
}

/// The watched disk.
#[derive(Debug)]
pub struct Disk {
    config: DiskConfig,
    min_free: u64,
    free: AtomicU64,
    total: AtomicU64,
    full: AtomicBool,
    /// Whether the reserve file is allocated now.
    reserved: AtomicBool,
}

impl Disk {
    /// Reads the disk once and allocates the reserve if there is room.
    pub fn open(config: DiskConfig) -> Arc<Disk> {
        let min_free = config.min_free_bytes.unwrap_or_else(|| {
            let total = free_space(&config.dir).map_or(0, |(_, total)| total);
            (total / 50).clamp(64 << 20, 1 << 30)
        });
        let disk = Arc::new(Disk {
            config,
            min_free,
            free: AtomicU64::new(0),
            total: AtomicU64::new(0),
            full: AtomicBool::new(false),
            reserved: AtomicBool::new(false),
        });
        // A reserve left by an earlier run is this run's; none is needed
        // when it is set to nothing.
        if disk.config.reserve_bytes == 0
            || std::fs::metadata(disk.reserve_path())
                .is_ok_and(|m| m.len() == disk.config.reserve_bytes)
        {
            disk.reserved.store(true, Ordering::Relaxed);
        }
        disk.check();
        disk
    }

    /// Reads the disk every second, for as long as the node runs.
    pub fn spawn_watcher(self: &Arc<Self>) {
        let disk = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(disk) = disk.upgrade() else { return };
                let _ = tokio::task::spawn_blocking(move || disk.check()).await;
            }
        });
    }

    fn reserve_path(&self) -> PathBuf {
        self.config.dir.join(RESERVE_FILE)
    }

    /// Reads the free space; allocates the reserve again once there is
    /// room for it above the threshold; judges whether the disk is full.
    pub fn check(&self) {
        let Some((free, total)) = free_space(&self.config.dir) else {
            return;
        };
        let want = self.config.reserve_bytes;
        let mut free = free;
        if !self.reserved.load(Ordering::Relaxed)
            && free >= self.min_free + want
            && allocate(&self.reserve_path(), want).is_ok()
        {
            self.reserved.store(true, Ordering::Relaxed);
            free -= want;
            tracing::info!(bytes = want, "disk reserve for deletes allocated");
        }
        self.free.store(free, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        let full = free < self.min_free || !self.reserved.load(Ordering::Relaxed);
        let was = self.full.swap(full, Ordering::Relaxed);
        if full && !was {
            tracing::warn!(
                free_mib = free >> 20,
                min_free_mib = self.min_free >> 20,
                "the data directory's disk is full: deploys, KV writes, tapes and logs are \
                 refused until space is freed"
            );
        } else if was && !full {
            tracing::info!(
                free_mib = free >> 20,
                "the data directory's disk has room again"
            );
        }
    }

    /// Bytes free on the file system, as last read.
    pub fn free_bytes(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// Whether what would grow the data directory is refused now.
    pub fn full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// `Err` with what to do when the disk is full.
    pub fn admit_growth(&self) -> Result<(), String> {
        if !self.full() {
            return Ok(());
        }
        Err(format!(
            "the node's disk is full ({} MiB free in its data directory, below \
             --min-free-disk-mib {}): remove functions, versions or data, or free space on \
             the node, and try again",
            self.free.load(Ordering::Relaxed) >> 20,
            self.min_free >> 20
        ))
    }

    /// Before a delete: on a full disk, gives the reserve back so that the
    /// delete has room to be written. The disk stays full until there is
    /// room to allocate the reserve again.
    pub fn make_room_to_delete(&self) {
        if self.full() && self.reserved.swap(false, Ordering::Relaxed) {
            match std::fs::remove_file(self.reserve_path()) {
                Ok(()) => tracing::warn!("disk reserve given back so that a delete can be written"),
                Err(e) => tracing::warn!(error = %e, "could not remove the disk reserve"),
            }
        }
    }

    /// For `/v1/status`.
    pub fn status(&self) -> crate::status::DiskStatus {
        crate::status::DiskStatus {
            full: self.full(),
            free_mib: self.free.load(Ordering::Relaxed) >> 20,
            total_mib: self.total.load(Ordering::Relaxed) >> 20,
            min_free_mib: self.min_free >> 20,
            reserve_mib: self.config.reserve_bytes >> 20,
            reserve_held: self.reserved.load(Ordering::Relaxed),
        }
    }
}

/// Bytes free to an unprivileged writer, and the file system's size.
fn free_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `st` a statvfs the
    // call fills; it is read only when the call succeeded.
    let st = unsafe {
        if libc::statvfs(path.as_ptr(), st.as_mut_ptr()) != 0 {
            return None;
        }
        st.assume_init()
    };
    let unit = st.f_frsize as u64;
    Some((st.f_bavail as u64 * unit, st.f_blocks as u64 * unit))
}

/// Allocates `bytes` of real blocks to `path` (not a sparse file, which
/// would give nothing back).
fn allocate(path: &Path, bytes: u64) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // Nothing in it, but the data directory's files are its owner's alone.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // SAFETY: the descriptor is the open file's, for the call's duration.
    let err = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
    let done = match err {
        0 => file.sync_all(),
        // A file system without fallocate: the blocks are written.
        libc::EOPNOTSUPP | libc::EINVAL => (|| {
            let zeros = vec![0u8; 1 << 20];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                file.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            file.sync_all()
        })(),
        err => Err(std::io::Error::from_raw_os_error(err)),
    };
    if done.is_err() {
        let _ = std::fs::remove_file(path);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(min_free: u64, reserve: u64) -> (tempfile::TempDir, Arc<Disk>) {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::open(DiskConfig {
            dir: dir.path().to_path_buf(),
            min_free_bytes: Some(min_free),
            reserve_bytes: reserve,
        });
        (dir, disk)
    }

    #[test]
    fn a_disk_with_room_holds_its_reserve_and_is_not_full() {
        let (dir, disk) = disk(1 << 20, 1 << 20);
        assert!(!disk.full());
        assert!(disk.admit_growth().is_ok());
        let reserve = std::fs::metadata(dir.path().join(RESERVE_FILE)).unwrap();
        assert_eq!(reserve.len(), 1 << 20);
        // Not sparse: its blocks are allocated.
        use std::os::unix::fs::MetadataExt;
        assert!(reserve.blocks() * 512 >= 1 << 20, "{}", reserve.blocks());
        // Reopened, the reserve is kept, not allocated twice.
        let again = Disk::open(disk.config.clone());
        assert!(again.reserved.load(Ordering::Relaxed));
    }

    #[test]
    fn below_the_threshold_growth_is_refused_and_a_delete_takes_the_reserve() {
        // No file system has this much free.
        let (dir, disk) = disk(u64::MAX / 4, 1 << 20);
        assert!(disk.full());
        let why = disk.admit_growth().unwrap_err();
        assert!(why.contains("--min-free-disk-mib"), "{why}");
        assert!(!disk.reserved.load(Ordering::Relaxed), "no room to reserve");
        // With room, a reserve; full again, a delete gives it back, and the
        // disk stays full until there is room for it again.
        let (dir2, roomy) = self::disk(1 << 20, 1 << 20);
        roomy.full.store(true, Ordering::Relaxed);
        roomy.make_room_to_delete();
        assert!(!dir2.path().join(RESERVE_FILE).exists());
        assert!(!roomy.reserved.load(Ordering::Relaxed));
        roomy.check();
        assert!(roomy.reserved.load(Ordering::Relaxed));
        assert!(!roomy.full());
        drop(dir);
    }
}
