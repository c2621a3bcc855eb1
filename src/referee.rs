//! The referee: what each client is *due* of a GPU over a window of time, and how far what it
//! *got* falls short of that, measured apart from the scheduler's own charges.
//!
//! The promise a scheduler of requests and limits makes, stated once:
//!
//! - A client's *demand* over a window is the fraction of it its processes would have spent in
//!   their GPU phases alone (launching work and waiting for it, as opposed to host work and
//!   pauses): a saturating job 1; a loop that waits on its host half the time 0.5; a job that
//!   ran half the window, half its rate; a loop bound by its launches 1, however little of the
//!   GPU its kernels keep busy. Its *cap* is the smaller of its demand and its limit.
//! - Its *due* share is what water-filling the GPU by the clients' requests gives it: a client
//!   that wants less than its part gets its cap, and what it leaves goes to the others by
//!   request, until every client has its cap or the GPU is divided
//!   ([`fairness::water_fill`]). The GPU divided is the whole of it, or, where a replay of the
//!   same mix under plain time-slicing gives it, what the mix could use ([`capacity`]). With requests that add up to at most 1, every client is due at
//!   least the smaller of its demand and its request; the latency class changes when a client
//!   runs, not how much.
//! - What it *got* is the work its processes did over the window in units of the time in GPU
//!   phases that work takes alone: its progress over its progress alone, times the fraction of
//!   the time it spends in GPU phases alone.
//! - The promise holds in a window when no client got less than its due minus [`TOLERANCE`],
//!   counting only windows that start [`SETTLE_NS`] or more after a change (a process coming or
//!   going, a share changed): shares are kept over leases, not instants.
//!
//! The scheduler's own figure (`USED`, its charges) is checked against what was got the same
//! way: within [`TOLERANCE`].

use crate::scheduler::fairness;
use crate::scheduler::{request_weight, Nanos, Shares};

/// How far below its due a client may fall in a window, in fractions of the GPU.
pub const TOLERANCE: f64 = 0.03;
/// Windows that start sooner than this after a change are not judged.
pub const SETTLE_NS: Nanos = 1_000_000_000;

/// One client over one window, as observed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observed {
    pub shares: Shares,
    /// Fraction of the GPU its processes would have kept busy alone over the window.
    pub demand: f64,
    /// Fraction of the GPU's time its work took, in units of that work's time alone.
    pub got: f64,
    /// The scheduler's own figure for it, where there is one.
    pub used: Option<f64>,
}

/// One client's verdict over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    pub due: f64,
    pub got: f64,
    /// `due - got`: how far it fell short (negative: it got more).
    pub short: f64,
    /// `used - got`, where the scheduler gave a figure.
    pub used_error: Option<f64>,
}

impl Verdict {
    /// Whether it got its due, within [`TOLERANCE`].
    pub fn kept(&self) -> bool {
        self.short <= TOLERANCE
    }
    /// Whether the scheduler's figure matched what it got, within [`TOLERANCE`].
    pub fn used_kept(&self) -> bool {
        self.used_error.is_none_or(|e| e.abs() <= TOLERANCE)
    }
}

/// What each client is due of `capacity` (1: the whole GPU): water-filling by request, each
/// capped at the smaller of its demand and its limit.
pub fn due(clients: &[Observed], capacity: f64) -> Vec<f64> {
    let procs: Vec<(f64, f64)> = clients
        .iter()
        .map(|c| {
            let cap = c.demand.max(0.0).min(c.shares.limit.max(0.0));
            (cap, request_weight(c.shares.request))
        })
        .collect();
    fairness::water_fill(&procs, capacity)
}

/// Each client's verdict over one window of the whole GPU.
pub fn judge(clients: &[Observed]) -> Vec<Verdict> {
    judge_within(clients, 1.0)
}

/// The GPU time a mix could use over a window: the most that either the scheduler or plain
/// time-slicing got done on it (`got`, `sliced`: the clients' got added up), at most the whole
/// GPU. Loops that wait on their host or launch tiny kernels leave gaps and cost context
/// switches that no scheduler without MPS can fill: beside each other they get less than their
/// demands add up to, even where those add up to less than the GPU.
pub fn capacity(got: f64, sliced: f64) -> f64 {
    got.max(sliced).clamp(0.0, 1.0)
}

/// Each client's verdict over one window in which the GPU could give the mix `capacity`
/// ([`capacity`]).
pub fn judge_within(clients: &[Observed], capacity: f64) -> Vec<Verdict> {
    due(clients, capacity)
        .into_iter()
        .zip(clients)
        .map(|(due, c)| Verdict {
            due,
            got: c.got,
            short: due - c.got,
            used_error: c.used.map(|u| u - c.got),
        })
        .collect()
}

/// Whether a window starting `since_change_ns` after the last change is judged at all.
pub fn settled(since_change_ns: Nanos) -> bool {
    since_change_ns >= SETTLE_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(request: f64, limit: f64, demand: f64, got: f64) -> Observed {
        Observed {
            shares: Shares {
                request,
                limit,
                interactive: false,
            },
            demand,
            got,
            used: None,
        }
    }

    fn dues(clients: &[Observed]) -> Vec<f64> {
        due(clients, 1.0)
            .into_iter()
            .map(|d| (d * 1000.0).round() / 1000.0)
            .collect()
    }

    #[test]
    fn saturating_clients_are_due_their_requests_and_the_rest_by_request() {
        let c = [client(0.5, 1.0, 1.0, 0.0), client(0.25, 1.0, 1.0, 0.0)];
        assert_eq!(dues(&c), [0.667, 0.333]);
        let c = [
            client(0.3, 1.0, 1.0, 0.0),
            client(0.3, 1.0, 1.0, 0.0),
            client(0.3, 1.0, 1.0, 0.0),
            client(0.1, 1.0, 0.05, 0.0),
        ];
        assert_eq!(dues(&c), [0.317, 0.317, 0.317, 0.05]);
    }

    #[test]
    fn a_light_client_is_due_its_demand_and_a_limit_caps_what_is_due() {
        let c = [client(0.75, 1.0, 0.2, 0.0), client(0.25, 1.0, 1.0, 0.0)];
        assert_eq!(dues(&c), [0.2, 0.8]);
        let c = [client(0.5, 0.6, 1.0, 0.0), client(0.1, 0.2, 1.0, 0.0)];
        assert_eq!(dues(&c), [0.6, 0.2], "limits leave the GPU idle");
        let c = [client(0.5, 1.0, 0.0, 0.0)];
        assert_eq!(dues(&c), [0.0], "no demand, nothing due");
    }

    #[test]
    fn a_client_short_of_its_due_beyond_the_tolerance_fails_and_the_used_figure_is_checked() {
        let mut c = [client(0.3, 1.0, 1.0, 0.55), client(0.3, 1.0, 1.0, 0.45)];
        c[1].used = Some(0.52);
        let v = judge(&c);
        assert!(v[0].kept());
        assert!(!v[1].kept(), "{v:?}");
        assert!((v[1].short - 0.05).abs() < 1e-9);
        assert!(!v[1].used_kept(), "USED 0.52 for 0.45 got");
        assert!(v[0].used_kept(), "no figure, nothing to check");
        c[1].got = 0.48;
        assert!(judge(&c)[1].kept(), "0.02 short is within the tolerance");
    }

    #[test]
    fn a_mix_that_cannot_fill_the_gpu_divides_what_it_could_use() {
        // two launch-bound loops of demand 0.4 each that, side by side, get 0.33 each done
        // under time-slicing (context switches) and 0.04 / 0.38 under a scheduler
        let c = [client(0.06, 1.0, 0.4, 0.04), client(0.47, 1.0, 0.4, 0.38)];
        let cap = capacity(0.42, 0.66);
        assert!((cap - 0.66).abs() < 1e-9);
        let v = judge_within(&c, cap);
        assert!((v[0].due - 0.26).abs() < 1e-9, "{v:?}");
        assert!(!v[0].kept(), "0.22 short of what the mix could give it");
        assert!(v[1].kept());
        assert_eq!(capacity(1.2, 0.9), 1.0, "never more than the GPU");
        assert_eq!(capacity(0.5, -1.0), 0.5);
    }

    #[test]
    fn windows_right_after_a_change_are_not_judged() {
        assert!(!settled(SETTLE_NS - 1));
        assert!(settled(SETTLE_NS));
    }
}
