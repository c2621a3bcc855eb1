//! A random mix: 2-4 clients of the test's own uid, each with its shares and one process's
//! loop ([`Workload`]), drawn within what the scheduler promises (gpushare-scheduler(7),
//! LIMITS): a light loop (bound by its host, bursty, latency-bound) gets its demand only below
//! its request, so light clients have requests above their loops' demands, and saturating
//! clients divide the rest of the GPU by random requests, some of them limited.

use std::fmt;

use gpushare::scheduler::Shares;
use proptest::prelude::*;

use crate::workloads::{interactive_workload, light, saturating, Workload};

/// A client of a mix and the loop of its one process.
#[derive(Debug, Clone, PartialEq)]
pub struct Client {
    pub name: String,
    pub shares: Shares,
    pub work: Workload,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    pub clients: Vec<Client>,
}

impl Mix {
    /// The clients' config tables, bound to the test's uid (`{uid}`, as
    /// [`overlapping_daemon`](crate::common::hooked_run::overlapping_daemon) takes it).
    pub fn config(&self) -> String {
        self.clients
            .iter()
            .map(|c| {
                format!(
                    "[clients.{}]\nrequest = {}\nlimit = {}\ninteractive = {}\nusers = [\"{{uid}}\"]\n",
                    c.name, c.shares.request, c.shares.limit, c.shares.interactive
                )
            })
            .collect()
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.clients {
            writeln!(
                f,
                "  {}: request {:.2} limit {:.2}{} running {:?} ({})",
                c.name,
                c.shares.request,
                c.shares.limit,
                if c.shares.interactive {
                    " interactive"
                } else {
                    ""
                },
                c.work,
                c.work.ops(crate::RUN_MS)
            )?;
        }
        Ok(())
    }
}

/// How much a light client's request exceeds its loop's nominal demand.
const LIGHT_MARGIN: f64 = 0.05;
/// Light clients in a mix, at most (their requests, up to 0.4 each, leave the rest of the GPU
/// to the saturating ones).
const MOST_LIGHT: usize = 2;

/// A client's draw: its loop, a weight for its request (saturating loops) in twentieths, and
/// its limit in tenths above the request (none: 1.0).
type Drawn = (Workload, u32, Option<u32>);

fn drawn() -> impl Strategy<Value = Drawn> {
    (
        prop_oneof![saturating(), light()],
        0u32..=12,
        prop_oneof![3 => Just(None), 1 => (2u32..=8).prop_map(Some)],
    )
}

fn hundredths(x: f64) -> f64 {
    (x * 100.0).floor() / 100.0
}

/// 2-4 clients, at most [`MOST_LIGHT`] of them light, and now and then an interactive client
/// (the first) running a latency-bound loop.
pub fn mix() -> impl Strategy<Value = Mix> {
    (
        prop::collection::vec(drawn(), 2..=4),
        prop::option::weighted(0.4, interactive_workload()),
    )
        .prop_map(|(mut drawn, interactive)| {
            if let Some(work) = interactive {
                drawn[0].0 = work;
            }
            let mut light = 0;
            for d in drawn.iter_mut() {
                if !d.0.saturating() {
                    light += 1;
                    if light > MOST_LIGHT {
                        d.0 = Workload::Saturating {
                            kernel_us: 1000,
                            sync: 0,
                        };
                    }
                }
            }
            let light_request =
                |w: &Workload| ((w.nominal_demand() + LIGHT_MARGIN) * 20.0).ceil() / 20.0;
            let left = 1.0
                - drawn
                    .iter()
                    .filter(|d| !d.0.saturating())
                    .map(|d| light_request(&d.0))
                    .sum::<f64>();
            let weights: u32 = drawn.iter().filter(|d| d.0.saturating()).map(|d| d.1).sum();
            let scale = left.min(weights as f64 / 20.0) / (weights.max(1) as f64 / 20.0);
            let clients = drawn
                .iter()
                .enumerate()
                .map(|(i, &(work, weight, limit))| {
                    let (request, limit) = if work.saturating() {
                        let request = hundredths(weight as f64 / 20.0 * scale);
                        let limit = limit.map_or(1.0, |tenths| {
                            (request + tenths as f64 / 10.0).clamp(request, 0.9)
                        });
                        (request, (limit * 100.0).round() / 100.0)
                    } else {
                        (light_request(&work), 1.0)
                    };
                    Client {
                        name: format!("c{i}"),
                        shares: Shares {
                            request,
                            limit,
                            interactive: i == 0 && interactive.is_some(),
                        },
                        work,
                    }
                })
                .collect();
            Mix { clients }
        })
}
