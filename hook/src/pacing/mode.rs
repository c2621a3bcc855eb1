//! Each lane's current lease's mode as the daemon granted it (alone or beside others, extended,
//! tight beside an interactive client), this process's client and MPS, and the queue budget they
//! give.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

use crate::lanes::{Lane, PerLane, MAX};

/// While the queue is empty, at most one marker per this many nanoseconds of launching.
pub(super) const CHECK_EVERY_NS: u64 = 100_000;
/// The same on a relaxed lease ([`relaxed`]).
const RELAXED_CHECK_EVERY_NS: u64 = 400_000;
/// Queue budget in GPU nanoseconds (daemon.queue_ahead): what may be queued past a lease's end.
pub(super) static BUDGET_NS: AtomicU64 = AtomicU64::new(2_000_000);
/// The lease runs beside others (the daemon's `GRANT_SHARED`): marker completions do not teach
/// the GPU time per launch. The driver time-slices the GPU between the processes then, and a
/// marker also waits for the others' work: learnt there, the GPU time per launch would be far too
/// long, and a launch-bound process held back at every launch ran several times slower than under
/// plain time-slicing (and launch-bound processes waiting for their own markers there fell far
/// behind the others). Over its allowance, a launch waits only once the work queued passes four
/// budgets by the time per launch learnt alone (kernels known to be long), or the markers fill
/// the ring: so the queue stays bounded, and the end of the lease hands the GPU over.
pub(super) static SHARED: PerLane<AtomicBool> = PerLane([const { AtomicBool::new(false) }; MAX]);
/// An interactive client is active or was lately, or a client owed burst credit may come back
/// and end this lease (the daemon's `GRANT_TIGHT`): the queue is held to a quarter of the budget,
/// beside others too, so that that client's next request waits little behind this process's
/// work.
pub(super) static TIGHT: PerLane<AtomicBool> = PerLane([const { AtomicBool::new(false) }; MAX]);
/// This process's client is interactive: its leases are never relaxed.
static INTERACTIVE_CLIENT: AtomicBool = AtomicBool::new(false);
/// This process is a client of the daemon's MPS server (as the daemon said when the process
/// first attached, before its CUDA context was made): its kernels run beside other processes'.
static UNDER_MPS: AtomicBool = AtomicBool::new(false);
/// The current lease was extended (the daemon extends a lease beside others only while every
/// process weighs the same).
static EXTENDED: PerLane<AtomicBool> = PerLane([const { AtomicBool::new(false) }; MAX]);

/// Whether the lease of `lane` just granted (or extended) runs beside others.
pub fn set_shared(lane: Lane, shared: bool) {
    SHARED[lane].store(shared, Relaxed);
}

/// Whether the current lease of `lane` runs beside others.
#[cfg(test)]
pub fn shared(lane: Lane) -> bool {
    SHARED[lane].load(Relaxed)
}

/// Whether the current lease is *relaxed*: a batch process's, extended beside others, not
/// tight. The daemon extends leases beside others only while every process weighs the same: the
/// driver time-slices the GPU between them as it would without gpushare, their demands decide
/// nothing, and what the hook does on their launch paths and lease threads is what they pay for
/// it. So their queues are checked less often, their lease threads sample less often and record
/// no markers of their own, and only their launches are timed
/// ([`kernel_timer`](crate::kernel_timer)). Processes of unequal weights that overlap (light
/// ones) ask again at each lease's end, with the busy time their samples measured; near an
/// interactive client nothing is relaxed.
///
/// Under MPS every extended lease is relaxed: the kernels of the processes holding leases run
/// together there, nobody waits for an extended lease, and the daemon decides nothing by
/// demands. With a lease thread that sampled every quarter millisecond, recording a marker at
/// most of its samples, four launch-bound small-MLP loops ran at 0.91-0.93 of plain MPS's rate
/// in three rounds on an H200; relaxed, 0.94-0.98, side by side.
pub fn relaxed(lane: Lane) -> bool {
    (SHARED[lane].load(Relaxed) || UNDER_MPS.load(Relaxed))
        && EXTENDED[lane].load(Relaxed)
        && !TIGHT[lane].load(Relaxed)
        && !INTERACTIVE_CLIENT.load(Relaxed)
}

/// Whether this process is a client of the daemon's MPS server.
pub fn set_under_mps(on: bool) {
    UNDER_MPS.store(on, Relaxed);
}

/// Whether the lease of `lane` just granted was an extension.
pub fn set_extended(lane: Lane, extended: bool) {
    EXTENDED[lane].store(extended, Relaxed);
}

/// How long between two checks while the queue of `lane` is empty.
pub(super) fn check_every(lane: Lane) -> u64 {
    if relaxed(lane) {
        RELAXED_CHECK_EVERY_NS
    } else {
        CHECK_EVERY_NS
    }
}

/// Whether the lease of `lane` just granted (or extended) keeps a short queue for an
/// interactive client.
pub fn set_tight(lane: Lane, tight: bool) {
    TIGHT[lane].store(tight, Relaxed);
}

/// The queue budget of the current lease beside others, without the rest of a lease of its
/// own: a quarter of `budget` on a tight one.
pub(super) fn lease_budget(budget: u64, tight: bool) -> u64 {
    proto::protocol::queue_budget(budget, tight, true, 0)
}

/// How much GPU time may be queued with `left_ns` of the lease left. On a lease of its own (not
/// shared, not tight) the work queued has to be done by the lease's end plus `budget`, so early
/// in a lease the queue may hold the rest of the lease as well: a training loop whose host
/// thread runs ahead of the GPU in some phases of a step (launching large kernels) and behind it
/// in others (launching many small ones, or doing host work) keeps the GPU fed through the slow
/// phases, as without gpushare. Held to `budget` all along, a transformer training loop on an
/// H100 ran at 0.69-0.98 of its rate without the hook alone, and a pair of them (requests 0.75 /
/// 0.25) made 0.90 of one loop's rate where time-slicing made 1.15; with 20 ms queued, alone
/// 1.11 and the pair 1.15.
/// Beside others (`shared`) the driver time-slices the GPU and the queue is held to `budget`;
/// on a tight lease (an interactive client near) to a quarter of it.
/// The rule is the protocol's ([`proto::protocol::queue_budget`]), which the daemon's
/// simulation follows too.
pub(super) fn queue_budget(budget: u64, tight: bool, shared: bool, left_ns: u64) -> u64 {
    proto::protocol::queue_budget(budget, tight, shared, left_ns)
}

/// The queue budget of the current lease of `lane` with `left_ns` of it left
/// ([`queue_budget`]).
pub(super) fn current_budget(lane: Lane, left_ns: u64) -> u64 {
    queue_budget(
        BUDGET_NS.load(Relaxed),
        TIGHT[lane].load(Relaxed),
        SHARED[lane].load(Relaxed),
        left_ns,
    )
}

pub fn configure(budget_ns: u64, interactive: bool) {
    BUDGET_NS.store(budget_ns.max(1), Relaxed);
    INTERACTIVE_CLIENT.store(interactive, Relaxed);
}
/// Whether launches timed on their own lower the time per launch: on a lease beside others,
/// where markers teach nothing, unless it is tight. Not only on relaxed (extended) ones: a
/// launch-bound job whose first launch was timed beside a 13 ms kernel job took 17.5 ms per
/// launch, was never extended (a process further behind always waited), and waited at every
/// launch for the others' turns (in the lab mix on an H100 it ran at 0.007 of its time-sliced
/// rate).
pub(super) fn lowered_by_timing(lane: Lane) -> bool {
    SHARED[lane].load(Relaxed) && !TIGHT[lane].load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;

    #[test]
    fn a_lease_is_relaxed_only_once_extended_beside_others_and_not_tight() {
        let _globals = stats::TEST_GLOBALS.lock();
        let l = Lane::of(3);
        let lease = |shared, extended, tight, interactive| {
            set_shared(l, shared);
            set_extended(l, extended);
            set_tight(l, tight);
            INTERACTIVE_CLIENT.store(interactive, Relaxed);
            relaxed(l)
        };
        assert!(lease(true, true, false, false));
        assert!(!relaxed(Lane::of(4)), "another lane's lease is its own");
        assert!(
            !lease(true, false, false, false),
            "granted beside others, not extended"
        );
        assert!(!lease(false, true, false, false), "alone");
        assert!(!lease(true, true, true, false), "tight");
        assert!(!lease(true, true, false, true), "an interactive client's");
        set_under_mps(true);
        assert!(lease(false, true, false, false), "extended under MPS");
        assert!(
            !lease(false, false, false, false),
            "under MPS, not extended"
        );
        assert!(!lease(false, true, true, false), "under MPS, tight");
        set_under_mps(false);
        lease(false, false, false, false);
    }
}
