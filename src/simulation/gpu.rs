//! The simulated GPU: one context per process, each with the GPU time of the work it queued
//! (as a fluid: kernels are preempted at the ends of time slices, as compute preemption does),
//! and the driver's time-slicing between the contexts that have work: the current one runs until
//! its slice ends or its queue empties, then the next with work in round-robin order takes the
//! GPU, after a context switch.

use std::collections::VecDeque;

use crate::scheduler::Nanos;

/// The driver's time slice between contexts with work queued.
pub const TIMESLICE_NS: Nanos = 2_000_000;
/// The GPU time a switch to another context costs (nobody's work runs meanwhile).
pub const SWITCH_NS: Nanos = 50_000;

#[derive(Debug, Default, Clone)]
struct Context {
    /// GPU time of the work queued and not yet run.
    pending: Nanos,
    /// GPU time its work ran, in all.
    ran: Nanos,
    /// Wake its process once `pending` falls to this while it runs.
    watch: Option<Nanos>,
    /// Since when its queue has held work (while it does).
    pending_since: Nanos,
    /// The stretches its queue held work, oldest first (trimmed by [`Gpu::sampled_busy`]).
    stretches: VecDeque<(Nanos, Nanos)>,
}

impl Context {
    /// Whether its queue held work at `t` (in a stretch kept, or the one open now).
    fn queued_at(&self, t: Nanos) -> bool {
        let open = (self.pending > 0).then_some((self.pending_since, Nanos::MAX));
        self.stretches
            .iter()
            .chain(open.iter())
            .any(|&(a, b)| a <= t && t < b)
    }
}

#[derive(Debug, Clone)]
pub struct Gpu {
    ctxs: Vec<Context>,
    /// The context running, the end of its slice, and until when a switch to it lasts.
    current: Option<usize>,
    /// The context that ran last: one that comes back to an idle GPU after it costs no switch.
    last: Option<usize>,
    slice_end: Nanos,
    switched_at: Nanos,
    now: Nanos,
}

impl Gpu {
    pub fn new(contexts: usize) -> Self {
        Gpu {
            ctxs: vec![Context::default(); contexts],
            current: None,
            last: None,
            slice_end: 0,
            switched_at: 0,
            now: 0,
        }
    }

    pub fn enqueue(&mut self, ctx: usize, ns: Nanos) {
        let c = &mut self.ctxs[ctx];
        if c.pending == 0 && ns > 0 {
            c.pending_since = self.now;
        }
        c.pending += ns;
    }

    /// How long the queue of `ctx` held work from `from` to now, as the hook measures it:
    /// `now - from` times the share of samples every `every` ns from `from` on that found work
    /// queued (whether work is queued now, without a sample). Forgets the stretches before
    /// `from`: the next call starts no earlier.
    pub fn sampled_busy(&mut self, ctx: usize, from: Nanos, every: Nanos) -> Nanos {
        let now = self.now;
        self.forget_before(ctx, from);
        let c = &self.ctxs[ctx];
        let wall = now.saturating_sub(from);
        let samples = wall / every.max(1);
        if samples == 0 {
            return if c.pending > 0 { wall } else { 0 };
        }
        let hits = (1..=samples)
            .filter(|k| c.queued_at(from + k * every))
            .count() as Nanos;
        wall * hits / samples
    }

    /// The time from `from` to now that the process of `ctx` was in its GPU phases, as the hook
    /// measures it ([`crate::protocol::Request::Release`]'s `active_ns`): in periods of `every`
    /// from `from` on (the last one cut at now), all of a period whose sample at its end found
    /// work queued (for the last, work queued now), else the part of it in `launching` (the
    /// process's short gaps between launches), at most the period. Call before
    /// [`Gpu::sampled_busy`] of a later `from`, which forgets the stretches before it.
    pub fn sampled_active(
        &self,
        ctx: usize,
        from: Nanos,
        every: Nanos,
        launching: &VecDeque<(Nanos, Nanos)>,
    ) -> Nanos {
        let now = self.now;
        let c = &self.ctxs[ctx];
        let in_gaps = |a: Nanos, b: Nanos| -> Nanos {
            launching
                .iter()
                .map(|&(x, y)| y.min(b).saturating_sub(x.max(a)))
                .sum()
        };
        let every = every.max(1);
        let mut active = 0;
        let mut start = from;
        while start < now {
            let end = (start + every).min(now);
            let pending = if end == now {
                c.pending > 0
            } else {
                c.queued_at(end)
            };
            active += if pending {
                end - start
            } else {
                in_gaps(start, end).min(end - start)
            };
            start = end;
        }
        active
    }

    /// Forgets the stretches of `ctx`'s queue that ended by `t` (no sample from `t` on needs
    /// them).
    pub fn forget_before(&mut self, ctx: usize, t: Nanos) {
        let c = &mut self.ctxs[ctx];
        while c.stretches.front().is_some_and(|&(_, end)| end <= t) {
            c.stretches.pop_front();
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    pub fn pending(&self, ctx: usize) -> Nanos {
        self.ctxs[ctx].pending
    }

    pub fn ran(&self, ctx: usize) -> Nanos {
        self.ctxs[ctx].ran
    }

    /// Wake the process of `ctx` when its queue falls to `level` (`None`: no wake).
    pub fn watch(&mut self, ctx: usize, level: Option<Nanos>) {
        self.ctxs[ctx].watch = level;
    }

    /// The next context with work after `from`, round-robin.
    fn next_with_work(&self, from: Option<usize>) -> Option<usize> {
        let n = self.ctxs.len();
        let start = from.map_or(0, |c| c + 1);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&c| self.ctxs[c].pending > 0)
    }

    /// Picks the context to run at `self.now` if the current one is done or out of its slice.
    fn schedule(&mut self) {
        let keep = self.current.filter(|&c| {
            self.ctxs[c].pending > 0
                && (self.now < self.slice_end || self.next_with_work(Some(c)) == Some(c))
        });
        if keep.is_some() {
            if self.now >= self.slice_end {
                self.slice_end = self.now + TIMESLICE_NS;
            }
            return;
        }
        let next = self.next_with_work(self.current.or(self.last));
        if next.is_some() && next != self.last {
            self.switched_at = self.now + SWITCH_NS;
        } else if next.is_some() {
            self.switched_at = self.now;
        }
        self.current = next;
        self.last = next.or(self.last);
        self.slice_end = self.now + TIMESLICE_NS;
    }

    /// Runs the GPU up to `to`.
    pub fn advance(&mut self, to: Nanos) {
        while self.now < to {
            self.schedule();
            let Some(c) = self.current else {
                self.now = to;
                return;
            };
            let until = self.step_end(c).min(to);
            let from = self.now;
            let running_from = self.switched_at.max(from).min(until);
            let ran = (until - running_from).min(self.ctxs[c].pending);
            let ctx = &mut self.ctxs[c];
            ctx.pending -= ran;
            ctx.ran += ran;
            if ctx.pending == 0 && ran > 0 {
                let since = ctx.pending_since;
                ctx.stretches.push_back((since, until));
            }
            self.now = until;
        }
    }

    /// When the running context `c` next changes state: its queue empties or reaches its watch
    /// level, or its slice ends.
    fn step_end(&self, c: usize) -> Nanos {
        let ctx = &self.ctxs[c];
        let start = self.switched_at.max(self.now);
        let mut end = start + ctx.pending;
        if let Some(level) = ctx.watch.filter(|&l| l < ctx.pending) {
            end = end.min(start + ctx.pending - level);
        }
        end.min(self.slice_end.max(self.now + 1))
    }

    /// When something next happens on the GPU (a queue empties, a watch level is reached, a
    /// slice ends), if anything runs.
    pub fn next_event(&mut self) -> Option<Nanos> {
        self.schedule();
        self.current.map(|c| self.step_end(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_context_runs_its_work_back_to_back() {
        let mut g = Gpu::new(2);
        g.enqueue(0, 5_000_000);
        g.advance(3_000_000);
        assert_eq!(g.ran(0), 3_000_000 - SWITCH_NS);
        g.advance(10_000_000);
        assert_eq!(g.ran(0), 5_000_000);
        assert_eq!(g.pending(0), 0);
    }

    #[test]
    fn a_context_back_to_an_idle_gpu_after_it_costs_no_switch() {
        let mut g = Gpu::new(2);
        g.enqueue(0, 1_000_000);
        g.advance(2_000_000);
        g.enqueue(0, 1_000_000);
        g.advance(3_000_000);
        assert_eq!(g.ran(0), 2_000_000, "one switch, at the start");
        g.enqueue(1, 1_000_000);
        g.advance(4_000_000);
        assert_eq!(g.ran(1), 1_000_000 - SWITCH_NS, "another context: a switch");
    }

    #[test]
    fn contexts_with_work_take_equal_slices() {
        let mut g = Gpu::new(2);
        g.enqueue(0, 100_000_000);
        g.enqueue(1, 100_000_000);
        g.advance(100_000_000);
        let (a, b) = (g.ran(0) as f64, g.ran(1) as f64);
        assert!((a - b).abs() / a < 0.05, "{a} {b}");
        assert!(
            a + b > 0.95 * 100_000_000.0,
            "switches cost {}",
            1e8 - a - b
        );
        assert_eq!(
            g.sampled_busy(0, 0, 250_000),
            100_000_000,
            "work queued all along"
        );
    }

    #[test]
    fn active_time_is_the_sampled_queue_and_the_launching() {
        let mut g = Gpu::new(1);
        g.enqueue(0, 1_000_000);
        g.advance(3_000_000);
        // queued from 0 to 1.05 ms: its four periods whose samples found work; launching from
        // 2.1 to 2.2 ms and from 2.6 to 2.95 ms
        let launching = VecDeque::from([(2_100_000, 2_200_000), (2_600_000, 2_950_000)]);
        assert_eq!(
            g.sampled_active(0, 0, 250_000, &launching),
            1_000_000 + 100_000 + 350_000
        );
        assert_eq!(g.sampled_active(0, 0, 250_000, &VecDeque::new()), 1_000_000);
        assert_eq!(
            g.sampled_active(0, 2_900_000, 250_000, &launching),
            50_000,
            "the last period cut at now"
        );
    }

    /// Busy time as the hook reports it: the share of quarter-millisecond samples that found
    /// work queued, times the time since the lease began.
    #[test]
    fn busy_time_comes_from_samples_of_the_queue() {
        let mut g = Gpu::new(1);
        g.enqueue(0, 1_000_000);
        g.advance(2_000_000);
        // queued from 0 to 1.05 ms (a switch, then 1 ms of work): 4 of 8 samples
        assert_eq!(g.sampled_busy(0, 0, 250_000), 1_000_000);
        g.enqueue(0, 1_000_000);
        g.advance(2_100_000);
        assert_eq!(
            g.sampled_busy(0, 2_000_000, 250_000),
            100_000,
            "no sample yet: work queued now counts the whole time"
        );
        g.advance(3_100_000);
        assert_eq!(
            g.sampled_busy(0, 2_000_000, 250_000),
            825_000,
            "queued from 2 to 3 ms (no switch back to it): 3 of 4"
        );
        g.advance(4_000_000);
        assert_eq!(
            g.sampled_busy(0, 3_500_000, 250_000),
            0,
            "idle since 3 ms: 0 of 2"
        );
    }

    #[test]
    fn a_watch_level_is_an_event() {
        let mut g = Gpu::new(1);
        g.enqueue(0, 10_000_000);
        g.watch(0, Some(9_000_000));
        assert_eq!(g.next_event(), Some(SWITCH_NS + 1_000_000));
    }
}
