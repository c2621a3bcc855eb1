//! Where `status`, `clients`, `top` and `usage` read the daemon: its D-Bus API, or, when no bus
//! serves it (a daemon started with `--bus none`, a machine without a system bus), the status
//! and usage requests on its socket. Both give the same document, an [`api::Status`]: the
//! manager's properties, and the devices, flagged processes and clients as ListDevices,
//! ListFlaggedProcesses and ListClients report them; and the same usage rows as GetUsage.
//!
//! [`api::Status`]: crate::api::Status

use super::{Failure, ManagerProxy};
use crate::api::{Client, Status, UsageRow};
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
            Err(socket_error) => Err(unreachable(bus, bus_error, socket, &socket_error)),
        }
    }

    /// The usage rows (GetUsage's arguments) through D-Bus or, when no bus serves the daemon,
    /// through the socket. A refusal (no accounting, a bad grouping) is the daemon's answer
    /// either way: exit status 2, and no second try.
    pub async fn usage(
        bus: &BusChoice,
        socket: &Path,
        since_seconds: u64,
        by: &str,
    ) -> Result<Vec<UsageRow>, Failure> {
        let bus_error = if *bus == BusChoice::None {
            None
        } else {
            let asked = match proxy(bus).await {
                Ok(proxy) => proxy.get_usage(since_seconds, by).await,
                Err(e) => Err(e),
            };
            match asked {
                Ok(rows) => return Ok(rows),
                // the daemon's own refusal; others (no daemon owns the name) try the socket
                Err(zbus::Error::MethodError(name, message, reply))
                    if name.starts_with("org.gpushare1.Error.") =>
                {
                    return Err(zbus::Error::MethodError(name, message, reply).into())
                }
                Err(e) => Some(e),
            }
        };
        let request = Request::Usage {
            since_seconds,
            by: by.to_string(),
        };
        match socket_document(socket, &request, "its usage") {
            Ok(doc) => serde_json::from_slice(&doc).map_err(|e| Failure {
                message: format!("the daemon's usage is not JSON: {e}"),
                code: 1,
            }),
            Err(SocketError::Refused(message)) => Err(Failure { message, code: 2 }),
            Err(SocketError::Unreachable(e)) => Err(unreachable(bus, bus_error, socket, &e)),
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

/// Why neither way reached the daemon, naming each and why it failed.
fn unreachable(
    bus: &BusChoice,
    bus_error: Option<zbus::Error>,
    socket: &Path,
    socket_error: &str,
) -> Failure {
    let mut message = String::from("cannot reach gpushared: ");
    if let Some(e) = bus_error {
        message.push_str(&format!("on the {bus} bus: {e}; "));
    }
    message.push_str(&format!(
        "on its socket {}: {socket_error}; is the gpushare service running?",
        socket.display()
    ));
    Failure { message, code: 1 }
}

/// Why a document did not come over the socket.
enum SocketError {
    /// The daemon answered with a refusal (its sentence).
    Refused(String),
    /// No answer: the socket, the connection or the frames failed.
    Unreachable(String),
}

/// Sends `request` (one that never attaches) to the daemon's socket and reads the JSON document
/// that comes back in [`Reply::Status`] frames; `what` names it in errors.
fn socket_document(socket: &Path, request: &Request, what: &str) -> Result<Vec<u8>, SocketError> {
    let io = |e: std::io::Error| SocketError::Unreachable(e.to_string());
    let mut s = UnixStream::connect(socket).map_err(io)?;
    s.set_read_timeout(Some(SOCKET_TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(SOCKET_TIMEOUT)))
        .map_err(io)?;
    let frame = request
        .encode()
        .map_err(|e| SocketError::Unreachable(e.to_string()))?;
    s.write_all(frame.as_bytes()).map_err(io)?;
    let mut reader = StatusReader::default();
    loop {
        let mut header = [0u8; 4];
        s.read_exact(&mut header).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => SocketError::Unreachable(format!(
                "the daemon closed the connection before it sent {what} (a daemon older than \
                 this gpushare does not serve it)"
            )),
            _ => io(e),
        })?;
        let len = frame_len(header).map_err(|e| SocketError::Unreachable(e.to_string()))?;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).map_err(io)?;
        let reply = Reply::decode(&payload).map_err(|e| SocketError::Unreachable(e.to_string()))?;
        if let Reply::Error { message, .. } = reply {
            return Err(SocketError::Refused(message));
        }
        if let Some(doc) = reader.push(reply).map_err(SocketError::Unreachable)? {
            return Ok(doc);
        }
    }
}

/// Asks the daemon's socket for its status document.
pub fn socket_status(socket: &Path) -> Result<Status, String> {
    let doc = socket_document(socket, &Request::Status, "its status").map_err(|e| match e {
        SocketError::Refused(m) | SocketError::Unreachable(m) => m,
    })?;
    serde_json::from_slice(&doc).map_err(|e| format!("the daemon's status is not JSON: {e}"))
}
