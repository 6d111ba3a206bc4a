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
        self.clock(
            "clock.wall",
            |e| match e {
                HostEvent::WallClock { nanos } => Some(*nanos),
                _ => None,
            },
            || {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            },
            |nanos| HostEvent::WallClock { nanos },
        )
    }

    /// Monotonic time in nanoseconds from an arbitrary, per-process origin.
    pub fn monotonic_nanos(&self) -> u64 {
        self.clock(
            "clock.monotonic",
            |e| match e {
                HostEvent::MonotonicClock { nanos } => Some(*nanos),
                _ => None,
            },
            monotonic_now_nanos,
            |nanos| HostEvent::MonotonicClock { nanos },
        )
    }

    /// A clock's reading: an earlier tape's (`same` finds it), or `read`
    /// now and taped as `taped` makes it.
    fn clock(
        &self,
        asked: &'static str,
        same: impl FnOnce(&HostEvent) -> Option<u64>,
        read: impl FnOnce() -> u64,
        taped: impl FnOnce(u64) -> HostEvent,
    ) -> u64 {
        if let Some(Ok(nanos)) = self.earlier(false, || asked.into(), same) {
            return nanos;
        }
        let nanos = read();
        self.record(taped(nanos));
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
