//! Whether leases may run side by side without MPS, by what the driver would then give each.
//!
//! Without MPS the driver time-slices the GPU between the processes that have work queued, in
//! equal turns: a process that needs less than an equal turn takes what it needs, and the others
//! split the rest evenly. That is the scheduler's own division (each process its request's share,
//! idle share to whoever has work) when the processes' weights are equal, or when the light ones
//! leave everyone at least what its weight is due. So a set of processes may hold leases together
//! when *water-filling* the GPU among them by their demands gives the same division with equal
//! weights as with their own ([`fair_together`]).

/// Fraction of the GPU that overlapping leases may fill: the driver's switches between contexts
/// cost some of it.
pub const CAPACITY: f64 = 0.9;
/// Largest difference, in fractions of the GPU, between a process's turn under the driver's
/// time-slicing and its due share for which leases still overlap.
pub const TOLERANCE: f64 = 0.02;

/// Divides `capacity` among processes with these `(demand, weight)`s: each gets the smaller of
/// its demand and its weight's part of what is left, the part the light ones leave going to the
/// others by weight (water-filling). Weights at or below zero count as the least positive one.
pub fn water_fill(procs: &[(f64, f64)], capacity: f64) -> Vec<f64> {
    let mut got = vec![0.0; procs.len()];
    let mut open: Vec<usize> = (0..procs.len()).collect();
    let mut left = capacity.max(0.0);
    let weight = |w: f64| w.max(f64::MIN_POSITIVE);
    loop {
        let total: f64 = open.iter().map(|&i| weight(procs[i].1)).sum();
        if open.is_empty() || total <= 0.0 {
            return got;
        }
        let per_weight = left / total;
        let (light, heavy): (Vec<usize>, Vec<usize>) = open
            .iter()
            .partition(|&&i| procs[i].0.max(0.0) <= per_weight * weight(procs[i].1));
        if light.is_empty() {
            for i in heavy {
                got[i] = per_weight * weight(procs[i].1);
            }
            return got;
        }
        for i in light {
            got[i] = procs[i].0.max(0.0);
            left -= got[i];
        }
        open = heavy;
    }
}

/// Whether processes with these `(demand, weight)`s can run side by side: the driver's equal
/// turns give each within [`TOLERANCE`] of what its weight is due.
pub fn fair_together(procs: &[(f64, f64)]) -> bool {
    let due = water_fill(procs, CAPACITY);
    let equal: Vec<(f64, f64)> = procs.iter().map(|&(d, _)| (d, 1.0)).collect();
    let turns = water_fill(&equal, CAPACITY);
    due.iter()
        .zip(&turns)
        .all(|(d, t)| (d - t).abs() <= TOLERANCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn light_processes_get_their_demand_and_the_rest_goes_by_weight() {
        let got = water_fill(&[(0.1, 0.5), (1.0, 0.25), (1.0, 0.25)], 1.0);
        assert!(near(&got, &[0.1, 0.45, 0.45]), "{got:?}");
        let got = water_fill(&[(1.0, 0.75), (1.0, 0.25)], 1.0);
        assert!(near(&got, &[0.75, 0.25]), "{got:?}");
        let got = water_fill(&[(0.2, 0.75), (1.0, 0.25)], 1.0);
        assert!(near(&got, &[0.2, 0.8]), "{got:?}");
        let got = water_fill(&[(0.1, 1.0), (0.2, 1.0)], 1.0);
        assert!(near(&got, &[0.1, 0.2]), "room left: {got:?}");
        let got = water_fill(&[(1.0, 0.0), (1.0, 0.0)], 1.0);
        assert!(near(&got, &[0.5, 0.5]), "no weights: equal {got:?}");
        assert!(water_fill(&[], 1.0).is_empty());
    }

    #[test]
    fn equal_weights_always_run_together() {
        assert!(fair_together(&[(1.0, 0.5), (1.0, 0.5)]));
        assert!(fair_together(&[(1.0, 0.1), (0.3, 0.1), (0.05, 0.1)]));
    }

    #[test]
    fn unequal_weights_run_together_only_while_the_light_ones_leave_the_others_their_due() {
        assert!(!fair_together(&[(1.0, 0.75), (1.0, 0.25)]), "both heavy");
        assert!(fair_together(&[(0.3, 0.75), (0.3, 0.25)]), "room for both");
        assert!(
            fair_together(&[(1.0, 0.5), (0.1, 0.125), (0.1, 0.125)]),
            "light ones below their due"
        );
        // the light one would take 0.45 in equal turns, but is due 0.225
        assert!(!fair_together(&[(1.0, 0.75), (0.5, 0.25)]));
    }
}
