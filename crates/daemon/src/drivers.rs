//! Port drivers under BESS's names, mapped onto nfkit's ports:
//!
//! | driver | argument | nfkit port |
//! |---|---|---|
//! | `PMDPort` | `pci` | `pci:ADDR` (82599 or VirtIO, uio or VFIO) |
//! | `PMDPort` | `vdev` | DPDK's `net_af_xdp0,iface=X`, `net_af_packet0,iface=X`, `net_vhost0,iface=PATH`, `net_virtio_user0,path=PATH`, `net_tap0,iface=X`, `net_null0`, `net_pcap0,rx_pcap=A,tx_pcap=B`, or any nfkit spec |
//! | `PMDPort` | `port_id` | refused: nfkit has no DPDK port numbers |
//! | `PCAPPort` | `dev` | an interface: `afpacket:DEV` (live, as libpcap's); a file: `pcap:FILE` |
//! | `UnixSocketPort` | `path`, `min_rx_interval_ns`, `confirm_connect` | nfkit's own SOCK_SEQPACKET port ([`crate::unix_port`]) |
//! | `VPort` | `ifname` | `tap:IFNAME` |
//! | `NfkitPort` | `spec` (`bess.pb.NfkitPortArg`) | any nfkit spec |

use crate::error::{Fail, Res};
use crate::mclass::{decode, type_name};
use crate::pb;
use crate::unix_port::UnixSocketPort;
use nfkit_port::{Port, PortError};
use prost_types::Any;

/// Opens a port from an nfkit spec (the command passes its registry,
/// which knows `sim:` and `pci:` too).
pub type OpenFn = dyn Fn(&str) -> Result<Box<dyn Port>, PortError> + Send + Sync;

pub const DRIVERS: &[(&str, &str)] = &[
    (
        "NfkitPort",
        "any nfkit port spec (bess.pb.NfkitPortArg {spec})",
    ),
    ("PCAPPort", "a network interface (AF_PACKET) or a pcap file"),
    (
        "PMDPort",
        "a PCI device or a DPDK-style vdev mapped to nfkit's ports",
    ),
    (
        "UnixSocketPort",
        "a SOCK_SEQPACKET Unix socket, one packet per message",
    ),
    ("VPort", "a TAP interface nfkit creates"),
];

/// ListDrivers.
pub fn list() -> crate::pb::ListDriversResponse {
    crate::pb::ListDriversResponse {
        error: None,
        driver_names: DRIVERS.iter().map(|d| d.0.into()).collect(),
    }
}

/// GetDriverInfo.
pub fn info(name: &str) -> crate::error::Res<crate::pb::GetDriverInfoResponse> {
    let d = DRIVERS
        .iter()
        .find(|d| d.0 == name)
        .ok_or_else(|| crate::error::Fail::noent(format!("no port driver named `{name}`")))?;
    Ok(crate::pb::GetDriverInfoResponse {
        error: None,
        name: d.0.into(),
        help: d.1.into(),
        commands: Vec::new(),
    })
}

/// What CreatePort asked for.
pub struct PortRequest<'a> {
    pub name: &'a str,
    pub driver: &'a str,
    pub num_inc_q: u64,
    pub num_out_q: u64,
    pub arg: Option<&'a Any>,
}

/// Open the port; returns it and the nfkit spec it stands for.
pub fn create(req: &PortRequest<'_>, open: &OpenFn) -> Res<(Box<dyn Port>, String)> {
    let queues = req.num_inc_q.max(req.num_out_q);
    if req.num_inc_q > 1 && req.num_out_q > 1 && req.num_inc_q != req.num_out_q {
        return Err(Fail::inval(format!(
            "nfkit ports have as many receive as send queues (asked {} and {})",
            req.num_inc_q, req.num_out_q
        )));
    }
    let spec = match req.driver {
        "UnixSocketPort" => {
            let a: pb::UnixSocketPortArg = decode(req.arg, "UnixSocketPortArg")?;
            if queues > 1 {
                return Err(Fail::inval("UnixSocketPort has one queue each way"));
            }
            let p = UnixSocketPort::open(
                req.name,
                &a.path,
                a.min_rx_interval_ns,
                a.confirm_connect,
                4096,
            )
            .map_err(port_fail)?;
            let spec = format!("unix-seqpacket:{}", a.path);
            return Ok((Box::new(p), spec));
        }
        "NfkitPort" => {
            let a: pb::NfkitPortArg = decode(req.arg, "NfkitPortArg")?;
            if a.spec.is_empty() {
                return Err(Fail::inval(
                    "NfkitPort: `spec` is required (e.g. \"afpacket:veth0\")",
                ));
            }
            a.spec
        }
        "VPort" => {
            let a: pb::VPortArg = decode(req.arg, "VPortArg")?;
            if a.cpid.is_some() {
                return Err(Fail::notsup(
                    "VPort: docker, container_pid and netns are not supported by nfkit (the TAP interface is made in the daemon's namespace)",
                ));
            }
            if !a.ip_addrs.is_empty() {
                return Err(Fail::notsup(
                    "VPort: ip_addrs is not supported by nfkit; configure the interface with `ip addr`",
                ));
            }
            if a.ifname.is_empty() {
                return Err(Fail::inval("VPort: `ifname` is required"));
            }
            with_queues(format!("tap:{}", a.ifname), queues)
        }
        "PCAPPort" => {
            let a: pb::PcapPortArg = decode(req.arg, "PCAPPortArg")?;
            if a.dev.is_empty() {
                return Err(Fail::inval("PCAPPort: `dev` is required"));
            }
            let is_file = a.dev.contains('/')
                || a.dev.ends_with(".pcap")
                || std::path::Path::new(&a.dev).is_file();
            if is_file {
                format!("pcap:{}", a.dev)
            } else {
                with_queues(format!("afpacket:{}", a.dev), queues)
            }
        }
        "PMDPort" => {
            let a: pb::PmdPortArg = decode(req.arg, "PMDPortArg")?;
            match a.port {
                Some(pb::pmd_port_arg::Port::PortId(id)) => {
                    return Err(Fail::inval(format!(
                        "PMDPort: port_id {id} names a DPDK port number, which nfkit does not have; give `pci` (e.g. \"0000:03:00.0\") or `vdev` (e.g. \"net_af_packet0,iface=eth0\")"
                    )))
                }
                Some(pb::pmd_port_arg::Port::Pci(pci)) => format!("pci:{pci}"),
                Some(pb::pmd_port_arg::Port::Vdev(v)) => with_queues(vdev_to_spec(&v)?, queues),
                None => return Err(Fail::inval("PMDPort: give `pci` or `vdev`")),
            }
        }
        other => {
            return Err(Fail::noent(format!(
                "no port driver named `{other}` (nfkit has: {})",
                DRIVERS.iter().map(|d| d.0).collect::<Vec<_>>().join(", ")
            )))
        }
    };
    let port = open(&spec).map_err(port_fail)?;
    Ok((port, spec))
}

fn port_fail(e: PortError) -> Fail {
    let code = match &e {
        PortError::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        _ => libc::EINVAL,
    };
    Fail::new(code, format!("cannot open port: {e}"))
}

fn with_queues(spec: String, queues: u64) -> String {
    if queues > 1 && !spec.contains("queues=") {
        format!("{spec},queues={queues}")
    } else {
        spec
    }
}

/// DPDK's `--vdev` syntax for the virtual devices nfkit has, or an nfkit
/// spec given as is.
pub fn vdev_to_spec(vdev: &str) -> Res<String> {
    let (dev, opts) = vdev.split_once(',').unwrap_or((vdev, ""));
    let kv: Vec<(&str, &str)> = opts
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.split_once('=').unwrap_or((s, "")))
        .collect();
    let get = |k: &str| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let kind = dev.trim_end_matches(|c: char| c.is_ascii_digit());
    let need = |k: &str| {
        get(k)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Fail::inval(format!("PMDPort vdev `{vdev}`: `{k}=` is required")))
    };
    let queues = |k: &str| get(k).map(|q| format!(",queues={q}")).unwrap_or_default();
    Ok(match kind {
        "net_af_xdp" => {
            let q = get("start_queue").map(|s| format!(":{s}")).unwrap_or_default();
            format!("afxdp:{}{q}{}", need("iface")?, queues("queue_count"))
        }
        "net_af_packet" => format!("afpacket:{}{}", need("iface")?, queues("qpairs")),
        "net_vhost" => format!("vhost-user:{}{}", need("iface")?, queues("queues")),
        "net_virtio_user" => format!("virtio-user:{}{}", need("path")?, queues("queues")),
        "net_tap" => format!("tap:{}", need("iface")?),
        "net_null" => {
            let mut s = String::from("null:");
            if let Some(size) = get("size") {
                s.push_str(&format!("size={size}"));
            }
            if get("copy") == Some("1") {
                s.push_str(",copy=1");
            }
            s
        }
        "net_pcap" => match (get("rx_pcap"), get("tx_pcap")) {
            (Some(rx), Some(tx)) => format!("pcap:rx={rx},tx={tx}"),
            (Some(rx), None) => format!("pcap:{rx}"),
            (None, Some(tx)) => format!("pcap-out:{tx}"),
            (None, None) => {
                return Err(Fail::inval(format!(
                    "PMDPort vdev `{vdev}`: give rx_pcap= and/or tx_pcap="
                )))
            }
        },
        _ if vdev.parse::<nfkit_port::PortSpec>().is_ok() => vdev.to_string(),
        _ => {
            return Err(Fail::inval(format!(
                "PMDPort vdev `{vdev}`: nfkit maps net_af_xdp, net_af_packet, net_vhost, net_virtio_user, net_tap, net_null and net_pcap, or takes an nfkit spec (`afpacket:eth0`)"
            )))
        }
    })
}

/// The driver argument as ListPorts reports it.
pub fn arg_type(arg: Option<&Any>) -> &str {
    arg.map(type_name).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::vdev_to_spec;

    #[test]
    fn dpdk_vdevs_map_to_nfkit_specs() {
        assert_eq!(
            vdev_to_spec("net_af_packet0,iface=veth0").unwrap(),
            "afpacket:veth0"
        );
        assert_eq!(
            vdev_to_spec("net_af_xdp1,iface=eth1,start_queue=2,queue_count=2").unwrap(),
            "afxdp:eth1:2,queues=2"
        );
        assert_eq!(
            vdev_to_spec("net_vhost0,iface=/tmp/v.sock").unwrap(),
            "vhost-user:/tmp/v.sock"
        );
        assert_eq!(
            vdev_to_spec("net_virtio_user0,path=/tmp/v.sock,queues=2").unwrap(),
            "virtio-user:/tmp/v.sock,queues=2"
        );
        assert_eq!(vdev_to_spec("net_null0,size=64").unwrap(), "null:size=64");
        assert_eq!(vdev_to_spec("afpacket:veth1").unwrap(), "afpacket:veth1");
        assert!(vdev_to_spec("net_af_packet0").is_err());
        assert!(vdev_to_spec("net_ring0").is_err());
    }
}
