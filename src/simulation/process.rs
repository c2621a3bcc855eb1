//! A simulated process: a program's loop of GPU work and host work ([`Workload`]), under the
//! hook's rules for leases (as `libgpushare.so` keeps them): it launches only while it holds a
//! lease that has not ended or been revoked, keeps a bounded queue (as deep as the rest of a
//! lease of its own, the budget beside others, a quarter of it on a tight lease), asks a quarter
//! of a lease before its end to extend it while it uses it, drains its queue before it gives a
//! lease back, gives back a revoked lease at once, a lease past its end once it left the GPU, a
//! lease others waited for once it left the GPU a while, and an interactive client's lease as
//! soon as it is idle. It reports a lease's busy time as the hook does, from samples of its
//! queue every quarter millisecond.

use std::collections::VecDeque;

use super::gpu::Gpu;
use crate::protocol;
use crate::scheduler::Nanos;

/// What a program does, over and over from `start` to `end`: a *step* of `kernels` kernels of
/// `kernel_ns` each (launched at `launch_ns` of host time each, or all at once as one CUDA
/// graph), then, if `sync`, it waits for them, then `host_ns` of host work. With `period_ns`,
/// a step begins every period instead (an inference service), and how long each took from its
/// start to its work done is recorded. A program may start up slowly first (`warmup_ns`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub kernel_ns: Nanos,
    pub kernels: u32,
    pub launch_ns: Nanos,
    pub graph: bool,
    pub sync: bool,
    pub host_ns: Nanos,
    pub period_ns: Option<Nanos>,
    pub start: Nanos,
    pub end: Nanos,
    /// For this long after `start` the program starts up (imports, compiles, loads its first
    /// batch): one small kernel every [`WARMUP_STEP_NS`], the GPU nearly idle.
    pub warmup_ns: Nanos,
}

/// How far apart a starting program's steps come, and the kernel of each.
pub const WARMUP_STEP_NS: Nanos = 50_000_000;
pub const WARMUP_KERNEL_NS: Nanos = 20_000;

/// How the hook keeps its leases (the daemon's configuration as the hook gets it).
#[derive(Debug, Clone, Copy)]
pub struct HookRules {
    pub queue_ahead_ns: Nanos,
    pub interactive: bool,
}

/// How long after a revocation the hook gives the lease back if no launch did.
const REVOKE_SLACK_NS: Nanos = 200_000;
/// An interactive process idle this long gives its lease back (the hook's `INTERACTIVE_IDLE_NS`).
const INTERACTIVE_IDLE_NS: Nanos = 200_000;
/// A lease past its end is given back once its process left the GPU this long.
const QUIET_NS: Nanos = 1_000_000;
/// A lease others waited for is given back once its process left the GPU for this part of it
/// (at least [`QUIET_NS`]).
const CONTENDED_IDLE_DIVISOR: Nanos = 8;
/// A process whose pauses ran past [`contended_idle`] each of the last [`PAUSES_LEARNT`] times
/// they reached this gives a lease others wait for back this soon into a pause.
const PAUSE_NS: Nanos = 500_000;
/// How many pauses in a row must have run long ([`PAUSE_NS`]).
const PAUSES_LEARNT: u8 = 2;
/// A batch process's hook samples whether its work is pending this often while it holds a
/// lease, and reports a lease's busy time as the share of samples that found work pending (the
/// exact time its queue held work made the least pending time per launch look right for
/// interactive charges here, where on an H200 it charged 0.064 for 0.094 used:
/// [`crate::scheduler::launch_cost`]).
const SAMPLE_NS: Nanos = 250_000;
/// The same for an interactive process's lease (the hook's `INTERACTIVE_SAMPLE_NS`): sampled
/// every quarter millisecond, a request of 0.23 ms that ran with nothing beside it read as idle
/// (its work done before the first sample).
const INTERACTIVE_SAMPLE_NS: Nanos = 100_000;
/// A program launches at most this much host time's worth of kernels at once (at least one):
/// each launch passes the gate, so a lease ends no later than this after its program's launches
/// did (launched all at once, a loop bound by its launches gave its lease back with most of its
/// launching still to come).
const LAUNCH_GRAIN_NS: Nanos = 100_000;
/// Gaps between two launches shorter than this are time in GPU phases (the hook's).
const LAUNCH_GAP_NS: Nanos = 200_000;

/// What a process asks of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    Acquire,
    /// Give the lease back (its busy time, and its launches and time in GPU phases since its
    /// last report), and ask again if `again`.
    Release {
        busy: Nanos,
        launches: u64,
        active: Nanos,
        again: bool,
    },
    /// Extend the lease (its launches and time in GPU phases since its last report).
    Extend {
        launches: u64,
        active: Nanos,
    },
}

#[derive(Debug, Clone, Copy)]
struct Held {
    granted_at: Nanos,
    deadline: Nanos,
    revoked_at: Option<Nanos>,
    tight: bool,
    /// Another lease runs beside it (granted so, or joined since).
    shared: bool,
    /// Others waited for the token when it was granted or last extended.
    contended: bool,
    asked_ahead: bool,
    /// When it was granted or last extended: the hook's busy samples count from then.
    counted_from: Nanos,
}

#[derive(Debug, Clone)]
pub struct Process {
    pub ctx: usize,
    pub work: Workload,
    rules: HookRules,
    held: Option<Held>,
    asked: bool,
    /// Kernels still to launch in the step under way.
    step_left: u32,
    step_started: Nanos,
    /// Host busy until then.
    ready_at: Nanos,
    waiting_sync: bool,
    launches: u64,
    last_launch: Nanos,
    /// When its last single kernel launch came (a group of launches at once is one launch after
    /// another, `launch_ns` apart), and the gaps of under [`LAUNCH_GAP_NS`] between consecutive
    /// launches since its last report: its time in GPU phases besides work pending.
    last_single_launch: Option<Nanos>,
    launching: VecDeque<(Nanos, Nanos)>,
    /// When it last reported its launches and time in GPU phases.
    reported_at: Nanos,
    /// When its queue last emptied (it left the GPU) and it launched nothing since.
    idle_since: Option<Nanos>,
    /// When its pause began: its queue emptied, and it neither launched nor asked for a lease
    /// since (as in the hook, a wait for the token is no pause: a grant forgets it).
    paused_since: Option<Nanos>,
    /// Its last lease's length, and how many of its pauses in a row that reached [`PAUSE_NS`]
    /// went on past [`contended_idle`] of it.
    last_lease_ns: Nanos,
    long_pauses: u8,
    /// Steps done, and each step's time from its first launch to its work done (synchronized) or
    /// launched (not).
    pub steps: u64,
    pub latencies: Vec<Nanos>,
}

impl Process {
    pub fn new(ctx: usize, work: Workload, rules: HookRules) -> Self {
        Process {
            ctx,
            work,
            rules,
            held: None,
            asked: false,
            step_left: 0,
            step_started: work.start,
            ready_at: work.start,
            waiting_sync: false,
            launches: 0,
            last_launch: 0,
            last_single_launch: None,
            launching: VecDeque::new(),
            reported_at: 0,
            idle_since: Some(0),
            paused_since: None,
            last_lease_ns: 0,
            long_pauses: 0,
            steps: 0,
            latencies: Vec::new(),
        }
    }

    /// A process without the hook: it launches whenever its loop does, its queue unbounded.
    pub fn ungated(ctx: usize, work: Workload) -> Self {
        let rules = HookRules {
            queue_ahead_ns: 1_000_000_000,
            interactive: false,
        };
        let mut p = Process::new(ctx, work, rules);
        p.held = Some(Held {
            granted_at: 0,
            deadline: Nanos::MAX / 2,
            revoked_at: None,
            tight: false,
            // held to its own queue bound (`queue_ahead_ns` above), not to a lease's end
            shared: true,
            contended: false,
            asked_ahead: true,
            counted_from: 0,
        });
        p
    }

    pub fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// The daemon granted a lease of `lease_ns` (or extended the one held); `tight`: it keeps a
    /// short queue; `shared`: it runs beside other leases; `contended`: others wait for the
    /// token.
    pub fn granted(
        &mut self,
        now: Nanos,
        lease_ns: Nanos,
        tight: bool,
        shared: bool,
        contended: bool,
    ) {
        self.asked = false;
        // idle counts from the grant: the launch that waited for it comes now
        if self.idle_since.is_some() {
            self.idle_since = Some(now);
        }
        // the hook counts a lease's busy time from its grant or its last extension, and its
        // time in GPU phases in periods from then
        self.last_lease_ns = lease_ns;
        self.reported_at = now;
        // the wait for the token was no pause of its own
        self.paused_since = None;
        self.held = Some(Held {
            granted_at: now,
            deadline: now + lease_ns,
            revoked_at: None,
            tight,
            shared,
            contended,
            asked_ahead: false,
            counted_from: now,
        });
    }

    /// The daemon told it that another lease started beside the one held.
    pub fn joined(&mut self) {
        if let Some(h) = &mut self.held {
            h.shared = true;
        }
    }

    /// The daemon told it that others wait for the lease held.
    pub fn contended(&mut self) {
        if let Some(h) = &mut self.held {
            h.contended = true;
        }
    }

    /// The daemon revoked the lease held.
    pub fn revoked(&mut self, now: Nanos) {
        if let Some(h) = &mut self.held {
            h.revoked_at.get_or_insert(now);
        }
    }

    /// How much GPU time it may have queued at `now`: the hook's queue budget
    /// ([`protocol::queue_budget`]) for the lease it holds (on a lease of its own whatever is
    /// done by the lease's end plus `queue_ahead`, so that a revoked lease drains up to the rest
    /// of it; beside others `queue_ahead`, on a tight lease a quarter of it), and beside others at
    /// least one kernel within `queue_ahead`. The ungated process (time-slicing) holds a lease
    /// marked shared, so that its bound is its own `queue_ahead_ns`.
    fn queue_bound(&self, now: Nanos) -> Nanos {
        let (tight, shared, left) = self.held.map_or((false, true, 0), |h| {
            (h.tight, h.shared, h.deadline.saturating_sub(now))
        });
        let bound = protocol::queue_budget(self.rules.queue_ahead_ns, tight, shared, left);
        if tight || shared {
            bound.max(self.work.kernel_ns.min(self.rules.queue_ahead_ns))
        } else {
            bound
        }
    }

    /// Its pause under way, if one, ends at `now` (a launch, or the gate asking for a lease,
    /// as the hook's `pauses::ended`): counted long or short where it reached [`PAUSE_NS`].
    fn end_pause(&mut self, now: Nanos) {
        if let Some(t) = self.paused_since.take() {
            let pause = now - t;
            if pause >= PAUSE_NS {
                let long = pause >= contended_idle_of(self.last_lease_ns);
                self.long_pauses = if long {
                    self.long_pauses.saturating_add(1)
                } else {
                    0
                };
            }
        }
    }

    fn alive(&self, now: Nanos) -> bool {
        now >= self.work.start && now < self.work.end
    }

    /// Gives the held lease back: what it kept the GPU busy, and its launches and time in GPU
    /// phases since its last report.
    fn release(&mut self, gpu: &mut Gpu, again: bool) -> Ask {
        let (launches, active) = self.report(gpu);
        let h = self.held.take().expect("a lease to release");
        let busy = gpu.sampled_busy(self.ctx, h.counted_from, self.sample_ns());
        self.asked = again;
        Ask::Release {
            busy,
            launches,
            active,
            again,
        }
    }

    /// How often its hook samples its queue while it holds a lease.
    fn sample_ns(&self) -> Nanos {
        if self.rules.interactive {
            INTERACTIVE_SAMPLE_NS
        } else {
            SAMPLE_NS
        }
    }

    /// Its launches and time in GPU phases since its last report, as the hook counts them, and
    /// a new count from now.
    fn report(&mut self, gpu: &mut Gpu) -> (u64, Nanos) {
        let now = gpu.now();
        let active = gpu.sampled_active(
            self.ctx,
            self.reported_at,
            self.sample_ns(),
            &self.launching,
        );
        // the busy time of the lease held counts from its grant or extension
        gpu.forget_before(self.ctx, self.held.map_or(now, |h| h.counted_from));
        self.launching.retain(|&(_, end)| end > now);
        for gap in &mut self.launching {
            gap.0 = gap.0.max(now);
        }
        self.reported_at = now;
        (std::mem::take(&mut self.launches), active)
    }

    /// Acts at `now`: returns what it asks of the daemon (at most one thing; call again after
    /// the answer), and sets the GPU watch and its own next wake-up.
    pub fn act(&mut self, now: Nanos, gpu: &mut Gpu) -> (Option<Ask>, Option<Nanos>) {
        let pending = gpu.pending(self.ctx);
        if pending > 0 {
            self.idle_since = None;
        } else if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
        if pending == 0 && self.paused_since.is_none() {
            self.paused_since = Some(now);
        }
        gpu.watch(self.ctx, None);
        // the lease thread
        if let Some(h) = self.held {
            let idle = self.idle_since.map(|t| now - t);
            if let Some(at) = h.revoked_at {
                if pending == 0 && now >= at + REVOKE_SLACK_NS {
                    // the lease thread gives it back; the next launch asks again
                    return (Some(self.release(gpu, false)), None);
                }
            } else if (self.rules.interactive && idle.is_some_and(|t| t >= INTERACTIVE_IDLE_NS))
                || (h.contended && idle.is_some_and(|t| t >= contended_idle(&h)))
                || (h.contended
                    && self.long_pauses >= PAUSES_LEARNT
                    && idle.is_some_and(|t| t >= PAUSE_NS))
                || (now >= h.deadline + (h.deadline - h.granted_at) / 4
                    && idle.is_some_and(|t| t >= QUIET_NS))
            {
                // an interactive process idle a moment, one others wait for idle a while, or
                // any past its lease and quiet
                return (Some(self.release(gpu, false)), None);
            }
            let left = h.deadline.saturating_sub(now);
            let used = pending > 0 || now.saturating_sub(self.last_launch) < QUIET_NS;
            if left > 0
                && left <= (h.deadline - h.granted_at) / 4
                && !h.asked_ahead
                && !self.rules.interactive
                && h.revoked_at.is_none()
                && used
            {
                if let Some(h) = &mut self.held {
                    h.asked_ahead = true;
                }
                let (launches, active) = self.report(gpu);
                return (Some(Ask::Extend { launches, active }), None);
            }
        }
        let lease_wakes = self.held.map_or([None, None], |h| {
            let length = h.deadline - h.granted_at;
            match h.revoked_at {
                Some(at) => [Some(at + REVOKE_SLACK_NS), None],
                None => [
                    (!h.asked_ahead).then(|| h.deadline - length / 4),
                    Some(h.deadline + length / 4),
                ],
            }
        });
        let contended_wake = self
            .held
            .filter(|h| h.contended)
            .map(|h| contended_idle(&h));
        let idle_wakes = self.idle_since.map_or([None, None, None, None], |t| {
            [
                Some(t + INTERACTIVE_IDLE_NS),
                Some(t + PAUSE_NS),
                Some(t + QUIET_NS),
                contended_wake.map(|d| t + d),
            ]
        });
        // the earliest of the moments still ahead
        let wake = |app: Option<Nanos>| {
            [app]
                .into_iter()
                .chain(lease_wakes)
                .chain(idle_wakes)
                .flatten()
                .filter(|&t| t > now)
                .min()
        };
        // the program
        if !self.alive(now) {
            let app = (now < self.work.start).then_some(self.work.start);
            return (None, wake(app));
        }
        if self.waiting_sync {
            if pending > 0 {
                gpu.watch(self.ctx, Some(0));
                return (None, wake(None));
            }
            self.waiting_sync = false;
            // the wait ends once both its work and the host's launch of it are done
            self.step_done(now.max(self.ready_at));
        }
        if now < self.ready_at {
            return (None, wake(Some(self.ready_at)));
        }
        if self.step_left == 0 {
            self.step_left = if self.warming(now) {
                1
            } else {
                self.work.kernels.max(1)
            };
            self.step_started = now;
        }
        // a launch: through the gate
        let Some(h) = self.held else {
            if self.asked {
                return (None, wake(None));
            }
            self.asked = true;
            self.end_pause(now);
            return (Some(Ask::Acquire), None);
        };
        if h.revoked_at.is_some() || now >= h.deadline {
            if h.revoked_at.is_none() && !h.asked_ahead {
                if let Some(h) = &mut self.held {
                    h.asked_ahead = true;
                }
                let (launches, active) = self.report(gpu);
                return (Some(Ask::Extend { launches, active }), None);
            }
            if pending > 0 {
                gpu.watch(self.ctx, Some(0));
                return (None, wake(None));
            }
            self.end_pause(now);
            return (Some(self.release(gpu, true)), None);
        }
        let bound = self.queue_bound(now);
        if pending >= bound {
            gpu.watch(self.ctx, Some(bound.saturating_sub(self.work.kernel_ns)));
            return (None, wake(None));
        }
        let room = (bound - pending).div_ceil(self.work.kernel_ns.max(1));
        // launches that take host time come a few at a time, each through the gate
        let grain = LAUNCH_GRAIN_NS / self.work.launch_ns.max(1);
        let n = if self.work.graph {
            self.step_left
        } else {
            (room.min(grain).min(u64::from(self.step_left)) as u32).max(1)
        };
        let kernel_ns = if self.warming(now) {
            WARMUP_KERNEL_NS
        } else {
            self.work.kernel_ns
        };
        gpu.enqueue(self.ctx, u64::from(n) * kernel_ns);
        self.end_pause(now);
        self.launches += u64::from(n);
        self.last_launch = now;
        self.launched(now, n);
        self.idle_since = None;
        self.step_left -= n;
        let launch_cost = if self.work.graph {
            self.work.launch_ns
        } else {
            u64::from(n) * self.work.launch_ns
        };
        self.ready_at = now + launch_cost.max(1);
        if self.step_left == 0 {
            if self.work.sync {
                self.waiting_sync = true;
            } else {
                self.step_done(self.ready_at);
            }
        }
        (None, wake(Some(self.ready_at)))
    }

    /// `n` launches at once from `now` on (one, for a graph): one after another `launch_ns`
    /// apart, their short gaps counted as time in GPU phases.
    fn launched(&mut self, now: Nanos, n: u32) {
        if let Some(last) = self.last_single_launch {
            if now > last && now - last < LAUNCH_GAP_NS {
                self.launching.push_back((last, now));
            }
        }
        let spread = if self.work.graph || self.work.launch_ns >= LAUNCH_GAP_NS {
            0
        } else {
            u64::from(n.saturating_sub(1)) * self.work.launch_ns
        };
        if spread > 0 {
            self.launching.push_back((now, now + spread));
        }
        self.last_single_launch = Some(now + spread);
    }

    /// Since when the step under way has been running, if one is (launched in part, or waited
    /// for).
    pub fn step_under_way(&self) -> Option<Nanos> {
        (self.step_left > 0 || self.waiting_sync).then_some(self.step_started)
    }

    /// Whether it is still starting up.
    fn warming(&self, now: Nanos) -> bool {
        now < self.work.start + self.work.warmup_ns
    }

    fn step_done(&mut self, now: Nanos) {
        self.steps += 1;
        self.latencies.push(now - self.step_started);
        match self.work.period_ns {
            Some(p) => {
                let next = self.step_started + p;
                self.ready_at = if next > now {
                    next
                } else {
                    now + self.work.host_ns
                };
            }
            None => self.ready_at = self.ready_at.max(now) + self.work.host_ns,
        }
        if self.warming(now) {
            self.ready_at = self.ready_at.max(self.step_started + WARMUP_STEP_NS);
        }
    }
}

/// How long a process may leave the GPU before it gives back lease `h`, which others wait for.
fn contended_idle(h: &Held) -> Nanos {
    contended_idle_of(h.deadline - h.granted_at)
}

/// The same for a lease of `lease_ns`.
fn contended_idle_of(lease_ns: Nanos) -> Nanos {
    (lease_ns / CONTENDED_IDLE_DIVISOR).max(QUIET_NS)
}

#[cfg(test)]
mod tests {
    use super::super::scenario::plain_loop;
    use super::*;

    const MS: Nanos = 1_000_000;

    /// A loop of one 1 ms kernel waited for, then `host_ns` on the host.
    fn host_loop(host_ns: Nanos) -> Workload {
        Workload {
            launch_ns: 10_000,
            host_ns,
            ..plain_loop(0, Nanos::MAX / 4)
        }
    }

    /// Runs `p` from `now` until it asks for something (answering nothing), at most to `until`:
    /// what it asked and when.
    fn until_it_asks(
        p: &mut Process,
        gpu: &mut Gpu,
        mut now: Nanos,
        until: Nanos,
    ) -> (Option<Ask>, Nanos) {
        while now <= until {
            let (ask, wake) = p.act(now, gpu);
            if ask.is_some() {
                return (ask, now);
            }
            let next = [wake, gpu.next_event()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(until + 1);
            now = next.max(now + 1);
            gpu.advance(now);
        }
        (None, now)
    }

    /// A loop that learnt to give a lease others wait for back early in its pauses does so, and
    /// asks again when its host work is done. Its pause ends there: the wait for the token that
    /// follows is no pause of its own (as in the hook), so a host pause shorter than the lease's
    /// idle bound counts short however long the token takes, and one longer counts long.
    #[test]
    fn a_wait_for_the_token_is_no_part_of_a_pause() {
        for (host_ns, long) in [(2 * MS, false), (5 * MS, true)] {
            let rules = HookRules {
                queue_ahead_ns: 2 * MS,
                interactive: false,
            };
            let mut p = Process::new(0, host_loop(host_ns), rules);
            let mut gpu = Gpu::new(1);
            p.long_pauses = PAUSES_LEARNT;
            let (ask, t) = until_it_asks(&mut p, &mut gpu, 0, 10 * MS);
            assert_eq!(ask, Some(Ask::Acquire));
            // a 20 ms lease others wait for: it may leave the GPU 2.5 ms of it
            p.granted(t, 20 * MS, false, false, true);
            let (ask, t) = until_it_asks(&mut p, &mut gpu, t, 50 * MS);
            assert!(
                matches!(ask, Some(Ask::Release { again: false, .. })),
                "given back early in its pause: {ask:?}"
            );
            let (ask, asked_at) = until_it_asks(&mut p, &mut gpu, t, 50 * MS);
            assert_eq!(ask, Some(Ask::Acquire), "its host work done, it asks again");
            assert!(asked_at - t >= host_ns - MS, "{asked_at} after {t}");
            // the token comes 20 ms later; its next launch ends no pause
            p.granted(asked_at + 20 * MS, 20 * MS, false, false, true);
            until_it_asks(&mut p, &mut gpu, asked_at + 20 * MS, asked_at + 21 * MS);
            let expected = if long { PAUSES_LEARNT + 1 } else { 0 };
            assert_eq!(p.long_pauses, expected, "a host pause of {host_ns} ns");
        }
    }
}
