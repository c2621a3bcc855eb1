//! The fake driver's kernel log (`FAKE_CUDA_LOG`): one line per kernel, `pid start_ns end_ns
//! function` and, on the shared GPU, `queued=` and `dev=` fields.

use std::path::Path;

/// GPU time of each of `pids` over the span all of them ran kernels, and that span.
pub fn busy_together(k: &[(u32, u64, u64, String)], pids: &[u32]) -> (Vec<u64>, u64, u64) {
    let span = |pid: u32| {
        let mine: Vec<_> = k.iter().filter(|x| x.0 == pid).collect();
        (
            mine.iter().map(|x| x.1).min().unwrap_or(0),
            mine.iter().map(|x| x.2).max().unwrap_or(0),
        )
    };
    let from = pids.iter().map(|p| span(*p).0).max().unwrap_or(0);
    let to = pids.iter().map(|p| span(*p).1).min().unwrap_or(0);
    if to <= from {
        // they never ran at the same time: a moment, nobody busy in it
        return (vec![0; pids.len()], from, from + 1);
    }
    let busy = pids
        .iter()
        .map(|&pid| {
            k.iter()
                .filter(|x| x.0 == pid)
                .map(|x| x.2.min(to).saturating_sub(x.1.max(from)))
                .sum()
        })
        .collect();
    (busy, from, to)
}

/// Kernel intervals from the fake's log: (pid, start, end, function).
pub fn kernels(log: &Path) -> Vec<(u32, u64, u64, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_string(),
            )
        })
        .collect()
}

/// GPU time of `pid`'s kernels within `[from, to)`.
pub fn busy_within(k: &[(u32, u64, u64, String)], pid: u32, from: u64, to: u64) -> u64 {
    k.iter()
        .filter(|x| x.0 == pid)
        .map(|x| x.2.min(to).saturating_sub(x.1.max(from)))
        .sum()
}
