//! WASI's clocks and randomness, answered by the host (and so taped).

use std::convert::Infallible;
use std::time::Duration;

use hearth_host::HostCtx;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

pub(crate) struct WallClock(pub HostCtx);

impl HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.wall_clock_nanos())
    }
}

pub(crate) struct MonotonicClock(pub HostCtx);

impl HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.monotonic_nanos()
    }
}

pub(crate) struct Random(pub HostCtx);

impl rand::TryRng for Random {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0u8; 4];
        self.0.fill_random(&mut b);
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0u8; 8];
        self.0.fill_random(&mut b);
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.0.fill_random(dst);
        Ok(())
    }
}
