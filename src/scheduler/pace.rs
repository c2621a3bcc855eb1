//! Which processes lose most of their progress beside others (without MPS), measured: each
//! process's kernel launches per second it was charged in leases beside others, against the
//! same in its leases by itself. A lease beside others is charged its part of the time (half
//! of it beside one other), so a process that gets its part of the GPU beside them launches
//! per second charged as it does alone: eight saturating loops together each launch at an
//! eighth of their rate alone, and at their rate alone per second charged.
//!
//! A loop that waits for each of its tiny kernels keeps the GPU busy a tenth of the time alone,
//! and its demand estimate says it fits beside anyone. Beside a process with work queued, each
//! of its waits lasts until the driver's time slice comes back to it: on an H100, a loop of
//! 3 us matmuls (one every 27 us alone) launched one every 0.62 ms beside others (GPU soak seed
//! 26), and got 0.01-0.11 of a due 0.15-0.36 where its leases ran beside others' (1502 of 1534).
//! Such a process progresses only where it has the GPU to itself: while its launches per second
//! charged beside others (in leases it spent in GPU phases, [`Paces::learn`]), over the last
//! [`PACE_MEMORY`], run at less than [`SLOWED`] of the same
//! in its last [`RECENT_LEASES`](super::launch_cost::RECENT_LEASES) leases by
//! itself (whatever their age: a process held beside others for long has
//! few leases by itself, and those few, cut short by a revocation or started behind another's
//! drained queue, read it slow), its leases share the GPU with no other batch lease.
//!
//! Where a process's launch rate beside others is not known for [`PACE_MEMORY`], it may start
//! beside others again: one lease of it measures the rate anew, so a process slowed by one
//! neighbour is not held alone for good once that neighbour has gone.
//!
//! Charged its part, a process that keeps a third of its pace beside two others loses nothing
//! by that measure, and its client's virtual time falls behind, which helps it nothing while it
//! always holds a lease beside theirs: the driver's turns, not the line, divide the GPU then. So
//! a process is also *held back* where its launches per second of lease beside others, over
//! the same [`PACE_MEMORY`], run at less than [`HELD_BACK`] of the same in its leases by itself
//! (leases it spent in GPU phases, [`Paces::learn`]); while its client is owed its request
//! ([`super::guarantee`]), its leases too share the GPU with no other batch lease. Once its
//! client has caught up with its request, it runs beside others again.

use std::collections::{BTreeMap, VecDeque};

use super::launch_cost::keep_recent;
use super::{Nanos, SessionId};

/// How long a lease's launch rate counts.
pub const PACE_MEMORY: Nanos = 10_000_000_000;
/// A process whose launch rate beside others is below this part of its rate by itself runs
/// alone. On an H100 such a loop launched 0.02-0.2 as often per second charged beside others as
/// by itself (GPU soak seeds 26 and 29), and a fifth let it run beside a launch-bound MLP loop at
/// 0.2-0.3 for tens of seconds, where it got a quarter of its due.
pub const SLOWED: f64 = 0.35;
/// A process of a client owed its request ([`super::guarantee`]) that keeps less than this part
/// of its pace alone beside others runs alone ([`Paces::held_back`]).
pub const HELD_BACK: f64 = 0.5;
/// Leases charged less than this teach nothing (a lease given back at once launched a kernel or
/// two).
const LEAST_CHARGED: Nanos = 1_000_000;

/// One lease's launches: when it ended, what it was charged, how long it ran (0 where that
/// says nothing of its pace, [`Paces::learn`]), its launches.
#[derive(Debug, Clone, Copy)]
struct Stretch {
    end: Nanos,
    charged: Nanos,
    wall: Nanos,
    launches: u64,
}

/// Whom a batch lease ran beside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Company {
    /// Nobody, from start to end.
    Nobody,
    /// Another batch lease at some moment.
    Batch,
    /// Interactive leases alone: neither measure (an inference client's requests slow any
    /// process a little, and keep coming).
    Interactive,
}

#[derive(Debug, Default)]
struct Rates {
    alone: VecDeque<Stretch>,
    beside: VecDeque<Stretch>,
}

#[derive(Debug, Default)]
pub struct Paces {
    by_session: BTreeMap<SessionId, Rates>,
}

impl Paces {
    /// A stretch of a batch lease of `session` ended at `now` (its end, or an extension):
    /// `launches` in `wall` time of a lease of `length`, its process in GPU phases for `active`
    /// of it (0: not reported), where it was `charged` that much time, in `company`. The lease
    /// counts for [`Paces::slowdown`] and [`Paces::wall_slowdown`] only where the process was
    /// in GPU phases nearly all of it, for a quarter of its length or more: a program's
    /// start-up leases, its host busy, launch little, and a process that waits between requests
    /// (inference every 5 ms) launches as its period allows, and a lease of it alone that
    /// caught up with requests that had waited launched faster than its period; read against
    /// that, inference processes beside others looked held back to 0.3 of their pace alone,
    /// where they launched as often per second as alone.
    pub fn learn(
        &mut self,
        session: SessionId,
        now: Nanos,
        charged: Nanos,
        (wall, active, length): (Nanos, Nanos, Nanos),
        launches: u64,
        company: Company,
    ) {
        if charged < LEAST_CHARGED || launches == 0 || company == Company::Interactive {
            // a lease that launched nothing (copies, or its work queued before) says nothing
            // of its launches' pace
            return;
        }
        let rates = self.by_session.entry(session).or_default();
        let q = if company == Company::Batch {
            &mut rates.beside
        } else {
            &mut rates.alone
        };
        keep_recent(
            q,
            Stretch {
                end: now,
                charged,
                wall: if wall.saturating_mul(4) >= length
                    && active.saturating_mul(10) >= wall.saturating_mul(9)
                {
                    wall.max(charged)
                } else {
                    0
                },
                launches,
            },
        );
    }

    /// Its launches per second charged beside others, over the last [`PACE_MEMORY`], over the
    /// same in its last leases by itself; `None` where either is unknown. Only leases it spent
    /// in GPU phases count, as for [`Paces::held_back`]: a lease of a program's start-up
    /// (its CUDA context, its allocations, its first kernels beside seven others doing the
    /// same) launches little because its host is busy, and read as a crawl it kept the process
    /// alone for [`PACE_MEMORY`] against the pace of its later leases by itself.
    pub fn slowdown(&self, session: SessionId, now: Nanos) -> Option<f64> {
        self.ratio(session, now, |s| if s.wall > 0 { s.charged } else { 0 })
    }

    /// The same per second of its leases' own length: the part of its pace alone that it kept
    /// beside others, however its time there was charged.
    pub fn wall_slowdown(&self, session: SessionId, now: Nanos) -> Option<f64> {
        self.ratio(session, now, |s| s.wall)
    }

    /// Whether `session` kept less than [`HELD_BACK`] of its pace alone beside others lately
    /// ([`Paces::wall_slowdown`]).
    pub fn held_back(&self, session: SessionId, now: Nanos) -> bool {
        self.wall_slowdown(session, now)
            .is_some_and(|x| x < HELD_BACK)
    }

    fn ratio(
        &self,
        session: SessionId,
        now: Nanos,
        time: impl Fn(&Stretch) -> Nanos,
    ) -> Option<f64> {
        let rates = self.by_session.get(&session)?;
        let alone = rate(rates.alone.iter(), &time)?;
        let beside = rate(
            rates.beside.iter().filter(|s| s.end + PACE_MEMORY >= now),
            &time,
        )?;
        (alone > 0.0).then_some(beside / alone)
    }

    /// Whether `session` runs alone: slowed below [`SLOWED`] beside others lately.
    pub fn slowed(&self, session: SessionId, now: Nanos) -> bool {
        self.slowdown(session, now).is_some_and(|x| x < SLOWED)
    }

    pub fn forget(&mut self, session: SessionId) {
        self.by_session.remove(&session);
    }
}

/// Launches per nanosecond of `stretches`, counting each one's `time` (charged or wall).
fn rate<'a>(
    stretches: impl Iterator<Item = &'a Stretch>,
    time: impl Fn(&Stretch) -> Nanos,
) -> Option<f64> {
    let (t, launches) = stretches
        .filter(|s| time(s) > 0)
        .fold((0, 0), |(c, n), s| (c + time(s), n + s.launches));
    (t > 0).then(|| launches as f64 / t as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// A lease of `session` that ended at `now`, ran `time` and was charged it, in GPU phases
    /// all along: `launches` in `company`.
    fn whole(
        p: &mut Paces,
        session: SessionId,
        now: Nanos,
        time: Nanos,
        launches: u64,
        company: Company,
    ) {
        p.learn(session, now, time, (time, time, time), launches, company);
    }

    #[test]
    fn a_process_whose_launches_beside_others_crawl_runs_alone() {
        let mut p = Paces::default();
        whole(&mut p, 1, 20 * MS, 20 * MS, 720, Company::Nobody);
        assert!(!p.slowed(1, 20 * MS), "nothing known beside others");
        whole(&mut p, 1, 40 * MS, 10 * MS, 30, Company::Batch);
        assert!(p.slowed(1, 40 * MS), "720 a lease alone, 30 in half of one");
        whole(&mut p, 2, 20 * MS, 20 * MS, 800, Company::Nobody);
        whole(&mut p, 2, 40 * MS, 20 * MS / 8, 100, Company::Batch);
        assert!(
            !p.slowed(2, 40 * MS),
            "an eighth of its pace beside seven others, charged an eighth of the time"
        );
        assert!(
            !p.slowed(1, 40 * MS + PACE_MEMORY + 1),
            "its pace beside others forgotten, it may try again"
        );
    }

    /// A lease beside others spent mostly on the host (a program's start-up) says nothing of
    /// its pace there: the process is not taken for one that crawls beside others.
    #[test]
    fn a_lease_spent_on_the_host_beside_others_is_no_crawl() {
        let mut p = Paces::default();
        whole(&mut p, 1, 20 * MS, 20 * MS, 720, Company::Nobody);
        // 20 ms beside seven others, charged an eighth, 5 ms of it in GPU phases: 3 launches
        p.learn(
            1,
            40 * MS,
            20 * MS / 8,
            (20 * MS, 5 * MS, 20 * MS),
            3,
            Company::Batch,
        );
        assert!(!p.slowed(1, 40 * MS), "a start-up lease read as a crawl");
        // the same lease in GPU phases all along is one
        p.learn(
            1,
            60 * MS,
            20 * MS / 8,
            (20 * MS, 20 * MS, 20 * MS),
            3,
            Company::Batch,
        );
        assert!(p.slowed(1, 60 * MS));
    }

    #[test]
    fn a_process_that_keeps_little_of_its_pace_beside_others_is_held_back() {
        let mut p = Paces::default();
        whole(&mut p, 1, 20 * MS, 20 * MS, 800, Company::Nobody);
        // beside two others, charged a third of each lease, launching a third as often
        p.learn(
            1,
            40 * MS,
            7 * MS,
            (20 * MS, 20 * MS, 20 * MS),
            280,
            Company::Batch,
        );
        assert!(
            !p.slowed(1, 40 * MS),
            "its pace per time charged is its pace alone"
        );
        assert!(
            p.held_back(1, 40 * MS),
            "a third of its pace alone per second"
        );
        whole(&mut p, 2, 20 * MS, 20 * MS, 800, Company::Nobody);
        p.learn(
            2,
            40 * MS,
            10 * MS,
            (20 * MS, 20 * MS, 20 * MS),
            600,
            Company::Batch,
        );
        assert!(!p.held_back(2, 40 * MS), "three quarters of its pace alone");
    }

    #[test]
    fn a_lease_mostly_out_of_gpu_phases_says_nothing_of_its_pace_per_second() {
        let mut p = Paces::default();
        // inference every 5 ms: a lease alone that caught up with requests that had waited
        p.learn(
            1,
            20 * MS,
            4 * MS,
            (4 * MS, 4 * MS, 20 * MS),
            32,
            Company::Nobody,
        );
        whole(&mut p, 1, 40 * MS, 20 * MS, 64, Company::Nobody);
        // beside others, in GPU phases a third of each lease: its period's pace
        p.learn(
            1,
            60 * MS,
            10 * MS,
            (20 * MS, 7 * MS, 20 * MS),
            16,
            Company::Batch,
        );
        assert_eq!(
            p.wall_slowdown(1, 60 * MS),
            None,
            "nothing measured beside others"
        );
        assert!(!p.held_back(1, 60 * MS));
        p.learn(
            1,
            80 * MS,
            10 * MS,
            (20 * MS, 20 * MS, 20 * MS),
            40,
            Company::Batch,
        );
        let x = p.wall_slowdown(1, 80 * MS).unwrap();
        assert!(
            (x - 40.0 / 64.0).abs() < 1e-9,
            "{x}: against its whole lease alone only"
        );
        p.learn(1, 100 * MS, 10 * MS, (0, 0, 20 * MS), 40, Company::Batch);
        let y = p.wall_slowdown(1, 100 * MS).unwrap();
        assert!(
            (y - x).abs() < 1e-9,
            "a lease whose GPU phases were not reported: nothing"
        );
    }

    #[test]
    fn short_leases_and_leases_without_launches_teach_nothing() {
        let mut p = Paces::default();
        whole(&mut p, 1, 20 * MS, 20 * MS, 720, Company::Nobody);
        whole(&mut p, 1, 21 * MS, MS / 2, 1, Company::Batch);
        whole(&mut p, 1, 40 * MS, 10 * MS, 0, Company::Batch);
        assert_eq!(
            p.slowdown(1, 40 * MS),
            None,
            "nor do leases that launched nothing"
        );
        whole(&mut p, 1, 60 * MS, 10 * MS, 30, Company::Interactive);
        assert_eq!(
            p.slowdown(1, 60 * MS),
            None,
            "nor leases beside interactive ones only"
        );
        whole(&mut p, 1, 80 * MS, 10 * MS, 30, Company::Batch);
        assert!(p.slowed(1, 80 * MS));
        p.forget(1);
        assert_eq!(p.slowdown(1, 80 * MS), None, "forgotten");
    }
}
