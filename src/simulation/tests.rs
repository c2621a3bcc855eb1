use super::scenario::{workload, Kind, Rng};
use super::*;
use crate::referee;

const S: Nanos = 1_000_000_000;

/// The judged windows' worst shortfall, and where: (short, window start in s, client).
fn worst(outcome: &Outcome) -> (f64, f64, usize) {
    let mut worst = (f64::NEG_INFINITY, 0.0, 0);
    for w in outcome
        .windows
        .iter()
        .filter(|w| referee::settled(w.since_change))
    {
        for (i, v) in referee::judge(&w.clients).iter().enumerate() {
            if v.short > worst.0 {
                worst = (v.short, w.t0 as f64 / 1e9, i);
            }
        }
    }
    worst
}

fn shares(request: f64, interactive: bool) -> Shares {
    Shares {
        request,
        limit: 1.0,
        interactive,
    }
}

fn print(outcome: &Outcome) {
    for w in &outcome.windows {
        let v = referee::judge(&w.clients);
        let row: Vec<String> = v
            .iter()
            .zip(&w.clients)
            .map(|(v, c)| format!("{:.3}/{:.3}(u{:.3})", v.got, v.due, c.used.unwrap_or(0.0)))
            .collect();
        eprintln!("{:>5.1}s {}", w.t0 as f64 / 1e9, row.join(" "));
    }
}

#[test]
fn explore() {
    for seed in 0..40 {
        let sc = Scenario::random(seed, 20 * S);
        let t = std::time::Instant::now();
        let out = run(&sc);
        eprintln!("{:?}", t.elapsed());
        let w = worst(&out);
        eprintln!(
            "seed {seed}: {} clients, worst short {:.3} at {:.0}s client {}",
            sc.clients.len(),
            w.0,
            w.1,
            w.2
        );
    }
}

#[test]
fn interactive_beside_three_saturating() {
    let mut rng = Rng::new(1);
    let sat = |rng: &mut Rng| {
        let mut w = workload(Kind::Kernels, rng, 0, 20 * S);
        w.kernel_ns = 1_700_000;
        w.kernels = 64;
        w.sync = false;
        w
    };
    let mut clients: Vec<ClientSpec> = (0..3)
        .map(|_| ClientSpec {
            shares: shares(0.3, false),
            processes: vec![sat(&mut rng)],
        })
        .collect();
    clients.push(ClientSpec {
        shares: shares(0.1, true),
        processes: vec![workload(Kind::Inference, &mut rng, 0, 20 * S)],
    });
    let sc = Scenario {
        seed: 0,
        clients,
        changes: vec![],
        duration: 20 * S,
    };
    let out = run(&sc);
    print(&out);
    eprintln!("{:?}", worst(&out));
}

#[test]
fn show() {
    let seed: u64 = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(29);
    let sc = Scenario::random(seed, 20 * S);
    for c in &sc.clients {
        eprintln!("{:?}", c.shares);
        for p in &c.processes {
            eprintln!("   {p:?} solo {:.3}", solo_busy(p));
        }
    }
    eprintln!("{:?}", sc.changes);
    let out = run(&sc);
    print(&out);
}
