//! The BPF module judged by libpcap: for tcpdump expressions and the
//! real captures of the `pdu` and `pcap-parser` crates, the frames the
//! module sends to the filter's gate are exactly those `tcpdump -r FILE
//! -w OUT EXPR` keeps, and every other frame leaves by gate 0.

use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::modules::{BuildEnv, Registry};
use nfkit_testkit::require_tool;
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use std::path::{Path, PathBuf};
use std::process::Command;

const EXPRESSIONS: &[&str] = &[
    "ip",
    "ip6",
    "tcp",
    "udp",
    "icmp or icmp6",
    "arp",
    "vlan",
    "vlan and ip",
    "tcp port 80 or tcp port 443",
    "udp port 4789",
    "udp port 123",
    "ip proto 47",
    "net 10.0.0.0/8 or net 192.168.0.0/16",
    "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
    "ip[8] < 64",
    "ip[6:2] & 0x3fff != 0",
    "ether broadcast or ether multicast",
    "greater 200",
    "portrange 1-1024",
    "not ip and not ip6",
    "ip6 and udp",
    "mpls",
];

/// `<cargo registry>/src/*/<krate>-<version>/<sub>` (dev-dependencies,
/// so `cargo test` fetched them).
fn assets(krate: &str, sub: &str) -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .flatten()
        .flat_map(|i| std::fs::read_dir(i.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(krate))
                .is_some_and(|r| {
                    r.starts_with('-') && r[1..].starts_with(|c: char| c.is_ascii_digit())
                })
        })
        .map(|p| p.join(sub))
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found.pop()
}

/// The whole (not truncated) Ethernet frames of a capture, read by
/// libpcap; none for another link type.
fn ethernet_frames(path: &Path) -> Vec<Vec<u8>> {
    let Ok(mut cap) = pcap::Capture::from_file(path) else {
        return Vec::new();
    };
    if cap.get_datalink() != pcap::Linktype::ETHERNET {
        return Vec::new();
    }
    let mut out = Vec::new();
    while let Ok(p) = cap.next_packet() {
        if p.header.caplen == p.header.len && p.data.len() <= 2000 {
            out.push(p.data.to_vec());
        }
    }
    out
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            std::time::Duration::from_micros(i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// What tcpdump keeps of `input` for `expr`.
fn tcpdump(input: &Path, out: &Path, expr: &str) -> Vec<Vec<u8>> {
    let o = Command::new("tcpdump")
        .args(["-r"])
        .arg(input)
        .arg("-w")
        .arg(out)
        .arg(expr)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tcpdump {expr}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    read_pcap(out)
}

#[test]
fn bpf_module_agrees_with_tcpdump_on_real_captures() {
    require_tool!("tcpdump");
    let mut files = Vec::new();
    if let Some(d) = assets("pdu", "tests/pcaps") {
        files.extend(std::fs::read_dir(d).unwrap().flatten().map(|e| e.path()));
    }
    if let Some(d) = assets("pcap-parser", "assets") {
        files.extend(std::fs::read_dir(d).unwrap().flatten().map(|e| e.path()));
    }
    files.sort();
    let dir = tempfile::tempdir().unwrap();
    let (input, out) = (dir.path().join("in.pcap"), dir.path().join("out.pcap"));
    let env = BuildEnv {
        ports: Default::default(),
        pool: Harness::new().pool().clone(),
    };
    let (mut checked, mut matched, mut frames_total) = (0, 0, 0);
    for file in &files {
        let frames = ethernet_frames(file);
        if frames.is_empty() {
            continue;
        }
        frames_total += frames.len();
        write_pcap(&input, &frames);
        for expr in EXPRESSIONS {
            let want = tcpdump(&input, &out, expr);
            let mut args = Args::from_pairs(&[
                ("gates", Value::Int(2)),
                (
                    "filters",
                    Value::List(vec![Value::Map(vec![
                        ("filter".into(), Value::Str(expr.to_string())),
                        ("gate".into(), Value::Int(1)),
                    ])]),
                ),
            ]);
            let mut m = Registry::default().build("BPF", &mut args, &env).unwrap();
            let got = Harness::new().run(&mut *m, 0, &frames);
            assert!(
                got[1] == want,
                "{}: `{expr}`: nfkit kept {} frames, tcpdump {}",
                file.display(),
                got[1].len(),
                want.len()
            );
            assert_eq!(
                got[0].len() + got[1].len(),
                frames.len(),
                "{expr}: the rest leave by gate 0"
            );
            matched += want.len();
            checked += 1;
        }
    }
    if checked == 0 {
        eprintln!(
            "SKIP: no Ethernet captures found (dev-dependencies pdu and pcap-parser not fetched?)"
        );
        return;
    }
    eprintln!("{checked} (capture, expression) pairs over {frames_total} frames, {matched} matches, all as tcpdump");
    assert!(matched > 100, "the expressions match something");
}
