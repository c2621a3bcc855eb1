//! The fake GPU's clock (CLOCK_MONOTONIC, in nanoseconds), which its kernel log uses.

use nix::time::{clock_gettime, ClockId};

pub const MS: u64 = 1_000_000;

pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

pub fn sleep_until(t: u64) {
    let now = now_ns();
    if t > now {
        std::thread::sleep(std::time::Duration::from_nanos(t - now));
    }
}
