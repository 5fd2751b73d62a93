//! Refusing two ports that would use one thing: the same interface,
//! device, simulated NIC or socket twice (AF_PACKET would then send every
//! frame twice; `sim:0` twice makes two devices with one name), or a
//! capture file written by one port and read or written by another (the
//! output would truncate the input).

use crate::spec::PortSpec;
use std::path::{Path, PathBuf};

/// What a port holds that no other port may hold too.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    Iface(String),
    Sim(usize),
    Pci(String),
    Listen(PathBuf),
    Connect(PathBuf),
}

/// A capture file, by (device, inode) if it exists, else by its path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileId {
    Inode(u64, u64),
    Path(PathBuf),
}

fn file_id(path: &Path) -> FileId {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => FileId::Inode(m.dev(), m.ino()),
        Err(_) => {
            let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
            let canon = abs
                .parent()
                .and_then(|p| std::fs::canonicalize(p).ok())
                .and_then(|p| abs.file_name().map(|n| p.join(n)));
            FileId::Path(canon.unwrap_or(abs))
        }
    }
}

fn held(spec: &PortSpec) -> Vec<Held> {
    match spec {
        PortSpec::AfPacket(s) => vec![Held::Iface(s.iface.clone())],
        PortSpec::AfXdp(s) => vec![Held::Iface(s.iface.clone())],
        PortSpec::Tap(s) => vec![Held::Iface(s.name.clone())],
        PortSpec::Sim(n, _) => vec![Held::Sim(*n)],
        PortSpec::Pci(a, _) => vec![Held::Pci(a.to_string())],
        PortSpec::VhostUser(v) => vec![Held::Listen(v.path.clone())],
        PortSpec::VirtioUser(v) => vec![Held::Connect(v.path.clone())],
        PortSpec::Bond(b) => b.members.iter().flat_map(held).collect(),
        PortSpec::Null(_) | PortSpec::Pcap(_) => Vec::new(),
    }
}

/// Check that no two of `specs` use the same interface, device, socket
/// end or capture file (a file may be read by several ports, but one
/// written is used by no other port, nor read by the port writing it).
/// The error names both ports.
pub fn check_distinct(specs: &[PortSpec]) -> Result<(), String> {
    let mut seen: Vec<(Held, usize)> = Vec::new();
    let mut files: Vec<(FileId, usize, bool)> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        for h in held(spec) {
            if let Some((_, j)) = seen.iter().find(|(x, _)| *x == h) {
                return Err(format!(
                    "ports {} (`{}`) and {} (`{}`) use the same {}: each port needs its own",
                    j + 1,
                    specs[*j],
                    i + 1,
                    spec,
                    what(&h)
                ));
            }
            seen.push((h, i));
        }
        if let PortSpec::Pcap(p) = spec {
            for (path, out) in [(&p.rx, false), (&p.tx, true)] {
                let Some(path) = path else { continue };
                let id = file_id(path);
                if let Some((_, j, _)) = files.iter().find(|(f, _, o)| *f == id && (out || *o)) {
                    let who = if *j == i {
                        format!("port {} (`{spec}`) reads and writes", i + 1)
                    } else {
                        format!(
                            "ports {} (`{}`) and {} (`{spec}`) both use",
                            j + 1,
                            specs[*j],
                            i + 1
                        )
                    };
                    return Err(format!(
                        "{who} the capture file {}: writing it would truncate what is read; use another output file",
                        path.display()
                    ));
                }
                files.push((id, i, out));
            }
        }
    }
    Ok(())
}

fn what(h: &Held) -> String {
    match h {
        Held::Iface(n) => format!("interface `{n}`"),
        Held::Sim(n) => format!("simulated NIC sim:{n}"),
        Held::Pci(a) => format!("PCI device {a}"),
        Held::Listen(p) => format!("vhost-user socket {} (as backend)", p.display()),
        Held::Connect(p) => format!("vhost-user socket {} (as frontend)", p.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(specs: &[&str]) -> Result<(), String> {
        let specs: Vec<PortSpec> = specs.iter().map(|s| s.parse().unwrap()).collect();
        check_distinct(&specs)
    }

    #[test]
    fn the_same_thing_twice_is_refused_naming_both_ports() {
        for (a, b) in [
            ("afpacket:veth0", "afpacket:veth0,queues=2"),
            ("afpacket:veth0", "afxdp:veth0"),
            ("sim:0", "sim:0"),
            ("tap:t0", "tap:t0"),
            ("pci:0000:03:00.0", "pci:0000:03:00.0"),
            ("vhost-user:/tmp/a.sock", "vhost-user:/tmp/a.sock"),
        ] {
            let e = check(&[a, b]).unwrap_err();
            assert!(e.contains("ports 1") && e.contains("and 2"), "{e}");
        }
        check(&["sim:0", "sim:1"]).unwrap();
        check(&["null:", "null:"]).unwrap();
        check(&["afpacket:a", "afpacket:b"]).unwrap();
        // the loopback pair the tests use: both ends of one socket
        check(&["vhost-user:/tmp/a.sock", "virtio-user:/tmp/a.sock"]).unwrap();
    }

    #[test]
    fn a_capture_written_is_used_by_no_other_port() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("in.pcap");
        std::fs::write(&f, b"x").unwrap();
        let f = f.display();
        let e = check(&[&format!("pcap:rx={f},tx={f}")]).unwrap_err();
        assert!(e.contains("reads and writes"), "{e}");
        let e = check(&[&format!("pcap:{f}"), &format!("pcap-out:{f}")]).unwrap_err();
        assert!(e.contains("truncate"), "{e}");
        // the same file through another path: same inode
        let other = format!("{}/./in.pcap", dir.path().display());
        assert!(check(&[&format!("pcap-out:{other}"), &format!("pcap:{f}")]).is_err());
        // two outputs to a file that does not exist yet
        let new = dir.path().join("new.pcap");
        let new = new.display();
        assert!(check(&[&format!("pcap-out:{new}"), &format!("pcap-out:{new}")]).is_err());
        // reading one capture twice is fine
        check(&[&format!("pcap:{f}"), &format!("pcap:{f}")]).unwrap();
    }
}
