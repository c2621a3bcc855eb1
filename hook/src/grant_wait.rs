//! How a thread that waits for a grant waits: spinning for a while, as the CUDA driver waits for
//! the GPU by default, or blocking.
//!
//! A process that takes turns on the GPU waits for the token in each of the others' turns.
//! Blocked there, its CPU idles, and on an H100 host (a virtual machine) a loop that synchronizes
//! after each short kernel then ran slower for a while after each grant: a pair of loops of 50 us
//! kernels (0.75 / 0.25) got 0.697 / 0.228 of their rates alone blocking and 0.727 / 0.237
//! waiting so, a pair of CuPy loops 0.738 / 0.240 and 0.745 / 0.247. A tight loop of polls (a
//! pause instruction between them) did not help; yielding the CPU between polls did. Without
//! gpushare such a process would spin in its synchronizes instead, the driver's default while the
//! CPUs outnumber the busy threads. So the wait polls the socket, yielding between polls, for at
//! most [`SPIN_LIMIT`], then blocks; it blocks at once where the program asked the driver to
//! block in its waits (`CU_CTX_SCHED_BLOCKING_SYNC`) or the CPUs are busy: fewer than
//! [`MIN_CPUS`] for this process, or no more of them than threads ready to run.

use std::time::Duration;

use crate::cuda::*;
use crate::driver::{helper, Helper};

/// The longest a thread spins waiting for a grant before it blocks: a few turns of the others.
const SPIN_LIMIT: Duration = Duration::from_millis(100);
/// Fewer CPUs than this for the process: a waiting thread blocks at once (a spinning one would
/// take a CPU from the threads that launch).
const MIN_CPUS: usize = 4;
/// The scheduling bits of a context's flags, and the one that asks for blocking waits.
const SCHED_MASK: u32 = 0x07;
const SCHED_BLOCKING_SYNC: u32 = 0x04;

/// How long the thread about to wait for a grant spins first.
pub fn spin() -> Duration {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    spin_for(context_flags(), cpus, runnable())
}

/// How long to spin for a context of `flags` (`None`: unknown) with `cpus` for this process and
/// `runnable` threads ready to run on the machine (pure, unit-tested).
fn spin_for(flags: Option<u32>, cpus: usize, runnable: Option<usize>) -> Duration {
    let blocking = flags.is_some_and(|f| f & SCHED_MASK == SCHED_BLOCKING_SYNC);
    let busy = cpus < MIN_CPUS || runnable.is_some_and(|r| r >= cpus);
    if blocking || busy {
        Duration::ZERO
    } else {
        SPIN_LIMIT
    }
}

/// The flags of the context current in this thread.
fn context_flags() -> Option<u32> {
    type F = unsafe extern "C" fn(*mut u32) -> CUresult;
    let mut flags = 0u32;
    // SAFETY: the signature of cuCtxGetFlags; a valid out-pointer.
    let get = unsafe { helper::<F>(Helper::cuCtxGetFlags) }?;
    (unsafe { get(&mut flags) } == CUDA_SUCCESS).then_some(flags)
}

/// Threads ready to run on the machine, this one included (`/proc/loadavg`, fourth field).
fn runnable() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    parse_runnable(&text)
}

fn parse_runnable(loadavg: &str) -> Option<usize> {
    let field = loadavg.split_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_spin_unless_the_program_blocks_or_the_cpus_are_busy() {
        assert_eq!(
            spin_for(None, 16, Some(3)),
            SPIN_LIMIT,
            "unknown flags: auto"
        );
        assert_eq!(spin_for(Some(0), 16, None), SPIN_LIMIT, "auto");
        assert_eq!(spin_for(Some(0x01 | 0x08), 16, Some(1)), SPIN_LIMIT, "spin");
        assert_eq!(spin_for(Some(0x02), 16, Some(1)), SPIN_LIMIT, "yield");
        assert_eq!(
            spin_for(Some(0x04 | 0x08), 16, Some(1)),
            Duration::ZERO,
            "blocking sync"
        );
        assert_eq!(spin_for(Some(0), 2, Some(1)), Duration::ZERO, "two CPUs");
        assert_eq!(spin_for(Some(0), 8, Some(8)), Duration::ZERO, "all busy");
        assert_eq!(spin_for(Some(0), 8, Some(7)), SPIN_LIMIT);
    }

    #[test]
    fn the_runnable_threads_are_the_fourth_field_of_loadavg() {
        assert_eq!(parse_runnable("0.52 0.58 0.59 3/1234 56789\n"), Some(3));
        assert_eq!(parse_runnable("garbage"), None);
    }
}
