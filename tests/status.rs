//! `gpushare status`, `clients` and `top` against a real gpushared without D-Bus: they read the
//! status request of its socket, open to every user, and show the same document as over D-Bus.

mod common;
use common::*;
use gpushare::protocol::{frame_len, Reply, Request, StatusReader, MAX_FRAME, STATUS_MORE};
use serde_json::Value;
use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const CONFIG: &str = "[daemon]\nquantum = \"100ms\"\n[clients.busy]\nrequest = 0.5\nmemory = \"1GiB\"\nusers = [\"*\"]\n[clients.idle]\nrequest = 0.25\nusers = [\"*\"]\n";

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "gpushare: {}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

fn client<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no client {name} in {doc}"))
}

/// Reads the status over a raw connection; returns the frames' payload lengths and the document.
fn raw_status(d: &Daemon) -> (Vec<usize>, Value) {
    let mut c = d.connect();
    c.send(&Request::Status);
    let mut reader = StatusReader::default();
    let mut sizes = vec![];
    loop {
        let mut header = [0u8; 4];
        c.0.read_exact(&mut header).expect("a status frame");
        let n = frame_len(header).expect("a frame within MAX_FRAME");
        sizes.push(n);
        let mut payload = vec![0; n];
        c.0.read_exact(&mut payload).unwrap();
        if let Some(doc) = reader.push(Reply::decode(&payload).unwrap()).unwrap() {
            // the daemon closes the connection after the last piece
            assert_eq!(c.0.read(&mut [0u8; 1]).unwrap_or(0), 0);
            return (sizes, serde_json::from_slice(&doc).unwrap());
        }
    }
}

#[test]
fn status_and_clients_read_the_socket_when_no_bus_serves_the_daemon() {
    require_root();
    let erin = test_user("gpstest-erin");
    let d = Daemon::start(CONFIG, None);
    let mut p = d.connect();
    assert!(matches!(p.hello("busy"), Reply::Welcome { .. }));
    assert_eq!(
        p.reserve(GPU0, 600 << 20),
        Some(Reply::Reserved { used: 600 << 20 })
    );
    let me = std::process::id();

    // as root and as an unprivileged user, with no bus at all
    for uid in [None, Some(erin)] {
        let doc = json_of(&d.cli_as(uid, &["status", "--json"]));
        assert_eq!(doc["attached_processes"], 1, "{doc}");
        assert_eq!(doc["config_path"], path_str(&d.config));
        let busy = client(&doc, "busy");
        assert_eq!(busy["pids"], serde_json::json!([me]), "{doc}");
        assert_eq!(busy["memory_used"], 600u64 << 20);
        assert_eq!(busy["memory"], 1u64 << 30);
        assert_eq!(busy["request"], 0.5);
        assert_eq!(client(&doc, "idle")["pids"], serde_json::json!([]));

        let out = d.cli_as(uid, &["clients"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let table = stdout(&out);
        let busy_row = table
            .lines()
            .find(|l| l.starts_with("busy"))
            .unwrap_or_else(|| panic!("{table}"));
        assert!(
            busy_row.contains("600MiB/1GiB") && busy_row.contains(&me.to_string()),
            "{table}"
        );
        assert!(table.lines().any(|l| l.starts_with("idle")), "{table}");

        let out = d.cli_as(uid, &["status"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out).contains("1 processes attached"),
            "{}",
            stdout(&out)
        );
    }

    // a bus that does not answer: the socket all the same, and nothing said about it
    let out = Command::new(GPUSHARE)
        .args(["--json", "clients"])
        .env("GPUSHARE_BUS", "unix:path=/nonexistent/bus")
        .env("GPUSHARE_SOCKET", &d.socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert_eq!(json_of(&out).as_array().unwrap().len(), 2);

    // status readers never attach: still one process, one attach in the log
    assert_eq!(
        json_of(&d.cli(&["--json", "status"]))["attached_processes"],
        1
    );
    assert_eq!(
        d.log().matches("process attached").count(),
        1,
        "{}",
        d.log()
    );

    // neither way: the error names both, and exits 1
    let out = Command::new(GPUSHARE)
        .args(["status", "--socket", "/nonexistent/gpushare.sock"])
        .env("GPUSHARE_BUS", "unix:path=/nonexistent/bus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(
        e.contains("cannot reach gpushared")
            && e.contains("unix:path=/nonexistent/bus bus")
            && e.contains("socket /nonexistent/gpushare.sock"),
        "{e}"
    );
}

/// A client's figures on each GPU: in the JSON document under `devices`, and in a table of
/// `gpushare status`, the GPU by its UUID where NVML does not list it.
#[test]
fn status_shows_a_clients_figures_on_each_gpu() {
    let d = Daemon::start(CONFIG, None);
    let mut p = d.connect();
    p.hello("busy");
    assert_eq!(
        p.reserve(GPU0, 600 << 20),
        Some(Reply::Reserved { used: 600 << 20 })
    );
    assert_eq!(
        p.reserve(GPU1, 100 << 20),
        Some(Reply::Reserved { used: 100 << 20 })
    );
    p.send(&Request::Acquire { device: GPU1 });
    assert!(matches!(p.recv(), Some(Reply::Grant { .. })));

    let doc = json_of(&d.cli(&["--json", "status"]));
    let busy = client(&doc, "busy");
    assert_eq!(busy["memory_used"], 700u64 << 20, "{doc}");
    assert_eq!(busy["holding"], true);
    assert_eq!(
        busy["devices"],
        serde_json::json!([
            {"device": GPU0.to_string(), "memory_used": 600u64 << 20, "share_used": 0.0,
             "holding": false, "waiting": 0, "demand": 0.0},
            {"device": GPU1.to_string(), "memory_used": 100u64 << 20,
             "share_used": busy["devices"][1]["share_used"], "holding": true, "waiting": 0,
             "demand": 0.5},
        ]),
        "{doc}"
    );
    assert_eq!(client(&doc, "idle")["devices"], serde_json::json!([]));

    let out = d.cli(&["status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = |gpu: String| {
        text.lines()
            .find(|l| l.starts_with("busy") && l.contains(&gpu))
            .unwrap_or_else(|| panic!("no row for {gpu}: {text}"))
            .to_string()
    };
    assert!(row(GPU0.to_string()).contains("600MiB/1GiB"), "{text}");
    assert!(row(GPU0.to_string()).ends_with("idle"), "{text}");
    assert!(row(GPU1.to_string()).contains("100MiB/1GiB"), "{text}");
    assert!(row(GPU1.to_string()).ends_with("running"), "{text}");
    // DEMAND: the estimate of the process holding a lease there (the first guess, 50%), none
    // where it only holds memory
    let demand = |gpu: String| row(gpu).split_whitespace().nth(4).map(str::to_string);
    assert_eq!(demand(GPU1.to_string()).as_deref(), Some("50%"), "{text}");
    assert_eq!(demand(GPU0.to_string()).as_deref(), Some("-"), "{text}");
}

#[test]
fn a_status_with_many_clients_spans_frames_within_the_limit() {
    let mut config = String::new();
    for i in 0..300 {
        config.push_str(&format!(
            "[clients.a-client-with-a-long-name-{i:03}]\nusers = [\"*\"]\n"
        ));
    }
    let d = Daemon::start(&config, None);
    let (sizes, doc) = raw_status(&d);
    assert!(sizes.len() > 10, "{sizes:?}");
    assert!(sizes.iter().all(|n| *n <= MAX_FRAME), "{sizes:?}");
    assert_eq!(doc["clients"].as_array().unwrap().len(), 300);
    let listed = json_of(&d.cli(&["--json", "clients"]));
    assert_eq!(listed.as_array().unwrap().len(), 300);
}

#[test]
fn status_is_refused_on_an_attached_session_and_other_connections_go_on() {
    let d = Daemon::start(CONFIG, None);
    let mut good = d.connect();
    good.hello("idle");
    let mut p = d.connect();
    p.hello("busy");
    p.send(&Request::Status);
    assert_eq!(
        p.recv_within(Duration::from_secs(5)),
        None,
        "the session is closed"
    );
    // an oversized request is still refused before anything is read into memory
    let mut big = d.connect();
    let _ = big.0.write_all(&((MAX_FRAME + 1) as u32).to_le_bytes());
    assert_eq!(big.recv_within(Duration::from_secs(5)), None);
    assert_eq!(good.reserve(GPU0, 0), Some(Reply::Reserved { used: 0 }));
    let (sizes, doc) = raw_status(&d);
    assert_eq!(sizes.len(), 1);
    assert_eq!(doc["attached_processes"], 1);
    // a single frame carries no continuation flag
    let mut c = d.connect();
    c.send(&Request::Status);
    assert!(matches!(c.recv(), Some(Reply::Status { flags, .. }) if flags & STATUS_MORE == 0));
}

/// Over D-Bus and over the socket the document has the same fields and the same clients.
#[test]
fn the_socket_serves_the_document_d_bus_gives() {
    require_root();
    let bus = TestBus::start();
    let d = Daemon::start(CONFIG, Some(&bus));
    let mut p = d.connect();
    p.hello("busy");
    let over_bus = json_of(&d.cli(&["--json", "status"]));
    let over_socket = json_of(
        &Command::new(GPUSHARE)
            .args(["--json", "status"])
            .env("GPUSHARE_BUS", "none")
            .env("GPUSHARE_SOCKET", &d.socket)
            .output()
            .unwrap(),
    );
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&over_bus), keys(&over_socket));
    for name in ["busy", "idle"] {
        let (a, b) = (client(&over_bus, name), client(&over_socket, name));
        assert_eq!(keys(a), keys(b), "{name}");
        for k in [
            "name", "request", "limit", "memory", "pids", "users", "origin",
        ] {
            assert_eq!(a[k], b[k], "{name}.{k}");
        }
    }
    for k in [
        "version",
        "config_path",
        "config_error",
        "attached_processes",
    ] {
        assert_eq!(over_bus[k], over_socket[k], "{k}");
    }
}

/// A private tmux server, killed when dropped.
struct Tmux {
    server: String,
}

impl Tmux {
    fn start() -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            let _ = Command::new("apt-get")
                .args(["install", "-y", "-q", "tmux"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .output();
        }
        Command::new("tmux").arg("-V").output().ok()?;
        Some(Tmux {
            server: format!("gpushare-test-{}", std::process::id()),
        })
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.server)
            .args(args)
            .output()
            .expect("tmux runs");
        assert!(out.status.success(), "tmux {args:?}: {}", stderr(&out));
        stdout(&out)
    }

    fn screen(&self, session: &str) -> String {
        self.run(&["capture-pane", "-p", "-t", session])
    }

    fn pane(&self, session: &str, format: &str) -> String {
        self.run(&["display-message", "-p", "-t", session, format])
            .trim()
            .to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.server, "kill-server"])
            .output();
    }
}

/// Renews its lease as soon as it has it, until told to stop: the busy client.
fn busy_process(d: &Daemon, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let mut c = d.connect();
    assert!(matches!(c.hello("busy"), Reply::Welcome { .. }));
    assert!(matches!(
        c.reserve(GPU0, 300 << 20),
        Some(Reply::Reserved { .. })
    ));
    std::thread::spawn(move || {
        c.send(&Request::Acquire { device: GPU0 });
        while !stop.load(Ordering::Relaxed) {
            if let Some(Reply::Grant { lease_ns, .. }) = c.recv_within(Duration::from_secs(2)) {
                std::thread::sleep(Duration::from_nanos(lease_ns.min(50_000_000)));
                c.send(&Request::Renew {
                    device: GPU0,
                    busy_ns: lease_ns,
                    launches: 0,
                    active_ns: 0,
                });
            }
        }
    })
}

/// The cells of a screen line, without the table's borders.
fn cells(line: &str) -> Vec<&str> {
    line.split(|c: char| c.is_whitespace() || c == '│')
        .filter(|c| !c.is_empty())
        .collect()
}

/// The line number and the line of client `name`'s row on a `top` screen.
fn row_of<'a>(screen: &'a str, name: &str) -> Option<(usize, &'a str)> {
    screen
        .lines()
        .enumerate()
        .find(|(_, l)| cells(l).first() == Some(&name))
}

/// The share column of `name`'s row.
fn share_of(screen: &str, name: &str) -> Option<f64> {
    let (_, row) = row_of(screen, name)?;
    cells(row)
        .into_iter()
        .find(|c| c.ends_with('%') && c.contains('.'))
        .and_then(|c| c.trim_end_matches('%').parse().ok())
}

/// Runs `gpushare top` in a tmux pane against a daemon without D-Bus, with one busy and one idle
/// client; reads what the screen shows, quits with `key`, and checks that the terminal is back
/// as it was.
fn top_in_tmux(tmux: &Tmux, d: &Daemon, session: &str, key: &str) {
    let script = format!(
        "env GPUSHARE_BUS=none GPUSHARE_SOCKET={} {GPUSHARE} top; echo \"top exited with $?\"; \
         stty -a; echo end-of-stty; exec sleep 600",
        path_str(&d.socket)
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-x",
        "200",
        "-y",
        "40",
        "-s",
        session,
        "sh",
        "-c",
        &script,
    ]);
    let me = std::process::id().to_string();
    let mut last = String::new();
    wait_for(
        &format!("top to show both clients, a share for busy and its pid: {session}"),
        Duration::from_secs(30),
        || {
            last = tmux.screen(session);
            last.contains("idle")
                && last.contains(&me)
                && share_of(&last, "busy").is_some_and(|s| s > 0.0)
        },
    );
    assert!(
        last.contains("SHARE 10s") && last.contains("devices"),
        "{last}"
    );
    let busy = share_of(&last, "busy").unwrap();
    let idle = share_of(&last, "idle").unwrap_or(0.0);
    assert!(busy > idle, "{last}");
    let (busy_line, busy_row) = row_of(&last, "busy").unwrap();
    let (idle_line, _) = row_of(&last, "idle").unwrap();
    assert!(busy_line < idle_line, "sorted by share:\n{last}");
    assert!(
        busy_row.contains("300MiB/1GiB") && cells(busy_row).contains(&me.as_str()),
        "{last}"
    );
    assert_eq!(tmux.pane(session, "#{alternate_on}"), "1", "{last}");

    tmux.run(&["send-keys", "-t", session, key]);
    wait_for(
        &format!("top to exit on {key}"),
        Duration::from_secs(20),
        || {
            last = tmux.screen(session);
            last.contains("end-of-stty")
        },
    );
    assert!(last.contains("top exited with 0"), "{last}");
    // cooked mode and echo are back, the alternate screen is left and the cursor shows
    let words: Vec<&str> = last.split_whitespace().collect();
    for w in ["icanon", "echo", "isig"] {
        assert!(
            words.contains(&w) && !words.contains(&format!("-{w}").as_str()),
            "{w}:\n{last}"
        );
    }
    assert_eq!(tmux.pane(session, "#{alternate_on}"), "0");
    assert_eq!(tmux.pane(session, "#{cursor_flag}"), "1");
}

#[test]
fn top_shows_the_clients_live_and_gives_the_terminal_back() {
    let Some(tmux) = Tmux::start() else {
        eprintln!(
            "SKIPPED: tmux is not installed and could not be installed (apt-get install tmux)"
        );
        return;
    };
    // one GPU (the fake NVML) with an attached process (this test's) and one that bypasses the
    // hook (4242)
    let nvml = open_tempdir();
    let lib = nvml.path().join("libnvidia-ml.so.1");
    std::fs::copy(fake_nvml(), &lib).unwrap();
    std::fs::write(
        nvml.path().join("fake_nvml.state"),
        format!(
            "count 1\nproc 0 4242 1024\nproc 0 {} 1024\n",
            std::process::id()
        ),
    )
    .unwrap();
    let d = Daemon::start(
        &format!("[gpu]\nnvml_library = {lib:?}\nscan_interval = \"200ms\"\n{CONFIG}"),
        None,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let busy = busy_process(&d, stop.clone());
    let mut idle = d.connect();
    idle.hello("idle");
    top_in_tmux(&tmux, &d, "quit-with-q", "q");
    top_in_tmux(&tmux, &d, "quit-with-ctrl-c", "C-c");
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
}

#[test]
fn top_without_a_terminal_or_a_daemon_says_why() {
    let out = Command::new(GPUSHARE)
        .arg("top")
        .env("GPUSHARE_BUS", "none")
        .env("GPUSHARE_SOCKET", "/nonexistent/gpushare.sock")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("needs a terminal"),
        "{}",
        stderr(&out)
    );
}
