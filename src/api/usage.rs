//! A row of GetUsage: the usage of one user, client or day.

use super::variant_on_dbus;
use serde::{Deserialize, Serialize};
use zbus::zvariant::Type;

/// The group's name is under the key it is grouped by, and only that one: `user`, `client` or
/// `day` (the server's local calendar day, `YYYY-MM-DD`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
#[zvariant(signature = "a{sv}", crate = "zbus::zvariant")]
#[serde(default)]
pub struct UsageRow {
    #[serde(
        with = "variant_on_dbus::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub user: Option<String>,
    #[serde(
        with = "variant_on_dbus::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub client: Option<String>,
    #[serde(
        with = "variant_on_dbus::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub day: Option<String>,
    /// GPU time charged.
    #[serde(with = "variant_on_dbus")]
    pub gpu_ns: u64,
    /// Device memory held over time.
    #[serde(with = "variant_on_dbus")]
    pub memory_byte_seconds: f64,
    /// Time processes waited for a lease.
    #[serde(with = "variant_on_dbus")]
    pub wait_ns: u64,
    /// Leases granted.
    #[serde(with = "variant_on_dbus")]
    pub leases: u64,
    /// Start of the first and of the last hour counted (Unix seconds).
    #[serde(with = "variant_on_dbus")]
    pub first_hour: i64,
    #[serde(with = "variant_on_dbus")]
    pub last_hour: i64,
}

impl UsageRow {
    /// The group's name under `by` ("user", "client" or "day"), if the row has one there.
    pub fn group(&self, by: &str) -> Option<&str> {
        match by {
            "user" => self.user.as_deref(),
            "client" => self.client.as_deref(),
            "day" => self.day.as_deref(),
            _ => None,
        }
    }
}
