//! Clients of the daemon's socket without the hook: a raw protocol connection of the test's own,
//! one made by another process on the test's behalf, and processes of other users that hold
//! leases.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpushare::protocol::{frame_len, DeviceId, Reply, Request, PROTOCOL_VERSION};

use super::{stderr, stdout, GPU0};

/// A raw protocol connection, as the hook would make.
pub struct Conn(pub UnixStream);

impl Conn {
    pub fn send(&mut self, r: &Request) {
        self.0.write_all(r.encode().unwrap().as_bytes()).unwrap();
    }

    pub fn recv(&mut self) -> Option<Reply> {
        let mut header = [0u8; 4];
        self.0.read_exact(&mut header).ok()?;
        let mut payload = vec![0u8; frame_len(header).ok()?];
        self.0.read_exact(&mut payload).ok()?;
        Reply::decode(&payload).ok()
    }

    pub fn recv_within(&mut self, t: Duration) -> Option<Reply> {
        self.0.set_read_timeout(Some(t)).unwrap();
        let r = self.recv();
        self.0.set_read_timeout(None).unwrap();
        r
    }

    /// Sends `Reserve{device, bytes}` and reads the answer.
    pub fn reserve(&mut self, device: DeviceId, bytes: u64) -> Option<Reply> {
        self.send(&Request::Reserve { device, bytes });
        self.recv()
    }

    /// Sends `Acquire{device}` and expects a grant within a second.
    pub fn acquire_granted(&mut self, device: DeviceId) {
        self.send(&Request::Acquire { device });
        assert!(matches!(
            self.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { .. })
        ));
    }

    pub fn hello(&mut self, client: &str) -> Reply {
        self.send(&Request::Hello {
            version: PROTOCOL_VERSION,
            client: client.into(),
            reserved: vec![],
        });
        self.recv().expect("a reply to Hello")
    }
}

/// A process that speaks to the daemon's socket on the test's behalf (tests/fakes/relay.c):
/// what the test sends goes to the daemon as that process's, so the daemon sees another pid.
/// The process is killed when this is dropped.
pub struct Relayed {
    pub child: Child,
    stdin: std::process::ChildStdin,
    replies: std::sync::mpsc::Receiver<Reply>,
}

impl Relayed {
    /// A new connection to `socket` through a relay process.
    pub fn connect(socket: &Path) -> Relayed {
        let mut child = Command::new(super::relay())
            .arg(socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || loop {
            let mut header = [0u8; 4];
            if stdout.read_exact(&mut header).is_err() {
                return;
            }
            let mut payload = vec![0u8; frame_len(header).unwrap()];
            if stdout.read_exact(&mut payload).is_err()
                || tx.send(Reply::decode(&payload).unwrap()).is_err()
            {
                return;
            }
        });
        Relayed {
            child,
            stdin,
            replies,
        }
    }

    pub fn send(&mut self, r: &Request) {
        self.stdin.write_all(&r.to_frame().unwrap()).unwrap();
    }

    /// The daemon's next reply, if one comes within `t`.
    pub fn reply_within(&self, t: Duration) -> Option<Reply> {
        self.replies.recv_timeout(t).ok()
    }
}

impl Drop for Relayed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process of user `uid` (python3) that attaches to `socket` as `client` ("" for the user's
/// default client) and holds `leases` leases of `hold` each, one after the other; it prints "ok"
/// and exits when done.
pub fn hold_leases_as(uid: u32, socket: &Path, client: &str, leases: u32, hold: Duration) -> Child {
    use std::os::unix::process::CommandExt;
    let hex = |r: Request| -> String {
        r.to_frame()
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let script = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
hello, acquire, release = (bytes.fromhex(a) for a in sys.argv[2:5])
def reply():
    data = b''
    while len(data) < 4 or len(data) < 4 + struct.unpack('<I', data[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit('the daemon closed the connection')
        data += chunk
    return data[4]
s.sendall(hello)
assert reply() == 1, 'no welcome'
for _ in range(int(sys.argv[5])):
    s.sendall(acquire)
    assert reply() == 2, 'no grant'
    time.sleep(float(sys.argv[6]))
    s.sendall(release)
print('ok', flush=True)
"#;
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(socket)
        .arg(hex(Request::Hello {
            version: PROTOCOL_VERSION,
            client: client.into(),
            reserved: vec![],
        }))
        .arg(hex(Request::Acquire { device: GPU0 }))
        .arg(hex(Request::Release {
            device: GPU0,
            busy_ns: u64::MAX,
            launches: 0,
            active_ns: 0,
        }))
        .arg(leases.to_string())
        .arg(hold.as_secs_f64().to_string())
        .uid(uid)
        .gid(uid)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed")
}

/// Waits for a [`hold_leases_as`] process and checks that it held all its leases.
pub fn expect_done(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && stdout(&out).trim() == "ok",
        "the client process failed: {} {}",
        stdout(&out),
        stderr(&out)
    );
}
