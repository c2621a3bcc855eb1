//! The connection to `gpushared`: blocking frames over a Unix stream socket.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use proto::protocol::{frame_len, Reply, Request, MAX_FRAME};

/// How long the daemon may take to answer a request other than `Acquire` before the hook
/// considers it gone (and the process runs unmanaged).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Link {
    stream: UnixStream,
}

impl Link {
    pub fn connect(path: &Path) -> io::Result<Link> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        Ok(Link { stream })
    }

    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Sends a request that has no reply.
    pub fn send(&mut self, req: &Request) -> io::Result<()> {
        let frame = req
            .encode()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.stream.write_all(frame.as_bytes())
    }

    /// Sends a request and waits for its reply, at most [`REPLY_TIMEOUT`].
    pub fn call(&mut self, req: &Request) -> io::Result<Reply> {
        self.send(req)?;
        self.receive()
    }

    /// Sends a request whose reply comes when the daemon decides (`Acquire`): no time limit.
    /// The reply is first waited for spinning, for at most `spin` ([`Link::spin_until_readable`]).
    pub fn call_untimed(&mut self, req: &Request, spin: Duration) -> io::Result<Reply> {
        self.stream.set_read_timeout(None)?;
        self.send(req)?;
        self.spin_until_readable(spin);
        let reply = self.receive();
        self.stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        reply
    }

    /// Polls the socket without blocking until it has something to read (or is closed, or
    /// fails: the read that follows sees it), for at most `spin`, yielding the CPU between
    /// polls (to threads ready to run on it, if any).
    fn spin_until_readable(&self, spin: Duration) {
        let start = std::time::Instant::now();
        let mut byte = 0u8;
        loop {
            // SAFETY: a one-byte buffer of ours; MSG_PEEK leaves the byte in the socket.
            let n = unsafe {
                libc::recv(
                    self.fd(),
                    (&mut byte as *mut u8).cast(),
                    1,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            let would_block = n < 0
                && matches!(
                    io::Error::last_os_error().raw_os_error(),
                    Some(libc::EAGAIN | libc::EINTR)
                );
            if !would_block || start.elapsed() >= spin {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Reads with no time limit from now on (a connection that only listens).
    pub fn wait_forever(&mut self) -> io::Result<()> {
        self.stream.set_read_timeout(None)
    }

    /// Reads the next reply.
    pub fn receive(&mut self) -> io::Result<Reply> {
        let mut header = [0u8; 4];
        self.stream.read_exact(&mut header)?;
        let n = frame_len(header).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut buf = [0u8; MAX_FRAME];
        self.stream.read_exact(&mut buf[..n])?;
        Reply::decode(&buf[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    /// A spin before a read ends when a reply is there to read, when the peer closed the
    /// connection, or after its limit, and leaves the reply to the read.
    #[test]
    fn a_spin_ends_when_the_reply_comes_or_at_its_limit() {
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let mut link = Link { stream: mine };
        let start = Instant::now();
        link.spin_until_readable(Duration::from_millis(30));
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(30), "spun {waited:?}");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            peer.write_all(&Reply::Reserved { used: 7 }.to_frame().unwrap())
                .unwrap();
            peer
        });
        let start = Instant::now();
        link.spin_until_readable(Duration::from_secs(10));
        let waited = start.elapsed();
        assert!(
            waited < Duration::from_secs(5),
            "spun {waited:?} past the reply"
        );
        assert_eq!(link.receive().unwrap(), Reply::Reserved { used: 7 });
        drop(writer.join().unwrap());
        let start = Instant::now();
        link.spin_until_readable(Duration::from_secs(10));
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "spun past the close"
        );
    }

    #[test]
    fn requests_and_replies_travel_as_frames() {
        let dir = std::env::temp_dir().join(format!("gpushare-link-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut header = [0u8; 4];
            s.read_exact(&mut header).unwrap();
            let mut payload = vec![0; frame_len(header).unwrap()];
            s.read_exact(&mut payload).unwrap();
            assert_eq!(
                Request::decode(&payload).unwrap(),
                Request::Reserve {
                    device: proto::protocol::DeviceId::default(),
                    bytes: 42,
                }
            );
            s.write_all(&Reply::Reserved { used: 42 }.to_frame().unwrap())
                .unwrap();
        });
        let mut link = Link::connect(&path).unwrap();
        assert_eq!(
            link.call(&Request::Reserve {
                device: proto::protocol::DeviceId::default(),
                bytes: 42,
            })
            .unwrap(),
            Reply::Reserved { used: 42 }
        );
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
