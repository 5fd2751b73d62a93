//! LACP (IEEE 802.1AX-2014 §6.4): the LACPDU and one aggregation port's
//! state, enough to aggregate with Linux's `bonding` (mode 802.3ad).
//!
//! An LACPDU is 110 bytes after the Ethernet header, sent to the Slow
//! Protocols address 01:80:c2:00:00:02 with EtherType 0x8809, subtype 1:
//! version, then three TLVs (actor information 20 bytes, partner
//! information 20 bytes, collector information 16 bytes) and a
//! terminator with 50 reserved bytes.
//!
//! The machines, condensed (every decision a pure function of the
//! received PDUs, the port's link and the time given in nanoseconds):
//! - receive (§6.4.12): a PDU records the partner's actor information as
//!   this port's partner and restarts `current_while` (3 s with the short
//!   timeout, 90 s with the long one); when it runs out the partner is
//!   expired (its synchronization cleared, short timeout), and after a
//!   second period defaulted (no partner): the port leaves the aggregate.
//!   A PDU whose view of this port differs from this port's state asks
//!   for a transmission (NTT).
//! - periodic transmission (§6.4.13): every 1 s while the partner asks
//!   for the short timeout (Linux's `lacp_rate fast`) or this port is
//!   configured fast, else every 30 s; at most 3 PDUs a second (§6.4.16).
//! - selection and mux (§6.4.14, §6.4.15, coupled control): the bond
//!   selects the ports whose partner is the aggregate's partner; a
//!   selected port is in synchronization, and collects and distributes
//!   once its partner says it is in synchronization with it too.

/// The Slow Protocols multicast address.
pub const SLOW_PROTOCOLS_MAC: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x02];
pub const ETHERTYPE_SLOW: u16 = 0x8809;
pub const SUBTYPE_LACP: u8 = 1;
/// The LACPDU after the Ethernet header.
pub const LACPDU_LEN: usize = 110;
/// A whole LACP frame (no FCS).
pub const FRAME_LEN: usize = 14 + LACPDU_LEN;

pub const FAST_PERIOD_NS: u64 = 1_000_000_000;
pub const SLOW_PERIOD_NS: u64 = 30_000_000_000;
pub const SHORT_TIMEOUT_NS: u64 = 3 * FAST_PERIOD_NS;
pub const LONG_TIMEOUT_NS: u64 = 3 * SLOW_PERIOD_NS;
/// Most PDUs a port sends in one fast period.
pub const MAX_TX_PER_PERIOD: u32 = 3;

/// Port state bits (§6.4.2.3).
pub mod state {
    pub const ACTIVITY: u8 = 0x01;
    pub const TIMEOUT: u8 = 0x02;
    pub const AGGREGATION: u8 = 0x04;
    pub const SYNCHRONIZATION: u8 = 0x08;
    pub const COLLECTING: u8 = 0x10;
    pub const DISTRIBUTING: u8 = 0x20;
    pub const DEFAULTED: u8 = 0x40;
    pub const EXPIRED: u8 = 0x80;
}

/// One side's information in an LACPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortInfo {
    pub system_priority: u16,
    pub system: [u8; 6],
    pub key: u16,
    pub port_priority: u16,
    pub port: u16,
    pub state: u8,
}

impl PortInfo {
    /// The same port of the same system and key, aggregatable alike
    /// (what §6.4.9's recordPDU matches; Linux's `__choose_matched`).
    pub fn same_port(&self, o: &PortInfo) -> bool {
        self.system_priority == o.system_priority
            && self.system == o.system
            && self.key == o.key
            && self.port_priority == o.port_priority
            && self.port == o.port
            && (self.state ^ o.state) & state::AGGREGATION == 0
    }
    /// The partner system an aggregate is formed with.
    pub fn link_group(&self) -> (u16, [u8; 6], u16) {
        (self.system_priority, self.system, self.key)
    }
    fn read(b: &[u8]) -> PortInfo {
        PortInfo {
            system_priority: u16::from_be_bytes([b[0], b[1]]),
            system: [b[2], b[3], b[4], b[5], b[6], b[7]],
            key: u16::from_be_bytes([b[8], b[9]]),
            port_priority: u16::from_be_bytes([b[10], b[11]]),
            port: u16::from_be_bytes([b[12], b[13]]),
            state: b[14],
        }
    }
    fn write(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&self.system_priority.to_be_bytes());
        b[2..8].copy_from_slice(&self.system);
        b[8..10].copy_from_slice(&self.key.to_be_bytes());
        b[10..12].copy_from_slice(&self.port_priority.to_be_bytes());
        b[12..14].copy_from_slice(&self.port.to_be_bytes());
        b[14] = self.state;
        b[15..18].fill(0);
    }
}

/// A parsed LACPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lacpdu {
    pub actor: PortInfo,
    pub partner: PortInfo,
    /// Tens of microseconds.
    pub collector_max_delay: u16,
}

/// Why a frame is not a usable LACPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LacpError {
    #[error("not a Slow Protocols frame")]
    NotSlow,
    #[error("Slow Protocols subtype {0} is not LACP")]
    OtherSubtype(u8),
    #[error("LACPDU of {0} bytes is shorter than {LACPDU_LEN}")]
    Short(usize),
    #[error("LACP version 0")]
    Version,
    #[error("TLV {tlv} has type {got} and length {len} (expected type {want}, length {want_len})")]
    Tlv {
        tlv: &'static str,
        got: u8,
        len: u8,
        want: u8,
        want_len: u8,
    },
    #[error("the actor's system is a multicast address")]
    MulticastSystem,
}

/// Whether a frame is a Slow Protocols frame (LACP, marker, OAM): a bond
/// consumes those rather than deliver them.
pub fn is_slow(frame: &[u8]) -> bool {
    frame.len() >= 14 && u16::from_be_bytes([frame[12], frame[13]]) == ETHERTYPE_SLOW
}

/// Parse the LACPDU of an Ethernet frame (no VLAN tag, as 802.1AX sends
/// them). Later versions' extra bytes are ignored (§6.4.2.4's rule for
/// version > 1); the TLVs must be where version 1 puts them.
pub fn parse(frame: &[u8]) -> Result<Lacpdu, LacpError> {
    if !is_slow(frame) {
        return Err(LacpError::NotSlow);
    }
    let p = &frame[14..];
    if p.is_empty() {
        return Err(LacpError::Short(0));
    }
    if p[0] != SUBTYPE_LACP {
        return Err(LacpError::OtherSubtype(p[0]));
    }
    if p.len() < LACPDU_LEN {
        return Err(LacpError::Short(p.len()));
    }
    if p[1] == 0 {
        return Err(LacpError::Version);
    }
    let tlv = |name, at: usize, want: u8, want_len: u8| {
        if p[at] == want && p[at + 1] == want_len {
            Ok(())
        } else {
            Err(LacpError::Tlv {
                tlv: name,
                got: p[at],
                len: p[at + 1],
                want,
                want_len,
            })
        }
    };
    tlv("actor", 2, 1, 20)?;
    tlv("partner", 22, 2, 20)?;
    tlv("collector", 42, 3, 16)?;
    tlv("terminator", 58, 0, 0)?;
    let actor = PortInfo::read(&p[4..22]);
    if actor.system[0] & 1 != 0 {
        return Err(LacpError::MulticastSystem);
    }
    Ok(Lacpdu {
        actor,
        partner: PortInfo::read(&p[24..42]),
        collector_max_delay: u16::from_be_bytes([p[44], p[45]]),
    })
}

/// Write the frame of `pdu` from `src` into `out` (at least
/// [`FRAME_LEN`] bytes); returns its length.
pub fn build(src: [u8; 6], pdu: &Lacpdu, out: &mut [u8]) -> usize {
    let f = &mut out[..FRAME_LEN];
    f.fill(0);
    f[0..6].copy_from_slice(&SLOW_PROTOCOLS_MAC);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&ETHERTYPE_SLOW.to_be_bytes());
    let p = &mut f[14..];
    p[0] = SUBTYPE_LACP;
    p[1] = 1;
    p[2] = 1;
    p[3] = 20;
    pdu.actor.write(&mut p[4..22]);
    p[22] = 2;
    p[23] = 20;
    pdu.partner.write(&mut p[24..42]);
    p[42] = 3;
    p[43] = 16;
    p[44..46].copy_from_slice(&pdu.collector_max_delay.to_be_bytes());
    // Terminator (type 0, length 0) and 50 reserved bytes: zero.
    FRAME_LEN
}

/// Counters of one port's LACP.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LacpCounters {
    pub rx_pdus: u64,
    pub tx_pdus: u64,
    /// Slow Protocols frames that were no usable LACPDU (dropped).
    pub rx_bad: u64,
    /// Times the partner's identity (system, key, port) changed: a
    /// partner that lies or flaps shows here.
    pub partner_changes: u64,
    /// Times the partner timed out (expired, then defaulted).
    pub expired: u64,
    pub defaulted: u64,
    /// Transmissions held back by the 3-a-second limit.
    pub tx_limited: u64,
}

/// One aggregation port's LACP state.
#[derive(Debug, Clone)]
pub struct LacpPort {
    pub actor: PortInfo,
    pub partner: PortInfo,
    /// The partner's PDU said it sees this port as we describe it.
    matched: bool,
    fast: bool,
    expired: bool,
    defaulted: bool,
    enabled: bool,
    selected: bool,
    current_while: u64,
    next_periodic: u64,
    ntt: bool,
    /// The last sends' times, oldest at `next_slot` (the 3-a-second rule
    /// over any second, not per calendar second).
    recent: [Option<u64>; MAX_TX_PER_PERIOD as usize],
    next_slot: usize,
    pub counters: LacpCounters,
}

impl LacpPort {
    /// Port `port` (1-based) of system `system`, aggregation key `key`;
    /// `fast`: ask the partner for the short timeout.
    pub fn new(system: [u8; 6], key: u16, port: u16, fast: bool, now: u64) -> LacpPort {
        let mut actor = PortInfo {
            system_priority: 0x8000,
            system,
            key,
            port_priority: 0x00ff,
            port,
            state: state::ACTIVITY | state::AGGREGATION,
        };
        if fast {
            actor.state |= state::TIMEOUT;
        }
        let mut p = LacpPort {
            actor,
            partner: PortInfo::default(),
            matched: false,
            fast,
            expired: false,
            defaulted: true,
            enabled: true,
            selected: false,
            current_while: 0,
            next_periodic: now,
            ntt: true,
            recent: [None; MAX_TX_PER_PERIOD as usize],
            next_slot: 0,
            counters: LacpCounters::default(),
        };
        p.set_defaulted();
        p
    }

    fn set_defaulted(&mut self) {
        self.defaulted = true;
        self.expired = false;
        self.matched = false;
        self.partner = PortInfo {
            state: state::TIMEOUT,
            ..PortInfo::default()
        };
        self.refresh_state();
    }

    fn refresh_state(&mut self) {
        let before = self.actor.state;
        let mut s = self.actor.state
            & !(state::SYNCHRONIZATION
                | state::COLLECTING
                | state::DISTRIBUTING
                | state::DEFAULTED
                | state::EXPIRED);
        if self.defaulted {
            s |= state::DEFAULTED;
        }
        if self.expired {
            s |= state::EXPIRED;
        }
        if self.selected && self.enabled && !self.defaulted {
            s |= state::SYNCHRONIZATION;
            if self.partner_in_sync() {
                s |= state::COLLECTING | state::DISTRIBUTING;
            }
        }
        self.actor.state = s;
        if s != before {
            self.ntt = true;
        }
    }

    fn partner_in_sync(&self) -> bool {
        self.matched && !self.expired && self.partner.state & state::SYNCHRONIZATION != 0
    }

    /// A PDU received on this port at `now`.
    pub fn receive(&mut self, pdu: &Lacpdu, now: u64) {
        self.counters.rx_pdus += 1;
        if !self.enabled {
            return;
        }
        if !self.defaulted && !self.partner.same_port(&pdu.actor) {
            self.counters.partner_changes += 1;
        }
        // Their view of us, as we are: else tell them (NTT).
        let us = &pdu.partner;
        let view_ok = us.same_port(&self.actor)
            && (us.state ^ self.actor.state)
                & (state::ACTIVITY | state::TIMEOUT | state::SYNCHRONIZATION | state::AGGREGATION)
                == 0;
        if !view_ok {
            self.ntt = true;
        }
        self.partner = pdu.actor;
        self.matched = us.same_port(&self.actor);
        self.defaulted = false;
        self.expired = false;
        self.current_while = now.saturating_add(if self.fast {
            SHORT_TIMEOUT_NS
        } else {
            LONG_TIMEOUT_NS
        });
        self.refresh_state();
    }

    /// Timers at `now`: the partner's expiry and the periodic send.
    pub fn tick(&mut self, now: u64) {
        if self.enabled && !self.defaulted && now >= self.current_while {
            if self.expired {
                self.counters.defaulted += 1;
                self.set_defaulted();
            } else {
                self.counters.expired += 1;
                self.expired = true;
                self.partner.state &= !state::SYNCHRONIZATION;
                self.partner.state |= state::TIMEOUT;
                self.current_while = now.saturating_add(SHORT_TIMEOUT_NS);
                self.refresh_state();
            }
        }
        if now >= self.next_periodic {
            self.ntt = true;
            self.next_periodic = now.saturating_add(self.period());
        }
    }

    /// The periodic interval: fast while the partner asks for it.
    pub fn period(&self) -> u64 {
        if self.fast || self.partner.state & state::TIMEOUT != 0 {
            FAST_PERIOD_NS
        } else {
            SLOW_PERIOD_NS
        }
    }

    /// The PDU to send now, if one is needed and the rate limit allows.
    pub fn take_tx(&mut self, now: u64) -> Option<Lacpdu> {
        if !self.ntt || !self.enabled {
            return None;
        }
        if let Some(oldest) = self.recent[self.next_slot] {
            if now.saturating_sub(oldest) < FAST_PERIOD_NS {
                self.counters.tx_limited += 1;
                return None;
            }
        }
        self.recent[self.next_slot] = Some(now);
        self.next_slot = (self.next_slot + 1) % self.recent.len();
        self.ntt = false;
        self.counters.tx_pdus += 1;
        Some(Lacpdu {
            actor: self.actor,
            partner: if self.defaulted {
                PortInfo::default()
            } else {
                self.partner
            },
            collector_max_delay: 0,
        })
    }

    /// The link went down (or the member vanished) or came back.
    pub fn set_enabled(&mut self, up: bool, now: u64) {
        if up == self.enabled {
            return;
        }
        self.enabled = up;
        if up {
            self.next_periodic = now;
            self.ntt = true;
        }
        self.set_defaulted();
    }

    /// The bond's selection.
    pub fn set_selected(&mut self, selected: bool) {
        if self.selected != selected {
            self.selected = selected;
            self.refresh_state();
        }
    }

    /// A partner to aggregate with: not defaulted, aggregatable.
    pub fn partner_group(&self) -> Option<(u16, [u8; 6], u16)> {
        (self.enabled && !self.defaulted && self.partner.state & state::AGGREGATION != 0)
            .then(|| self.partner.link_group())
    }

    /// Frames may be received from this port.
    pub fn collecting(&self) -> bool {
        self.actor.state & state::COLLECTING != 0
    }
    /// Frames may be sent on this port.
    pub fn distributing(&self) -> bool {
        self.actor.state & state::DISTRIBUTING != 0
    }
    pub fn is_defaulted(&self) -> bool {
        self.defaulted
    }
    pub fn is_fast(&self) -> bool {
        self.fast
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];

    #[test]
    fn a_pdu_is_110_bytes_and_parses_back() {
        let port = LacpPort::new(A, 9, 1, true, 0);
        let pdu = Lacpdu {
            actor: port.actor,
            partner: PortInfo {
                system: B,
                key: 3,
                port: 7,
                state: 0x3d,
                ..PortInfo::default()
            },
            collector_max_delay: 5,
        };
        let mut buf = [0u8; 200];
        let n = build(A, &pdu, &mut buf);
        assert_eq!(n, 124);
        assert_eq!(&buf[..6], &SLOW_PROTOCOLS_MAC);
        assert_eq!(parse(&buf[..n]), Ok(pdu));
        assert_eq!(parse(&buf[..n - 1]), Err(LacpError::Short(109)));
        let mut bad = buf;
        bad[14 + 23] = 19;
        assert!(matches!(parse(&bad[..n]), Err(LacpError::Tlv { .. })));
        bad = buf;
        bad[14] = 2;
        assert_eq!(parse(&bad[..n]), Err(LacpError::OtherSubtype(2)));
        assert_eq!(parse(&buf[..12]), Err(LacpError::NotSlow));
    }

    /// Two ports exchanging PDUs reach collecting and distributing; a
    /// silent partner expires after 3 s and is defaulted after 6 s.
    #[test]
    fn two_ports_aggregate_and_a_silent_partner_times_out() {
        let (mut a, mut b) = (
            LacpPort::new(A, 1, 1, true, 0),
            LacpPort::new(B, 1, 1, true, 0),
        );
        a.set_selected(true);
        b.set_selected(true);
        let mut t = 0;
        for _ in 0..5 {
            a.tick(t);
            b.tick(t);
            if let Some(p) = a.take_tx(t) {
                b.receive(&p, t);
            }
            if let Some(p) = b.take_tx(t) {
                a.receive(&p, t);
            }
            t += 100_000_000;
        }
        assert!(a.distributing() && b.distributing());
        assert_eq!(a.partner.system, B);
        // b goes silent.
        let silent = t;
        while t < silent + 7 * FAST_PERIOD_NS {
            a.tick(t);
            let _ = a.take_tx(t);
            t += 100_000_000;
        }
        assert!(!a.distributing() && a.is_defaulted());
        assert_eq!((a.counters.expired, a.counters.defaulted), (1, 1));
        // At most 3 a second, even when asked more.
        let mut c = LacpPort::new(A, 1, 1, true, 0);
        let sent = (0..10)
            .filter(|_| {
                c.ntt = true;
                c.take_tx(1).is_some()
            })
            .count();
        assert_eq!(sent, 3);
    }
}
