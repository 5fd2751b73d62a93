//! The one NF registry: building any NF by name from CLI options, for
//! the adapters (`nfkit nf NAME ...`, pipeline modules).

use crate::config::ConfigError;
use crate::verdict::NetworkFunction;
use crate::{
    Bridge, BridgeConfig, Firewall, FirewallConfig, LbConfig, LoadBalancer, Nat, NatConfig,
    Policer, PolicerConfig, Router, RouterConfig,
};

/// The NF names [`build`] knows, with a one-line description.
pub const NFS: &[(&str, &str)] = &[
    ("nat", "NAPT (RFC 3022; RFC 4787/5382/5508 behaviour)"),
    (
        "bridge",
        "MAC-learning bridge with ageing and static entries",
    ),
    (
        "lb",
        "Maglev load balancer for one virtual IP, heartbeat-registered backends",
    ),
    ("policer", "per-destination token bucket, WAN to LAN"),
    ("firewall", "lets back in only flows started from the LAN"),
    ("router", "IPv4 LPM router (DIR-24-8) with ICMP errors"),
];

/// A boxed NF, as adapters hold it.
pub type BoxedNf = Box<dyn NetworkFunction + Send>;

/// Build the NF `name` from its options (without the adapter's own
/// options: port specs given as `--lan SPEC --wan SPEC` belong to the
/// adapter, which maps LAN to port 0 and WAN to port 1, the NFs'
/// defaults).
pub fn build<I, S>(name: &str, args: I) -> Result<BoxedNf, ConfigError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    Ok(match name {
        "nat" => Box::new(Nat::new(NatConfig::from_args(args)?)?),
        "bridge" => Box::new(Bridge::new(BridgeConfig::from_args(args)?)?),
        "lb" => Box::new(LoadBalancer::new(LbConfig::from_args(args)?)?),
        "policer" => Box::new(Policer::new(PolicerConfig::from_args(args)?)?),
        "firewall" => Box::new(Firewall::new(FirewallConfig::from_args(args)?)?),
        "router" => Box::new(Router::new(RouterConfig::from_args(args)?)?),
        _ => {
            return Err(ConfigError::UnknownNf {
                name: name.into(),
                known: "nat, bridge, lb, policer, firewall, router",
            })
        }
    })
}

/// [`build`] for an NF between `ports` ports: the bridge gets
/// `--ports` from the port count unless given.
pub fn build_for_ports(name: &str, args: &[String], ports: usize) -> Result<BoxedNf, ConfigError> {
    let mut args = args.to_vec();
    if name == "bridge"
        && !args
            .iter()
            .any(|o| o == "--ports" || o.starts_with("--ports="))
    {
        args.extend(["--ports".into(), ports.to_string()]);
    }
    build(name, &args)
}

/// The NFs [`build`] knows, one per line with its description.
pub fn nf_list() -> String {
    let mut s = String::from("network functions:");
    for (n, d) in NFS {
        s.push_str(&format!("\n  {n:<9} {d}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_each_by_name() {
        let args = |n: &str| -> Vec<&str> {
            match n {
                "nat" => vec!["--ext-ip", "10.0.0.1"],
                "lb" => vec!["--vip", "10.0.0.1", "--table-size", "251"],
                "router" => vec!["--iface", "0,10.0.0.1/24,02:00:00:00:00:01"],
                _ => vec![],
            }
        };
        for (n, _) in NFS {
            let nf = build(n, args(n)).unwrap();
            assert_eq!(nf.name(), *n);
        }
        let args = |s: &str| -> Vec<String> { s.split_whitespace().map(String::from).collect() };
        let b = build_for_ports("bridge", &[], 3).unwrap();
        assert_eq!(b.port_count(), 3, "the bridge gets its port count");
        assert!(build_for_ports("nat", &args("--ext-ip nope"), 2)
            .err()
            .unwrap()
            .to_string()
            .contains("ext-ip"));
        assert!(matches!(
            build("nope", [""; 0]),
            Err(ConfigError::UnknownNf { .. })
        ));
    }
}
