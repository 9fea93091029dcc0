//! The HTTP endpoint: `tiny_http` on a thread of its own. It answers
//! `GET /metrics` with the exposition text and `/` with a pointer to it. The
//! thread reads [`Live`] only (lock-free counters, and the progress mutex that
//! no lcore takes), so a slow or hostile scraper can delay nothing but itself.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{encode, Format, Live};

/// How often the server thread looks at its stop flag.
const POLL: Duration = Duration::from_millis(100);

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address cannot be bound (in use, not local, no permission): the
    /// user's input (exit status 2).
    #[error("--metrics {addr}: cannot listen there: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server could not start (exit status 1).
    #[error("--metrics {addr}: cannot start the server: {message}")]
    Start {
        /// The address.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
}

/// A running metrics endpoint.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    server: Arc<tiny_http::Server>,
}

impl MetricsServer {
    /// Listens on `addr` and serves `live` until [`MetricsServer::stop`].
    pub fn start(addr: SocketAddr, live: Arc<Live>) -> Result<MetricsServer, MetricsError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| MetricsError::Bind { addr, source })?;
        let server =
            tiny_http::Server::from_listener(listener, None).map_err(|e| MetricsError::Start {
                addr,
                message: e.to_string(),
            })?;
        let server = Arc::new(server);
        let stop = Arc::new(AtomicBool::new(false));
        let (srv, flag) = (server.clone(), stop.clone());
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&srv, &flag, &live))
            .map_err(|e| MetricsError::Start {
                addr,
                message: e.to_string(),
            })?;
        Ok(MetricsServer {
            addr: bound,
            stop,
            server,
        })
    }

    /// The address it listens on (with the port chosen when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends the command's use of the endpoint. The server goes on answering
    /// with the final numbers until the process exits, when the kernel closes
    /// the socket: a scrape during shutdown gets the final numbers or a refused
    /// connection, never a hang. (Stopping the server earlier would let
    /// tiny_http answer a request it had queued with an empty 500.)
    pub fn stop(self) {
        // The serving thread owns its own handle on the server; this one is
        // leaked so the server is never dropped, and `Drop` does not signal.
        std::mem::forget(self);
    }

    fn signal(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.server.unblock();
    }
}

impl Drop for MetricsServer {
    /// Dropped on an early return: the thread ends on its own shortly.
    fn drop(&mut self) {
        self.signal();
    }
}

/// Most requests answered after the stop flag: the ones already queued.
const DRAIN_MAX: usize = 64;

fn serve(server: &tiny_http::Server, stop: &AtomicBool, live: &Arc<Live>) {
    while !stop.load(Ordering::Relaxed) {
        let req = match server.recv_timeout(POLL) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(_) => break,
        };
        answer(req, live);
    }
    // tiny_http answers a request it queued but nobody took with an empty 500
    // when the server is dropped: answer what is queued with the final numbers
    // first, so a scrape during shutdown gets them or a closed connection.
    for _ in 0..DRAIN_MAX {
        match server.try_recv() {
            Ok(Some(req)) => answer(req, live),
            _ => break,
        }
    }
}

/// Answers one request: the metrics, a pointer to them, or 404.
fn answer(req: tiny_http::Request, live: &Arc<Live>) {
    let path = req.url().split('?').next().unwrap_or("");
    let response = match (req.method(), path) {
        (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => {
            let accept = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Accept"))
                .map(|h| h.value.as_str());
            let format = Format::from_accept(accept);
            match encode(live, format) {
                Ok(text) => tiny_http::Response::from_string(text)
                    .with_header(header("Content-Type", format.content_type())),
                Err(_) => tiny_http::Response::from_string("cannot encode the metrics\n")
                    .with_status_code(500),
            }
        }
        (tiny_http::Method::Get | tiny_http::Method::Head, "/") => {
            tiny_http::Response::from_string("linerate: Prometheus metrics are at /metrics\n")
                .with_header(header("Content-Type", "text/plain; charset=utf-8"))
        }
        _ => tiny_http::Response::from_string("not found: try /metrics\n").with_status_code(404),
    };
    // A client that went away is its own business.
    let _ = req.respond(response);
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    // Both are ASCII constants, so the header always parses.
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
        .unwrap_or_else(|_| unreachable!("ASCII header {name}"))
}

#[cfg(test)]
mod test {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    #[test]
    fn serves_metrics_404s_the_rest_and_stops() {
        let live = Live::new("run");
        let s = MetricsServer::start("127.0.0.1:0".parse().unwrap(), live).unwrap();
        let addr = s.addr();
        let r = get(addr, "/metrics").unwrap();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.contains("application/openmetrics-text"), "{r}");
        assert!(r.contains("linerate_uptime_seconds"), "{r}");
        assert!(r.trim_end().ends_with("# EOF"), "{r}");
        assert!(get(addr, "/nope").unwrap().starts_with("HTTP/1.1 404"));
        // A second server on the same address is refused.
        assert!(matches!(
            MetricsServer::start(addr, Live::new("run")),
            Err(MetricsError::Bind { .. })
        ));
        s.stop();
        // After stopping, a scrape gets the final numbers at once, never hangs.
        let t = std::time::Instant::now();
        let after = get(addr, "/metrics");
        assert!(
            after.as_ref().is_ok_and(|r| r.starts_with("HTTP/1.1 200")),
            "{after:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(4));
    }
}
