//! Each record through the D-Bus encoding (an `a{sv}` with the keys and value types busctl users
//! see) and through JSON (the status document's keys and plain values), and from a daemon that
//! left keys out.

use super::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use zbus::zvariant::serialized::Context;
use zbus::zvariant::{to_bytes, OwnedValue, Type, Value, LE};

fn dbus() -> Context {
    Context::new_dbus(LE, 0)
}

/// `record` on D-Bus: its signature, and each key with the signature of its variant.
fn dbus_keys<T: Serialize + Type>(record: &T) -> (String, BTreeMap<String, String>) {
    let bytes = to_bytes(dbus(), record).expect("encodes");
    let (dict, _): (HashMap<String, OwnedValue>, _) =
        bytes.deserialize().expect("decodes as a dictionary");
    let keys = dict
        .iter()
        .map(|(k, v)| (k.clone(), v.value_signature().to_string()))
        .collect();
    (T::SIGNATURE.to_string(), keys)
}

/// Encodes `record` for D-Bus and decodes it again.
fn through_dbus<T: Serialize + DeserializeOwned + Type>(record: &T) -> T {
    let bytes = to_bytes(dbus(), record).expect("encodes");
    bytes.deserialize::<T>().expect("decodes").0
}

/// The keys of `record` in JSON, with the JSON of each value.
fn json_object<T: Serialize>(record: &T) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(record).expect("serializes") {
        serde_json::Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// `record` goes through D-Bus and JSON unchanged, with `expected` keys and value signatures
/// on D-Bus and the same keys in JSON.
fn check_round_trips<T>(record: &T, expected: &[(&str, &str)])
where
    T: Serialize + DeserializeOwned + Type + PartialEq + Debug,
{
    let expected: BTreeMap<String, String> = expected
        .iter()
        .map(|(k, s)| (k.to_string(), s.to_string()))
        .collect();
    let (signature, keys) = dbus_keys(record);
    assert_eq!(signature, "a{sv}");
    assert_eq!(keys, expected);
    assert_eq!(&through_dbus(record), record);

    let json = json_object(record);
    let json_keys: Vec<&String> = json.keys().collect();
    assert_eq!(json_keys, expected.keys().collect::<Vec<_>>());
    let back: T = serde_json::from_value(serde_json::Value::Object(json)).expect("from JSON");
    assert_eq!(&back, record);
}

/// A dictionary with `entries` as a daemon writes it.
fn dict_bytes(
    entries: Vec<(&str, Value<'_>)>,
) -> zbus::zvariant::serialized::Data<'static, 'static> {
    let dict: HashMap<&str, Value<'_>> = entries.into_iter().collect();
    to_bytes(dbus(), &dict).expect("encodes")
}

fn client_device() -> ClientDevice {
    ClientDevice {
        device: "GPU-8f4c0e2a".into(),
        memory_used: 600 << 20,
        share_used: 0.25,
        holding: true,
        waiting: 1,
        demand: 0.75,
    }
}

fn client() -> Client {
    Client {
        name: "train".into(),
        origin: "config".into(),
        request: 0.5,
        limit: 1.0,
        memory: 1 << 30,
        memory_used: 700 << 20,
        interactive: true,
        share_used: 0.75,
        gpu_time_ns: 61_000_000_000,
        charged_ns: 60_000_000_000,
        grants: 12,
        waited_ns: 3_000_000,
        holding: true,
        waiting: 2,
        devices: vec![client_device(), ClientDevice::default()],
        pids: vec![41, 42],
        users: vec!["bob".into(), "*".into()],
        groups: vec!["ml".into()],
        mps_thread_percentage: 50,
        mps_pinned_mem_limit: 2 << 30,
        mps_priority: "normal".into(),
        oversubscribe: true,
        resident: 512 << 20,
        release_cache: true,
        fair_share: 0.25,
    }
}

const CLIENT_KEYS: &[(&str, &str)] = &[
    ("name", "s"),
    ("origin", "s"),
    ("request", "d"),
    ("limit", "d"),
    ("memory", "t"),
    ("memory_used", "t"),
    ("interactive", "b"),
    ("share_used", "d"),
    ("gpu_time_ns", "t"),
    ("charged_ns", "t"),
    ("grants", "t"),
    ("waited_ns", "t"),
    ("holding", "b"),
    ("waiting", "u"),
    ("devices", "aa{sv}"),
    ("pids", "au"),
    ("users", "as"),
    ("groups", "as"),
    ("mps_thread_percentage", "u"),
    ("mps_pinned_mem_limit", "t"),
    ("mps_priority", "s"),
    ("oversubscribe", "b"),
    ("resident", "t"),
    ("release_cache", "b"),
    ("fair_share", "d"),
];

const CLIENT_DEVICE_KEYS: &[(&str, &str)] = &[
    ("device", "s"),
    ("memory_used", "t"),
    ("share_used", "d"),
    ("holding", "b"),
    ("waiting", "u"),
    ("demand", "d"),
];

fn device() -> Device {
    Device {
        index: 1,
        name: "NVIDIA H100 80GB HBM3".into(),
        uuid: "GPU-8f4c0e2a".into(),
        compute_mode: "Exclusive_Process".into(),
        original_compute_mode: "Default".into(),
        memory_total: 80 << 30,
        memory_used: 3 << 30,
        utilization_gpu: 87,
        pids: vec![41, 999],
        mps: "running".into(),
        mps_restarts: 1,
        leases: Device::TURNS.into(),
    }
}

const DEVICE_KEYS: &[(&str, &str)] = &[
    ("index", "u"),
    ("name", "s"),
    ("uuid", "s"),
    ("compute_mode", "s"),
    ("original_compute_mode", "s"),
    ("memory_total", "t"),
    ("memory_used", "t"),
    ("utilization_gpu", "u"),
    ("pids", "au"),
    ("mps", "s"),
    ("mps_restarts", "u"),
    ("leases", "s"),
];

fn flagged() -> FlaggedProcess {
    FlaggedProcess {
        device: 0,
        pid: 4242,
        uid: FlaggedProcess::UNKNOWN_UID,
        client: "train".into(),
        kind: "memory".into(),
        measured: 3 << 30,
        allowed: 2 << 30,
        details: "3GiB > 2GiB".into(),
        action: "warned".into(),
        since: 1_764_000_000,
    }
}

const FLAGGED_KEYS: &[(&str, &str)] = &[
    ("device", "u"),
    ("pid", "u"),
    ("uid", "u"),
    ("client", "s"),
    ("kind", "s"),
    ("measured", "t"),
    ("allowed", "t"),
    ("details", "s"),
    ("action", "s"),
    ("since", "t"),
];

fn usage_row() -> UsageRow {
    UsageRow {
        client: Some("train".into()),
        gpu_ns: 5_000_000_000,
        memory_byte_seconds: 1.5 * (1u64 << 30) as f64,
        wait_ns: 7,
        leases: 3,
        first_hour: 1_763_996_400,
        last_hour: 1_764_000_000,
        ..UsageRow::default()
    }
}

const USAGE_TOTALS: &[(&str, &str)] = &[
    ("gpu_ns", "t"),
    ("memory_byte_seconds", "d"),
    ("wait_ns", "t"),
    ("leases", "t"),
    ("first_hour", "x"),
    ("last_hour", "x"),
];

fn status() -> Status {
    Status {
        version: "0.1.0".into(),
        config_path: "/etc/gpushare/gpushare.toml".into(),
        config_error: String::new(),
        attached_processes: 2,
        devices: vec![device()],
        flagged: vec![flagged()],
        clients: vec![client(), Client::default()],
    }
}

const STATUS_KEYS: &[(&str, &str)] = &[
    ("version", "s"),
    ("config_path", "s"),
    ("config_error", "s"),
    ("attached_processes", "u"),
    ("devices", "aa{sv}"),
    ("flagged", "aa{sv}"),
    ("clients", "aa{sv}"),
];

#[test]
fn a_client_is_a_dictionary_on_d_bus_and_an_object_in_json() {
    check_round_trips(&client(), CLIENT_KEYS);
    check_round_trips(&client_device(), CLIENT_DEVICE_KEYS);
    // in JSON its figures on each GPU are objects, not variants
    let json = json_object(&client());
    assert_eq!(
        json["devices"][0],
        serde_json::json!({"device": "GPU-8f4c0e2a", "memory_used": 600u64 << 20,
                           "share_used": 0.25, "holding": true, "waiting": 1, "demand": 0.75})
    );
    assert_eq!(json["pids"], serde_json::json!([41, 42]));
    assert_eq!(json["request"], serde_json::json!(0.5));
}

#[test]
fn a_clients_figures_on_each_gpu_are_dictionaries_inside_the_variant() {
    let bytes = to_bytes(dbus(), &client()).expect("encodes");
    let (dict, _): (HashMap<String, OwnedValue>, _) = bytes.deserialize().expect("decodes");
    let devices: Vec<HashMap<String, OwnedValue>> = dict["devices"]
        .try_clone()
        .expect("no file descriptors")
        .try_into()
        .expect("an array of dictionaries");
    assert_eq!(devices.len(), 2);
    let share: f64 = devices[0]["share_used"].downcast_ref().expect("a double");
    assert_eq!(share, 0.25);
    let device: String = devices[0]["device"].clone().try_into().expect("a string");
    assert_eq!(device, "GPU-8f4c0e2a");
}

#[test]
fn a_device_is_a_dictionary_on_d_bus_and_an_object_in_json() {
    check_round_trips(&device(), DEVICE_KEYS);
    assert_eq!(json_object(&device())["leases"], serde_json::json!("turns"));
}

#[test]
fn a_flagged_process_is_a_dictionary_on_d_bus_and_an_object_in_json() {
    check_round_trips(&flagged(), FLAGGED_KEYS);
    assert_eq!(json_object(&flagged())["uid"], serde_json::json!(u32::MAX));
}

#[test]
fn a_usage_row_has_its_group_under_the_key_it_is_grouped_by_alone() {
    let mut keys = vec![("client", "s")];
    keys.extend_from_slice(USAGE_TOTALS);
    check_round_trips(&usage_row(), &keys);
    assert_eq!(usage_row().group("client"), Some("train"));
    assert_eq!(usage_row().group("user"), None);

    let by_day = UsageRow {
        client: None,
        day: Some("2026-11-25".into()),
        ..usage_row()
    };
    let mut keys = vec![("day", "s")];
    keys.extend_from_slice(USAGE_TOTALS);
    check_round_trips(&by_day, &keys);
    assert_eq!(by_day.group("day"), Some("2026-11-25"));
}

#[test]
fn the_status_document_is_a_dictionary_on_d_bus_and_an_object_in_json() {
    check_round_trips(&status(), STATUS_KEYS);
    let json = json_object(&status());
    let client_keys: Vec<&String> = json["clients"][0]
        .as_object()
        .expect("an object")
        .keys()
        .collect();
    let mut expected: Vec<&str> = CLIENT_KEYS.iter().map(|(k, _)| *k).collect();
    expected.sort();
    assert_eq!(client_keys, expected);
}

#[test]
fn keys_an_older_daemon_lacks_take_their_defaults_and_unknown_keys_are_ignored() {
    // a client from before per-GPU figures and memory modes, with a key from the future
    let bytes = dict_bytes(vec![
        ("name", Value::from("train")),
        ("request", Value::from(0.5)),
        ("pids", Value::from(vec![41u32])),
        ("someday", Value::from(7u16)),
    ]);
    let (c, _): (Client, _) = bytes.deserialize().expect("decodes");
    assert_eq!(
        c,
        Client {
            name: "train".into(),
            request: 0.5,
            pids: vec![41],
            fair_share: 1.0,
            ..Client::default()
        }
    );

    let bytes = dict_bytes(vec![("index", Value::from(3u32))]);
    let (d, _): (Device, _) = bytes.deserialize().expect("decodes");
    assert_eq!((d.index, d.mps_restarts, d.pids.len()), (3, 0, 0));
    assert_eq!(d.leases, "", "a daemon that does not say how leases run");

    // a client's figures on a GPU from before demand estimates
    let bytes = dict_bytes(vec![
        ("device", Value::from("GPU-8f4c0e2a")),
        ("holding", Value::from(true)),
    ]);
    let (cd, _): (ClientDevice, _) = bytes.deserialize().expect("decodes");
    assert_eq!((cd.holding, cd.demand), (true, 0.0));

    let bytes = dict_bytes(vec![("pid", Value::from(9u32))]);
    let (f, _): (FlaggedProcess, _) = bytes.deserialize().expect("decodes");
    assert_eq!((f.pid, f.kind.as_str()), (9, ""));
    assert_eq!(
        f.uid,
        FlaggedProcess::UNKNOWN_UID,
        "a uid not given is not root's"
    );

    let bytes = dict_bytes(vec![("user", Value::from("bob"))]);
    let (u, _): (UsageRow, _) = bytes.deserialize().expect("decodes");
    assert_eq!(
        (u.group("user"), u.client.as_deref(), u.gpu_ns),
        (Some("bob"), None, 0)
    );

    // the socket's document from a daemon before ListFlaggedProcesses
    let s: Status = serde_json::from_value(serde_json::json!({
        "version": "0.0.9", "attached_processes": 1,
        "clients": [{"name": "train", "pids": [41]}],
    }))
    .expect("from JSON");
    assert_eq!((s.version.as_str(), s.attached_processes), ("0.0.9", 1));
    assert!(s.flagged.is_empty() && s.devices.is_empty());
    assert_eq!(s.clients[0].pids, [41]);
    assert_eq!(s.clients[0].fair_share, 1.0, "no fair share then");
    let s: Status = serde_json::from_value(serde_json::json!({
        "devices": [{"index": 0, "uuid": "GPU-8f4c0e2a", "mps": "off"}],
        "clients": [{"name": "train", "devices": [{"device": "GPU-8f4c0e2a", "waiting": 1}]}],
    }))
    .expect("from JSON");
    assert_eq!(s.devices[0].leases, "");
    assert_eq!(s.clients[0].devices[0].demand, 0.0);
}

#[test]
fn a_value_of_another_type_is_refused() {
    // `memory` is a u64 (t); a u32 in its place is an error, not a silent zero
    let bytes = dict_bytes(vec![("memory", Value::from(5u32))]);
    assert!(bytes.deserialize::<Client>().is_err());
    assert!(serde_json::from_value::<Client>(serde_json::json!({"memory": "5"})).is_err());
}

#[test]
fn a_missing_optional_value_is_an_error_on_d_bus_not_a_panic() {
    #[derive(Serialize, Type)]
    #[zvariant(signature = "a{sv}", crate = "zbus::zvariant")]
    struct Unskipped {
        #[serde(with = "variant_on_dbus::optional")]
        user: Option<String>,
    }
    assert!(to_bytes(dbus(), &Unskipped { user: None }).is_err());
    assert_eq!(
        serde_json::to_value(Unskipped { user: None }).expect("serializes"),
        serde_json::json!({"user": null})
    );
}
