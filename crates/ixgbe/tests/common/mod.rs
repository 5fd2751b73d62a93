//! Shared set-up for tests against the 82599 model: a model port plus an
//! initialized driver device, in lock-step or free-running mode.
#![allow(dead_code)]

use nfkit_hw::sim::{SimDma, VirtualClock};
use nfkit_hw::{Clock, SystemClock};
use nfkit_ixgbe::{Device, DeviceConfig, InitError};
use nfkit_ixgbe_model::{ModelConfig, Nic82599, RunningNic, SimBar};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// VirtualClock: the driver's sleeps advance the device; the test
    /// steps the data path with `Nic82599::step`.
    LockStep,
    /// SystemClock and a device thread.
    FreeRunning,
}

/// Several model ports on one DMA space and one clock.
pub struct Bench {
    pub mode: Mode,
    pub dma: Arc<SimDma>,
    pub vclock: Option<Arc<VirtualClock>>,
    pub clock: Arc<dyn Clock>,
    running: Vec<RunningNic>,
}

impl Bench {
    pub fn new(mode: Mode) -> Bench {
        let dma = SimDma::new();
        let (vclock, clock): (Option<Arc<VirtualClock>>, Arc<dyn Clock>) = match mode {
            Mode::LockStep => {
                let v = VirtualClock::new();
                (Some(v.clone()), v)
            }
            Mode::FreeRunning => (None, Arc::new(SystemClock::default())),
        };
        Bench {
            mode,
            dma,
            vclock,
            clock,
            running: Vec::new(),
        }
    }

    /// A model port, attached to the bench's clock or running on its own
    /// thread.
    pub fn nic(&mut self, cfg: ModelConfig) -> Nic82599 {
        let nic = Nic82599::new(cfg, self.dma.clone());
        match &self.vclock {
            Some(v) => nic.attach_clock(v),
            None => self.running.push(nic.spawn()),
        }
        nic
    }

    /// Initialize the driver on `nic`.
    pub fn init(&self, nic: &Nic82599, cfg: DeviceConfig) -> Result<Device<SimBar>, InitError> {
        Device::init(&nic.pci(), self.dma.clone(), self.clock.clone(), cfg)
    }

    /// In lock-step mode, run one device step of each port.
    pub fn step(&self, nics: &[&Nic82599]) {
        if self.mode == Mode::LockStep {
            for n in nics {
                n.step();
            }
        }
    }

    /// Stop device threads (free-running mode).
    pub fn stop(&mut self) {
        for r in self.running.drain(..) {
            r.stop();
        }
    }
}

pub fn model(mac_last: u8) -> ModelConfig {
    ModelConfig {
        mac: [0x02, 0, 0, 0, 0, mac_last],
        ..ModelConfig::default()
    }
}

/// Fail with every recorded violation.
pub fn assert_no_violations(nic: &Nic82599) {
    let v = nic.violations();
    assert!(
        v.is_empty(),
        "{} strict-mode violation(s):\n{}",
        nic.violation_count(),
        v.iter()
            .map(|v| format!("  {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Whether the long (10 million packet) variants were asked for.
pub fn long_run() -> bool {
    std::env::var("NFKIT_LONG").is_ok_and(|v| v == "1")
}

/// Packets for a long-capable test: `NFKIT_PACKETS` if set, else 10
/// million with `NFKIT_LONG=1`, else `default` (sized for debug builds).
pub fn packet_count(default: u64) -> u64 {
    if let Some(n) = std::env::var("NFKIT_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if long_run() {
        10_000_000
    } else {
        default
    }
}

/// A test frame: `len` bytes (60..=1518), destination `dst`, a local
/// experimental ethertype (0x88B5, so no filter or RSS parses it), the
/// sequence number, then pseudo-random bytes derived from it.
pub fn frame(dst: [u8; 6], seq: u64, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xEE]);
    f[12..14].copy_from_slice(&[0x88, 0xB5]);
    f[14..22].copy_from_slice(&seq.to_le_bytes());
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut f[22..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    f
}

/// The sequence number of a test frame.
pub fn seq_of(f: &[u8]) -> u64 {
    u64::from_le_bytes(f[14..22].try_into().unwrap())
}

/// Length of frame `seq` in a run: 60..=1518, deterministic.
pub fn len_of(seq: u64, salt: u64) -> usize {
    let mut x = (seq ^ salt)
        .wrapping_mul(0x2545_F491_4F6C_DD1D)
        .wrapping_add(0x9E37);
    x ^= x >> 29;
    60 + (x % (1518 - 60 + 1)) as usize
}
