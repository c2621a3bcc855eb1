//! The invariant judged over a run's windows with [`gpushare::referee`] ([`shares`]): no
//! saturating batch client gets less than its due minus [`SHORT_TOLERANCE`] in a window, and no
//! light one less than [`LIGHT_KEPT`] of its due; and ([`used`]) the daemon's USED over the run
//! is within [`USED_TOLERANCE`] of what each client got.

use std::fmt::Write;

use gpushare::referee::{capacity, judge_within};

use crate::mix::Mix;
use crate::windows::Ran;

/// How far below its due a saturating client may fall in a judged window (see the test's doc
/// comment).
pub const SHORT_TOLERANCE: f64 = 0.06;
/// The part of its due a light client must get in a judged window (see the test's doc comment).
pub const LIGHT_KEPT: f64 = 0.3;
/// How far the daemon's USED over the judged span may be from what a client got.
pub const USED_TOLERANCE: f64 = 0.05;

/// The run's figures, client by client and window by window, and what broke the invariant in
/// them (empty: nothing).
pub struct Judged {
    pub table: String,
    pub broken: Vec<String>,
}

/// Each window's due beside what each client got and its USED, the GPU divided being what
/// the mix got done in it ([`capacity`]: the fake counts the host's hand-overs as idle GPU
/// time); broken where a saturating batch client got less than its due by more than
/// [`SHORT_TOLERANCE`], or a light one less than [`LIGHT_KEPT`] of it. The interactive client
/// is due its share like the others but not judged on it: its class is about when it runs,
/// judged by the hook tests' latencies.
pub fn shares(mix: &Mix, ran: &Ran) -> Judged {
    let mut table = String::new();
    let mut broken = vec![];
    for w in &ran.windows {
        let done = capacity(w.clients.iter().map(|c| c.got).sum(), 0.0);
        let _ = writeln!(
            table,
            "  window {:.2}-{:.2} s, {done:.3} of the GPU used:",
            secs(w.t0),
            secs(w.t1)
        );
        for (i, v) in judge_within(&w.clients, done).iter().enumerate() {
            let c = &mix.clients[i];
            let _ = writeln!(
                table,
                "    {}: demand {:.3} due {:.3} got {:.3} short {:+.3} USED {:.3}",
                c.name,
                w.clients[i].demand,
                v.due,
                v.got,
                v.short,
                w.clients[i].used.unwrap_or(f64::NAN)
            );
            let short = if c.work.saturating() {
                v.short > SHORT_TOLERANCE
            } else {
                v.got < LIGHT_KEPT * v.due
            };
            if short && !c.shares.interactive {
                broken.push(format!(
                    "{} got {:.3} where it was due {:.3} in {:.2}-{:.2} s",
                    c.name,
                    v.got,
                    v.due,
                    secs(w.t0),
                    secs(w.t1)
                ));
            }
        }
    }
    Judged { table, broken }
}

/// Each client's USED over all the judged windows beside what it got; broken where they differ
/// by more than [`USED_TOLERANCE`].
pub fn used(mix: &Mix, ran: &Ran) -> Judged {
    let mut table = String::new();
    let mut broken = vec![];
    let (t0, t1) = (ran.windows[0].t0, ran.windows.last().unwrap().t1);
    let _ = writeln!(table, "  {:.2}-{:.2} s:", secs(t0), secs(t1));
    for (c, o) in mix.clients.iter().zip(&ran.whole) {
        let used = o.used.unwrap_or(f64::NAN);
        let _ = writeln!(
            table,
            "    {}: got {:.3} USED {:.3} (off by {:+.3})",
            c.name,
            o.got,
            used,
            used - o.got
        );
        if used.is_nan() || (used - o.got).abs() > USED_TOLERANCE {
            broken.push(format!(
                "the daemon's USED of {} was {used:.3} where it got {:.3}",
                c.name, o.got
            ));
        }
    }
    Judged { table, broken }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}
