//! # nfkit-ctl: `nfkit ctl`
//!
//! A client of `nfkit daemon` in `bessctl`'s habits, over the daemon's
//! gRPC service (BESS's `bess.pb.BESSControl`): [`client`] connects
//! (the daemon's Unix socket by default, or `--grpc-url`) and makes one
//! blocking call per request; [`show`] formats what the daemon reports
//! (the pipeline as a text graph with per-edge counts, Graphviz dot or
//! JSON); [`script`] loads an `.nfk` file into the running daemon;
//! [`monitor`] turns two readings into per-second rates. The `nfkit`
//! command only parses arguments and prints what these return.
#![forbid(unsafe_code)]

pub mod client;
pub mod monitor;
pub mod script;
pub mod show;
pub mod tcpdump;

pub use client::{Ctl, Target};

/// Why a `ctl` command failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// No daemon at the target, or something else answers there.
    #[error("{0}")]
    Connect(String),
    /// The daemon refused the request: its own message.
    #[error("{rpc}: {msg} ({})", errno_name(*code))]
    Daemon {
        rpc: &'static str,
        code: i32,
        msg: String,
    },
    /// The connection failed mid-request.
    #[error("{0}")]
    Transport(String),
    /// Bad input on our side (a file that does not parse).
    #[error("{0}")]
    Input(String),
}

/// `ENOENT` for 2, as BESS's errors carry errno values.
pub fn errno_name(code: i32) -> String {
    let n = match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOTSUP => "ENOTSUP",
        libc::ELOOP => "ELOOP",
        libc::EAGAIN => "EAGAIN",
        _ => return format!("errno {code}"),
    };
    n.to_string()
}

/// `MODULE[:GATE]` (gate 0 when absent).
pub fn parse_gate(s: &str) -> Result<(String, u64), String> {
    match s.rsplit_once(':') {
        Some((m, g)) if !m.is_empty() => g
            .parse()
            .map(|g| (m.to_string(), g))
            .map_err(|_| format!("`{s}`: expected MODULE[:GATE], the gate a number")),
        _ if !s.is_empty() => Ok((s.to_string(), 0)),
        _ => Err("expected MODULE[:GATE]".into()),
    }
}

/// `IGATE:MODULE` or `MODULE` (input gate 0), BESS's `-> 1:m` order;
/// `MODULE:IGATE` is accepted too.
pub fn parse_in_gate(s: &str) -> Result<(String, u64), String> {
    if let Some((g, m)) = s.split_once(':') {
        if let Ok(g) = g.parse() {
            if !m.is_empty() {
                return Ok((m.to_string(), g));
            }
        }
    }
    parse_gate(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates() {
        assert_eq!(parse_gate("m").unwrap(), ("m".into(), 0));
        assert_eq!(parse_gate("m:3").unwrap(), ("m".into(), 3));
        assert!(parse_gate("m:x").is_err());
        assert!(parse_gate("").is_err());
        assert_eq!(parse_in_gate("2:m").unwrap(), ("m".into(), 2));
        assert_eq!(parse_in_gate("m:2").unwrap(), ("m".into(), 2));
        assert_eq!(parse_in_gate("m").unwrap(), ("m".into(), 0));
    }

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::ENOENT), "ENOENT");
        assert_eq!(errno_name(9999), "errno 9999");
    }
}
