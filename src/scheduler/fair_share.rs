//! Decayed fair share (optional, `daemon.fairshare_half_life`): a client's past GPU time lowers
//! the weight of its request, as in Slurm's classic fair-share factor.
//!
//! A client's *decayed usage* is its GPU time, each second of it counted
//! `2^(-age / half_life)`: GPU time from one half-life ago counts half. Among the clients that
//! exist now, with `U` a client's part of their decayed usage and `S` its part of their weights
//! ([`request_weight`](super::request_weight): requests, with a least weight for a request of zero), its factor is
//!
//! ```text
//! F = max(2^(-U / S), FLOOR)
//! ```
//!
//! and the scheduler weighs it `request * F`. A client that used no GPU time has `F = 1`; one
//! that used exactly its share of what all used has `F = 1/2`, like every other such client, so
//! that clients that all used their shares keep the weights of their requests. The factors only
//! weigh clients against one another while they all have work: idle time still goes to whoever
//! has work.

/// The least factor: a client that used everything keeps a thirty-second of its weight, so that
/// it still moves forward beside fresh clients.
pub const FLOOR: f64 = 1.0 / 32.0;

/// `amount` counted at `age` seconds, with usage halving every `half_life` seconds.
pub fn decayed(amount: f64, age_s: f64, half_life_s: f64) -> f64 {
    if half_life_s <= 0.0 || !half_life_s.is_finite() {
        return 0.0;
    }
    amount * (-age_s.max(0.0) / half_life_s).exp2()
}

/// The factors of clients with these `(weight, decayed usage)`s, in their order.
pub fn factors(clients: &[(f64, f64)]) -> Vec<f64> {
    let clean = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    let total_usage: f64 = clients.iter().map(|&(_, u)| clean(u)).sum();
    let total_weight: f64 = clients.iter().map(|&(w, _)| clean(w)).sum();
    if total_usage <= 0.0 || total_weight <= 0.0 {
        return vec![1.0; clients.len()];
    }
    clients
        .iter()
        .map(|&(w, u)| {
            let used = clean(u) / total_usage;
            let share = clean(w) / total_weight;
            if used <= 0.0 {
                1.0
            } else if share <= 0.0 {
                FLOOR
            } else {
                (-used / share).exp2().max(FLOOR)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn usage_halves_every_half_life() {
        let day = 86_400.0;
        assert!(close(decayed(8.0, 0.0, day), 8.0));
        assert!(close(decayed(8.0, day, day), 4.0));
        assert!(close(decayed(8.0, 3.0 * day, day), 1.0));
        assert!(
            close(decayed(8.0, -5.0, day), 8.0),
            "the future counts as now"
        );
        assert_eq!(decayed(8.0, 1.0, 0.0), 0.0);
    }

    #[test]
    fn no_usage_leaves_every_weight_alone() {
        assert_eq!(factors(&[(0.5, 0.0), (0.25, 0.0)]), vec![1.0, 1.0]);
        assert!(factors(&[]).is_empty());
    }

    #[test]
    fn clients_that_used_their_shares_keep_their_ratio() {
        // used in proportion to their weights: equal factors, so the request ratio stands
        let f = factors(&[(0.6, 60.0), (0.2, 20.0), (0.2, 20.0)]);
        assert!(f.iter().all(|&x| close(x, 0.5)), "{f:?}");
    }

    #[test]
    fn the_heavier_past_user_weighs_less() {
        // equal requests, one used three times what the other did
        let f = factors(&[(0.5, 300.0), (0.5, 100.0)]);
        assert!(close(f[0], (-1.5f64).exp2()), "{f:?}");
        assert!(close(f[1], (-0.5f64).exp2()), "{f:?}");
        assert!(f[0] < f[1]);
        // one that used nothing weighs fully
        let f = factors(&[(0.5, 300.0), (0.5, 0.0)]);
        assert_eq!(f[1], 1.0);
        assert!(close(f[0], 0.25));
    }

    #[test]
    fn a_small_share_that_used_everything_stops_at_the_floor() {
        let f = factors(&[(0.01, 1000.0), (0.99, 0.0)]);
        assert_eq!(f[0], FLOOR);
        assert_eq!(f[1], 1.0);
        let f = factors(&[(0.0, 5.0), (1.0, 5.0)]);
        assert_eq!(f[0], FLOOR, "no weight at all: the floor");
    }

    #[test]
    fn nonsense_figures_count_as_none() {
        let f = factors(&[(f64::NAN, 10.0), (0.5, f64::INFINITY), (0.5, -3.0)]);
        assert_eq!(f[1], 1.0);
        assert_eq!(f[2], 1.0);
        assert_eq!(f[0], FLOOR);
    }
}
