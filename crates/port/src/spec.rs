//! Port specs: the strings every command takes to name a port.
//!
//! | spec | port |
//! |---|---|
//! | `null:` | sink that discards TX, receives nothing |
//! | `null:size=64` | also a source: endless 64-byte frames (buffers hold a template; see `null`) |
//! | `null:size=64,copy=1` | a source writing the template into every frame |
//! | `pcap:FILE[,timing=file][,loop=N]` | replay FILE (pcap or pcapng) on RX; TX discarded (counted) |
//! | `pcap-out:FILE` | write TX to FILE (pcap, nanosecond timestamps); receives nothing |
//! | `pcap:rx=IN,tx=OUT[,timing=file][,loop=N]` | both at once |
//! | `afpacket:IFACE[,queues=N][,ring=SLOTS][,tpacket=2\|3][,block_ms=N][,tso=1]` | AF_PACKET with PACKET_MMAP rings (TPACKET_V2, or V3 RX blocks), N fanout sockets; `tso=1`: the kernel's 64 KB TCP super-frames come in whole |
//! | `tap:NAME[,queues=N][,tso=1]` | a kernel TAP interface NAME created by nfkit (N queues: `IFF_MULTI_QUEUE`; `tso=1`: the kernel's 64 KB TSO frames come in whole) |
//! | `afxdp:IFACE[:QUEUE][,queues=N][,mode=copy\|zc]` | AF_XDP sockets on queues QUEUE.. QUEUE+N-1 |
//! | `sim:N[,mtu=BYTES][,rx_csum=on]` | simulated 82599 number N (opened by the CLI's registry); options as for `pci:` |
//! | `pci:ADDR[,mtu=BYTES][,rx_csum=on]` | an 82599 or a VirtIO-net device at PCI address ADDR (opened by the CLI's registry); 82599 only: `mtu=` above 1500 turns on jumbo frames (largest frame MTU + 18 with CRC, up to 9,000 and more: [`MAX_NIC_MTU`]), `rx_csum=on` the receive checksum verdicts |
//! | `vhost-user:PATH[,queues=N][,tso=on]` | nfkit serves vhost-user on socket PATH: VMs and virtio-user frontends plug in (CLI registry); `tso=on` offers HOST_TSO4/6 |
//! | `virtio-user:PATH[,queues=N][,tso=on]` | nfkit drives a vhost-user backend listening on PATH (CLI registry); `tso=on` asks for GUEST_TSO4/6 |
//! | `bond:[mode=lacp\|balance\|active-backup,][rate=fast\|slow,][monitor_ms=N,][system=MAC,]members=SPEC+SPEC...` | a bond over member ports (`bond`); `members=` comes last, members joined by `+` |
//!
//! `loop=0` replays forever; `timing=file` keeps the capture's
//! inter-packet gaps, `timing=fast` (default) replays as fast as the
//! receiver polls.

use nfkit_hw::PciAddress;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A parsed port spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    Null(NullSpec),
    Pcap(PcapSpec),
    AfPacket(AfPacketSpec),
    Tap(TapSpec),
    AfXdp(AfXdpSpec),
    /// A simulated 82599, by index, with its options.
    Sim(usize, NicOptions),
    /// An 82599 or VirtIO-net device at a PCI address, with the 82599's
    /// options (a VirtIO-net device takes none).
    Pci(PciAddress, NicOptions),
    /// A vhost-user socket nfkit listens on, as the device (backend).
    VhostUser(VhostSpec),
    /// A vhost-user socket nfkit connects to, as the driver (frontend).
    VirtioUser(VhostSpec),
    /// A bond over member ports.
    Bond(BondSpec),
}

/// A bond's mode, LACP rate, link monitor interval, system MAC and members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BondSpec {
    pub opts: crate::bond::BondOptions,
    pub members: Vec<PortSpec>,
}

/// A vhost-user socket and the queue pairs to use on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostSpec {
    pub path: PathBuf,
    /// Queue pairs (VIRTIO_NET_F_MQ when more than one).
    pub queues: usize,
    /// `tso=on`: the port receives TSO super-frames (vhost-user offers
    /// HOST_TSO4/6, virtio-user asks for GUEST_TSO4/6), held as chains
    /// with their segmentation in the offload metadata.
    pub tso: bool,
}

/// Options of an 82599 port (`sim:N`, `pci:ADDR`), named as DPDK's
/// testpmd names them (`--mtu`, `--enable-rx-cksum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicOptions {
    /// `mtu=BYTES`: the largest IP packet; the largest frame is
    /// [`NicOptions::max_frame`]. None: 1500 (standard frames).
    pub mtu: Option<u32>,
    /// `rx_csum=on`: the device's receive checksum verdicts become each
    /// packet's offload state.
    pub rx_csum: bool,
}

/// The MTU of standard Ethernet frames.
pub const STD_MTU: u32 = 1500;
/// The Ethernet header and CRC around an MTU's packet (no VLAN tag: the
/// 82599 lets a tagged frame be 4 bytes longer, §8.2.3.22.13).
pub const MTU_OVERHEAD: u32 = 18;
/// The largest `mtu=`: the 82599's largest frame (15.5 KB, §1.3) less
/// [`MTU_OVERHEAD`].
pub const MAX_NIC_MTU: u32 = 15872 - MTU_OVERHEAD;

impl NicOptions {
    /// The largest frame on the wire, CRC included (1518 by default).
    pub fn max_frame(&self) -> u32 {
        self.mtu.unwrap_or(STD_MTU) + MTU_OVERHEAD
    }
    /// Whether any option is set.
    pub fn is_default(&self) -> bool {
        *self == NicOptions::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NullSpec {
    /// Receive an endless stream of frames of this size, if set.
    pub size: Option<usize>,
    /// Write the template into every received frame (`copy=1`), rather
    /// than handing out buffers as they are (see [`crate::null`]).
    pub copy: bool,
}

/// Pacing of a capture replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timing {
    /// As fast as the receiver polls.
    #[default]
    Fast,
    /// Keep the capture's inter-packet gaps.
    File,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PcapSpec {
    pub rx: Option<PathBuf>,
    pub tx: Option<PathBuf>,
    pub timing: Timing,
    /// Passes over the file; 0 = forever.
    pub loops: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketSpec {
    pub iface: String,
    /// Sockets joined in one PACKET_FANOUT_HASH group, one per queue.
    pub queues: usize,
    /// RX ring slots per socket (`ring=SLOTS`; default
    /// `afpacket::DEFAULT_RX_SLOTS`).
    pub ring: Option<usize>,
    /// The rings' TPACKET version (`tpacket=2|3`, `block_ms=N`).
    pub tpacket: TpacketVersion,
    /// `tso=1`: received TCP super-frames (GSO/GRO, up to 64 KB) come in
    /// whole, as chains carrying their segmentation request, instead of
    /// being cut in the port.
    pub tso: bool,
}

/// Which TPACKET version a packet socket's rings use (see
/// `afpacket::ring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TpacketVersion {
    /// TPACKET_V2: frames handed over one by one (the default).
    #[default]
    V2,
    /// TPACKET_V3: RX frames handed over in blocks, a partly filled
    /// block after at most `block_ms` milliseconds.
    V3 { block_ms: u32 },
}

/// `block_ms` when `tpacket=3` does not say: the smallest timer the
/// kernel has.
pub const DEFAULT_BLOCK_MS: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapSpec {
    pub name: String,
    /// Queues (`IFF_MULTI_QUEUE`, one file descriptor each) when above 1.
    pub queues: usize,
    /// `tso=1`: take the kernel's 64 KB TCP segmentation super-frames
    /// (`TUNSETOFFLOAD` with TSO4/TSO6/TSO_ECN); see [`crate::tap`].
    pub tso: bool,
}

/// AF_XDP bind mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Zero-copy if the driver supports it, else copy.
    #[default]
    Auto,
    Copy,
    ZeroCopy,
}

/// Where the AF_XDP redirect program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpAttach {
    /// In the driver if it has native XDP, else generic.
    #[default]
    Auto,
    /// In the driver (`XDP_FLAGS_DRV_MODE`); an error if it cannot.
    Native,
    /// On the socket buffer, after the driver (`XDP_FLAGS_SKB_MODE`);
    /// works on any interface. Not with zero-copy.
    Generic,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfXdpSpec {
    pub iface: String,
    /// First device queue.
    pub queue: u32,
    /// Number of consecutive device queues, one XDP socket each.
    pub queues: usize,
    pub mode: XdpMode,
    pub attach: XdpAttach,
    /// Slots per ring (fill, RX, TX, completion), a power of two
    /// (`ring=SLOTS`; default `afxdp::DEFAULT_RING`).
    pub ring: Option<u32>,
}

/// Why a spec string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("port spec `{spec}`: {msg}")]
pub struct SpecError {
    pub spec: String,
    pub msg: String,
}

const KINDS: &str = "null:, pcap:FILE, pcap-out:FILE, afpacket:IFACE, tap:NAME, afxdp:IFACE[:QUEUE], sim:N, pci:ADDR, vhost-user:PATH, virtio-user:PATH, bond:members=A+B";
/// Linux limit on interface names (IFNAMSIZ - 1).
const MAX_IFNAME: usize = 15;

impl FromStr for PortSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<PortSpec, SpecError> {
        let err = |msg: String| SpecError {
            spec: s.to_string(),
            msg,
        };
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| err(format!("missing `kind:`; expected one of {KINDS}")))?;
        if kind == "bond" {
            return parse_bond(rest).map_err(err);
        }
        let (main, opts) = split_options(rest);
        let opts = Options::parse(opts).map_err(err)?;
        let spec = match kind {
            "null" => parse_null(main, opts),
            "pcap" => parse_pcap(main, opts, false),
            "pcap-out" => parse_pcap(main, opts, true),
            "afpacket" => parse_afpacket(main, opts),
            "tap" => parse_tap(main, opts),
            "afxdp" => parse_afxdp(main, opts),
            "sim" => parse_sim(main, opts),
            "pci" => parse_pci(main, opts),
            "vhost-user" => parse_vhost(main, opts).map(PortSpec::VhostUser),
            "virtio-user" => parse_vhost(main, opts).map(PortSpec::VirtioUser),
            other => Err(format!(
                "unknown port kind `{other}`; expected one of {KINDS}"
            )),
        };
        spec.map_err(err)
    }
}

/// Split `main,key=value,...` into the main part and the options. For
/// `pcap:rx=a,tx=b` (no main part) the first item is an option too.
fn split_options(rest: &str) -> (&str, &str) {
    let (first, tail) = rest.split_once(',').unwrap_or((rest, ""));
    if first.contains('=') {
        ("", rest)
    } else {
        (first, tail)
    }
}

/// `key=value` options in order, each to be consumed once.
#[derive(Default)]
struct Options(Vec<(String, String)>);

impl Options {
    fn parse(s: &str) -> Result<Options, String> {
        let mut v = Vec::new();
        for item in s.split(',').filter(|i| !i.is_empty()) {
            let (k, val) = item
                .split_once('=')
                .ok_or_else(|| format!("option `{item}` must be key=value"))?;
            if v.iter().any(|(key, _): &(String, String)| key == k) {
                return Err(format!("option `{k}` given twice"));
            }
            v.push((k.to_string(), val.to_string()));
        }
        Ok(Options(v))
    }

    fn take(&mut self, key: &str) -> Option<String> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }

    fn take_num<T: FromStr>(&mut self, key: &str, what: &str) -> Result<Option<T>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("option `{key}={v}`: expected {what}")),
        }
    }

    /// Error on any option nobody consumed.
    fn finish(self, known: &str) -> Result<(), String> {
        match self.0.first() {
            None => Ok(()),
            Some((k, _)) => Err(format!("unknown option `{k}`; this port takes {known}")),
        }
    }
}

/// Most members of one bond.
pub const MAX_BOND_MEMBERS: usize = 16;

fn parse_bond(rest: &str) -> Result<PortSpec, String> {
    use crate::bond::{BondOptions, Mode};
    let (head, members) = match rest.split_once("members=") {
        Some((h, m)) => (h, m),
        None => return Err("missing members=SPEC+SPEC (last option)".into()),
    };
    if !head.is_empty() && !head.ends_with(',') {
        return Err("members= must be a whole option, the last one".into());
    }
    let mut o = Options::parse(head)?;
    let mut opts = BondOptions::default();
    if let Some(m) = o.take("mode") {
        opts.mode = match m.as_str() {
            "lacp" | "802.3ad" => Mode::Lacp,
            "balance" | "balance-xor" => Mode::Balance,
            "active-backup" => Mode::ActiveBackup,
            _ => return Err(format!("mode={m}: expected lacp, balance or active-backup")),
        };
    }
    if let Some(r) = o.take("rate") {
        opts.fast = match r.as_str() {
            "fast" => true,
            "slow" => false,
            _ => return Err(format!("rate={r}: expected fast or slow")),
        };
    }
    if let Some(ms) = o.take_num::<u64>("monitor_ms", "milliseconds")? {
        if !(1..=60_000).contains(&ms) {
            return Err(format!("monitor_ms={ms} must be between 1 and 60000"));
        }
        opts.monitor_ms = ms;
    }
    if let Some(mac) = o.take("system") {
        let bytes: Vec<u8> = mac
            .split(':')
            .map(|b| u8::from_str_radix(b, 16))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("system={mac}: expected a MAC address like 02:00:00:00:00:01"))?;
        let system: [u8; 6] = bytes
            .try_into()
            .map_err(|_| format!("system={mac}: expected six bytes"))?;
        if system[0] & 1 != 0 || system == [0; 6] {
            return Err(format!("system={mac}: must be a unicast, non-zero address"));
        }
        opts.system = Some(system);
    }
    o.finish(
        "mode=lacp|balance|active-backup, rate=fast|slow, monitor_ms=N, system=MAC, members=A+B",
    )?;
    let members: Vec<PortSpec> = members
        .split('+')
        .map(|m| {
            m.parse::<PortSpec>()
                .map_err(|e| format!("member `{m}`: {}", e.msg))
        })
        .collect::<Result<_, _>>()?;
    if members.is_empty() || members.len() > MAX_BOND_MEMBERS {
        return Err(format!("a bond takes 1 to {MAX_BOND_MEMBERS} members"));
    }
    if members.iter().any(|m| matches!(m, PortSpec::Bond(_))) {
        return Err("a bond cannot be a member of a bond".into());
    }
    crate::check_distinct(&members)?;
    Ok(PortSpec::Bond(BondSpec { opts, members }))
}

fn parse_null(main: &str, mut o: Options) -> Result<PortSpec, String> {
    if !main.is_empty() {
        return Err(format!(
            "unexpected `{main}`; use `null:` or `null:size=BYTES`"
        ));
    }
    let size = o.take_num::<usize>("size", "a frame size in bytes")?;
    if let Some(sz) = size {
        if !(14..=9018).contains(&sz) {
            return Err(format!(
                "size={sz} must be between 14 (an Ethernet header) and 9018"
            ));
        }
    }
    let copy = match o.take("copy").as_deref() {
        None | Some("0") => false,
        Some("1") if size.is_some() => true,
        Some("1") => return Err("copy=1 needs size=BYTES (a source)".into()),
        Some(v) => return Err(format!("option `copy={v}`: expected 0 or 1")),
    };
    o.finish("size=BYTES, copy=0|1")?;
    Ok(PortSpec::Null(NullSpec { size, copy }))
}

fn parse_pcap(main: &str, mut o: Options, out: bool) -> Result<PortSpec, String> {
    let mut p = PcapSpec {
        loops: 1,
        ..PcapSpec::default()
    };
    let main = (!main.is_empty()).then(|| PathBuf::from(main));
    if out {
        p.tx = main;
    } else {
        p.rx = main;
        if let Some(rx) = o.take("rx") {
            if p.rx.is_some() {
                return Err(
                    "give the input file either as `pcap:FILE` or as `rx=FILE`, not both".into(),
                );
            }
            p.rx = Some(rx.into());
        }
        p.tx = o.take("tx").map(PathBuf::from);
    }
    if let Some(t) = o.take("timing") {
        p.timing = match t.as_str() {
            "file" | "pcap" => Timing::File,
            "fast" => Timing::Fast,
            _ => return Err(format!("timing={t}: expected `file` or `fast`")),
        };
    }
    if let Some(n) = o.take_num("loop", "a number of passes (0 = forever)")? {
        p.loops = n;
    }
    o.finish("rx=FILE, tx=FILE, timing=file|fast, loop=N")?;
    if p.rx.is_none() && p.tx.is_none() {
        return Err("no file: use pcap:IN.pcap, pcap-out:OUT.pcap or pcap:rx=IN,tx=OUT".into());
    }
    Ok(PortSpec::Pcap(p))
}

fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("missing interface name".into());
    }
    if name.len() > MAX_IFNAME || name.contains(['/', ' ', ':', '\0']) {
        return Err(format!(
            "`{name}` is not a valid interface name (at most {MAX_IFNAME} bytes, no `/`, `:` or spaces)"
        ));
    }
    Ok(())
}

fn take_queues(o: &mut Options) -> Result<usize, String> {
    let n = o.take_num::<usize>("queues", "a queue count")?.unwrap_or(1);
    if !(1..=64).contains(&n) {
        return Err(format!("queues={n} must be between 1 and 64"));
    }
    Ok(n)
}

/// `ring=SLOTS`: between 64 and 8192 kernel ring slots.
fn take_ring(o: &mut Options) -> Result<Option<usize>, String> {
    let n = o.take_num::<usize>("ring", "a number of ring slots")?;
    if let Some(n) = n {
        if !(64..=8192).contains(&n) {
            return Err(format!("ring={n} must be between 64 and 8192 slots"));
        }
    }
    Ok(n)
}

fn parse_afpacket(main: &str, mut o: Options) -> Result<PortSpec, String> {
    check_ifname(main)?;
    let queues = take_queues(&mut o)?;
    let ring = take_ring(&mut o)?;
    let block_ms = o.take_num::<u32>("block_ms", "milliseconds")?;
    let tpacket = match (o.take("tpacket").as_deref(), block_ms) {
        (None | Some("2"), None) => TpacketVersion::V2,
        (None | Some("2"), Some(_)) => {
            return Err("block_ms= applies to TPACKET_V3 blocks: add tpacket=3".into())
        }
        (Some("3"), ms) => {
            let block_ms = ms.unwrap_or(DEFAULT_BLOCK_MS);
            if !(1..=1000).contains(&block_ms) {
                return Err(format!("block_ms={block_ms} must be between 1 and 1000"));
            }
            TpacketVersion::V3 { block_ms }
        }
        (Some(v), _) => return Err(format!("tpacket={v}: expected 2 or 3")),
    };
    let tso = match o.take("tso").as_deref() {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(format!("tso={v}: expected 0 or 1")),
    };
    if tso && tpacket != TpacketVersion::V2 {
        return Err("tso=1 needs TPACKET_V2 (super-frames are read whole off the socket)".into());
    }
    o.finish("queues=N, ring=SLOTS, tpacket=2|3, block_ms=N, tso=0|1")?;
    Ok(PortSpec::AfPacket(AfPacketSpec {
        iface: main.to_string(),
        queues,
        ring,
        tpacket,
        tso,
    }))
}

fn parse_tap(main: &str, mut o: Options) -> Result<PortSpec, String> {
    check_ifname(main)?;
    let queues = take_queues(&mut o)?;
    let tso = match o.take("tso").as_deref() {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(format!("tso={v}: expected 0 or 1")),
    };
    o.finish("queues=N, tso=0|1")?;
    Ok(PortSpec::Tap(TapSpec {
        name: main.to_string(),
        queues,
        tso,
    }))
}

fn parse_afxdp(main: &str, mut o: Options) -> Result<PortSpec, String> {
    let (iface, queue) = match main.split_once(':') {
        Some((i, q)) => (
            i,
            q.parse::<u32>()
                .map_err(|_| format!("queue `{q}` is not a number; use afxdp:IFACE:QUEUE"))?,
        ),
        None => (main, 0),
    };
    check_ifname(iface)?;
    let queues = take_queues(&mut o)?;
    let mode = match o.take("mode").as_deref() {
        None | Some("auto") => XdpMode::Auto,
        Some("copy") => XdpMode::Copy,
        Some("zc") | Some("zerocopy") => XdpMode::ZeroCopy,
        Some(m) => return Err(format!("mode={m}: expected auto, copy or zc")),
    };
    let attach = match o.take("attach").as_deref() {
        None | Some("auto") => XdpAttach::Auto,
        Some("native") | Some("drv") => XdpAttach::Native,
        Some("generic") | Some("skb") => XdpAttach::Generic,
        Some(a) => return Err(format!("attach={a}: expected auto, native or generic")),
    };
    if attach == XdpAttach::Generic && mode == XdpMode::ZeroCopy {
        return Err("mode=zc needs the program in the driver: drop attach=generic".into());
    }
    let ring = match take_ring(&mut o)? {
        Some(n) if !n.is_power_of_two() => {
            return Err(format!("ring={n} must be a power of two (AF_XDP rings)"))
        }
        r => r.map(|n| n as u32),
    };
    o.finish("queues=N, mode=auto|copy|zc, attach=auto|native|generic, ring=SLOTS")?;
    Ok(PortSpec::AfXdp(AfXdpSpec {
        iface: iface.to_string(),
        queue,
        queues,
        mode,
        attach,
        ring,
    }))
}

fn parse_sim(main: &str, mut o: Options) -> Result<PortSpec, String> {
    let n = main
        .parse()
        .map_err(|_| format!("`{main}` is not a device number; use sim:0, sim:1, ..."))?;
    let nic = parse_nic(&mut o)?;
    Ok(PortSpec::Sim(n, nic))
}

fn parse_pci(main: &str, mut o: Options) -> Result<PortSpec, String> {
    let addr = main
        .parse()
        .map_err(|_| format!("`{main}` is not a PCI address; use pci:0000:03:00.0"))?;
    let nic = parse_nic(&mut o)?;
    Ok(PortSpec::Pci(addr, nic))
}

/// An 82599's `mtu=BYTES` and `rx_csum=on|off`.
fn parse_nic(o: &mut Options) -> Result<NicOptions, String> {
    let mtu = o.take_num::<u32>("mtu", "an MTU in bytes (1500, 9000, ...)")?;
    if let Some(m) = mtu {
        if !(STD_MTU..=MAX_NIC_MTU).contains(&m) {
            return Err(format!(
                "mtu={m}: the 82599 takes {STD_MTU} to {MAX_NIC_MTU} (a frame of MTU + {MTU_OVERHEAD} bytes with header and CRC, at most 15,872)"
            ));
        }
    }
    let rx_csum = match o.take("rx_csum").as_deref() {
        None | Some("off") => false,
        Some("on") => true,
        Some(v) => return Err(format!("option `rx_csum={v}`: expected on or off")),
    };
    std::mem::take(o).finish("mtu=BYTES, rx_csum=on|off")?;
    Ok(NicOptions {
        mtu: mtu.filter(|&m| m != STD_MTU),
        rx_csum,
    })
}

fn parse_vhost(main: &str, mut o: Options) -> Result<VhostSpec, String> {
    if main.is_empty() {
        return Err("missing socket path; use vhost-user:/run/vm0.sock".into());
    }
    let queues = take_queues(&mut o)?;
    let tso = match o.take("tso").as_deref() {
        None | Some("off") => false,
        Some("on") => true,
        Some(v) => return Err(format!("option `tso={v}`: expected on or off")),
    };
    o.finish("queues=N, tso=on|off")?;
    Ok(VhostSpec {
        path: PathBuf::from(main),
        queues,
        tso,
    })
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Null(n) => match (n.size, n.copy) {
                (Some(s), true) => write!(f, "null:size={s},copy=1"),
                (Some(s), false) => write!(f, "null:size={s}"),
                (None, _) => write!(f, "null:"),
            },
            PortSpec::Pcap(p) => {
                let mut parts = Vec::new();
                if let Some(rx) = &p.rx {
                    parts.push(format!("rx={}", rx.display()));
                }
                if let Some(tx) = &p.tx {
                    parts.push(format!("tx={}", tx.display()));
                }
                if p.timing == Timing::File {
                    parts.push("timing=file".into());
                }
                if p.loops != 1 {
                    parts.push(format!("loop={}", p.loops));
                }
                write!(f, "pcap:{}", parts.join(","))
            }
            PortSpec::AfPacket(a) => {
                write!(f, "afpacket:{}", a.iface)?;
                if a.queues != 1 {
                    write!(f, ",queues={}", a.queues)?;
                }
                if let Some(n) = a.ring {
                    write!(f, ",ring={n}")?;
                }
                if let TpacketVersion::V3 { block_ms } = a.tpacket {
                    write!(f, ",tpacket=3,block_ms={block_ms}")?;
                }
                if a.tso {
                    write!(f, ",tso=1")?;
                }
                Ok(())
            }
            PortSpec::Tap(t) => {
                write!(f, "tap:{}", t.name)?;
                if t.queues != 1 {
                    write!(f, ",queues={}", t.queues)?;
                }
                if t.tso {
                    write!(f, ",tso=1")?;
                }
                Ok(())
            }
            PortSpec::AfXdp(x) => {
                write!(f, "afxdp:{}:{}", x.iface, x.queue)?;
                if x.queues != 1 {
                    write!(f, ",queues={}", x.queues)?;
                }
                match x.mode {
                    XdpMode::Auto => {}
                    XdpMode::Copy => write!(f, ",mode=copy")?,
                    XdpMode::ZeroCopy => write!(f, ",mode=zc")?,
                }
                match x.attach {
                    XdpAttach::Auto => {}
                    XdpAttach::Native => write!(f, ",attach=native")?,
                    XdpAttach::Generic => write!(f, ",attach=generic")?,
                }
                if let Some(n) = x.ring {
                    write!(f, ",ring={n}")?;
                }
                Ok(())
            }
            PortSpec::Sim(n, o) => {
                write!(f, "sim:{n}")?;
                write_nic(f, o)
            }
            PortSpec::Pci(a, o) => {
                write!(f, "pci:{a}")?;
                write_nic(f, o)
            }
            PortSpec::VhostUser(v) => write_vhost(f, "vhost-user", v),
            PortSpec::VirtioUser(v) => write_vhost(f, "virtio-user", v),
            PortSpec::Bond(b) => {
                write!(f, "bond:mode={}", b.opts.mode.name())?;
                if !b.opts.fast {
                    write!(f, ",rate=slow")?;
                }
                if b.opts.monitor_ms != 100 {
                    write!(f, ",monitor_ms={}", b.opts.monitor_ms)?;
                }
                if let Some(s) = b.opts.system {
                    write!(
                        f,
                        ",system={:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                        s[0], s[1], s[2], s[3], s[4], s[5]
                    )?;
                }
                write!(f, ",members=")?;
                for (i, m) in b.members.iter().enumerate() {
                    if i > 0 {
                        write!(f, "+")?;
                    }
                    write!(f, "{m}")?;
                }
                Ok(())
            }
        }
    }
}

fn write_nic(f: &mut fmt::Formatter<'_>, o: &NicOptions) -> fmt::Result {
    if let Some(m) = o.mtu {
        write!(f, ",mtu={m}")?;
    }
    if o.rx_csum {
        write!(f, ",rx_csum=on")?;
    }
    Ok(())
}

fn write_vhost(f: &mut fmt::Formatter<'_>, kind: &str, v: &VhostSpec) -> fmt::Result {
    write!(f, "{kind}:{}", v.path.display())?;
    if v.tso {
        write!(f, ",tso=on")?;
    }
    if v.queues != 1 {
        write!(f, ",queues={}", v.queues)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PortSpec {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }
    fn bad(s: &str) -> String {
        s.parse::<PortSpec>().unwrap_err().to_string()
    }

    #[test]
    fn every_kind_parses_and_round_trips() {
        for s in [
            "null:",
            "null:size=64",
            "null:size=60,copy=1",
            "pcap:rx=in.pcap",
            "pcap:tx=out.pcap",
            "pcap:rx=a.pcap,tx=b.pcap,timing=file,loop=3",
            "afpacket:veth0",
            "afpacket:veth0,queues=4",
            "afpacket:veth0,ring=1024",
            "afpacket:veth0,tpacket=3,block_ms=1",
            "afpacket:veth0,queues=2,tpacket=3,block_ms=20",
            "afpacket:veth0,tso=1",
            "tap:nf0",
            "tap:nf0,queues=4",
            "tap:nf0,tso=1",
            "afxdp:eth1:2",
            "afxdp:eth1:0,queues=2,mode=copy",
            "afxdp:eth1:0,mode=copy,attach=generic,ring=256",
            "afxdp:eth1:0,attach=native",
            "sim:1",
            "pci:0000:03:00.0",
            "sim:0,mtu=9000",
            "sim:2,rx_csum=on",
            "pci:0000:03:00.0,mtu=9000,rx_csum=on",
            "vhost-user:/tmp/vm0.sock",
            "vhost-user:/tmp/vm0.sock,queues=2",
            "virtio-user:/run/dpdk.sock",
            "virtio-user:rel.sock,queues=4",
        ] {
            assert_eq!(p(s).to_string(), s, "{s}");
            assert_eq!(p(&p(s).to_string()), p(s));
        }
    }

    #[test]
    fn short_forms() {
        assert_eq!(p("pcap:in.pcap"), p("pcap:rx=in.pcap"));
        assert_eq!(p("pcap-out:o.pcap"), p("pcap:tx=o.pcap"));
        assert_eq!(p("afxdp:eth0"), p("afxdp:eth0:0"));
        assert_eq!(p("afpacket:eth0,tpacket=2"), p("afpacket:eth0"));
        assert_eq!(p("sim:1,mtu=1500,rx_csum=off"), p("sim:1"));
        match p("sim:0,mtu=9000") {
            PortSpec::Sim(0, o) => assert_eq!(o.max_frame(), 9018),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            p("afpacket:eth0,tpacket=3"),
            p(&format!(
                "afpacket:eth0,tpacket=3,block_ms={DEFAULT_BLOCK_MS}"
            ))
        );
        match p("pcap:x.pcap,loop=0,timing=file") {
            PortSpec::Pcap(s) => {
                assert_eq!(s.loops, 0);
                assert_eq!(s.timing, Timing::File);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_spec_and_the_fix() {
        assert!(bad("eth0").contains("missing `kind:`"));
        assert!(bad("foo:bar").contains("unknown port kind `foo`"));
        assert!(bad("null:size=abc").contains("expected a frame size"));
        assert!(bad("null:size=3").contains("between 14"));
        assert!(bad("null:speed=1").contains("unknown option `speed`"));
        assert!(bad("null:size=60,copy=2").contains("expected 0 or 1"));
        assert!(bad("null:copy=1").contains("needs size="));
        assert!(bad("pcap:").contains("no file"));
        assert!(bad("pcap:a,rx=b").contains("not both"));
        assert!(bad("pcap:a,timing=slow").contains("timing=slow"));
        assert!(bad("pcap:a,loop=1,loop=2").contains("given twice"));
        assert!(bad("afpacket:").contains("missing interface"));
        assert!(bad("afpacket:averyveryverylongname").contains("not a valid interface name"));
        assert!(bad("afpacket:eth0,queues=0").contains("between 1 and 64"));
        assert!(bad("afxdp:eth0:x").contains("not a number"));
        assert!(bad("afxdp:eth0,mode=fast").contains("mode=fast"));
        assert!(bad("afxdp:eth0,attach=hw").contains("expected auto, native or generic"));
        assert!(bad("afxdp:eth0,mode=zc,attach=generic").contains("in the driver"));
        assert!(bad("afxdp:eth0,ring=1000").contains("power of two"));
        assert!(bad("afpacket:eth0,ring=8").contains("between 64 and 8192"));
        assert!(bad("afpacket:eth0,tpacket=1").contains("expected 2 or 3"));
        assert!(bad("afpacket:eth0,block_ms=5").contains("add tpacket=3"));
        assert!(bad("afpacket:eth0,tpacket=3,block_ms=0").contains("between 1 and 1000"));
        assert!(bad("sim:x").contains("device number"));
        assert!(bad("pci:zz").contains("not a PCI address"));
        assert!(bad("sim:0,mtu=jumbo").contains("expected an MTU"));
        assert!(bad("sim:0,mtu=1400").contains("takes 1500 to 15854"));
        assert!(bad("pci:0000:03:00.0,mtu=16000").contains("takes 1500 to 15854"));
        assert!(bad("sim:0,rx_csum=yes").contains("expected on or off"));
        assert!(bad("sim:0,max_frame=9018").contains("takes mtu=BYTES, rx_csum=on|off"));
        assert!(bad("tap:a,b=c").contains("takes queues=N"));
        assert!(bad("tap:a/b").contains("not a valid"));
        assert!(bad("vhost-user:").contains("missing socket path"));
        assert!(bad("virtio-user:,queues=2").contains("missing socket path"));
        assert!(bad("vhost-user:/x,queues=0").contains("between 1 and 64"));
        assert!(bad("virtio-user:/x,mode=zc").contains("this port takes queues=N"));
    }
}
