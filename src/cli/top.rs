//! `gpushare top`: a live view of the devices and clients, refreshed every second, clients sorted
//! by the share of GPU time they had over the last ten seconds. `q`, Esc or Ctrl-C quits. The
//! terminal is put back as it was on every way out: quitting, an error, a signal or a panic.

use super::output::{
    bytes_cell, cap_cell, class, client_state, device_state, gpu_label, joined, leases_cell,
};
use super::source::Source;
use super::Failure;
use crate::api::{Client, Device, Status};
use crate::bus::BusChoice;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};

/// How often the view reads the daemon again.
const REFRESH: Duration = Duration::from_secs(1);

/// What the screen shows: the last document read and, when the last read failed, why (the
/// error names each way to the daemon that was tried).
struct View {
    doc: Status,
    error: Option<String>,
}

pub async fn run(bus: &BusChoice, socket: &Path) -> Result<(), Failure> {
    if !std::io::stdout().is_terminal() {
        return Err(Failure {
            message: "gpushare top needs a terminal; `gpushare status` prints the same once".into(),
            code: 2,
        });
    }
    // The first read happens before the screen changes, so that an unreachable daemon is an
    // ordinary error message.
    let (mut source, doc) = Source::open(bus, socket).await?;
    let mut view = View { doc, error: None };
    let fail = |e: std::io::Error| Failure {
        message: format!("the terminal: {e}"),
        code: 1,
    };
    let screen = Screen::enter().map_err(fail)?;
    let mut term =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))
            .map_err(fail)?;
    let mut term_signal = signal(SignalKind::terminate()).map_err(fail)?;
    let mut hup_signal = signal(SignalKind::hangup()).map_err(fail)?;
    let mut int_signal = signal(SignalKind::interrupt()).map_err(fail)?;
    'outer: loop {
        term.draw(|f| draw(f, &view)).map_err(fail)?;
        let deadline = Instant::now() + REFRESH;
        // Keys until the next refresh; a resize redraws at once.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let key = tokio::task::spawn_blocking(move || next_event(left));
            let event = tokio::select! {
                e = key => e.map_err(|e| fail(std::io::Error::other(e)))?.map_err(fail)?,
                _ = term_signal.recv() => break 'outer,
                _ = hup_signal.recv() => break 'outer,
                _ = int_signal.recv() => break 'outer,
            };
            match event {
                Some(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                        break 'outer;
                    }
                }
                Some(Event::Resize(..)) => {
                    term.autoresize().map_err(fail)?;
                    term.draw(|f| draw(f, &view)).map_err(fail)?;
                }
                _ => {}
            }
        }
        match source.status().await {
            Ok(doc) => {
                view.doc = doc;
                view.error = None;
            }
            // The daemon restarted or went away: find it again, either way.
            Err(_) => match Source::open(bus, socket).await {
                Ok((s, doc)) => {
                    source = s;
                    view.doc = doc;
                    view.error = None;
                }
                Err(f) => view.error = Some(f.message),
            },
        }
    }
    drop(term);
    drop(screen);
    Ok(())
}

/// The next terminal event within `wait`, if any.
fn next_event(wait: Duration) -> std::io::Result<Option<Event>> {
    if event::poll(wait)? {
        event::read().map(Some)
    } else {
        Ok(None)
    }
}

/// Raw mode, the alternate screen and a hidden cursor while it lives; a panic puts them back too.
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

fn restore() {
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
    let _ = terminal::disable_raw_mode();
}

/// Nanoseconds as "1h02m03s", "2m05s" or "12.3s".
fn duration_cell(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    let whole = s as u64;
    if whole >= 3600 {
        format!(
            "{}h{:02}m{:02}s",
            whole / 3600,
            whole % 3600 / 60,
            whole % 60
        )
    } else if whole >= 60 {
        format!("{}m{:02}s", whole / 60, whole % 60)
    } else {
        format!("{s:.1}s")
    }
}

/// Clients, most share first (then by name).
fn sorted_clients(doc: &Status) -> Vec<&Client> {
    let mut clients: Vec<&Client> = doc.clients.iter().collect();
    clients.sort_by(|a, b| {
        b.share_used
            .total_cmp(&a.share_used)
            .then_with(|| a.name.cmp(&b.name))
    });
    clients
}

/// Processes on a device that are no client's (they bypass the hook).
fn unattached(device: &Device, attached: &BTreeSet<u32>) -> Vec<u32> {
    device
        .pids
        .iter()
        .copied()
        .filter(|p| !attached.contains(p))
        .collect()
}

fn draw(f: &mut Frame<'_>, view: &View) {
    let doc = &view.doc;
    let devices = &doc.devices;
    let clients = sorted_clients(doc);
    let attached: BTreeSet<u32> = clients
        .iter()
        .flat_map(|c| c.pids.iter().copied())
        .collect();
    let [head, devices_area, clients_area, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(devices.len() as u16 + 3),
        Constraint::Min(4),
        Constraint::Length(1),
    ])
    .areas(f.area());

    let mut title = format!(
        "gpushared {}   {} processes attached   config {}",
        doc.version, doc.attached_processes, doc.config_path,
    );
    if !doc.config_error.is_empty() {
        title.push_str(&format!("   config error: {}", doc.config_error));
    }
    f.render_widget(Paragraph::new(title).bold(), head);

    let header = |cells: &[&'static str]| {
        Row::new(cells.to_vec()).style(Style::new().add_modifier(Modifier::REVERSED))
    };
    let devices_block = Block::bordered().title(" devices ");
    if devices.is_empty() {
        f.render_widget(
            Paragraph::new("no devices managed (NVML off or not available)").block(devices_block),
            devices_area,
        );
    } else {
        let device_rows: Vec<Row> = devices
            .iter()
            .map(|d| {
                let lost = unattached(d, &attached);
                Row::new(vec![
                    d.index.to_string(),
                    d.name.clone(),
                    format!("{}%", d.utilization_gpu),
                    format!(
                        "{}/{}",
                        bytes_cell(d.memory_used),
                        bytes_cell(d.memory_total)
                    ),
                    d.mps.clone(),
                    leases_cell(d),
                    d.compute_mode.clone(),
                    if lost.is_empty() {
                        "-".into()
                    } else {
                        joined(&lost)
                    },
                ])
            })
            .collect();
        let device_table = Table::new(
            device_rows,
            [
                Constraint::Length(4),
                Constraint::Min(16),
                Constraint::Length(5),
                Constraint::Length(17),
                Constraint::Length(8),
                Constraint::Length(13),
                Constraint::Length(18),
                Constraint::Min(12),
            ],
        )
        .header(header(&[
            "GPU",
            "NAME",
            "UTIL",
            "MEMORY",
            "MPS",
            "LEASES",
            "COMPUTE MODE",
            "UNATTACHED PIDS",
        ]))
        .block(devices_block);
        f.render_widget(device_table, devices_area);
    }

    // Where more than one GPU is managed or used, each client's figures on each GPU follow it.
    let per_gpu = devices.len() > 1 || clients.iter().any(|c| c.devices.len() > 1);
    let client_rows: Vec<Row> = clients
        .iter()
        .flat_map(|c| {
            let mut who = c.users.clone();
            who.extend(c.groups.iter().map(|g| format!("@{g}")));
            let state = client_state(c);
            let row = Row::new(vec![
                c.name.clone(),
                if who.is_empty() {
                    "-".into()
                } else {
                    who.join(",")
                },
                class(c).to_string(),
                format!("{:.2}", c.request),
                format!("{:.2}", c.limit),
                format!("{:.1}%", 100.0 * c.share_used),
                duration_cell(c.gpu_time_ns),
                format!("{}/{}", bytes_cell(c.memory_used), cap_cell(c.memory)),
                state.to_string(),
                joined(&c.pids),
            ]);
            let row = if state == "running" { row.bold() } else { row };
            let c: &Client = c;
            let gpus = c.devices.iter().filter(move |_| per_gpu).map(move |d| {
                let cells = [
                    format!("  GPU {}", gpu_label(devices, &d.device)),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    format!("{:.1}%", 100.0 * d.share_used),
                    String::new(),
                    format!("{}/{}", bytes_cell(d.memory_used), cap_cell(c.memory)),
                    device_state(d).to_string(),
                    String::new(),
                ];
                Row::new(cells).dim()
            });
            std::iter::once(row).chain(gpus)
        })
        .collect();
    let client_table = Table::new(
        client_rows,
        [
            Constraint::Min(10),
            Constraint::Min(8),
            Constraint::Length(11),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(19),
            Constraint::Length(7),
            Constraint::Min(8),
        ],
    )
    .header(header(&[
        "CLIENT",
        "USERS",
        "CLASS",
        "REQUEST",
        "LIMIT",
        "SHARE 10s",
        "GPU TIME",
        "MEMORY",
        "STATE",
        "PIDS",
    ]))
    .block(Block::bordered().title(if per_gpu {
        " clients, by share of the last 10 s, each with its figures on each GPU "
    } else {
        " clients, by share of the last 10 s "
    }));
    f.render_widget(client_table, clients_area);

    let footer = match &view.error {
        Some(e) => Line::from(e.as_str()).red(),
        None => Line::from("q: quit"),
    };
    f.render_widget(Paragraph::new(footer), foot);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;

    fn screen(view: &View) -> String {
        let mut t = ratatui::Terminal::new(TestBackend::new(160, 20)).unwrap();
        t.draw(|f| draw(f, view)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    }

    #[test]
    fn clients_are_sorted_by_share_and_unattached_processes_are_named() {
        let doc = serde_json::json!({
            "version": "0.1.0",
            "config_path": "/etc/gpushare/gpushare.toml",
            "config_error": "",
            "attached_processes": 2,
            "devices": [{"index": 0, "name": "NVIDIA H100", "utilization_gpu": 87,
                         "memory_used": 3u64 << 30, "memory_total": 80u64 << 30, "mps": "off",
                         "leases": "turns", "compute_mode": "DEFAULT",
                         "pids": [41, 42, 999]}],
            "clients": [
                {"name": "small", "users": ["bob"], "groups": [], "request": 0.1, "limit": 1.0,
                 "share_used": 0.05, "gpu_time_ns": 61_000_000_000u64, "memory": 0,
                 "memory_used": 0, "holding": false, "waiting": 1, "pids": [42]},
                {"name": "big", "users": [], "groups": ["ml"], "request": 0.6, "limit": 1.0,
                 "share_used": 0.9, "gpu_time_ns": 3_700_000_000_000u64, "memory": 2u64 << 30,
                 "memory_used": 1u64 << 30, "holding": true, "waiting": 0, "pids": [41]},
            ],
        });
        // as the socket of a daemon that leaves keys out sends it
        let doc: Status = serde_json::from_value(doc).unwrap();
        let s = screen(&View {
            doc,
            error: Some("the daemon went away".into()),
        });
        let big = s.find("big ").expect(&s);
        let small = s.find("small ").expect(&s);
        assert!(big < small, "most share first:\n{s}");
        assert!(s.contains("90.0%") && s.contains("5.0%"), "{s}");
        assert!(s.contains("1h01m40s") && s.contains("1m01s"), "{s}");
        assert!(s.contains("running") && s.contains("waiting"), "{s}");
        assert!(s.contains("@ml") && s.contains("bob"), "{s}");
        assert!(s.contains("1GiB/2GiB") && s.contains("unlimited"), "{s}");
        assert!(s.contains("87%") && s.contains("999"), "{s}");
        assert!(s.contains("LEASES") && s.contains("turns"), "{s}");
        assert!(s.contains("the daemon went away"), "{s}");
        assert!(!s.contains("  GPU "), "one GPU: no rows per GPU\n{s}");
    }

    #[test]
    fn on_two_gpus_each_client_shows_its_figures_on_each() {
        let gpu = |index: u32, uuid: &str| {
            serde_json::json!({"index": index, "uuid": uuid, "name": "NVIDIA H200",
                               "memory_used": 0, "memory_total": 140u64 << 30, "pids": []})
        };
        let doc = serde_json::json!({
            "version": "0.1.0",
            "attached_processes": 1,
            "devices": [gpu(0, "GPU-aaaa"), gpu(1, "GPU-bbbb")],
            "clients": [
                {"name": "train", "users": ["ann"], "request": 0.5, "limit": 1.0,
                 "share_used": 0.7, "memory": 16u64 << 30, "memory_used": 12u64 << 30,
                 "holding": true, "pids": [7],
                 "devices": [
                    {"device": "GPU-aaaa", "memory_used": 8u64 << 30, "share_used": 0.4,
                     "holding": false, "waiting": 1},
                    {"device": "GPU-bbbb", "memory_used": 4u64 << 30, "share_used": 0.3,
                     "holding": true, "waiting": 0}]},
            ],
        });
        let doc: Status = serde_json::from_value(doc).unwrap();
        let s = screen(&View { doc, error: None });
        let line = |what: &str| {
            s.lines()
                .find(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no {what:?} in\n{s}"))
                .to_string()
        };
        let (g0, g1) = (line("  GPU 0"), line("  GPU 1"));
        assert!(
            g0.contains("40.0%") && g0.contains("8GiB/16GiB") && g0.contains("waiting"),
            "{g0}"
        );
        assert!(
            g1.contains("30.0%") && g1.contains("4GiB/16GiB") && g1.contains("running"),
            "{g1}"
        );
        assert!(s.find("train").unwrap() < s.find("  GPU 0").unwrap(), "{s}");
    }
}
