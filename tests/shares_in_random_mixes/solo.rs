//! Each loop's demand: the fraction of the GPU it keeps busy alone, under the hook, measured
//! once per loop and class and kept for the rest of the test.

use std::collections::HashMap;

use crate::common::hooked_run::{finished, overlapping_daemon, spawn_on_shared_gpu};
use crate::common::kernel_log::{busy_within, kernels};
use crate::common::Daemon;
use crate::mix::Mix;
use crate::timing::{now_ns, MS};
use crate::workloads::Workload;

/// How long a loop runs alone, and the span of that run its demand is measured over (its
/// start-up left out; long enough for the bursty loops' cycles of up to 60 ms to average out).
const SOLO_MS: u64 = 2_600;
const MEASURED_FROM_MS: u64 = 400;
const MEASURED_TO_MS: u64 = 2_400;

/// Demands measured so far, by loop and whether its client is interactive (an interactive
/// client's process gives its lease back whenever it waits).
#[derive(Default)]
pub struct Demands(HashMap<(Workload, bool), f64>);

impl Demands {
    /// The demand of each client of `mix`, measuring the loops not measured yet side by side,
    /// each alone on a fake GPU and a daemon of its own.
    pub fn of(&mut self, mix: &Mix) -> Vec<f64> {
        let mut missing: Vec<(Workload, bool)> = vec![];
        for c in &mix.clients {
            let key = (c.work, c.shares.interactive);
            if !self.0.contains_key(&key) && !missing.contains(&key) {
                missing.push(key);
            }
        }
        let alone: Vec<Alone> = missing.iter().map(|&(w, i)| Alone::start(w, i)).collect();
        for (key, run) in missing.into_iter().zip(alone) {
            self.0.insert(key, run.demand());
        }
        mix.clients
            .iter()
            .map(|c| self.0[&(c.work, c.shares.interactive)])
            .collect()
    }
}

/// One loop running alone.
struct Alone {
    _daemon: Daemon,
    dir: tempfile::TempDir,
    start: u64,
    process: std::process::Child,
}

impl Alone {
    fn start(work: Workload, interactive: bool) -> Alone {
        let daemon = overlapping_daemon(&format!(
            "[clients.solo]\ninteractive = {interactive}\nusers = [\"{{uid}}\"]\n"
        ))
        .start();
        let dir = tempfile::tempdir().unwrap();
        let start = now_ns();
        let process = spawn_on_shared_gpu(
            &daemon,
            &dir.path().join("kernels.log"),
            &dir.path().join("gpu"),
            &[("solo", &work.ops(SOLO_MS))],
            &[],
        )
        .pop()
        .unwrap();
        Alone {
            _daemon: daemon,
            dir,
            start,
            process,
        }
    }

    fn demand(self) -> f64 {
        let (pid, out, err) = finished(self.process);
        assert!(out.contains(" -> 0"), "a loop alone failed:\n{out}{err}");
        let k = kernels(&self.dir.path().join("kernels.log"));
        let (from, to) = (
            self.start + MEASURED_FROM_MS * MS,
            self.start + MEASURED_TO_MS * MS,
        );
        busy_within(&k, pid, from, to) as f64 / (to - from) as f64
    }
}
