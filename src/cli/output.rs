//! Tables for people and JSON for programs, from the status document (see [`super::source`]).

use crate::units::format_bytes;
use serde_json::Value;

/// A field as text: strings as themselves, nothing as "", anything else as JSON.
pub(super) fn text(d: &Value, key: &str) -> String {
    match &d[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(super) fn num(d: &Value, key: &str) -> f64 {
    d[key].as_f64().unwrap_or(0.0)
}

/// A byte count, or "unlimited" for 0 (how the API writes "no cap").
pub(super) fn cap_cell(d: &Value, key: &str) -> String {
    match d[key].as_u64() {
        Some(0) | None => "unlimited".into(),
        Some(b) => format_bytes(Some(b)),
    }
}

pub(super) fn bytes_cell(d: &Value, key: &str) -> String {
    format_bytes(d[key].as_u64())
}

pub(super) fn list(d: &Value, key: &str) -> Vec<String> {
    d[key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What a client does now: running (holds the token), waiting, idle (attached) or "-".
pub(super) fn client_state(c: &Value) -> &'static str {
    if c["holding"].as_bool().unwrap_or(false) {
        "running"
    } else if c["waiting"].as_u64().unwrap_or(0) > 0 {
        "waiting"
    } else if list(c, "pids").is_empty() {
        "-"
    } else {
        "idle"
    }
}

pub(super) fn class(c: &Value) -> &'static str {
    if c["interactive"].as_bool().unwrap_or(false) {
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

fn client_rows(clients: &[Value]) -> Vec<Vec<String>> {
    clients
        .iter()
        .map(|c| {
            vec![
                text(c, "name"),
                text(c, "origin"),
                class(c).into(),
                format!("{:.2}", num(c, "request")),
                format!("{:.2}", num(c, "limit")),
                format!("{:.1}%", 100.0 * num(c, "share_used")),
                format!("{}/{}", bytes_cell(c, "memory_used"), cap_cell(c, "memory")),
                client_state(c).into(),
                list(c, "pids").join(","),
            ]
        })
        .collect()
}

pub fn clients(as_json: bool, clients: &[Value]) {
    if as_json {
        println!("{}", Value::Array(clients.to_vec()));
        return;
    }
    table(
        &[
            "CLIENT", "ORIGIN", "CLASS", "REQUEST", "LIMIT", "USED", "MEMORY", "STATE", "PIDS",
        ],
        client_rows(clients),
    );
}

/// One row per client and GPU it uses or used: the GPU by its index where the document's
/// devices list its UUID, else by the UUID; memory against the cap, which applies on each GPU.
fn device_rows(doc: &Value, clients: &[Value]) -> Vec<Vec<String>> {
    let devices = doc["devices"].as_array().cloned().unwrap_or_default();
    let gpu = |uuid: &str| {
        devices
            .iter()
            .find(|d| text(d, "uuid").eq_ignore_ascii_case(uuid))
            .map_or_else(|| uuid.to_string(), |d| text(d, "index"))
    };
    let mut rows = Vec::new();
    for c in clients {
        for d in c["devices"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let state = if d["holding"].as_bool().unwrap_or(false) {
                "running"
            } else if d["waiting"].as_u64().unwrap_or(0) > 0 {
                "waiting"
            } else {
                "idle"
            };
            rows.push(vec![
                text(c, "name"),
                gpu(&text(d, "device")),
                format!("{:.1}%", 100.0 * num(d, "share_used")),
                format!("{}/{}", bytes_cell(d, "memory_used"), cap_cell(c, "memory")),
                state.into(),
            ]);
        }
    }
    rows
}

/// The figures of a flagged process, short: "3GiB > 2GiB", "90% SM without a lease".
fn flagged_figures(f: &Value) -> String {
    let measured = f["measured"].as_u64().unwrap_or(0);
    match text(f, "kind").as_str() {
        "memory" => format!(
            "{} > {}",
            format_bytes(Some(measured)),
            format_bytes(f["allowed"].as_u64())
        ),
        "activity" => format!("{measured}% SM without a lease"),
        _ => "not attached through the hook".into(),
    }
}

fn flagged_rows(flagged: &[Value]) -> Vec<Vec<String>> {
    flagged
        .iter()
        .map(|f| {
            let uid = match f["uid"].as_u64() {
                Some(u) if u == u32::MAX as u64 => "-".into(),
                None => "-".into(),
                Some(uid) => uid.to_string(),
            };
            let client = match text(f, "client") {
                c if c.is_empty() => "-".into(),
                c => c,
            };
            vec![
                text(f, "pid"),
                uid,
                client,
                text(f, "device"),
                text(f, "kind"),
                flagged_figures(f),
                text(f, "action"),
            ]
        })
        .collect()
}

/// Usage rows grouped `by` user, client or day.
pub fn usage(as_json: bool, by: &str, rows: &[Value]) {
    if as_json {
        println!("{}", Value::Array(rows.to_vec()));
        return;
    }
    if rows.is_empty() {
        println!("no usage recorded in that time");
        return;
    }
    let duration = |ns: u64| {
        let secs = std::time::Duration::from_secs((ns + 500_000_000) / 1_000_000_000);
        humantime::format_duration(secs).to_string()
    };
    let table_rows = rows
        .iter()
        .map(|r| {
            vec![
                text(r, by),
                duration(r["gpu_ns"].as_u64().unwrap_or(0)),
                format!(
                    "{:.2}",
                    num(r, "memory_byte_seconds") / (1u64 << 30) as f64 / 3600.0
                ),
                duration(r["wait_ns"].as_u64().unwrap_or(0)),
                text(r, "leases"),
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
}

/// `status`: the document as it is (`--json`), or the daemon, a table of devices and one of
/// clients.
pub fn status(as_json: bool, doc: &Value) {
    if as_json {
        println!("{doc}");
        return;
    }
    println!(
        "gpushared {}, config {}",
        text(doc, "version"),
        text(doc, "config_path")
    );
    let config_error = text(doc, "config_error");
    if !config_error.is_empty() {
        println!("config error (running the previous config): {config_error}");
    }
    println!(
        "{} processes attached",
        doc["attached_processes"].as_u64().unwrap_or(0)
    );
    println!();
    let devices = doc["devices"].as_array().cloned().unwrap_or_default();
    if devices.is_empty() {
        println!("no devices managed (NVML off or not available)");
    } else {
        let rows = devices
            .iter()
            .map(|d| {
                vec![
                    text(d, "index"),
                    text(d, "name"),
                    text(d, "compute_mode"),
                    text(d, "mps"),
                    format!(
                        "{}/{}",
                        bytes_cell(d, "memory_used"),
                        bytes_cell(d, "memory_total")
                    ),
                ]
            })
            .collect();
        table(&["GPU", "NAME", "COMPUTE MODE", "MPS", "MEMORY"], rows);
    }
    let flagged = doc["flagged"].as_array().cloned().unwrap_or_default();
    if !flagged.is_empty() {
        println!();
        println!("GPU processes flagged by the scan:");
        table(
            &["PID", "UID", "CLIENT", "GPU", "KIND", "SEEN", "ACTION"],
            flagged_rows(&flagged),
        );
    }
    println!();
    let all = doc["clients"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    clients(false, all);
    let per_gpu = device_rows(doc, all);
    if !per_gpu.is_empty() {
        println!();
        println!("Per GPU (each has its own token; the memory cap applies on each):");
        table(&["CLIENT", "GPU", "USED", "MEMORY", "STATE"], per_gpu);
    }
}
