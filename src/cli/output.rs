//! Tables for people and JSON for programs, from the status document (see [`super::source`]).

use super::Failure;
use crate::api::{Client, ClientDevice, Device, FlaggedProcess, Status, UsageRow};
use crate::units::format_bytes;
use serde::Serialize;

/// `value` as JSON on one line, the keys of each object sorted.
fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<(), Failure> {
    // Through a `serde_json::Value`, whose objects keep their keys sorted.
    let json = serde_json::to_value(value).map_err(|e| Failure {
        message: format!("cannot write JSON: {e}"),
        code: 1,
    })?;
    println!("{json}");
    Ok(())
}

/// A byte count, or "unlimited" for 0 (how the API writes "no cap").
pub(super) fn cap_cell(bytes: u64) -> String {
    format_bytes((bytes > 0).then_some(bytes))
}

pub(super) fn bytes_cell(bytes: u64) -> String {
    format_bytes(Some(bytes))
}

/// Numbers as a comma-separated list.
pub(super) fn joined(items: &[u32]) -> String {
    items
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// What a client does now: running (holds the token), waiting, idle (attached) or "-".
pub(super) fn client_state(c: &Client) -> &'static str {
    if c.holding {
        "running"
    } else if c.waiting > 0 {
        "waiting"
    } else if c.pids.is_empty() {
        "-"
    } else {
        "idle"
    }
}

/// What a client does on one GPU: running, waiting or idle.
pub(super) fn device_state(d: &ClientDevice) -> &'static str {
    if d.holding {
        "running"
    } else if d.waiting > 0 {
        "waiting"
    } else {
        "idle"
    }
}

/// How leases run on a GPU, "-" from a daemon that does not say.
pub(super) fn leases_cell(d: &Device) -> String {
    if d.leases.is_empty() {
        "-".into()
    } else {
        d.leases.clone()
    }
}

/// A demand estimate as a percentage of the GPU, "-" for none.
pub(super) fn demand_cell(demand: f64) -> String {
    if demand > 0.0 {
        format!("{:.0}%", 100.0 * demand)
    } else {
        "-".into()
    }
}

pub(super) fn class(c: &Client) -> &'static str {
    if c.interactive {
        "interactive"
    } else {
        "batch"
    }
}

fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = width[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

fn client_rows(clients: &[Client]) -> Vec<Vec<String>> {
    clients
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.origin.clone(),
                class(c).into(),
                format!("{:.2}", c.request),
                format!("{:.2}", c.limit),
                format!("{:.1}%", 100.0 * c.share_used),
                format!("{}/{}", bytes_cell(c.memory_used), cap_cell(c.memory)),
                client_state(c).into(),
                joined(&c.pids),
            ]
        })
        .collect()
}

pub fn clients(as_json: bool, clients: &[Client]) -> Result<(), Failure> {
    if as_json {
        return print_json(clients);
    }
    table(
        &[
            "CLIENT", "ORIGIN", "CLASS", "REQUEST", "LIMIT", "USED", "MEMORY", "STATE", "PIDS",
        ],
        client_rows(clients),
    );
    Ok(())
}

/// A GPU by its index where `devices` lists its UUID, else by the UUID.
pub(super) fn gpu_label(devices: &[Device], uuid: &str) -> String {
    devices
        .iter()
        .find(|d| d.uuid.eq_ignore_ascii_case(uuid))
        .map_or_else(|| uuid.to_string(), |d| d.index.to_string())
}

/// One row per client and GPU it uses or used ([`gpu_label`]); memory against the cap, which
/// applies on each GPU, and the demand estimate of its processes there.
fn device_rows(devices: &[Device], clients: &[Client]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for c in clients {
        for d in &c.devices {
            rows.push(vec![
                c.name.clone(),
                gpu_label(devices, &d.device),
                format!("{:.1}%", 100.0 * d.share_used),
                format!("{}/{}", bytes_cell(d.memory_used), cap_cell(c.memory)),
                demand_cell(d.demand),
                device_state(d).into(),
            ]);
        }
    }
    rows
}

/// The figures of a flagged process, short: "3GiB > 2GiB", "90% SM without a lease".
fn flagged_figures(f: &FlaggedProcess) -> String {
    match f.kind.as_str() {
        "memory" => format!(
            "{} > {}",
            format_bytes(Some(f.measured)),
            format_bytes(Some(f.allowed))
        ),
        "activity" => format!("{}% SM without a lease", f.measured),
        _ => "not attached through the hook".into(),
    }
}

fn flagged_rows(flagged: &[FlaggedProcess]) -> Vec<Vec<String>> {
    flagged
        .iter()
        .map(|f| {
            let uid = match f.uid {
                FlaggedProcess::UNKNOWN_UID => "-".into(),
                uid => uid.to_string(),
            };
            let client = match f.client.as_str() {
                "" => "-".into(),
                c => c.to_string(),
            };
            vec![
                f.pid.to_string(),
                uid,
                client,
                f.device.to_string(),
                f.kind.clone(),
                flagged_figures(f),
                f.action.clone(),
            ]
        })
        .collect()
}

/// Usage rows grouped `by` user, client or day.
pub fn usage(as_json: bool, by: &str, rows: &[UsageRow]) -> Result<(), Failure> {
    if as_json {
        return print_json(rows);
    }
    if rows.is_empty() {
        println!("no usage recorded in that time");
        return Ok(());
    }
    let duration = |ns: u64| {
        let secs = std::time::Duration::from_secs((ns + 500_000_000) / 1_000_000_000);
        humantime::format_duration(secs).to_string()
    };
    let table_rows = rows
        .iter()
        .map(|r| {
            vec![
                r.group(by).unwrap_or_default().to_string(),
                duration(r.gpu_ns),
                format!(
                    "{:.2}",
                    r.memory_byte_seconds / (1u64 << 30) as f64 / 3600.0
                ),
                duration(r.wait_ns),
                r.leases.to_string(),
            ]
        })
        .collect();
    table(
        &[
            &by.to_uppercase(),
            "GPU TIME",
            "MEMORY (GiB-h)",
            "WAITED",
            "LEASES",
        ],
        table_rows,
    );
    Ok(())
}

/// `status`: the document as it is (`--json`), or the daemon, a table of devices and one of
/// clients.
pub fn status(as_json: bool, doc: &Status) -> Result<(), Failure> {
    if as_json {
        return print_json(doc);
    }
    println!("gpushared {}, config {}", doc.version, doc.config_path);
    if !doc.config_error.is_empty() {
        println!(
            "config error (running the previous config): {}",
            doc.config_error
        );
    }
    println!("{} processes attached", doc.attached_processes);
    println!();
    if doc.devices.is_empty() {
        println!("no devices managed (NVML off or not available)");
    } else {
        let rows = doc
            .devices
            .iter()
            .map(|d| {
                vec![
                    d.index.to_string(),
                    d.name.clone(),
                    d.compute_mode.clone(),
                    d.mps.clone(),
                    leases_cell(d),
                    format!(
                        "{}/{}",
                        bytes_cell(d.memory_used),
                        bytes_cell(d.memory_total)
                    ),
                ]
            })
            .collect();
        table(
            &["GPU", "NAME", "COMPUTE MODE", "MPS", "LEASES", "MEMORY"],
            rows,
        );
    }
    if !doc.flagged.is_empty() {
        println!();
        println!("GPU processes flagged by the scan:");
        table(
            &["PID", "UID", "CLIENT", "GPU", "KIND", "SEEN", "ACTION"],
            flagged_rows(&doc.flagged),
        );
    }
    println!();
    clients(false, &doc.clients)?;
    let per_gpu = device_rows(&doc.devices, &doc.clients);
    if !per_gpu.is_empty() {
        println!();
        println!("Per GPU (each has its own token; the memory cap applies on each):");
        table(
            &["CLIENT", "GPU", "USED", "MEMORY", "DEMAND", "STATE"],
            per_gpu,
        );
    }
    Ok(())
}
