//! Capture files in and out: real captures replayed through nfkit come
//! out byte for byte; bad files are clear errors, never panics.

mod common;

use common::{frames_of, real_capture};
use nfkit_port::fwd::{fwd, FwdOptions};
use nfkit_port::pcap::capture::Capture;
use nfkit_port::{open, OpenOptions, Port, PortSpec};
use std::path::Path;
use std::sync::atomic::AtomicBool;

fn open_spec(s: &str) -> Result<Box<dyn Port>, nfkit_port::PortError> {
    open(&s.parse::<PortSpec>().unwrap(), &OpenOptions::default())
}

/// Replay `input` into an output capture with the forwarding loop; the
/// frames written, and the loop's report.
fn round_trip(input: &Path, extra: &str) -> (Vec<Vec<u8>>, nfkit_port::fwd::FwdReport) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcap");
    let mut a = open_spec(&format!("pcap:{}{extra}", input.display())).unwrap();
    let mut b = open_spec(&format!("pcap-out:{}", out.display())).unwrap();
    let stop = AtomicBool::new(false);
    let report = fwd([&mut *a, &mut *b], &FwdOptions::default(), &stop, |_| {}).unwrap();
    drop(b);
    (frames_of(&out), report)
}

const PDU: (&str, &str) = ("pdu", "tests/pcaps");
const PARSER: (&str, &str) = ("pcap-parser", "assets");

#[test]
fn real_captures_round_trip_byte_exact() {
    let files = [
        (PDU, "TCP_SACK.pcap"),
        (PDU, "vxlan.pcap"),
        (PDU, "QinQ.pcap.pcap"),
        (PDU, "ipv6-udp-fragmented.pcap"),
        (PDU, "gre-erspan.pcap"),
        (PARSER, "ntp.pcap"),
        (PARSER, "wireshark_samples-test.pcapng"),
    ];
    let mut checked = 0;
    for ((krate, sub), name) in files {
        let path = match real_capture(krate, sub, name) {
            Ok(p) => p,
            Err(why) => {
                eprintln!("SKIP: {name}: {why}");
                continue;
            }
        };
        let input = frames_of(&path);
        let fits: Vec<_> = input.iter().filter(|f| f.len() <= 1920).cloned().collect();
        let (output, r) = round_trip(&path, "");
        assert_eq!(output.len(), fits.len(), "{name}");
        assert!(output == fits, "{name}: frames differ");
        let d = r.dirs[0];
        assert_eq!(d.received, d.forwarded + d.dropped, "{name}");
        assert_eq!(d.received as usize, fits.len(), "{name}");
        assert_eq!(
            r.ports[0].rx_dropped as usize,
            input.len() - fits.len(),
            "{name}: oversize frames counted as drops"
        );
        assert_eq!(r.ports[0].rx_errors, 0, "{name}: the file has no errors");
        assert_eq!(r.ports[1].tx_packets, d.forwarded, "{name}");
        checked += 1;
    }
    if checked == 0 {
        eprintln!(
            "SKIP: no real captures found (dev-dependencies pdu and pcap-parser not fetched?)"
        );
    }
}

/// A capture of `n` frames of `len` bytes, written with pcap-file.
fn synthetic(path: &Path, frames: &[(u64, usize)]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        snaplen: 262_144,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), header).unwrap();
    for (i, &(us, len)) in frames.iter().enumerate() {
        let data = vec![i as u8; len];
        w.write_packet(&PcapPacket::new(
            std::time::Duration::from_micros(us),
            len as u32,
            &data,
        ))
        .unwrap();
    }
}

#[test]
fn loops_and_oversize_frames_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.pcap");
    synthetic(&p, &[(0, 60), (1, 70_000), (2, 1500)]);
    let (out, r) = round_trip(&p, ",loop=3");
    assert_eq!(out.len(), 6);
    assert_eq!(out[0].len(), 60);
    assert_eq!(out[1].len(), 1500);
    // Issue 14 item 8: a frame too large for the port is a drop (the
    // file is fine), not a receive error.
    assert_eq!(
        r.ports[0].rx_dropped, 3,
        "the 70,000-byte frame, three times"
    );
    assert_eq!(r.ports[0].rx_errors, 0);
    assert_eq!(r.dirs[0].received, 6);
}

/// Frames from 60 to 65,535 bytes (chained buffers past 1,920) replay
/// and are written back byte-exact.
#[test]
fn frames_up_to_65535_bytes_round_trip_byte_exact() {
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("jumbo.pcap");
    let sizes = [60, 1514, 1920, 1921, 3841, 9014, 9018, 32_768, 65_535, 64];
    let mut want = Vec::new();
    let mut w = PcapWriter::new(std::fs::File::create(&p).unwrap()).unwrap();
    for (i, &len) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|k| (k * 31 + k / 256 + i) as u8).collect();
        w.write_packet(&PcapPacket::new(
            std::time::Duration::from_micros(i as u64),
            len as u32,
            &data,
        ))
        .unwrap();
        want.push(data);
    }
    drop(w);
    let (out, r) = round_trip(&p, ",loop=2");
    assert_eq!(out.len(), 2 * sizes.len(), "{r:?}");
    for (k, got) in out.iter().enumerate() {
        assert!(
            *got == want[k % sizes.len()],
            "frame {k} ({} bytes) differs",
            got.len()
        );
    }
    assert_eq!(r.ports[0].rx_dropped, 0);
    assert_eq!(r.dirs[0].dropped, 0);
}

#[test]
fn file_timing_keeps_the_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.pcap");
    synthetic(&p, &[(0, 60), (30_000, 60), (60_000, 60)]);
    let t = std::time::Instant::now();
    let (out, _) = round_trip(&p, ",timing=file");
    assert_eq!(out.len(), 3);
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(60),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.pcap");
    synthetic(&good, &[(0, 100), (1, 100), (2, 100)]);
    let bytes = std::fs::read(&good).unwrap();

    let missing = open_spec("pcap:/nonexistent/x.pcap")
        .err()
        .unwrap()
        .to_string();
    assert!(
        missing.contains("port `pcap:rx=/nonexistent/x.pcap`") && missing.contains("cannot open"),
        "{missing}"
    );

    // A capture cut short (its writer killed): the frames before the cut
    // are replayed, with a warning saying where it was cut.
    let trunc = dir.path().join("trunc.pcap");
    std::fs::write(&trunc, &bytes[..bytes.len() - 30]).unwrap();
    let c = Capture::load(&trunc).unwrap();
    assert_eq!(c.frames().len(), 2);
    assert!(
        c.cut_short().unwrap().contains("truncated in frame 3"),
        "{:?}",
        c.cut_short()
    );
    let mut p = open_spec(&format!("pcap:{}", trunc.display())).unwrap();
    let mut b = nfkit_port::Batch::new();
    assert_eq!(p.rx_batch(0, &mut b), 2);

    let garbage = dir.path().join("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture").unwrap();
    let e = open_spec(&format!("pcap:{}", garbage.display()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a pcap or pcapng file"), "{e}");

    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    assert!(open_spec(&format!("pcap:{}", empty.display())).is_err());

    // A record length beyond the snap length.
    let mut bad = bytes.clone();
    bad[24 + 8..24 + 12].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
    let corrupt = dir.path().join("corrupt.pcap");
    std::fs::write(&corrupt, &bad).unwrap();
    let e = open_spec(&format!("pcap:{}", corrupt.display()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("frame 1"), "{e}");

    // Every single-byte corruption and every cut: an error or a replay,
    // never a panic.
    for i in 0..bytes.len() {
        for v in [0x00, 0xff, 0x7f] {
            let mut b = bytes.clone();
            b[i] = v;
            std::fs::write(&corrupt, &b).unwrap();
            let _ = Capture::load(&corrupt);
        }
        std::fs::write(&corrupt, &bytes[..i]).unwrap();
        // Cuts at record boundaries (after the 24-byte header, then every
        // 16 + 100 bytes) are valid shorter captures; other cuts replay
        // the whole records before them, saying where the file was cut.
        match Capture::load(&corrupt) {
            Err(_) => assert!(i < 24, "cut at {i}"),
            Ok(c) => {
                assert!(i >= 24, "cut at {i}");
                assert_eq!(c.frames().len(), (i - 24) / 116, "cut at {i}");
                assert_eq!(c.cut_short().is_some(), (i - 24) % 116 != 0, "cut at {i}");
            }
        }
    }

    let e = open_spec("pcap-out:/nonexistent/dir/out.pcap")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("cannot create output capture"), "{e}");
}

#[test]
fn real_corrupt_pcapng_is_rejected() {
    match real_capture("pcap-parser", "assets", "err-buffertoosmall.pcapng") {
        Ok(p) => {
            let r = open_spec(&format!("pcap:{}", p.display()));
            if let Err(e) = r {
                assert!(e.to_string().contains("err-buffertoosmall.pcapng"), "{e}");
            }
        }
        Err(why) => eprintln!("SKIP: {why}"),
    }
}

/// A TinyNF-style handler on capture ports: every frame of a real capture
/// gets its first byte rewritten and goes out twice (once cut to 60
/// bytes), through the agent adapter.
#[test]
fn agent_handler_runs_over_capture_ports() {
    use nfkit_port::agent::AgentAdapter;
    let path = match real_capture("pdu", "tests/pcaps", "TCP_SACK.pcap") {
        Ok(p) => p,
        Err(why) => nfkit_testkit::skip!("{why}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let (o1, o2) = (dir.path().join("full.pcap"), dir.path().join("cut.pcap"));
    let mut input = open_spec(&format!("pcap:rx={},tx={}", path.display(), o1.display())).unwrap();
    let mut cut = open_spec(&format!("pcap-out:{}", o2.display())).unwrap();
    let mut ports: [&mut dyn Port; 2] = [&mut *input, &mut *cut];
    let mut handlers = [
        |buf: &mut [u8], len: usize, out: &mut [u16]| {
            buf[0] = 0xaa;
            out[0] = len as u16;
            out[1] = len.min(60) as u16;
        },
        |_: &mut [u8], _: usize, _: &mut [u16]| {},
    ];
    let mut agent = AgentAdapter::new(2);
    while !ports[0].rx_done() {
        agent.poll(&mut ports, &mut handlers);
    }
    let s = agent.stats().clone();
    drop(input);
    drop(cut);
    let frames = frames_of(&path);
    let expect_full: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f[0] = 0xaa;
            f
        })
        .collect();
    let expect_cut: Vec<Vec<u8>> = expect_full
        .iter()
        .map(|f| f[..f.len().min(60)].to_vec())
        .collect();
    assert_eq!(frames_of(&o1), expect_full);
    assert_eq!(frames_of(&o2), expect_cut);
    assert_eq!(s.received[0] as usize, frames.len());
    assert_eq!(s.sent, vec![frames.len() as u64; 2]);
    assert_eq!(s.dropped, vec![0, 0]);
}

/// An output capture never destroys its input or a file that is not a
/// capture (issue 14 item 3).
#[test]
fn outputs_never_destroy_inputs_or_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("in.pcap");
    synthetic(&cap, &[(0, 100), (1, 100)]);
    let before = std::fs::read(&cap).unwrap();
    let c = cap.display();
    let e = open_spec(&format!("pcap:rx={c},tx={c}"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("reads and writes"), "{e}");
    assert_eq!(std::fs::read(&cap).unwrap(), before, "input untouched");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"not a capture").unwrap();
    let e = open_spec(&format!("pcap-out:{}", text.display()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a pcap or pcapng capture"), "{e}");
    assert_eq!(std::fs::read(&text).unwrap(), b"not a capture");
    let e = open_spec(&format!("pcap-out:{}", dir.path().display()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
    // an existing capture, an empty file and /dev/null may be written
    open_spec(&format!("pcap-out:{c}")).unwrap();
    open_spec("pcap-out:/dev/null").unwrap();
}
