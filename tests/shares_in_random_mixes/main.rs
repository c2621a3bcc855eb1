//! The scheduler's promise on the fake GPU, for random mixes: real `gpushared` (`--bus none`)
//! and hooked client processes on the fake driver's shared GPU (tests/fakes/fake_cuda.c with
//! `FAKE_CUDA_GPU`), judged with [`gpushare::referee`].
//!
//! Each case draws a mix ([`mix`]): 2-4 clients of the test's own uid with random requests
//! (adding up to at most 1), some limits, now and then one interactive client, each running
//! one hooked process of a loop from a small library ([`workloads`]: saturating kernels of
//! 0.2-5 ms synchronized never, after each or every 4; loops bound by their host; bursts and
//! pauses; a short kernel waited for every few ms). The mix runs for [`RUN_MS`] on one fake GPU
//! under a fresh daemon; the daemon's USED is read at [`BOUNDS_MS`], and the windows between
//! them (1 s each, the first starting a second in, once burst credit has settled) are judged
//! ([`judge`]):
//!
//! - *got*: each process's kernel time in the window from the fake's log, which for the fake's
//!   time model is its work in units of solo GPU time;
//! - *demand*: the fraction of the GPU the same loop keeps busy alone under the hook, measured
//!   once per loop ([`solo`]);
//! - *due*: [`gpushare::referee`]'s water-filling by request, of what the mix got done in the
//!   window. The fake charges every hand-over's round trip through the host (a debug daemon
//!   and hook on a busy 2-core machine) as idle GPU time, which beside an interactive client
//!   left as little as 0.48 of the GPU used; the division of what was done is the scheduler's.
//!
//! Tolerances, wider than the referee's 0.03 for this GPU: a saturating batch client may fall
//! [`SHORT_TOLERANCE`](judge::SHORT_TOLERANCE) (0.06) below its due: leases of 20 ms and
//! kernels of up to 5 ms make a 1 s window's division uneven by a few hundredths (seen up to
//! 0.02 short in these 8 mixes), while a scheduler that ignored requests left clients
//! 0.07-0.31 short. A light batch client must get
//! [`LIGHT_KEPT`](judge::LIGHT_KEPT) (0.3) of its due: the fake cannot preempt, so each of its
//! kernels waits behind the running kernel and the holder's queue (gpushare-scheduler(7),
//! LIMITS: a light client is due its whole demand, which only a GPU serving its kernels first
//! would give it); seen 0.48-1.0 of their dues, and a starved client gets none. The interactive
//! client is due its share like the others but not judged on it (its class is about when it
//! runs: the hook tests judge its latency). A mix fails only if it breaks the bounds in each of
//! [`TRIES`] runs: a scheduling fault fails every one.
//!
//! The daemon's USED over the run is set beside what each client got in a second test, ignored
//! for now: USED divides a shared lease's time by the demand estimates of the processes holding
//! leases then (gpushare-scheduler(7)), and in these mixes it is off by up to 0.16 (a
//! saturating loop beside a latency-bound one), where the fake's kernels wait for each other
//! unpreempted; while USED was the leases' wall time, off by up to 0.39.
//!
//! A failing case prints the seed and the case to replay it with (`SHARES_MIXES_SEED`,
//! `SHARES_MIXES_CASE`), the mix, and every client's demand, due, got and USED in each window
//! of each try. About 50 s in all (8 cases of 3.2 s, each loop first measured alone for 2.6 s).

#[path = "../common/mod.rs"]
mod common;
mod judge;
mod mix;
mod solo;
mod timing;
mod windows;
mod workloads;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use common::hook_programs::prepare;

/// How long each process of a mix runs, and when the daemon's USED is read (ms after the
/// start): the judged windows lie between these, the first a second after the start, when
/// every client has asked and burst credit (`burst_window`, 1 s) has settled.
pub const RUN_MS: u64 = 3_200;
const BOUNDS_MS: [u64; 3] = [1_000, 2_000, 3_000];
/// Mixes drawn, and the seed they are drawn from.
const CASES: usize = 8;
const SEED: u64 = 36;
/// Tries of a mix before it fails: a fault of the scheduler fails every one.
const TRIES: usize = 2;

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

/// Runs [`CASES`] mixes drawn from the seed (`SHARES_MIXES_SEED`, `SHARES_MIXES_CASE`: only
/// that case), each up to [`TRIES`] times until `judge` finds nothing broken, and fails with
/// every mix that broke it in every try.
fn check_mixes(judge: fn(&mix::Mix, &windows::Ran) -> judge::Judged) {
    let Some(_serial) = prepare() else {
        return;
    };
    let seed = env_number("SHARES_MIXES_SEED").unwrap_or(SEED);
    let only = env_number("SHARES_MIXES_CASE").map(|c| c as usize);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng(seed));
    let mut demands = solo::Demands::default();
    let mut failed = vec![];
    for case in 0..CASES {
        let mix = mix::mix().new_tree(&mut runner).unwrap().current();
        if only.is_some_and(|o| o != case) {
            continue;
        }
        let demand = demands.of(&mix);
        let mut tries = vec![];
        for _ in 0..TRIES {
            let judged = judge(&mix, &windows::run(&mix, &demand, RUN_MS, &BOUNDS_MS));
            let kept = judged.broken.is_empty();
            tries.push(judged);
            if kept {
                break;
            }
        }
        let report = format!(
            "case {case} (replay: SHARES_MIXES_SEED={seed} SHARES_MIXES_CASE={case}):\n{mix}{}",
            tries
                .iter()
                .enumerate()
                .map(|(i, j)| format!(
                    " try {}: {}\n{}",
                    i + 1,
                    if j.broken.is_empty() {
                        "kept".to_string()
                    } else {
                        j.broken.join("; ")
                    },
                    j.table
                ))
                .collect::<String>()
        );
        eprintln!("{report}");
        if tries.iter().all(|j| !j.broken.is_empty()) {
            failed.push(report);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {CASES} mixes broke it in every try:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn every_batch_client_gets_its_due_share_in_random_mixes() {
    check_mixes(judge::shares);
}

#[test]
#[ignore = "USED divides shared leases by demand estimates: off by up to 0.14 here, 0.05 allowed"]
fn the_daemons_used_matches_what_each_client_got_in_random_mixes() {
    check_mixes(judge::used);
}
