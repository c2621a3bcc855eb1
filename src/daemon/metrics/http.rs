//! A minimal HTTP/1.1 server for one page: `GET /metrics` (and `HEAD`); other paths get 404,
//! other methods 405. Each connection gets one response and is closed (`Connection: close`).
//! Requests are bounded in size and time, and connections in number, so that a slow or rogue
//! client cannot hold the daemon or its memory.
//!
//! It knows nothing of what the page says: the metrics module that owns it hands it a [`Page`]
//! (its content type and the function that makes its body).

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The one page served: its content type, and what makes its body on each request. The body is
/// made on a blocking thread, so it may read slow things (NVML).
#[derive(Clone)]
pub struct Page {
    pub content_type: &'static str,
    pub body: Arc<dyn Fn() -> String + Send + Sync>,
}

pub const PATH: &str = "/metrics";

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request head (request line and headers).
    pub head: usize,
    /// How long a connection may take from accept to the end of the response.
    pub deadline: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub connections: usize,
}

pub const LIMITS: Limits = Limits {
    head: 8 * 1024,
    deadline: Duration::from_secs(10),
    connections: 16,
};

/// Serves `page` at [`PATH`] on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, page: Page) {
    serve_with(listener, page, LIMITS).await
}

pub async fn serve_with(listener: TcpListener, page: Page, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.connections));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // out of descriptors, or the peer gave up: wait a little and go on
                tracing::debug!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let page = page.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(limits.deadline, answer(stream, &page, limits.head)).await;
        });
    }
}

/// Where the head ends (after its blank line), if it has.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The status, extra headers and body for a request head.
async fn respond_to(
    head: &[u8],
    page: &Page,
) -> (u16, &'static str, Vec<(&'static str, String)>, String) {
    let text = String::from_utf8_lossy(head);
    let line = text.split("\r\n").next().unwrap_or("");
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return (400, "Bad Request", vec![], "bad request\n".into());
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") || !target.starts_with('/') {
        return (400, "Bad Request", vec![], "bad request\n".into());
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != PATH {
        return (
            404,
            "Not Found",
            vec![],
            format!("not found: the metrics are at {PATH}\n"),
        );
    }
    if !matches!(method, "GET" | "HEAD") {
        return (
            405,
            "Method Not Allowed",
            vec![("Allow", "GET, HEAD".into())],
            "method not allowed\n".into(),
        );
    }
    let body = page.body.clone();
    match tokio::task::spawn_blocking(move || body()).await {
        Ok(body) => (
            200,
            "OK",
            vec![("Content-Type", page.content_type.into())],
            body,
        ),
        Err(e) => (
            500,
            "Internal Server Error",
            vec![],
            format!("cannot make the page: {e}\n"),
        ),
    }
}

async fn answer(mut stream: TcpStream, page: &Page, max_head: usize) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() >= max_head {
            return reply(
                &mut stream,
                431,
                "Request Header Fields Too Large",
                &[],
                "request head too large\n",
                true,
            )
            .await;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = &buf[..end];
    let (status, reason, headers, body) = respond_to(head, page).await;
    let with_body = !head.starts_with(b"HEAD ");
    reply(&mut stream, status, reason, &headers, &body, with_body).await
}

async fn reply(
    stream: &mut TcpStream,
    status: u16,
    reason: &str,
    headers: &[(&str, String)],
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n");
    if !headers.iter().any(|(k, _)| *k == "Content-Type") {
        out.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    }
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    if with_body {
        out.push_str(body);
    }
    stream.write_all(out.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server(limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let page = Page {
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: Arc::new(|| "gpushare_up 1\n# EOF\n".to_string()),
        };
        tokio::spawn(serve_with(listener, page, limits));
        addr
    }

    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_the_page_and_nothing_else() {
        let addr = server(LIMITS).await;
        let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 20\r\n"), "{ok}");
        assert!(
            ok.contains("Content-Type: application/openmetrics-text"),
            "{ok}"
        );
        assert!(ok.ends_with("\r\n\r\ngpushare_up 1\n# EOF\n"), "{ok}");
        let query = exchange(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").await;
        assert!(query.starts_with("HTTP/1.1 200"), "{query}");
        let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        for (request, status) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], "404"),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", "404"),
            (
                b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                "405",
            ),
            (b"GET /metrics\r\n\r\n", "400"),
            (b"GET /metrics SPDY/3\r\n\r\n", "400"),
            (
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
                "400",
            ),
        ] {
            let out = exchange(addr, request).await;
            assert!(
                out.starts_with(&format!("HTTP/1.1 {status} ")),
                "{:?}: {out}",
                String::from_utf8_lossy(request)
            );
        }
        let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 20_000));
        let out = exchange(addr, &huge).await;
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    }

    #[tokio::test]
    async fn silent_clients_are_cut_off_and_do_not_block_a_scrape() {
        let limits = Limits {
            head: 1024,
            deadline: Duration::from_millis(300),
            connections: 2,
        };
        let addr = server(limits).await;
        // two connections that never say anything take every slot
        let mut idle1 = TcpStream::connect(addr).await.unwrap();
        let mut idle2 = TcpStream::connect(addr).await.unwrap();
        // the scrape waits for a slot, then is served
        let ok = tokio::time::timeout(
            Duration::from_secs(30),
            exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n"),
        )
        .await
        .expect("served after the idle connections were cut off");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        let mut rest = Vec::new();
        assert_eq!(
            idle1.read_to_end(&mut rest).await.unwrap(),
            0,
            "closed without a reply"
        );
        assert_eq!(idle2.read_to_end(&mut rest).await.unwrap(), 0);
    }
}
