//! Scenarios: clients of random requests, limits and classes, each with processes drawn from a
//! library of loops a lab runs, all from one seed.

use super::process::Workload;
use super::{ClientSpec, ShareChange};
use crate::scheduler::{Nanos, Shares};

const US: Nanos = 1_000;
const MS: Nanos = 1_000_000;

/// A run to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub seed: u64,
    pub clients: Vec<ClientSpec>,
    pub changes: Vec<ShareChange>,
    pub duration: Nanos,
}

/// A small deterministic generator (SplitMix64): a scenario depends on its seed alone.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Log-uniform in `[lo, hi]`.
    pub fn log_range(&mut self, lo: Nanos, hi: Nanos) -> Nanos {
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        self.range(l, h).exp().round() as Nanos
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// The loops of the library, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Kernels of 20 us-50 ms synchronizing after each, every few, or never.
    Kernels,
    /// A CUDA graph of many short kernels per step.
    Graph,
    /// A training loop bound by its host: GPU steps, then host work.
    HostBound,
    /// A small MLP whose many tiny kernels cost more to launch than to run, or a loop that
    /// waits for each of its tiny kernels.
    LaunchBound,
    /// Bursts of work with pauses between them.
    Bursty,
    /// Inference every 5 ms (the interactive clients' loop).
    Inference,
    /// A loop of 1-20 ms kernels that never waits for them: it keeps the GPU busy alone.
    Saturating,
}

pub const BATCH_KINDS: [Kind; 5] = [
    Kind::Kernels,
    Kind::Graph,
    Kind::HostBound,
    Kind::LaunchBound,
    Kind::Bursty,
];

/// The library's plain loop, from `start` to `end`: one 1 ms kernel, waited for, 5 us on the host
/// between kernels; every kind of [`workload`] (and the named soak scenarios) varies it.
pub fn plain_loop(start: Nanos, end: Nanos) -> Workload {
    Workload {
        kernel_ns: MS,
        kernels: 1,
        launch_ns: 4 * US,
        graph: false,
        sync: true,
        host_ns: 5 * US,
        period_ns: None,
        start,
        end,
        warmup_ns: 0,
    }
}

/// A loop of `kind`, running from `start` to `end`.
pub fn workload(kind: Kind, rng: &mut Rng, start: Nanos, end: Nanos) -> Workload {
    let base = plain_loop(start, end);
    match kind {
        Kind::Kernels => {
            let kernel_ns = rng.log_range(20 * US, 50 * MS);
            let (kernels, sync) = match rng.below(3) {
                0 => (1, true),
                1 => (4, true),
                _ => (64, false),
            };
            Workload {
                kernel_ns,
                kernels,
                sync,
                ..base
            }
        }
        Kind::Saturating => Workload {
            kernel_ns: rng.log_range(MS, 20 * MS),
            kernels: 64,
            sync: false,
            ..base
        },
        Kind::Graph => Workload {
            kernel_ns: rng.log_range(30 * US, 300 * US),
            kernels: 32,
            graph: true,
            launch_ns: 20 * US,
            ..base
        },
        Kind::HostBound => Workload {
            kernel_ns: rng.log_range(200 * US, 2 * MS),
            kernels: 8,
            host_ns: rng.log_range(2 * MS, 15 * MS),
            ..base
        },
        // A framework's per-operation cost is host time spent launching: a small MLP's training
        // steps (waited for every few steps), or a loop that waits for each of its tiny kernels.
        Kind::LaunchBound => {
            let (kernels, kernel_ns, launch_ns) = if rng.chance(0.5) {
                (
                    200,
                    rng.log_range(5 * US, 15 * US),
                    rng.log_range(30 * US, 70 * US),
                )
            } else {
                (
                    1,
                    rng.log_range(3 * US, 8 * US),
                    rng.log_range(15 * US, 30 * US),
                )
            };
            Workload {
                kernel_ns,
                kernels,
                launch_ns,
                host_ns: 0,
                ..base
            }
        }
        Kind::Bursty => Workload {
            kernel_ns: MS,
            kernels: rng.log_range(50, 200) as u32,
            host_ns: rng.log_range(100 * MS, 1000 * MS),
            ..base
        },
        Kind::Inference => Workload {
            kernel_ns: rng.log_range(50 * US, 300 * US),
            kernels: 4,
            period_ns: Some(5 * MS),
            ..base
        },
    }
}

/// Requests for `n` clients that add up to at most 0.95.
fn requests(rng: &mut Rng, n: usize) -> Vec<f64> {
    let mut r: Vec<f64> = (0..n).map(|_| rng.range(0.05, 0.5)).collect();
    let sum: f64 = r.iter().sum();
    if sum > 0.95 {
        r.iter_mut().for_each(|x| *x *= 0.95 / sum);
    }
    r.iter().map(|x| (x * 100.0).round() / 100.0).collect()
}

impl Scenario {
    /// A lab of 2-8 clients over `duration`, drawn from `seed`: random requests (adding up to
    /// at most 0.95), limits (most 1), now and then an interactive client running inference;
    /// each client 1-2 processes from the library, some of which come late or leave early; and
    /// sometimes a client's request changed partway.
    pub fn random(seed: u64, duration: Nanos) -> Scenario {
        Scenario::random_of(seed, duration, &BATCH_KINDS)
    }

    /// As [`Scenario::random`], the batch clients' loops drawn from `kinds` alone.
    pub fn random_of(seed: u64, duration: Nanos, kinds: &[Kind]) -> Scenario {
        let mut rng = Rng::new(seed);
        let n = 2 + rng.below(7);
        let interactive = rng.chance(0.35);
        let reqs = requests(&mut rng, n);
        let mut clients = Vec::new();
        for (i, &request) in reqs.iter().enumerate() {
            let is_interactive = interactive && i == 0;
            let limit = if is_interactive || rng.chance(0.75) {
                1.0
            } else {
                ((request + rng.range(0.05, 0.6)).min(1.0) * 100.0).round() / 100.0
            };
            let shares = Shares {
                request: if is_interactive {
                    0.1f64.min(request)
                } else {
                    request
                },
                limit,
                interactive: is_interactive,
            };
            let count = 1 + rng.below(2);
            let processes = (0..count)
                .map(|_| {
                    let (start, end) = if rng.chance(0.25) {
                        let start = (rng.range(0.0, 0.5) * duration as f64) as Nanos;
                        let end =
                            start + (rng.range(0.3, 1.0) * (duration - start) as f64) as Nanos;
                        (start, end)
                    } else {
                        (0, duration)
                    };
                    let kind = if is_interactive {
                        Kind::Inference
                    } else {
                        kinds[rng.below(kinds.len())]
                    };
                    workload(kind, &mut rng, start, end)
                })
                .collect();
            clients.push(ClientSpec { shares, processes });
        }
        let mut changes = Vec::new();
        if rng.chance(0.3) {
            let client = rng.below(n);
            let others: f64 = clients
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != client)
                .map(|(_, c)| c.shares.request)
                .sum();
            let mut shares = clients[client].shares;
            shares.request =
                ((0.95 - others).max(0.01) * rng.range(0.2, 1.0) * 100.0).round() / 100.0;
            shares.limit = shares.limit.max(shares.request);
            changes.push(ShareChange {
                at: (rng.range(0.2, 0.7) * duration as f64) as Nanos,
                client,
                shares,
            });
        }
        Scenario {
            seed,
            clients,
            changes,
            duration,
        }
    }
}
