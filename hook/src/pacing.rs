//! Pacing of a lease holder's GPU queue.
//!
//! Markers (timing-off events) recorded right after launches tell how far the GPU lags behind
//! this process's launches. While the newest marker is done, the queue is empty and a marker is
//! recorded after a launch at most every [`CHECK_EVERY_NS`] and, for launches known to be short,
//! every few launches (cheap for launch-bound loops and those that synchronize often); once
//! a marker is found pending, the process is *backlogged*: every launch counts the launches
//! queued since the newest marker seen done, a launch waits while they would take more than the
//! queue budget to run, estimated from how fast markers complete, and a marker follows every few
//! launches, about eight per budget ([`Pacer::spacing`]). On a lease of its own the budget is
//! what is left of the lease plus daemon.queue_ahead ([`queue_budget`]): the queue may run ahead
//! of the program early in a lease and shrinks towards its end. So the end of a lease drains in
//! about daemon.queue_ahead (plus one kernel), whatever the kernel sizes and however rarely the
//! program synchronizes, and a launch that neither waits nor is due a marker calls nothing in the
//! driver ([`passes`]).
//!
//! The lease thread samples whether the newest marker is pending; the fraction of samples that
//! found work pending is the lease's *busy* fraction, reported to the daemon as the process's
//! demand on the GPU.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

use crate::clock::now_ns;
use crate::cuda::*;
use crate::driver::{helper, relaxed_capture, Helper};
use crate::fork_safe::ForkSafe;
use crate::kernel_timer;
use crate::stats;

/// While the queue is empty, at most one marker per this many nanoseconds of launching.
pub const CHECK_EVERY_NS: u64 = 100_000;
/// The same on a relaxed lease ([`relaxed`]).
pub const RELAXED_CHECK_EVERY_NS: u64 = 400_000;
/// Most markers in flight: twice the [`SHARED_MOST_MARKERS`] that hold a queue back beside
/// others, with room for the lease thread's own.
const RING: usize = 64;
/// Beside others, markers pending past which a launch over its allowance waits (kernels not
/// known to be long).
const SHARED_MOST_MARKERS: usize = 31;
/// Most launches queued, however short the kernels.
const MOST_QUEUED: u64 = 256;
/// Markers per queue budget while backlogged: how finely the queue is seen to drain.
const MARKERS_PER_BUDGET: u64 = 8;
/// Most launches from one marker to the next while backlogged, and from one check to the next
/// while the queue is empty.
const MOST_SPACING: u64 = 32;

/// Record a marker after the launch under way (set at a check, taken after the launch).
static MARK_AFTER: AtomicBool = AtomicBool::new(false);
/// Launches of this process on nameable streams, counted after each.
static LAUNCHES: AtomicU64 = AtomicU64::new(0);
/// Queue budget in GPU nanoseconds (daemon.queue_ahead): what may be queued past a lease's end.
static BUDGET_NS: AtomicU64 = AtomicU64::new(2_000_000);
/// The lease runs beside others (the daemon's `GRANT_SHARED`): marker completions do not teach
/// the GPU time per launch. The driver time-slices the GPU between the processes then, and a
/// marker also waits for the others' work: learnt there, the GPU time per launch would be far too
/// long, and a launch-bound process held back at every launch ran several times slower than under
/// plain time-slicing (and launch-bound processes waiting for their own markers there fell far
/// behind the others). Over its allowance, a launch waits only once the work queued passes four
/// budgets by the time per launch learnt alone (kernels known to be long), or the markers fill
/// the ring: so the queue stays bounded, and the end of the lease hands the GPU over.
static SHARED: AtomicBool = AtomicBool::new(false);
/// A wait for this process's queue ran into its limit: until a marker completes, waits are short
/// ([`STALLED_WAIT_NS`]).
static STALLED: AtomicBool = AtomicBool::new(false);
/// While [`STALLED`], a launch over its allowance waits at most this long, or the GPU time per
/// launch learnt if longer. Held up by something else (work waiting on another process, or behind
/// another's long queue), a wait must end; but a process that then launched freely until one of
/// its markers completed queued seconds of long kernels at once (with the fake driver: 13 ms
/// kernels, never synchronizing, beside four other processes), and the others' markers then
/// waited behind that queue until they stalled too. Waiting a launch's time per launch, the
/// queue grows by about what the GPU runs meanwhile.
const STALLED_WAIT_NS: u64 = 1_000_000;
/// An interactive client is active or was lately (the daemon's `GRANT_TIGHT`): the queue is held
/// to a quarter of the budget, beside others too, so that the interactive client's next request
/// waits little behind this process's work.
static TIGHT: AtomicBool = AtomicBool::new(false);
/// This process's client is interactive: its leases are never relaxed.
static INTERACTIVE_CLIENT: AtomicBool = AtomicBool::new(false);
/// This process is a client of the daemon's MPS server (as the daemon said when the process
/// first attached, before its CUDA context was made): its kernels run beside other processes'.
static UNDER_MPS: AtomicBool = AtomicBool::new(false);
/// The current lease was extended (the daemon extends a lease beside others only while every
/// process weighs the same).
static EXTENDED: AtomicBool = AtomicBool::new(false);
/// How much smaller the queue budget is on a tight lease.
const TIGHT_DIVISOR: u64 = 4;

#[derive(Clone, Copy)]
struct Marker {
    event: CUevent,
    recorded: u64,
    /// When a check last saw it pending (0: never): it completed some time between then and
    /// when a check saw it done.
    seen_pending_at: u64,
    /// The launches of this process when it was recorded ([`LAUNCHES`]).
    launches: u64,
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

/// How many of the latest learnt times per launch can be taken back ([`joined`]).
const LEARNT_KEPT: usize = 16;
/// A `Joined` whose time is later than its arrival or older than this is taken as of its
/// arrival (a daemon in another time namespace, whose `CLOCK_MONOTONIC` is not this one's).
const MAX_JOIN_LAG_NS: u64 = 1_000_000_000;

struct Pacer {
    ring: [Option<Marker>; RING],
    head: usize,
    len: usize,
    /// Events to reuse.
    spare: Vec<CUevent>,
    /// GPU nanoseconds per launch (0: not known yet).
    per_launch_ns: u64,
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
    /// When the newest marker was recorded.
    last_mark: u64,
    /// When work of this process was last seen pending (at a check or a sample).
    last_pending: u64,
    /// The last check found markers pending: launches since then pass with a marker after
    /// every few ([`passes`]).
    backlogged: bool,
    /// The launches counted at the last check ([`LAUNCHES`]).
    checked_launches: u64,
    samples: u32,
    busy_samples: u32,
}

// SAFETY: events are plain driver handles, usable from any thread of the process.
unsafe impl Send for Pacer {}

static PACER: ForkSafe<Pacer> = ForkSafe::new(Pacer::new());

impl Pacer {
    const fn new() -> Pacer {
        Pacer {
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
            last_mark: 0,
            last_pending: 0,
            backlogged: false,
            checked_launches: 0,
            samples: 0,
            busy_samples: 0,
        }
    }

    fn front(&mut self) -> Option<&mut Marker> {
        if self.len == 0 {
            return None;
        }
        self.ring[self.head].as_mut()
    }

    fn newest(&self) -> Option<Marker> {
        if self.len == 0 {
            return None;
        }
        self.ring[(self.head + self.len - 1) % RING]
    }

    fn pop(&mut self, done_at: u64) {
        let Some(m) = self.ring[self.head].take() else {
            return;
        };
        self.head = (self.head + 1) % RING;
        self.len -= 1;
        STALLED.store(false, Relaxed);
        self.time_launches(&m, done_at);
        self.last_seen_pending = m.seen_pending_at;
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
        let shared = SHARED.load(Relaxed);
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
        let budget = lease_budget(BUDGET_NS.load(Relaxed), TIGHT.load(Relaxed));
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

    /// Sets the GPU time per launch, and the counters that show it.
    fn set_per_launch(&mut self, ns: u64) {
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
    fn forget_learnt_since(&mut self, since: u64) {
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
    fn collect(&mut self, query: Query) -> usize {
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
    fn checks_each_launch(&self) -> bool {
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
    fn spacing(&self, budget: u64) -> u64 {
        (self.allowed(budget) / MARKERS_PER_BUDGET).clamp(1, MOST_SPACING)
    }

    /// The launches counted when the newest marker seen done was recorded (0 before any).
    fn done_launches(&self) -> u64 {
        self.last_done.map_or(0, |(_, at)| at)
    }

    /// Whether the next launch fits in the queue: fewer launches queued since the newest marker
    /// seen done than the budget allows.
    fn room(&self, launches: u64, budget: u64) -> bool {
        launches.saturating_sub(self.done_launches()) < self.allowed(budget)
    }

    /// Launches since the newest marker was recorded, pending or done (all of them before any).
    fn since_newest(&self, launches: u64) -> u64 {
        let newest = self.newest().map_or(self.done_launches(), |m| m.launches);
        launches.saturating_sub(newest)
    }

    /// Launches since the last check.
    fn since_check(&self, launches: u64) -> u64 {
        launches.saturating_sub(self.checked_launches)
    }

    /// Whether a marker follows the next launch of a backlogged process ([`Pacer::spacing`]).
    fn mark_due(&self, launches: u64, budget: u64) -> bool {
        self.since_newest(launches) + 1 >= self.spacing(budget)
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

type Query = unsafe extern "C" fn(CUevent) -> CUresult;

fn query_fn() -> Option<Query> {
    // SAFETY: the signature of cuEventQuery.
    unsafe { helper::<Query>(Helper::cuEventQuery) }
}

/// Whether the lease just granted (or extended) runs beside others.
pub fn set_shared(shared: bool) {
    SHARED.store(shared, Relaxed);
}

/// Whether the current lease runs beside others.
#[cfg(test)]
pub fn shared() -> bool {
    SHARED.load(Relaxed)
}

/// Another lease started beside the current one, granted alone, at `at_ns` (the daemon's
/// `Joined`): the lease is shared from now on, and what markers that completed since then taught
/// is taken back. They also waited for the other's work: a process of short kernels would
/// otherwise take the other's time slices for its own kernels' time. What was learnt before
/// stays: a lease that others join every time still learns in the part it runs alone.
pub fn joined(at_ns: u64) {
    set_shared(true);
    let now = now_ns();
    let since = if at_ns <= now && now - at_ns <= MAX_JOIN_LAG_NS {
        at_ns
    } else {
        now
    };
    PACER.lock().forget_learnt_since(since);
}

/// Whether the current lease is *relaxed*: a batch process's, extended beside others, not
/// tight. The daemon extends leases beside others only while every process weighs the same: the
/// driver time-slices the GPU between them as it would without gpushare, their demands decide
/// nothing, and what the hook does on their launch paths and lease threads is what they pay for
/// it. So their queues are checked less often, their lease threads sample less often and record
/// no markers of their own, and only their launches are timed ([`kernel_timer`]). Processes of
/// unequal weights that overlap (light ones) ask again at each lease's end, with the busy time
/// their samples measured; near an interactive client nothing is relaxed.
///
/// Under MPS every extended lease is relaxed: the kernels of the processes holding leases run
/// together there, nobody waits for an extended lease, and the daemon decides nothing by
/// demands. With a lease thread that sampled every quarter millisecond, recording a marker at
/// most of its samples, four launch-bound small-MLP loops ran at 0.91-0.93 of plain MPS's rate
/// in three rounds on an H200; relaxed, 0.94-0.98, side by side.
pub fn relaxed() -> bool {
    (SHARED.load(Relaxed) || UNDER_MPS.load(Relaxed))
        && EXTENDED.load(Relaxed)
        && !TIGHT.load(Relaxed)
        && !INTERACTIVE_CLIENT.load(Relaxed)
}

/// Whether this process is a client of the daemon's MPS server.
pub fn set_under_mps(on: bool) {
    UNDER_MPS.store(on, Relaxed);
}

/// Whether the lease just granted was an extension.
pub fn set_extended(extended: bool) {
    EXTENDED.store(extended, Relaxed);
}

/// How long between two checks while the queue is empty.
fn check_every() -> u64 {
    if relaxed() {
        RELAXED_CHECK_EVERY_NS
    } else {
        CHECK_EVERY_NS
    }
}

/// Whether the lease just granted (or extended) keeps a short queue for an interactive client.
pub fn set_tight(tight: bool) {
    TIGHT.store(tight, Relaxed);
}

/// The queue budget of the current lease: a quarter of `budget` on a tight one.
fn lease_budget(budget: u64, tight: bool) -> u64 {
    if tight {
        (budget / TIGHT_DIVISOR).max(1)
    } else {
        budget
    }
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
fn queue_budget(budget: u64, tight: bool, shared: bool, left_ns: u64) -> u64 {
    if tight || shared {
        return lease_budget(budget, tight);
    }
    budget.saturating_add(left_ns)
}

/// The current lease's queue budget with `left_ns` of it left ([`queue_budget`]).
fn current_budget(left_ns: u64) -> u64 {
    queue_budget(
        BUDGET_NS.load(Relaxed),
        TIGHT.load(Relaxed),
        SHARED.load(Relaxed),
        left_ns,
    )
}

pub fn configure(budget_ns: u64, interactive: bool) {
    BUDGET_NS.store(budget_ns.max(1), Relaxed);
    INTERACTIVE_CLIENT.store(interactive, Relaxed);
}

/// A check on the launch path (before a launch on `stream`, a nameable stream that is not
/// capturing): waits while too much work is queued, and asks for a marker after the launch.
/// Returns how long until the next check (0: at the next launch). `wait_limit_ns` bounds a wait;
/// `left_ns` is what is left of the lease.
///
/// Beside others ([`lowered_by_timing`]), a process taken for one with long kernels has some of
/// its launches timed ([`kernel_timer`]): the pair starts right before the launch, after any wait
/// here.
///
/// Until the process knows its GPU time per launch, every launch checks, and launches are timed
/// on their own: the first whose launch call was not slow on the host gives the first estimate.
pub fn check(stream: CUstream, wait_limit_ns: u64, left_ns: u64) -> u64 {
    let (next, per_launch) = check_queue(wait_limit_ns, left_ns);
    if per_launch == 0 || (lowered_by_timing() && per_launch >= CHECK_EVERY_NS) {
        kernel_timer::before_launch(stream);
    }
    next
}

/// Whether launches timed on their own lower the time per launch: on a lease beside others,
/// where markers teach nothing, unless it is tight. Not only on relaxed (extended) ones: a
/// launch-bound job whose first launch was timed beside a 13 ms kernel job took 17.5 ms per
/// launch, was never extended (a process further behind always waited), and waited at every
/// launch for the others' turns (in the lab mix on an H100 it ran at 0.007 of its time-sliced
/// rate).
fn lowered_by_timing() -> bool {
    SHARED.load(Relaxed) && !TIGHT.load(Relaxed)
}

/// Half way from `old` down to a launch's time measured on its own ([`kernel_timer`]), when
/// that is shorter: what was learnt was too long.
fn lower(old: u64, timed: u64) -> u64 {
    if timed < old {
        (old + timed) / 2
    } else {
        old
    }
}

/// [`check`]'s wait. The pacer's lock is not held while waiting: the lease thread samples the
/// queue meanwhile (a launching thread that waited under the lock would starve it of samples,
/// and the lease would be reported idle). Returns how long until the next check, and the GPU
/// time per launch then (read under the lock the check holds, not in a second one).
fn check_queue(wait_limit_ns: u64, left_ns: u64) -> (u64, u64) {
    let Some(query) = query_fn() else {
        return (u64::MAX, PACER.lock().per_launch_ns);
    };
    let tight = TIGHT.load(Relaxed);
    let budget = current_budget(left_ns);
    let start = now_ns();
    stats::CHECKS.add(1);
    let mut first = true;
    loop {
        let (event, limit) = {
            let mut p = PACER.lock();
            let pending = p.collect(query);
            if first {
                p.backlogged = pending > 0;
                p.checked_launches = LAUNCHES.load(Relaxed);
                if let Some(timed) = kernel_timer::take() {
                    if p.per_launch_ns == 0 {
                        p.set_per_launch(timed.max(1));
                    } else if lowered_by_timing() {
                        let lowered = lower(p.per_launch_ns, timed);
                        if lowered < p.per_launch_ns {
                            stats::LOWERED.add(1);
                            p.set_per_launch(lowered);
                        }
                    }
                }
                if pending == 0 {
                    MARK_AFTER.store(true, Relaxed);
                    // Unknown kernels too: a new process of 13 ms kernels that never
                    // synchronizes launched hundreds of them between its first two checks (with
                    // the fake driver, whose launches take a microsecond), and the others waited
                    // seconds behind that queue.
                    let next = if p.checks_each_launch() {
                        0
                    } else {
                        check_every()
                    };
                    return (next, p.per_launch_ns);
                }
            }
            let shared = SHARED.load(Relaxed);
            // Beside others this process's markers are pending often, for the others' turns too:
            // a launch-bound process checked at every launch would pay for it at every launch.
            // Its checks stay spaced then (unless its kernels are known to be long).
            let next_check = if shared && !p.checks_each_launch() {
                check_every()
            } else {
                0
            };
            let launches = LAUNCHES.load(Relaxed);
            if first {
                // checks spaced in time mark each time; else every few launches
                if next_check != 0 || p.mark_due(launches, budget) {
                    MARK_AFTER.store(true, Relaxed);
                }
                first = false;
            }
            if p.room(launches, budget) {
                return (next_check, p.per_launch_ns);
            }
            let limit = if STALLED.load(Relaxed) {
                STALLED_WAIT_NS.max(p.per_launch_ns)
            } else {
                wait_limit_ns.saturating_sub(now_ns().saturating_sub(start))
            };
            // Beside others the queue is long also for their turns: it is held back once what it
            // holds by the GPU time per launch learnt alone passes four budgets (kernels known to
            // be long), or it holds SHARED_MOST_MARKERS markers.
            let long = p.per_launch_ns >= CHECK_EVERY_NS
                && (p.len as u64).saturating_mul(p.per_launch_ns) >= budget.saturating_mul(4);
            // Kernels not known yet are not taken for short ones beside others either.
            let short = !long && p.per_launch_ns != 0 && p.len < SHARED_MOST_MARKERS;
            let per_launch = p.per_launch_ns;
            match p.front() {
                Some(_) if shared && short && !tight => return (next_check, per_launch),
                Some(m) => (m.event, limit),
                None => return (next_check, per_launch),
            }
        };
        // SAFETY: an event of ours (markers' events are reused, never destroyed, once recorded).
        let waited_from = now_ns();
        let last_pending = std::cell::Cell::new(waited_from);
        let done = wait_until_done(
            || {
                let pending = unsafe { query(event) } == CUDA_NOT_READY;
                if pending {
                    last_pending.set(now_ns());
                }
                !pending
            },
            limit,
        );
        if done {
            // Watched until it completed: its completion time is known (to a poll), and the
            // time per launch learns from it.
            let mut p = PACER.lock();
            if let Some(m) = p.front().filter(|m| m.event == event) {
                m.seen_pending_at = m.seen_pending_at.max(last_pending.get());
            }
        }
        stats::CHECK_WAITS.add(1);
        stats::CHECK_WAIT_NS.add(now_ns().saturating_sub(waited_from));
        if !done {
            // Held up by something else: short waits until some of this queue completes.
            STALLED.store(true, Relaxed);
            return (0, PACER.lock().per_launch_ns);
        }
    }
}

/// Whether the next launch may go without a check ([`check`]): on a lease of its own (not
/// beside others), with `left_ns` of the lease left: for a backlogged process (markers pending
/// at the last look) whose GPU time per launch is known, with fewer launches queued than the
/// budget allows and the next marker not yet due ([`Pacer::mark_due`]); and for one whose queue
/// was empty at the last look, whose launches are known to be short, until as many launches as
/// a backlogged one's markers are apart ([`Pacer::spacing`]) followed that look. A loop of
/// short kernels that synchronizes after each finds its queue empty at every check, and spaced
/// by time alone ([`CHECK_EVERY_NS`]) its checks came at every other launch or, for kernels of
/// 100 us and more, at every one (a query and a record in the driver each). Reads the pacer's
/// state alone, no driver call.
pub fn passes(left_ns: u64) -> bool {
    if SHARED.load(Relaxed) || STALLED.load(Relaxed) || MARK_AFTER.load(Relaxed) {
        return false;
    }
    let budget = current_budget(left_ns);
    let launches = LAUNCHES.load(Relaxed);
    let p = PACER.lock();
    let pass = if p.backlogged {
        p.len > 0
            && p.per_launch_ns != 0
            && p.room(launches, budget)
            && !p.mark_due(launches, budget)
    } else {
        !p.checks_each_launch() && p.since_check(launches) + 1 < p.spacing(budget)
    };
    if pass {
        stats::PASSED.add(1);
    }
    pass
}

/// After a launch on `stream`: ends the timing of the launch, if one started before it, and
/// records the marker a check asked for.
#[inline(always)]
pub fn after_launch(stream: CUstream) {
    LAUNCHES.fetch_add(1, Relaxed);
    kernel_timer::after_launch(stream);
    if MARK_AFTER.load(Relaxed) {
        mark(stream);
    }
}

#[cold]
fn mark(stream: CUstream) {
    MARK_AFTER.store(false, Relaxed);
    let _relaxed = relaxed_capture();
    record_marker(stream, true);
}

/// Records a marker on `stream`; `after_launch`: right after one launch of this thread (else by
/// the lease thread, after whatever was launched since the newest marker).
fn record_marker(stream: CUstream, after_launch: bool) {
    type Create = unsafe extern "C" fn(*mut CUevent, u32) -> CUresult;
    type Record = unsafe extern "C" fn(CUevent, CUstream) -> CUresult;
    type Destroy = unsafe extern "C" fn(CUevent) -> CUresult;
    // SAFETY: the driver's signatures of these functions.
    let (Some(create), Some(record), Some(destroy)) = (unsafe {
        (
            helper::<Create>(Helper::cuEventCreate),
            helper::<Record>(Helper::cuEventRecord),
            helper::<Destroy>(Helper::cuEventDestroy_v2),
        )
    }) else {
        return;
    };
    let mut p = PACER.lock();
    if p.len >= RING {
        stats::RING_FULL.add(1);
        return;
    }
    let (event, fresh) = match p.spare.pop() {
        Some(e) => (e, false),
        None => {
            let mut e: CUevent = std::ptr::null_mut();
            // SAFETY: a valid out-pointer.
            if unsafe { create(&mut e, CU_EVENT_DISABLE_TIMING) } != CUDA_SUCCESS {
                return;
            }
            (e, true)
        }
    };
    // SAFETY: our event, the caller's stream.
    if unsafe { record(event, stream) } != CUDA_SUCCESS {
        // Another context than the event's. A new event is dropped; a reused one may still be
        // polled by a waiting check, so it goes back to the spares (last in line).
        if fresh {
            // SAFETY: our event, never recorded.
            unsafe { destroy(event) };
        } else {
            p.spare.insert(0, event);
        }
        return;
    }
    let now = now_ns();
    let slot = (p.head + p.len) % RING;
    p.ring[slot] = Some(Marker {
        event,
        recorded: now,
        seen_pending_at: 0,
        launches: LAUNCHES.load(Relaxed),
    });
    p.len += 1;
    if after_launch {
        p.last_mark = now;
    }
}

/// How old the newest marker may be before the lease thread records one of its own.
const RESAMPLE_NS: u64 = 200_000;

/// The lease thread's sample: is this process's newest work still pending on the GPU?
///
/// Launches between two checks on the launch path get no marker, and a program that launches a
/// few long kernels and then waits for them would look idle once the marker after the first one
/// completed. So when the newest marker is done and older than [`RESAMPLE_NS`], or a backlogged
/// process launched since it (its markers follow every few launches), the lease thread records
/// one of its own on the stream `stream` gives (the stream launched on last, nameable from this
/// thread and not capturing, in the lease's context), after whatever was launched since;
/// `stream` is only asked then.
pub fn sample(stream: impl FnOnce() -> Option<CUstream>) {
    let Some(query) = query_fn() else {
        return;
    };
    let newest_done = {
        let mut p = PACER.lock();
        // Launches of a backlogged process since its newest marker have none of their own
        // (a marker follows every few): once that marker is done, they may still be pending.
        let all_done = p.collect(query) == 0;
        let unmarked = p.backlogged && p.since_newest(LAUNCHES.load(Relaxed)) > 0;
        all_done
            && (unmarked
                || now_ns().saturating_sub(p.newest().map_or(0, |m| m.recorded)) >= RESAMPLE_NS)
    };
    if newest_done && !relaxed() {
        if let Some(stream) = stream() {
            record_marker(stream, false);
            stats::SAMPLE_MARKERS.add(1);
        }
    }
    stats::SAMPLES.add(1);
    let mut p = PACER.lock();
    // SAFETY: a live event of ours.
    let busy = p
        .newest()
        .is_some_and(|m| unsafe { query(m.event) } == CUDA_NOT_READY);
    p.samples += 1;
    p.busy_samples += u32::from(busy);
    if busy {
        p.last_pending = now_ns();
    }
}

/// The busy part of a lease of `wall_ns` that ends now, from the samples since it started; starts
/// the count for the next lease. Without samples (a lease shorter than the sampling period), the
/// work was pending for the whole lease if a marker still is.
pub fn take_busy(wall_ns: u64) -> u64 {
    let pending = query_fn().is_some_and(|query| {
        let p = PACER.lock();
        // SAFETY: a live event of ours.
        p.newest()
            .is_some_and(|m| unsafe { query(m.event) } == CUDA_NOT_READY)
    });
    let mut p = PACER.lock();
    let busy = busy_part(wall_ns, p.samples, p.busy_samples, pending);
    p.samples = 0;
    p.busy_samples = 0;
    busy
}

/// `wall_ns` times the fraction of busy samples (pure, unit-tested).
pub fn busy_part(wall_ns: u64, samples: u32, busy: u32, pending_now: bool) -> u64 {
    if samples == 0 {
        return if pending_now { wall_ns } else { 0 };
    }
    ((wall_ns as u128 * busy.min(samples) as u128) / samples as u128) as u64
}

/// Starts a new busy count (a lease was granted or extended).
pub fn restart_count() {
    let mut p = PACER.lock();
    p.samples = 0;
    p.busy_samples = 0;
}

/// How long this process has left the GPU without work of its own: `None` while work it marked
/// is pending, else the time since it last launched or last had work pending (as seen by the
/// checks and samples, every quarter millisecond while a lease runs), whichever is later. A
/// process blocked in a synchronize on its own queue is not idle until that queue ran out.
pub fn idle_for() -> Option<u64> {
    let query = query_fn()?;
    let mut p = PACER.lock();
    if p.collect(query) > 0 {
        return None;
    }
    Some(now_ns().saturating_sub(p.last_mark.max(p.last_pending)))
}

/// Forgets the markers once the lease's work was waited for (all of them are done).
pub fn drained() {
    let Some(query) = query_fn() else {
        return;
    };
    PACER.lock().collect(query);
}

/// Polls `done` (an event query) until it says so or `limit_ns` passed. Bounded, unlike
/// `cuEventSynchronize`: work that waits on another process (which waits for the token) must
/// not hold the token forever. Says once per process when it gives up.
pub fn wait_until_done(done: impl Fn() -> bool, limit_ns: u64) -> bool {
    static SAID: AtomicBool = AtomicBool::new(false);
    let start = now_ns();
    let mut polls = 0u32;
    while !done() {
        let waited = now_ns().saturating_sub(start);
        if waited > limit_ns {
            if !SAID.swap(true, AcqRel) {
                crate::guard::say(format_args!(
                    "the work of a lease was still running after {} ms; the token is given back anyway",
                    (waited + 500_000) / 1_000_000
                ));
            }
            return false;
        }
        polls += 1;
        if polls < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    true
}

pub fn after_fork_in_child() {
    MARK_AFTER.store(false, Relaxed);
    kernel_timer::after_fork_in_child();
    // SAFETY: called from the fork child handler; the parent's events are not the child's.
    unsafe { PACER.reset(Pacer::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_part_scales_the_wall_time_by_the_samples() {
        assert_eq!(busy_part(20_000_000, 80, 20, false), 5_000_000);
        assert_eq!(busy_part(20_000_000, 80, 80, false), 20_000_000);
        assert_eq!(busy_part(20_000_000, 0, 0, true), 20_000_000);
        assert_eq!(busy_part(20_000_000, 0, 0, false), 0);
        assert_eq!(busy_part(u64::MAX, 3, 9, false), u64::MAX);
    }

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
        set_shared(false);
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
        set_shared(true);
        assert_eq!(learnt_from(&mix, 100_000, true, 0), 0, "beside others");
        set_shared(false);
    }

    /// A time per launch taken for more than the budget holds the process to one launch at a
    /// time; each launch then teaches its own time, until two fit in the budget again.
    #[test]
    fn a_process_held_to_one_launch_at_a_time_learns_each_launchs_time() {
        let _globals = stats::TEST_GLOBALS.lock();
        set_shared(false);
        set_tight(false);
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
        set_shared(true);
        let beside = learnt_from(&[40_000; 50], 1_000, false, 2_900_000);
        assert_eq!(beside, 2_900_000, "beside others");
        set_shared(false);
    }

    /// A framework's step: one graph of 4.7 ms, then four short kernels (20 us), each launched
    /// once the one before was seen done, the short ones seen done at the first look. Held to
    /// one launch at a time by the graphs' time, the process learnt only from the graphs and
    /// stayed held (a JAX loop alone under gpushared ran at 0.87-0.91 of its rate without it); the
    /// short launches, seen done sooner than the time learnt, bring it under the budget.
    #[test]
    fn short_launches_seen_done_at_the_first_look_free_a_process_held_by_long_ones() {
        let _globals = stats::TEST_GLOBALS.lock();
        set_shared(false);
        set_tight(false);
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

    #[test]
    fn a_lease_is_relaxed_only_once_extended_beside_others_and_not_tight() {
        let _globals = stats::TEST_GLOBALS.lock();
        let lease = |shared, extended, tight, interactive| {
            set_shared(shared);
            set_extended(extended);
            set_tight(tight);
            INTERACTIVE_CLIENT.store(interactive, Relaxed);
            relaxed()
        };
        assert!(lease(true, true, false, false));
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
}
