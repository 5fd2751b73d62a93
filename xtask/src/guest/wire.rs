//! The host end of the guest's two NICs. Each NIC's QEMU netdev is a UDP
//! socket (`-netdev socket,udp=HOST,localaddr=GUEST`): every frame the
//! NIC transmits arrives as one datagram at our socket on HOST, and every
//! datagram we send to GUEST is a frame the NIC receives.
//!
//! Two phases, switched by what the guest prints:
//!
//! - [`Phase::Reflect`] (while `nfkit pktgen` runs): count nfkit's pktgen
//!   frames per NIC and send each back to the NIC it came from, so that
//!   `nfkit pktgen --rx` sees its own traffic return;
//! - [`Phase::Inject`] (while `nfkit fwd` runs): send probe frames into
//!   both NICs until they come out of the other one (fwd is up), then a
//!   counted series per direction, and count what comes out the other
//!   side; then one 9,000-byte frame per direction (resent until it
//!   crosses, at most [`JUMBO_TRIES`] times), which must come out
//!   byte-exact: it crosses nfkit's VirtIO PCI driver as a chain
//!   (MRG_RXBUF buffers in, a descriptor chain out). UDP datagrams on
//!   loopback carry it whole (QEMU's socket netdev takes up to 64 KB).

use anyhow::{Context, Result};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// nfkit pktgen's magic at offset 42 (`crates/lab/src/pktgen.rs`).
const PKTGEN_MAGIC: [u8; 2] = 0x6e66u16.to_be_bytes();
/// Our injected frames: an EtherType for local experiments (IEEE 802).
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
const PROBE: u8 = 1;
const COUNTED: u8 = 2;
const JUMBO: u8 = 3;

/// The jumbo frame's size (no FCS), and how often it is sent at most per
/// direction (UDP netdevs under TCG lose a few percent), this far apart.
pub const JUMBO_LEN: usize = 9000;
const JUMBO_TRIES: u32 = 10;
const JUMBO_GAP: Duration = Duration::from_millis(150);

/// Frames injected per direction once fwd is up, and their pace.
pub const FWD_FRAMES: u64 = 1000;
const FWD_GAP: Duration = Duration::from_micros(1500);
/// After the counted series, single probes this far apart: longer than
/// nfkit's longest sleep (`DEFAULT_MAX_SLEEP`, 50 ms), so each finds fwd
/// asleep and must be delivered by an interrupt (the paced series may
/// keep a slow TCG guest busy, or meet it just as a timed-out sleep
/// ends: 0 wake-ups by interrupt in 1 of 4 runs without these).
const WAKE_PROBES: u32 = 6;
const WAKE_GAP: Duration = Duration::from_millis(150);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Reflect = 0,
    Inject = 1,
    Done = 2,
}

/// What the host end saw, per NIC (0 = legacy, 1 = modern).
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// pktgen frames each NIC transmitted (reflected back to it).
    pub pktgen_out: [u64; 2],
    /// Whether probes crossed fwd in both directions.
    pub fwd_up: bool,
    /// Counted frames injected into NIC `i`...
    pub injected: [u64; 2],
    /// ... and how many of them came out of the other NIC.
    pub crossed: [u64; 2],
    /// Jumbo frames injected into NIC `i`...
    pub jumbo_sent: [u32; 2],
    /// ... that came out of the other NIC byte-exact ...
    pub jumbo_exact: [u32; 2],
    /// ... and that came out changed (their length).
    pub jumbo_bad: [Option<usize>; 2],
}

/// The running host end.
pub struct HostWire {
    phase: Arc<AtomicU8>,
    counts: Arc<Mutex<Counts>>,
    thread: Option<JoinHandle<()>>,
    /// The netdev arguments for NIC 0 and NIC 1.
    pub netdevs: [String; 2],
}

impl HostWire {
    /// Bind two host sockets on loopback and start the thread.
    pub fn start() -> Result<HostWire> {
        let socks = [bind_any()?, bind_any()?];
        let mut guest = Vec::new();
        let mut netdevs = Vec::new();
        for s in &socks {
            let host = s.local_addr()?;
            // The guest side's port: reserve it by binding, then free it
            // for QEMU (a race with other programs, unlikely on loopback).
            let g = bind_any()?.local_addr()?;
            netdevs.push(format!("udp={host},localaddr={g}"));
            guest.push(g);
            s.set_nonblocking(true)?;
        }
        let phase = Arc::new(AtomicU8::new(Phase::Reflect as u8));
        let counts = Arc::new(Mutex::new(Counts::default()));
        let (p, c) = (phase.clone(), counts.clone());
        let guest = [guest[0], guest[1]];
        let thread = std::thread::Builder::new()
            .name("guest-wire".into())
            .spawn(move || serve(socks, guest, &p, &c))?;
        Ok(HostWire {
            phase,
            counts,
            thread: Some(thread),
            netdevs: [netdevs[0].clone(), netdevs[1].clone()],
        })
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Stop and return what was seen.
    pub fn finish(mut self) -> Counts {
        self.set_phase(Phase::Done);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let c = self.counts.lock().map(|c| c.clone()).unwrap_or_default();
        c
    }
}

impl Drop for HostWire {
    fn drop(&mut self) {
        self.set_phase(Phase::Done);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bind_any() -> Result<UdpSocket> {
    UdpSocket::bind("127.0.0.1:0").context("binding a UDP socket on loopback")
}

/// A frame we inject into NIC `into`: broadcast, our EtherType, kind and
/// direction, sequence number; padded to the 60-byte minimum.
fn frame(kind: u8, into: usize, seq: u64) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x99, into as u8]);
    f[12..14].copy_from_slice(&ETHERTYPE);
    f[14] = kind;
    f[15] = into as u8;
    f[16..24].copy_from_slice(&seq.to_le_bytes());
    f
}

/// The jumbo frame injected into NIC `into`: [`frame`]'s header, then a
/// pattern that differs in every buffer-sized piece.
fn jumbo(into: usize) -> Vec<u8> {
    let mut f = vec![0u8; JUMBO_LEN];
    f[..24].copy_from_slice(&frame(JUMBO, into, 0)[..24]);
    for (i, b) in f[24..].iter_mut().enumerate() {
        *b = (i % 251) as u8 ^ (i / 1024) as u8;
    }
    f
}

/// Our frame's (kind, NIC it was injected into), if it is one.
fn ours(f: &[u8]) -> Option<(u8, usize)> {
    (f.len() >= 24 && f[12..14] == ETHERTYPE).then(|| (f[14], f[15] as usize))
}

fn serve(socks: [UdpSocket; 2], guest: [SocketAddr; 2], phase: &AtomicU8, counts: &Mutex<Counts>) {
    let mut buf = vec![0u8; 65536];
    let jumbos = [jumbo(0), jumbo(1)];
    let mut next_jumbo = Instant::now();
    let mut probes_crossed = [false; 2];
    let mut next_probe = Instant::now();
    let mut next_frame = Instant::now();
    let mut injected = [0u64; 2];
    let mut wake_probes = 0;
    let mut next_wake = Instant::now();
    loop {
        let now_phase = phase.load(Ordering::Acquire);
        if now_phase == Phase::Done as u8 {
            return;
        }
        let inject = now_phase == Phase::Inject as u8;
        let mut idle = true;
        for (i, s) in socks.iter().enumerate() {
            let Ok(n) = s.recv(&mut buf) else { continue };
            idle = false;
            let f = &buf[..n];
            let Ok(mut c) = counts.lock() else { return };
            if !inject {
                if f.len() >= 44 && f[42..44] == PKTGEN_MAGIC {
                    c.pktgen_out[i] += 1;
                    let _ = s.send_to(f, guest[i]);
                }
                continue;
            }
            match ours(f) {
                Some((PROBE, into)) if into == 1 - i => probes_crossed[into] = true,
                Some((COUNTED, into)) if into == 1 - i => c.crossed[into] += 1,
                Some((JUMBO, into)) if into == 1 - i => {
                    if f == jumbos[into] {
                        c.jumbo_exact[into] += 1;
                    } else {
                        c.jumbo_bad[into] = Some(f.len());
                    }
                }
                _ => {}
            }
        }
        if idle {
            std::thread::sleep(Duration::from_micros(200));
        }
        if !inject {
            continue;
        }
        let up = probes_crossed[0] && probes_crossed[1];
        if !up && Instant::now() >= next_probe {
            for (i, s) in socks.iter().enumerate() {
                let _ = s.send_to(&frame(PROBE, i, 0), guest[i]);
            }
            next_probe = Instant::now() + Duration::from_millis(200);
        }
        if up && injected[1] < FWD_FRAMES && Instant::now() >= next_frame {
            for (i, s) in socks.iter().enumerate() {
                if s.send_to(&frame(COUNTED, i, injected[i]), guest[i]).is_ok() {
                    injected[i] += 1;
                }
            }
            next_frame += FWD_GAP;
            if let Ok(mut c) = counts.lock() {
                c.fwd_up = true;
                c.injected = injected;
            }
            next_wake = Instant::now() + WAKE_GAP;
        }
        if up
            && injected[1] >= FWD_FRAMES
            && wake_probes < WAKE_PROBES
            && Instant::now() >= next_wake
        {
            for (i, s) in socks.iter().enumerate() {
                let _ = s.send_to(&frame(PROBE, i, 0), guest[i]);
            }
            wake_probes += 1;
            next_wake = Instant::now() + WAKE_GAP;
        }
        // After the counted series: the jumbo frames, each direction until
        // one crossed.
        if up && injected[1] >= FWD_FRAMES && Instant::now() >= next_jumbo {
            let Ok(mut c) = counts.lock() else { return };
            for (i, s) in socks.iter().enumerate() {
                if c.jumbo_exact[i] == 0
                    && c.jumbo_sent[i] < JUMBO_TRIES
                    && s.send_to(&jumbos[i], guest[i]).is_ok()
                {
                    c.jumbo_sent[i] += 1;
                }
            }
            next_jumbo = Instant::now() + JUMBO_GAP;
        }
    }
}
