//! How much of the GPU each process needs (without MPS): its *demand*, the fraction of a lease
//! its work kept the GPU busy, as a moving estimate per session.
//!
//! A process measures its busy time with markers after its launches: how long its newest work
//! was pending on the GPU. That is its demand only while it runs alone. Beside other processes
//! the driver time-slices the GPU between them, and a process's work also waits for theirs: on an
//! H100, light launch-bound jobs four at a time reported 95% busy, and 10-15% alone. So a lease
//! that ran beside others can only lower the estimate (its sample is an upper bound), and a high
//! sample there is ambiguous: the process may have grown heavy, or only waited. Then the session
//! is due a *probe*: its next lease, a short one, runs alone and measures it again, at most once
//! per [`PROBE_SOON`] after its last measurement alone, and less often (up to [`PROBE_EVERY`])
//! while probes keep finding it light.

use std::collections::BTreeMap;

use super::{Nanos, SessionId};

/// Demand assumed for a process before its first lease was measured.
pub const INITIAL_DEMAND: f64 = 0.5;
/// Weight of the newest lease in a process's demand estimate when it raises it: a process that
/// grew heavy is known as heavy within a lease or two.
const GAIN_UP: f64 = 0.5;
/// The same when it lowers it. A saturating training loop's lease alone may fall on its pauses
/// (a synchronize, the host's part of a step) and sample low now and then: averaged in as fast
/// as a high sample, such leases made two saturating processes of unequal weights take each
/// other for light ones, and overlap (sharing the GPU equally, not by their requests) for
/// seconds, until probes measured them again. It takes several light leases to count as light.
const GAIN_DOWN: f64 = 0.2;
/// A sample beside others at least this high (and above the estimate) asks for a probe.
const PROBE_AT: f64 = 0.5;
/// Least time from the last measurement alone to a probe of a session measured light, once it
/// was measured alone [`SETTLED`] times: at first, and again once a lease alone or a probe found
/// it busy.
pub const PROBE_SOON: Nanos = 250_000_000;
/// The same at most (and for a session known as busy): each probe that finds the session light
/// doubles the time, up to this. A light process that looks busy beside others (it waits for
/// their work) is probed less and less often; one measured light in its start-up (loading data,
/// compiling) that then keeps the GPU busy is probed within about [`PROBE_SOON`] and
/// [`PROBE_PATIENCE`]. With this time from the start, a CuPy loop measured light in its first
/// leases ran beside a saturating one, sharing the GPU equally and not 0.75 / 0.25, for 1.6 s
/// until its probe (on an H200).
pub const PROBE_EVERY: Nanos = 2_000_000_000;
/// How long a session may be due a probe before its probe comes ahead of those first in line
/// ([`Demands::probe_overdue`]). A process due one is probed when it is first in line; one that
/// always finds room beside the running leases may never be.
pub const PROBE_PATIENCE: Nanos = 250_000_000;
/// An estimate from which a probe could hardly rise: a session estimated this busy is not due
/// one for a busy sample beside others, which agrees with it (a light one's samples lower the
/// estimate). A probe runs alone, and the others' leases end for it: three saturating trainers
/// of one client, each probed every [`PROBE_EVERY`] beside an inference client, made the
/// inference wait for the three probes in a row, 16-20 ms, about once a second.
const SURELY_BUSY: f64 = 0.9;
/// Leases alone after which a session's estimate has settled (the first replaces
/// [`INITIAL_DEMAND`], each later one moves it towards its sample): until then an ambiguous
/// sample asks for a probe at once.
const SETTLED: u32 = 3;

/// Least part of its length a lease must have run for its busy time to teach anything. A lease
/// ends early when it is revoked (for an interactive client, or for another's probe), at its
/// holder's next launch, often within a fraction of a millisecond: on an H100, an inference
/// client's leases revoked for three trainers' probes in turn ran 0.3 ms each, its request
/// pending for 0.2 ms of them, and those two samples of 0.65 raised its estimate from 0.24 to
/// 0.55; taken for a busy one, it then held the GPU alone for 44 ms with 0.3 ms of work while the
/// trainers waited.
const LEAST_PART: f64 = 0.25;

/// The part of its `length` (as granted) a lease of `wall_ns` ran, at most 1: the weight of the
/// sample of a lease cut short (revoked), which measures less time than a whole one.
pub fn part(wall_ns: Nanos, length_ns: Nanos) -> f64 {
    if length_ns == 0 {
        return 1.0;
    }
    (wall_ns as f64 / length_ns as f64).min(1.0)
}

/// `from` moved towards `to` by `weight` (all the way at 1).
fn blend(from: f64, to: f64, weight: f64) -> f64 {
    if weight >= 1.0 {
        to
    } else {
        from + weight * (to - from)
    }
}

/// The estimate moved towards `sample`, fast up, slowly down, as far as a sample of `weight`
/// (the part of its lease that ran) moves it.
fn toward(estimate: f64, sample: f64, weight: f64) -> f64 {
    let gain = if sample > estimate {
        GAIN_UP
    } else {
        GAIN_DOWN
    };
    blend(estimate, sample, gain * weight)
}

#[derive(Debug, Clone, Copy)]
struct Demand {
    estimate: f64,
    /// Since when it is due a probe (`None`: not due one).
    due_since: Option<Nanos>,
    /// When the last lease alone ended (`None`: never).
    measured_at: Option<Nanos>,
    /// Leases alone so far.
    alone_leases: u32,
    /// Least time from `measured_at` to the next probe, [`PROBE_SOON`] to [`PROBE_EVERY`].
    probe_after: Nanos,
}

impl Demand {
    /// Least time from the last measurement alone to a probe: [`Demand::probe_after`] for a
    /// process measured light, [`PROBE_EVERY`] for one already known as busy (a probe would
    /// change little: its lease runs alone anyway).
    fn probe_wait(&self) -> Nanos {
        if self.estimate < PROBE_AT {
            self.probe_after
        } else {
            PROBE_EVERY
        }
    }

    /// A lease alone (or a probe) ended at `now`: its busy fraction was `sample`, and it gave
    /// `estimate`. Found busy, the process is probed soon again once it is light.
    fn measured_alone(&mut self, estimate: f64, sample: f64, now: Nanos) {
        if sample >= PROBE_AT {
            self.probe_after = PROBE_SOON;
        }
        self.estimate = estimate;
        self.due_since = None;
        self.measured_at = Some(now);
        self.alone_leases = self.alone_leases.saturating_add(1);
    }
}

/// The busy fraction of a lease of `wall_ns` whose work was pending `busy_ns` (`None` for an
/// empty lease).
fn sample(busy_ns: Nanos, wall_ns: Nanos) -> Option<f64> {
    (wall_ns != 0).then(|| busy_ns.min(wall_ns) as f64 / wall_ns as f64)
}

#[derive(Debug, Default)]
pub struct Demands {
    sessions: BTreeMap<SessionId, Demand>,
}

impl Demands {
    /// A session the scheduler sees for the first time starts at [`INITIAL_DEMAND`].
    pub fn add(&mut self, session: SessionId) {
        self.sessions.entry(session).or_insert(Demand {
            estimate: INITIAL_DEMAND,
            due_since: None,
            measured_at: None,
            alone_leases: 0,
            probe_after: PROBE_SOON,
        });
    }

    pub fn remove(&mut self, session: SessionId) {
        self.sessions.remove(&session);
    }

    /// The estimate, `None` for a session not seen.
    pub fn get(&self, session: SessionId) -> Option<f64> {
        self.sessions.get(&session).map(|d| d.estimate)
    }

    /// Whether the session's next lease must run alone, to measure it.
    pub fn probe_due(&self, session: SessionId) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|d| d.due_since.is_some())
    }

    /// Whether the session has been due a probe for [`PROBE_PATIENCE`] or longer.
    pub fn probe_overdue(&self, session: SessionId, now: Nanos) -> bool {
        self.sessions
            .get(&session)
            .and_then(|d| d.due_since)
            .is_some_and(|since| now.saturating_sub(since) >= PROBE_PATIENCE)
    }

    /// Whether the session never ran a lease alone.
    pub fn never_alone(&self, session: SessionId) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|d| d.alone_leases == 0)
    }

    /// A probe of `session` (a short lease alone) ended at `now` after `wall_ns`, its work
    /// pending for `busy_ns` of it. A probe settles a sample beside others that was high: its
    /// own sample, when higher than the estimate, becomes the estimate; a lower one is
    /// inconclusive and changes nothing (but the first, which replaces the guess). A probe is a
    /// quarter of a lease, and often starts the process's work from an empty queue, after a
    /// synchronize: on an H100 a transformer training loop's probes sampled 0.14-0.79 (about
    /// half on average), its leases alone about 0.5-1.0. Measured light in their start-up, a
    /// pair of them of unequal weights had probes move their estimates up and down by turns,
    /// and overlapped (sharing the GPU equally, not by their requests) for eight seconds. A
    /// light process is still known as light: its samples beside others lower the estimate.
    ///
    /// `weight` is 1 for a whole probe; one cut short (revoked for an interactive client) moves
    /// the estimate by the [`part`] of it that ran, and under [`LEAST_PART`] not at all.
    pub fn learn_probe(
        &mut self,
        session: SessionId,
        busy_ns: Nanos,
        wall_ns: Nanos,
        weight: f64,
        now: Nanos,
    ) {
        let (Some(d), Some(sample)) = (self.sessions.get_mut(&session), sample(busy_ns, wall_ns))
        else {
            return;
        };
        if weight < LEAST_PART {
            return;
        }
        let estimate = if d.alone_leases == 0 || sample > d.estimate {
            blend(d.estimate, sample, weight)
        } else {
            d.estimate
        };
        if sample < PROBE_AT {
            d.probe_after = d.probe_after.saturating_mul(2).min(PROBE_EVERY);
        }
        d.measured_alone(estimate, sample, now);
    }

    /// A lease of `session` ended at `now` after `wall_ns`, its work pending for `busy_ns` of it
    /// (at most the wall time); `alone`: no other lease ran during any of it. `weight` is 1 for a
    /// lease that ran its course; one cut short (revoked) weighs the [`part`] of its length that
    /// ran, and under [`LEAST_PART`] nothing.
    pub fn learn(
        &mut self,
        session: SessionId,
        busy_ns: Nanos,
        wall_ns: Nanos,
        weight: f64,
        alone: bool,
        now: Nanos,
    ) {
        let (Some(d), Some(sample)) = (self.sessions.get_mut(&session), sample(busy_ns, wall_ns))
        else {
            return;
        };
        if weight < LEAST_PART {
            return;
        }
        if alone {
            // the first measurement replaces the guess: a light process (an inference client)
            // known as light at once can start beside the others
            let estimate = if d.alone_leases == 0 {
                blend(d.estimate, sample, weight)
            } else {
                toward(d.estimate, sample, weight)
            };
            d.measured_alone(estimate, sample, now);
            return;
        }
        if sample < d.estimate {
            d.estimate = toward(d.estimate, sample, weight);
        } else if sample >= PROBE_AT
            && d.estimate < SURELY_BUSY
            && (d.alone_leases < SETTLED
                || d.measured_at
                    .is_none_or(|t| now.saturating_sub(t) >= d.probe_wait()))
        {
            d.due_since.get_or_insert(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn leases_alone_set_the_estimate() {
        let mut d = Demands::default();
        d.add(1);
        assert_eq!(d.get(1), Some(INITIAL_DEMAND));
        for i in 1..=10 {
            d.learn(1, 2 * MS, 20 * MS, 1.0, true, i * 20 * MS);
        }
        assert!((d.get(1).unwrap() - 0.1).abs() < 0.01, "{:?}", d.get(1));
        assert!(!d.probe_due(1));
        d.remove(1);
        assert_eq!(d.get(1), None);
    }

    #[test]
    fn leases_beside_others_only_lower_it_and_ask_for_a_probe_when_high() {
        let mut d = Demands::default();
        d.add(1);
        d.learn(1, 2 * MS, 20 * MS, 1.0, true, 0);
        let after_alone = d.get(1).unwrap();
        // waited for the others: reported busy, but the estimate stays
        d.learn(1, 19 * MS, 20 * MS, 1.0, false, 20 * MS);
        assert_eq!(d.get(1).unwrap(), after_alone);
        assert!(d.probe_due(1), "not settled yet: probed at once");
        for i in 0..SETTLED {
            d.learn(1, 2 * MS, 20 * MS, 1.0, true, (21 + i as u64) * MS);
        }
        let after_alone = d.get(1).unwrap();
        d.learn(1, 19 * MS, 20 * MS, 1.0, false, 30 * MS);
        assert_eq!(d.get(1).unwrap(), after_alone);
        assert!(!d.probe_due(1), "measured alone less than PROBE_SOON ago");
        d.learn(1, 19 * MS, 20 * MS, 1.0, false, PROBE_SOON + 30 * MS);
        assert!(d.probe_due(1));
        d.learn(1, 20 * MS, 20 * MS, 1.0, true, PROBE_SOON + 31 * MS);
        assert!(!d.probe_due(1));
        assert!(d.get(1).unwrap() > after_alone);
        // a low sample beside others is evidence enough
        let high = d.get(1).unwrap();
        d.learn(1, 0, 20 * MS, 1.0, false, PROBE_SOON + 32 * MS);
        assert!(d.get(1).unwrap() < high);
    }

    #[test]
    fn the_first_lease_alone_replaces_the_guess() {
        let mut d = Demands::default();
        d.add(1);
        d.learn(1, MS, 20 * MS, 1.0, true, 20 * MS);
        assert_eq!(d.get(1), Some(0.05));
        d.learn(1, 3 * MS, 20 * MS, 1.0, true, 40 * MS);
        assert_eq!(d.get(1), Some(0.1), "later ones are averaged");
    }

    /// A saturating process whose lease alone fell on a pause stays heavy: two such processes of
    /// unequal weights must not take each other for light ones. Light leases in a row make it
    /// light; a busy one makes it heavy again at once.
    #[test]
    fn a_pause_does_not_make_a_busy_process_light() {
        let mut d = Demands::default();
        d.add(1);
        for i in 0..4 {
            d.learn(1, 19 * MS, 20 * MS, 1.0, true, i * 20 * MS);
        }
        d.learn(1, 6 * MS, 20 * MS, 1.0, true, 100 * MS);
        assert!(d.get(1).unwrap() > 0.8, "{:?}", d.get(1));
        for i in 0..10 {
            d.learn(1, 2 * MS, 20 * MS, 1.0, true, (120 + 20 * i) * MS);
        }
        assert!(d.get(1).unwrap() < 0.2, "{:?}", d.get(1));
        d.learn(1, 20 * MS, 20 * MS, 1.0, true, 400 * MS);
        assert!(d.get(1).unwrap() > 0.5, "{:?}", d.get(1));
    }

    #[test]
    fn a_probe_raises_the_estimate_to_its_sample_and_never_lowers_it() {
        let mut d = Demands::default();
        d.add(1);
        d.learn_probe(1, MS, 5 * MS, 1.0, 0);
        assert_eq!(d.get(1), Some(0.2), "the first replaces the guess");
        d.learn(1, 5 * MS, 5 * MS, 1.0, false, MS);
        assert!(d.probe_due(1), "busy beside others");
        d.learn_probe(1, 4 * MS, 5 * MS, 1.0, 2 * MS);
        assert_eq!(d.get(1), Some(0.8), "higher: taken as it is");
        assert!(!d.probe_due(1));
        d.learn_probe(1, MS, 5 * MS, 1.0, 3 * MS);
        assert_eq!(d.get(1), Some(0.8), "lower: inconclusive");
        d.learn(1, MS, 5 * MS, 1.0, false, 4 * MS);
        assert!(
            d.get(1).unwrap() < 0.8,
            "a low sample beside others lowers it"
        );
    }

    #[test]
    fn a_probe_is_overdue_after_the_patience_since_it_was_first_due() {
        let mut d = Demands::default();
        d.add(1);
        d.learn(1, MS, 20 * MS, 1.0, true, 0);
        d.learn(1, 20 * MS, 20 * MS, 1.0, false, 20 * MS);
        assert!(d.probe_due(1) && !d.probe_overdue(1, 20 * MS));
        // later busy leases beside others do not move the time it became due
        d.learn(1, 20 * MS, 20 * MS, 1.0, false, 200 * MS);
        assert!(!d.probe_overdue(1, PROBE_PATIENCE + 19 * MS));
        assert!(d.probe_overdue(1, PROBE_PATIENCE + 20 * MS));
        d.learn_probe(1, 5 * MS, 5 * MS, 1.0, PROBE_PATIENCE + 25 * MS);
        assert!(!d.probe_due(1) && !d.probe_overdue(1, 10 * PROBE_PATIENCE));
    }

    /// A process measured light in its start-up that then keeps the GPU busy beside others is
    /// probed [`PROBE_SOON`] after its last lease alone; each probe that finds it light doubles
    /// the time to the next, up to [`PROBE_EVERY`]; one that finds it busy makes it short again
    /// (once the process is light again: one known as busy waits [`PROBE_EVERY`]).
    #[test]
    fn probes_come_soon_and_less_often_while_they_find_the_process_light() {
        let mut d = Demands::default();
        d.add(1);
        let mut t = 0;
        for _ in 0..SETTLED {
            t += 20 * MS;
            d.learn(1, MS, 20 * MS, 1.0, true, t);
        }
        d.learn(1, 20 * MS, 20 * MS, 1.0, false, t + PROBE_SOON - MS);
        assert!(!d.probe_due(1));
        t += PROBE_SOON;
        d.learn(1, 20 * MS, 20 * MS, 1.0, false, t);
        assert!(d.probe_due(1));
        let mut wait = PROBE_SOON;
        for _ in 0..5 {
            d.learn_probe(1, MS, 5 * MS, 1.0, t);
            wait = (wait * 2).min(PROBE_EVERY);
            d.learn(1, 20 * MS, 20 * MS, 1.0, false, t + wait - MS);
            assert!(!d.probe_due(1), "light at its last probe: {} ms", wait / MS);
            t += wait;
            d.learn(1, 20 * MS, 20 * MS, 1.0, false, t);
            assert!(d.probe_due(1));
        }
        assert_eq!(wait, PROBE_EVERY);
        // busy at a probe: known as busy, probed no sooner than PROBE_EVERY
        d.learn_probe(1, 5 * MS, 5 * MS, 1.0, t);
        d.learn(1, 20 * MS, 20 * MS, 1.0, false, t + PROBE_SOON);
        assert!(!d.probe_due(1), "known as busy");
        // light again alone, then busy beside others: soon
        while d.get(1).unwrap() >= PROBE_AT {
            t += 20 * MS;
            d.learn(1, MS, 20 * MS, 1.0, true, t);
        }
        d.learn(1, 20 * MS, 20 * MS, 1.0, false, t + PROBE_SOON);
        assert!(d.probe_due(1), "busy at its last probe, light since");
    }

    #[test]
    fn a_lease_cut_short_weighs_the_part_of_it_that_ran() {
        let mut d = Demands::default();
        d.add(1);
        for i in 1..=10 {
            d.learn(1, 5 * MS, 20 * MS, 1.0, true, i * 20 * MS);
        }
        let light = d.get(1).unwrap();
        assert!((light - 0.25).abs() < 0.01, "{light}");
        // revoked at its next launch: 0.3 ms, its request pending for 0.2 ms of it
        d.learn(
            1,
            MS / 5,
            3 * MS / 10,
            part(3 * MS / 10, 20 * MS),
            true,
            300 * MS,
        );
        d.learn(
            1,
            MS / 5,
            3 * MS / 10,
            part(3 * MS / 10, 20 * MS),
            false,
            301 * MS,
        );
        assert_eq!(d.get(1).unwrap(), light, "too short to teach anything");
        assert!(!d.probe_due(1));
        // half a lease: half the move of a whole one
        let mut whole = Demands::default();
        whole.add(1);
        for i in 1..=10 {
            whole.learn(1, 5 * MS, 20 * MS, 1.0, true, i * 20 * MS);
        }
        whole.learn(1, 20 * MS, 20 * MS, 1.0, true, 400 * MS);
        d.learn(1, 10 * MS, 10 * MS, part(10 * MS, 20 * MS), true, 400 * MS);
        let (moved_half, moved_whole) = (d.get(1).unwrap() - light, whole.get(1).unwrap() - light);
        assert!(
            (moved_half - moved_whole / 2.0).abs() < 1e-9,
            "{moved_half} {moved_whole}"
        );
        // a probe cut short in the same way
        d.learn_probe(1, MS / 5, 3 * MS / 10, part(3 * MS / 10, 5 * MS), 500 * MS);
        assert_eq!(d.get(1).unwrap(), light + moved_half);
    }

    #[test]
    fn a_session_surely_busy_is_not_probed_for_busy_samples_beside_others() {
        let mut d = Demands::default();
        for (sid, busy) in [(1, 19 * MS), (2, 12 * MS)] {
            d.add(sid);
            for i in 1..=SETTLED as u64 {
                d.learn(sid, busy, 20 * MS, 1.0, true, i * 20 * MS);
            }
            d.learn(sid, 20 * MS, 20 * MS, 1.0, false, PROBE_EVERY + 100 * MS);
        }
        assert!(d.get(1).unwrap() >= SURELY_BUSY && !d.probe_due(1));
        assert!(d.get(2).unwrap() < SURELY_BUSY && d.probe_due(2));
        // light beside others: the estimate falls as before, and a busy sample asks again
        for i in 0..10 {
            d.learn(
                1,
                2 * MS,
                20 * MS,
                1.0,
                false,
                PROBE_EVERY + (120 + 20 * i) * MS,
            );
        }
        d.learn(1, 20 * MS, 20 * MS, 1.0, false, 2 * PROBE_EVERY);
        assert!(d.probe_due(1));
    }

    #[test]
    fn a_session_never_measured_alone_is_probed_at_once() {
        let mut d = Demands::default();
        d.add(7);
        d.learn(7, 20 * MS, 20 * MS, 1.0, false, MS);
        assert!(d.probe_due(7));
    }
}
