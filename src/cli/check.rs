//! `gpushare check`: attach to the daemon's socket the way the hook does and report the result.

use crate::protocol::{frame_len, Reply, Request, NO_CAP, PROTOCOL_VERSION};
use crate::units::format_bytes;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Attaches as `client` ("" = the user's default) and returns the daemon's Welcome.
pub fn attach(socket: &Path, client: &str) -> Result<Reply, String> {
    let mut s = UnixStream::connect(socket)
        .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
    let hello = Request::Hello {
        version: PROTOCOL_VERSION,
        client: client.to_string(),
        reserved: Vec::new(),
    };
    let frame = hello.encode().map_err(|e| e.to_string())?;
    s.write_all(frame.as_bytes()).map_err(|e| e.to_string())?;
    let mut header = [0u8; 4];
    s.read_exact(&mut header)
        .map_err(|e| format!("the daemon closed the connection: {e}"))?;
    let mut payload = vec![0u8; frame_len(header).map_err(|e| e.to_string())?];
    s.read_exact(&mut payload).map_err(|e| e.to_string())?;
    Reply::decode(&payload).map_err(|e| e.to_string())
}

pub fn describe(reply: &Reply) -> Result<String, String> {
    match reply {
        Reply::Welcome {
            client,
            memory_cap,
            quantum_ns,
            mps_pipe_dir,
            mps_thread_percentage,
            ..
        } => {
            let cap = if *memory_cap == NO_CAP {
                None
            } else {
                Some(*memory_cap)
            };
            let mut s = format!(
                "attached as client {client}: memory cap {}, lease {} ms",
                format_bytes(cap),
                *quantum_ns as f64 / 1e6
            );
            if !mps_pipe_dir.is_empty() {
                s.push_str(&format!(", MPS pipe {mps_pipe_dir}"));
            }
            if *mps_thread_percentage > 0 {
                s.push_str(&format!(", MPS active threads {mps_thread_percentage}%"));
            }
            Ok(s)
        }
        Reply::Error { message, .. } => Err(message.clone()),
        other => Err(format!("unexpected answer {other:?}")),
    }
}
