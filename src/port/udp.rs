//! The udp port: kernel UDP sockets, batched with `recvmmsg`/`sendmmsg` so one
//! system call moves a whole burst. A packet's data is the datagram payload.
//!
//! Received datagrams land directly in pool buffers (no copy after the
//! kernel's); a datagram larger than a buffer is counted as dropped.

use std::io;
use std::mem::zeroed;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use crate::buf::{Burst, Pool, PoolCache, BURST_MAX};
use crate::time::Instant;

use super::{OpenPort, PortCounters, PortError, PortReport, PortStats, RxQueue, TxQueue};

/// A udp port's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpConfig {
    /// Local address to bind (receive side, and source address of sends).
    pub bind: Option<SocketAddr>,
    /// Destination of sends; the socket is connected to it.
    pub connect: Option<SocketAddr>,
    /// IPv4 multicast group to join on `interface`.
    pub multicast: Option<Ipv4Addr>,
    /// Interface address for the multicast join, and (when `connect` is a
    /// multicast group) the interface multicast sends leave by
    /// (`IP_MULTICAST_IF`); unspecified leaves both to the routing table.
    pub interface: Ipv4Addr,
    /// Hops a multicast send may cross (`IP_MULTICAST_TTL`; the kernel's
    /// default is 1, this link only).
    pub multicast_ttl: Option<u8>,
    /// Whether this host's own sockets that joined the group get a copy of
    /// its multicast sends (`IP_MULTICAST_LOOP`; the kernel's default is on).
    pub multicast_loop: Option<bool>,
    /// Receive buffer size to ask the kernel for.
    pub rcvbuf: Option<usize>,
    /// Send buffer size to ask the kernel for.
    pub sndbuf: Option<usize>,
    /// Sockets (queues): more than one binds them all to `bind` with
    /// `SO_REUSEPORT`, so the kernel spreads flows over them by hash;
    /// without `bind`, each takes its own ephemeral port (one source each).
    pub queues: u16,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            bind: None,
            connect: None,
            multicast: None,
            interface: Ipv4Addr::UNSPECIFIED,
            multicast_ttl: None,
            multicast_loop: None,
            rcvbuf: None,
            sndbuf: None,
            queues: 1,
        }
    }
}

struct Stats {
    common: PortCounters,
}

impl PortStats for Stats {
    fn report(&self) -> PortReport {
        self.common.report("udp")
    }
}

/// `setsockopt(fd, level, opt)` to `value`, passed with its true size.
fn set_opt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live, borrowed T for the whole call and the length
    // is its size, so the kernel reads only valid memory; a bad fd or a value
    // of the wrong type for `opt` is an error return, not undefined behaviour.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets a socket buffer size, forcing past the sysctl cap when we may (root),
/// and says so when the kernel still gave less than asked.
fn size_buffer(
    sock: &UdpSocket,
    opt: libc::c_int,
    force: libc::c_int,
    want: usize,
    name: &str,
    sysctl: &str,
) -> Option<String> {
    let fd = sock.as_raw_fd();
    let val = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
    let set = |o: libc::c_int| set_opt(fd, libc::SOL_SOCKET, o, &val);
    let get = || {
        let mut got: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: as above; `got` and `len` are valid for writes of their sizes.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&mut got as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        // Linux reports twice the usable size (it counts its bookkeeping).
        got as usize / 2
    };
    if set(force).is_err() {
        // Not root: the capped option, checked below.
        let _ = set(opt);
    }
    let got = get();
    (got < want).then(|| {
        format!(
            "the kernel capped the {name} buffer at {got} bytes (asked for {want}); raise it with `sysctl -w {sysctl}={want}` or run as root"
        )
    })
}

/// Opens a udp port. Errors binding or connecting are the user's to fix.
pub fn open(config: &UdpConfig, pool: &Pool) -> Result<OpenPort, PortError> {
    let mut bind = config.bind.unwrap_or_else(|| match config.connect {
        Some(SocketAddr::V6(_)) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
        _ => SocketAddr::from(([0, 0, 0, 0], 0)),
    });
    let n = config.queues.max(1);
    if n == 1 {
        return open_one(config, pool, bind, false).map(|o| o.open);
    }
    let mut port = OpenPort {
        rx: Vec::new(),
        tx: Vec::new(),
        stats: Arc::new(()),
        warnings: Vec::new(),
    };
    let mut parts = Vec::new();
    for k in 0..n {
        let one = open_one(config, pool, bind, true)?;
        if k == 0 {
            if config.bind.is_some() {
                // The others join the port the first one got (`bind` may
                // name port 0), sharing its traffic by the kernel's hash.
                bind = one.local;
            }
            // Without `bind` (a sending port) each socket keeps its own
            // ephemeral port: several sources, as several senders would be,
            // which a receiver's SO_REUSEPORT sockets (or a NIC's RSS)
            // spread by their 4-tuples.
            port.warnings = one.open.warnings;
        }
        port.rx.extend(one.open.rx);
        port.tx.extend(one.open.tx);
        parts.push(one.open.stats);
    }
    port.stats = Arc::new(super::QueueStats::new("udp", parts));
    Ok(port)
}

/// A socket bound to `bind`, with `SO_REUSEPORT` set first when `reuse`.
fn bind_socket(bind: SocketAddr, reuse: bool) -> io::Result<UdpSocket> {
    if !reuse {
        return UdpSocket::bind(bind);
    }
    use std::os::fd::FromRawFd;
    let family = match bind {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain socket(2); the descriptor is owned by the UdpSocket below
    // (closed on every error path by its Drop).
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket that nothing else owns.
    let sock = unsafe { UdpSocket::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    set_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, &one)?;
    let (addr, len) = sockaddr(bind);
    // SAFETY: `addr` is a sockaddr_storage holding a sockaddr of `len` bytes.
    let r = unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_storage).cast(), len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// `a` as a C socket address.
fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { zeroed() };
    match a {
        SocketAddr::V4(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v.ip()).to_be();
            (
                s,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin.sin6_port = v.port().to_be();
            sin.sin6_addr.s6_addr = v.ip().octets();
            sin.sin6_flowinfo = v.flowinfo();
            sin.sin6_scope_id = v.scope_id();
            (
                s,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// One opened socket and the address it got.
struct OneSocket {
    open: OpenPort,
    local: SocketAddr,
}

fn open_one(
    config: &UdpConfig,
    pool: &Pool,
    bind: SocketAddr,
    reuse: bool,
) -> Result<OneSocket, PortError> {
    let sock = bind_socket(bind, reuse)
        .map_err(|e| PortError::Input(format!("cannot bind UDP address {bind}: {e}")))?;
    let local = sock
        .local_addr()
        .map_err(|e| PortError::Runtime(format!("cannot read the UDP socket's address: {e}")))?;
    if let Some(SocketAddr::V4(dest)) = config.connect {
        if dest.ip().is_multicast() {
            // Before connect: the kernel routes a multicast connect by the
            // socket's multicast interface when one is set.
            multicast_send(&sock, config).map_err(|e| {
                PortError::Input(format!(
                    "cannot set up multicast sends to {dest} on {}: {e}",
                    config.interface
                ))
            })?;
        }
    }
    if let Some(dest) = config.connect {
        sock.connect(dest).map_err(|e| {
            let hint = if dest.ip().is_multicast()
                && config.interface.is_unspecified()
                && e.raw_os_error() == Some(libc::ENETUNREACH)
            {
                " (no route for the group: set `interface` to the address of the interface it leaves by, or add a route, `ip route add 239.0.0.0/8 dev IFACE`)"
            } else {
                ""
            };
            PortError::Input(format!("cannot connect UDP socket to {dest}: {e}{hint}"))
        })?;
    }
    if let Some(group) = config.multicast {
        sock.join_multicast_v4(&group, &config.interface)
            .map_err(|e| {
                PortError::Input(format!(
                    "cannot join multicast group {group} on {}: {e}",
                    config.interface
                ))
            })?;
    }
    sock.set_nonblocking(true)
        .map_err(|e| PortError::Runtime(format!("cannot make the UDP socket non-blocking: {e}")))?;
    let mut warnings = Vec::new();
    if let Some(n) = config.rcvbuf {
        warnings.extend(size_buffer(
            &sock,
            libc::SO_RCVBUF,
            libc::SO_RCVBUFFORCE,
            n,
            "receive",
            "net.core.rmem_max",
        ));
    }
    if let Some(n) = config.sndbuf {
        warnings.extend(size_buffer(
            &sock,
            libc::SO_SNDBUF,
            libc::SO_SNDBUFFORCE,
            n,
            "send",
            "net.core.wmem_max",
        ));
    }
    let tx_sock = sock
        .try_clone()
        .map_err(|e| PortError::Runtime(format!("cannot duplicate the UDP socket: {e}")))?;
    let stats = Arc::new(Stats {
        common: PortCounters::default(),
    });
    let rx = UdpRx {
        sock,
        cache: pool.cache(),
        spare: Burst::new(),
        // SAFETY: mmsghdr and iovec are plain C structs for which all-zero is a
        // valid (empty) value.
        msgs: unsafe { zeroed() },
        iov: unsafe { zeroed() },
        stats: stats.clone(),
    };
    let tx = UdpTx {
        sock: tx_sock,
        connected: config.connect.is_some(),
        // SAFETY: as above.
        msgs: unsafe { zeroed() },
        iov: unsafe { zeroed() },
        stats: stats.clone(),
    };
    Ok(OneSocket {
        open: OpenPort {
            rx: vec![Box::new(rx)],
            tx: if config.connect.is_some() {
                vec![Box::new(tx) as Box<dyn TxQueue>]
            } else {
                Vec::new()
            },
            stats,
            warnings,
        },
        local,
    })
}

/// The multicast send options of `config` on `sock`: the interface, the
/// TTL and the loopback, each only when asked for.
fn multicast_send(sock: &UdpSocket, config: &UdpConfig) -> io::Result<()> {
    if !config.interface.is_unspecified() {
        let addr = libc::in_addr {
            s_addr: u32::from(config.interface).to_be(),
        };
        set_opt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF,
            &addr,
        )?;
    }
    if let Some(ttl) = config.multicast_ttl {
        sock.set_multicast_ttl_v4(u32::from(ttl))?;
    }
    if let Some(on) = config.multicast_loop {
        sock.set_multicast_loop_v4(on)?;
    }
    Ok(())
}

struct UdpRx {
    sock: UdpSocket,
    cache: PoolCache,
    /// Empty packets kept ready to receive into.
    spare: Burst,
    msgs: [libc::mmsghdr; BURST_MAX],
    iov: [libc::iovec; BURST_MAX],
    stats: Arc<Stats>,
}

// SAFETY: the raw pointers inside `msgs`/`iov` are rebuilt before every call and
// point only into buffers this queue owns; nothing else aliases them.
unsafe impl Send for UdpRx {}

impl RxQueue for UdpRx {
    fn rx_burst(&mut self, _now: Instant, out: &mut Burst, max: usize) -> usize {
        let want = max.min(out.room());
        if self.spare.len() < want {
            let need = want - self.spare.len();
            self.cache.alloc_bulk(&mut self.spare, need);
        }
        let n = want.min(self.spare.len());
        if n == 0 {
            return 0;
        }
        for (i, pkt) in self.spare.iter_mut().take(n).enumerate() {
            let room = pkt.spare_capacity();
            self.iov[i] = libc::iovec {
                iov_base: room.as_mut_ptr().cast(),
                iov_len: room.len(),
            };
            self.msgs[i].msg_hdr.msg_iov = &mut self.iov[i];
            self.msgs[i].msg_hdr.msg_iovlen = 1;
            self.msgs[i].msg_hdr.msg_name = std::ptr::null_mut();
            self.msgs[i].msg_hdr.msg_namelen = 0;
            self.msgs[i].msg_hdr.msg_flags = 0;
        }
        // SAFETY: msgs[..n] point at iovecs that point into n distinct packet
        // buffers owned by `self.spare`, each valid for writes of iov_len bytes.
        let got = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got <= 0 {
            return 0;
        }
        let got = got as usize;
        let mut delivered = 0;
        let mut bytes = 0;
        for (i, mut pkt) in self.spare.drain_front(got).enumerate() {
            let m = &self.msgs[i];
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0
                || pkt.set_len(m.msg_len as usize).is_err()
            {
                self.stats.common.rx.dropped.add(1);
                continue;
            }
            bytes += u64::from(m.msg_len);
            let _ = out.push(pkt);
            delivered += 1;
        }
        self.stats.common.rx.packets.add(delivered as u64);
        self.stats.common.rx.bytes.add(bytes);
        delivered
    }
}

struct UdpTx {
    sock: UdpSocket,
    connected: bool,
    msgs: [libc::mmsghdr; BURST_MAX],
    iov: [libc::iovec; BURST_MAX],
    stats: Arc<Stats>,
}

// SAFETY: as for UdpRx: the pointers are rebuilt per call from packets we hold.
unsafe impl Send for UdpTx {}

impl TxQueue for UdpTx {
    fn tx_burst(&mut self, _now: Instant, pkts: &mut Burst) -> usize {
        let n = pkts.len();
        if n == 0 || !self.connected {
            return 0;
        }
        for (i, pkt) in pkts.iter().enumerate() {
            let data = pkt.data();
            self.iov[i] = libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            };
            self.msgs[i].msg_hdr.msg_iov = &mut self.iov[i];
            self.msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: msgs[..n] point at iovecs over the data of packets held in
        // `pkts`, alive and unmodified for the duration of the call; the kernel
        // only reads them.
        let sent = unsafe {
            libc::sendmmsg(
                self.sock.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::WouldBlock {
                // ECONNREFUSED from an ICMP port-unreachable and the like: the
                // datagram is gone; count it rather than retry forever.
                let first = pkts.drain_front(1).count();
                self.stats.common.tx.dropped.add(first as u64);
                return first;
            }
            return 0;
        }
        let sent = sent as usize;
        let bytes: u64 = pkts.drain_front(sent).map(|p| p.len() as u64).sum();
        self.stats.common.tx.packets.add(sent as u64);
        self.stats.common.tx.bytes.add(bytes);
        sent
    }
}
