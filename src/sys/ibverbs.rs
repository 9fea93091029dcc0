//! rdma-core ibverbs raw packet queues (feature `ibverbs`), as spead2's
//! `udp_ibv` transport uses them: an `IBV_QPT_RAW_PACKET` queue pair whose
//! receive side is fed only the frames a flow steering rule selects
//! (destination MAC, IPv4 address, UDP port), receive buffers carved from one
//! registered memory region, batched `post_recv`, and sends that inline small
//! frames.
//!
//! Object graph (each child holds an `Arc` of its parent, so drop order is
//! always right): [`Context`] → [`Pd`] → [`MemoryRegion`] and [`RawQp`] (which
//! owns its two completion queues and its flow rules).
//!
//! With no RDMA device, [`open`] fails with [`IbvError::NoDevice`], naming
//! what is missing.

use std::ffi::CStr;
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::sys::ffi::ibverbs as ffi;

/// An ibverbs call failed or no device is usable.
#[derive(Debug, thiserror::Error)]
pub enum IbvError {
    /// No RDMA device exists.
    #[error(
        "no RDMA device found (ibv_get_device_list returned 0 devices); the ibverbs port needs \
         an RDMA-capable NIC (e.g. NVIDIA/Mellanox ConnectX with the mlx5_ib kernel module and \
         the ibverbs-providers package), visible under /sys/class/infiniband; use a dpdk or udp \
         port on machines without one"
    )]
    NoDevice,
    /// A named device does not exist.
    #[error("no RDMA device named {name:?} (devices: [{available}])")]
    NoSuchDevice {
        /// The requested name.
        name: String,
        /// The names found.
        available: String,
    },
    /// A verbs call failed.
    #[error("{op} failed: {reason} (errno {errno})")]
    Call {
        /// The call and its subject.
        op: String,
        /// The errno.
        errno: i32,
        /// `strerror(errno)`.
        reason: String,
    },
    /// A parameter is out of range.
    #[error("{0}")]
    Invalid(String),
}

fn os_error(op: impl Into<String>, errno: i32) -> IbvError {
    let errno = if errno == 0 { libc::EIO } else { errno };
    IbvError::Call {
        op: op.into(),
        errno,
        reason: std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Names of the RDMA devices present (`ibv_get_device_list`).
pub fn device_names() -> Result<Vec<String>, IbvError> {
    let mut n = 0;
    // SAFETY: n is a valid out-pointer; the list is freed below.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        let errno = last_errno();
        // ENOSYS: the kernel has no RDMA support at all: same as no device.
        if errno == libc::ENOSYS || errno == 0 {
            return Ok(Vec::new());
        }
        return Err(os_error("ibv_get_device_list", errno));
    }
    let names = (0..usize::try_from(n).unwrap_or(0))
        .map(|i| {
            // SAFETY: list has n valid device pointers; get_device_name
            // returns a NUL-terminated string owned by the device.
            unsafe { CStr::from_ptr(ffi::ibv_get_device_name(*list.add(i))) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { ffi::ibv_free_device_list(list) };
    Ok(names)
}

/// An open RDMA device.
#[derive(Debug)]
pub struct Context {
    ctx: NonNull<ffi::ibv_context>,
    name: String,
}

// SAFETY: ibv_context is thread-safe for the verbs used here (rdma-core
// serialises provider state internally).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

/// Opens the device `name`, or the first one when `None`.
pub fn open(name: Option<&str>) -> Result<Arc<Context>, IbvError> {
    let mut n = 0;
    // SAFETY: as in device_names().
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() || n <= 0 {
        if !list.is_null() {
            // SAFETY: freed once.
            unsafe { ffi::ibv_free_device_list(list) };
        }
        return Err(IbvError::NoDevice);
    }
    let mut names = Vec::new();
    let mut chosen = None;
    for i in 0..n as usize {
        // SAFETY: i < n.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a valid device from the list.
        let dn = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        if chosen.is_none() && name.is_none_or(|w| w == dn) {
            chosen = Some((dev, dn.clone()));
        }
        names.push(dn);
    }
    let result = match chosen {
        None => Err(IbvError::NoSuchDevice {
            name: name.unwrap_or_default().to_string(),
            available: names.join(", "),
        }),
        Some((dev, dn)) => {
            // SAFETY: dev is valid until the list is freed; the opened
            // context stays valid after that (documented by rdma-core).
            let ctx = unsafe { ffi::ibv_open_device(dev) };
            match NonNull::new(ctx) {
                Some(ctx) => Ok(Arc::new(Context { ctx, name: dn })),
                None => Err(os_error(format!("ibv_open_device({dn})"), last_errno())),
            }
        }
    };
    // SAFETY: freed once, after use.
    unsafe { ffi::ibv_free_device_list(list) };
    result
}

impl Context {
    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>, IbvError> {
        // SAFETY: valid open context.
        let pd = unsafe { ffi::ibv_alloc_pd(self.ctx.as_ptr()) };
        NonNull::new(pd)
            .map(|pd| {
                Arc::new(Pd {
                    pd,
                    ctx: Arc::clone(self),
                })
            })
            .ok_or_else(|| os_error(format!("ibv_alloc_pd({})", self.name), last_errno()))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc of us, so none is left.
        unsafe { ffi::ibv_close_device(self.ctx.as_ptr()) };
    }
}

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    pd: NonNull<ffi::ibv_pd>,
    ctx: Arc<Context>,
}

// SAFETY: a PD is a kernel handle usable from any thread.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: children (MRs, QPs) hold Arcs of us: none is left.
        unsafe { ffi::ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}

/// One registered memory region over an anonymous, page-aligned buffer
/// (receive slots or send frames are offsets into it).
#[derive(Debug)]
pub struct MemoryRegion {
    mr: NonNull<ffi::ibv_mr>,
    mem: memmap2::MmapMut,
    _pd: Arc<Pd>,
}

// SAFETY: the MR is a kernel registration; the memory is owned by us.
unsafe impl Send for MemoryRegion {}

impl MemoryRegion {
    /// Allocates `len` bytes and registers them for local write.
    pub fn new(pd: &Arc<Pd>, len: usize) -> Result<Self, IbvError> {
        let mut mem = memmap2::MmapMut::map_anon(len)
            .map_err(|e| os_error(format!("mmap {len} bytes"), e.raw_os_error().unwrap_or(0)))?;
        // SAFETY: mem is a valid writable region of len bytes that lives as
        // long as the registration (both in self; mr is deregistered first).
        let mr = unsafe {
            ffi::ibv_reg_mr(
                pd.pd.as_ptr(),
                mem.as_mut_ptr().cast(),
                len,
                ffi::IBV_ACCESS_LOCAL_WRITE as i32,
            )
        };
        NonNull::new(mr)
            .map(|mr| MemoryRegion {
                mr,
                mem,
                _pd: Arc::clone(pd),
            })
            .ok_or_else(|| os_error(format!("ibv_reg_mr({len} bytes)"), last_errno()))
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { self.mr.as_ref().lkey }
    }

    /// The buffer.
    pub fn as_slice(&self) -> &[u8] {
        &self.mem
    }

    /// The buffer, writable (do not write slots posted for receive).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.mem
    }

    fn sge(&self, offset: usize, len: u32) -> Result<ffi::ibv_sge, IbvError> {
        if offset
            .checked_add(len as usize)
            .is_none_or(|end| end > self.mem.len())
        {
            return Err(IbvError::Invalid(format!(
                "slot {offset}+{len} is outside the {}-byte memory region",
                self.mem.len()
            )));
        }
        Ok(ffi::ibv_sge {
            addr: self.mem.as_ptr() as u64 + offset as u64,
            length: len,
            lkey: self.lkey(),
        })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered by us, deregistered once, before mem is unmapped
        // (fields drop after this body).
        unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
    }
}

/// What a flow steering rule matches (spead2's `udp_ibv` shape: destination
/// MAC, and optionally destination IPv4 address and UDP port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowMatch {
    /// Destination MAC (the NIC's own, or a multicast MAC).
    pub dst_mac: [u8; 6],
    /// Destination IPv4 address.
    pub dst_ip: Option<Ipv4Addr>,
    /// Destination UDP port.
    pub dst_port: Option<u16>,
}

/// The flow attribute as the kernel wants it: the header followed by the
/// specs, packed (as spead2 builds it).
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct FlowRule {
    /// Header: type, size, spec count, port.
    pub attr: ffi::ibv_flow_attr,
    /// Ethernet spec.
    pub eth: ffi::ibv_flow_spec_eth,
    /// IPv4 spec.
    pub ip: ffi::ibv_flow_spec_ipv4,
    /// UDP spec.
    pub udp: ffi::ibv_flow_spec_tcp_udp,
}

impl FlowMatch {
    /// Builds the flow rule for physical port `port` (1-based). Only the
    /// specs in use are counted; unused ones trail the counted ones and are
    /// ignored by the kernel (`num_of_specs`, `size`).
    pub fn rule(&self, port: u8) -> FlowRule {
        let mut r = FlowRule {
            attr: ffi::ibv_flow_attr::default(),
            eth: ffi::ibv_flow_spec_eth::default(),
            ip: ffi::ibv_flow_spec_ipv4::default(),
            udp: ffi::ibv_flow_spec_tcp_udp::default(),
        };
        let mut size = std::mem::size_of::<ffi::ibv_flow_attr>();
        let mut specs = 1u8;
        r.attr.type_ = ffi::IBV_FLOW_ATTR_NORMAL;
        r.attr.port = port;
        r.eth.type_ = ffi::IBV_FLOW_SPEC_ETH;
        r.eth.size = std::mem::size_of::<ffi::ibv_flow_spec_eth>() as u16;
        r.eth.val.dst_mac = self.dst_mac;
        r.eth.mask.dst_mac = [0xff; 6];
        size += std::mem::size_of::<ffi::ibv_flow_spec_eth>();
        if self.dst_ip.is_some() || self.dst_port.is_some() {
            r.ip.type_ = ffi::IBV_FLOW_SPEC_IPV4;
            r.ip.size = std::mem::size_of::<ffi::ibv_flow_spec_ipv4>() as u16;
            if let Some(ip) = self.dst_ip {
                // Network byte order in memory, as the kernel compares it.
                r.ip.val.dst_ip = u32::from_ne_bytes(ip.octets());
                r.ip.mask.dst_ip = u32::MAX;
            }
            size += std::mem::size_of::<ffi::ibv_flow_spec_ipv4>();
            specs += 1;
        }
        if let Some(p) = self.dst_port {
            r.udp.type_ = ffi::IBV_FLOW_SPEC_UDP;
            r.udp.size = std::mem::size_of::<ffi::ibv_flow_spec_tcp_udp>() as u16;
            r.udp.val.dst_port = p.to_be();
            r.udp.mask.dst_port = u16::MAX;
            size += std::mem::size_of::<ffi::ibv_flow_spec_tcp_udp>();
            specs += 1;
        }
        r.attr.size = size as u16;
        r.attr.num_of_specs = specs;
        r
    }
}

/// Sizes of a raw packet queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Physical port number (1-based).
    pub port: u8,
    /// Send queue depth (and send CQ size).
    pub send_depth: u32,
    /// Receive queue depth (and receive CQ size).
    pub recv_depth: u32,
    /// Frames up to this many bytes are sent inline (copied into the WQE).
    pub max_inline: u32,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            port: 1,
            send_depth: 1024,
            recv_depth: 4096,
            max_inline: 60,
        }
    }
}

/// One receive slot: a work request id and a range of a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvSlot {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Offset into the memory region.
    pub offset: usize,
    /// Slot length (the largest frame it can take).
    pub len: u32,
}

/// Send flags of a work request: inline when `len` fits `max_inline`, and
/// signalled when asked.
fn send_flags(len: u32, max_inline: u32, signaled: bool) -> u32 {
    let mut flags = 0;
    if len <= max_inline {
        flags |= ffi::IBV_SEND_INLINE;
    }
    if signaled {
        flags |= ffi::IBV_SEND_SIGNALED;
    }
    flags
}

struct Cq(NonNull<ffi::ibv_cq>);

impl Cq {
    /// A completion queue of `n` entries on `ctx`, without a channel.
    fn create(ctx: &Context, n: u32) -> Result<Cq, IbvError> {
        // SAFETY: valid context; no channel, no vector.
        let cq = unsafe {
            ffi::ibv_create_cq(
                ctx.ctx.as_ptr(),
                n as i32,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        NonNull::new(cq)
            .map(Cq)
            .ok_or_else(|| os_error(format!("ibv_create_cq({n})"), last_errno()))
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created by us; the QP using it is destroyed first (RawQp's
        // Drop runs before its fields drop).
        unsafe { ffi::ibv_destroy_cq(self.0.as_ptr()) };
    }
}

/// An `IBV_QPT_RAW_PACKET` queue pair in state RTS, with its send and receive
/// completion queues and flow rules.
pub struct RawQp {
    qp: NonNull<ffi::ibv_qp>,
    send_cq: Cq,
    recv_cq: Cq,
    flows: Vec<NonNull<ffi::ibv_flow>>,
    cfg: QpConfig,
    recv_wrs: Vec<ffi::ibv_recv_wr>,
    recv_sges: Vec<ffi::ibv_sge>,
    _pd: Arc<Pd>,
}

// SAFETY: the QP is driven by one thread at a time (&mut self methods).
unsafe impl Send for RawQp {}

impl std::fmt::Debug for RawQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawQp").field("cfg", &self.cfg).finish()
    }
}

impl RawQp {
    /// Creates the CQs and the QP and brings it to RTS.
    pub fn new(pd: &Arc<Pd>, cfg: QpConfig) -> Result<Self, IbvError> {
        let send_cq = Cq::create(&pd.ctx, cfg.send_depth)?;
        let recv_cq = Cq::create(&pd.ctx, cfg.recv_depth)?;
        let mut init = ffi::ibv_qp_init_attr {
            send_cq: send_cq.0.as_ptr(),
            recv_cq: recv_cq.0.as_ptr(),
            qp_type: ffi::IBV_QPT_RAW_PACKET,
            cap: ffi::ibv_qp_cap {
                max_send_wr: cfg.send_depth,
                max_recv_wr: cfg.recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: cfg.max_inline,
            },
            ..Default::default()
        };
        // SAFETY: valid PD and CQs; init is a valid attribute struct.
        let qp = unsafe { ffi::ibv_create_qp(pd.pd.as_ptr(), &mut init) };
        let qp = NonNull::new(qp).ok_or_else(|| {
            os_error(
                "ibv_create_qp(IBV_QPT_RAW_PACKET) (needs CAP_NET_RAW)",
                last_errno(),
            )
        })?;
        let mut me = RawQp {
            qp,
            send_cq,
            recv_cq,
            flows: Vec::new(),
            cfg,
            recv_wrs: Vec::with_capacity(cfg.recv_depth as usize),
            recv_sges: Vec::with_capacity(cfg.recv_depth as usize),
            _pd: Arc::clone(pd),
        };
        me.modify(ffi::IBV_QPS_INIT, true)?;
        me.modify(ffi::IBV_QPS_RTR, false)?;
        me.modify(ffi::IBV_QPS_RTS, false)?;
        Ok(me)
    }

    fn modify(&mut self, state: ffi::ibv_qp_state, with_port: bool) -> Result<(), IbvError> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: state,
            ..Default::default()
        };
        let mut mask = ffi::IBV_QP_STATE;
        if with_port {
            attr.port_num = self.cfg.port;
            mask |= ffi::IBV_QP_PORT;
        }
        // SAFETY: valid QP; attr/mask describe a legal raw-packet transition.
        let ret = unsafe { ffi::ibv_modify_qp(self.qp.as_ptr(), &mut attr, mask as i32) };
        if ret != 0 {
            return Err(os_error(format!("ibv_modify_qp(state {state})"), ret));
        }
        Ok(())
    }

    /// Installs a flow steering rule: matching frames reach this QP.
    pub fn add_flow(&mut self, m: &FlowMatch) -> Result<(), IbvError> {
        let mut rule = m.rule(self.cfg.port);
        // SAFETY: rule is a packed attr followed by its specs, `size` bytes
        // long, as ibv_create_flow reads it; the kernel copies it.
        let flow = unsafe {
            ffi::lr_ibv_create_flow(self.qp.as_ptr(), std::ptr::addr_of_mut!(rule).cast())
        };
        let flow = NonNull::new(flow)
            .ok_or_else(|| os_error(format!("ibv_create_flow({m:?})"), last_errno()))?;
        self.flows.push(flow);
        Ok(())
    }

    /// Posts receive slots of `mr` in one chained `ibv_post_recv`.
    pub fn post_recv_batch(
        &mut self,
        mr: &MemoryRegion,
        slots: &[RecvSlot],
    ) -> Result<(), IbvError> {
        if slots.is_empty() {
            return Ok(());
        }
        self.recv_sges.clear();
        self.recv_wrs.clear();
        for s in slots {
            self.recv_sges.push(mr.sge(s.offset, s.len)?);
        }
        for (i, s) in slots.iter().enumerate() {
            self.recv_wrs.push(ffi::ibv_recv_wr {
                wr_id: s.wr_id,
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 1,
            });
            let sge = std::ptr::addr_of_mut!(self.recv_sges[i]);
            self.recv_wrs[i].sg_list = sge;
        }
        let base = self.recv_wrs.as_mut_ptr();
        for i in 0..slots.len() - 1 {
            // SAFETY: i + 1 < len; the vector is not resized while chained.
            self.recv_wrs[i].next = unsafe { base.add(i + 1) };
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid chain of work requests whose sges point into a
        // registered region that outlives the receive (the caller keeps mr).
        let ret = unsafe { ffi::lr_ibv_post_recv(self.qp.as_ptr(), base, &mut bad) };
        if ret != 0 {
            return Err(os_error(
                format!("ibv_post_recv({} slots)", slots.len()),
                ret,
            ));
        }
        Ok(())
    }

    /// Sends the frame at `offset..offset+len` of `mr`; inline when it is at
    /// most `max_inline` bytes. `signaled` asks for a send completion.
    pub fn send(
        &mut self,
        mr: &MemoryRegion,
        wr_id: u64,
        offset: usize,
        len: u32,
        signaled: bool,
    ) -> Result<(), IbvError> {
        let mut sge = mr.sge(offset, len)?;
        let flags = send_flags(len, self.cfg.max_inline, signaled);
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::IBV_WR_SEND,
            send_flags: flags,
            ..Default::default()
        };
        post_send_one(self.qp, &mut wr, "SEND", len)
    }

    /// Polls receive completions into `wc`; returns how many.
    pub fn poll_recv(&mut self, wc: &mut [ffi::ibv_wc]) -> Result<usize, IbvError> {
        poll(&self.recv_cq, wc)
    }

    /// Polls send completions into `wc`; returns how many.
    pub fn poll_send(&mut self, wc: &mut [ffi::ibv_wc]) -> Result<usize, IbvError> {
        poll(&self.send_cq, wc)
    }
}

/// Posts one work request (`op` of `len` bytes, for the error message) on `qp`.
/// The request's scatter-gather entries must lie in registered regions that
/// outlive the call, as [`MemoryRegion::sge`] makes them.
fn post_send_one(
    qp: NonNull<ffi::ibv_qp>,
    wr: &mut ffi::ibv_send_wr,
    op: &str,
    len: u32,
) -> Result<(), IbvError> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: `qp` is a live queue pair of the caller; `wr` is one valid work
    // request (no chain) whose sge lies in a registered region (the caller's
    // contract above) and outlives the call.
    let ret = unsafe { ffi::lr_ibv_post_send(qp.as_ptr(), wr, &mut bad) };
    if ret != 0 {
        return Err(os_error(format!("ibv_post_send({op}, {len} bytes)"), ret));
    }
    Ok(())
}

fn poll(cq: &Cq, wc: &mut [ffi::ibv_wc]) -> Result<usize, IbvError> {
    let n = i32::try_from(wc.len()).unwrap_or(i32::MAX);
    // SAFETY: valid CQ; wc has room for n completions.
    let ret = unsafe { ffi::lr_ibv_poll_cq(cq.0.as_ptr(), n, wc.as_mut_ptr()) };
    if ret < 0 {
        return Err(os_error("ibv_poll_cq", -ret));
    }
    Ok(ret as usize)
}

impl Drop for RawQp {
    fn drop(&mut self) {
        for f in self.flows.drain(..) {
            // SAFETY: created by us, destroyed once, before the QP.
            unsafe { ffi::lr_ibv_destroy_flow(f.as_ptr()) };
        }
        // SAFETY: created by us; the CQs (fields) are destroyed after this.
        unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
    }
}

// ---- Batched sends (used by the `ibverbs` port) ----------------------------

/// One send of a batch: a frame at `offset..offset+len` of a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendSlot {
    /// Returned in the completion (when signaled).
    pub wr_id: u64,
    /// Offset into the memory region.
    pub offset: usize,
    /// Frame length.
    pub len: u32,
    /// Ask for a completion (a completion also retires every earlier
    /// unsignaled send of the queue: send queues complete in order).
    pub signaled: bool,
}

/// Scratch space for [`RawQp::post_send_batch`]: the chained work requests and
/// their scatter entries, allocated once.
#[derive(Default)]
pub struct SendBatch {
    wrs: Vec<ffi::ibv_send_wr>,
    sges: Vec<ffi::ibv_sge>,
}

// SAFETY: the raw pointers inside the work requests are rebuilt on every
// post and point only into this struct's own vectors during that call.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// Scratch for batches of up to `n` sends (larger batches grow it).
    pub fn with_capacity(n: usize) -> Self {
        SendBatch {
            wrs: Vec::with_capacity(n),
            sges: Vec::with_capacity(n),
        }
    }
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("capacity", &self.wrs.capacity())
            .finish()
    }
}

/// Whether a frame of `len` bytes is sent inline (copied into the work
/// request, so its buffer is free again as soon as the post returns).
pub fn sends_inline(len: u32, max_inline: u32) -> bool {
    len <= max_inline
}

impl RawQp {
    /// Posts `sends` of `mr` as one chained `ibv_post_send` (one doorbell);
    /// frames up to `max_inline` bytes go inline.
    pub fn post_send_batch(
        &mut self,
        mr: &MemoryRegion,
        batch: &mut SendBatch,
        sends: &[SendSlot],
    ) -> Result<(), IbvError> {
        if sends.is_empty() {
            return Ok(());
        }
        batch.wrs.clear();
        batch.sges.clear();
        for s in sends {
            batch.sges.push(mr.sge(s.offset, s.len)?);
        }
        for s in sends {
            let mut flags = 0;
            if sends_inline(s.len, self.cfg.max_inline) {
                flags |= ffi::IBV_SEND_INLINE;
            }
            if s.signaled {
                flags |= ffi::IBV_SEND_SIGNALED;
            }
            batch.wrs.push(ffi::ibv_send_wr {
                wr_id: s.wr_id,
                num_sge: 1,
                opcode: ffi::IBV_WR_SEND,
                send_flags: flags,
                ..Default::default()
            });
        }
        let sges = batch.sges.as_mut_ptr();
        let base = batch.wrs.as_mut_ptr();
        for i in 0..sends.len() {
            // SAFETY: i < len of both vectors, which are not resized while the
            // chain is in use.
            unsafe {
                (*base.add(i)).sg_list = sges.add(i);
                if i + 1 < sends.len() {
                    (*base.add(i)).next = base.add(i + 1);
                }
            }
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid chain of work requests whose sges lie in a
        // registered region (bounds-checked by `sge`); inline data is copied
        // during the call, the rest is read by the NIC before its completion,
        // and the caller keeps those bytes until then.
        let ret = unsafe { ffi::lr_ibv_post_send(self.qp.as_ptr(), base, &mut bad) };
        if ret != 0 {
            return Err(os_error(
                format!("ibv_post_send({} frames)", sends.len()),
                ret,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn flow_rule_layout_matches_the_kernel_abi() {
        let m = FlowMatch {
            dst_mac: [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03],
            dst_ip: Some(Ipv4Addr::new(239, 1, 2, 3)),
            dst_port: Some(7148),
        };
        let r = m.rule(1);
        let (size, specs, port) = (r.attr.size, r.attr.num_of_specs, r.attr.port);
        assert_eq!(size as usize, std::mem::size_of::<FlowRule>());
        assert_eq!((specs, port), (3, 1));
        let bytes: [u8; std::mem::size_of::<FlowRule>()] =
            // SAFETY: FlowRule is plain old data; reading its bytes is valid.
            unsafe { std::mem::transmute(r) };
        let ip_off = std::mem::size_of::<ffi::ibv_flow_attr>()
            + std::mem::size_of::<ffi::ibv_flow_spec_eth>();
        // The specs follow each other without padding; addresses and ports
        // are in wire (big-endian) order.
        let dst_ip = ip_off
            + std::mem::offset_of!(ffi::ibv_flow_spec_ipv4, val)
            + std::mem::offset_of!(ffi::ibv_flow_ipv4_filter, dst_ip);
        assert_eq!(&bytes[dst_ip..dst_ip + 4], &[239, 1, 2, 3]);
        assert_eq!(
            &bytes[dst_ip + 8..dst_ip + 12],
            &[0xff; 4],
            "mask follows val"
        );
        let udp_off = ip_off + std::mem::size_of::<ffi::ibv_flow_spec_ipv4>();
        let dst_port = udp_off
            + std::mem::offset_of!(ffi::ibv_flow_spec_tcp_udp, val)
            + std::mem::offset_of!(ffi::ibv_flow_tcp_udp_filter, dst_port);
        assert_eq!(&bytes[dst_port..dst_port + 2], &7148u16.to_be_bytes());
        assert_eq!(bytes[udp_off], ffi::IBV_FLOW_SPEC_UDP as u8);
        let eth = r.eth;
        assert_eq!(eth.val.dst_mac, m.dst_mac);

        let mac_only = FlowMatch {
            dst_ip: None,
            dst_port: None,
            ..m
        }
        .rule(2);
        let (size, specs) = (mac_only.attr.size, mac_only.attr.num_of_specs);
        assert_eq!(specs, 1);
        assert_eq!(
            size as usize,
            std::mem::size_of::<ffi::ibv_flow_attr>()
                + std::mem::size_of::<ffi::ibv_flow_spec_eth>()
        );
    }
}

// ---------------------------------------------------------------------------
// RC queue pairs for the RPC transport (rpc::transport::verbs), kept in their
// own file; they reuse the handles above.
// ---------------------------------------------------------------------------

#[path = "ibverbs_rc.rs"]
pub mod rc;
