//! Parsers of what users and files give nfkit: capture files, `.nfk`
//! pipeline descriptions, port specs, packet headers.

use nfkit_hw::sim::VirtualClock;
use nfkit_packet::{parse_ipv4, verify_checksums, Ethernet, FlowKey, Icmp, Ipv4, Tcp, Udp, Vlan};
use nfkit_pipeline::BuildOptions;
use nfkit_port::pcap::capture::Capture;
use nfkit_port::{OpenOptions, Port, PortError, PortSpec};

/// A pcap or pcapng file: indexed or refused; every indexed frame lies
/// inside the file.
pub fn pcap_reader(data: &[u8]) {
    if let Ok(c) = Capture::from_bytes(data.to_vec()) {
        for f in c.frames() {
            assert_eq!(c.data(f).len(), f.len);
        }
    }
}

/// A `.nfk` pipeline description: lexed, parsed, and (with null ports
/// for every port, a virtual clock, and no module that writes files)
/// built and run for a few scheduler rounds.
pub fn nfk_config(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(desc) = nfkit_pipeline::parse(src, "fuzz.nfk") else {
        return;
    };
    if crate::has_huge_number(src)
        || desc
            .modules
            .iter()
            .any(|m| matches!(m.class.as_str(), "Dump" | "PcapCapture"))
    {
        return;
    }
    let open = |_spec: &str| -> Result<Box<dyn Port>, PortError> {
        let spec: PortSpec = "null"
            .parse()
            .map_err(|e| PortError::config("null", format!("{e}")))?;
        nfkit_port::open(
            &spec,
            &OpenOptions {
                pool_buffers: 64,
                ..OpenOptions::default()
            },
        )
    };
    let opts = BuildOptions {
        clock: VirtualClock::new(),
        pool_buffers: 64,
        ..BuildOptions::default()
    };
    if let Ok(mut p) = desc.build_with(&open, opts) {
        let _ = p.step(4);
        let _ = p.shutdown();
    }
}

/// A port spec string: parsed or refused; a parsed spec prints as a
/// string that parses to the same spec.
pub fn port_spec(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = s.parse::<PortSpec>() {
        let shown = spec.to_string();
        let again: PortSpec = shown
            .parse()
            .unwrap_or_else(|e| panic!("`{s}` parsed, but its display `{shown}` does not: {e}"));
        assert_eq!(again.to_string(), shown, "from `{s}`");
    }
}

/// A frame through every header view and the layout parser.
pub fn packet_views(data: &[u8]) {
    if let Ok(e) = Ethernet::new(data) {
        let _ = (e.dst(), e.src(), e.ethertype());
    }
    if let Ok(v) = Vlan::new(data.get(14..).unwrap_or(&[])) {
        let _ = (v.vid(), v.pcp(), v.inner_ethertype());
    }
    let _ = verify_checksums(data);
    let Ok(l) = parse_ipv4(data) else {
        return;
    };
    assert!(
        l.l3 <= l.l4 && l.l4 <= l.end && l.end <= data.len(),
        "{l:?}"
    );
    let _ = FlowKey::from_frame(data, &l);
    if let Ok(ip) = Ipv4::new(&data[l.l3..l.end]) {
        let _ = (
            ip.src(),
            ip.dst(),
            ip.ttl(),
            ip.checksum_ok(),
            ip.payload().len(),
        );
    }
    let l4 = &data[l.l4..l.end];
    if let Ok(t) = Tcp::new(l4) {
        let _ = (t.src_port(), t.flags(), t.header_len());
    }
    if let Ok(u) = Udp::new(l4) {
        let _ = (u.length(), u.payload().len());
    }
    if let Ok(i) = Icmp::new(l4) {
        let _ = (i.icmp_type(), i.payload().len());
    }
}

/// LACP frames (`nfkit_port::bond::lacp`): each input is a run of
/// frames (a length byte, then the frame) received by one LACP port,
/// time moving by the byte after each. A parsed LACPDU builds back to a
/// frame that parses to the same PDU; the port never distributes
/// without being in synchronization and collecting, and never sends
/// more than 3 PDUs a second.
pub fn lacp_frames(data: &[u8]) {
    use nfkit_port::bond::lacp::{self, state, LacpPort, FAST_PERIOD_NS};
    let mut port = LacpPort::new(
        [2, 0, 0, 0, 0, 1],
        1,
        1,
        data.first().is_some_and(|b| b & 1 == 1),
        0,
    );
    port.set_selected(true);
    let (mut now, mut rest) = (0u64, data);
    let mut sent: Vec<u64> = Vec::new();
    while let Some((&len, tail)) = rest.split_first() {
        let frame = &tail[..(len as usize).min(tail.len())];
        rest = &tail[frame.len()..];
        if let Ok(pdu) = lacp::parse(frame) {
            let mut out = [0u8; lacp::FRAME_LEN];
            let n = lacp::build(frame[6..12].try_into().unwrap(), &pdu, &mut out);
            assert_eq!(
                lacp::parse(&out[..n]),
                Ok(pdu),
                "built back from {frame:02x?}"
            );
            port.receive(&pdu, now);
        }
        let step = rest.first().copied().unwrap_or(0) as u64;
        now += step * 50_000_000;
        port.tick(now);
        if port.take_tx(now).is_some() {
            sent.push(now);
        }
        let s = port.actor.state;
        if s & state::DISTRIBUTING != 0 {
            assert!(
                s & state::SYNCHRONIZATION != 0 && port.collecting(),
                "state {s:#x}"
            );
        }
    }
    for w in sent.windows(4) {
        assert!(
            w[3] - w[0] >= FAST_PERIOD_NS,
            "4 PDUs within {} ns",
            w[3] - w[0]
        );
    }
}
