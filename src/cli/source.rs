//! Where `status`, `clients` and `top` read the daemon: its D-Bus API, or, when no bus serves
//! it (a daemon started with `--bus none`, a machine without a system bus), the status request
//! on its socket. Both give the same document, an [`api::Status`]: the manager's properties, and
//! the devices, flagged processes and clients as ListDevices, ListFlaggedProcesses and
//! ListClients report them.
//!
//! [`api::Status`]: crate::api::Status

use super::{Failure, ManagerProxy};
use crate::api::{Client, Status};
use crate::bus::BusChoice;
use crate::protocol::{frame_len, Reply, Request, StatusReader};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a read over the socket may take before the daemon counts as unreachable.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);

/// A way to the daemon that answered once.
pub enum Source {
    Bus(ManagerProxy<'static>),
    Socket(PathBuf),
}

impl Source {
    /// Reads the status document through D-Bus (`bus`) or, when that fails, through the socket;
    /// returns the way that answered with the document. Failing both, the error names each way
    /// and why it failed.
    pub async fn open(bus: &BusChoice, socket: &Path) -> Result<(Source, Status), Failure> {
        let bus_error = if *bus == BusChoice::None {
            None
        } else {
            match bus_status(bus).await {
                Ok((proxy, doc)) => return Ok((Source::Bus(proxy), doc)),
                Err(e) => Some(e),
            }
        };
        match socket_status(socket) {
            Ok(doc) => Ok((Source::Socket(socket.to_path_buf()), doc)),
            Err(socket_error) => {
                let mut message = String::from("cannot reach gpushared: ");
                if let Some(e) = bus_error {
                    message.push_str(&format!("on the {bus} bus: {e}; "));
                }
                message.push_str(&format!(
                    "on its socket {}: {socket_error}; is the gpushare service running?",
                    socket.display()
                ));
                Err(Failure { message, code: 1 })
            }
        }
    }

    /// Reads the status document again the same way.
    pub async fn status(&self) -> Result<Status, String> {
        match self {
            Source::Bus(proxy) => proxy_status(proxy).await.map_err(|e| e.to_string()),
            Source::Socket(path) => socket_status(path),
        }
    }

    /// The clients alone (over D-Bus, without asking for the devices).
    pub async fn clients(bus: &BusChoice, socket: &Path) -> Result<Vec<Client>, Failure> {
        if *bus != BusChoice::None {
            if let Ok(proxy) = proxy(bus).await {
                if let Ok(clients) = proxy.list_clients().await {
                    return Ok(clients);
                }
            }
        }
        let (_, doc) = Self::open(bus, socket).await?;
        Ok(doc.clients)
    }
}

async fn proxy(bus: &BusChoice) -> zbus::Result<ManagerProxy<'static>> {
    let conn = bus.builder()?.build().await?;
    ManagerProxy::new(&conn).await
}

async fn bus_status(bus: &BusChoice) -> zbus::Result<(ManagerProxy<'static>, Status)> {
    let proxy = proxy(bus).await?;
    let doc = proxy_status(&proxy).await?;
    Ok((proxy, doc))
}

async fn proxy_status(m: &ManagerProxy<'static>) -> zbus::Result<Status> {
    Ok(Status {
        version: m.version().await?,
        config_path: m.config_path().await?,
        config_error: m.config_error().await?,
        attached_processes: m.attached_processes().await?,
        devices: m.list_devices().await?,
        // A daemon from before ListFlaggedProcesses has none to show.
        flagged: m.list_flagged_processes().await.unwrap_or_default(),
        clients: m.list_clients().await?,
    })
}

/// Asks the daemon's socket for its status document.
pub fn socket_status(socket: &Path) -> Result<Status, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(SOCKET_TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(SOCKET_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let frame = Request::Status.encode().map_err(|e| e.to_string())?;
    s.write_all(frame.as_bytes()).map_err(|e| e.to_string())?;
    let mut reader = StatusReader::default();
    loop {
        let mut header = [0u8; 4];
        s.read_exact(&mut header).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                "the daemon closed the connection before it sent its status (a daemon older than \
                 this gpushare does not serve it)"
                    .to_string()
            }
            _ => e.to_string(),
        })?;
        let mut payload = vec![0u8; frame_len(header).map_err(|e| e.to_string())?];
        s.read_exact(&mut payload).map_err(|e| e.to_string())?;
        let reply = Reply::decode(&payload).map_err(|e| e.to_string())?;
        if let Some(doc) = reader.push(reply)? {
            return serde_json::from_slice(&doc)
                .map_err(|e| format!("the daemon's status is not JSON: {e}"));
        }
    }
}
