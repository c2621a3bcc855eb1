//! A mix run on the fake GPU under a real daemon, cut into windows: what each client got in
//! each (its process's kernel time, from the fake's log) and the daemon's USED.

use gpushare::referee::Observed;

use crate::common::hooked_run::{
    finished, overlapping_daemon, shared_gpu_files, spawn_on_shared_gpu,
};
use crate::common::kernel_log::{busy_within, kernels};
use crate::common::Daemon;
use crate::mix::Mix;
use crate::timing::{now_ns, sleep_until, MS};

/// One window of a run, from `t0` to `t1` (ns after the processes started).
#[derive(Debug, Clone)]
pub struct Window {
    pub t0: u64,
    pub t1: u64,
    pub clients: Vec<Observed>,
}

/// What a run gave: its windows, and over all of them together each client's got and the
/// daemon's USED (the GPU time it counts the client's work took over that span).
#[derive(Debug, Clone)]
pub struct Ran {
    pub windows: Vec<Window>,
    pub whole: Vec<Observed>,
}

/// The daemon's USED of each client of `mix` so far (`gpu_time_ns`), and when it was read.
struct Used {
    at: u64,
    used: Vec<u64>,
}

fn used(d: &Daemon, mix: &Mix) -> Used {
    let before = now_ns();
    let clients = d.clients_json();
    let after = now_ns();
    let used = mix
        .clients
        .iter()
        .map(|c| {
            clients
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["name"] == c.name.as_str())
                .and_then(|j| j["gpu_time_ns"].as_u64())
                .unwrap_or(0)
        })
        .collect();
    Used {
        at: (before + after) / 2,
        used,
    }
}

/// Runs every client's process of `mix` for `run_ms` on one fake GPU under a fresh daemon,
/// reading the daemon's USED at each of `bounds_ms` (after the start): the windows lie
/// between them. `demands` are the clients' demands, kept in each window.
pub fn run(mix: &Mix, demands: &[f64], run_ms: u64, bounds_ms: &[u64]) -> Ran {
    let d = overlapping_daemon(&mix.config()).start();
    let (_dir, log, gpu) = shared_gpu_files();
    let ops: Vec<String> = mix.clients.iter().map(|c| c.work.ops(run_ms)).collect();
    let runs: Vec<(&str, &str)> = mix
        .clients
        .iter()
        .zip(&ops)
        .map(|(c, o)| (c.name.as_str(), o.as_str()))
        .collect();
    let start = now_ns();
    let processes = spawn_on_shared_gpu(&d, &log, &gpu, &runs, &[]);
    let read: Vec<Used> = bounds_ms
        .iter()
        .map(|&b| {
            sleep_until(start + b * MS);
            used(&d, mix)
        })
        .collect();
    let pids: Vec<u32> = processes.into_iter().map(|p| finished(p).0).collect();
    let k = kernels(&log);
    let observe = |from: &Used, to: &Used| -> Vec<Observed> {
        let span = (to.at - from.at) as f64;
        mix.clients
            .iter()
            .enumerate()
            .map(|(i, c)| Observed {
                shares: c.shares,
                demand: demands[i],
                got: busy_within(&k, pids[i], from.at, to.at) as f64 / span,
                used: Some(to.used[i].saturating_sub(from.used[i]) as f64 / span),
            })
            .collect()
    };
    let windows = read
        .windows(2)
        .map(|w| Window {
            t0: w[0].at - start,
            t1: w[1].at - start,
            clients: observe(&w[0], &w[1]),
        })
        .collect();
    Ran {
        windows,
        whole: observe(&read[0], read.last().unwrap()),
    }
}
