//! Shared by the integration tests: locating the real captures shipped in
//! the `pcap-parser` and `pdu` crates, and reading captures back.

#![allow(dead_code)]

pub mod traffic;

use std::path::{Path, PathBuf};

/// The cargo home (CARGO_HOME or ~/.cargo).
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// `<registry>/src/*/<crate>-<version>/<sub>` for the newest version of
/// `krate` fetched into the registry (they are dev-dependencies, so
/// `cargo test` fetched them), or the reason it was not found.
pub fn crate_assets(krate: &str, sub: &str) -> Result<PathBuf, String> {
    let src = cargo_home()
        .ok_or("no CARGO_HOME or HOME")?
        .join("registry")
        .join("src");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&src)
        .map_err(|e| format!("cannot list {}: {e}", src.display()))?
        .flatten()
        .flat_map(|index| {
            std::fs::read_dir(index.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(krate))
                .is_some_and(|rest| {
                    rest.starts_with('-') && rest[1..].starts_with(|c: char| c.is_ascii_digit())
                })
        })
        .map(|p| p.join(sub))
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found.pop().ok_or_else(|| {
        format!(
            "no {krate}-*/{sub} under {} (run `cargo fetch`)",
            src.display()
        )
    })
}

/// A capture of the pdu or pcap-parser crates by file name.
pub fn real_capture(krate: &str, sub: &str, file: &str) -> Result<PathBuf, String> {
    let p = crate_assets(krate, sub)?.join(file);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} is missing", p.display()))
    }
}

/// The frames of a capture (pcap or pcapng), in order.
pub fn frames_of(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).unwrap();
    let mut out = Vec::new();
    if let Ok(mut r) = pcap_file::pcap::PcapReader::new(&file) {
        while let Some(p) = r.next_packet() {
            out.push(p.unwrap().data.into_owned());
        }
        return out;
    }
    let file = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcapng::PcapNgReader::new(file).unwrap();
    while let Some(b) = r.next_block() {
        match b.unwrap() {
            pcap_file::pcapng::Block::EnhancedPacket(p) => out.push(p.data.into_owned()),
            pcap_file::pcapng::Block::SimplePacket(p) => out.push(p.data.into_owned()),
            _ => {}
        }
    }
    out
}
