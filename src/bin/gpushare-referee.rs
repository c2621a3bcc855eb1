//! Judges observed windows against the referee's promise ([`gpushare::referee`]).
//!
//! Reads JSON lines, one window each:
//! `{"seed":N,"t0":S,"t1":S,"since_change":S,"clients":[{"name":..,"request":..,"limit":..,
//! "interactive":bool,"demand":D,"got":G,"used":U}],"sliced":T}` (times in seconds; `used`
//! optional; `sliced`, optional, what the same mix got done under plain time-slicing over the
//! same part of it, the clients' got added up: the window then divides what the mix could use,
//! [`referee::capacity`], else the whole GPU), and writes one line per window with each client's
//! `due`, `got`, `short`, `used_error`, `kept` and `used_kept`, the window's `capacity`, and its
//! `judged` (it starts a settling time or more after a change).
//! Exits 1 when a judged window broke the promise, 2 on input it cannot read.

use std::io::{BufRead, Write};

use gpushare::referee::{self, Observed};
use gpushare::scheduler::Shares;
use serde_json::{json, Value};

fn observed(c: &Value) -> Result<Observed, String> {
    let num = |k: &str| c.get(k).and_then(Value::as_f64);
    Ok(Observed {
        shares: Shares {
            request: num("request").ok_or("a client without \"request\"")?,
            limit: num("limit").unwrap_or(1.0),
            interactive: c
                .get("interactive")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
        demand: num("demand").ok_or("a client without \"demand\"")?,
        got: num("got").ok_or("a client without \"got\"")?,
        used: num("used"),
    })
}

fn window(w: &Value) -> Result<Value, String> {
    let clients = w
        .get("clients")
        .and_then(Value::as_array)
        .ok_or("a window without \"clients\"")?;
    let observed: Vec<Observed> = clients.iter().map(observed).collect::<Result<_, _>>()?;
    let since = w
        .get("since_change")
        .and_then(Value::as_f64)
        .unwrap_or(f64::INFINITY);
    let judged = referee::settled((since.max(0.0) * 1e9).min(u64::MAX as f64) as u64);
    let got: f64 = observed.iter().map(|c| c.got).sum();
    let capacity = match w.get("sliced") {
        None | Some(Value::Null) => 1.0,
        Some(v) => referee::capacity(got, v.as_f64().ok_or("\"sliced\" is not a number")?),
    };
    let verdicts: Vec<Value> = referee::judge_within(&observed, capacity)
        .iter()
        .zip(clients)
        .map(|(v, c)| {
            json!({
                "name": c.get("name"), "due": v.due, "got": v.got, "short": v.short,
                "used_error": v.used_error, "kept": v.kept(), "used_kept": v.used_kept(),
            })
        })
        .collect();
    Ok(json!({
        "seed": w.get("seed"), "t0": w.get("t0"), "t1": w.get("t1"),
        "judged": judged, "capacity": capacity, "clients": verdicts,
    }))
}

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut broken = false;
    for (n, line) in stdin.lock().lines().enumerate() {
        let line = line.unwrap_or_else(|e| {
            eprintln!("gpushare-referee: cannot read line {}: {e}", n + 1);
            std::process::exit(2);
        });
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let verdict = serde_json::from_str::<Value>(&line)
            .map_err(|e| e.to_string())
            .and_then(|w| window(&w))
            .unwrap_or_else(|e| {
                eprintln!("gpushare-referee: line {}: {e}", n + 1);
                std::process::exit(2);
            });
        let kept = |k: &str| {
            verdict["clients"]
                .as_array()
                .is_some_and(|cs| cs.iter().all(|c| c[k] == true))
        };
        broken |= verdict["judged"] == true && !(kept("kept") && kept("used_kept"));
        let _ = writeln!(out, "{verdict}");
    }
    std::process::exit(i32::from(broken));
}
