//! Decayed fair share: the clients' decayed usage, as accounting last read it, turned into the
//! factors that weigh their requests ([`crate::scheduler::fair_share`]).

use super::*;
use crate::scheduler::{fair_share, request_weight};

impl State {
    /// Takes the clients' decayed GPU time (nanoseconds, by client name), or `None` when fair
    /// share is off, and weighs every client by it.
    pub fn set_fair_usage(&mut self, usage: Option<BTreeMap<String, f64>>) {
        // usage read before a reload turned fair share off counts for nothing
        self.fair_usage = usage.filter(|_| self.config.daemon.fairshare_half_life.is_some());
        self.refresh_fair_factors();
    }

    /// A client's fair-share factor now (1 when fair share is off).
    pub fn fair_factor(&self, name: &str) -> f64 {
        self.clients.get(name).map_or(1.0, |c| c.fair_factor)
    }

    /// Weighs the clients that exist now against one another by their decayed usage; after a
    /// client comes or goes, or a request changes.
    pub(super) fn refresh_fair_factors(&mut self) {
        let factors = match &self.fair_usage {
            None => vec![1.0; self.clients.len()],
            Some(usage) => {
                let inputs: Vec<(f64, f64)> = self
                    .clients
                    .values()
                    .map(|c| {
                        let used = usage.get(&c.spec.name).copied().unwrap_or(0.0);
                        (request_weight(c.spec.share.request), used)
                    })
                    .collect();
                fair_share::factors(&inputs)
            }
        };
        for (c, factor) in self.clients.values_mut().zip(factors) {
            if c.fair_factor != factor {
                c.fair_factor = factor;
                self.sched.set_fair_factor(c.id, factor);
            }
        }
    }
}
