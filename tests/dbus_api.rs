//! The D-Bus API through a real private dbus-daemon, driven by busctl and the CLI.

mod common;
use common::*;
use gpushare::protocol::Reply;
use std::time::Duration;

const CONFIG: &str = r#"
[clients.train]
request = 0.5
memory = "4GiB"
users = ["*"]
"#;

#[test]
fn busctl_and_cli_register_change_and_read_back() {
    require_root();
    let bus = TestBus::start();
    let d = Daemon::start(CONFIG, Some(&bus));

    // register through busctl, with the raw D-Bus types
    let out = d.busctl(&[
        "call",
        "org.gpushare1",
        "/org/gpushare1",
        "org.gpushare1.Manager",
        "RegisterClient",
        "sddtasas",
        "infer",
        "0.3",
        "0.8",
        "2147483648",
        "1",
        "*",
        "0",
    ]);
    assert!(
        out.status.success(),
        "busctl RegisterClient: {}",
        stderr(&out)
    );
    let infer = d.client("infer");
    assert_eq!(infer["origin"], "registered");
    assert_eq!(infer["request"], 0.3);
    assert_eq!(infer["limit"], 0.8);
    assert_eq!(infer["memory"], 2u64 << 30);

    // change shares through the CLI and read them back through busctl
    let out = d.cli(&[
        "set",
        "train",
        "--request",
        "0.4",
        "--limit",
        "0.9",
        "--memory",
        "6GiB",
    ]);
    assert!(out.status.success(), "gpushare set: {}", stderr(&out));
    let out = d.busctl(&[
        "--json=short",
        "call",
        "org.gpushare1",
        "/org/gpushare1",
        "org.gpushare1.Manager",
        "GetClient",
        "s",
        "train",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dict = &v["data"][0];
    assert_eq!(dict["request"]["data"], 0.4);
    assert_eq!(dict["limit"]["data"], 0.9);
    assert_eq!(dict["memory"]["data"], 6u64 << 30);

    // only the limit: the request stays
    assert!(d.cli(&["set", "train", "--limit", "0.7"]).status.success());
    let train = d.client("train");
    assert_eq!(
        (train["request"].as_f64(), train["limit"].as_f64()),
        (Some(0.4), Some(0.7))
    );

    // the latency class: through the CLI, and back through busctl
    let out = d.cli(&["set", "train", "--interactive", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.client("train")["interactive"], true);
    let out = d.busctl(&[
        "call",
        "org.gpushare1",
        "/org/gpushare1",
        "org.gpushare1.Manager",
        "SetInteractive",
        "sb",
        "train",
        "false",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.client("train")["interactive"], false);

    // the CLI's register and unregister
    let out = d.cli(&[
        "register",
        "batch",
        "--request",
        "0.1",
        "--user",
        "nobody",
        "--group",
        "ml",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.client("batch")["users"], serde_json::json!(["nobody"]));
    assert!(d.cli(&["unregister", "batch"]).status.success());
    assert!(!d
        .clients_json()
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "batch"));

    // the table names every client
    let table = stdout(&d.cli(&["clients"]));
    assert!(table.starts_with("CLIENT"), "{table}");
    assert!(
        table.contains("infer") && table.contains("train"),
        "{table}"
    );
}

#[test]
fn bad_changes_get_their_sentence_and_exit_2() {
    require_root();
    let bus = TestBus::start();
    let d = Daemon::start(CONFIG, Some(&bus));
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &["register", "big", "--request", "0.6"],
            "InvalidArgument",
            "add up to 1.100",
        ),
        (
            &["set", "ghost", "--request", "0.1"],
            "UnknownClient",
            "no client named \"ghost\"",
        ),
        (
            &["set", "train", "--request", "0.9", "--limit", "0.5"],
            "InvalidArgument",
            "above its limit",
        ),
        (&["unregister", "train"], "InvalidArgument", "comes from"),
    ];
    for (args, error, sentence) in cases {
        let out = d.cli(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("org.gpushare1.Error.{error}")),
            "{args:?}: {err}"
        );
        assert!(err.contains(sentence), "{args:?}: {err}");
    }
    assert_eq!(d.client("train")["request"], 0.5, "nothing changed");
}

#[test]
fn unprivileged_callers_may_read_but_not_change() {
    require_root();
    let uid = test_user("gpstest-reader");
    let bus = TestBus::start();
    let d = Daemon::start(CONFIG, Some(&bus));

    let out = d.cli_as(Some(uid), &["--json", "clients"]);
    assert!(out.status.success(), "reads are open: {}", stderr(&out));

    let out = d.cli_as(Some(uid), &["set", "train", "--request", "0.1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("org.gpushare1.Error.NotAuthorized"),
        "{}",
        stderr(&out)
    );

    // busctl as the same user is refused too
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args([
            "call",
            "org.gpushare1",
            "/org/gpushare1",
            "org.gpushare1.Manager",
            "SetMemoryCap",
            "st",
            "train",
            "1",
        ])
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("may not change"), "{}", stderr(&out));
    assert_eq!(d.client("train")["request"], 0.5);
    assert_eq!(d.client("train")["memory"], 4u64 << 30);
}

#[test]
fn admin_groups_may_change_shares() {
    require_root();
    let uid = test_user("gpstest-admin");
    let bus = TestBus::start();
    let d = Daemon::start(
        &format!("[daemon]\nadmin_groups = [\"gpstest-admin\"]\n{CONFIG}"),
        Some(&bus),
    );
    let out = d.cli_as(Some(uid), &["set", "train", "--request", "0.2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.client("train")["request"], 0.2);
}

#[test]
fn broken_config_is_reported_and_the_old_one_keeps_running() {
    require_root();
    let bus = TestBus::start();
    let d = Daemon::start(CONFIG, Some(&bus));
    let get_error = || {
        let out = d.busctl(&[
            "get-property",
            "org.gpushare1",
            "/org/gpushare1",
            "org.gpushare1.Manager",
            "ConfigError",
        ]);
        stdout(&out)
    };

    // SIGHUP with a broken file
    std::fs::write(
        &d.config,
        "[clients.train]\nrequest = 0.7\n[clients.other]\nrequest = 0.6\n",
    )
    .unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for("the config error", Duration::from_secs(10), || {
        get_error().contains("add up to 1.300")
    });
    assert_eq!(
        d.client("train")["request"],
        0.5,
        "the running config stays"
    );
    let status = stdout(&d.cli(&["status"]));
    assert!(status.contains("config error"), "{status}");
    assert!(d.log().contains("config not reloaded"), "{}", d.log());

    // Reload over D-Bus says why, too
    let out = d.cli(&["reload"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("add up to 1.300"), "{}", stderr(&out));

    // fixing the file is picked up without a signal (file watch)
    std::fs::write(
        &d.config,
        "[clients.train]\nrequest = 0.25\nusers = [\"*\"]\n",
    )
    .unwrap();
    wait_for("the file watch to reload", Duration::from_secs(10), || {
        d.client("train")["request"] == 0.25
    });
    assert_eq!(get_error().trim(), "s \"\"");
}

/// The shipped introspection data (dbus/) is what the running service serves: the Manager, a
/// client object and, with the fake NVML, a device object.
#[test]
fn shipped_introspection_matches_the_live_service() {
    require_root();
    let bus = TestBus::start();
    let gpu = tempfile::tempdir().unwrap();
    let nvml = gpu.path().join("libnvidia-ml.so.1");
    std::fs::copy(fake_nvml(), &nvml).unwrap();
    std::fs::write(gpu.path().join("fake_nvml.state"), "count 1\nmode 0 0\n").unwrap();
    let config = format!(
        "[gpu]\nnvml_library = \"{}\"\nset_compute_mode = false\n{CONFIG}",
        nvml.display()
    );
    let d = Daemon::start(&config, Some(&bus));
    let introspect = |path: &str| -> Option<String> {
        let out = d.busctl(&[
            "call",
            "org.gpushare1",
            path,
            "org.freedesktop.DBus.Introspectable",
            "Introspect",
        ]);
        if !out.status.success() {
            return None; // not there yet
        }
        // busctl prints: s "<xml...>" with escapes
        let raw = stdout(&out);
        let xml = raw
            .trim()
            .strip_prefix("s \"")
            .and_then(|s| s.strip_suffix('"'))
            .expect("a string reply");
        let xml = xml
            .replace("\\\"", "\"")
            .replace("\\'", "'")
            .replace("\\n", "\n");
        Some(xml)
    };
    for (path, interface, file) in [
        (
            "/org/gpushare1",
            "org.gpushare1.Manager",
            "org.gpushare1.xml",
        ),
        (
            "/org/gpushare1/client/train",
            "org.gpushare1.Client",
            "org.gpushare1.Client.xml",
        ),
        (
            "/org/gpushare1/device/0",
            "org.gpushare1.Device",
            "org.gpushare1.Device.xml",
        ),
    ] {
        let mut xml = String::new();
        wait_for(path, Duration::from_secs(10), || {
            xml = introspect(path).unwrap_or_default();
            xml.contains(&format!("<interface name=\"{interface}\">"))
        });
        let live = interface_element(&xml, interface, true);
        let shipped_path = format!("{}/dbus/{file}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("UPDATE_DBUS_XML").is_some() {
            let doc = format!(
                "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node name=\"{path}\">\n{}\n</node>\n",
                interface_element(&xml, interface, false)
            );
            std::fs::write(&shipped_path, doc).unwrap();
        }
        let shipped = std::fs::read_to_string(&shipped_path).expect(&shipped_path);
        assert_eq!(
            interface_element(&shipped, interface, true),
            live,
            "dbus/{file} differs from the running service; rerun this test with UPDATE_DBUS_XML=1"
        );
    }
}

/// The element of `interface`, with comments, indentation and blank lines dropped when `strip`
/// is set.
fn interface_element(xml: &str, interface: &str, strip: bool) -> String {
    let mut text = xml.to_string();
    while let Some(open) = text.find("<!--").filter(|_| strip) {
        let close = open + text[open..].find("-->").expect("closed comment") + 3;
        text.replace_range(open..close, "");
    }
    let start = text
        .find(&format!("<interface name=\"{interface}\">"))
        .expect("the interface");
    let end = start + text[start..].find("</interface>").unwrap() + "</interface>".len();
    // the element starts after its indentation: take the whole first line
    let start = text[..start].rfind('\n').map_or(0, |n| n + 1);
    let element = &text[start..end];
    if !strip {
        return element.to_string();
    }
    element
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn memory_modes_are_set_over_the_bus() {
    require_root();
    let bus = TestBus::start();
    let d = Daemon::start(CONFIG, Some(&bus));
    let set = |over: &str, resident: &str, release: &str| {
        d.busctl(&[
            "call",
            "org.gpushare1",
            "/org/gpushare1",
            "org.gpushare1.Manager",
            "SetMemoryMode",
            "sbtb",
            "train",
            over,
            resident,
            release,
        ])
    };
    let out = set("true", "1073741824", "true");
    assert!(out.status.success(), "SetMemoryMode: {}", stderr(&out));
    let train = d.client("train");
    assert_eq!(train["oversubscribe"], true);
    assert_eq!(train["resident"], 1u64 << 30);
    assert_eq!(train["release_cache"], true);
    assert_eq!(train["mps_priority"], "normal");

    // a budget without oversubscription, and one above the 4 GiB cap, are refused
    for (over, resident, sentence) in [
        ("false", "1024", "needs oversubscribe"),
        ("true", "8589934592", "above the client's memory cap"),
    ] {
        let out = set(over, resident, "false");
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains(sentence), "{err}");
    }
    assert_eq!(d.client("train")["resident"], 1u64 << 30, "nothing changed");

    // nothing managed is held yet; the pool is the host's ("auto")
    let out = d.busctl(&[
        "get-property",
        "org.gpushare1",
        "/org/gpushare1",
        "org.gpushare1.Manager",
        "ManagedMemory",
    ]);
    let text = stdout(&out);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields[..2], ["(tt)", "0"], "{text}");
    assert!(fields[2].parse::<u64>().unwrap() > 0, "{text}");
}

/// Every client and device is an object of its own, in systemd's style: `busctl tree` and the
/// ObjectManager list them, their properties read back, objects come and go with clients, and
/// a change is announced with `PropertiesChanged`.
#[test]
fn clients_are_objects_with_properties() {
    require_root();
    let bus = TestBus::start();
    let d = Daemon::start(CONFIG, Some(&bus));
    let tree = || stdout(&d.busctl(&["tree", "--list", "org.gpushare1"]));
    wait_for("the client object", Duration::from_secs(10), || {
        tree().contains("/org/gpushare1/client/train")
    });
    let get = |path: &str, prop: &str| {
        let out = d.busctl(&[
            "get-property",
            "org.gpushare1",
            path,
            "org.gpushare1.Client",
            prop,
        ]);
        assert!(out.status.success(), "{prop}: {}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    assert_eq!(get("/org/gpushare1/client/train", "Request"), "d 0.5");
    assert_eq!(
        get("/org/gpushare1/client/train", "MemoryCap"),
        format!("t {}", 4u64 << 30)
    );
    assert_eq!(get("/org/gpushare1/client/train", "Origin"), "s \"config\"");
    // its figures on each GPU: UUID, memory used, share, holding, waiting
    let mut p = d.connect();
    p.hello("train");
    assert_eq!(p.reserve(GPU1, 4096), Some(Reply::Reserved { used: 4096 }));
    let per_gpu = format!("a(stdbu) 1 \"{GPU1}\" 4096 0 false 0");
    wait_for("the client's GPUs", Duration::from_secs(10), || {
        get("/org/gpushare1/client/train", "Devices") == per_gpu
    });
    drop(p);
    let managed = stdout(&d.busctl(&[
        "call",
        "org.gpushare1",
        "/org/gpushare1",
        "org.freedesktop.DBus.ObjectManager",
        "GetManagedObjects",
    ]));
    assert!(
        managed.contains("/org/gpushare1/client/train") && managed.contains("org.gpushare1.Client"),
        "{managed}"
    );

    // A change is announced; watch for it on the bus.
    let address = bus.address.clone();
    let watcher = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let conn = zbus::connection::Builder::address(address.as_str())
                .unwrap()
                .build()
                .await
                .unwrap();
            let rule = zbus::MatchRule::builder()
                .msg_type(zbus::message::Type::Signal)
                .interface("org.freedesktop.DBus.Properties")
                .unwrap()
                .member("PropertiesChanged")
                .unwrap()
                .path("/org/gpushare1/client/train")
                .unwrap()
                .build();
            let mut stream = zbus::MessageStream::for_match_rule(rule, &conn, None)
                .await
                .unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, next(&mut stream)).await
            {
                let (iface, changed, _): (
                    String,
                    std::collections::HashMap<String, zbus::zvariant::OwnedValue>,
                    Vec<String>,
                ) = msg.body().deserialize().unwrap();
                if let Some(v) = changed.get("Request") {
                    return Some((iface, f64::try_from(v).unwrap()));
                }
            }
            None
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    let out = d.cli(&["set", "train", "--request", "0.3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        watcher.join().unwrap(),
        Some(("org.gpushare1.Client".to_string(), 0.3))
    );
    assert_eq!(get("/org/gpushare1/client/train", "Request"), "d 0.3");

    // Registered clients come and go as objects.
    let out = d.cli(&["register", "in.fer", "--request", "0.2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for(
        "the registered client's object",
        Duration::from_secs(10),
        || tree().contains("/org/gpushare1/client/in_2efer"),
    );
    assert_eq!(
        get("/org/gpushare1/client/in_2efer", "Name"),
        "s \"in.fer\""
    );
    let out = d.cli(&["unregister", "in.fer"]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for("the object to go", Duration::from_secs(10), || {
        !tree().contains("/org/gpushare1/client/in_2efer")
    });
}

/// How leases run on each GPU and what the scheduler estimates of each client there, over a
/// real bus: the device object's Leases and the client object's Demand, `leases` and `demand`
/// in ListDevices and ListClients (and so in `gpushare --json status`), and the tables of
/// `gpushare status`. Without MPS leases overlap by demand ("together"), a process holding a
/// lease counts at the first estimate of its demand, and a reload to one lease at a time
/// changes both; under MPS leases run side by side with no estimates.
#[test]
fn lease_modes_and_demands_are_read_over_the_bus() {
    require_root();
    let bus = TestBus::start();
    // leases long enough to hold one while the test reads
    let d = Daemon::builder()
        .table("daemon", "quantum = \"60s\"")
        .fake_gpu(FakeGpu::new("count 1\n").without_mps())
        .bus(&bus)
        .config(CONFIG)
        .start();
    let uuid = "GPU-fa4e0000-0000-0000-0000-000000000000";
    let gpu = gpushare::protocol::DeviceId::parse(uuid).unwrap();
    let get = |path: &str, interface: &str, prop: &str| {
        let out = d.busctl(&["get-property", "org.gpushare1", path, interface, prop]);
        stdout(&out).trim().to_string()
    };
    let leases = || get("/org/gpushare1/device/0", "org.gpushare1.Device", "Leases");
    let demand = || {
        get(
            "/org/gpushare1/client/train",
            "org.gpushare1.Client",
            "Demand",
        )
    };
    wait_for("the device's lease mode", Duration::from_secs(10), || {
        leases() == "s \"together\""
    });
    let doc = || -> serde_json::Value {
        let out = d.cli(&["--json", "status"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(doc()["devices"][0]["leases"], "together");

    let mut p = d.connect();
    p.hello("train");
    p.acquire_granted(gpu);
    let estimated = format!("a(sd) 1 \"{uuid}\" 0.5");
    wait_for("the client's demand", Duration::from_secs(10), || {
        demand() == estimated
    });
    let train = d.client("train");
    assert_eq!(train["devices"][0]["device"], uuid, "{train}");
    assert_eq!(train["devices"][0]["demand"], 0.5, "{train}");
    let text = stdout(&d.cli(&["status"]));
    let header = text.lines().find(|l| l.starts_with("GPU")).unwrap_or("");
    assert!(header.contains("LEASES"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with('0') && l.contains("together")),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("train") && l.split_whitespace().nth(1) == Some("0"))
        .unwrap_or_else(|| panic!("no row of train on GPU 0: {text}"));
    assert!(row.contains("50%"), "{text}");

    // one lease at a time: no overlap by demand, and no estimate
    let config = std::fs::read_to_string(&d.config).unwrap();
    let config = config.replace("[daemon]\n", "[daemon]\nconcurrent_leases = 1\n");
    std::fs::write(&d.config, config).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for("one lease at a time", Duration::from_secs(10), || {
        leases() == "s \"one-at-a-time\""
    });
    wait_for("no estimate", Duration::from_secs(10), || {
        demand() == format!("a(sd) 1 \"{uuid}\" 0")
    });
    assert_eq!(doc()["devices"][0]["leases"], "one-at-a-time");
    assert_eq!(d.client("train")["devices"][0]["demand"], 0.0);
    drop(p);
    drop(d);

    let mut d = Daemon::builder()
        .fake_gpu(FakeGpu::new("count 1\n"))
        .bus(&bus)
        .config(CONFIG)
        .start();
    let leases = || {
        let out = d.busctl(&[
            "get-property",
            "org.gpushare1",
            "/org/gpushare1/device/0",
            "org.gpushare1.Device",
            "Leases",
        ]);
        stdout(&out).trim().to_string()
    };
    wait_for("leases under MPS", Duration::from_secs(10), || {
        leases() == "s \"mps\""
    });
    // stopped as systemd stops it: the daemon tells its MPS control daemon to quit
    assert!(d.stop().success());
}

/// The next item of a stream.
async fn next<S: futures_core::Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
}

/// Clients registered over D-Bus, and changes to them, outlive a restart of the daemon: they
/// are kept in the state directory and registered again at start.
#[test]
fn registered_clients_outlive_a_restart() {
    require_root();
    let bus = TestBus::start();
    let state = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with_state(CONFIG, Some(&bus), state.path());
    let out = d.cli(&[
        "register",
        "in.fer",
        "--request",
        "0.2",
        "--memory",
        "2GiB",
        "--user",
        "*",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = d.cli(&["set", "in.fer", "--request", "0.3", "--limit", "0.9"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = d.cli(&["register", "gone", "--request", "0.1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = d.cli(&["unregister", "gone"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let kept = state.path().join("clients.toml");
    wait_for(
        "the registrations to be written",
        Duration::from_secs(10),
        || std::fs::read_to_string(&kept).is_ok_and(|t| t.contains("in.fer") && t.contains("0.3")),
    );
    assert!(d.stop().success());

    let d = Daemon::start_with_state(CONFIG, Some(&bus), state.path());
    let infer = d.client("in.fer");
    assert_eq!(infer["origin"], "registered");
    assert_eq!(infer["request"], 0.3);
    assert_eq!(infer["limit"], 0.9);
    assert_eq!(infer["memory"], 2u64 << 30);
    assert_eq!(infer["users"], serde_json::json!(["*"]));
    assert!(
        !stdout(&d.cli(&["clients"])).contains("gone"),
        "an unregistered client came back"
    );
    assert_eq!(d.client("train")["origin"], "config");
}

/// Runtime clients (`gpushare register --runtime`, as Slurm's prolog registers jobs) outlive a
/// restart of the daemon, kept beside its socket in the runtime directory, but not a reboot,
/// which empties that directory; the others stay.
#[test]
fn runtime_clients_outlive_a_restart_but_not_a_reboot() {
    require_root();
    let bus = TestBus::start();
    let state = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with_state(CONFIG, Some(&bus), state.path());
    let out = d.cli(&[
        "register",
        "slurm-41",
        "--runtime",
        "--request",
        "0.25",
        "--memory",
        "1GiB",
        "--user",
        "nobody",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = d.cli(&["register", "lab", "--request", "0.1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runtime_file = d.socket.parent().unwrap().join("clients.toml");
    wait_for(
        "the registrations to be written",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&runtime_file).is_ok_and(|t| t.contains("slurm-41"))
                && std::fs::read_to_string(state.path().join("clients.toml"))
                    .is_ok_and(|t| t.contains("lab"))
        },
    );
    let kept = std::fs::read_to_string(state.path().join("clients.toml")).unwrap();
    assert!(!kept.contains("slurm-41"), "{kept}");

    d.restart();
    let job = d.client("slurm-41");
    assert_eq!(job["origin"], "registered");
    assert_eq!(job["request"], 0.25);
    assert_eq!(job["memory"], 1u64 << 30);
    assert_eq!(job["users"], serde_json::json!(["nobody"]));

    // a reboot empties the runtime directory
    assert!(d.stop().success());
    std::fs::remove_dir_all(d.socket.parent().unwrap()).unwrap();
    d.restart();
    let clients = stdout(&d.cli(&["clients"]));
    assert!(!clients.contains("slurm-41"), "{clients}");
    assert_eq!(d.client("lab")["origin"], "registered");

    // bad input: a share outside 0..1 is refused, and nothing is registered
    let out = d.cli(&["register", "slurm-42", "--runtime", "--request", "1.5"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!stdout(&d.cli(&["clients"])).contains("slurm-42"));
}
