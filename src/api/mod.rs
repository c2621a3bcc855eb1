//! The records of the D-Bus API and of the socket's status document, one struct per dictionary:
//! a [`Client`] with its [`ClientDevice`]s (ListClients, GetClient), a [`Device`]
//! (ListDevices), a [`FlaggedProcess`] (ListFlaggedProcesses), a [`UsageRow`] (GetUsage) and
//! the whole [`Status`].
//!
//! On D-Bus each is an `a{sv}` whose values are variants; in JSON each is an object with the
//! same keys and plain values ([`variant_on_dbus`]). Every key is written but the group keys of a
//! usage row, of which it has the one it is grouped by; a key that is missing when one is read
//! (a daemon older than the key) takes its default, and keys this version does not know are
//! ignored.

mod client;
mod device;
mod flagged;
mod status;
mod usage;
pub mod variant_on_dbus;

pub use client::{Client, ClientDevice};
pub use device::Device;
pub use flagged::FlaggedProcess;
pub use status::Status;
pub use usage::UsageRow;

#[cfg(test)]
mod tests;
