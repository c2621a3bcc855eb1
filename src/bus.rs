//! Which D-Bus bus the daemon serves on and the CLI talks to.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusChoice {
    /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS` overrides its address).
    System,
    /// The user's session bus.
    Session,
    /// A bus at an explicit address such as `unix:path=/tmp/bus`.
    Address(String),
    /// No D-Bus: the daemon serves its socket alone.
    None,
}

impl FromStr for BusChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "system" => Ok(BusChoice::System),
            "session" | "user" => Ok(BusChoice::Session),
            "none" => Ok(BusChoice::None),
            a if a.contains(':') => Ok(BusChoice::Address(a.to_string())),
            other => Err(format!("{other:?} is not a bus: use system, session, none or an address like unix:path=/run/bus")),
        }
    }
}

impl fmt::Display for BusChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusChoice::System => f.write_str("system"),
            BusChoice::Session => f.write_str("session"),
            BusChoice::Address(a) => f.write_str(a),
            BusChoice::None => f.write_str("none"),
        }
    }
}

impl BusChoice {
    pub fn builder(&self) -> zbus::Result<zbus::connection::Builder<'static>> {
        match self {
            BusChoice::System => zbus::connection::Builder::system(),
            BusChoice::Session => zbus::connection::Builder::session(),
            BusChoice::Address(a) => zbus::connection::Builder::address(a.as_str()),
            BusChoice::None => Err(zbus::Error::Address(
                "no bus was chosen (--bus none)".into(),
            )),
        }
    }
}

/// The D-Bus dictionaries (ListClients, ListDevices) as JSON objects, keys sorted: one shape for
/// the CLI's `--json` and the socket's status document.
pub fn dict_json(
    d: &std::collections::HashMap<String, zbus::zvariant::OwnedValue>,
) -> serde_json::Value {
    let mut keys: Vec<&String> = d.keys().collect();
    keys.sort();
    serde_json::Value::Object(
        keys.into_iter()
            .map(|k| (k.clone(), value_json(&d[k])))
            .collect(),
    )
}

/// One D-Bus value as JSON: numbers, booleans, strings and arrays of them as themselves,
/// dictionaries as objects, structures as arrays, anything else as its text.
pub fn value_json(v: &zbus::zvariant::Value<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    use zbus::zvariant::Value;
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
        Value::Array(a) => J::Array(a.iter().map(value_json).collect()),
        Value::Dict(d) => J::Object(
            d.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::Str(s) => s.to_string(),
                        other => other.to_string(),
                    };
                    (key, value_json(v))
                })
                .collect(),
        ),
        Value::Structure(s) => J::Array(s.fields().iter().map(value_json).collect()),
        Value::Value(inner) => value_json(inner),
        other => J::from(other.to_string()),
    }
}
