//! The clocks of the gate.
//!
//! [`now_ns`] is `CLOCK_MONOTONIC` (vDSO, about 20 ns). The per-launch check uses [`fast_now`]
//! instead: the TSC (about 7 ns) when the kernel itself trusts it as its clocksource (then it is
//! invariant and synchronized across CPUs), else `CLOCK_MONOTONIC`. Deadlines for the fast check
//! are made with [`fast_deadline`] in the same unit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

/// Nanoseconds of `CLOCK_MONOTONIC` (a vDSO call, no system call).
#[inline(always)]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

static USE_TSC: AtomicBool = AtomicBool::new(false);
/// TSC ticks per nanosecond, times 2^32.
static TICKS_PER_NS_Q32: AtomicU64 = AtomicU64::new(1 << 32);

/// The launch-path clock: TSC ticks or monotonic nanoseconds (see the module docs).
#[inline(always)]
pub fn fast_now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if USE_TSC.load(Relaxed) {
        // SAFETY: rdtsc exists on every x86_64 CPU.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    now_ns()
}

/// The [`fast_now`] value `lease_ns` from now.
pub fn fast_deadline(lease_ns: u64) -> u64 {
    fast_now().saturating_add(fast_ticks(lease_ns))
}

/// `ns` in [`fast_now`]'s unit.
#[inline(always)]
pub fn fast_ticks(ns: u64) -> u64 {
    if USE_TSC.load(Relaxed) {
        ((ns as u128 * TICKS_PER_NS_Q32.load(Relaxed) as u128) >> 32) as u64
    } else {
        ns
    }
}

/// `ticks` of [`fast_now`] in nanoseconds.
pub fn ns_of_ticks(ticks: u64) -> u64 {
    if USE_TSC.load(Relaxed) {
        let per_ns = TICKS_PER_NS_Q32.load(Relaxed).max(1);
        (((ticks as u128) << 32) / per_ns as u128).min(u64::MAX as u128) as u64
    } else {
        ticks
    }
}

/// Chooses the launch-path clock, once, when the process attaches. `choice` (from
/// `GPUSHARE_CLOCK`, for tests): "tsc" or "monotonic"; otherwise the TSC if the kernel's
/// clocksource is the TSC.
pub fn choose(choice: &str) {
    let tsc = match choice {
        "tsc" => true,
        "monotonic" => false,
        _ => std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc"),
    };
    if cfg!(target_arch = "x86_64") && tsc {
        TICKS_PER_NS_Q32.store(calibrate(), Relaxed);
        USE_TSC.store(true, Release);
    }
}

/// TSC ticks per ns (times 2^32), measured against `CLOCK_MONOTONIC` over 1 ms.
fn calibrate() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc exists on every x86_64 CPU.
        let tsc = || unsafe { core::arch::x86_64::_rdtsc() };
        let (t0, r0) = (now_ns(), tsc());
        std::thread::sleep(std::time::Duration::from_millis(1));
        let (t1, r1) = (now_ns(), tsc());
        ratio_q32(r1.wrapping_sub(r0), t1.saturating_sub(t0))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        1 << 32
    }
}

/// `ticks / ns` in 32.32 fixed point (1.0 when `ns` is 0).
pub fn ratio_q32(ticks: u64, ns: u64) -> u64 {
    if ns == 0 {
        return 1 << 32;
    }
    (((ticks as u128) << 32) / ns as u128).min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_in_fixed_point() {
        assert_eq!(ratio_q32(3_000_000, 1_000_000), 3 << 32);
        assert_eq!(ratio_q32(5, 0), 1 << 32);
        assert_eq!(ratio_q32(1, 2), 1 << 31);
    }

    #[test]
    fn the_tsc_clock_advances_like_the_monotonic_one() {
        choose("tsc");
        let d = fast_deadline(10_000_000);
        let start = now_ns();
        while fast_now() < d {}
        let waited = now_ns() - start;
        assert!((9_000_000..30_000_000).contains(&waited), "{waited}");
        let back = ns_of_ticks(fast_ticks(10_000_000));
        assert!((9_990_000..10_010_000).contains(&back), "{back}");
    }
}
