//! Whether the processes that overlap by demand do better taking turns (without MPS), measured.
//!
//! [`fairness`](super::fairness) lets leases run together wherever the driver's equal turns
//! would divide the GPU as the scheduler would; that says nothing of what running together
//! costs. Processes that wait for each of their short kernels make the driver switch contexts
//! at nearly every kernel: on an H200, two of them of equal requests each went at 0.23 of its
//! rate alone together, where exclusive turns give each about half. Others gain from running
//! together: launch-bound loops (eight of them went 5x faster together than in turns), training
//! steps whose host part overlaps the other's kernels.
//!
//! So the scheduler measures progress where heavy processes may overlap whatever their
//! demands: where every process weighs the same, or so nearly that the driver's equal turns
//! would give saturating ones their due. Each process reports the kernels it launched; while two
//! or more such batch processes are active, the time is cut into *windows*, and now and then one
//! window tries the other *mode* ([`Mode::Turns`]: one batch lease at a time; or
//! [`Mode::Together`]: leases overlap as [`fairness`](super::fairness) allows). The mode that
//! gave the processes more progress is kept. A window lasts one quantum per process and one
//! more (0.15-0.5 s), and longer until the processes made [`LEAST_LAUNCHES`] in it (long
//! kernels), at most [`MOST_WINDOW`]; one whose mode differs from the window's before counts only
//! after [`SETTLE_LEASES`] leases, while the leases of the mode before end. The measure is the
//! geometric mean, over the processes active in both, of each one's launch rate running
//! together over its rate in turns, against [`KEEP_TOGETHER`]. A launch rate is a process's own measure of its progress, whatever its
//! kernels' sizes; comparing each process with itself in two windows next to each other makes
//! the kernels' sizes and the processes' number drop out. A decision that a trial confirms
//! stands twice as long before the next trial, up to [`LONGEST_STAY`].
//!
//! A process's reports are its own word: one that lies about its launches can sway the choice
//! between the two modes (each ratio counts at most [`MOST_GAIN`] either way), never its share
//! or anyone's charges.

use std::collections::BTreeMap;

use super::{Nanos, SessionId};

/// How the batch leases of one GPU run while several processes want it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Leases run side by side as far as [`fairness`](super::fairness) allows; the driver
    /// time-slices the GPU between them.
    Together,
    /// One batch lease at a time: exclusive turns.
    Turns,
}

impl Mode {
    fn other(self) -> Mode {
        match self {
            Mode::Together => Mode::Turns,
            Mode::Turns => Mode::Together,
        }
    }
}

/// Contention before the first trial. Eight launch-bound jobs of a thousand steps each run
/// 1.4-1.9 s together; where the first trial comes before they end, its window of turns (about
/// 0.2 s, one lease at a time) costs them about a tenth of their throughput (H100).
pub const FIRST_TRIAL: Nanos = 1_500_000_000;
/// How long a decision that a trial changed stands before the next trial.
pub const SHORTEST_STAY: Nanos = 2_000_000_000;
/// The longest a decision stands without a trial (each trial that confirms it doubles the time).
pub const LONGEST_STAY: Nanos = 16_000_000_000;
/// Time with fewer than two batch processes active after which the measurements are forgotten
/// (the next processes to contend may be others).
pub const FORGET_AFTER: Nanos = 2_000_000_000;
/// Shortest window; a window also lasts one quantum per active process, and one more, so that
/// each process gets a turn in a window of turns.
const LEAST_WINDOW: Nanos = 150_000_000;
/// Longest window by its processes' number.
const LONGEST_WINDOW: Nanos = 500_000_000;
/// Launches the processes must have made in a window, all together, before it ends: a count is
/// off by the kernels queued at either end, and a window of 0.15 s held about five 16 ms kernels
/// per process. Two processes of such kernels that never synchronize lost a tenth of their rates
/// together, and trials of windows that short kept them together (0.447 / 0.449 of their rates
/// alone at requests 0.5 / 0.5 on an H200, where turns give each about 0.49). All together, not
/// each: where one process launches quickly, its ratio decides, and a window of the worse mode
/// stays short (windows that waited for 32 launches of each let such a process of 50 us kernels
/// beside one of 16 ms kernels run together for seconds, at a fraction of its rate).
const LEAST_LAUNCHES: f64 = 64.0;
/// The longest a window waits for [`LEAST_LAUNCHES`].
const MOST_WINDOW: Nanos = 2_000_000_000;
/// Leases per process a window of a mode other than the one before waits before it counts
/// launches: the leases of the mode before end within a lease, and their queues drain.
const SETTLE_LEASES: Nanos = 2;
/// Running together is kept while it gives at least this part of the progress turns give:
/// turns cost a hand-over (a drained queue) per lease, and leases together need no probes.
pub const KEEP_TOGETHER: f64 = 0.97;
/// The most one process's ratio counts for, either way.
pub const MOST_GAIN: f64 = 16.0;
/// Least part of a window a process's reports must cover for its rate there to count.
const LEAST_COVER: f64 = 0.5;

/// Launches one process reported in a window, and how much of the window its reports covered.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    launches: f64,
    covered: Nanos,
}

/// A window: from its start, the mode's leases settle until `counts_from`; it ends at `due` once
/// its processes made [`LEAST_LAUNCHES`] in it, or [`MOST_WINDOW`] after its start.
#[derive(Debug)]
struct Window {
    mode: Mode,
    start: Nanos,
    counts_from: Nanos,
    due: Nanos,
    /// When it ended (`counts_from` while it runs).
    end: Nanos,
    progress: BTreeMap<SessionId, Progress>,
}

impl Window {
    fn new(mode: Mode, start: Nanos, settle: Nanos, length: Nanos) -> Self {
        let counts_from = start + settle;
        Window {
            mode,
            start,
            counts_from,
            due: counts_from + length,
            end: counts_from,
            progress: BTreeMap::new(),
        }
    }

    /// Whether the window may end at `now`.
    fn over(&self, now: Nanos) -> bool {
        let launches: f64 = self.progress.values().map(|p| p.launches).sum();
        now >= self.due && (launches >= LEAST_LAUNCHES || now >= self.start + MOST_WINDOW)
    }

    /// Launches per second of each process whose reports covered enough of the window (half a
    /// launch added, so that a process that launched nothing has a rate to compare).
    fn rates(&self) -> BTreeMap<SessionId, f64> {
        let least = self.end.saturating_sub(self.counts_from) as f64 * LEAST_COVER;
        self.progress
            .iter()
            .filter(|(_, p)| p.covered > 0 && p.covered as f64 >= least)
            .map(|(&s, p)| (s, (p.launches + 0.5) * 1e9 / p.covered as f64))
            .collect()
    }
}

/// The geometric mean, over the processes measured in both windows, of each one's rate in
/// `together` over its rate in `turns`; `None` with fewer than two such processes, or where
/// nobody launched anything.
pub fn together_gain(
    together: &BTreeMap<SessionId, f64>,
    turns: &BTreeMap<SessionId, f64>,
) -> Option<f64> {
    let most = MOST_GAIN.ln();
    let logs: Vec<f64> = together
        .iter()
        .filter_map(|(s, &t)| turns.get(s).map(|&u| (t / u).ln()))
        .filter(|l| !l.is_nan())
        .map(|l| l.clamp(-most, most))
        .collect();
    if logs.len() < 2 {
        return None;
    }
    Some((logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// The mode of one GPU's batch leases and the trials that choose it.
#[derive(Debug)]
pub struct Trials {
    decided: Mode,
    /// The window running now (none while fewer than two processes contend).
    window: Option<Window>,
    /// The last whole window of the decided mode: what a trial is compared with.
    before: Option<Window>,
    next_trial: Nanos,
    stay: Nanos,
    /// (since, last time) two or more batch processes were active.
    contended: Option<(Nanos, Nanos)>,
    /// When each process last reported its launches.
    reported: BTreeMap<SessionId, Nanos>,
}

impl Default for Trials {
    fn default() -> Self {
        Trials {
            decided: Mode::Together,
            window: None,
            before: None,
            next_trial: 0,
            stay: SHORTEST_STAY,
            contended: None,
            reported: BTreeMap::new(),
        }
    }
}

impl Trials {
    /// The mode in effect: the running window's (a trial's is the other), else the decided one.
    pub fn mode(&self) -> Mode {
        self.window.as_ref().map_or(self.decided, |w| w.mode)
    }

    /// Whether the decision lapsed by `now`: two or more batch processes last contended more
    /// than [`FORGET_AFTER`] before, so that the next [`Trials::tick`] forgets it.
    pub fn lapsed(&self, now: Nanos) -> bool {
        self.contended
            .is_some_and(|(_, last)| now.saturating_sub(last) > FORGET_AFTER)
    }

    /// `session` reports `launches` since its last report, at `now`: they are spread evenly over
    /// that time, and the running window counts the part that falls in it once it counts. A
    /// first report only starts the count.
    pub fn launched(&mut self, session: SessionId, launches: u64, now: Nanos) {
        let Some(from) = self.reported.insert(session, now) else {
            return;
        };
        let Some(w) = self.window.as_mut() else {
            return;
        };
        let span = now.saturating_sub(from);
        let start = from.max(w.counts_from);
        let end = now;
        if span == 0 || end <= start {
            return;
        }
        let inside = end - start;
        let p = w.progress.entry(session).or_default();
        p.launches += launches as f64 * inside as f64 / span as f64;
        p.covered += inside;
    }

    /// A process ended: it counts in no comparison.
    pub fn forget(&mut self, session: SessionId) {
        self.reported.remove(&session);
        for w in self.window.iter_mut().chain(self.before.iter_mut()) {
            w.progress.remove(&session);
        }
    }

    /// Brings the windows up to `now`, with `active` batch processes waiting or holding a lease
    /// and leases of `quantum`: ends the window that ran out (deciding when it was a trial) and
    /// starts the next, a trial when one is due.
    pub fn tick(&mut self, now: Nanos, active: usize, quantum: Nanos) {
        if active >= 2 {
            let since = match self.contended {
                Some((since, _)) if !self.lapsed(now) => since,
                _ => {
                    self.restart(now);
                    now
                }
            };
            self.contended = Some((since, now));
        } else if self.lapsed(now) {
            self.contended = None;
            self.restart(now);
        }
        if self.contended.is_none() {
            return;
        }
        let length =
            (quantum.saturating_mul(active as Nanos + 1)).clamp(LEAST_WINDOW, LONGEST_WINDOW);
        match self.window.take() {
            None => self.window = Some(Window::new(self.decided, now, 0, length)),
            Some(mut w) if w.over(now) => {
                w.end = now;
                let last = w.mode;
                self.close(w, now);
                // a trial needs two processes measured in the window it is compared with
                let trial = now >= self.next_trial
                    && self.before.as_ref().is_some_and(|b| b.rates().len() >= 2);
                let mode = if trial {
                    self.decided.other()
                } else {
                    self.decided
                };
                let settle = if mode == last {
                    0
                } else {
                    quantum.saturating_mul(SETTLE_LEASES)
                };
                self.window = Some(Window::new(mode, now, settle, length));
            }
            Some(w) => self.window = Some(w),
        }
    }

    /// Forgets the windows and the decision: Together, first trial after [`FIRST_TRIAL`].
    fn restart(&mut self, now: Nanos) {
        self.decided = Mode::Together;
        self.window = None;
        self.before = None;
        self.stay = SHORTEST_STAY;
        self.next_trial = now + FIRST_TRIAL;
    }

    /// A window ended at `now`: one of the decided mode is kept to compare the next trial with;
    /// a trial is compared with the one before it, and decides.
    fn close(&mut self, w: Window, now: Nanos) {
        if w.mode == self.decided {
            self.before = Some(w);
            return;
        }
        let Some(before) = self.before.take() else {
            return;
        };
        let (together, turns) = match w.mode {
            Mode::Together => (w.rates(), before.rates()),
            Mode::Turns => (before.rates(), w.rates()),
        };
        let gain = together_gain(&together, &turns);
        tracing::debug!(
            trial = ?w.mode,
            gain,
            measured = together.len().min(turns.len()),
            "trial of together or turns ended"
        );
        if let Some(gain) = gain {
            let best = if gain >= KEEP_TOGETHER {
                Mode::Together
            } else {
                Mode::Turns
            };
            if best == self.decided {
                self.stay = (self.stay * 2).min(LONGEST_STAY);
            } else {
                self.decided = best;
                self.stay = SHORTEST_STAY;
            }
        }
        self.next_trial = now + self.stay;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const Q: Nanos = 20 * MS;

    /// Runs two processes for `secs` seconds, each launching at `rate(mode)` launches per ms and
    /// reporting every quantum; returns the modes in effect at each millisecond.
    fn run(trials: &mut Trials, secs: u64, rate: impl Fn(Mode) -> [u64; 2]) -> Vec<Mode> {
        let mut modes = Vec::new();
        let mut counts = [0u64; 2];
        let start = trials.reported.values().copied().max().unwrap_or(0);
        for t in 1..=secs * 1000 {
            let now = start + t * MS;
            trials.tick(now, 2, Q);
            let mode = trials.mode();
            modes.push(mode);
            for (i, r) in rate(mode).iter().enumerate() {
                counts[i] += r;
            }
            if t % 20 == 0 {
                for (i, c) in counts.iter_mut().enumerate() {
                    trials.launched(i as SessionId, std::mem::take(c), now);
                }
            }
        }
        modes
    }

    fn share(modes: &[Mode], mode: Mode) -> f64 {
        modes.iter().filter(|&&m| m == mode).count() as f64 / modes.len() as f64
    }

    #[test]
    fn processes_that_slow_each_other_down_together_take_turns() {
        let mut t = Trials::default();
        // each at 0.23 of its rate alone together, 0.5 in turns
        let modes = run(&mut t, 30, |m| match m {
            Mode::Together => [23, 23],
            Mode::Turns => [50, 50],
        });
        assert_eq!(t.decided, Mode::Turns);
        let tail = &modes[10_000..];
        assert!(
            share(tail, Mode::Turns) > 0.95,
            "{}",
            share(tail, Mode::Turns)
        );
    }

    #[test]
    fn processes_that_gain_from_running_together_keep_running_together() {
        for together in [[100, 100], [62, 62], [90, 40]] {
            let mut t = Trials::default();
            let modes = run(&mut t, 30, |m| match m {
                Mode::Together => together,
                Mode::Turns => [50, 50],
            });
            assert_eq!(t.decided, Mode::Together, "{together:?}");
            // the trials of turns grow rarer: at most a few windows in 30 s
            assert!(share(&modes, Mode::Turns) < 0.05, "{together:?}");
        }
    }

    #[test]
    fn no_trial_before_processes_contended_for_a_while_nor_with_one_alone() {
        let mut t = Trials::default();
        let modes = run(&mut t, 1, |_| [1, 1]);
        assert!(modes.iter().all(|&m| m == Mode::Together));
        let mut t = Trials::default();
        for ms in 0..10_000 {
            t.tick(ms * MS, 1, Q);
            assert_eq!(t.mode(), Mode::Together);
        }
        assert!(t.window.is_none());
    }

    #[test]
    fn a_decision_is_forgotten_once_processes_stop_contending() {
        let mut t = Trials::default();
        run(&mut t, 10, |m| match m {
            Mode::Together => [10, 10],
            Mode::Turns => [50, 50],
        });
        assert_eq!(t.mode(), Mode::Turns);
        let last = t.contended.unwrap().1;
        t.tick(last + FORGET_AFTER / 2, 1, Q);
        assert_eq!(t.mode(), Mode::Turns, "a short pause keeps it");
        t.tick(last + FORGET_AFTER + 1, 1, Q);
        assert_eq!(t.mode(), Mode::Together);
        t.tick(last + FORGET_AFTER + 2, 2, Q);
        assert_eq!(t.mode(), Mode::Together, "new contention starts together");
    }

    #[test]
    fn a_liar_counts_at_most_its_bounded_ratio() {
        let tog: BTreeMap<SessionId, f64> = [(1, 1e12), (2, 10.0)].into();
        let turns: BTreeMap<SessionId, f64> = [(1, 1.0), (2, 50.0)].into();
        let g = together_gain(&tog, &turns).unwrap();
        assert!((g - (MOST_GAIN * 0.2).sqrt()).abs() < 1e-9, "{g}");
        assert_eq!(together_gain(&tog, &[(1, 1.0)].into()), None, "one process");
        // counts beyond any float: the ratio is still bounded, or left out
        let inf: BTreeMap<SessionId, f64> = [(1, f64::INFINITY), (2, 10.0), (3, 5.0)].into();
        let turns: BTreeMap<SessionId, f64> = [(1, f64::INFINITY), (2, 10.0), (3, 0.0)].into();
        assert_eq!(together_gain(&inf, &turns), Some(MOST_GAIN.sqrt()));
    }

    #[test]
    fn launches_are_spread_over_the_time_they_were_reported_for() {
        let mut t = Trials::default();
        t.launched(1, 0, 0);
        t.launched(2, 0, 0);
        // the first window starts at 100 ms: half of this report's 200 ms falls in it
        t.tick(100 * MS, 2, Q);
        t.launched(1, 100, 200 * MS);
        let p = t.window.as_ref().unwrap().progress[&1];
        assert!((p.launches - 50.0).abs() < 1e-9, "{}", p.launches);
        assert_eq!(p.covered, 100 * MS);
    }

    /// A window of the other mode counts nothing while the leases of the mode before end and
    /// their queues drain.
    #[test]
    fn a_window_of_the_other_mode_counts_once_the_leases_settled() {
        let mut t = Trials::default();
        let mut now = 0;
        while t.mode() == Mode::Together {
            now += MS;
            assert!(now < 3_000 * MS, "no trial");
            t.tick(now, 2, Q);
            if now % Q == 0 {
                t.launched(1, 200, now);
                t.launched(2, 200, now);
            }
        }
        let w = t.window.as_ref().unwrap();
        assert_eq!(w.start, now);
        assert_eq!(w.counts_from - w.start, SETTLE_LEASES * Q);
        let start = w.start;
        t.launched(1, 40, start + Q);
        t.launched(1, 40, start + 3 * Q);
        let p = t.window.as_ref().unwrap().progress[&1];
        assert!((p.launches - 20.0).abs() < 1e-9, "{}", p.launches);
        assert_eq!(p.covered, Q);
    }

    /// Where one process launches quickly, windows end as soon as it launched enough, beside one
    /// that launches little (kernels of 16 ms).
    #[test]
    fn a_process_that_launches_quickly_keeps_windows_short() {
        let mut t = Trials::default();
        let mut longest = 0;
        let mut now = 0;
        for ms in 1..=10_000u64 {
            now = ms * MS;
            t.tick(now, 2, Q);
            if ms % 20 == 0 {
                t.launched(1, 200, now);
                t.launched(2, u64::from(ms % 320 == 0), now);
            }
            if let Some(w) = &t.before {
                longest = longest.max(w.end - w.start);
            }
        }
        assert!(t.contended.is_some_and(|(since, _)| since < now));
        assert!(longest <= 200 * MS, "a window of {} ms", longest / MS);
    }

    /// Windows last until the processes launched enough to compare: processes of kernels of
    /// 16 ms, a little slower together, take turns.
    #[test]
    fn windows_of_long_kernels_last_until_the_processes_launched_enough() {
        let mut t = Trials::default();
        // launches a millisecond, in thousandths: 1 / 16 ms in turns, 0.45 / 0.49 of that
        // together
        let mut acc = [0u64; 2];
        let mut modes = Vec::new();
        let mut counts = [0u64; 2];
        for ms in 1..=60_000u64 {
            let now = ms * MS;
            t.tick(now, 2, Q);
            let mode = t.mode();
            modes.push(mode);
            for i in 0..2 {
                acc[i] += match mode {
                    Mode::Together => 1000 * 45 / 49 / 16,
                    Mode::Turns => 1000 / 16,
                };
                counts[i] += acc[i] / 1000;
                acc[i] %= 1000;
            }
            if ms % 20 == 0 {
                for (i, c) in counts.iter_mut().enumerate() {
                    t.launched(i as SessionId, std::mem::take(c), now);
                }
            }
            if let Some(w) = &t.before {
                let length = w.end - w.counts_from;
                assert!(length >= 500 * MS, "a window of {} ms", length / MS);
            }
        }
        assert_eq!(t.decided, Mode::Turns);
        assert!(share(&modes[30_000..], Mode::Turns) > 0.9);
    }
}
