//! The loops a mix's processes run, each made of tests/fakes/client.c's ops.

use proptest::prelude::*;

/// One process's loop on the fake GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Kernels of `kernel_us` back to back, a synchronize after every `sync` of them (0: never).
    Saturating { kernel_us: u64, sync: u64 },
    /// A kernel of `kernel_us`, waited for, then `host_us` of host work, over and over.
    HostBound { kernel_us: u64, host_us: u64 },
    /// `burst_ms` of kernels of `kernel_us` launched at once, then `pause_ms` of host work.
    Bursty {
        kernel_us: u64,
        burst_ms: u64,
        pause_ms: u64,
    },
    /// A short kernel of `kernel_us`, waited for, every `every_ms`: a latency-bound loop.
    Interactive { kernel_us: u64, every_ms: u64 },
}

impl Workload {
    /// The client program's ops that run this loop for `ms` milliseconds.
    pub fn ops(&self, ms: u64) -> String {
        match *self {
            Workload::Saturating { kernel_us, sync } => {
                format!("run:{ms}:{}:{sync}:0", kernel_us * 1000)
            }
            Workload::HostBound { kernel_us, host_us } => {
                format!("run:{ms}:{}:1:{host_us}", kernel_us * 1000)
            }
            Workload::Bursty {
                kernel_us,
                burst_ms,
                pause_ms,
            } => format!(
                "burst:{ms}:{}:{}:{}",
                kernel_us * 1000,
                burst_ms * 1000 / kernel_us,
                pause_ms * 1000
            ),
            Workload::Interactive {
                kernel_us,
                every_ms,
            } => format!(
                "run:{ms}:{}:1:{}",
                kernel_us * 1000,
                every_ms * 1000 - kernel_us
            ),
        }
    }
}

impl Workload {
    /// Whether it would keep the GPU busy alone (its demand 1, less its synchronizations).
    pub fn saturating(&self) -> bool {
        matches!(self, Workload::Saturating { .. })
    }

    /// The fraction of the GPU it keeps busy by its own timings (the solo run measures it less
    /// the host's overheads): 1 for a saturating loop.
    pub fn nominal_demand(&self) -> f64 {
        let busy_of = |busy: u64, idle: u64| busy as f64 / (busy + idle) as f64;
        match *self {
            Workload::Saturating { .. } => 1.0,
            Workload::HostBound { kernel_us, host_us } => busy_of(kernel_us, host_us),
            Workload::Bursty {
                burst_ms, pause_ms, ..
            } => busy_of(burst_ms, pause_ms),
            Workload::Interactive {
                kernel_us,
                every_ms,
            } => kernel_us as f64 / (every_ms * 1000) as f64,
        }
    }
}

/// A saturating loop: kernels of 0.2-5 ms, synchronizing never, after each, or every 4.
pub fn saturating() -> impl Strategy<Value = Workload> {
    (
        prop::sample::select(vec![200u64, 500, 1000, 1600, 5000]),
        prop::sample::select(vec![0u64, 1, 4]),
    )
        .prop_map(|(kernel_us, sync)| Workload::Saturating { kernel_us, sync })
}

/// A light loop, busy a third of the time or less alone: bound by its host, bursty, or
/// latency-bound.
pub fn light() -> impl Strategy<Value = Workload> {
    prop_oneof![
        prop::sample::select(vec![
            (200u64, 1000u64),
            (200, 3000),
            (1000, 3000),
            (1000, 2000)
        ])
        .prop_map(|(kernel_us, host_us)| Workload::HostBound { kernel_us, host_us }),
        (
            prop::sample::select(vec![200u64, 1000]),
            prop::sample::select(vec![5u64, 10]),
            prop::sample::select(vec![20u64, 40]),
        )
            .prop_map(|(kernel_us, burst_ms, pause_ms)| Workload::Bursty {
                kernel_us,
                burst_ms,
                pause_ms
            }),
        interactive_workload(),
    ]
}

/// A latency-bound loop, as an interactive client runs: a kernel of 0.3 or 1 ms every 3 or 5 ms
/// (1 ms every 5 at most).
pub fn interactive_workload() -> impl Strategy<Value = Workload> {
    prop::sample::select(vec![(300u64, 3u64), (300, 5), (1000, 5)]).prop_map(
        |(kernel_us, every_ms)| Workload::Interactive {
            kernel_us,
            every_ms,
        },
    )
}
