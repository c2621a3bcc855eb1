//! Tables for people and JSON for programs.

use crate::units::format_bytes;
use std::collections::HashMap;
use zbus::zvariant::{OwnedValue, Value};

type Dict = HashMap<String, OwnedValue>;

fn json(v: &Value<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::U8(n) => J::from(*n),
        Value::Bool(b) => J::from(*b),
        Value::I16(n) => J::from(*n),
        Value::U16(n) => J::from(*n),
        Value::I32(n) => J::from(*n),
        Value::U32(n) => J::from(*n),
        Value::I64(n) => J::from(*n),
        Value::U64(n) => J::from(*n),
        Value::F64(n) => J::from(*n),
        Value::Str(s) => J::from(s.as_str()),
        Value::Array(a) => J::Array(a.iter().map(json).collect()),
        Value::Value(inner) => json(inner),
        other => J::from(other.to_string()),
    }
}

fn dict_json(d: &Dict) -> serde_json::Value {
    let mut keys: Vec<&String> = d.keys().collect();
    keys.sort();
    serde_json::Value::Object(keys.into_iter().map(|k| (k.clone(), json(&d[k]))).collect())
}

fn get<'a, T: TryFrom<&'a Value<'a>>>(d: &'a Dict, key: &str) -> Option<T> {
    d.get(key).and_then(|v| T::try_from(v).ok())
}

fn text(d: &Dict, key: &str) -> String {
    d.get(key)
        .map(|v| match json(v) {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        })
        .unwrap_or_default()
}

fn bytes_cell(d: &Dict, key: &str) -> String {
    match get::<u64>(d, key) {
        Some(0) | None => "unlimited".into(),
        Some(b) => format_bytes(Some(b)),
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

fn client_rows(clients: &[Dict]) -> Vec<Vec<String>> {
    clients
        .iter()
        .map(|c| {
            let pids: Vec<String> = match c.get("pids").map(|v| json(v)) {
                Some(serde_json::Value::Array(a)) => a.iter().map(|p| p.to_string()).collect(),
                _ => vec![],
            };
            let state = if get::<bool>(c, "holding").unwrap_or(false) {
                "running"
            } else if get::<u32>(c, "waiting").unwrap_or(0) > 0 {
                "waiting"
            } else if pids.is_empty() {
                "-"
            } else {
                "idle"
            };
            vec![
                text(c, "name"),
                text(c, "origin"),
                if get::<bool>(c, "interactive").unwrap_or(false) {
                    "interactive".into()
                } else {
                    "batch".into()
                },
                format!("{:.2}", get::<f64>(c, "request").unwrap_or(0.0)),
                format!("{:.2}", get::<f64>(c, "limit").unwrap_or(0.0)),
                format!("{:.1}%", 100.0 * get::<f64>(c, "share_used").unwrap_or(0.0)),
                format!(
                    "{}/{}",
                    format_bytes(get::<u64>(c, "memory_used")),
                    bytes_cell(c, "memory")
                ),
                state.into(),
                pids.join(","),
            ]
        })
        .collect()
}

pub fn clients(as_json: bool, clients: &[Dict]) {
    if as_json {
        let v: Vec<serde_json::Value> = clients.iter().map(dict_json).collect();
        println!("{}", serde_json::Value::Array(v));
        return;
    }
    table(
        &[
            "CLIENT", "ORIGIN", "CLASS", "REQUEST", "LIMIT", "USED", "MEMORY", "STATE", "PIDS",
        ],
        client_rows(clients),
    );
}

/// What `gpushare status` shows.
pub struct Status<'a> {
    pub version: &'a str,
    pub config_path: &'a str,
    pub config_error: &'a str,
    pub attached: u32,
    pub devices: &'a [Dict],
    /// Processes the daemon's GPU scan reported and that are still at it.
    pub flagged: &'a [Dict],
    pub clients: &'a [Dict],
}

/// The figures of a flagged process, short: "3GiB > 2GiB", "90% SM without a lease".
fn flagged_figures(f: &Dict) -> String {
    let measured = get::<u64>(f, "measured").unwrap_or(0);
    match text(f, "kind").as_str() {
        "memory" => format!(
            "{} > {}",
            format_bytes(Some(measured)),
            format_bytes(get::<u64>(f, "allowed"))
        ),
        "activity" => format!("{measured}% SM without a lease"),
        _ => "not attached through the hook".into(),
    }
}

fn flagged_rows(flagged: &[Dict]) -> Vec<Vec<String>> {
    flagged
        .iter()
        .map(|f| {
            let uid = match get::<u32>(f, "uid") {
                Some(u32::MAX) | None => "-".into(),
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
pub fn usage(as_json: bool, by: &str, rows: &[Dict]) {
    if as_json {
        let v: Vec<serde_json::Value> = rows.iter().map(dict_json).collect();
        println!("{}", serde_json::Value::Array(v));
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
            let byte_seconds = get::<f64>(r, "memory_byte_seconds").unwrap_or(0.0);
            vec![
                text(r, by),
                duration(get::<u64>(r, "gpu_ns").unwrap_or(0)),
                format!("{:.2}", byte_seconds / (1u64 << 30) as f64 / 3600.0),
                duration(get::<u64>(r, "wait_ns").unwrap_or(0)),
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

pub fn status(as_json: bool, s: &Status<'_>) {
    if as_json {
        let v = serde_json::json!({
            "version": s.version,
            "config_path": s.config_path,
            "config_error": s.config_error,
            "attached_processes": s.attached,
            "devices": s.devices.iter().map(dict_json).collect::<Vec<_>>(),
            "flagged": s.flagged.iter().map(dict_json).collect::<Vec<_>>(),
            "clients": s.clients.iter().map(dict_json).collect::<Vec<_>>(),
        });
        println!("{v}");
        return;
    }
    println!("gpushared {}, config {}", s.version, s.config_path);
    if !s.config_error.is_empty() {
        println!(
            "config error (running the previous config): {}",
            s.config_error
        );
    }
    println!("{} processes attached", s.attached);
    println!();
    if s.devices.is_empty() {
        println!("no devices managed (NVML off or not available)");
    } else {
        let rows = s
            .devices
            .iter()
            .map(|d| {
                vec![
                    text(d, "index"),
                    text(d, "name"),
                    text(d, "compute_mode"),
                    text(d, "mps"),
                    format!(
                        "{}/{}",
                        format_bytes(get::<u64>(d, "memory_used")),
                        format_bytes(get::<u64>(d, "memory_total"))
                    ),
                ]
            })
            .collect();
        table(&["GPU", "NAME", "COMPUTE MODE", "MPS", "MEMORY"], rows);
    }
    if !s.flagged.is_empty() {
        println!();
        println!("GPU processes flagged by the scan:");
        table(
            &["PID", "UID", "CLIENT", "GPU", "KIND", "SEEN", "ACTION"],
            flagged_rows(s.flagged),
        );
    }
    println!();
    clients(false, s.clients);
}
