//! The marker ring of a lease holder's queue, and the GPU time per launch learnt from it.

use std::sync::atomic::Ordering::*;

use super::activity::Activity;
use super::mode::{current_budget, lease_budget, BUDGET_NS, CHECK_EVERY_NS, SHARED, TIGHT};
use crate::clock::now_ns;
use crate::cuda::*;
use crate::driver::{helper, Helper};
use crate::lanes::Lane;
use crate::stats;

/// Most markers in flight: twice the [`SHARED_MOST_MARKERS`] that hold a queue back beside
/// others, with room for the lease thread's own.
const RING: usize = 64;
/// Beside others, markers pending past which a launch over its allowance waits (kernels not
/// known to be long).
const SHARED_MOST_MARKERS: usize = 31;
/// The same on a relaxed lease ([`relaxed`](super::relaxed)), whose lease thread records no
/// markers: the ring less one. Its checks, and so its markers, come at most every 400 us of
/// launching. Held back at 31 markers (12 ms of launching), sixteen launch-bound jobs of
/// sixteen users beside each other on an H100 waited on the host where the driver would have
/// queued their launches (116-271 waits a round against 16-22 at 63), and in some rounds one of
/// them ended up to a fifth later than the others: 0.93x time-slicing's total throughput,
/// against 1.00x at 63, side by side.
const RELAXED_MOST_MARKERS: usize = RING - 1;
/// Most launches queued, however short the kernels.
const MOST_QUEUED: u64 = 256;
/// Beside others, budgets of work (by the time per launch learnt) past which a queue of kernels
/// known to be long is held back ([`Pacer::short_beside_others`]).
const SHARED_LONG_BUDGETS: u64 = 4;
/// Markers per queue budget while backlogged: how finely the queue is seen to drain.
const MARKERS_PER_BUDGET: u64 = 8;
/// Most launches from one marker to the next while backlogged, and from one check to the next
/// while the queue is empty.
const MOST_SPACING: u64 = 32;
/// While [`Pacer::stalled`], a launch over its allowance waits at most this long, or the GPU time per
/// launch learnt if longer. Held up by something else (work waiting on another process, or behind
/// another's long queue), a wait must end; but a process that then launched freely until one of
/// its markers completed queued seconds of long kernels at once (with the fake driver: 13 ms
/// kernels, never synchronizing, beside four other processes), and the others' markers then
/// waited behind that queue until they stalled too. Waiting a launch's time per launch, the
/// queue grows by about what the GPU runs meanwhile.
pub(super) const STALLED_WAIT_NS: u64 = 1_000_000;
/// Beside others a wait for the queue lasts at least this many times the GPU time per launch.
const SHARED_WAIT_LAUNCHES: u64 = 8;

#[derive(Clone, Copy)]
pub(super) struct Marker {
    pub(super) event: CUevent,
    pub(super) recorded: u64,
    /// When a check last saw it pending (0: never): it completed some time between then and
    /// when a check saw it done.
    pub(super) seen_pending_at: u64,
    /// The launches of this process when it was recorded ([`LAUNCHES`](super::LAUNCHES)).
    pub(super) launches: u64,
}

/// A marker whose completion time is known to within `slop`: where the GPU time per launch is
/// measured from.
#[derive(Clone, Copy)]
struct Anchor {
    done_at: u64,
    launches: u64,
    slop: u64,
}

/// A time per launch learnt: when the marker that taught it completed, and the time per launch
/// before.
#[derive(Clone, Copy)]
struct Learnt {
    done_at: u64,
    before: u64,
}

/// How many of the latest learnt times per launch can be taken back ([`joined`](super::joined)).
const LEARNT_KEPT: usize = 16;
/// Times per launch learnt from markers (and kept) before a lease of its own may queue its rest
/// ([`Pacer::room`]).
const SURE_AFTER: usize = 4;
/// Launches timed behind the process's own queue beside others that raise the time per launch
/// when the shorter of them is [`RAISED_PAST`] times it or more ([`Pacer::raise_from`]).
const RAISE_AFTER: usize = 2;
const RAISED_PAST: u64 = 2;

pub(super) struct Pacer {
    /// The lane whose queue this is (set by each lock, [`pacer`](super::pacer)).
    pub(super) lane: Lane,
    /// A wait for this queue ran into its limit: until a marker completes, waits on a lease of
    /// its own are short ([`Pacer::wait_left`]).
    pub(super) stalled: bool,
    pub(super) ring: [Option<Marker>; RING],
    head: usize,
    pub(super) len: usize,
    /// Events to reuse.
    pub(super) spare: Vec<CUevent>,
    /// GPU nanoseconds per launch (0: not known yet).
    pub(super) per_launch_ns: u64,
    /// The latest times per launch learnt from markers, a ring of `learnt_len`, the next one
    /// at `learnt_next`.
    learnt: [Learnt; LEARNT_KEPT],
    learnt_len: usize,
    learnt_next: usize,
    /// The last completion the time per launch can be measured from, while the GPU has run this
    /// process's work without a break since ([`Pacer::pop`]).
    anchor: Option<Anchor>,
    /// When the marker popped last was last seen pending (0: never).
    last_seen_pending: u64,
    /// When the marker popped last was seen done, and the launches when it was recorded.
    last_done: Option<(u64, u64)>,
    /// A time before the marker popped last completed (when it was last seen pending, or
    /// recorded).
    last_before_done: u64,
    /// The latest bounds on the mean GPU time of the launches between two markers: the time from
    /// before the first completed to when the second was seen done, over the launches between
    /// them (they ran after the first and before the second), a ring of [`RAISE_AFTER`] (0: none).
    bounds: [u64; RAISE_AFTER],
    bounds_next: usize,
    /// When the newest marker was recorded.
    pub(super) last_mark: u64,
    /// When work of this process was last seen pending (at a check or a sample).
    pub(super) last_pending: u64,
    /// The last check found markers pending: launches since then pass with a marker after
    /// every few ([`passes`](super::passes)).
    pub(super) backlogged: bool,
    /// The launches counted at the last check ([`LAUNCHES`](super::LAUNCHES)).
    pub(super) checked_launches: u64,
    pub(super) samples: u32,
    pub(super) busy_samples: u32,
    /// The lease's time in GPU phases, counted at the samples.
    pub(super) activity: Activity,
    /// The latest launches timed behind this process's own queue beside others, a ring of
    /// [`RAISE_AFTER`] (0: none yet).
    timed_behind: [u64; RAISE_AFTER],
    timed_behind_next: usize,
}

// SAFETY: events are plain driver handles, usable from any thread of the process.
unsafe impl Send for Pacer {}

impl Pacer {
    pub(super) const fn new() -> Pacer {
        Pacer {
            lane: Lane::FIRST,
            stalled: false,
            ring: [None; RING],
            head: 0,
            len: 0,
            spare: Vec::new(),
            per_launch_ns: 0,
            learnt: [Learnt {
                done_at: 0,
                before: 0,
            }; LEARNT_KEPT],
            learnt_len: 0,
            learnt_next: 0,
            anchor: None,
            last_seen_pending: 0,
            last_done: None,
            last_before_done: 0,
            bounds: [0; RAISE_AFTER],
            bounds_next: 0,
            last_mark: 0,
            last_pending: 0,
            backlogged: false,
            checked_launches: 0,
            samples: 0,
            busy_samples: 0,
            activity: Activity::new(),
            timed_behind: [0; RAISE_AFTER],
            timed_behind_next: 0,
        }
    }

    /// Whether the ring holds as many markers as it can.
    pub(super) fn full(&self) -> bool {
        self.len >= RING
    }

    /// Adds a marker recorded at `now`, after `launches` launches of this process.
    pub(super) fn push(&mut self, event: CUevent, now: u64, launches: u64) {
        let slot = (self.head + self.len) % RING;
        self.ring[slot] = Some(Marker {
            event,
            recorded: now,
            seen_pending_at: 0,
            launches,
        });
        self.len += 1;
    }

    pub(super) fn front(&mut self) -> Option<&mut Marker> {
        if self.len == 0 {
            return None;
        }
        self.ring[self.head].as_mut()
    }

    pub(super) fn newest(&self) -> Option<Marker> {
        if self.len == 0 {
            return None;
        }
        self.ring[(self.head + self.len - 1) % RING]
    }

    pub(super) fn pop(&mut self, done_at: u64) {
        let Some(m) = self.ring[self.head].take() else {
            return;
        };
        self.head = (self.head + 1) % RING;
        self.len -= 1;
        self.stalled = false;
        self.time_launches(&m, done_at);
        if let Some((_, before)) = self.last_done {
            let took = done_at.saturating_sub(self.last_before_done);
            if let Some(bound) = took.checked_div(m.launches.saturating_sub(before)) {
                self.bounds[self.bounds_next] = bound.max(1);
                self.bounds_next = (self.bounds_next + 1) % RAISE_AFTER;
            }
        }
        self.last_seen_pending = m.seen_pending_at;
        self.last_before_done = m.seen_pending_at.max(m.recorded);
        self.last_done = Some((done_at, m.launches));
        self.spare.push(m.event);
    }

    /// Learns the GPU time per launch from marker `m`, seen done at `done_at`: the time since the
    /// anchor's completion over the launches between the two, while the GPU ran this process's
    /// work all along (each marker was recorded while the one ahead of it was still seen
    /// pending). An average over every launch in between, whatever their sizes: learnt from
    /// single launches seen done in time, it was the time of the long kernels alone (short ones
    /// are rarely seen done in time), several times the average of a training loop's mix. The two
    /// completions' uncertainties together must be at most half the time between them; until
    /// then the anchor stays, and the span grows. Beside others nothing is learnt: the markers
    /// wait for the others' turns too. A process held to one launch at a time has no such
    /// stretches, and learns from each launch ([`Pacer::time_one_launch`]).
    fn time_launches(&mut self, m: &Marker, done_at: u64) {
        let slop = done_at.saturating_sub(if m.seen_pending_at != 0 {
            m.seen_pending_at
        } else {
            m.recorded
        });
        let unbroken = self.last_seen_pending != 0 && m.recorded <= self.last_seen_pending;
        let here = Anchor {
            done_at,
            launches: m.launches,
            slop,
        };
        let shared = SHARED[self.lane].load(Relaxed);
        let a = match self.anchor {
            Some(a) if unbroken && !shared => a,
            _ => {
                self.anchor = Some(here);
                if !shared {
                    self.time_one_launch(m, done_at, slop);
                }
                return;
            }
        };
        let span = done_at.saturating_sub(a.done_at);
        let launches = m.launches.saturating_sub(a.launches);
        if launches == 0 || span == 0 {
            return;
        }
        if (a.slop + slop).saturating_mul(2) <= span {
            self.learn_from(done_at, span / launches);
            self.anchor = Some(here);
        } else {
            stats::UNSURE.add(1);
        }
    }

    /// Learns from marker `m` the GPU time of the one launch before it, while the time per launch
    /// learnt passes the queue budget: the process is then held to one launch at a time, each
    /// launched once the one before was seen done and waited for to the poll, so the time from
    /// the marker's record to its completion is that launch's alone, whatever its size. A
    /// process never queues two launches then, and learns nothing from stretches of unbroken
    /// work: one whose kernels became shorter, or whose time per launch was taken far too long
    /// (2.9 ms for a training loop of 60 us kernels on an H100, from a first launch timed with
    /// the driver's module loading in it), was held to one launch at a time for good, and ran at
    /// half its rate in its leases.
    fn time_one_launch(&mut self, m: &Marker, done_at: u64, slop: u64) {
        let budget = lease_budget(BUDGET_NS.load(Relaxed), TIGHT[self.lane].load(Relaxed));
        let Some((before_done_at, before_launches)) = self.last_done else {
            return;
        };
        let took = done_at.saturating_sub(m.recorded);
        let one_launch_alone = m.launches == before_launches + 1 && before_done_at <= m.recorded;
        // Seen done sooner than the time per launch learnt, a launch took at most that long,
        // however late it was seen: a framework's loop that launches a step as one graph of
        // milliseconds and then a few short kernels (JAX) was held to one launch at a time by
        // the graphs' time, and its short launches, seen done at the first look, taught nothing.
        let sooner = took < self.per_launch_ns;
        if self.per_launch_ns > budget
            && one_launch_alone
            && (sooner || slop.saturating_mul(2) <= took)
        {
            self.learn_from(done_at, took);
        }
    }

    /// Raises the time per launch beside others to what launches timed on their own show, a
    /// launch that took `ns` being the latest; returns whether it did. Beside others markers
    /// teach nothing, and launches timed there only lowered what was learnt: a time per launch
    /// far too short stayed so. On an H100 a job of 56 ms matmuls that never synchronized,
    /// beside five other clients, ended two of five runs with 288-291 us (about its operands'
    /// `torch.randn`), queued seconds of matmuls that the driver ran in the others' turns, and
    /// got 0.43 of the GPU, 0.10-0.14 more than its client was charged. A pair may also span
    /// another process's turn, where the driver switched between the start and the launch's
    /// end, and so read long. So the shorter of the last [`RAISE_AFTER`] timings, each begun
    /// behind the process's own queue (the launch queued right after the start), is taken, only
    /// when it is [`RAISED_PAST`] times the time per launch or more and longer than the work a
    /// queue of long kernels may hold beside others ([`SHARED_LONG_BUDGETS`] budgets), and only
    /// up to what the markers allow: the launches between two of them took at most the time
    /// between the two completions, the others' turns included (`bounds`). With the fake
    /// driver, whose GPU runs kernels in the order they were launched, a process of 50 us
    /// kernels beside one of 2 ms kernels had most of its launches timed behind one of the
    /// other's; raised to 2 ms again and again, it made about half the launches it makes alone.
    pub(super) fn raise_from(&mut self, ns: u64) -> bool {
        self.timed_behind[self.timed_behind_next] = ns.max(1);
        self.timed_behind_next = (self.timed_behind_next + 1) % RAISE_AFTER;
        let shortest = self.timed_behind.iter().copied().min().unwrap_or(0);
        let bound = self.bounds.iter().copied().max().unwrap_or(0);
        let long = lease_budget(BUDGET_NS.load(Relaxed), false).saturating_mul(SHARED_LONG_BUDGETS);
        if shortest == 0
            || shortest < self.per_launch_ns.saturating_mul(RAISED_PAST)
            || shortest <= long
            || shortest > bound
        {
            return false;
        }
        self.timed_behind = [0; RAISE_AFTER];
        self.set_per_launch(shortest);
        true
    }

    /// Sets the GPU time per launch, and the counters that show it.
    pub(super) fn set_per_launch(&mut self, ns: u64) {
        self.per_launch_ns = ns;
        stats::PER_LAUNCH_NS.set(ns);
        stats::PER_LAUNCH_MAX_NS.set_max(ns);
    }

    /// Learns from a marker that completed at `done_at` after `took` of GPU time.
    fn learn_from(&mut self, done_at: u64, took: u64) {
        self.learnt[self.learnt_next] = Learnt {
            done_at,
            before: self.per_launch_ns,
        };
        self.learnt_next = (self.learnt_next + 1) % LEARNT_KEPT;
        self.learnt_len = (self.learnt_len + 1).min(LEARNT_KEPT);
        self.set_per_launch(learn(self.per_launch_ns, took));
    }

    /// Takes back what markers completed after `since` taught: they also waited for another
    /// process's work. Back to the time per launch before the first of them (the oldest kept, if
    /// more were learnt since).
    pub(super) fn forget_learnt_since(&mut self, since: u64) {
        let mut before = None;
        while self.learnt_len > 0 {
            let latest = (self.learnt_next + LEARNT_KEPT - 1) % LEARNT_KEPT;
            if self.learnt[latest].done_at <= since {
                break;
            }
            before = Some(self.learnt[latest].before);
            self.learnt_next = latest;
            self.learnt_len -= 1;
        }
        if let Some(ns) = before {
            self.set_per_launch(ns);
        }
    }

    /// Pops the markers that completed; returns how many are still pending.
    pub(super) fn collect(&mut self, query: Query) -> usize {
        while let Some(m) = self.front() {
            // SAFETY: a live event of ours.
            if unsafe { query(m.event) } == CUDA_NOT_READY {
                let now = now_ns();
                m.seen_pending_at = now;
                self.last_pending = now;
                break;
            }
            self.pop(now_ns());
        }
        self.len
    }

    /// Whether every launch checks the queue: kernels known to be long, or not known yet (a
    /// burst of them between two time-spaced checks would queue far more than the budget).
    pub(super) fn checks_each_launch(&self) -> bool {
        self.per_launch_ns == 0 || self.per_launch_ns >= CHECK_EVERY_NS
    }

    /// How many launches may be queued (since the newest marker seen done) before a launch
    /// waits.
    fn allowed(&self, budget: u64) -> u64 {
        if self.per_launch_ns == 0 {
            return 2;
        }
        // at least two in flight (no gap between kernels) unless one alone passes the budget
        let least = if self.per_launch_ns > budget { 1 } else { 2 };
        (budget / self.per_launch_ns).clamp(least, MOST_QUEUED)
    }

    /// Launches from one marker to the next while backlogged: about [`MARKERS_PER_BUDGET`] to
    /// the budget. A marker after every launch cost a training loop a record and a query on
    /// each launch (on an H100, a transformer's loop of 60-80 us kernels on average launched 250
    /// times a step), and the ring of markers held the queue of short kernels to 31 launches,
    /// under the budget.
    pub(super) fn spacing(&self, budget: u64) -> u64 {
        (self.allowed(budget) / MARKERS_PER_BUDGET).clamp(1, MOST_SPACING)
    }

    /// The launches counted when the newest marker seen done was recorded (0 before any).
    fn done_launches(&self) -> u64 {
        self.last_done.map_or(0, |(_, at)| at)
    }

    /// How long a launch over its allowance may still wait for the queue, having waited
    /// `waited_ns` of `limit_ns` in this check; beside others if `shared`. Alone, once a wait
    /// ran into its limit, short waits ([`STALLED_WAIT_NS`], or the GPU time per launch) until a
    /// marker completes: the GPU runs about a launch meanwhile. Beside others it runs this
    /// process's work only in its turns, and a marker behind one long kernel waits for every
    /// other process's turn too: short waits there would let a process of long kernels launch
    /// one per time per launch while the GPU ran a fraction of that, its queue growing until
    /// its next synchronize. There each wait lasts the whole limit, and at least
    /// [`SHARED_WAIT_LAUNCHES`] times the GPU time per launch: without progress, a launch
    /// passes once per limit.
    pub(super) fn wait_left(&self, limit_ns: u64, waited_ns: u64, shared: bool) -> u64 {
        if shared {
            let limit = limit_ns.max(self.per_launch_ns.saturating_mul(SHARED_WAIT_LAUNCHES));
            limit.saturating_sub(waited_ns)
        } else if self.stalled {
            STALLED_WAIT_NS.max(self.per_launch_ns)
        } else {
            limit_ns.saturating_sub(waited_ns)
        }
    }

    /// Whether the next launch fits in the queue: fewer launches queued since the newest marker
    /// seen done than the budget allows. The rest of a lease of its own in `budget` counts only
    /// once markers taught the time per launch [`SURE_AFTER`] times ([`Pacer::sure_budget`]).
    pub(super) fn room(&self, launches: u64, budget: u64) -> bool {
        launches.saturating_sub(self.done_launches()) < self.allowed(self.sure_budget(budget))
    }

    /// `budget`, at most the budget beside others (without the rest of a lease of its own)
    /// until markers taught the time per launch [`SURE_AFTER`] times. A time per launch from one
    /// launch timed on its own, or from the few launches of a program's start, may be far off
    /// (a job that draws its operands with a few short kernels, then runs long matmuls), and the
    /// rest of the lease by that time allowed scores of launches at once: with the fake driver,
    /// a process whose first four launches took 0.3 ms queued 69-230 of its 13 ms kernels, one
    /// to three seconds of work, before its markers taught it their length.
    fn sure_budget(&self, budget: u64) -> u64 {
        if self.learnt_len >= SURE_AFTER {
            budget
        } else {
            budget.min(current_budget(self.lane, 0))
        }
    }

    /// Launches since the newest marker was recorded, pending or done (all of them before any).
    pub(super) fn since_newest(&self, launches: u64) -> u64 {
        let newest = self.newest().map_or(self.done_launches(), |m| m.launches);
        launches.saturating_sub(newest)
    }

    /// Launches since the last check.
    pub(super) fn since_check(&self, launches: u64) -> u64 {
        launches.saturating_sub(self.checked_launches)
    }

    /// Whether the queue beside others may still grow past its allowance without a wait: it is
    /// long also for the others' turns, so it is held back only once what it holds by the GPU
    /// time per launch learnt alone passes four budgets (kernels known to be long), or it holds
    /// [`SHARED_MOST_MARKERS`] markers ([`RELAXED_MOST_MARKERS`] on a `relaxed` lease). Kernels
    /// not known yet are not taken for short ones.
    pub(super) fn short_beside_others(&self, budget: u64, relaxed: bool) -> bool {
        let long = self.per_launch_ns >= CHECK_EVERY_NS
            && (self.len as u64).saturating_mul(self.per_launch_ns)
                >= budget.saturating_mul(SHARED_LONG_BUDGETS);
        let most_markers = if relaxed {
            RELAXED_MOST_MARKERS
        } else {
            SHARED_MOST_MARKERS
        };
        !long && self.per_launch_ns != 0 && self.len < most_markers
    }

    /// Whether a marker follows the next launch of a backlogged process ([`Pacer::spacing`] of
    /// the budget its queue is held to, [`Pacer::room`]).
    pub(super) fn mark_due(&self, launches: u64, budget: u64) -> bool {
        self.since_newest(launches) + 1 >= self.spacing(self.sure_budget(budget))
    }
}

/// Moving average of the GPU time per marked launch.
fn learn(old: u64, sample: u64) -> u64 {
    if old == 0 {
        sample.max(1)
    } else {
        ((old * 3 + sample) / 4).max(1)
    }
}

pub(super) type Query = unsafe extern "C" fn(CUevent) -> CUresult;

pub(super) fn query_fn() -> Option<Query> {
    // SAFETY: the signature of cuEventQuery.
    unsafe { helper::<Query>(Helper::cuEventQuery) }
}
/// Half way from `old` down to a launch's time measured on its own
/// ([`kernel_timer`](crate::kernel_timer)), when that is shorter: what was learnt was too long.
pub(super) fn lower(old: u64, timed: u64) -> u64 {
    if timed < old {
        (old + timed) / 2
    } else {
        old
    }
}

#[cfg(test)]
mod tests {
    use super::super::mode::{configure, queue_budget, set_shared, set_tight};
    use super::*;

    #[test]
    fn the_queue_allowance_follows_the_kernel_time() {
        let mut p = Pacer::new();
        assert_eq!(
            p.allowed(2_000_000),
            2,
            "unknown kernel time: two in flight"
        );
        p.per_launch_ns = 50_000;
        assert_eq!(
            p.allowed(2_000_000),
            40,
            "short kernels: the budget's worth"
        );
        assert_eq!(p.spacing(2_000_000), 5, "a marker every five launches");
        p.per_launch_ns = 1_000;
        assert_eq!(p.allowed(2_000_000), MOST_QUEUED, "tiny kernels: bounded");
        assert_eq!(p.spacing(2_000_000), MOST_SPACING);
        p.per_launch_ns = 500_000;
        assert_eq!(p.allowed(2_000_000), 4);
        assert_eq!(p.spacing(2_000_000), 1, "long kernels: a marker after each");
        p.per_launch_ns = 1_600_000;
        assert_eq!(p.allowed(2_000_000), 2);
        p.per_launch_ns = 20_000_000;
        assert_eq!(p.allowed(2_000_000), 1, "long kernels: one at a time");
        assert_eq!(learn(0, 100), 100);
        assert_eq!(learn(100, 500), 200);
    }

    /// A `Joined` takes back what markers completed after the other lease's grant taught, and
    /// only that: a lease that others join every time keeps what it learnt alone.
    #[test]
    fn a_join_takes_back_only_what_was_learnt_after_it() {
        let _counters = stats::TEST_GLOBALS.lock();
        let mut p = Pacer::new();
        p.learn_from(1_000, 1_000_000);
        p.learn_from(2_000, 1_000_000);
        p.forget_learnt_since(2_500);
        assert_eq!(p.per_launch_ns, 1_000_000, "learnt before the join: kept");
        p.learn_from(3_000, 5_000_000);
        p.learn_from(4_000, 5_000_000);
        p.forget_learnt_since(2_500);
        assert_eq!(p.per_launch_ns, 1_000_000, "learnt after it: taken back");
        p.forget_learnt_since(0);
        assert_eq!(p.per_launch_ns, 0, "all learnt after: unknown again");
        let mut seen = vec![];
        for i in 0..(LEARNT_KEPT as u64 + 4) {
            seen.push(p.per_launch_ns);
            p.learn_from(10_000 + i, 1_000_000 + i * 100_000);
        }
        p.forget_learnt_since(0);
        assert_eq!(
            p.per_launch_ns, seen[4],
            "more than are kept: back to before the oldest kept"
        );
        p.learn_from(20_000, 1_000_000);
        p.forget_learnt_since(19_000);
        assert_eq!(p.per_launch_ns, seen[4], "the ring goes on from there");
    }

    /// Markers after each of `kernels` (GPU nanoseconds each, the process running ahead of the GPU
    /// when `ahead`, else launching each only once the one before was seen done), checked every
    /// `poll` nanoseconds, the time per launch `start` before: what the pacer learns as the GPU
    /// time per launch.
    fn learnt_from(kernels: &[u64], poll: u64, ahead: bool, start: u64) -> u64 {
        let mut p = Pacer::new();
        p.per_launch_ns = start;
        let mut gpu = 1_000_000u64;
        let mut seen_done = 0;
        for (i, &k) in kernels.iter().enumerate() {
            let recorded = if ahead {
                1_000_000 + i as u64
            } else {
                gpu.max(seen_done) + 1
            };
            let start = gpu.max(recorded);
            gpu = start + k;
            // the last check before it completed saw it pending, the first after saw it done
            let seen_pending_at = (gpu - 1) / poll * poll;
            let done_at = gpu.div_ceil(poll) * poll;
            p.ring[p.head] = Some(Marker {
                event: std::ptr::null_mut(),
                recorded,
                seen_pending_at: if seen_pending_at >= recorded {
                    seen_pending_at
                } else {
                    0
                },
                launches: i as u64 + 1,
            });
            p.len = 1;
            p.pop(done_at);
            seen_done = done_at;
        }
        p.per_launch_ns
    }

    /// A training loop's mix: a long kernel, then ten short ones. The time per launch learnt is
    /// their average, though the short ones complete between two checks.
    #[test]
    fn the_time_per_launch_is_the_average_of_a_mix_of_kernels() {
        let _globals = stats::TEST_GLOBALS.lock();
        set_shared(Lane::FIRST, false);
        let mix: Vec<u64> = (0..40)
            .flat_map(|_| std::iter::once(1_000_000).chain([10_000; 10]))
            .collect();
        let learnt = learnt_from(&mix, 100_000, true, 0);
        let average = 1_100_000 / 11;
        assert!(
            learnt.abs_diff(average) <= average / 5,
            "learnt {learnt} ns, average {average}"
        );
        let uniform = learnt_from(&[50_000; 200], 100_000, true, 0);
        assert!(uniform.abs_diff(50_000) <= 10_000, "{uniform}");
        // launched one at a time after the GPU went idle: no span of unbroken work to learn from
        assert_eq!(learnt_from(&mix, 100_000, false, 0), 0);
        set_shared(Lane::FIRST, true);
        assert_eq!(learnt_from(&mix, 100_000, true, 0), 0, "beside others");
        set_shared(Lane::FIRST, false);
    }

    /// A time per launch taken for more than the budget holds the process to one launch at a
    /// time; each launch then teaches its own time, until two fit in the budget again.
    #[test]
    fn a_process_held_to_one_launch_at_a_time_learns_each_launchs_time() {
        let _globals = stats::TEST_GLOBALS.lock();
        set_shared(Lane::FIRST, false);
        set_tight(Lane::FIRST, false);
        configure(2_000_000, false);
        let mix: Vec<u64> = (0..20)
            .flat_map(|_| std::iter::once(200_000).chain([40_000; 5]))
            .collect();
        // waited for to a microsecond, as the check's wait polls
        let learnt = learnt_from(&mix, 1_000, false, 2_900_000);
        let mut p = Pacer::new();
        p.per_launch_ns = learnt;
        assert!(
            learnt <= 2_000_000 && p.allowed(2_000_000) >= 2,
            "still held to one launch: {learnt} ns"
        );
        // long kernels are learnt as long
        let long = learnt_from(&[20_000_000; 20], 1_000, false, 2_900_000);
        assert!(long.abs_diff(20_000_000) <= 1_000_000, "{long}");
        // seen done only by checks a millisecond apart, short launches still took at most that
        // long: enough to be no longer held to one launch at a time
        let coarse = learnt_from(&[40_000; 50], 1_000_000, false, 2_900_000);
        assert!(coarse <= 2_000_000, "{coarse}");
        set_shared(Lane::FIRST, true);
        let beside = learnt_from(&[40_000; 50], 1_000, false, 2_900_000);
        assert_eq!(beside, 2_900_000, "beside others");
        set_shared(Lane::FIRST, false);
    }

    /// A framework's step: one graph of 4.7 ms, then four short kernels (20 us), each launched
    /// once the one before was seen done, the short ones seen done at the first look. Held to
    /// one launch at a time by the graphs' time, the process learnt only from the graphs and
    /// stayed held (a JAX loop alone under gpushared ran at 0.87-0.91 of its rate without it); the
    /// short launches, seen done sooner than the time learnt, bring it under the budget.
    #[test]
    fn short_launches_seen_done_at_the_first_look_free_a_process_held_by_long_ones() {
        let _globals = stats::TEST_GLOBALS.lock();
        set_shared(Lane::FIRST, false);
        set_tight(Lane::FIRST, false);
        configure(2_000_000, false);
        let steps: Vec<u64> = (0..20)
            .flat_map(|_| std::iter::once(4_700_000).chain([20_000; 4]))
            .collect();
        let learnt = learnt_from(&steps, 100_000, false, 4_700_000);
        let mut p = Pacer::new();
        p.per_launch_ns = learnt;
        assert!(
            p.allowed(2_000_000) >= 2,
            "held to one launch at a time: {learnt} ns"
        );
        // the graphs alone are still learnt as long
        let graphs = learnt_from(&[4_700_000; 20], 100_000, false, 4_700_000);
        assert!(graphs.abs_diff(4_700_000) <= 200_000, "{graphs}");
    }

    /// Beside others, a queue of short kernels is held back at 31 markers pending, or on a
    /// relaxed lease (whose lease thread records none) at 63; long kernels at four budgets of
    /// work; kernels of unknown time at once.
    #[test]
    fn beside_others_a_relaxed_lease_holds_short_kernels_back_later() {
        let mut p = Pacer::new();
        p.per_launch_ns = 20_000;
        for (len, relaxed, short) in [
            (30, false, true),
            (31, false, false),
            (31, true, true),
            (62, true, true),
            (63, true, false),
        ] {
            p.len = len;
            assert_eq!(
                p.short_beside_others(2_000_000, relaxed),
                short,
                "{len} markers, relaxed {relaxed}"
            );
        }
        p.per_launch_ns = 1_000_000;
        p.len = 8;
        assert!(
            !p.short_beside_others(2_000_000, true),
            "8 ms of long kernels"
        );
        p.len = 7;
        assert!(p.short_beside_others(2_000_000, true));
        p.per_launch_ns = 0;
        p.len = 1;
        assert!(!p.short_beside_others(2_000_000, true), "unknown kernels");
    }

    #[test]
    fn a_launch_timed_shorter_lowers_the_time_learnt() {
        assert_eq!(lower(3_400_000, 50_000), 1_725_000);
        let mut t = 3_400_000;
        for _ in 0..7 {
            t = lower(t, 50_000);
        }
        assert!(t < CHECK_EVERY_NS, "{t}: still taken for long kernels");
        assert_eq!(lower(1_600_000, 2_000_000), 1_600_000, "never raised");
    }

    /// Beside others, launches timed behind the process's own queue raise a time per launch
    /// they show far too short, once the shorter of the last two does, within what its
    /// markers allow, and only for kernels longer than a queue beside others may hold; one
    /// timing that also spanned another process's turn does not.
    #[test]
    fn launches_timed_behind_the_own_queue_raise_a_time_per_launch_far_too_short() {
        let _counters = stats::TEST_GLOBALS.lock();
        let mut p = Pacer::new();
        p.per_launch_ns = 290_000;
        p.bounds = [0, 60_000_000];
        assert!(!p.raise_from(57_000_000), "one timing");
        assert!(p.raise_from(56_000_000), "two long timings");
        assert_eq!(p.per_launch_ns, 56_000_000, "the shorter of them");
        assert!(!p.raise_from(200_000_000), "the raise starts a new count");

        // markers that completed sooner than the timings say: they spanned another's work
        let mut p = Pacer::new();
        p.per_launch_ns = 50_000;
        p.bounds = [250_000, 300_000];
        for ns in [2_050_000, 2_100_000, 2_040_000, 2_000_000] {
            assert!(!p.raise_from(ns), "{ns}");
        }
        assert_eq!(p.per_launch_ns, 50_000);
        p.bounds = [0; RAISE_AFTER];
        assert!(!p.raise_from(2_000_000), "no bound yet");
        // kernels that no queue beside others holds many of: not raised
        p.bounds = [10_000_000; RAISE_AFTER];
        for ns in [5_000_000, 6_000_000, 7_000_000, 5_500_000] {
            assert!(!p.raise_from(ns), "{ns}");
        }

        // one of a process's timings spanned others' turns
        let mut p = Pacer::new();
        p.per_launch_ns = 20_000;
        p.bounds = [30_000_000; RAISE_AFTER];
        for ns in [21_000, 19_000, 20_000_000, 20_000, 22_000, 18_000] {
            assert!(!p.raise_from(ns), "{ns}");
        }
        assert_eq!(p.per_launch_ns, 20_000);
        // kernels a little longer than learnt: not raised
        for ns in [30_000, 35_000, 39_000, 31_000] {
            assert!(!p.raise_from(ns), "{ns}");
        }
        assert_eq!(p.per_launch_ns, 20_000);
    }

    /// Alone, a stalled queue waits a launch's time; beside others every wait may last the
    /// whole limit, and eight launches' time.
    #[test]
    fn beside_others_a_wait_for_the_queue_lasts_the_whole_limit() {
        let ms = 1_000_000;
        let mut p = Pacer::new();
        p.per_launch_ns = 300_000;
        assert_eq!(p.wait_left(100 * ms, 30 * ms, false), 70 * ms);
        assert_eq!(p.wait_left(100 * ms, 30 * ms, true), 70 * ms);
        p.stalled = true;
        assert_eq!(
            p.wait_left(100 * ms, 0, false),
            STALLED_WAIT_NS,
            "alone, stalled"
        );
        assert_eq!(
            p.wait_left(100 * ms, 0, true),
            100 * ms,
            "beside others, stalled"
        );
        p.per_launch_ns = 56 * ms;
        assert_eq!(p.wait_left(100 * ms, 0, false), 56 * ms, "a launch's time");
        assert_eq!(
            p.wait_left(100 * ms, 48 * ms, true),
            400 * ms,
            "eight launches' time"
        );
        assert_eq!(p.wait_left(100 * ms, 500 * ms, true), 0);
    }

    #[test]
    fn a_tight_lease_holds_a_quarter_of_the_budget() {
        assert_eq!(lease_budget(2_000_000, false), 2_000_000);
        assert_eq!(lease_budget(2_000_000, true), 500_000);
        assert_eq!(lease_budget(1, true), 1);
        let mut p = Pacer::new();
        p.per_launch_ns = 200_000;
        assert_eq!(p.allowed(lease_budget(2_000_000, false)), 10);
        assert_eq!(p.allowed(lease_budget(2_000_000, true)), 2);
    }

    #[test]
    fn a_lease_of_its_own_may_queue_its_rest_until_its_end() {
        let ms = 1_000_000;
        // `left`: what is left of the lease (`lease::lease_left_ns`, 0 past its end or without one)
        let q = |tight, shared, left| queue_budget(2 * ms, tight, shared, left);
        assert_eq!(q(false, false, 20 * ms), 22 * ms, "at the grant");
        assert_eq!(q(false, false, 5 * ms), 7 * ms, "5 ms before the end");
        assert_eq!(
            q(false, false, 0),
            2 * ms,
            "at or past the end, or no lease"
        );
        assert_eq!(q(false, true, 20 * ms), 2 * ms, "beside others");
        assert_eq!(q(true, false, 20 * ms), ms / 2, "tight");
        let mut p = Pacer::new();
        p.per_launch_ns = 100_000;
        assert_eq!(p.allowed(q(false, false, 20 * ms)), 220);
        assert_eq!(p.allowed(q(false, false, ms)), 30);
    }

    /// A time per launch not yet taught by markers four times (one launch timed, a few short
    /// kernels of a program's start) holds a lease of its own to `queue_ahead`: the rest of the
    /// lease by a time far too short would be scores of long kernels. A join that takes back
    /// what was learnt holds it there again.
    #[test]
    fn the_rest_of_a_lease_is_queued_once_markers_taught_the_time_per_launch() {
        let _globals = stats::TEST_GLOBALS.lock();
        configure(2_000_000, false);
        set_shared(Lane::FIRST, false);
        set_tight(Lane::FIRST, false);
        let ms = 1_000_000;
        let budget = queue_budget(2 * ms, false, false, 20 * ms);
        let mut p = Pacer::new();
        p.per_launch_ns = 300_000;
        assert!(
            p.room(5, budget) && !p.room(6, budget),
            "2 ms of 0.3 ms launches"
        );
        assert!(p.mark_due(0, budget), "a marker after each launch");
        for i in 0..SURE_AFTER as u64 {
            p.learn_from(1_000 + i, 300_000);
        }
        assert!(
            p.room(72, budget) && !p.room(73, budget),
            "22 ms of 0.3 ms launches"
        );
        assert!(!p.mark_due(0, budget), "markers nine launches apart");
        p.forget_learnt_since(0);
        assert!(!p.room(6, budget), "taken back by a join");
    }
}
