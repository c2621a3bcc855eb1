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
//! gave the processes more progress is kept: the geometric mean, over the processes active in
//! both, of each one's launch rate running together over its rate in turns, against
//! [`KEEP_TOGETHER`]. A launch rate is a process's own measure of its progress, whatever its
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
/// about 1.4 s together; a trial of turns would cost each of them most of a window.
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
/// Longest window.
const LONGEST_WINDOW: Nanos = 500_000_000;
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

#[derive(Debug)]
struct Window {
    mode: Mode,
    start: Nanos,
    end: Nanos,
    progress: BTreeMap<SessionId, Progress>,
}

impl Window {
    fn new(mode: Mode, start: Nanos, length: Nanos) -> Self {
        Window {
            mode,
            start,
            end: start + length,
            progress: BTreeMap::new(),
        }
    }

    /// Launches per second of each process whose reports covered enough of the window (half a
    /// launch added, so that a process that launched nothing has a rate to compare).
    fn rates(&self) -> BTreeMap<SessionId, f64> {
        let least = (self.end - self.start) as f64 * LEAST_COVER;
        self.progress
            .iter()
            .filter(|(_, p)| p.covered as f64 >= least)
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
    /// that time, and the running window counts the part that falls in it. A first report only
    /// starts the count.
    pub fn launched(&mut self, session: SessionId, launches: u64, now: Nanos) {
        let Some(from) = self.reported.insert(session, now) else {
            return;
        };
        let Some(w) = self.window.as_mut() else {
            return;
        };
        let span = now.saturating_sub(from);
        let start = from.max(w.start);
        let end = now.min(w.end);
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
                Some((since, last)) if now.saturating_sub(last) <= FORGET_AFTER => since,
                _ => {
                    self.restart(now);
                    now
                }
            };
            self.contended = Some((since, now));
        } else if let Some((_, last)) = self.contended {
            if now.saturating_sub(last) > FORGET_AFTER {
                self.contended = None;
                self.restart(now);
            }
        }
        if self.contended.is_none() {
            return;
        }
        let length =
            (quantum.saturating_mul(active as Nanos + 1)).clamp(LEAST_WINDOW, LONGEST_WINDOW);
        match self.window.take() {
            None => self.window = Some(Window::new(self.decided, now, length)),
            Some(w) if now >= w.end => {
                self.close(w, now);
                // a trial needs two processes measured in the window it is compared with
                let trial = now >= self.next_trial
                    && self.before.as_ref().is_some_and(|b| b.rates().len() >= 2);
                let mode = if trial {
                    self.decided.other()
                } else {
                    self.decided
                };
                self.window = Some(Window::new(mode, now, length));
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
        if let Some(gain) = together_gain(&together, &turns) {
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
        t.tick(0, 2, Q);
        t.launched(1, 0, 0);
        // the window ends at 150 ms: half of this report's 200 ms falls in it
        t.launched(1, 100, 200 * MS);
        let p = t.window.as_ref().unwrap().progress[&1];
        assert!((p.launches - 75.0).abs() < 1e-9, "{}", p.launches);
        assert_eq!(p.covered, 150 * MS);
    }
}
