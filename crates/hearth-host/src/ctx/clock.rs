//! Clocks and randomness, as the host gives them: synchronous (WASI asks
//! for them inline), taped, and given again from an earlier tape.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;

use super::HostCtx;
use crate::HostEvent;

fn monotonic_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// The monotonic clock [`HostCtx::monotonic_nanos`] answers from, read
/// without going on any tape: for the host's own timing (how long a sleep
/// until an absolute monotonic time lasts) and for code that runs outside
/// any invocation (an init step at deploy), which has no tape.
pub fn monotonic_now_nanos() -> u64 {
    monotonic_origin().elapsed().as_nanos() as u64
}

impl HostCtx {
    /// Wall-clock time, nanoseconds since the Unix epoch.
    pub fn wall_clock_nanos(&self) -> u64 {
        if let Some(Ok(nanos)) = self.earlier(
            false,
            || "clock.wall".into(),
            |e| match e {
                HostEvent::WallClock { nanos } => Some(*nanos),
                _ => None,
            },
        ) {
            return nanos;
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        self.record(HostEvent::WallClock { nanos });
        nanos
    }

    /// Monotonic time in nanoseconds from an arbitrary, per-process origin.
    pub fn monotonic_nanos(&self) -> u64 {
        if let Some(Ok(nanos)) = self.earlier(
            false,
            || "clock.monotonic".into(),
            |e| match e {
                HostEvent::MonotonicClock { nanos } => Some(*nanos),
                _ => None,
            },
        ) {
            return nanos;
        }
        let nanos = monotonic_now_nanos();
        self.record(HostEvent::MonotonicClock { nanos });
        nanos
    }

    /// Fills `buf` with cryptographically secure random bytes.
    pub fn fill_random(&self, buf: &mut [u8]) {
        let len = buf.len();
        if let Some(Ok(bytes)) = self.earlier(
            false,
            || format!("random {len} bytes"),
            |e| match e {
                HostEvent::Random { bytes } if bytes.len() == len => Some(bytes.clone()),
                _ => None,
            },
        ) {
            buf.copy_from_slice(&bytes);
            return;
        }
        rand::rng().fill_bytes(buf);
        self.record(HostEvent::Random {
            bytes: buf.to_vec(),
        });
    }
}
