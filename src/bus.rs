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
