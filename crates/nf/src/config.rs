//! Parsing NF options: `--key value` (or `--key=value`) lists for the CLI,
//! and `FromStr` value types (port ranges, durations, prefixes, rates).
//!
//! Each NF config implements `FromStr` over a whole option string such as
//! `"--ext-ip 10.0.0.1 --ports 1024-65535 --expire 60s"` and
//! `from_args` over already split arguments.

use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use nfkit_packet::MacAddr;

/// A configuration that cannot work, with what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown option `{option}` (this NF takes: {known})")]
    UnknownOption { option: String, known: &'static str },
    #[error("expected an option starting with `--`, got `{0}`")]
    NotAnOption(String),
    #[error("option `{0}` needs a value")]
    MissingValue(String),
    #[error("option `--{0}` is given twice (only --iface, --route, --neighbor, --backend and --static repeat)")]
    Duplicate(String),
    #[error("option `{option}`: `{value}` is not {expected}")]
    BadValue {
        option: String,
        value: String,
        expected: &'static str,
    },
    #[error("option `{0}` is required")]
    Required(&'static str),
    #[error("port range {lo}-{hi} is inverted (first port above last)")]
    InvertedRange { lo: u16, hi: u16 },
    #[error("port range must not include port 0")]
    ZeroPort,
    #[error("{what} capacity must be at least 1")]
    ZeroCapacity { what: &'static str },
    #[error("{what} capacity {given} is above the maximum of {max} entries")]
    TooLarge {
        what: &'static str,
        given: usize,
        max: usize,
    },
    #[error("{what} tables of this size need {need_mib} MiB; this machine has {avail_mib} MiB available (lower the capacity)")]
    OutOfMemory {
        what: &'static str,
        need_mib: u64,
        avail_mib: u64,
    },
    #[error("{what} must not be zero")]
    Zero { what: &'static str },
    #[error("prefix `{0}`: {1}")]
    BadPrefix(String, &'static str),
    #[error("LAN and WAN must be different ports (both are {0})")]
    SamePort(usize),
    #[error("port {port} is out of range: this NF has {count} ports")]
    PortOutOfRange { port: usize, count: usize },
    #[error("a bridge needs 2 to 64 ports, not {0}")]
    BridgePorts(usize),
    #[error("Maglev table size {0} must be a prime larger than the backend capacity {1}")]
    BadTableSize(usize, usize),
    #[error("Maglev table size {0} is above the maximum of {max} (the paper uses 65537 or 655373; every backend change rebuilds the whole table on the data path)", max = crate::maglev::MAX_TABLE_SIZE)]
    TableTooLarge(usize),
    #[error("load balancer has no backends and heartbeats are off: nothing could ever be served")]
    EmptyBackends,
    #[error("{given} static backends do not fit in the backend capacity of {capacity}")]
    TooManyBackends { given: usize, capacity: usize },
    #[error("a NAT takes 1 to 64 external addresses, not {0}")]
    ExternalAddresses(usize),
    #[error("unknown network function `{name}` (known: {known})")]
    UnknownNf { name: String, known: &'static str },
    #[error("router: {0}")]
    Router(String),
}

impl ConfigError {
    pub(crate) fn bad(option: &str, value: &str, expected: &'static str) -> ConfigError {
        ConfigError::BadValue {
            option: option.into(),
            value: value.into(),
            expected,
        }
    }
}

/// The options that build a list and may be given several times; any
/// other option given twice is refused (the second would silently win).
pub const REPEATABLE: &[&str] = &[
    "iface",
    "route",
    "neighbor",
    "neighbour",
    "backend",
    "static",
];

/// Walk `--key value` / `--key=value` pairs, calling `f(key, value)` with
/// the key without its dashes. An option given twice is an error unless
/// it is [`REPEATABLE`].
pub fn for_each_option<I, S>(
    args: I,
    mut f: impl FnMut(&str, &str) -> Result<(), ConfigError>,
) -> Result<(), ConfigError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut it = args.into_iter();
    let mut seen: Vec<String> = Vec::new();
    while let Some(a) = it.next() {
        let a = a.as_ref();
        let Some(key) = a.strip_prefix("--") else {
            return Err(ConfigError::NotAnOption(a.into()));
        };
        let name = key.split_once('=').map_or(key, |(k, _)| k);
        if !REPEATABLE.contains(&name) {
            if seen.iter().any(|s| s == name) {
                return Err(ConfigError::Duplicate(name.into()));
            }
            seen.push(name.into());
        }
        match key.split_once('=') {
            Some((k, v)) => f(k, v)?,
            None => {
                let v = it
                    .next()
                    .ok_or_else(|| ConfigError::MissingValue(a.into()))?;
                f(key, v.as_ref())?;
            }
        }
    }
    Ok(())
}

/// Parse a value with `FromStr`, naming the option on error.
pub fn value<T: FromStr>(option: &str, v: &str, expected: &'static str) -> Result<T, ConfigError> {
    v.parse().map_err(|_| ConfigError::bad(option, v, expected))
}

pub(crate) fn ip(option: &str, v: &str) -> Result<Ipv4Addr, ConfigError> {
    value(option, v, "an IPv4 address")
}

pub(crate) fn mac(option: &str, v: &str) -> Result<MacAddr, ConfigError> {
    value(option, v, "a MAC address")
}

pub(crate) fn count(option: &str, v: &str) -> Result<usize, ConfigError> {
    value(option, v, "a number")
}

pub(crate) fn duration(option: &str, v: &str) -> Result<Duration, ConfigError> {
    parse_duration(v).ok_or_else(|| ConfigError::bad(option, v, "a duration like 60s, 500ms, 2m"))
}

/// A duration: a number with an optional unit `ns`, `us`, `ms`, `s`
/// (default), `m`, `h`. Examples: `60s`, `500ms`, `10`, `2m`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ns_per = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    Some(Duration::from_nanos(n.checked_mul(ns_per)?))
}

/// A byte count or byte rate: a number with an optional decimal suffix
/// `k`, `M`, `G`, `T` (×1000ⁿ). Examples: `375000000`, `375M`, `10G`.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// An inclusive range of L4 ports, `lo-hi`, e.g. `1024-65535`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub fn new(lo: u16, hi: u16) -> Result<PortRange, ConfigError> {
        if lo > hi {
            return Err(ConfigError::InvertedRange { lo, hi });
        }
        if lo == 0 {
            return Err(ConfigError::ZeroPort);
        }
        Ok(PortRange { lo, hi })
    }

    pub fn len(&self) -> usize {
        usize::from(self.hi - self.lo) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, p: u16) -> bool {
        (self.lo..=self.hi).contains(&p)
    }
}

impl FromStr for PortRange {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::bad("ports", s, "a port range like 1024-65535");
        let (lo, hi) = s.split_once('-').ok_or_else(bad)?;
        let lo = lo.trim().parse().map_err(|_| bad())?;
        let hi = hi.trim().parse().map_err(|_| bad())?;
        PortRange::new(lo, hi)
    }
}

/// An IPv4 prefix `a.b.c.d/len` whose host bits are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Ipv4Prefix {
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Ipv4Prefix, ConfigError> {
        let text = || format!("{addr}/{len}");
        if len > 32 {
            return Err(ConfigError::BadPrefix(text(), "length above 32"));
        }
        if u32::from(addr) & !Self::mask(len) != 0 {
            return Err(ConfigError::BadPrefix(
                text(),
                "host bits are set (did you mean the network address?)",
            ));
        }
        Ok(Ipv4Prefix { addr, len })
    }

    /// The netmask of a prefix length, as a u32.
    pub fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len.min(32)))
        }
    }

    pub fn contains(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & Self::mask(self.len) == u32::from(self.addr)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| ConfigError::BadPrefix(s.into(), "expected address/length"))?;
        let addr = a
            .parse()
            .map_err(|_| ConfigError::BadPrefix(s.into(), "not an IPv4 address"))?;
        let len = l
            .parse()
            .map_err(|_| ConfigError::BadPrefix(s.into(), "length is not a number"))?;
        Ipv4Prefix::new(addr, len)
    }
}

impl std::fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The most entries any NF table takes (flows, mappings, MACs,
/// destinations): 2^24. Checked before anything is allocated.
pub const MAX_CAPACITY: usize = 1 << 24;

/// A table capacity: 1 to [`MAX_CAPACITY`].
pub(crate) fn check_capacity(what: &'static str, n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        return Err(ConfigError::ZeroCapacity { what });
    }
    if n > MAX_CAPACITY {
        return Err(ConfigError::TooLarge {
            what,
            given: n,
            max: MAX_CAPACITY,
        });
    }
    Ok(())
}

/// Refuse tables that would take more memory than the machine has
/// available (`MemAvailable`): Linux would kill the process while the
/// tables are filled in, instead of failing the allocation.
pub(crate) fn check_memory(what: &'static str, bytes: usize) -> Result<(), ConfigError> {
    let Some(avail) = mem_available() else {
        return Ok(());
    };
    if bytes as u64 > avail {
        return Err(ConfigError::OutOfMemory {
            what,
            need_mib: (bytes as u64).div_ceil(1 << 20),
            avail_mib: avail >> 20,
        });
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Check two distinct ports, both below `count`.
pub(crate) fn lan_wan(lan: usize, wan: usize, count: usize) -> Result<(), ConfigError> {
    for p in [lan, wan] {
        if p >= count {
            return Err(ConfigError::PortOutOfRange { port: p, count });
        }
    }
    if lan == wan {
        return Err(ConfigError::SamePort(lan));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("10"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("s"), None);
        assert_eq!(parse_duration("5 days"), None);
    }

    #[test]
    fn port_ranges() {
        assert_eq!(
            "1024-65535".parse::<PortRange>(),
            Ok(PortRange {
                lo: 1024,
                hi: 65535
            })
        );
        assert_eq!(
            "2000-1000".parse::<PortRange>(),
            Err(ConfigError::InvertedRange { lo: 2000, hi: 1000 })
        );
        assert_eq!("0-10".parse::<PortRange>(), Err(ConfigError::ZeroPort));
        assert!("1024".parse::<PortRange>().is_err());
    }

    #[test]
    fn prefixes() {
        let p: Ipv4Prefix = "10.0.0.0/8".parse().unwrap();
        assert!(p.contains("10.255.0.1".parse().unwrap()));
        assert!(!p.contains("11.0.0.1".parse().unwrap()));
        assert!(matches!(
            "10.0.0.1/8".parse::<Ipv4Prefix>(),
            Err(ConfigError::BadPrefix(_, _))
        ));
        assert!("10.0.0.0/33".parse::<Ipv4Prefix>().is_err());
        assert!("0.0.0.0/0".parse::<Ipv4Prefix>().is_ok());
    }

    #[test]
    fn options() {
        let mut seen = Vec::new();
        for_each_option(["--a", "1", "--b=2"], |k, v| {
            seen.push((k.to_string(), v.to_string()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [("a".into(), "1".into()), ("b".into(), "2".into())]);
        assert_eq!(
            for_each_option(["--a"], |_, _| Ok(())),
            Err(ConfigError::MissingValue("--a".into()))
        );
        assert_eq!(parse_bytes("375M"), Some(375_000_000));
    }

    #[test]
    fn a_repeated_option_is_refused_unless_it_builds_a_list() {
        assert_eq!(
            for_each_option(["--capacity", "10", "--capacity=20"], |_, _| Ok(())),
            Err(ConfigError::Duplicate("capacity".into()))
        );
        assert!(for_each_option(["--route", "a", "--route", "b"], |_, _| Ok(())).is_ok());
        assert!(
            crate::build("nat", ["--ext-ip", "10.0.0.1", "--ext-ip", "10.0.0.2"])
                .err()
                .unwrap()
                .to_string()
                .contains("given twice")
        );
    }
}
