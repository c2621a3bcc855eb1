//! The Prometheus endpoint of a real gpushared: the exposition text as scraped, config reloads
//! that move it or get its address wrong, and a real Prometheus scraping and querying it, with
//! every query of the shipped Grafana dashboard.

mod common;
use common::*;
use gpushare::protocol::{Reply, Request};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` over HTTP/1.0: the status and the body, or `None` when nothing listens.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

fn scrape(port: u16) -> String {
    let (status, body) = get(port, "/metrics").expect("the metrics endpoint answers");
    assert_eq!(status, 200, "{body}");
    body
}

/// Samples of the exposition text: `name{labels}` to value. Checks that every sample's family
/// has HELP and TYPE lines and that the text ends as OpenMetrics requires.
fn samples(text: &str) -> BTreeMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "{text}");
    let mut typed = Vec::new();
    let mut helped = Vec::new();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.push(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.push(rest.split(' ').next().unwrap().to_string());
        } else if !line.starts_with('#') {
            let (series, value) = line.rsplit_once(' ').expect("name and value");
            let name = series.split('{').next().unwrap();
            assert!(
                typed.iter().any(|t| name.starts_with(t.as_str())),
                "{name} has no TYPE line"
            );
            assert!(helped.iter().any(|t| name.starts_with(t.as_str())));
            out.insert(series.to_string(), value.parse().expect("a number"));
        }
    }
    out
}

fn config(port: u16) -> String {
    format!(
        "[daemon]\nquantum = \"10s\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n\
         [clients.train]\nrequest = 0.5\nmemory = \"4GiB\"\nusers = [\"*\"]\n"
    )
}

#[test]
fn a_scrape_reports_usage_per_client_and_user() {
    let port = free_port();
    let d = Daemon::start(&config(port), None);
    wait_for("the metrics endpoint", Duration::from_secs(20), || {
        get(port, "/metrics").is_some()
    });
    let mut p = d.connect();
    assert!(matches!(p.hello("train"), Reply::Welcome { .. }));
    assert_eq!(
        p.reserve(GPU0, 1 << 20),
        Some(Reply::Reserved { used: 1 << 20 })
    );
    p.send(&Request::Acquire { device: GPU0 });
    assert!(matches!(p.recv(), Some(Reply::Grant { .. })));
    std::thread::sleep(Duration::from_millis(300));
    p.send(&Request::Release {
        device: GPU0,
        busy_ns: u64::MAX,
        launches: 0,
        active_ns: 0,
    });

    let train = "{client=\"train\",user=\"root\"}";
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    let train = train.replace("root", &user);
    let mut m = BTreeMap::new();
    wait_for("the lease to be charged", Duration::from_secs(20), || {
        m = samples(&scrape(port));
        m.get(&format!("gpushare_client_gpu_seconds_total{train}"))
            .is_some_and(|v| *v >= 0.3)
    });
    assert_eq!(m[&format!("gpushare_client_leases_total{train}")], 1.0);
    assert!(m.contains_key(&format!("gpushare_client_wait_seconds_total{train}")));
    assert!(m.contains_key(&format!("gpushare_client_memory_byte_seconds_total{train}")));
    assert_eq!(m[&format!("gpushare_client_processes{train}")], 1.0);
    assert_eq!(
        m[&format!("gpushare_client_memory_used_bytes{train}")],
        (1u64 << 20) as f64
    );
    assert_eq!(
        m["gpushare_client_memory_cap_bytes{client=\"train\"}"],
        (4u64 << 30) as f64
    );
    assert_eq!(m["gpushare_client_request_ratio{client=\"train\"}"], 0.5);
    assert_eq!(m["gpushare_client_fair_share_ratio{client=\"train\"}"], 1.0);
    assert_eq!(m["gpushare_attached_processes"], 1.0);
    assert_eq!(m["gpushare_config_reload_failures_total"], 0.0);
    assert_eq!(m["gpushare_config_last_reload_successful"], 1.0);
    assert_eq!(m["gpushare_mps_restarts_total"], 0.0);
    // per GPU, with dcgm-exporter's labels; without NVML the GPU has no index
    let gpu = format!(
        "gpu=\"\",UUID=\"{GPU0}\",Hostname=\"{}\"",
        nix::unistd::gethostname().unwrap().to_string_lossy()
    );
    let on_gpu = format!("{{{gpu},client=\"train\"}}");
    assert!(
        m[&format!("gpushare_gpu_client_gpu_seconds_total{on_gpu}")] >= 0.3,
        "{m:?}"
    );
    assert!(m.contains_key(&format!("gpushare_gpu_client_wait_seconds_total{on_gpu}")));
    assert_eq!(
        m[&format!("gpushare_gpu_client_memory_reserved_bytes{on_gpu}")],
        (1u64 << 20) as f64
    );
    assert!(
        !m.keys()
            .any(|k| k.starts_with("gpushare_gpu_client_memory_used_bytes")),
        "NVML's figure only where NVML lists the GPU"
    );
    assert_eq!(
        m[&format!("gpushare_gpu_client_waiting_processes{on_gpu}")],
        0.0
    );
    assert_eq!(m[&format!("gpushare_gpu_holders{{{gpu}}}")], 0.0);
    assert_eq!(m[&format!("gpushare_gpu_waiting_processes{{{gpu}}}")], 0.0);
    assert_eq!(
        m[&format!("gpushare_gpu_lease_mode{{{gpu},mode=\"together\"}}")],
        1.0
    );
    assert_eq!(
        m[&format!("gpushare_gpu_lease_mode{{{gpu},mode=\"turns\"}}")],
        0.0
    );
    assert_eq!(
        m[&format!("gpushare_gpu_flagged_processes{{{gpu},kind=\"unattached\"}}")],
        0.0
    );
    let text = scrape(port);
    assert!(
        text.contains("# TYPE gpushare_client_gpu_seconds counter\n")
            && text.contains("# UNIT gpushare_client_gpu_seconds seconds\n")
            && text.contains("# HELP gpushare_client_gpu_seconds "),
        "{text}"
    );

    // the process goes: its usage stays counted, the gauges drop
    drop(p);
    wait_for("the process to be gone", Duration::from_secs(10), || {
        samples(&scrape(port))["gpushare_attached_processes"] == 0.0
    });
    let m = samples(&scrape(port));
    assert!(m[&format!("gpushare_client_gpu_seconds_total{train}")] >= 0.3);
    assert_eq!(m[&format!("gpushare_client_processes{train}")], 0.0);

    // only /metrics is served
    assert_eq!(get(port, "/").unwrap().0, 404);
    assert_eq!(get(port, "/metrics/x").unwrap().0, 404);
}

#[test]
fn a_reload_moves_the_endpoint_and_a_bad_address_keeps_it() {
    let port = free_port();
    let d = Daemon::start(&config(port), None);
    wait_for("the metrics endpoint", Duration::from_secs(20), || {
        get(port, "/metrics").is_some()
    });
    // a bad address: refused, said why, and the endpoint stays where it is
    std::fs::write(&d.config, config(port).replace("127.0.0.1:", "127.0.0.1:x")).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for("the reload to be refused", Duration::from_secs(10), || {
        samples(&scrape(port))["gpushare_config_reload_failures_total"] >= 1.0
    });
    assert!(d.log().contains("metrics.listen"), "{}", d.log());
    assert_eq!(
        samples(&scrape(port))["gpushare_config_last_reload_successful"],
        0.0
    );
    // a good one moves it
    let other = free_port();
    std::fs::write(&d.config, config(other)).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for("the endpoint to move", Duration::from_secs(10), || {
        get(other, "/metrics").is_some() && get(port, "/metrics").is_none()
    });
    assert_eq!(
        samples(&scrape(other))["gpushare_config_last_reload_successful"],
        1.0
    );
    // and without [metrics] it is off
    std::fs::write(&d.config, "[clients.train]\nusers = [\"*\"]\n").unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for("the endpoint to go", Duration::from_secs(10), || {
        get(other, "/metrics").is_none()
    });
}

/// A running Prometheus, stopped when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(binary: &Path, target: u16) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: gpushare\n    scrape_interval: 1s\n    \
                 scrape_timeout: 1s\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            child,
            port,
            _dir: dir,
        };
        wait_for("Prometheus to be ready", Duration::from_secs(60), || {
            get(port, "/-/ready").is_some_and(|(s, _)| s == 200)
        });
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The result vector of an instant query: each series' labels and value.
    fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let encoded: String = promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) =
            get(self.port, &format!("/api/v1/query?query={encoded}")).expect("Prometheus answers");
        assert_eq!(status, 200, "{promql}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ends the busy loop of [`hold_turns`] however the test ends, so that a failure does not hang it.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Takes 100 ms leases of `device` one after another until `stop`.
fn hold_turns(
    p: &mut Conn,
    device: gpushare::protocol::DeviceId,
    stop: &std::sync::atomic::AtomicBool,
) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        p.send(&Request::Acquire { device });
        assert!(matches!(p.recv(), Some(Reply::Grant { .. })));
        std::thread::sleep(Duration::from_millis(100));
        p.send(&Request::Release {
            device,
            busy_ns: u64::MAX,
            launches: 0,
            active_ns: 0,
        });
    }
}

fn find_prometheus() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/bin", "/usr/sbin"])
        .map(|d| Path::new(d).join("prometheus"))
        .find(|p| p.is_file())
}

#[test]
fn prometheus_scrapes_the_daemon_and_sums_usage_by_user() {
    let Some(binary) = find_prometheus() else {
        assert!(
            !nix::unistd::Uid::effective().is_root(),
            "prometheus is not installed: apt-get install prometheus (tests/run.sh does)"
        );
        eprintln!("SKIPPED: prometheus is not installed and not running as root to install it");
        return;
    };
    require_root();
    let dave = test_user("gpstest-dave");
    let port = free_port();
    let d = Daemon::start(&config(port), None);
    let prom = Prometheus::start(&binary, port);
    wait_for(
        "Prometheus's first scrape",
        Duration::from_secs(120),
        || {
            prom.query("up{job=\"gpushare\"}")
                .first()
                .is_some_and(|(_, v)| *v == 1.0)
        },
    );

    // two users busy until Prometheus has seen enough: root's process as train, dave's as his
    // default client
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let mut p = d.connect();
            p.hello("train");
            hold_turns(&mut p, GPU0, &stop);
        });
        let mut dave = hold_leases_as(dave, &d.socket, "", 1_000_000, Duration::from_millis(100));
        let mut by_user = Vec::new();
        let of = |rows: &[(serde_json::Value, f64)], u: &str| {
            rows.iter()
                .find(|(m, _)| m["user"] == u)
                .map_or(0.0, |x| x.1)
        };
        wait_for(
            "Prometheus to see both users' GPU time",
            Duration::from_secs(120),
            || {
                by_user = prom.query("sum by (user) (gpushare_client_gpu_seconds_total)");
                of(&by_user, "root") >= 0.5 && of(&by_user, "gpstest-dave") >= 0.5
            },
        );
        assert_eq!(by_user.len(), 2, "{by_user:?}");
        // the rate over a few scrapes: each user's processes use GPU time
        let mut rate = Vec::new();
        wait_for(
            "a rate of GPU time per user",
            Duration::from_secs(120),
            || {
                rate = prom.query("sum by (user) (rate(gpushare_client_gpu_seconds_total[10s]))");
                of(&rate, "root") > 0.0 && of(&rate, "gpstest-dave") > 0.0
            },
        );
        let leases = prom.query("sum(gpushare_client_leases_total)");
        assert!(leases[0].1 >= 2.0, "{leases:?}");
        let processes = prom.query("sum(gpushare_client_processes)");
        assert_eq!(processes[0].1, 2.0, "{processes:?}");
        let _ = dave.kill();
        let _ = dave.wait();
    });
    let up = prom.query("up{job=\"gpushare\"}");
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].1, 1.0, "{}", prom.log());
}

/// The shipped Grafana dashboard (dist/grafana/gpushare.json).
const DASHBOARD: &str = include_str!("../dist/grafana/gpushare.json");

/// Every PromQL expression of a dashboard: the `expr` of each panel's targets, rows' panels
/// included.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(serde_json::Value::String(e)) = o.get("expr") {
                    out.push(e.clone());
                }
                o.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    out
}

/// An expression as Grafana sends it: its variables replaced by what they stand for (every
/// daemon; the rate interval of a 1 s scrape).
fn as_grafana_sends(expr: &str) -> String {
    let e = expr
        .replace("$__rate_interval", "5s")
        .replace("$instance", ".+");
    assert!(
        !e.contains('$'),
        "a variable the test does not know: {expr}"
    );
    e
}

/// Every query of the shipped dashboard parses and returns data from a real Prometheus scraping
/// a daemon whose GPU (the fake NVML) has an attached process of client `train` (capped,
/// holding memory and leases), a second process of another user on another GPU, and a process
/// that bypasses the hook.
#[test]
fn every_query_of_the_dashboard_runs_on_prometheus() {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("JSON");
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 10, "{queries:?}");
    let Some(binary) = find_prometheus() else {
        assert!(
            !nix::unistd::Uid::effective().is_root(),
            "prometheus is not installed: apt-get install prometheus (tests/run.sh does)"
        );
        eprintln!("SKIPPED: prometheus is not installed and not running as root to install it");
        return;
    };
    require_root();
    let dave = test_user("gpstest-dave");
    let port = free_port();
    // a process on the fake GPU that never attaches
    let mut bypass = Command::new("sleep").arg("600").spawn().unwrap();
    let me = std::process::id();
    let d = Daemon::builder()
        .fake_gpu(
            FakeGpu::new(&format!(
                "count 1\nmode 0 0\nproc 0 {me} 1048576\nproc 0 {} 4194304\n",
                bypass.id()
            ))
            .without_mps(),
        )
        .table("gpu", "scan_interval = \"1s\"")
        .config(&config(port))
        .start();
    let gpu = gpushare::protocol::DeviceId::parse("GPU-fa4e0000-0000-0000-0000-000000000000")
        .expect("the fake NVML's first UUID");
    let prom = Prometheus::start(&binary, port);

    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut empty = Vec::new();
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let mut p = d.connect();
            p.hello("train");
            assert_eq!(
                p.reserve(gpu, 1 << 20),
                Some(Reply::Reserved { used: 1 << 20 })
            );
            hold_turns(&mut p, gpu, &stop);
        });
        let mut dave = hold_leases_as(dave, &d.socket, "", 1_000_000, Duration::from_millis(100));
        // each query parses (Prometheus::query checks that); wait until each returns data
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            empty = queries
                .iter()
                .filter(|q| prom.query(&as_grafana_sends(q)).is_empty())
                .cloned()
                .collect();
            if empty.is_empty() || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let _ = dave.kill();
        let _ = dave.wait();
    });
    let _ = bypass.kill();
    let _ = bypass.wait();
    assert!(
        empty.is_empty(),
        "queries of the dashboard without data after 120 s: {empty:#?}"
    );

    // the figures behind the panels, as the scenario made them
    let of = |q: &str| prom.query(q);
    let reserved = of("gpushare_gpu_client_memory_reserved_bytes{client=\"train\",gpu=\"0\"}");
    assert_eq!(reserved.len(), 1, "{reserved:?}");
    assert_eq!(reserved[0].1, (1u64 << 20) as f64);
    assert_eq!(
        reserved[0].0["UUID"], "GPU-fa4e0000-0000-0000-0000-000000000000",
        "{reserved:?}"
    );
    let used = of("gpushare_gpu_client_memory_used_bytes{client=\"train\",gpu=\"0\"}");
    assert_eq!(
        used[0].1,
        (1u64 << 20) as f64,
        "NVML's count of the process"
    );
    let flagged = of("gpushare_gpu_flagged_processes{gpu=\"0\",kind=\"unattached\"}");
    assert_eq!(flagged[0].1, 1.0, "{flagged:?}");
    let mode = of("gpushare_gpu_lease_mode{gpu=\"0\"} == 1");
    assert_eq!(mode.len(), 1, "one mode at a time: {mode:?}");
    let host = nix::unistd::gethostname().unwrap();
    assert_eq!(mode[0].0["Hostname"], host.to_string_lossy().as_ref());

    // the dashboard's variable: label_values(METRIC, LABEL) finds the daemon
    let templating = dashboard["templating"]["list"].as_array().unwrap();
    for v in templating.iter().filter(|v| v["type"] == "query") {
        let q = v["definition"].as_str().unwrap();
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{q}"));
        let (metric, label) = inner.split_once(", ").unwrap();
        let rows = of(metric);
        assert!(
            rows.iter().any(|(m, _)| m.get(label).is_some()),
            "{q}: {rows:?}"
        );
    }
}
