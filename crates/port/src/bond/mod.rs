//! A bond: one port over several member ports (link aggregation).
//!
//! Modes:
//! - `balance`: every member whose link is up sends; a packet's member
//!   is chosen by its flow hash (IPv4 addresses and TCP/UDP ports, else
//!   the MAC addresses), so a flow stays on one member.
//! - `active-backup`: one member sends and receives; when its link goes
//!   down (or it fails) the first other member that is up takes over.
//! - `lacp`: IEEE 802.1AX (`lacp.rs`): LACPDUs on every member, the
//!   members whose partner is the aggregate's partner are selected, and
//!   those the partner is in synchronization with collect and distribute
//!   (by flow hash). A member whose partner falls silent leaves after the
//!   timeout (3 s at the fast rate); frames from members not collecting
//!   are dropped (counted). Slow Protocols frames are consumed, never
//!   delivered.
//!
//! Links are checked every `monitor_ms` (default 100): a member's
//! `link()`, and `take_error()` (a member reporting a fault counts as
//! down until its link says up again). Members join and leave at run
//! time (`add_member`, `remove_member`). Bond queue `q` is every member's
//! queue `q` (as many queues as the member with fewest; LACPDUs go out
//! on queue 0, and are taken from whichever queue they arrive on). A
//! loop that sleeps when idle sleeps on a bond queue through one epoll
//! descriptor over its members' wake-up descriptors (`rx_wake`); the
//! control work (links, LACP timers) runs when the loop wakes, at least
//! every `IdleOptions::max_sleep` (50 ms), well inside LACP's 1 s
//! period. Everything bad is counted in [`BondStats`]; nothing waits.

pub mod lacp;

use crate::{Batch, LinkStatus, Mempool, Port, PortError, QueueStats, RxWake};
use lacp::LacpPort;
use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Instant;

/// How a bond spreads traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Balance,
    ActiveBackup,
    Lacp,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Balance => "balance",
            Mode::ActiveBackup => "active-backup",
            Mode::Lacp => "lacp",
        }
    }
}

/// A bond's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BondOptions {
    pub mode: Mode,
    /// LACP: ask the partner for the short timeout (1 s PDUs, 3 s expiry).
    pub fast: bool,
    pub monitor_ms: u64,
    /// LACP system id (default: the first member's MAC).
    pub system: Option<[u8; 6]>,
}

impl Default for BondOptions {
    fn default() -> Self {
        BondOptions {
            mode: Mode::Lacp,
            fast: true,
            monitor_ms: 100,
            system: None,
        }
    }
}

/// A bond's own counters (beside the summed [`QueueStats`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BondStats {
    /// Frames dropped because their member was not collecting (LACP) or
    /// not the active one (active-backup).
    pub rx_not_collecting: u64,
    /// Slow Protocols frames consumed (in LACP mode).
    pub rx_lacp: u64,
    /// Of those, not a usable LACPDU.
    pub rx_lacp_bad: u64,
    pub tx_lacp: u64,
    /// LACPDUs a member refused or no buffer was free for.
    pub tx_lacp_dropped: u64,
    /// Faults members reported (`take_error`).
    pub member_errors: u64,
    /// Link changes seen by the monitor.
    pub link_changes: u64,
    /// Active-backup: times another member took over.
    pub failovers: u64,
    /// LACP: members whose partner is not the aggregate's (not selected).
    pub lacp_unselected: u64,
    pub joins: u64,
    pub leaves: u64,
}

struct Member {
    port: Box<dyn Port>,
    up: bool,
    failed: bool,
    lacp: LacpPort,
    /// Not selected, last time the selection ran.
    unselected: bool,
    /// Frames (not LACPDUs) delivered from it and sent on it.
    rx_data: u64,
    tx_data: u64,
}

impl Member {
    fn usable(&self) -> bool {
        self.up && !self.failed
    }
}

/// The bond port.
pub struct BondPort {
    name: String,
    opts: BondOptions,
    system: [u8; 6],
    members: Vec<Member>,
    next_port_number: u16,
    /// Members that send, in order.
    distributing: Vec<usize>,
    active: Option<usize>,
    outs: Vec<Batch>,
    ctl: Batch,
    pool: Mempool,
    rx_next: usize,
    next_control: u64,
    next_monitor: u64,
    /// Per queue.
    stats: Vec<QueueStats>,
    /// Receive and transmit queues (those of the member with fewest).
    rxq: usize,
    txq: usize,
    /// Per receive queue: the epoll set over its members' descriptors
    /// last handed to a loop (made again at each `rx_wake`: a member's
    /// descriptor appears when its peer connects).
    wake: RefCell<Vec<Option<OwnedFd>>>,
    bond: BondStats,
    clock: Box<dyn Fn() -> u64 + Send>,
}

/// Control work (timers, links, selection, LACPDUs) at most this often.
const CONTROL_NS: u64 = 10_000_000;

impl BondPort {
    /// A bond over `members` (at least one).
    pub fn new(
        name: &str,
        members: Vec<Box<dyn Port>>,
        opts: BondOptions,
    ) -> Result<BondPort, PortError> {
        let start = Instant::now();
        Self::with_clock(
            name,
            members,
            opts,
            Box::new(move || start.elapsed().as_nanos() as u64),
        )
    }

    /// The same, with a clock in nanoseconds (tests drive time).
    pub fn with_clock(
        name: &str,
        members: Vec<Box<dyn Port>>,
        opts: BondOptions,
        clock: Box<dyn Fn() -> u64 + Send>,
    ) -> Result<BondPort, PortError> {
        let Some(first) = members.first() else {
            return Err(PortError::config(name, "a bond needs at least one member"));
        };
        if opts.monitor_ms == 0 || opts.monitor_ms > 60_000 {
            return Err(PortError::config(
                name,
                "monitor_ms must be 1 to 60000 milliseconds",
            ));
        }
        let system = opts.system.unwrap_or_else(|| first.mac());
        if system[0] & 1 != 0 || system == [0; 6] {
            return Err(PortError::config(
                name,
                "the bond's system MAC must be a unicast, non-zero address",
            ));
        }
        let pool = first.pool().clone();
        let mut b = BondPort {
            name: name.to_string(),
            opts,
            system,
            members: Vec::new(),
            next_port_number: 1,
            distributing: Vec::new(),
            active: None,
            outs: Vec::new(),
            ctl: Batch::new(),
            pool,
            rx_next: 0,
            next_control: 0,
            next_monitor: 0,
            stats: Vec::new(),
            rxq: 1,
            txq: 1,
            wake: RefCell::new(Vec::new()),
            bond: BondStats::default(),
            clock,
        };
        for m in members {
            b.add_member(m);
        }
        b.bond.joins = 0;
        let now = (b.clock)();
        b.control(now);
        Ok(b)
    }

    /// Add a member (it joins as soon as its link is up and, with LACP,
    /// its partner agrees); returns its index.
    pub fn add_member(&mut self, port: Box<dyn Port>) -> usize {
        let now = (self.clock)();
        let number = self.next_port_number;
        self.next_port_number = self.next_port_number.wrapping_add(1).max(1);
        let up = port.link().up;
        let mut lacp = LacpPort::new(self.system, 1, number, self.opts.fast, now);
        lacp.set_enabled(up, now);
        self.members.push(Member {
            port,
            up,
            failed: false,
            lacp,
            unselected: false,
            rx_data: 0,
            tx_data: 0,
        });
        self.outs.push(Batch::new());
        self.bond.joins += 1;
        self.next_control = 0;
        self.next_monitor = 0;
        self.reselect();
        self.members_changed();
        self.members.len() - 1
    }

    /// Take member `i` out of the bond (its queued frames stay its own).
    pub fn remove_member(&mut self, i: usize) -> Option<Box<dyn Port>> {
        if i >= self.members.len() {
            return None;
        }
        let m = self.members.remove(i);
        self.outs.remove(i);
        self.bond.leaves += 1;
        self.active = match self.active {
            Some(a) if a == i => None,
            Some(a) if a > i => Some(a - 1),
            a => a,
        };
        self.rx_next = 0;
        self.reselect();
        self.members_changed();
        Some(m.port)
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }
    /// A member's port.
    pub fn member(&self, i: usize) -> Option<&dyn Port> {
        self.members.get(i).map(|m| &*m.port)
    }
    /// A member's LACP state.
    pub fn lacp(&self, i: usize) -> Option<&LacpPort> {
        self.members.get(i).map(|m| &m.lacp)
    }
    /// The members that send now.
    pub fn distributing(&self) -> &[usize] {
        &self.distributing
    }
    pub fn bond_stats(&self) -> BondStats {
        self.bond
    }
    pub fn system(&self) -> [u8; 6] {
        self.system
    }
    pub fn mode(&self) -> Mode {
        self.opts.mode
    }

    /// Queue counts again after members changed.
    fn members_changed(&mut self) {
        let fewest = |f: fn(&dyn Port) -> usize| {
            self.members
                .iter()
                .map(|m| f(&*m.port))
                .min()
                .unwrap_or(1)
                .max(1)
        };
        (self.rxq, self.txq) = (fewest(|p| p.rx_queues()), fewest(|p| p.tx_queues()));
        let queues = self.rxq.max(self.txq).max(self.stats.len());
        self.stats.resize(queues, QueueStats::default());
    }

    /// Timers, links, selection and LACPDUs, if due.
    fn poll_control(&mut self) {
        let now = (self.clock)();
        if now >= self.next_control {
            self.control(now);
        }
    }

    fn control(&mut self, now: u64) {
        self.next_control = now.saturating_add(CONTROL_NS);
        if now >= self.next_monitor {
            self.next_monitor = now.saturating_add(self.opts.monitor_ms * 1_000_000);
            for m in &mut self.members {
                if let Some(e) = m.port.take_error() {
                    tracing::warn!("bond member `{}`: {e}", m.port.name());
                    self.bond.member_errors += 1;
                    m.failed = true;
                }
                let up = m.port.link().up;
                if up != m.up {
                    self.bond.link_changes += 1;
                    m.up = up;
                    if up {
                        // A link that comes back clears an earlier fault.
                        m.failed = false;
                    }
                }
                let usable = m.usable();
                m.lacp.set_enabled(usable, now);
            }
        }
        if self.opts.mode == Mode::Lacp {
            for m in &mut self.members {
                m.lacp.tick(now);
            }
        }
        self.reselect();
        if self.opts.mode == Mode::Lacp {
            self.send_lacpdus(now);
        }
    }

    /// Which members send (and, with LACP, which are selected).
    fn reselect(&mut self) {
        self.distributing.clear();
        match self.opts.mode {
            Mode::Balance => {
                self.distributing
                    .extend((0..self.members.len()).filter(|&i| self.members[i].usable()));
            }
            Mode::ActiveBackup => {
                let keep = self.active.filter(|&a| self.members[a].usable());
                let active =
                    keep.or_else(|| (0..self.members.len()).find(|&i| self.members[i].usable()));
                if self.active.is_some() && active != self.active {
                    self.bond.failovers += 1;
                }
                if active.is_some() {
                    self.active = active;
                }
                self.distributing.extend(active);
            }
            Mode::Lacp => {
                // The aggregate's partner: that of the lowest member with one.
                let group = self.members.iter().find_map(|m| m.lacp.partner_group());
                for m in &mut self.members {
                    let g = m.lacp.partner_group();
                    let selected = g.is_some() && g == group;
                    let unselected = g.is_some() && !selected;
                    if unselected && !m.unselected {
                        self.bond.lacp_unselected += 1;
                    }
                    m.unselected = unselected;
                    m.lacp.set_selected(selected);
                }
                self.distributing.extend(
                    (0..self.members.len()).filter(|&i| {
                        self.members[i].usable() && self.members[i].lacp.distributing()
                    }),
                );
            }
        }
    }

    fn send_lacpdus(&mut self, now: u64) {
        for m in &mut self.members {
            let Some(pdu) = m.lacp.take_tx(now) else {
                continue;
            };
            let Some(mut p) = m.port.pool().alloc() else {
                self.bond.tx_lacp_dropped += 1;
                continue;
            };
            let mut frame = [0u8; lacp::FRAME_LEN];
            lacp::build(m.port.mac(), &pdu, &mut frame);
            if p.copy_from(&frame).is_err() {
                self.bond.tx_lacp_dropped += 1;
                continue;
            }
            let _ = self.ctl.push(p);
            if m.port.tx_batch(0, &mut self.ctl) == 1 {
                self.bond.tx_lacp += 1;
            } else {
                m.port.tx_refused(0, self.ctl.len() as u64);
                self.ctl.clear();
                self.bond.tx_lacp_dropped += 1;
            }
        }
    }

    /// The frames of member `i` added to `batch` from `from`: LACPDUs
    /// taken out (and handled), frames of a member not collecting dropped.
    fn filter_rx(&mut self, i: usize, batch: &mut Batch, from: usize) {
        let lacp_mode = self.opts.mode == Mode::Lacp;
        let collecting = match self.opts.mode {
            Mode::Balance => true,
            Mode::ActiveBackup => self.active == Some(i),
            Mode::Lacp => self.members[i].lacp.collecting(),
        };
        let clean = collecting
            && !(lacp_mode
                && batch.as_slice()[from..]
                    .iter()
                    .any(|p| lacp::is_slow(p.data())));
        if clean {
            return;
        }
        let now = (self.clock)();
        let mut k = 0;
        let (bond, member) = (&mut self.bond, &mut self.members[i]);
        batch.retain(|p| {
            k += 1;
            if k <= from {
                return true;
            }
            if lacp_mode && lacp::is_slow(p.data()) {
                bond.rx_lacp += 1;
                match lacp::parse(p.data()) {
                    Ok(pdu) => member.lacp.receive(&pdu, now),
                    Err(lacp::LacpError::OtherSubtype(_)) => {}
                    Err(_) => {
                        bond.rx_lacp_bad += 1;
                        member.lacp.counters.rx_bad += 1;
                    }
                }
                return false;
            }
            if !collecting {
                bond.rx_not_collecting += 1;
            }
            collecting
        });
        if lacp_mode {
            // A PDU may change the selection or ask for an answer.
            self.reselect();
            self.send_lacpdus(now);
        }
    }
}

impl BondPort {
    /// Data frames (not LACPDUs) member `i` delivered and sent.
    pub fn member_data(&self, i: usize) -> Option<(u64, u64)> {
        self.members.get(i).map(|m| (m.rx_data, m.tx_data))
    }
}

impl Drop for BondPort {
    /// One line per member, for logs and the guest test.
    fn drop(&mut self) {
        for m in &self.members {
            let c = m.lacp.counters;
            tracing::info!(
                "bond `{}`: bond member {} rx={} tx={} lacp_rx={} lacp_tx={} lacp_bad={} \
                 partner_changes={} expired={} partner={:02x?}",
                self.name,
                m.port.name(),
                m.rx_data,
                m.tx_data,
                c.rx_pdus,
                c.tx_pdus,
                c.rx_bad,
                c.partner_changes,
                c.expired,
                m.lacp.partner.system
            );
        }
        tracing::info!("bond `{}`: {:?}", self.name, self.bond);
    }
}

/// The flow hash a member is chosen by.
pub fn flow_hash(d: &[u8]) -> u64 {
    use nfkit_packet::mix;
    if d.len() >= 34 && d[12..14] == [0x08, 0x00] && d[14] >> 4 == 4 {
        let ihl = ((d[14] & 0x0f) as usize) * 4;
        let addrs = u64::from_be_bytes(d[26..34].try_into().unwrap_or([0; 8]));
        let proto = d[23];
        let first_fragment = u16::from_be_bytes([d[20], d[21]]) & 0x1fff == 0;
        let l4 = 14 + ihl;
        let ports = if (proto == 6 || proto == 17) && first_fragment && d.len() >= l4 + 4 {
            u32::from_be_bytes([d[l4], d[l4 + 1], d[l4 + 2], d[l4 + 3]]) as u64
        } else {
            0
        };
        return mix(mix(addrs) ^ (ports << 8 | proto as u64));
    }
    if d.len() >= 12 {
        let mut a = [0u8; 8];
        a[..6].copy_from_slice(&d[0..6]);
        let mut b = [0u8; 8];
        b[..6].copy_from_slice(&d[6..12]);
        return mix(mix(u64::from_le_bytes(a)) ^ u64::from_le_bytes(b));
    }
    0
}

impl Port for BondPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_queues(&self) -> usize {
        self.rxq
    }
    fn tx_queues(&self) -> usize {
        self.txq
    }
    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        if queue >= self.rxq {
            return 0;
        }
        self.poll_control();
        let before = batch.len();
        let n = self.members.len();
        for k in 0..n {
            if batch.room() == 0 {
                break;
            }
            let i = (self.rx_next + k) % n;
            if !self.members[i].usable() {
                continue;
            }
            let from = batch.len();
            if self.members[i].port.rx_batch(queue, batch) > 0 {
                self.filter_rx(i, batch, from);
                self.members[i].rx_data += (batch.len() - from) as u64;
            }
        }
        if n > 0 {
            self.rx_next = (self.rx_next + 1) % n;
        }
        let got = batch.len() - before;
        let stats = &mut self.stats[queue];
        stats.rx_packets += got as u64;
        stats.rx_bytes += batch.as_slice()[before..]
            .iter()
            .map(|p| p.pkt_len() as u64)
            .sum::<u64>();
        got
    }
    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        if queue >= self.txq || batch.is_empty() {
            return 0;
        }
        self.poll_control();
        let bytes: u64 = batch.iter().map(|p| p.pkt_len() as u64).sum();
        let sent = match self.distributing.len() {
            0 => 0,
            1 => {
                let before = batch.len();
                let m = &mut self.members[self.distributing[0]];
                m.port.tx_batch(queue, batch);
                m.tx_data += (before - batch.len()) as u64;
                before - batch.len()
            }
            k => {
                for p in batch.drain() {
                    let m = self.distributing[(flow_hash(p.data()) % k as u64) as usize];
                    // At most MAX_BATCH packets in all: no member's batch overflows.
                    let _ = self.outs[m].push(p);
                }
                let mut sent = 0;
                for &m in &self.distributing {
                    let out = &mut self.outs[m];
                    if out.is_empty() {
                        continue;
                    }
                    let before = out.len();
                    let member = &mut self.members[m];
                    member.port.tx_batch(queue, out);
                    member.tx_data += (before - out.len()) as u64;
                    sent += before - out.len();
                    for p in out.drain() {
                        let _ = batch.push(p);
                    }
                }
                sent
            }
        };
        let left: u64 = batch.iter().map(|p| p.pkt_len() as u64).sum();
        let stats = &mut self.stats[queue];
        stats.tx_packets += sent as u64;
        stats.tx_bytes += bytes - left;
        sent
    }
    fn tx_refused(&mut self, queue: usize, n: u64) {
        if let Some(s) = self.stats.get_mut(queue) {
            s.tx_dropped += n;
        }
    }
    fn queue_stats(&self, queue: usize) -> QueueStats {
        let mut s = self.stats.get(queue).copied().unwrap_or_default();
        if queue == 0 {
            s.rx_dropped += self.bond.rx_not_collecting;
            s.rx_errors += self.bond.rx_lacp_bad;
        }
        s
    }
    fn link(&self) -> LinkStatus {
        LinkStatus {
            up: !self.distributing.is_empty(),
            speed_mbps: None,
        }
    }
    fn mac(&self) -> [u8; 6] {
        self.system
    }
    fn max_frame(&self) -> usize {
        self.members
            .iter()
            .map(|m| m.port.max_frame())
            .min()
            .unwrap_or_else(|| self.pool.data_room())
    }
    fn pool(&self) -> &Mempool {
        &self.pool
    }
    fn flush(&mut self) -> Result<(), PortError> {
        for m in &mut self.members {
            m.port.flush()?;
        }
        Ok(())
    }
    /// An epoll set over the members' descriptors for `queue`, made
    /// again at each call (once per sleep, not per packet): polling if a
    /// member cannot wake a loop, never if none will receive.
    fn rx_wake(&self, queue: usize) -> RxWake {
        if queue >= self.rxq {
            return RxWake::Never;
        }
        let mut fds = Vec::new();
        for m in &self.members {
            match m.port.rx_wake(queue) {
                RxWake::Poll => return RxWake::Poll,
                RxWake::Never => {}
                RxWake::Fd(fd) => fds.push(fd),
            }
        }
        if fds.is_empty() {
            return RxWake::Never;
        }
        let set = crate::sys::epoll().and_then(|ep| {
            for &fd in &fds {
                crate::sys::epoll_add(ep.as_fd(), fd)?;
            }
            Ok(ep)
        });
        match set {
            Ok(ep) => {
                let fd = ep.as_raw_fd();
                let mut wake = self.wake.borrow_mut();
                if wake.len() <= queue {
                    wake.resize_with(queue + 1, || None);
                }
                wake[queue] = Some(ep);
                RxWake::Fd(fd)
            }
            Err(e) => {
                tracing::warn!(
                    "bond `{}`: no epoll set for queue {queue} ({e}): polling",
                    self.name
                );
                RxWake::Poll
            }
        }
    }
    fn rx_arm(&mut self, queue: usize) -> bool {
        for i in 0..self.members.len() {
            if !self.members[i].port.rx_arm(queue) {
                for m in &mut self.members[..i] {
                    m.port.rx_disarm(queue);
                }
                return false;
            }
        }
        true
    }
    fn rx_disarm(&mut self, queue: usize) {
        for m in &mut self.members {
            m.port.rx_disarm(queue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lacp::{self, Lacpdu, PortInfo};
    use super::*;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    type Queue = Arc<Mutex<VecDeque<Vec<u8>>>>;

    /// One end of a cable: frames sent appear at the other end unless the
    /// cable is cut; its link state and a fault can be set from outside.
    struct End {
        name: String,
        mac: [u8; 6],
        pool: Mempool,
        rx: Queue,
        tx: Queue,
        cut: Arc<AtomicBool>,
        up: Arc<AtomicBool>,
        fault: Arc<AtomicBool>,
        sent: u64,
        received: u64,
    }

    struct Cable {
        to_a: Queue,
        cut: Arc<AtomicBool>,
        up: Arc<AtomicBool>,
        fault: Arc<AtomicBool>,
    }

    fn cable(a: [u8; 6], b: [u8; 6], pool: &Mempool) -> (End, End, Cable) {
        let (q1, q2): (Queue, Queue) = Default::default();
        let c = Cable {
            to_a: q1.clone(),
            cut: Default::default(),
            up: Arc::new(AtomicBool::new(true)),
            fault: Default::default(),
        };
        let end = |mac: [u8; 6], rx: &Queue, tx: &Queue, fault: &Arc<AtomicBool>| End {
            name: format!("end{:x}", mac[5]),
            mac,
            pool: pool.clone(),
            rx: rx.clone(),
            tx: tx.clone(),
            cut: c.cut.clone(),
            up: c.up.clone(),
            fault: fault.clone(),
            sent: 0,
            received: 0,
        };
        // Only a's end reports the fault.
        let a_end = end(a, &q1, &q2, &c.fault);
        (a_end, end(b, &q2, &q1, &Default::default()), c)
    }

    impl Port for End {
        fn name(&self) -> &str {
            &self.name
        }
        fn rx_batch(&mut self, _: usize, batch: &mut Batch) -> usize {
            let mut n = 0;
            while batch.room() > 0 {
                let Some(f) = self.rx.lock().unwrap().pop_front() else {
                    break;
                };
                let mut p = self.pool.alloc().unwrap();
                p.copy_from(&f).unwrap();
                let _ = batch.push(p);
                n += 1;
            }
            self.received += n as u64;
            n
        }
        fn tx_batch(&mut self, _: usize, batch: &mut Batch) -> usize {
            let n = batch.len();
            for p in batch.drain() {
                if !self.cut.load(Ordering::SeqCst) {
                    self.tx.lock().unwrap().push_back(p.data().to_vec());
                }
            }
            self.sent += n as u64;
            n
        }
        fn queue_stats(&self, _: usize) -> QueueStats {
            QueueStats {
                rx_packets: self.received,
                tx_packets: self.sent,
                ..QueueStats::default()
            }
        }
        fn link(&self) -> LinkStatus {
            LinkStatus {
                up: self.up.load(Ordering::SeqCst),
                speed_mbps: None,
            }
        }
        fn mac(&self) -> [u8; 6] {
            self.mac
        }
        fn pool(&self) -> &Mempool {
            &self.pool
        }
        fn take_error(&mut self) -> Option<PortError> {
            self.fault
                .swap(false, Ordering::SeqCst)
                .then(|| PortError::config(&self.name, "vanished"))
        }
    }

    fn pool() -> Mempool {
        crate::software_pool("bond-test", 4096).unwrap()
    }

    fn udp(flow: u16) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&flow.to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        f
    }

    struct Pair {
        a: BondPort,
        b: BondPort,
        cables: Vec<Cable>,
        clock: Arc<AtomicU64>,
    }

    /// Two bonds over `n` cables, on one virtual clock.
    fn pair(mode: Mode, n: usize) -> Pair {
        let pool = pool();
        let clock = Arc::new(AtomicU64::new(1));
        let (mut am, mut bm, mut cables) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n as u8 {
            let (x, y, c) = cable([2, 0, 0, 0, 1, i], [2, 0, 0, 0, 2, i], &pool);
            am.push(Box::new(x) as Box<dyn Port>);
            bm.push(Box::new(y) as Box<dyn Port>);
            cables.push(c);
        }
        let opts = BondOptions {
            mode,
            ..BondOptions::default()
        };
        let ck = |c: &Arc<AtomicU64>| -> Box<dyn Fn() -> u64 + Send> {
            let c = c.clone();
            Box::new(move || c.load(Ordering::SeqCst))
        };
        Pair {
            a: BondPort::with_clock("a", am, opts.clone(), ck(&clock)).unwrap(),
            b: BondPort::with_clock("b", bm, opts, ck(&clock)).unwrap(),
            cables,
            clock,
        }
    }

    impl Pair {
        /// `ms` of time in 10 ms steps, both bonds polled; a's frames
        /// (`per_step` a step, flows in turn) counted as received by b.
        fn run(&mut self, ms: u64, per_step: usize) -> (u64, u64) {
            let (mut sent, mut got) = (0, 0);
            let mut flow = 0u16;
            for _ in 0..ms / 10 {
                self.clock.fetch_add(10_000_000, Ordering::SeqCst);
                let mut out = Batch::new();
                for _ in 0..per_step {
                    let mut p = self.a.pool().alloc().unwrap();
                    p.copy_from(&udp(flow)).unwrap();
                    flow = flow.wrapping_add(1);
                    let _ = out.push(p);
                }
                sent += self.a.tx_batch(0, &mut out) as u64;
                out.clear();
                let mut b = Batch::new();
                while self.b.rx_batch(0, &mut b) > 0 {
                    got += b.len() as u64;
                    b.clear();
                }
                while self.a.rx_batch(0, &mut b) > 0 {
                    b.clear();
                }
            }
            (sent, got)
        }
    }

    #[test]
    fn lacp_aggregates_balances_and_survives_a_silent_member() {
        let mut p = pair(Mode::Lacp, 2);
        p.run(1_000, 0);
        assert_eq!(p.a.distributing(), &[0, 1]);
        assert_eq!(p.b.distributing(), &[0, 1]);
        let l = p.a.lacp(0).unwrap();
        assert_eq!(l.partner.system, p.b.system());
        assert!(l.collecting() && !l.is_defaulted());
        // Both links carry traffic, nothing lost.
        let (sent, got) = p.run(500, 32);
        assert_eq!(sent, got);
        let used: Vec<u64> = (0..2)
            .map(|i| p.a.member(i).unwrap().stats().tx_packets)
            .collect();
        assert!(used.iter().all(|&u| u > sent / 4), "{used:?}");
        // Member 1's cable goes silent (both ways, link still up, as a
        // guest's `ip link set eth1 down`): it leaves within 3 s.
        p.cables[1].cut.store(true, Ordering::SeqCst);
        let (sent, got) = p.run(3_100, 32);
        assert_eq!(p.a.distributing(), &[0]);
        let lost = sent - got;
        // At most 3 s of member 1's half of the offered packets.
        assert!(lost <= 3 * 100 * 32 / 2 + 32, "lost {lost}");
        let (sent, got) = p.run(500, 32);
        assert_eq!(sent, got, "no loss once it left");
        assert_eq!(p.a.lacp(1).unwrap().counters.expired, 1);
        // It comes back and rejoins.
        p.cables[1].cut.store(false, Ordering::SeqCst);
        p.run(1_500, 0);
        assert_eq!(p.a.distributing(), &[0, 1]);
        assert_eq!(p.a.bond_stats().rx_lacp_bad, 0);
    }

    #[test]
    fn lying_flapping_and_malformed_lacpdus_are_counted_without_a_stall() {
        let mut p = pair(Mode::Lacp, 2);
        p.run(1_000, 0);
        assert_eq!(p.a.distributing(), &[0, 1]);
        let liar = |system: [u8; 6], key: u16| {
            let pdu = Lacpdu {
                actor: PortInfo {
                    system_priority: 1,
                    system,
                    key,
                    port_priority: 1,
                    port: 9,
                    state: lacp::state::ACTIVITY
                        | lacp::state::AGGREGATION
                        | lacp::state::SYNCHRONIZATION,
                },
                partner: PortInfo::default(),
                collector_max_delay: 0,
            };
            let mut f = [0u8; lacp::FRAME_LEN];
            lacp::build(system, &pdu, &mut f);
            f.to_vec()
        };
        // Member 1 hears another system, again and again with new keys:
        // it leaves the aggregate (counted), member 0 carries on.
        for k in 0..50u16 {
            p.cables[1].cut.store(true, Ordering::SeqCst);
            // b's frames on cable 1 are dropped; a hears the liar instead.
            inject(&p, 1, liar([2, 9, 9, 9, 9, 9], k));
            p.run(20, 4);
        }
        assert_eq!(p.a.distributing(), &[0]);
        let c = p.a.lacp(1).unwrap().counters;
        assert!(c.partner_changes >= 49, "{c:?}");
        assert!(p.a.bond_stats().lacp_unselected >= 1);
        // Malformed Slow Protocols frames: counted, never delivered.
        let mut short = liar([2, 9, 9, 9, 9, 9], 1);
        short.truncate(60);
        inject(&p, 0, short);
        let mut bad_tlv = liar([2, 9, 9, 9, 9, 9], 1);
        bad_tlv[14 + 3] = 7;
        inject(&p, 0, bad_tlv);
        let before = p.a.stats().rx_packets;
        p.run(20, 0);
        assert_eq!(p.a.bond_stats().rx_lacp_bad, 2);
        assert_eq!(p.a.stats().rx_packets, before);
        // The liar stops: member 1 rejoins the real partner.
        p.cables[1].cut.store(false, Ordering::SeqCst);
        p.run(8_000, 0);
        assert_eq!(p.a.distributing(), &[0, 1]);
    }

    /// A frame arriving at bond a's member `i`, as if from its cable.
    fn inject(p: &Pair, i: usize, frame: Vec<u8>) {
        p.cables[i].to_a.lock().unwrap().push_back(frame);
    }

    #[test]
    fn active_backup_fails_over_on_link_down_and_member_faults() {
        let mut p = pair(Mode::ActiveBackup, 2);
        let (sent, got) = p.run(100, 8);
        assert_eq!((sent, got), (80, 80));
        assert_eq!(p.a.distributing(), &[0]);
        p.cables[0].up.store(false, Ordering::SeqCst);
        p.run(200, 0);
        assert_eq!(p.a.distributing(), &[1]);
        assert_eq!(p.a.bond_stats().failovers, 1);
        let (sent, got) = p.run(100, 8);
        assert_eq!(sent, got);
        // The new active member reports a fault (vanished): no member left.
        p.cables[1].fault.store(true, Ordering::SeqCst);
        p.run(200, 0);
        assert_eq!(p.a.bond_stats().member_errors, 1);
        assert!(p.a.distributing().is_empty());
        let mut out = Batch::new();
        let _ = out.push(p.a.pool().alloc().unwrap());
        assert_eq!(p.a.tx_batch(0, &mut out), 0, "refused, left to the caller");
        out.clear();
        // Members leave and join at run time.
        p.cables[0].up.store(true, Ordering::SeqCst);
        p.run(200, 0);
        assert_eq!(p.a.distributing(), &[0]);
        let gone = p.a.remove_member(0).unwrap();
        assert_eq!(gone.name(), "end0");
        p.run(200, 0);
        assert!(p.a.distributing().is_empty());
        p.a.add_member(gone);
        p.run(200, 0);
        assert_eq!(p.a.members(), 2);
        assert_eq!(p.a.distributing().len(), 1);
        assert_eq!(p.a.bond_stats().leaves, 1);
    }

    #[test]
    fn balance_spreads_flows_and_keeps_each_on_one_member() {
        let mut p = pair(Mode::Balance, 3);
        let (sent, got) = p.run(300, 30);
        assert_eq!(sent, got);
        for i in 0..3 {
            let tx = p.a.member(i).unwrap().stats().tx_packets;
            assert!(tx > sent / 6, "member {i} sent {tx} of {sent}");
        }
        let h = flow_hash(&udp(7));
        assert_eq!(h, flow_hash(&udp(7)));
        assert_ne!(h, flow_hash(&udp(8)));
    }

    #[test]
    fn bond_specs_parse_and_print_back() {
        let s = "bond:mode=lacp,rate=slow,members=null:+null:size=64";
        let spec: crate::PortSpec = s.parse().unwrap();
        assert_eq!(spec.to_string(), s);
        let port = crate::open(&spec, &crate::OpenOptions::default()).unwrap();
        assert_eq!(port.name(), s);
        for bad in [
            "bond:mode=lacp",
            "bond:mode=x,members=null:",
            "bond:members=null:+nope",
            "bond:rate=medium,members=null:",
            "bond:system=01:00:00:00:00:01,members=null:",
            "bond:members=bond:members=null:",
            "bond:members=tap:t0+tap:t0",
        ] {
            assert!(bad.parse::<crate::PortSpec>().is_err(), "{bad}");
        }
    }

    /// A member with two queues, each with its own frames and eventfd (a
    /// frame "arrives" by being queued and the eventfd written).
    struct Multi {
        pool: Mempool,
        rx: Arc<Mutex<[VecDeque<Vec<u8>>; 2]>>,
        fds: [OwnedFd; 2],
    }

    /// The far side of a [`Multi`].
    struct Sender(Arc<Mutex<[VecDeque<Vec<u8>>; 2]>>, [OwnedFd; 2]);

    impl Sender {
        fn arrive(&self, q: usize, f: Vec<u8>) {
            self.0.lock().unwrap()[q].push_back(f);
            let mut file = std::fs::File::from(self.1[q].try_clone().unwrap());
            std::io::Write::write_all(&mut file, &1u64.to_ne_bytes()).unwrap();
        }
    }

    fn multi(pool: &Mempool) -> (Multi, Sender) {
        let fds = [
            crate::sys::eventfd().unwrap(),
            crate::sys::eventfd().unwrap(),
        ];
        let clones = [fds[0].try_clone().unwrap(), fds[1].try_clone().unwrap()];
        let rx = Arc::new(Mutex::new(Default::default()));
        let m = Multi {
            pool: pool.clone(),
            rx: rx.clone(),
            fds,
        };
        (m, Sender(rx, clones))
    }

    impl Port for Multi {
        fn name(&self) -> &str {
            "multi"
        }
        fn rx_queues(&self) -> usize {
            2
        }
        fn tx_queues(&self) -> usize {
            2
        }
        fn rx_batch(&mut self, q: usize, batch: &mut Batch) -> usize {
            if crate::idle::readable_now(self.fds[q].as_raw_fd()) {
                let mut b = [0u8; 8];
                let _ = std::io::Read::read(
                    &mut std::fs::File::from(self.fds[q].try_clone().unwrap()),
                    &mut b,
                );
            }
            let mut n = 0;
            while let Some(f) = self.rx.lock().unwrap()[q].pop_front() {
                let mut p = self.pool.alloc().unwrap();
                p.copy_from(&f).unwrap();
                let _ = batch.push(p);
                n += 1;
            }
            n
        }
        fn tx_batch(&mut self, _: usize, batch: &mut Batch) -> usize {
            let n = batch.len();
            batch.clear();
            n
        }
        fn queue_stats(&self, _: usize) -> QueueStats {
            QueueStats::default()
        }
        fn mac(&self) -> [u8; 6] {
            [2, 0, 0, 0, 0, 9]
        }
        fn pool(&self) -> &Mempool {
            &self.pool
        }
        fn rx_wake(&self, q: usize) -> RxWake {
            RxWake::Fd(self.fds[q].as_raw_fd())
        }
    }

    #[test]
    fn every_member_queue_is_a_bond_queue_and_wakes_a_sleeping_loop() {
        let pool = pool();
        let ((m0, _s0), (m1, s1)) = (multi(&pool), multi(&pool));
        let members: Vec<Box<dyn Port>> = vec![Box::new(m0), Box::new(m1)];
        let opts = BondOptions {
            mode: Mode::Balance,
            ..BondOptions::default()
        };
        let mut bond = BondPort::new("b", members, opts).unwrap();
        assert_eq!((bond.rx_queues(), bond.tx_queues()), (2, 2));
        let RxWake::Fd(fd1) = bond.rx_wake(1) else {
            panic!("queue 1 should wake a loop");
        };
        assert!(bond.rx_arm(1));
        assert!(!crate::idle::readable_now(fd1), "nothing arrived yet");
        // A frame on the second member's queue 1 wakes queue 1 only.
        let RxWake::Fd(fd0) = bond.rx_wake(0) else {
            panic!("queue 0 should wake a loop");
        };
        s1.arrive(1, udp(1));
        assert!(crate::idle::readable_now(fd1));
        assert!(!crate::idle::readable_now(fd0));
        bond.rx_disarm(1);
        let mut b = Batch::new();
        assert_eq!(bond.rx_batch(0, &mut b), 0);
        assert_eq!(bond.rx_batch(1, &mut b), 1);
        assert!(!crate::idle::readable_now(fd1), "read: quiet again");
        assert_eq!(bond.queue_stats(1).rx_packets, 1);
        // Sending on queue 1 uses the members' queue 1.
        let mut out = Batch::new();
        for f in 0..16 {
            let mut p = pool.alloc().unwrap();
            p.copy_from(&udp(f)).unwrap();
            let _ = out.push(p);
        }
        assert_eq!(bond.tx_batch(1, &mut out), 16);
        assert_eq!(bond.queue_stats(1).tx_packets, 16);
        assert_eq!(bond.rx_batch(2, &mut b), 0, "no third queue");
        // A member that cannot wake a loop makes the bond poll.
        let (end, _other, _cable) = cable([2, 0, 0, 0, 0, 7], [2, 0, 0, 0, 0, 8], &pool);
        bond.add_member(Box::new(end));
        assert_eq!(bond.rx_wake(0), RxWake::Poll);
    }
}
