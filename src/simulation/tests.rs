use super::scenario::{plain_loop, workload, Kind, Rng, BATCH_KINDS};
use super::*;
use crate::referee;

const S: Nanos = 1_000_000_000;

/// The judged windows' worst shortfall, and where: (short, window start in s, client). With
/// `sliced`, the same mix time-sliced, each window divides what the mix could use
/// ([`referee::capacity`]); without, the whole GPU.
fn worst(outcome: &Outcome, sliced: Option<&Outcome>) -> (f64, f64, usize) {
    let mut worst = (f64::NEG_INFINITY, 0.0, 0);
    for (k, w) in outcome
        .windows
        .iter()
        .enumerate()
        .filter(|(_, w)| referee::settled(w.since_change))
    {
        let total = |w: &Window| w.clients.iter().map(|c| c.got).sum::<f64>();
        let capacity = sliced.map_or(1.0, |s| {
            referee::capacity(total(w), s.windows.get(k).map_or(0.0, total))
        });
        for (i, v) in referee::judge_within(&w.clients, capacity)
            .iter()
            .enumerate()
        {
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

fn limited(request: f64, limit: f64, interactive: bool) -> Shares {
    Shares {
        request,
        limit,
        interactive,
    }
}

/// A client of these shares running these processes.
fn client(shares: Shares, processes: Vec<Workload>) -> ClientSpec {
    ClientSpec { shares, processes }
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

/// Every judged window kept the promise for the clients `judged` picks (by index), or the
/// windows that broke it, printed.
fn assert_kept(scenario: &Scenario, outcome: &Outcome, judged: impl Fn(usize) -> bool) {
    let mut broken = vec![];
    for (t0, i, v) in settled_verdicts(outcome) {
        if judged(i) && !v.kept() {
            broken.push(format!(
                "{:.0}s client {i}: got {:.3} due {:.3}",
                t0 as f64 / 1e9,
                v.got,
                v.due
            ));
        }
    }
    if !broken.is_empty() {
        print(outcome);
        panic!("seed {}: {}", scenario.seed, broken.join("; "));
    }
}

/// The referee's verdict on each client (by index) in each window that starts a second or more
/// after a change, with the window's start.
fn settled_verdicts(
    outcome: &Outcome,
) -> impl Iterator<Item = (Nanos, usize, referee::Verdict)> + '_ {
    outcome
        .windows
        .iter()
        .filter(|w| referee::settled(w.since_change))
        .flat_map(|w| {
            referee::judge(&w.clients)
                .into_iter()
                .enumerate()
                .map(move |(i, v)| (w.t0, i, v))
        })
}

/// The batch clients of `scenario` (the latency class is judged apart).
fn batch(scenario: &Scenario) -> impl Fn(usize) -> bool + '_ {
    |i| !scenario.clients[i].shares.interactive
}

fn saturating(rng: &mut Rng) -> Workload {
    workload(Kind::Saturating, rng, 0, 20 * S)
}

/// Three users' saturating loops (request 0.3 each) beside an inference client of request 0.1
/// every 5 ms. Processes due a probe jumped the line while the inference client cut their probes
/// short: two of the three took turns in probes and the third got nothing for the whole run (as
/// on an H200, 525 / 17 / 1.3 it/s). And the inference client, served at once whatever it had
/// used, took 0.19 of the GPU on a request of 0.1.
#[test]
fn an_interactive_client_beside_three_saturating_ones_starves_none() {
    let mut rng = Rng::new(1);
    let mut clients: Vec<ClientSpec> = (0..3)
        .map(|_| ClientSpec {
            shares: shares(0.3, false),
            processes: vec![saturating(&mut rng)],
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
    assert_kept(&sc, &run(&sc), batch(&sc));
}

fn median(v: &[Nanos]) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0) as f64 / 1e6
}

/// A job of 87 ms bursts with pauses (request 0.3) beside a saturating one (request 0.5): its
/// bursts took 206 ms, longer than time-sliced (177 ms; 87 ms alone), as on the GPU (235 ms,
/// 197 ms time-sliced, 90 ms alone). With burst credit it would be served first when it comes
/// back: within 1.25 times its bursts alone, and both keep their due shares.
#[test]
fn a_bursty_client_below_its_request_gets_its_bursts_at_once() {
    let ms = 1_000_000;
    let bursty = Workload {
        kernel_ns: ms,
        kernels: 87,
        launch_ns: 4_000,
        graph: false,
        sync: true,
        host_ns: 300 * ms,
        period_ns: None,
        start: 0,
        end: 20 * S,
        warmup_ns: 0,
    };
    let sat = Workload {
        kernels: 64,
        sync: false,
        host_ns: 5_000,
        ..bursty
    };
    let clients = vec![
        ClientSpec {
            shares: shares(0.3, false),
            processes: vec![bursty],
        },
        ClientSpec {
            shares: shares(0.5, false),
            processes: vec![sat],
        },
    ];
    let sc = Scenario {
        seed: 0,
        clients,
        changes: vec![],
        duration: 20 * S,
    };
    let alone = Scenario {
        clients: sc.clients[..1].to_vec(),
        ..sc.clone()
    };
    let out = run(&sc);
    let (solo, shared, sliced) = (
        median(&run(&alone).latencies[0]),
        median(&out.latencies[0]),
        median(&run_time_sliced(&sc).latencies[0]),
    );
    eprintln!(
        "median burst: alone {solo:.1} ms, gpushare {shared:.1} ms, time-sliced {sliced:.1} ms"
    );
    assert!(
        shared <= 1.25 * solo,
        "{shared:.1} ms bursts, {solo:.1} ms alone"
    );
    assert!(
        shared < sliced,
        "{shared:.1} ms bursts, {sliced:.1} ms time-sliced"
    );
    assert_kept(&sc, &out, |i| i == 0);
}

/// Seeds of [`Scenario::random_of`] with saturating loops whose mixes break the promise by a
/// few points still: an inference client's preemptions cost a batch client 3-4 points (25, 53,
/// and 75 since interactive leases are charged what their launches take alone: the inference
/// client, no longer charged its waits, stays ahead of the line and preempts more often).
const KNOWN_SHORT: [u64; 3] = [25, 53, 75];

/// Random labs of saturating loops (2-8 clients of random requests and limits, loops that come
/// and go, a request changed partway, now and then an interactive client's inference): every
/// batch client keeps its due share in every settled window, for every seed but those known.
#[test]
fn saturating_mixes_keep_every_clients_due_share() {
    let mut broken = vec![];
    for seed in 0..80 {
        let sc = Scenario::random_of(seed, 20 * S, &[Kind::Saturating]);
        let out = run(&sc);
        let kept = std::panic::catch_unwind(|| assert_kept(&sc, &out, batch(&sc))).is_ok();
        if !kept && !KNOWN_SHORT.contains(&seed) {
            broken.push(seed);
        }
    }
    assert!(
        broken.is_empty(),
        "seeds that broke the promise: {broken:?}"
    );
}

/// |USED - got| of every client in every window of `out`.
/// Client-windows in which a client got more than its limit (by more than the referee's
/// tolerance).
fn over_limit(out: &Outcome) -> usize {
    out.windows
        .iter()
        .flat_map(|w| w.clients.iter())
        .filter(|c| c.got > c.shares.limit + referee::TOLERANCE)
        .count()
}

fn used_off_got(out: &Outcome) -> Vec<f64> {
    out.windows
        .iter()
        .flat_map(|w| w.clients.iter())
        .filter_map(|c| Some((c.used? - c.got).abs()))
        .collect()
}

/// Prints, for each kind of loop in the library, how many random mixes of it keep the promise
/// (each window dividing what the mix could use, [`referee::capacity`]), beside the same for
/// plain time-slicing, how far the others fell short beyond the tolerance (their worst windows,
/// added up), in how many gpushare left some client shorter than time-slicing did,
/// what the mixes got done against time-slicing, and the client-windows over a limit:
/// `cargo test --release --lib simulation::tests::promise_by_kind -- --ignored --nocapture`.
/// `Inference` is inference every 5 ms in batch clients (the GPU soak draws it for them too),
/// alone and mixed with saturating loops.
#[test]
#[ignore]
fn promise_by_kind() {
    let mixes = BATCH_KINDS
        .into_iter()
        .chain([Kind::Saturating, Kind::Inference])
        .map(|k| vec![k])
        .chain([vec![Kind::Inference, Kind::Saturating]]);
    for kinds in mixes {
        let mut shorts = vec![];
        let mut sliced = vec![];
        let mut used_off = vec![];
        let mut throughput = vec![];
        let mut over = 0;
        for (out, ts) in runs_of_seeds(30, &kinds) {
            throughput.push(total_got(&out) / total_got(&ts).max(f64::MIN_POSITIVE));
            shorts.push(worst(&out, Some(&ts)).0);
            sliced.push(worst(&ts, Some(&out)).0);
            used_off.extend(used_off_got(&out));
            over += over_limit(&out);
        }
        let used_mean = used_off.iter().sum::<f64>() / used_off.len().max(1) as f64;
        let used_over = used_off.iter().filter(|&&d| d > 0.03).count();
        let worse = shorts
            .iter()
            .zip(&sliced)
            .filter(|(g, t)| **g > **t + referee::TOLERANCE)
            .count();
        for v in [&mut shorts, &mut sliced, &mut throughput] {
            v.sort_by(f64::total_cmp);
        }
        let ok = |v: &[f64]| v.iter().filter(|&&x| x <= referee::TOLERANCE).count();
        // how far the mixes not kept fell short beyond the tolerance, added up: a change that
        // moves a mix just across the tolerance either way moves this little
        let beyond: f64 = shorts
            .iter()
            .map(|&x| (x - referee::TOLERANCE).max(0.0))
            .sum();
        eprintln!(
            "{kinds:?}: {}/30 kept (time-sliced {}/30), {beyond:.3} short beyond the tolerance in all; median worst {:.3} ({:.3}), max {:.3} ({:.3}); {worse} worse than time-sliced; throughput of time-slicing's: median {:.3}, least {:.3}; |USED - got| mean {used_mean:.3}, over 3 points in {used_over} of {} client-windows; {over} over their limits",
            ok(&shorts), ok(&sliced), shorts[15], sliced[15], shorts[29], sliced[29], throughput[15], throughput[0], used_off.len()
        );
    }
}

/// The first seed of the random mixes that [`runs_of_seeds`] runs: `SIM_FIRST_SEED`, 0 by
/// default. Mixes of other seeds than those a change was tuned on check it on mixes it has not
/// seen (`SIM_FIRST_SEED=30` runs seeds 30 to 59).
fn first_seed() -> u64 {
    std::env::var("SIM_FIRST_SEED").map_or(0, |s| s.parse().expect("SIM_FIRST_SEED: a number"))
}

/// The random mixes of `kinds` of seeds [`first_seed`] to `seeds` after it, each under gpushare
/// and time-sliced, in seed order, run on as many threads as the machine has.
fn runs_of_seeds(seeds: u64, kinds: &[Kind]) -> Vec<(Outcome, Outcome)> {
    let first = first_seed();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut runs: Vec<(u64, (Outcome, Outcome))> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (t..seeds)
                        .step_by(threads as usize)
                        .map(|seed| {
                            let sc = Scenario::random_of(first + seed, 30 * S, kinds);
                            (seed, (run(&sc), run_time_sliced(&sc)))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a simulation thread panicked"))
            .collect()
    });
    runs.sort_by_key(|&(seed, _)| seed);
    runs.into_iter().map(|(_, r)| r).collect()
}

/// What every client got over the whole run, summed (each window's share of the GPU, in units
/// of the clients' progress alone).
fn total_got(outcome: &Outcome) -> f64 {
    outcome
        .windows
        .iter()
        .flat_map(|w| w.clients.iter().map(|c| c.got))
        .sum()
}

/// The bursty loops of `sc` (processes of long host pauses and no period, numbered across
/// clients in order): for each, (process, its client's index, its burst alone in ms, the median
/// burst under gpushare over alone, the same time-sliced).
fn bursts_beside_time_slicing(sc: &Scenario) -> Vec<(usize, usize, f64, f64, f64)> {
    let (out, ts) = (run(sc), run_time_sliced(sc));
    let works = sc
        .clients
        .iter()
        .enumerate()
        .flat_map(|(i, c)| c.processes.iter().map(move |w| (i, w)));
    works
        .enumerate()
        .filter(|(_, (_, w))| w.host_ns >= 100_000_000 && w.period_ns.is_none())
        .map(|(p, (i, w))| {
            let alone = (w.kernels as Nanos * w.kernel_ns + w.launch_ns) as f64 / 1e6;
            (
                p,
                i,
                alone,
                median(&out.latencies[p]) / alone,
                median(&ts.latencies[p]) / alone,
            )
        })
        .collect()
}

/// A bursty loop's bursts in `sc` ([`bursts_beside_time_slicing`]) for each one whose client
/// uses less than its request on average (and whose request never changes): (seed, process,
/// its burst alone in ms, the median burst under gpushare over alone, the same time-sliced).
fn bursts_below_request(sc: &Scenario) -> Vec<(u64, usize, f64, f64, f64)> {
    bursts_beside_time_slicing(sc)
        .into_iter()
        .filter(|&(_, i, ..)| {
            let c = &sc.clients[i];
            let use_: f64 = c.processes.iter().map(solo_busy).sum();
            use_ < c.shares.request && !sc.changes.iter().any(|ch| ch.client == i)
        })
        .map(|(p, _, alone, gpushare, sliced)| (sc.seed, p, alone, gpushare, sliced))
        .collect()
}

/// Prints, for random mixes of bursty loops and of all kinds, each bursty loop below its
/// request: its median burst over its burst alone under gpushare and time-sliced, and how many
/// are within 1.2 times alone and no slower than time-sliced:
/// `cargo test --release --lib simulation::tests::bursts_by_mix -- --ignored --nocapture`.
#[test]
#[ignore]
fn bursts_by_mix() {
    for kinds in [
        &[Kind::Bursty][..],
        &[Kind::Bursty, Kind::Saturating],
        &BATCH_KINDS[..],
    ] {
        let found: Vec<_> = (0..40)
            .flat_map(|seed| bursts_below_request(&Scenario::random_of(seed, 30 * S, kinds)))
            .collect();
        for b in &found {
            eprintln!(
                "seed {} process {}: {:.0} ms alone, x{:.2} (time-sliced x{:.2})",
                b.0, b.1, b.2, b.3, b.4
            );
        }
        let within = found.iter().filter(|b| b.3 <= 1.2).count();
        let sliced = found.iter().filter(|b| b.3 <= b.4 + 0.05).count();
        eprintln!(
            "{kinds:?}: {within}/{} within 1.2x alone, {sliced} no slower than time-sliced",
            found.len()
        );
    }
}

/// The kinds of loop `SIM_KIND` names, separated by commas (saturating by default).
fn kinds_from_env() -> Vec<Kind> {
    let names = std::env::var("SIM_KIND").unwrap_or_default();
    // in the order named: `Inference,Saturating` draws the mixes `promise_by_kind` does
    let known: Vec<Kind> = BATCH_KINDS
        .into_iter()
        .chain([Kind::Saturating, Kind::Inference])
        .collect();
    let kinds: Vec<Kind> = names
        .split(',')
        .filter_map(|n| known.iter().copied().find(|k| n == format!("{k:?}")))
        .collect();
    if kinds.is_empty() {
        vec![Kind::Saturating]
    } else {
        kinds
    }
}

/// Prints the windows of `sc` under gpushare, its worst window, and its windows time-sliced;
/// returns both runs.
fn print_beside_time_slicing(sc: &Scenario) -> (Outcome, Outcome) {
    let (out, ts) = (run(sc), run_time_sliced(sc));
    print(&out);
    eprintln!("worst {:?}", worst(&out, Some(&ts)));
    eprintln!("time-sliced:");
    print(&ts);
    (out, ts)
}

/// Prints the latency percentiles of the inference processes `procs` (by index) of `out`, run
/// as `name`.
fn print_latencies(name: &str, out: &Outcome, procs: &[usize]) {
    for &p in procs {
        let l = &out.latencies[p];
        eprintln!(
            "{name}: inference {p}: p50 {:.2} p90 {:.2} p99 {:.2} max {:.2} ms",
            quantile(l, 0.5),
            quantile(l, 0.9),
            quantile(l, 0.99),
            quantile(l, 1.0)
        );
    }
}

/// Prints one random mix, its windows under gpushare and time-sliced:
/// `SIM_KIND=HostBound SIM_SEED=3 cargo test --release --lib simulation::tests::explain --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn explain() {
    let kinds = kinds_from_env();
    let seed = std::env::var("SIM_SEED").map_or(0, |s| s.parse().unwrap());
    let sc = Scenario::random_of(seed, 30 * S, &kinds);
    for (i, c) in sc.clients.iter().enumerate() {
        eprintln!("client {i}: {:?}", c.shares);
        for w in &c.processes {
            eprintln!("    {w:?} solo {:.3}", solo_busy(w));
        }
    }
    eprintln!("changes {:?}", sc.changes);
    print_beside_time_slicing(&sc);
}

/// The worst window of each seed of a kind, under gpushare and time-sliced, and what the mix got
/// done against time-slicing: `SIM_KIND=HostBound
/// cargo test --release --lib simulation::tests::seeds_of_kind -- --ignored --nocapture`.
#[test]
#[ignore]
fn seeds_of_kind() {
    let kinds = kinds_from_env();
    let first = first_seed();
    for (i, (out, ts)) in runs_of_seeds(30, &kinds).into_iter().enumerate() {
        let seed = first + i as u64;
        eprintln!(
            "seed {seed}: {:?}, time-sliced {:?}; throughput {:.3} of time-slicing's",
            worst(&out, Some(&ts)),
            worst(&ts, Some(&out)),
            total_got(&out) / total_got(&ts).max(f64::MIN_POSITIVE)
        );
    }
}

/// Seed 4 of the GPU soak (H200): a client of request 0.55 (1.6 ms kernels, then 20 ms ones
/// too, never synchronizing) beside a client of request 0 (1.6 ms kernels synchronizing every
/// 4, limit 0.76) and an interactive client of request 0.02 (two inference processes, limit
/// 0.24), the batch programs starting up for 2 s. On the GPU the first got 0.36-0.40 where it
/// was due 0.93 for the whole run: the daemon took the second for a light process (0.014) from
/// its leases alone in its start-up, ran the two together, and the driver's equal turns gave it
/// half the GPU; no probe could correct the estimate while the interactive client was active.
fn soak_seed_4() -> Scenario {
    let ms = 1_000_000;
    let kernels = |kernel_ns, kernels, sync, start| Workload {
        kernel_ns,
        kernels,
        launch_ns: 10_000,
        graph: false,
        sync,
        host_ns: 5_000,
        period_ns: None,
        start,
        end: 60 * S,
        warmup_ns: 2 * S,
    };
    let infer = Workload {
        kernel_ns: 100_000,
        kernels: 4,
        launch_ns: 10_000,
        graph: false,
        sync: true,
        host_ns: 5_000,
        period_ns: Some(5 * ms),
        start: 0,
        end: 60 * S,
        warmup_ns: 0,
    };
    Scenario {
        seed: 0,
        clients: vec![
            ClientSpec {
                shares: limited(0.02, 0.24, true),
                processes: vec![infer, infer],
            },
            ClientSpec {
                shares: limited(0.0, 0.76, false),
                processes: vec![kernels(8 * ms / 5, 4, true, 0)],
            },
            ClientSpec {
                shares: limited(0.55, 1.0, false),
                processes: vec![
                    kernels(20 * ms, 64, false, 20 * S),
                    kernels(8 * ms / 5, 64, false, 0),
                ],
            },
        ],
        changes: vec![],
        duration: 40 * S,
    }
}

/// The part of GPU soak seed 4 before the 20 ms kernels start: the batch clients keep their due
/// shares. Without probes while an interactive client was active, the request-0 client's
/// start-up estimate (0.26) was never corrected, the two batch clients ran together, and the
/// 0.55 one got 0.66 where it was due 0.95.
#[test]
fn an_estimate_taken_in_start_up_is_corrected_beside_an_interactive_client() {
    let sc = Scenario {
        duration: 20 * S,
        ..soak_seed_4()
    };
    assert_kept(&sc, &run(&sc), batch(&sc));
}

#[test]
#[ignore]
fn soak_seed_4_explained() {
    let sc = soak_seed_4();
    print_beside_time_slicing(&sc);
}

/// Seed 7 of the GPU soak (H200), its first 100 s: a launch-bound MLP and a loop of 1 ms
/// kernels (request 0.32, limit 0.87); a training loop (about 3.4 ms of small kernels, then
/// 20 ms of host sleep) and from 69 s a loop of 1 ms kernels (request 0.06, limit 0.59); a
/// bursty job of 200 us kernels from 40 s (request 0.11, then 0.20 at 53 s); a loop of 20 ms
/// kernels (request 0.05, limit 0.40).
fn soak_seed_7() -> Scenario {
    let ms = 1_000_000;
    let us = 1_000;
    let base = Workload {
        kernel_ns: ms,
        kernels: 1,
        launch_ns: 10 * us,
        graph: false,
        sync: true,
        host_ns: 5 * us,
        period_ns: None,
        start: 0,
        end: 100 * S,
        warmup_ns: 2 * S,
    };
    let shares = |request, limit| Shares {
        request,
        limit,
        interactive: false,
    };
    Scenario {
        seed: 0,
        clients: vec![
            ClientSpec {
                shares: shares(0.32, 0.87),
                processes: vec![
                    Workload {
                        kernel_ns: 8 * us,
                        kernels: 12,
                        launch_ns: 5 * us,
                        host_ns: 100 * us,
                        ..base
                    },
                    base,
                ],
            },
            ClientSpec {
                shares: shares(0.06, 0.59),
                processes: vec![
                    Workload {
                        kernel_ns: 113 * us,
                        kernels: 30,
                        host_ns: 20 * ms,
                        ..base
                    },
                    Workload {
                        kernels: 4,
                        start: 69 * S,
                        ..base
                    },
                ],
            },
            ClientSpec {
                shares: shares(0.11, 1.0),
                processes: vec![Workload {
                    kernel_ns: 200 * us,
                    kernels: 500,
                    host_ns: 500 * ms,
                    start: 40 * S,
                    ..base
                }],
            },
            ClientSpec {
                shares: shares(0.05, 0.40),
                processes: vec![Workload {
                    kernel_ns: 20 * ms,
                    ..base
                }],
            },
        ],
        changes: vec![ShareChange {
            at: 53 * S,
            client: 2,
            shares: shares(0.20, 1.0),
        }],
        duration: 100 * S,
    }
}

#[test]
#[ignore]
fn soak_seed_7_explained() {
    let sc = soak_seed_7();
    print_beside_time_slicing(&sc);
}

/// GPU soak seed 7's training loop (request 0.06) is never starved. Holding its lease through
/// each 20 ms host sleep, it was charged the sleeps as GPU time (USED 0.37 where it got 0.14),
/// ran far ahead in virtual time and got nothing from 10 s to 20 s and again from 45 s to 80 s,
/// as on the GPU (nothing from 55 s to 80 s). Its lease now goes back once it has left the GPU a
/// while with others waiting.
#[test]
fn soak_seed_7s_training_loop_is_never_starved() {
    let sc = Scenario {
        duration: 30 * S,
        ..soak_seed_7()
    };
    assert_kept(&sc, &run(&sc), |i| i == 1);
}

/// USED (what the scheduler counts each client's work took) is within 3 points of what it got
/// on average over the windows of random mixes of inference beside saturating loops, of
/// saturating loops alone and of host-bound training loops (0.025, 0.005 and 0.020 over these 8
/// mixes each). USED as the charge (wall time divided equally among the leases running
/// together) was off by 0.049 in the first; with the process's average demand in place of what
/// it needs while it holds a lease, by 0.036 in the third.
#[test]
fn used_is_what_each_client_got_in_random_mixes() {
    for kinds in [
        vec![Kind::Inference, Kind::Saturating],
        vec![Kind::Saturating],
        vec![Kind::HostBound],
    ] {
        let off: Vec<f64> = (0..8)
            .flat_map(|seed| used_off_got(&run(&Scenario::random_of(seed, 20 * S, &kinds))))
            .collect();
        let mean = off.iter().sum::<f64>() / off.len() as f64;
        assert!(mean <= 0.03, "{kinds:?}: |USED - got| {mean:.3} on average");
    }
}

/// Seed 16 of the GPU soak (H200), its first 60 s: an interactive client of request 0.05 (two
/// inference processes, the second from 20 s), a client of request 0.26 (a launch-bound MLP and
/// a small CUDA graph synchronizing every 10 replays), one of request 0.10 and limit 0.41 (50 us
/// kernels synchronizing after each) and one of request 0.29 (57 ms kernels, a second of them
/// queued at a time).
fn soak_seed_16() -> Scenario {
    let ms = 1_000_000;
    let us = 1_000;
    let base = Workload {
        kernel_ns: 54 * us,
        kernels: 1,
        launch_ns: 10 * us,
        graph: false,
        sync: true,
        host_ns: 5 * us,
        period_ns: None,
        start: 0,
        end: 60 * S,
        warmup_ns: 0,
    };
    let infer = Workload {
        kernel_ns: 50 * us,
        kernels: 6,
        period_ns: Some(5 * ms),
        ..base
    };
    Scenario {
        seed: 0,
        clients: vec![
            ClientSpec {
                shares: limited(0.05, 0.87, true),
                processes: vec![
                    infer,
                    Workload {
                        start: 20 * S,
                        ..infer
                    },
                ],
            },
            ClientSpec {
                shares: limited(0.26, 1.0, false),
                processes: vec![
                    Workload {
                        kernel_ns: 10 * us,
                        kernels: 30,
                        launch_ns: 30 * us,
                        host_ns: 50 * us,
                        ..base
                    },
                    Workload {
                        kernel_ns: 10 * us,
                        kernels: 320,
                        graph: true,
                        launch_ns: 20 * us,
                        ..base
                    },
                ],
            },
            ClientSpec {
                shares: limited(0.10, 0.41, false),
                processes: vec![base],
            },
            ClientSpec {
                shares: limited(0.29, 1.0, false),
                processes: vec![Workload {
                    kernel_ns: 57 * ms,
                    kernels: 18,
                    ..base
                }],
            },
        ],
        changes: vec![],
        duration: 60 * S,
    }
}

/// The `q`-quantile of `v`, in ms.
fn quantile(v: &[Nanos], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    let i = ((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1));
    v.get(i).copied().unwrap_or(0) as f64 / 1e6
}

#[test]
#[ignore]
fn soak_seed_16_explained() {
    let sc = soak_seed_16();
    let (out, ts) = print_beside_time_slicing(&sc);
    for (name, out) in [("gpushare", out), ("time-sliced", ts)] {
        print_latencies(name, &out, &[0, 1]);
        let ran: Vec<String> = out
            .ran
            .iter()
            .map(|r| format!("{:.3}", *r as f64 / 60e9))
            .collect();
        eprintln!("{name}: GPU time of each process {}", ran.join(" "));
    }
}

/// GPU soak seed 16 with one inference process: the interactive client (request 0.05, using
/// 0.06) gets its due share, and its requests wait no longer than the batch kernel under way
/// (p99 within its time alone, 0.35 ms, plus 57 ms and 0.3 ms). Charged the time its requests
/// waited for the 57 ms kernels' time slices, it got 0.033 and a p99 of 67 ms (on the GPU:
/// 0.022 a process, p99 67 ms).
#[test]
fn soak_seed_16s_inference_client_keeps_its_place() {
    let mut sc = Scenario {
        duration: 30 * S,
        ..soak_seed_16()
    };
    sc.clients[0].processes.truncate(1);
    let out = run(&sc);
    assert_kept(&sc, &out, |i| i == 0);
    let p99 = quantile(&out.latencies[0], 0.99);
    assert!(p99 <= 0.35 + 57.0 + 0.3, "p99 {p99:.2} ms");
}

/// Seed 17 of the GPU soak (H200), its first 40 s: of six clients whose requests add up to 0.81,
/// three have processes: bursts of 200 us kernels with pauses (request 0.10), 50 ms kernels
/// synchronizing every 4 (request 0.15, limit 0.62) and 1.6 ms kernels synchronizing every 4
/// (request 0.25, limit 0.87). The others (an interactive client of 0.02, batch clients of 0.22
/// and 0.07) are configured but start later.
fn soak_seed_17() -> Scenario {
    let ms = 1_000_000;
    let us = 1_000;
    let base = Workload {
        kernel_ns: 8 * ms / 5,
        kernels: 4,
        launch_ns: 10 * us,
        graph: false,
        sync: true,
        host_ns: 5 * us,
        period_ns: None,
        start: 0,
        end: 40 * S,
        warmup_ns: 0,
    };
    let absent = |shares| ClientSpec {
        shares,
        processes: vec![],
    };
    Scenario {
        seed: 0,
        clients: vec![
            absent(limited(0.02, 0.30, true)),
            ClientSpec {
                shares: limited(0.10, 1.0, false),
                processes: vec![Workload {
                    kernel_ns: 200 * us,
                    kernels: 500,
                    host_ns: 400 * ms,
                    ..base
                }],
            },
            ClientSpec {
                shares: limited(0.15, 0.62, false),
                processes: vec![Workload {
                    kernel_ns: 50 * ms,
                    ..base
                }],
            },
            ClientSpec {
                shares: limited(0.25, 0.87, false),
                processes: vec![base],
            },
            absent(limited(0.22, 1.0, false)),
            absent(limited(0.07, 0.42, false)),
        ],
        changes: vec![],
        duration: 40 * S,
    }
}

#[test]
#[ignore]
fn soak_seed_17_explained() {
    print_beside_time_slicing(&soak_seed_17());
}

/// GPU soak seed 17's first 40 s: the bursty client of request 0.10, due 0.2 (its request's part
/// of the requests of the clients present), gets it; so do the other two. With burst credit
/// filled at its request alone it got 0.11-0.12 here (mostly 0.10-0.12 on the GPU), each burst at
/// its weight's part of the GPU.
#[test]
fn soak_seed_17s_bursty_client_gets_its_part_of_the_requests_present() {
    let sc = soak_seed_17();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// Seed 13 of the GPU soak (H200), its first 40 s: an interactive client of request 0.10 (an
/// inference request every 5 ms); bursts of 1.6 ms kernels with pauses (request 0.18); a
/// training loop bound by its host (3 ms of small kernels, then 20 ms of sleep; request 0.24);
/// and a client of request 0.40 limited to 0.61 with the same bursts and a CUDA graph loop
/// (2.5 ms a replay, synchronizing after each).
fn soak_seed_13() -> Scenario {
    let ms = 1_000_000;
    let us = 1_000;
    let base = Workload {
        kernel_ns: 8 * ms / 5,
        kernels: 80,
        launch_ns: 10 * us,
        graph: false,
        sync: true,
        host_ns: 500 * ms,
        period_ns: None,
        start: 0,
        end: 40 * S,
        warmup_ns: 0,
    };
    let bursty = base;
    Scenario {
        seed: 0,
        clients: vec![
            ClientSpec {
                shares: limited(0.10, 0.63, true),
                processes: vec![Workload {
                    kernel_ns: 50 * us,
                    kernels: 6,
                    host_ns: 5 * us,
                    period_ns: Some(5 * ms),
                    ..base
                }],
            },
            ClientSpec {
                shares: limited(0.18, 0.77, false),
                processes: vec![bursty],
            },
            ClientSpec {
                shares: limited(0.24, 1.0, false),
                processes: vec![Workload {
                    kernel_ns: 100 * us,
                    kernels: 30,
                    host_ns: 20 * ms,
                    ..base
                }],
            },
            ClientSpec {
                shares: limited(0.40, 0.61, false),
                processes: vec![
                    bursty,
                    Workload {
                        kernel_ns: 50 * us,
                        kernels: 50,
                        graph: true,
                        host_ns: 5 * us,
                        ..base
                    },
                ],
            },
        ],
        changes: vec![],
        duration: 40 * S,
    }
}

#[test]
#[ignore]
fn soak_seed_13_explained() {
    print_beside_time_slicing(&soak_seed_13());
}

/// GPU soak seed 13's first 40 s: the other batch clients get their due within 3 points, and the
/// client limited to 0.61 (due 0.60) at least 0.55. With a limit's bucket one quantum deep it got
/// 0.49-0.50 in the settled windows here (0.51-0.53 on the GPU): its credit spilled while the
/// others' turns ran, and it was out of credit in the GPU's idle time after them. It still gets
/// 0.56 in every other window (0.56-0.59 on the GPU), the same without its limit: the clients'
/// work adds up to 0.94 of the GPU there, the rest idle between and inside leases.
#[test]
fn soak_seed_13s_limited_client_gets_near_its_limit() {
    let sc = soak_seed_13();
    let out = run(&sc);
    assert_kept(&sc, &out, |i| i == 1 || i == 2);
    for w in out
        .windows
        .iter()
        .filter(|w| referee::settled(w.since_change))
    {
        let v = referee::judge(&w.clients)[3];
        assert!(
            v.got >= 0.55,
            "{:.0}s: the limited client got {:.3} of its due {:.3}",
            w.t0 as f64 / 1e9,
            v.got,
            v.due
        );
    }
}

/// Seed 27 of the GPU soak (H200), its first 50 s (before its share changes): an interactive
/// client of request 0.05 (two inference processes, limit 0.21); a client of request 0.16 with
/// a bursty job of 200 us kernels and a training loop that sleeps 5 ms on its host after each
/// step; bursty jobs of 1.6 ms kernels of requests 0.02 and 0.11; a bursty job of 200 us kernels
/// of request 0; a CUDA graph loop (request 0.14, limit 0.43, synchronizing every 10 replays);
/// 50 us kernels that never synchronize (request 0.12) from 19 s.
fn soak_seed_27() -> Scenario {
    let ms = 1_000_000;
    let us = 1_000;
    let base = Workload {
        kernel_ns: 100 * us,
        kernels: 4,
        launch_ns: 5 * us,
        graph: false,
        sync: true,
        host_ns: 5 * us,
        period_ns: None,
        start: 0,
        end: 50 * S,
        warmup_ns: 0,
    };
    let infer = Workload {
        period_ns: Some(5 * ms),
        ..base
    };
    let bursty = |kernel_ns: Nanos, kernels: u32| Workload {
        kernel_ns,
        kernels,
        host_ns: 550 * ms,
        ..base
    };
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.05, 0.21, true), vec![infer, infer]),
            client(
                limited(0.16, 0.73, false),
                vec![
                    bursty(200 * us, 625),
                    Workload {
                        kernel_ns: 140 * us,
                        kernels: 20,
                        host_ns: 5 * ms,
                        ..base
                    },
                ],
            ),
            client(limited(0.02, 0.66, false), vec![bursty(1600 * us, 78)]),
            client(limited(0.11, 1.0, false), vec![bursty(1600 * us, 78)]),
            client(limited(0.0, 1.0, false), vec![bursty(200 * us, 625)]),
            client(
                limited(0.14, 0.43, false),
                vec![Workload {
                    kernel_ns: 340 * us,
                    kernels: 10,
                    graph: true,
                    ..base
                }],
            ),
            client(
                limited(0.12, 1.0, false),
                vec![Workload {
                    kernel_ns: 50 * us,
                    kernels: 1000,
                    sync: false,
                    start: 19 * S,
                    ..base
                }],
            ),
        ],
        changes: vec![],
        duration: 50 * S,
    }
}

#[test]
#[ignore]
fn soak_seed_27_explained() {
    print_beside_time_slicing(&soak_seed_27());
}

/// GPU soak seed 27's first 50 s: the client of request 0.16 (a bursty job and a training loop
/// that sleeps 5 ms after each step) and the bursty client of request 0.11 get their due, as
/// the others do. Not yet: as on the GPU (0.21-0.30 of its due 0.26-0.35, and 0.15-0.18 of
/// 0.18-0.22), the simulation gives the first 0.24-0.30 of 0.26-0.34 and the second 0.15-0.18 of
/// 0.18-0.20, while the graph loop beside them gets 0.32 of its due 0.30 and the GPU idles 0.06.
/// Where the simulation and the GPU part: the training loop alone beside the graph loop gets
/// 0.28 of its due 0.36 and the graph loop 0.55, past its limit of 0.43 (0.43 alone, its USED
/// 0.43 as well); on the GPU the graph loop stayed within its limit, its USED within a point of what
/// it got, and the training loop's process waited for the token 60 s of the 90.
#[test]
#[ignore = "the promise is not yet kept here: bursty and host-bound clients of small requests beside a graph loop"]
fn soak_seed_27s_bursty_and_host_bound_clients_get_their_due() {
    let sc = soak_seed_27();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// A client alone at its limit: the daemon's USED is what it got. Seed 27's graph loop (limit
/// 0.43) alone had a USED of 0.75: each lease refused an extension, the client over its limit,
/// counted what it had run to USED then and again at its end.
#[test]
fn a_client_alone_at_its_limit_uses_what_it_gets() {
    let mut sc = soak_seed_27();
    for (i, c) in sc.clients.iter_mut().enumerate() {
        if i != 5 {
            c.processes.clear();
        }
    }
    let out = run(&sc);
    for w in out
        .windows
        .iter()
        .filter(|w| referee::settled(w.since_change))
    {
        let graph = &w.clients[5];
        let used = graph.used.unwrap_or(0.0);
        assert!(
            (used - graph.got).abs() <= 0.02 && graph.got <= graph.shares.limit + 0.02,
            "{:.0}s: the graph loop's USED {used:.3}, got {:.3}, at a limit of {:.2}",
            w.t0 as f64 / 1e9,
            graph.got,
            graph.shares.limit
        );
    }
}

/// GPU soak seed 29 (90 s run on an H200), its first 60 s: a loop of 24 us kernels that waits
/// for each (request 0.22, limit 0.36) beside a loop of 21 ms kernels (request 0), two training
/// loops bound by their hosts (2.4 ms of kernels, then 5 ms or 20 ms asleep), a loop of 5.8 ms
/// kernels that waits for each (request 0.04) and a client of launch-bound MLP loops (request
/// 0.24, a second process from 36 s); at 22.9 s the first's request goes to 0.19. On the GPU the
/// loop of short kernels got 0.08-0.11 of its due 0.34-0.36 while the daemon's USED said
/// 0.27-0.45.
fn soak_seed_29() -> Scenario {
    let ms = 1_000_000;
    let us = 1_000;
    let base = plain_loop(0, 60 * S);
    let train = |host_ns| Workload {
        kernel_ns: 300 * us,
        kernels: 8,
        host_ns,
        ..base
    };
    let mlp = |start| soak_loops::mlp(start, 60 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(
                limited(0.0, 1.0, false),
                vec![Workload {
                    kernel_ns: 21_500 * us,
                    kernels: 64,
                    sync: false,
                    ..base
                }],
            ),
            client(limited(0.0, 0.5, false), vec![train(5 * ms)]),
            client(limited(0.18, 0.73, false), vec![train(20 * ms)]),
            client(
                limited(0.04, 0.82, false),
                vec![Workload {
                    kernel_ns: 5_800 * us,
                    ..base
                }],
            ),
            client(limited(0.24, 1.0, false), vec![mlp(0), mlp(36 * S)]),
            client(
                limited(0.22, 0.36, false),
                vec![soak_loops::tiny_synced(0, 60 * S)],
            ),
        ],
        changes: vec![ShareChange {
            at: 22_900 * ms,
            client: 5,
            shares: limited(0.19, 0.36, false),
        }],
        duration: 60 * S,
    }
}

#[test]
#[ignore]
fn soak_seed_29_explained() {
    print_beside_time_slicing(&soak_seed_29());
}

/// GPU soak seed 29's first 60 s: the loop of the smallest matmuls, each waited for, and the
/// client of launch-bound MLP loops get their due. On the GPU the first got 0.08-0.11 of its due
/// 0.34-0.36: light by its demand estimate, its leases ran beside the others', and each of its
/// waits lasted until the driver's time slice came back to it. Its launches beside others crawl
/// now, so its leases run alone ([`crate::scheduler::pace`]): 0.33-0.36 here (0.02-0.03 without).
#[test]
fn soak_seed_29s_short_synchronizing_kernels_get_their_due() {
    let sc = soak_seed_29();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 37 (90 s on an H200), its first 70 s: seven clients, two of them interactive
/// (inference every 5 ms), beside loops of 5 ms, 1.6 ms and 200 us kernels, a CUDA graph
/// loop, a bursty job, and two training loops bound by their hosts (2.3 ms of kernels, then
/// 10 ms or 2 ms asleep); at 27.4 s the client of 200 us kernels goes from request 0.20 to
/// 0.03. On the GPU the training loop of 2 ms sleeps (request 0.19) got 0.16-0.17 of its due
/// 0.26-0.27, its USED as low: below its request, and the daemon saw it.
fn soak_seed_37() -> Scenario {
    use soak_loops::{infer, train};
    let ms = 1_000_000;
    let us = 1_000;
    let base = plain_loop(0, 70 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.05, 1.0, true), vec![infer(19_400 * ms, 70 * S)]),
            client(
                limited(0.10, 0.59, true),
                vec![infer(0, 70 * S), infer(0, 45_300 * ms)],
            ),
            client(
                limited(0.21, 1.0, false),
                vec![
                    Workload {
                        kernel_ns: 5_720 * us,
                        kernels: 4,
                        ..base
                    },
                    Workload {
                        kernel_ns: 207 * us,
                        kernels: 600,
                        host_ns: 550 * ms,
                        ..base
                    },
                ],
            ),
            client(
                limited(0.17, 0.84, false),
                vec![
                    Workload {
                        kernel_ns: 1_650 * us,
                        kernels: 64,
                        sync: false,
                        start: 14_200 * ms,
                        ..base
                    },
                    Workload {
                        kernel_ns: 35 * us,
                        kernels: 10,
                        graph: true,
                        end: 61 * S,
                        ..base
                    },
                ],
            ),
            client(
                limited(0.20, 1.0, false),
                vec![Workload {
                    kernel_ns: 218 * us,
                    ..base
                }],
            ),
            client(
                limited(0.04, 0.40, false),
                vec![train(10 * ms, 13 * S, 65_900 * ms)],
            ),
            client(
                limited(0.19, 1.0, false),
                vec![train(2_100 * us, 15_200 * ms, 70 * S)],
            ),
        ],
        changes: vec![ShareChange {
            at: 27_400 * ms,
            client: 4,
            shares: limited(0.03, 1.0, false),
        }],
        duration: 70 * S,
    }
}

#[test]
#[ignore]
fn soak_seed_37_explained() {
    print_beside_time_slicing(&soak_seed_37());
}

/// GPU soak seed 37's first 70 s: the training loop of 2 ms sleeps gets its due. Not yet: as on
/// the GPU, the simulation gives it 0.13-0.18 of its due 0.20-0.26 (request 0.19), its USED as
/// low, where the others get theirs; each of its steps waits for the token or runs beside
/// another context's kernels.
#[test]
#[ignore = "the promise is not yet kept here: a host-bound training loop of a small request"]
fn soak_seed_37s_host_bound_training_loop_gets_its_due() {
    let sc = soak_seed_37();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// The soak library's loops as the named soak scenarios below build them, from `start` to `end`,
/// with the kernel times the GPU ran them at (as in [`soak_seed_37`]): inference every 5 ms
/// (four 90 us kernels); a training loop bound by its host (eight 290 us kernels, then `host_ns`
/// asleep); a bursty job (about 125 ms of `kernel_ns` kernels, then 550 ms asleep, the middle of
/// its 100-1000 ms); kernels of `kernel_ns` synchronizing after every `sync_every` (0: never);
/// a launch-bound MLP loop.
mod soak_loops {
    use super::*;

    pub fn infer(start: Nanos, end: Nanos) -> Workload {
        Workload {
            kernel_ns: 90_000,
            kernels: 4,
            period_ns: Some(5_000_000),
            ..plain_loop(start, end)
        }
    }

    pub fn train(host_ns: Nanos, start: Nanos, end: Nanos) -> Workload {
        Workload {
            kernel_ns: 290_000,
            kernels: 8,
            host_ns,
            ..plain_loop(start, end)
        }
    }

    pub fn bursty(kernel_ns: Nanos, start: Nanos, end: Nanos) -> Workload {
        Workload {
            kernel_ns,
            kernels: (125_000_000 / kernel_ns).max(1) as u32,
            host_ns: 550_000_000,
            ..plain_loop(start, end)
        }
    }

    pub fn kernels(kernel_ns: Nanos, sync_every: u32, start: Nanos, end: Nanos) -> Workload {
        Workload {
            kernel_ns,
            kernels: if sync_every == 0 { 64 } else { sync_every },
            sync: sync_every != 0,
            ..plain_loop(start, end)
        }
    }

    /// A training step captured as a CUDA graph of `step_ns` of GPU time, replayed and waited
    /// for every `sync_every` replays.
    pub fn graph(step_ns: Nanos, sync_every: u32, start: Nanos, end: Nanos) -> Workload {
        Workload {
            kernel_ns: step_ns,
            kernels: sync_every,
            graph: true,
            sync: true,
            ..plain_loop(start, end)
        }
    }

    /// The soak's MNIST-sized MLP as an H100 ran it alone: about 28 launches a step, 60 us of
    /// host time each (the framework's), 10 us of GPU time each, a wait every 10 steps.
    pub fn mlp(start: Nanos, end: Nanos) -> Workload {
        Workload {
            kernel_ns: 10_000,
            kernels: 280,
            launch_ns: 60_000,
            host_ns: 0,
            ..plain_loop(start, end)
        }
    }

    /// The soak's loop of the smallest matmuls, each waited for: on an H100 a 256 x 256 bf16
    /// matmul (3 us of GPU time) every 27 us alone, the rest the framework's launch and the wait.
    pub fn tiny_synced(start: Nanos, end: Nanos) -> Workload {
        Workload {
            kernel_ns: 3_000,
            kernels: 1,
            launch_ns: 24_000,
            host_ns: 0,
            ..plain_loop(start, end)
        }
    }
}

/// GPU soak seed 30 (90 s on an H200), its first 75 s: an interactive client (request 0.10),
/// a bursty job of 1.6 ms kernels (request 0.05), a launch-bound MLP loop (request 0, then 0.15
/// at 58.4 s) until 56.1 s, 5 ms kernels waited for one by one (0.27), 5 ms kernels never waited
/// for and from 32.6 s a training loop of 2 ms sleeps (request 0), and a bursty job of 200 us
/// kernels (0.27, limit 0.47). On the GPU the bursty client of request 0.05 got 0.068-0.079 of
/// its due 0.11-0.12 in five settled windows, its USED as low.
fn soak_seed_30() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 75 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.10, 0.57, true), vec![infer(0, end)]),
            client(limited(0.05, 1.0, false), vec![bursty(1_650 * us, 0, end)]),
            client(limited(0.0, 0.83, false), vec![mlp(0, 56_100 * ms)]),
            client(
                limited(0.27, 1.0, false),
                vec![kernels(5_720 * us, 1, 0, end)],
            ),
            client(
                limited(0.0, 1.0, false),
                vec![
                    kernels(5_720 * us, 0, 0, end),
                    train(2 * ms, 32_600 * ms, end),
                ],
            ),
            client(limited(0.27, 0.47, false), vec![bursty(218 * us, 0, end)]),
        ],
        changes: vec![ShareChange {
            at: 58_400 * ms,
            client: 2,
            shares: limited(0.15, 0.83, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_30_explained() {
    print_beside_time_slicing(&soak_seed_30());
}

/// GPU soak seed 30's first 75 s: the bursty client of request 0.05 gets its due. Not yet: as on
/// the GPU, the simulation gives it 0.068-0.077 of its due 0.107-0.110, its USED as low (the
/// daemon sees it), where time-slicing gives it 0.10-0.12; the others get theirs.
#[test]
#[ignore = "the promise is not yet kept here: a bursty client of a small request"]
fn soak_seed_30s_bursty_client_of_a_small_request_gets_its_due() {
    let sc = soak_seed_30();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 33 (90 s on an H200): a client of a training loop of 2 ms sleeps and a bursty
/// job of 1.6 ms kernels (request 0.17); 1.6 ms kernels waited for one by one (0.27) until
/// 58.2 s; 1.6 ms kernels never waited for (0.11, then 0.09 at 37.7 s; limit 0.56) until 49 s;
/// a bursty job of 200 us kernels from 12.4 s and 1.6 ms kernels waited for every four from
/// 15.9 s (0.16); a training loop of 10 ms sleeps until 58.7 s and 1 ms kernels waited for one
/// by one (0.21, then 0.13 at 72.7 s; limit 0.77); inference every 5 ms in a batch client of
/// request 0. On the GPU the first client got 0.24-0.31 of its due 0.31-0.36 in four settled
/// windows from 60 s on, its USED 0.26-0.35.
fn soak_seed_33() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 90 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(
                limited(0.17, 1.0, false),
                vec![train(2 * ms, 0, end), bursty(1_650 * us, 0, end)],
            ),
            client(
                limited(0.27, 1.0, false),
                vec![kernels(1_650 * us, 1, 0, 58_200 * ms)],
            ),
            client(
                limited(0.11, 0.56, false),
                vec![kernels(1_650 * us, 0, 0, 49 * S)],
            ),
            client(
                limited(0.16, 1.0, false),
                vec![
                    bursty(218 * us, 12_400 * ms, end),
                    kernels(1_650 * us, 4, 15_900 * ms, end),
                ],
            ),
            client(
                limited(0.21, 0.77, false),
                vec![train(10 * ms, 0, 58_700 * ms), kernels(ms, 1, 0, end)],
            ),
            client(limited(0.0, 0.79, false), vec![infer(0, end)]),
        ],
        changes: vec![
            ShareChange {
                at: 37_700 * ms,
                client: 2,
                shares: limited(0.09, 0.56, false),
            },
            ShareChange {
                at: 72_700 * ms,
                client: 4,
                shares: limited(0.13, 0.77, false),
            },
        ],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_33_explained() {
    print_beside_time_slicing(&soak_seed_33());
}

/// GPU soak seed 33: the client of a host-bound training loop and a bursty job (request 0.17)
/// gets its due. Not yet: as on the GPU, the simulation gives it 0.145-0.28 of its due
/// 0.18-0.36 in most windows (0.24-0.28 of 0.31-0.36 from 60 s, the GPU's short windows), its
/// USED 0.16-0.32, where the others get theirs.
#[test]
#[ignore = "the promise is not yet kept here: a host-bound training loop and a bursty job of a small request"]
fn soak_seed_33s_host_bound_and_bursty_client_gets_its_due() {
    let sc = soak_seed_33();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 34 (90 s on an H200), its first 70 s: an interactive client (request 0.02); a
/// client of a bursty job of 1.6 ms kernels and a training loop of 5 ms sleeps (request 0.17,
/// then 0.08 at 26.4 s; limit 0.85); the same of 200 us kernels (request 0, limit 0.37); a
/// training loop of 20 ms sleeps (0.11); 1.6 ms kernels waited for every four from 19.8 s to
/// 64.7 s (0.30); a bursty job of 1.6 ms kernels (0.36, limit 0.61). On the GPU the client of
/// request 0.17 got 0.28-0.35 of its due 0.51-0.57 in five settled windows, its USED
/// 0.25-0.32: the daemon saw it get less than its due.
fn soak_seed_34() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 70 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.02, 1.0, true), vec![infer(0, end)]),
            client(
                limited(0.17, 0.85, false),
                vec![bursty(1_650 * us, 0, end), train(5 * ms, 0, end)],
            ),
            client(
                limited(0.0, 0.37, false),
                vec![bursty(218 * us, 0, end), train(5 * ms, 0, end)],
            ),
            client(limited(0.11, 1.0, false), vec![train(20 * ms, 0, end)]),
            client(
                limited(0.30, 1.0, false),
                vec![kernels(1_650 * us, 4, 19_800 * ms, 64_700 * ms)],
            ),
            client(limited(0.36, 0.61, false), vec![bursty(1_650 * us, 0, end)]),
        ],
        changes: vec![ShareChange {
            at: 26_400 * ms,
            client: 1,
            shares: limited(0.08, 0.85, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_34_explained() {
    print_beside_time_slicing(&soak_seed_34());
}

/// GPU soak seed 34's first 70 s: the client of request 0.17 (a bursty job of 1.6 ms kernels and
/// a training loop of 5 ms sleeps) gets its due. Not yet: as on the GPU, the simulation gives it
/// 0.32-0.35 of its due 0.515 for the first 20 s, its USED as low, while the client of the
/// same two loops of request 0 (200 us kernels, limit 0.37) gets 0.20-0.24 where it is due
/// 0.07-0.11: both have work in most of the time, and the one of no request gets the more of
/// it. From 20 s, beside the loop of request 0.30, the first gets 0.12-0.18 of 0.14-0.24.
#[test]
#[ignore = "the promise is not yet kept here: host-bound and bursty clients of small requests"]
fn soak_seed_34s_client_of_small_request_gets_its_due() {
    let sc = soak_seed_34();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 26 (90 s on an H100): 20 us kernels waited for one by one (request 0.07, limit
/// 0.87); a launch-bound MLP loop (0.12, limit 0.65; 0.05 at 75 s); 1.6 ms kernels waited for one
/// by one and an MLP loop from 12.6 s to 64.8 s (0.06); a CUDA graph of a 354 us training step
/// waited for every ten replays from 37.2 s (0.10); an MLP loop (0.01, limit 0.23); bursty jobs
/// of 1.6 ms and, from 9.3 s to 79.6 s, 200 us kernels (0.04); a bursty job of 200 us kernels
/// (0.08). On the GPU the loop of 20 us kernels got 0.009-0.050 of its due 0.15-0.25 in every
/// window, its USED 0.002-0.011 (time-slicing gives it less still).
fn soak_seed_26() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 90 * S);
    let short_kernels = tiny_synced(0, end);
    let graph_steps = Workload {
        launch_ns: 20 * us,
        ..kernels(354 * us, 10, 37_200 * ms, end)
    };
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.07, 0.87, false), vec![short_kernels]),
            client(limited(0.12, 0.65, false), vec![mlp(0, end)]),
            client(
                limited(0.06, 1.0, false),
                vec![
                    kernels(1_650 * us, 1, 0, end),
                    mlp(12_600 * ms, 64_800 * ms),
                ],
            ),
            client(limited(0.10, 1.0, false), vec![graph_steps]),
            client(limited(0.01, 0.23, false), vec![mlp(0, end)]),
            client(
                limited(0.04, 1.0, false),
                vec![
                    bursty(1_650 * us, 0, end),
                    bursty(218 * us, 9_300 * ms, 79_600 * ms),
                ],
            ),
            client(limited(0.08, 1.0, false), vec![bursty(218 * us, 0, end)]),
        ],
        changes: vec![ShareChange {
            at: 75 * S,
            client: 1,
            shares: limited(0.05, 0.65, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_26_explained() {
    print_beside_time_slicing(&soak_seed_26());
}

/// GPU soak seed 26: every batch client gets its due. On the GPU the loop of the smallest
/// matmuls, each waited for, got 0.01-0.11 of its due 0.15-0.36: its leases ran beside others'
/// (1502 of 1534 in a 60 s run with the daemon's debug log), where it launched a kernel every
/// 0.62 ms (every 27 us alone). Here, as there, its leases ran beside others' by its light
/// demand and it got 0.02-0.04 of a due 0.15-0.19; they run alone now, its launches beside
/// others having crawled ([`crate::scheduler::pace`]). It was still 3 points short in the last
/// windows (0.138-0.143 of 0.171), as on the GPU: the launch-bound loop of request 0.05 started
/// its leases beside every other (backfill) and took 0.6 of the GPU where it was due 0.12-0.32.
/// Only a client below its weight's part starts ahead of the first in line now
/// ([`crate::scheduler::Scheduler`]'s backfill): the loop gets 0.169-0.176, the launch-bound
/// one 0.23.
#[test]
fn soak_seed_26s_loop_of_short_kernels_gets_its_due() {
    let sc = soak_seed_26();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// A random mix of saturating loops (seed 16 of its kind): an interactive client of request 0.1
/// (inference every 5 ms, a second such process from 8.3 s) beside three batch clients of 2.7 ms
/// to 19 ms kernels never waited for. An interactive lease goes back once its process has been
/// idle 0.2 ms (the hook's `INTERACTIVE_IDLE_NS`): held until 0.5 ms idle, the interactive
/// client got 0.080-0.081 of its due 0.121 from 10 s on; now every client gets its due (the
/// 240 random mixes: 177 kept, 169 at 0.5 ms).
#[test]
fn an_interactive_lease_goes_back_soon_after_its_work() {
    let sc = Scenario::random_of(16, 30 * S, &[Kind::Saturating]);
    assert!(sc.clients[0].shares.interactive);
    assert_kept(&sc, &run(&sc), |_| true);
}

/// A random mix of host-bound loops (seed 13 of its kind): three batch clients' training loops
/// (eight kernels of 0.45-0.8 ms a step, then 3.5-15 ms of host work) beside an interactive
/// client. Lifted level with the virtual clock at each return from its host work, the loop of
/// request 0.35 lost the place its last turn had left it to the clients that ran meanwhile, and
/// got 0.440 of the GPU where time-slicing gives it 0.460 (0.047 short of its due out of what
/// the mix could use, [`referee::capacity`]); back with that lag (at most a lease at its
/// weight), no client is more than 0.016 short. That held while the simulation counted a
/// process's wait for the token after a pause as part of the pause, which the hook does not:
/// measured as the hook measures them (its own time away, to the launch that asks again), the
/// loops' pauses teach less often that they stay away, and client 1 is 0.044 short in the window
/// at 20 s.
#[test]
#[ignore = "the promise is not yet kept here: pauses measured as the hook measures them"]
fn a_client_back_from_its_host_work_keeps_its_lag() {
    let sc = Scenario::random_of(13, 30 * S, &[Kind::HostBound]);
    assert!(sc.clients[0].shares.interactive);
    let (out, ts) = (run(&sc), run_time_sliced(&sc));
    let (short, t0, client) = worst(&out, Some(&ts));
    assert!(
        short <= referee::TOLERANCE,
        "client {client} short by {short:.3} in the window at {t0} s"
    );
}

/// A random mix of bursty jobs (seed 28 of its kind): six clients of requests 0.11-0.25, eleven
/// jobs of 50-180 ms bursts of 1 ms kernels and 0.1-0.8 s pauses, coming and going. A client
/// owed burst credit ends the running lease when its burst begins, and waits for the queue that
/// lease keeps: on a lease of its own up to the rest of the lease. With the leases of the others
/// kept to short queues while an owed client is away, no client is more than 0.03 short; with
/// queues as usual, the client of request 0.15 was 0.041 short. With pauses measured as the
/// hook measures them (not counting the wait for the token after one), client 2 is 0.049 short
/// in the window at 10 s.
#[test]
#[ignore = "the promise is not yet kept here: pauses measured as the hook measures them"]
fn leases_keep_short_queues_for_owed_bursts() {
    let sc = Scenario::random_of(28, 30 * S, &[Kind::Bursty]);
    let (out, ts) = (run(&sc), run_time_sliced(&sc));
    let (short, t0, client) = worst(&out, Some(&ts));
    assert!(
        short <= referee::TOLERANCE,
        "client {client} short by {short:.3} in the window at {t0} s"
    );
}

/// A random mix of inference and saturating loops (seed 5 of that mix): a batch client of
/// request 0.19 whose two processes run inference every 5 ms (four 0.11 ms kernels, waited for)
/// beside four clients of loops of 1.5-19 ms kernels never waited for, one of them with an
/// inference loop of its own. Each batch lease beside others was charged an equal part of the
/// time: an inference lease about three times its work, so the client ran ahead in virtual time,
/// its requests waited in line behind whole leases of the saturating loops, and it got
/// 0.111-0.132 of its due 0.181 (time-sliced 0.071-0.132). Charged the time its work took
/// (`Lease::batch_charge`), as USED counts it, it gets its due.
#[test]
fn inference_loops_beside_saturating_ones_are_charged_their_work() {
    let sc = Scenario::random_of(5, 30 * S, &[Kind::Inference, Kind::Saturating]);
    assert!(sc.clients[3]
        .processes
        .iter()
        .all(|w| w.period_ns.is_some()));
    let (out, ts) = (run(&sc), run_time_sliced(&sc));
    let (short, t0, client) = worst(&out, Some(&ts));
    assert!(
        short <= referee::TOLERANCE,
        "client {client} short by {short:.3} in the window at {t0} s"
    );
}

/// GPU soak seed 31 (H100, 60 s), its first 35 s: a batch client of request 0.82 (5 ms kernels,
/// never waited for) beside an interactive client of request 0.02 and limit 0.30 (inference
/// every 5 ms from 7.5 s, a second such process from 20.2 s). On the GPU the batch client got
/// 0.914-0.946 of its due 0.976 in four settled windows while the interactive client used
/// 0.025-0.048.
fn soak_seed_31() -> Scenario {
    use soak_loops::*;
    let (ms, end) = (1_000_000, 35 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(
                limited(0.02, 0.30, true),
                vec![infer(7_500 * ms, end), infer(20_200 * ms, end)],
            ),
            client(limited(0.82, 1.0, false), vec![kernels(5 * ms, 0, 0, end)]),
        ],
        changes: vec![],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_31_explained() {
    print_beside_time_slicing(&soak_seed_31());
}

/// GPU soak seed 31: the batch client keeps its due beside the interactive one. It does here
/// (0.975-0.984 of 0.976), not on the GPU (0.914-0.946). The simulation's hand-overs cost no
/// time. On the GPU the soak cell `interactive-beside-5ms` (this mix alone) measured the cost:
/// 0.91 beside the interactive client, 0.95 beside the same inference in a batch client, the
/// same with a queue four times as deep; about the time each interactive lease stayed held
/// past its work (0.5 ms idle then) while the revoked batch lease waited. Held 0.2 ms, side by
/// side: 0.924-0.935 (0.903-0.917 at 0.5 ms; time-slicing 0.926).
#[test]
fn soak_seed_31s_batch_client_keeps_its_due_beside_an_interactive_one() {
    let sc = soak_seed_31();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// Random launch-bound mix 10, its first 20 s: two loops that wait for each of their tiny
/// kernels (clients of requests 0.42 and 0.43) beside a client of request 0.11 running two
/// launch-bound loops. All of them fit by demand, and the loops that wait kept 0.3-0.4 of their
/// pace alone beside the launch-bound ones: charged their part, each got 0.27-0.39 of a due
/// 0.44-0.45 while the client of 0.11 took 0.33. Owed their requests and held back beside
/// others ([`crate::scheduler::pace`]), they run alone until they are not owed.
#[test]
fn loops_that_wait_for_tiny_kernels_get_their_due_beside_launch_bound_ones() {
    let sc = Scenario {
        duration: 20 * S,
        ..Scenario::random_of(10, 30 * S, &[Kind::LaunchBound])
    };
    assert_eq!(sc.clients.len(), 3);
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 41 (75 s on an H100, never run before it): an interactive client of inference
/// (request 0.05); 20 us kernels waited for every four (0.17, limit 0.64; 0.12 from 22.6 s);
/// bursts of 200 us kernels until 40.5 s (0.24); 1 ms kernels never waited for from 24.8 s
/// (0.27, limit 0.89); 50 us kernels waited for every four from 27.2 s (0.19). On the GPU the
/// loop of 20 us kernels got 0.55-0.59 of its due 0.64 (its limit) in the first windows, and the
/// loop of 50 us kernels 0.263 of 0.297-0.299 from 40 s; throughput 1.094 of time-slicing's.
fn soak_seed_41() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 75 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.05, 1.0, true), vec![infer(0, end)]),
            client(
                limited(0.17, 0.64, false),
                vec![kernels(24 * us, 4, 0, end)],
            ),
            client(
                limited(0.24, 1.0, false),
                vec![bursty(199 * us, 0, 40_500 * ms)],
            ),
            client(
                limited(0.27, 0.89, false),
                vec![kernels(1_008 * us, 0, 24_800 * ms, end)],
            ),
            client(
                limited(0.19, 1.0, false),
                vec![kernels(55 * us, 4, 27_200 * ms, end)],
            ),
        ],
        changes: vec![ShareChange {
            at: 22_600 * ms,
            client: 1,
            shares: limited(0.12, 0.64, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_41_explained() {
    print_beside_time_slicing(&soak_seed_41());
}

/// GPU soak seed 42 (75 s on an H100, never run before it): seven batch clients of requests
/// 0-0.16 adding up to 0.59: bursts of 200 us kernels (0.16, limit 0.77); 20 ms kernels waited
/// for one by one (0.04); the same and from 14.3 s a training loop of 2 ms sleeps (0.03, limit
/// 0.71); 5 ms kernels waited for one by one until 45.5 s (0.13, limit 0.81); 50 ms kernels
/// waited for every four and a launch-bound MLP loop (0, limit 0.32); 1 ms kernels never waited
/// for (0.16, limit 0.77; 0.10 from 52.8 s); bursts of 1.6 ms kernels and from 29.8 s a training
/// loop of 10 ms sleeps (0.07). On the GPU the loop of 5 ms kernels got 0.19-0.20 of its due
/// 0.23-0.24, the last client 0.19-0.20 of 0.23, its bursts 5.5 times their time alone.
fn soak_seed_42() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 75 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.16, 0.77, false), vec![bursty(199 * us, 0, end)]),
            client(
                limited(0.04, 1.0, false),
                vec![kernels(21_200 * us, 1, 0, end)],
            ),
            client(
                limited(0.03, 0.71, false),
                vec![
                    kernels(21_200 * us, 1, 0, end),
                    train(2 * ms, 14_300 * ms, end),
                ],
            ),
            client(
                limited(0.13, 0.81, false),
                vec![kernels(5_720 * us, 1, 0, 45_500 * ms)],
            ),
            client(
                limited(0.0, 0.32, false),
                vec![kernels(56_600 * us, 4, 0, end), mlp(0, end)],
            ),
            client(
                limited(0.16, 0.77, false),
                vec![kernels(1_008 * us, 0, 0, end)],
            ),
            client(
                limited(0.07, 1.0, false),
                vec![train(10 * ms, 29_800 * ms, end), bursty(1_530 * us, 0, end)],
            ),
        ],
        changes: vec![ShareChange {
            at: 52_800 * ms,
            client: 5,
            shares: limited(0.10, 0.77, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_42_explained() {
    print_beside_time_slicing(&soak_seed_42());
}

/// GPU soak seed 41: every batch client gets its due. Not yet: as on the GPU, the loop of 20 us
/// kernels gets 0.58-0.61 of its due 0.64 in the first windows, and after 40 s the simulation
/// gives the loop of 1 ms kernels 0.393 of its due 0.432 (on the GPU the loop of 50 us kernels
/// beside it fell short instead, 0.263 of 0.297).
#[test]
#[ignore = "the promise is not yet kept here: loops that synchronize often beside others"]
fn soak_seed_41s_batch_clients_get_their_due() {
    let sc = soak_seed_41();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 42: every client gets its due. Not yet: as on the GPU, the client of request
/// 0.07 (bursts of 1.6 ms kernels, and a training loop of 10 ms sleeps from 29.8 s) gets
/// 0.16-0.19 of its due 0.22 from 50 s (0.19-0.20 of 0.23 on the GPU).
#[test]
#[ignore = "the promise is not yet kept here: a bursty job and a host-bound loop of a small request"]
fn soak_seed_42s_client_of_small_request_gets_its_due() {
    let sc = soak_seed_42();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 44 (H100), with the kernel times the GPU ran: two interactive clients of
/// request 0.02 running inference (the second until 39.6 s); a client of request 0.04, 0.39
/// from 25.8 s, whose loop waits for each 1.6 ms kernel until 51.8 s; bursts of 200 us kernels
/// (0.23) from 36.3 s; and a client of request 0.29 (limit 0.73) with bursts of 1.6 ms kernels
/// beside a loop of 56 ms kernels that never waits. On the GPU the client of 0.29 got 0.335 of
/// its due 0.395 four seconds after the change, and its bursts took 14.65 times their time
/// alone (time-slicing 2.93).
fn soak_seed_44() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 75 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.02, 1.0, true), vec![infer(0, end)]),
            client(limited(0.02, 1.0, true), vec![infer(0, 39_600 * ms)]),
            client(
                limited(0.04, 1.0, false),
                vec![kernels(1_674 * us, 1, 0, 51_800 * ms)],
            ),
            client(
                limited(0.23, 1.0, false),
                vec![bursty(203 * us, 36_300 * ms, end)],
            ),
            client(
                limited(0.29, 0.73, false),
                vec![bursty(1_623 * us, 0, end), kernels(56_500 * us, 0, 0, end)],
            ),
        ],
        changes: vec![ShareChange {
            at: 25_800 * ms,
            client: 2,
            shares: limited(0.39, 1.0, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_44_explained() {
    let sc = soak_seed_44();
    let (out, ts) = print_beside_time_slicing(&sc);
    for (p, _, _, gpushare, sliced) in bursts_beside_time_slicing(&sc) {
        eprintln!("process {p}: bursts x{gpushare:.2} of alone (time-sliced x{sliced:.2})");
    }
    print_latencies("gpushare", &out, &[0, 1]);
    print_latencies("time-sliced", &ts, &[0, 1]);
}

/// GPU soak seed 44: the batch clients get their due. As on the GPU but for one window there:
/// the simulation leaves none more than 3 points short (the GPU left the client of 0.29 at
/// 0.335 of 0.395 in the window four seconds after the change).
#[test]
fn soak_seed_44s_batch_clients_get_their_due() {
    let sc = soak_seed_44();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 44: the inference clients' requests go at once, but where their clients use
/// more than their due (from 25.8 s, beside the client of request 0.39): nine in ten within
/// 5 ms. Their clients were charged the waits of requests for the 56 ms kernels' time slices,
/// and held to the virtual time of the client at its limit, which falls behind for good: they
/// ran ahead of the batch clients and waited in line behind their leases (p90 17 ms, and
/// 0.044-0.047 of a due 0.068, as on the GPU: p99 63-68 ms, time-sliced 4-8).
#[test]
fn soak_seed_44s_inference_requests_go_at_once() {
    let sc = soak_seed_44();
    let out = run(&sc);
    for p in [0, 1] {
        let p90 = quantile(&out.latencies[p], 0.9);
        assert!(p90 <= 5.0, "inference {p}: p90 {p90:.2} ms");
    }
    assert_kept(&sc, &out, |_| true);
}

/// GPU soak seed 44: the job of bursts in the client of request 0.29 runs them no slower than
/// time-slicing does. Not yet: beside the loop of 56 ms kernels of its own client, each of its
/// turns comes after one of that loop's leases, a kernel long, and its bursts take 12 times
/// their time alone in the simulation (time-slicing 3.4; on the GPU 14.65 and 2.93).
#[test]
#[ignore = "not yet: a bursty job beside a loop of long kernels of its own client"]
fn soak_seed_44s_bursty_job_beside_its_sibling_is_no_slower_than_time_sliced() {
    let sc = soak_seed_44();
    for (p, _, _, gpushare, sliced) in bursts_beside_time_slicing(&sc) {
        assert!(
            gpushare <= sliced + 0.05,
            "process {p}: bursts x{gpushare:.2} of alone, time-sliced x{sliced:.2}"
        );
    }
}

/// GPU soak seed 47 (H100, 75 s): a training loop of 5 ms host sleeps (request 0.18, limit 0.24)
/// from 22.9 s; bursts of 1.6 ms kernels (0.19); inference and, from 33.7 s to 64.1 s, a
/// training loop of 10 ms sleeps in one client (0.02); 20 ms kernels never waited for and bursts
/// of 1.6 ms kernels in one client (0.22, 0.17 from 44.1 s). On the GPU the loop of 5 ms sleeps
/// got 0.12-0.16 where it was due its limit, 0.24, in every window, and the client of 20 ms
/// kernels 0.56-0.62 of a due 0.44-0.55.
fn soak_seed_47() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 75 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(
                limited(0.18, 0.24, false),
                vec![train(5 * ms, 22_900 * ms, end)],
            ),
            client(limited(0.19, 1.0, false), vec![bursty(1_600 * us, 0, end)]),
            client(
                limited(0.02, 1.0, false),
                vec![
                    infer(17_500 * ms, end),
                    train(10 * ms, 33_700 * ms, 64_100 * ms),
                ],
            ),
            client(
                limited(0.22, 1.0, false),
                vec![kernels(20 * ms, 0, 0, end), bursty(1_600 * us, 0, end)],
            ),
        ],
        changes: vec![ShareChange {
            at: 44_100 * ms,
            client: 3,
            shares: limited(0.17, 1.0, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_47_explained() {
    print_beside_time_slicing(&soak_seed_47());
}

/// GPU soak seed 47: the training loop of 5 ms sleeps gets its due, its limit. Not yet: back
/// from each sleep it waits for the lease of 20 ms kernels beside it to drain, and the
/// simulation gives it 0.145-0.179 of 0.24 (time-slicing 0.16-0.18; on the GPU 0.12-0.16).
#[test]
#[ignore = "not yet: a loop of host sleeps beside 20 ms kernels never waited for"]
fn soak_seed_47s_host_bound_loop_gets_its_due() {
    let sc = soak_seed_47();
    assert_kept(&sc, &run(&sc), |i| i == 0);
}

/// GPU soak seed 50 (H100, 75 s): an interactive client of request 0.05 (inference); a
/// launch-bound MLP training loop (0.22, limit 0.85); 20 ms kernels never waited for (0.15,
/// until 50.8 s); 50 us kernels waited for every 4 and bursts of 1.6 ms kernels in one client
/// (request 0, 0.03 from 55.2 s); 5 ms kernels never waited for (from 18.3 s) and a training
/// loop of 5 ms sleeps (from 24.7 s) in one client (0.11). On the GPU the MLP loop's client got
/// 0.31-0.50 where it was due 0.42-0.57 in five settled windows, and the mix did 0.62 of what
/// time-slicing did.
fn soak_seed_50() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 75 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.05, 1.0, true), vec![infer(0, end)]),
            client(limited(0.22, 0.85, false), vec![mlp(0, end)]),
            client(
                limited(0.15, 1.0, false),
                vec![kernels(20 * ms, 0, 0, 50_800 * ms)],
            ),
            client(
                limited(0.0, 1.0, false),
                vec![kernels(50 * us, 4, 0, end), bursty(1_600 * us, 0, end)],
            ),
            client(
                limited(0.11, 1.0, false),
                vec![
                    kernels(5 * ms, 0, 18_300 * ms, end),
                    train(5 * ms, 24_700 * ms, end),
                ],
            ),
        ],
        changes: vec![ShareChange {
            at: 55_200 * ms,
            client: 3,
            shares: limited(0.03, 1.0, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_50_explained() {
    print_beside_time_slicing(&soak_seed_50());
}

/// GPU soak seed 50: every batch client keeps its due share in the simulation, as it does now.
/// On the GPU it did not: the MLP loop's client got 0.31-0.50 of a due 0.42-0.57 beside the 20
/// ms and 5 ms kernels never waited for, holding leases 53% of the run. The simulation gives it
/// 0.44-0.65: its launches beside a long kernel lose less here than on the GPU.
#[test]
fn soak_seed_50s_batch_clients_get_their_due_in_the_simulation() {
    let sc = soak_seed_50();
    assert_kept(&sc, &run(&sc), batch(&sc));
}

/// GPU soak seed 56 (H100, 60 s): two interactive clients of inference (0.10, limit 0.85,
/// until 44.8 s; 0.05 with two processes); a training loop of 10 ms sleeps (0.07, from 22.2 s);
/// a loop of 20 ms sleeps and 50 ms kernels never waited for (0.15, limit 0.67, 0.10 from
/// 49.1 s; the kernels until 51.6 s); a loop of 2 ms sleeps (from 9.4 s) and batch inference
/// (from 25.9 s) in one client (0.23); bursts of 1.6 ms kernels and a loop of 10 ms sleeps
/// (until 46.7 s) in one client (0, limit 0.26); a launch-bound MLP loop (0.05); an MLP loop and
/// 200 us kernels never waited for (0.08). On the GPU the client of the 2 ms loop got
/// 0.25-0.31 of a due 0.33-0.42 in four settled windows.
fn soak_seed_56() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 60 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.10, 0.85, true), vec![infer(0, 44_800 * ms)]),
            client(limited(0.05, 1.0, true), vec![infer(0, end), infer(0, end)]),
            client(
                limited(0.07, 1.0, false),
                vec![train(10 * ms, 22_200 * ms, end)],
            ),
            client(
                limited(0.15, 0.67, false),
                vec![train(20 * ms, 0, end), kernels(50 * ms, 0, 0, 51_600 * ms)],
            ),
            client(
                limited(0.23, 1.0, false),
                vec![train(2 * ms, 9_400 * ms, end), infer(25_900 * ms, end)],
            ),
            client(
                limited(0.0, 0.26, false),
                vec![bursty(1_600 * us, 0, end), train(10 * ms, 0, 46_700 * ms)],
            ),
            client(limited(0.05, 1.0, false), vec![mlp(0, end)]),
            client(
                limited(0.08, 1.0, false),
                vec![mlp(0, end), kernels(200 * us, 0, 0, end)],
            ),
        ],
        changes: vec![ShareChange {
            at: 49_100 * ms,
            client: 3,
            shares: limited(0.10, 0.67, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_56_explained() {
    print_beside_time_slicing(&soak_seed_56());
}

/// GPU soak seed 56: the client of the loop of 2 ms sleeps gets its due. Not yet: it gets
/// 0.245-0.30 of a due 0.33-0.37 from 10 s on, as on the GPU (time-slicing 0.10-0.20).
#[test]
#[ignore = "not yet: a loop of 2 ms sleeps among light loops, beside 50 ms kernels"]
fn soak_seed_56s_host_bound_client_gets_its_due() {
    let sc = soak_seed_56();
    assert_kept(&sc, &run(&sc), |i| i == 4);
}

/// GPU soak seed 58 (H100, 60 s): 200 us kernels waited for every 4 (0.10, limit 0.46, from
/// 26.8 s); 200 us kernels waited for each (0.27, limit 0.85, 27.1-52.5 s); a training loop of
/// 10 ms sleeps (until 36.2 s) and batch inference in one client (0.13); a loop of 10 ms sleeps
/// (0.05); bursts of 200 us kernels (from 11.6 s) and 50 us kernels waited for each in one
/// client (0.15, limit 0.29); 20 us kernels waited for every 4 and 1 ms kernels never waited for
/// in one client (0, 0.18 from 22.3 s, limit 0.78). On the GPU the two clients of 10 ms loops
/// got 0.18-0.22 of a due 0.29 and 0.13-0.15 of a due 0.21 in the settled windows of their first
/// 25 s.
fn soak_seed_58() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 60 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(
                limited(0.10, 0.46, false),
                vec![kernels(200 * us, 4, 26_800 * ms, end)],
            ),
            client(
                limited(0.27, 0.85, false),
                vec![kernels(200 * us, 1, 27_100 * ms, 52_500 * ms)],
            ),
            client(
                limited(0.13, 1.0, false),
                vec![train(10 * ms, 0, 36_200 * ms), infer(0, end)],
            ),
            client(limited(0.05, 1.0, false), vec![train(10 * ms, 0, end)]),
            client(
                limited(0.15, 0.29, false),
                vec![
                    bursty(200 * us, 11_600 * ms, end),
                    kernels(50 * us, 1, 0, end),
                ],
            ),
            client(
                limited(0.0, 0.78, false),
                vec![kernels(20 * us, 4, 0, end), kernels(ms, 0, 0, end)],
            ),
        ],
        changes: vec![ShareChange {
            at: 22_300 * ms,
            client: 5,
            shares: limited(0.18, 0.78, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_58_explained() {
    print_beside_time_slicing(&soak_seed_58());
}

/// GPU soak seed 58: the two loops of 10 ms sleeps get their due. Not yet: the loop of request
/// 0.05 gets 0.134-0.150 of a due 0.188 in the first 20 s, its leases about twice their time
/// alone: it starts beside the others' leases, as their demands let it.
#[test]
#[ignore = "not yet: loops of host sleeps started beside heavier ones run slowed"]
fn soak_seed_58s_host_bound_loops_get_their_due() {
    let sc = soak_seed_58();
    assert_kept(&sc, &run(&sc), |i| i == 2 || i == 3);
}

/// GPU soak seed 62 (H100, 60 s): 50 ms kernels never waited for (from 15.5 s) and a CUDA graph
/// loop in one client (0.07, limit 0.68; 0.21 from 17 s); a loop of 2 ms sleeps (0.03, limit
/// 0.40); 5 ms kernels waited for every 4 (0.19); bursts of 200 us kernels and 50 ms kernels
/// waited for each in one client (0.03); bursts of 1.6 ms kernels (0.03, 22.1-47.5 s); 1.6 ms
/// kernels waited for every 4 (0.28, limit 0.85, from 15.6 s; 0.14 from 26.7 s). On the GPU
/// the client of 5 ms kernels got 0.22-0.24 of a due 0.29-0.30 in the settled windows, the
/// client of 50 ms kernels 0.41 where its USED said 0.22-0.25, and the mix did 0.70 of what
/// time-slicing did.
fn soak_seed_62() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 60 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(
                limited(0.07, 0.68, false),
                vec![
                    kernels(50 * ms, 0, 15_500 * ms, end),
                    graph(340 * us, 10, 0, end),
                ],
            ),
            client(limited(0.03, 0.40, false), vec![train(2 * ms, 0, end)]),
            client(limited(0.19, 1.0, false), vec![kernels(5 * ms, 4, 0, end)]),
            client(
                limited(0.03, 1.0, false),
                vec![bursty(200 * us, 0, end), kernels(50 * ms, 1, 0, end)],
            ),
            client(
                limited(0.03, 1.0, false),
                vec![bursty(1_600 * us, 22_100 * ms, 47_500 * ms)],
            ),
            client(
                limited(0.28, 0.85, false),
                vec![kernels(1_600 * us, 4, 15_600 * ms, end)],
            ),
        ],
        changes: vec![
            ShareChange {
                at: 17_000 * ms,
                client: 0,
                shares: limited(0.21, 0.68, false),
            },
            ShareChange {
                at: 26_700 * ms,
                client: 5,
                shares: limited(0.14, 0.85, false),
            },
        ],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_62_explained() {
    print_beside_time_slicing(&soak_seed_62());
}

/// GPU soak seed 62: every batch client but the loop of 2 ms sleeps keeps its due share in the
/// simulation, and the USED of the client of 50 ms kernels is what it got. In the first of two GPU
/// runs neither held: that client got 0.41 where its USED said 0.22-0.25, and the client of 5 ms
/// kernels was 0.06-0.07 short; in the second, USED was within 3 points and the client of 5 ms
/// kernels 0.02-0.04 short. Two of three later GPU runs had the first run's marks; in the one whose
/// windows all came back (a trial build of the hook), the client of 50 ms kernels got 0.47-0.56
/// where its USED said 0.23-0.30 (about half: the least a lease beside others is charged), and its
/// hook had learnt 290 us as the GPU time of a launch of its 56 ms kernels (likely from a start-up
/// kernel), so it queued many. The simulation's processes know their kernels' time and cannot show
/// that. The hook now holds a lease of its own to `queue_ahead` until its markers taught it the
/// time per launch four times (and raises a time far too short beside others): in five GPU runs of
/// the build before, two had the fault (288-291 us learnt); in six since, none.
///
/// The loop of 2 ms sleeps (client 1, request 0.03) is not judged here: it gets about half its
/// due, here as on the GPU. On the GPU: 0.041-0.052 of 0.079-0.094 in the first 15 s of the
/// first two runs, and 0.013-0.058 of 0.037-0.085 in every window of a later one, where its hook
/// was granted 639 leases, gave 525 back early in its sleeps, and waited 50 s of the 60 for the
/// token. Here it got its due (0.070 of 0.094 at worst) only while the simulation counted the
/// wait for the token after a pause as part of the pause, which the hook does not: so its
/// pauses all looked longer than the 2.5 ms after which a contended lease goes back, and it gave
/// its leases back half a millisecond into each sleep. Measured as the hook measures them, its
/// 2 ms pauses are short: it holds its leases through its sleeps and gets 0.049-0.051. On the
/// GPU its pauses are longer than its sleep (of 780 of 0.5 ms or more in a run, 630 of 2.5-5 ms
/// and 62 under 1 ms), so its hook gives most leases back early there and waits for the next:
/// 720 grants, 55 s of the 60 waiting, 4.8 ms of lease for 2.5 ms of work each. With pauses of
/// 2.6 ms or more here it gets 0.069-0.078 of 0.094, from 1186 grants of 3.3 ms (951 of them
/// ahead of the others, owed burst credit): what its leases cost it beyond their work on the GPU
/// is not modelled.
#[test]
fn soak_seed_62s_clients_of_kernels_and_bursts_get_their_due_in_the_simulation() {
    let sc = soak_seed_62();
    let batch = batch(&sc);
    assert_kept(&sc, &run(&sc), |c| c != 1 && batch(c));
}

/// GPU soak seed 38 (H100, 60 s): an interactive client of inference (0.10, limit 0.21); 200 us
/// kernels waited for every 4 (0.06, from 24.5 s; 0.19 from 39.9 s); a training loop of 10 ms
/// sleeps (0.05, from 12.3 s); bursts of 200 us kernels and, until 38.7 s, of 1.6 ms kernels in
/// one client (0.07; 0.40 from 37.1 s); batch inference and, from 9.5 s, bursts of 200 us kernels
/// in one client (0.09); 50 ms kernels waited for each (from 9.4 s) and 5 ms kernels never waited
/// for in one client (0.09); a launch-bound MLP loop (from 12.3 s) and a training loop of 5 ms
/// sleeps (until 43.2 s) in one client (0.03). On the GPU the client of inference and bursts got
/// 0.08-0.15 of a due 0.13-0.22 in five settled windows, and the loop of 10 ms sleeps 0.086 of
/// 0.159 in one; the mix did 1.00 of what time-slicing did.
fn soak_seed_38() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 60 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.10, 0.21, true), vec![infer(0, end)]),
            client(
                limited(0.06, 1.0, false),
                vec![kernels(200 * us, 4, 24_500 * ms, end)],
            ),
            client(
                limited(0.05, 1.0, false),
                vec![train(10 * ms, 12_300 * ms, end)],
            ),
            client(
                limited(0.07, 1.0, false),
                vec![bursty(200 * us, 0, end), bursty(1_600 * us, 0, 38_700 * ms)],
            ),
            client(
                limited(0.09, 1.0, false),
                vec![infer(0, end), bursty(200 * us, 9_500 * ms, end)],
            ),
            client(
                limited(0.09, 1.0, false),
                vec![
                    kernels(50 * ms, 1, 9_400 * ms, end),
                    kernels(5 * ms, 0, 0, end),
                ],
            ),
            client(
                limited(0.03, 1.0, false),
                vec![mlp(12_300 * ms, end), train(5 * ms, 0, 43_200 * ms)],
            ),
        ],
        changes: vec![
            ShareChange {
                at: 37_100 * ms,
                client: 3,
                shares: limited(0.40, 1.0, false),
            },
            ShareChange {
                at: 39_900 * ms,
                client: 1,
                shares: limited(0.19, 1.0, false),
            },
        ],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_38_explained() {
    print_beside_time_slicing(&soak_seed_38());
}

/// GPU soak seed 38: the batch clients get their due in the simulation, all but the two of
/// bursts (below).
#[test]
fn soak_seed_38s_batch_clients_but_bursts_get_their_due_in_the_simulation() {
    let sc = soak_seed_38();
    let batch = batch(&sc);
    assert_kept(&sc, &run(&sc), |c| c != 3 && c != 4 && batch(c));
}

/// GPU soak seed 38: the clients of bursts get their due: the one of bursts of 200 us and
/// 1.6 ms kernels (request 0.07) and the one of batch inference and bursts of 200 us kernels
/// (0.09). Not yet: as on the GPU (the second 0.08-0.15 of 0.13-0.22), the simulation gives the
/// second 0.10-0.18 of a due 0.15-0.25 (time-slicing 0.11-0.13) and the first 0.163 of 0.197
/// in one window.
#[test]
#[ignore = "not yet: bursts of clients of small requests beside 50 ms kernels"]
fn soak_seed_38s_bursts_get_their_due() {
    let sc = soak_seed_38();
    assert_kept(&sc, &run(&sc), |c| c == 3 || c == 4);
}

/// GPU soak seed 40 (H100, 60 s): two interactive clients of inference (0.10, limit 0.24; 0.10
/// with a second process from 18.3 s); bursts of 1.6 ms kernels (0.23, 0.25 from 49.5 s);
/// 1.6 ms kernels waited for every 4 (until 44.1 s) and a CUDA graph of a training step (366 us)
/// waited for each in one client (0.22); 1 ms kernels waited for each (until 53.5 s) and a
/// launch-bound MLP loop in one client (0.17). On the GPU the two batch clients of steady loops
/// got 0.24-0.42 of a due 0.32-0.46 in four settled windows, beside the inference; the mix did
/// 1.10 of what time-slicing did.
fn soak_seed_40() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 60 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.10, 0.24, true), vec![infer(0, end)]),
            client(
                limited(0.10, 1.0, true),
                vec![infer(0, end), infer(18_300 * ms, end)],
            ),
            client(limited(0.23, 1.0, false), vec![bursty(1_600 * us, 0, end)]),
            client(
                limited(0.22, 1.0, false),
                vec![
                    kernels(1_600 * us, 4, 0, 44_100 * ms),
                    graph(366 * us, 1, 0, end),
                ],
            ),
            client(
                limited(0.17, 1.0, false),
                vec![kernels(ms, 1, 0, 53_500 * ms), mlp(0, end)],
            ),
        ],
        changes: vec![ShareChange {
            at: 49_500 * ms,
            client: 2,
            shares: limited(0.25, 1.0, false),
        }],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_40_explained() {
    print_beside_time_slicing(&soak_seed_40());
}

/// GPU soak seed 40: every batch client keeps its due share in the simulation. On the GPU the
/// two clients of steady loops beside the inference fell 4-8 points short in four windows: the
/// simulation's inference requests cost a batch lease less than the GPU's do (as in seed 31).
#[test]
fn soak_seed_40s_batch_clients_get_their_due_in_the_simulation() {
    let sc = soak_seed_40();
    let batch = batch(&sc);
    assert_kept(&sc, &run(&sc), batch);
}

/// GPU soak seed 48 (H100, 75 s): an interactive client of inference (0.05, from 27.7 s);
/// launch-bound MLP loops of three clients: one (0.20, limit 0.44, from 14.7 s; 0.39 from
/// 62.8 s), one (0.04, limit 0.60), one beside 5 ms kernels waited for each (0.06, the MLP until
/// 67.1 s); 20 us kernels waited for every 4 (0.18, limit 0.44; 0.26 from 42.5 s); a CUDA graph
/// of a wide training step (2.6 ms) waited for every 10 (from 18.6 s) and bursts of 200 us
/// kernels (from 12.3 s) in one client (0.06, limit 0.84). On the GPU the first MLP client got
/// 0.23-0.30 of a due 0.30-0.44 in four settled windows and the second 0.139 of 0.224 in one; the
/// mix did 0.58 of what time-slicing did.
fn soak_seed_48() -> Scenario {
    use soak_loops::*;
    let (ms, us, end) = (1_000_000, 1_000, 75 * S);
    Scenario {
        seed: 0,
        clients: vec![
            client(limited(0.05, 1.0, true), vec![infer(27_700 * ms, end)]),
            client(limited(0.20, 0.44, false), vec![mlp(14_700 * ms, end)]),
            client(limited(0.04, 0.60, false), vec![mlp(0, end)]),
            client(
                limited(0.06, 1.0, false),
                vec![kernels(5 * ms, 1, 0, end), mlp(0, 67_100 * ms)],
            ),
            client(
                limited(0.18, 0.44, false),
                vec![kernels(20 * us, 4, 0, end)],
            ),
            client(
                limited(0.06, 0.84, false),
                vec![
                    graph(2_600 * us, 10, 18_600 * ms, end),
                    bursty(200 * us, 12_300 * ms, end),
                ],
            ),
        ],
        changes: vec![
            ShareChange {
                at: 42_500 * ms,
                client: 4,
                shares: limited(0.26, 0.44, false),
            },
            ShareChange {
                at: 62_800 * ms,
                client: 1,
                shares: limited(0.39, 0.44, false),
            },
        ],
        duration: end,
    }
}

#[test]
#[ignore]
fn soak_seed_48_explained() {
    print_beside_time_slicing(&soak_seed_48());
}

/// GPU soak seed 48: the batch clients get their due in the simulation, the launch-bound MLP
/// clients among them (on the GPU the first got 0.23-0.30 of 0.30-0.44: there its launches
/// beside the 5 ms kernels and the wide graph lose more than here), all but the loop of 20 us
/// kernels (below).
#[test]
fn soak_seed_48s_batch_clients_but_small_kernels_get_their_due_in_the_simulation() {
    let sc = soak_seed_48();
    let batch = batch(&sc);
    assert_kept(&sc, &run(&sc), |c| c != 4 && batch(c));
}

/// GPU soak seed 48: the loop of 20 us kernels waited for every 4 (request 0.18, limit 0.44)
/// gets its due. Not yet in the simulation: 0.40-0.41 of a due 0.44 in the first windows, beside
/// three launch-bound MLP loops (on the GPU it kept its due).
#[test]
#[ignore = "not yet: small kernels waited for every 4 beside launch-bound loops, 1 point past"]
fn soak_seed_48s_small_kernels_get_their_due() {
    let sc = soak_seed_48();
    assert_kept(&sc, &run(&sc), |c| c == 4);
}

/// Prints the scheduler's log (its grants, revocations and lease ends) over one random mix,
/// each line with the simulated time in microseconds, then its windows:
/// `SIM_KIND=HostBound SIM_SEED=9 cargo test --release --lib simulation::tests::trace --
/// --ignored --nocapture 2> trace.txt`; with `SIM_SOAK_SEED=58`, over the simulation of that
/// GPU soak seed.
#[test]
#[ignore]
fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("gpushare::scheduler=debug,gpushare::simulation=debug")
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
    let scenario = match std::env::var("SIM_SOAK_SEED") {
        Ok(seed) => soak_seed(seed.parse().unwrap()),
        Err(_) => {
            let seed = std::env::var("SIM_SEED").map_or(0, |s| s.parse().unwrap());
            Scenario::random_of(seed, 30 * S, &kinds_from_env())
        }
    };
    print(&run(&scenario));
}

/// The GPU soak seed of this number that the simulation replays.
fn soak_seed(seed: u64) -> Scenario {
    match seed {
        4 => soak_seed_4(),
        7 => soak_seed_7(),
        13 => soak_seed_13(),
        16 => soak_seed_16(),
        17 => soak_seed_17(),
        26 => soak_seed_26(),
        27 => soak_seed_27(),
        29 => soak_seed_29(),
        30 => soak_seed_30(),
        31 => soak_seed_31(),
        33 => soak_seed_33(),
        34 => soak_seed_34(),
        37 => soak_seed_37(),
        41 => soak_seed_41(),
        42 => soak_seed_42(),
        44 => soak_seed_44(),
        38 => soak_seed_38(),
        40 => soak_seed_40(),
        47 => soak_seed_47(),
        48 => soak_seed_48(),
        50 => soak_seed_50(),
        56 => soak_seed_56(),
        58 => soak_seed_58(),
        62 => soak_seed_62(),
        _ => panic!("no simulation of GPU soak seed {seed}"),
    }
}
