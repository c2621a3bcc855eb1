//! A deterministic simulation of a lab's GPU under the scheduler: processes of several clients
//! running their loops ([`process`]) under the hook's rules, a GPU that time-slices between
//! their contexts as the driver does ([`gpu`]), and the scheduler itself, driven on one
//! simulated clock from a [`Scenario`] ([`scenario`] draws one from a seed). Every window, what
//! each client got is set beside what it was due ([`referee`](crate::referee)) and what the
//! scheduler counted it used. Got and demand are measured as the GPU soak measures them: a
//! process's demand is the part of the time it spends alone in its GPU phases (launching its
//! work and waiting for it, as opposed to its host work and pauses), and what it got is the
//! work it did in units of the time in GPU phases that work takes alone ([`Solo`]). For a loop
//! bound by its launches, that is its host's time launching, not its kernels' GPU time.
//!
//! Nothing here reads a clock or a random source of its own: a scenario replays exactly.

pub mod gpu;
pub mod process;
pub mod scenario;

use crate::referee::Observed;
use crate::scheduler::{ClientId, Nanos, Scheduler, SessionId, Shares};
use gpu::Gpu;
use process::{Ask, HookRules, Process, Workload};

pub use scenario::Scenario;

/// The daemon's defaults: a lease's quantum, its grace, the hook's queue.
pub const QUANTUM_NS: Nanos = 20_000_000;
pub const GRACE_NS: Nanos = 50_000_000;
pub const QUEUE_AHEAD_NS: Nanos = 2_000_000;
/// How long a judged window lasts.
pub const WINDOW_NS: Nanos = 5_000_000_000;

/// A client of a scenario: its shares and its processes' loops.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSpec {
    pub shares: Shares,
    pub processes: Vec<Workload>,
}

/// A change of a client's shares at a moment of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareChange {
    pub at: Nanos,
    pub client: usize,
    pub shares: Shares,
}

/// One window of a run: each client as observed, and how long after the last change it began.
#[derive(Debug, Clone)]
pub struct Window {
    pub t0: Nanos,
    pub t1: Nanos,
    pub since_change: Nanos,
    pub clients: Vec<Observed>,
}

/// What a run gave: its windows, each process's step latencies (for those with a period), and
/// the GPU time every process got.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub windows: Vec<Window>,
    pub latencies: Vec<Vec<Nanos>>,
    pub ran: Vec<Nanos>,
}

/// What `work` does alone, without the hook, once started up: the part of the time its kernels
/// keep the GPU busy, and the part it spends in GPU phases (from a step's first launch until its
/// work is done, or launched where it does not wait for it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Solo {
    pub gpu: f64,
    pub phases: f64,
}

impl Solo {
    /// Time in GPU phases alone per unit of GPU time its kernels ran: what the GPU time a
    /// process ran is worth in the referee's units.
    pub fn phases_per_gpu(&self) -> f64 {
        if self.gpu > 0.0 {
            self.phases / self.gpu
        } else {
            1.0
        }
    }
}

/// The fraction of the GPU `work` keeps busy alone, without the hook, while it runs (once started
/// up).
pub fn solo_busy(work: &Workload) -> f64 {
    solo(work).gpu
}

/// What `work` does alone ([`Solo`]).
pub fn solo(work: &Workload) -> Solo {
    let span = (work.end - work.start).min(5_000_000_000);
    // its pace once started up
    let alone = Workload {
        start: 0,
        end: span,
        warmup_ns: 0,
        ..*work
    };
    let mut gpu = Gpu::new(1);
    let mut p = Process::ungated(0, alone);
    let mut now = 0;
    while now < span {
        gpu.advance(now);
        let (_, wake) = p.act(now, &mut gpu);
        let next = [wake, gpu.next_event()].into_iter().flatten().min();
        now = next
            .filter(|&t| t > now)
            .unwrap_or(now + 1_000_000)
            .min(span);
    }
    gpu.advance(span);
    let under_way = p.step_under_way().map_or(0, |t| span.saturating_sub(t));
    let phases: Nanos = p.latencies.iter().sum::<Nanos>() + under_way;
    Solo {
        gpu: gpu.ran(0) as f64 / span as f64,
        phases: (phases as f64 / span as f64).min(1.0),
    }
}

/// Runs `scenario` to its end under the scheduler.
pub fn run(scenario: &Scenario) -> Outcome {
    simulate(scenario, true)
}

/// Runs `scenario` to its end without gpushare: every process launches as it likes, and the
/// driver's time slices alone divide the GPU.
pub fn run_time_sliced(scenario: &Scenario) -> Outcome {
    simulate(scenario, false)
}

fn simulate(scenario: &Scenario, managed: bool) -> Outcome {
    let mut sched = Scheduler::new(QUANTUM_NS, 0);
    sched.set_grace(GRACE_NS);
    sched.set_slots(usize::MAX, true);
    let mut shares: Vec<Shares> = scenario.clients.iter().map(|c| c.shares).collect();
    for (i, s) in shares.iter().enumerate() {
        sched.set_client(client_id(i), *s, 0);
    }
    let mut procs = Vec::new();
    let mut owner = Vec::new();
    for (i, c) in scenario.clients.iter().enumerate() {
        for w in &c.processes {
            let rules = HookRules {
                queue_ahead_ns: QUEUE_AHEAD_NS,
                interactive: c.shares.interactive,
            };
            procs.push(if managed {
                Process::new(procs.len(), *w, rules)
            } else {
                Process::ungated(procs.len(), *w)
            });
            owner.push(i);
        }
    }
    let solo: Vec<Solo> = procs.iter().map(|p| solo(&p.work)).collect();
    let mut gpu = Gpu::new(procs.len());
    let mut gone = vec![false; procs.len()];
    let mut wakes: Vec<Option<Nanos>> = vec![Some(0); procs.len()];
    let mut changes: Vec<Nanos> = procs
        .iter()
        .flat_map(|p| [p.work.start, p.work.end])
        .chain(scenario.changes.iter().map(|c| c.at))
        .chain([0])
        .collect();
    changes.sort_unstable();
    let mut share_changes = scenario.changes.clone();
    share_changes.sort_by_key(|c| c.at);
    let mut next_change = 0;

    let mut windows = Vec::new();
    let mut window_start = 0;
    let mut ran_at_start = vec![0; procs.len()];
    let mut used_at_start = vec![0; shares.len()];
    let mut now = 0;
    let mut told = vec![false; procs.len()];
    let mut last_pending = vec![Nanos::MAX; procs.len()];
    while now < scenario.duration {
        // the scheduler's log lines carry the simulated time, in microseconds
        let _t = tracing::debug_span!("sim", t = now / 1000).entered();
        gpu.advance(now);
        while next_change < share_changes.len() && share_changes[next_change].at <= now {
            let c = share_changes[next_change];
            shares[c.client] = c.shares;
            sched.set_client(client_id(c.client), c.shares, now);
            next_change += 1;
        }
        if now >= window_start + WINDOW_NS {
            let t1 = window_start + WINDOW_NS;
            // a window with a change inside it is not settled at all
            let since = if changes.iter().any(|&c| c > window_start && c < t1) {
                0
            } else {
                changes
                    .iter()
                    .rev()
                    .find(|&&c| c <= window_start)
                    .map_or(window_start, |&c| window_start - c)
            };
            let clients = (0..shares.len())
                .map(|i| {
                    let mine = (0..procs.len()).filter(|&p| owner[p] == i);
                    let got: f64 = mine
                        .clone()
                        .map(|p| (gpu.ran(p) - ran_at_start[p]) as f64 * solo[p].phases_per_gpu())
                        .sum();
                    let demand: f64 = mine
                        .map(|p| {
                            let w = &procs[p].work;
                            let alive = t1.min(w.end).saturating_sub(window_start.max(w.start));
                            solo[p].phases * alive as f64 / WINDOW_NS as f64
                        })
                        .sum();
                    let used = used_by(&sched, i, now);
                    Observed {
                        shares: shares[i],
                        demand,
                        got: got / WINDOW_NS as f64,
                        used: Some((used - used_at_start[i]) as f64 / WINDOW_NS as f64),
                    }
                })
                .collect();
            windows.push(Window {
                t0: window_start,
                t1,
                since_change: since,
                clients,
            });
            window_start = t1;
            for (p, ran) in ran_at_start.iter_mut().enumerate() {
                *ran = gpu.ran(p);
            }
            for (i, c) in used_at_start.iter_mut().enumerate() {
                *c = used_by(&sched, i, now);
            }
        }
        // everyone acts until nobody has anything more to say
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(
                rounds < 10_000,
                "no end to what the processes and the scheduler say at {now}"
            );
            let mut said = false;
            for p in 0..procs.len() {
                // a process acts when its wake-up came, the daemon told it something, or its
                // queue moved
                let stirred = wakes[p].is_some_and(|t| t <= now)
                    || told[p]
                    || gpu.pending(p) != last_pending[p]
                    || now >= procs[p].work.end;
                if gone[p] || !stirred {
                    continue;
                }
                told[p] = false;
                let (session, client) = (session_id(p), client_id(owner[p]));
                if now >= procs[p].work.end && gpu.pending(p) == 0 && !procs[p].holding() {
                    sched.session_gone(session, now);
                    gone[p] = true;
                    wakes[p] = None;
                    said = true;
                    continue;
                }
                loop {
                    let (ask, wake) = procs[p].act(now, &mut gpu);
                    wakes[p] = wake;
                    last_pending[p] = gpu.pending(p);
                    let Some(ask) = ask else { break };
                    said = true;
                    match ask {
                        Ask::Acquire => sched.acquire(client, session, now),
                        Ask::Release {
                            busy,
                            launches,
                            active,
                            again,
                        } => {
                            sched.launched(session, launches, now);
                            sched.was_active(session, active);
                            sched.release(session, busy, now);
                            if again {
                                sched.acquire(client, session, now);
                            }
                        }
                        Ask::Extend { launches, active } => {
                            sched.launched(session, launches, now);
                            sched.was_active(session, active);
                            if let Some(g) = sched.extend(session, now) {
                                procs[p].granted(now, g.lease_ns, g.tight, g.shared, g.contended);
                            }
                            told[p] = true;
                        }
                    }
                }
            }
            while let Some(g) = sched.poll(now) {
                let p = (g.session - 1) as usize;
                procs[p].granted(now, g.lease_ns, g.tight, g.shared, g.contended);
                told[p] = true;
                said = true;
            }
            for s in sched.take_revoked() {
                procs[(s - 1) as usize].revoked(now);
                told[(s - 1) as usize] = true;
                said = true;
            }
            for s in sched.take_contended() {
                procs[(s - 1) as usize].contended();
                told[(s - 1) as usize] = true;
                said = true;
            }
            for s in sched.take_joined() {
                procs[(s - 1) as usize].joined();
                told[(s - 1) as usize] = true;
            }
            if !said {
                break;
            }
        }
        let next = wakes
            .iter()
            .flatten()
            .copied()
            .chain(gpu.next_event())
            .chain(sched.next_wakeup(now))
            .chain([window_start + WINDOW_NS, scenario.duration])
            .chain(changes.iter().copied().find(|&c| c > now))
            .min()
            .unwrap_or(scenario.duration);
        now = next.max(now + 1);
    }
    Outcome {
        windows,
        latencies: procs.iter().map(|p| p.latencies.clone()).collect(),
        ran: (0..procs.len()).map(|p| gpu.ran(p)).collect(),
    }
}

fn client_id(i: usize) -> ClientId {
    i as ClientId + 1
}

fn session_id(p: usize) -> SessionId {
    p as SessionId + 1
}

fn used_by(sched: &Scheduler, client: usize, now: Nanos) -> Nanos {
    sched
        .usage(client_id(client), now)
        .map_or(0, |u| u.gpu_total)
}

#[cfg(test)]
mod tests;
