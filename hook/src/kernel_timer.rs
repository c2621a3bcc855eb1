//! The GPU time of single launches, timed by a pair of timing events around one of them.
//!
//! Beside other processes a marker's completion also waits for their turns on the GPU, so the
//! pacer learns nothing from markers on a shared lease. What it learnt alone can be far off (a
//! process's first launches load modules and set up libraries; a lease alone may be a short
//! probe), and a launch-bound process taken for one with long kernels checks its queue at every
//! launch and is held back at a few launches queued: it falls far behind the others. A pair of
//! timing events recorded right before and right after one launch on the same stream measures
//! that launch's time on the GPU, without what was queued before it; the pacer uses it to lower
//! an estimate the pair shows to be too long, and (pairs begun behind the process's own queue)
//! to raise one far too short, whose queue of long kernels would run on through the others'
//! turns.

use std::sync::atomic::{AtomicBool, Ordering::*};

use crate::clock::now_ns;
use crate::cuda::*;
use crate::driver::{helper, Helper};
use crate::fork_safe::ForkSafe;
use crate::lanes::{Lane, PerLane};

/// Least time between two timed launches.
pub const TIME_EVERY_NS: u64 = 1_000_000;
/// A launch call that took longer than this on the host (the driver loading the kernel's module
/// on its first launch takes milliseconds; a launch, a few microseconds) and more than half the
/// time measured is not timed: the start event may have completed on an idle stream long before
/// the kernel was queued. The first estimate of a training loop of 60 us kernels on an H100 was
/// 3.3-8.3 ms that way, and the loop, taken for one of long kernels, waited at every launch
/// beside the others' work (its rate fell to a twelfth).
const SLOW_LAUNCH_NS: u64 = 50_000;

/// A start was recorded before the launch under way: record the end after it (per lane).
static END_DUE: PerLane<AtomicBool> =
    PerLane([const { AtomicBool::new(false) }; crate::lanes::MAX]);

struct Timer {
    /// The pair of events (timing on), created in the context of the first timed launch.
    events: Option<(CUevent, CUevent)>,
    /// The stream of the launch being timed.
    stream: CUstream,
    /// The end was recorded: the pair is in flight until it completes.
    in_flight: bool,
    /// When the last start was recorded.
    last: u64,
    /// How long the host took from recording the start to recording the end.
    host_ns: u64,
    /// The launch timed was drawn by count, and its lease ran beside others when it started.
    drawn: bool,
    shared: bool,
    /// The start was recorded behind this process's own work still pending.
    behind: bool,
}

/// A launch's GPU time, and how its timing began.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub ns: u64,
    /// Drawn by count ([`before_drawn_launch`]), not spaced in time for the pacer.
    pub drawn: bool,
    /// Its lease ran beside others when the timing began.
    pub shared: bool,
    /// Its start was recorded behind this process's own work still pending on the GPU: the
    /// launch followed right behind it in the queue, and the pair spans others' work only where
    /// the driver switched to another process between the two (see [`before_launch`]).
    pub behind: bool,
}

// SAFETY: events and streams are plain driver handles, usable from any thread of the process.
unsafe impl Send for Timer {}

const IDLE: Timer = Timer {
    events: None,
    stream: std::ptr::null_mut(),
    in_flight: false,
    last: 0,
    host_ns: 0,
    drawn: false,
    shared: false,
    behind: false,
};

static TIMER: PerLane<ForkSafe<Timer>> =
    PerLane([const { ForkSafe::new(IDLE) }; crate::lanes::MAX]);

type Create = unsafe extern "C" fn(*mut CUevent, u32) -> CUresult;
type Record = unsafe extern "C" fn(CUevent, CUstream) -> CUresult;
type OnEvent = unsafe extern "C" fn(CUevent) -> CUresult;
type Elapsed = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult;

fn record_fn() -> Option<Record> {
    // SAFETY: the signature of cuEventRecord.
    unsafe { helper::<Record>(Helper::cuEventRecord) }
}

/// Before a launch on `stream` in `lane`: starts timing it, unless a pair is in flight or the
/// last one started less than [`TIME_EVERY_NS`] ago. `behind`: this process's own work is
/// pending on the GPU. A start recorded on an idle queue is done at once, and the launch that
/// follows it microseconds later may wait there for another process's turn: the pair then spans
/// that turn. Behind the process's own work, the launch is queued right after the start before
/// either runs.
pub fn before_launch(lane: Lane, stream: CUstream, behind: bool) {
    start(lane, stream, false, false, behind);
}

/// Before a launch on `stream` in `lane` drawn by its count (for the pacing's GPU time), on a
/// lease beside others if `shared`: starts timing it unless a pair is in flight or another
/// thread's launch is being timed, however soon after the last.
pub fn before_drawn_launch(lane: Lane, stream: CUstream, shared: bool) {
    start(lane, stream, true, shared, false);
}

fn start(lane: Lane, stream: CUstream, drawn: bool, shared: bool, behind: bool) {
    let now = now_ns();
    let mut t = TIMER[lane].lock();
    let recent = now.saturating_sub(t.last) < TIME_EVERY_NS;
    if t.in_flight || (recent && (!drawn || END_DUE[lane].load(Relaxed))) {
        return;
    }
    // An end still due a millisecond after its start never came (the launch did not follow on
    // that stream): that timing is given up.
    END_DUE[lane].store(false, Relaxed);
    let Some(record) = record_fn() else {
        return;
    };
    if t.events.is_none() {
        t.events = create_pair();
    }
    let Some((start, _)) = t.events else {
        return;
    };
    t.last = now;
    // SAFETY: our event, the caller's stream.
    if unsafe { record(start, stream) } != CUDA_SUCCESS {
        // Another context than the events': made anew in the current one next time.
        destroy(t.events.take());
        return;
    }
    t.stream = stream;
    t.drawn = drawn;
    t.shared = shared;
    t.behind = behind;
    END_DUE[lane].store(true, Relaxed);
    crate::stats::TIMED.add(1);
}

/// After a launch on `stream` in `lane`: ends the timing started before it.
#[inline(always)]
pub fn after_launch(lane: Lane, stream: CUstream) {
    if END_DUE[lane].load(Relaxed) {
        end(lane, stream);
    }
}

#[cold]
fn end(lane: Lane, stream: CUstream) {
    let mut t = TIMER[lane].lock();
    if !END_DUE[lane].load(Relaxed) || t.stream != stream {
        return; // another thread's launch on another stream
    }
    END_DUE[lane].store(false, Relaxed);
    let (Some(record), Some((_, end))) = (record_fn(), t.events) else {
        return;
    };
    t.host_ns = now_ns().saturating_sub(t.last);
    // SAFETY: our event, the stream the start went to.
    t.in_flight = unsafe { record(end, stream) } == CUDA_SUCCESS;
}

/// The GPU time of the timed launch, once its pair has completed (then only once); `None` too
/// for a launch slow on the host ([`SLOW_LAUNCH_NS`]).
pub fn take(lane: Lane) -> Option<Timed> {
    let mut t = TIMER[lane].lock();
    if !t.in_flight {
        return None;
    }
    let (start, end) = t.events?;
    // SAFETY: the driver's signatures of these functions.
    let (query, elapsed) = unsafe {
        (
            helper::<OnEvent>(Helper::cuEventQuery)?,
            helper::<Elapsed>(Helper::cuEventElapsedTime_v2)
                .or_else(|| helper::<Elapsed>(Helper::cuEventElapsedTime))?,
        )
    };
    // SAFETY: our event.
    if unsafe { query(end) } == CUDA_NOT_READY {
        return None;
    }
    t.in_flight = false;
    let mut ms = 0f32;
    // SAFETY: a valid out-pointer and our two events, both recorded and complete.
    if unsafe { elapsed(&mut ms, start, end) } != CUDA_SUCCESS || !ms.is_finite() || ms < 0.0 {
        return None;
    }
    conclusive((ms as f64 * 1e6) as u64, t.host_ns).map(|ns| Timed {
        ns,
        drawn: t.drawn,
        shared: t.shared,
        behind: t.behind,
    })
}

/// A timing of `gpu_ns` whose launch took `host_ns` on the host, unless the launch was slow.
fn conclusive(gpu_ns: u64, host_ns: u64) -> Option<u64> {
    if host_ns > SLOW_LAUNCH_NS && host_ns.saturating_mul(2) > gpu_ns {
        crate::stats::SLOW_LAUNCHES.add(1);
        return None;
    }
    Some(gpu_ns)
}

fn create_pair() -> Option<(CUevent, CUevent)> {
    // SAFETY: the signature of cuEventCreate.
    let create = unsafe { helper::<Create>(Helper::cuEventCreate) }?;
    let mut a: CUevent = std::ptr::null_mut();
    let mut b: CUevent = std::ptr::null_mut();
    // SAFETY: valid out-pointers; timing on (flags 0).
    unsafe {
        if create(&mut a, 0) != CUDA_SUCCESS {
            return None;
        }
        if create(&mut b, 0) != CUDA_SUCCESS {
            destroy(Some((a, std::ptr::null_mut())));
            return None;
        }
    }
    Some((a, b))
}

fn destroy(pair: Option<(CUevent, CUevent)>) {
    // SAFETY: the signature of cuEventDestroy_v2.
    let Some(d) = (unsafe { helper::<OnEvent>(Helper::cuEventDestroy_v2) }) else {
        return;
    };
    if let Some((a, b)) = pair {
        for e in [a, b].into_iter().filter(|e| !e.is_null()) {
            // SAFETY: our event.
            unsafe { d(e) };
        }
    }
}

pub fn after_fork_in_child() {
    for lane in Lane::all() {
        END_DUE[lane].store(false, Relaxed);
        // SAFETY: called from the fork child handler; the parent's events are not the child's.
        unsafe { TIMER[lane].reset(IDLE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_slow_on_the_host_is_not_timed() {
        assert_eq!(conclusive(60_000, 5_000), Some(60_000));
        assert_eq!(conclusive(3_060_000, 3_000_000), None, "a module loaded");
        assert_eq!(
            conclusive(20_000_000, 3_000_000),
            Some(20_000_000),
            "longer than the launch call by far"
        );
        assert_eq!(conclusive(5_000, 8_000), Some(5_000), "a launch as usual");
    }
}
