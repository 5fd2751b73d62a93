//! AntiSpoof: a vport's source-address guard (SoftNIC §6.3, per-VM
//! isolation). A frame from the VM leaves gate 0 only if its Ethernet
//! source is the vport's `mac` and, for IPv4 and ARP, its sender address
//! is one of `ips`; every other frame is dropped and counted by reason
//! (`bad_mac`, `bad_ip`, `bad_other`).
//!
//! Arguments: `mac="02:00:00:00:00:01"` (required), `ips=["10.0.0.1",
//! "10.0.1.0/24"]` (addresses or prefixes; default: any address, only
//! the MAC is checked), `other=1` (default 1: frames that are neither
//! IPv4 nor ARP pass when the MAC matches; 0 drops them).
//! Command: `set(mac=..., ips=[...], other=N)` replaces the guard.

use super::classify::{self, ip};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::{Batch, PktBuf};

crate::modules::declare_class!("AntiSpoof" => build);

/// Most addresses or prefixes one guard holds.
pub const MAX_IPS: usize = 1024;

const ETH_ARP: [u8; 2] = [0x08, 0x06];
const ETH_IPV4: [u8; 2] = [0x08, 0x00];
/// ARP sender protocol address: after htype, ptype, hlen, plen, oper
/// and the sender MAC.
const ARP_SPA: usize = ip::ETH_LEN + 14;

#[derive(Debug, Clone)]
struct Guard {
    mac: [u8; 6],
    /// (network, mask); empty: any address.
    ips: Vec<(u32, u32)>,
    other: bool,
}

pub struct AntiSpoof {
    guard: Guard,
    bad_mac: u64,
    bad_ip: u64,
    bad_other: u64,
}

/// Why a frame is refused.
enum Verdict {
    Pass,
    BadMac,
    BadIp,
    BadOther,
}

impl Guard {
    fn parse(args: &mut Args) -> Result<Guard, ArgError> {
        let mac = classify::mac("mac", &args.required_str("mac")?)?;
        let mut ips = Vec::new();
        if let Some(list) = args.str_list("ips")? {
            if list.len() > MAX_IPS {
                return Err(ArgError::new("ips", format!("at most {MAX_IPS} entries")));
            }
            for s in list {
                ips.push(classify::cidr("ips", &s)?);
            }
        }
        let other = args.bool_or("other", true)?;
        Ok(Guard { mac, ips, other })
    }

    fn ip_ok(&self, a: u32) -> bool {
        self.ips.is_empty() || self.ips.iter().any(|&(net, mask)| a & mask == net)
    }

    #[inline]
    fn check(&self, p: &PktBuf) -> Verdict {
        let d = p.data();
        if d.len() < ip::ETH_LEN || d[6..12] != self.mac {
            return Verdict::BadMac;
        }
        match [d[12], d[13]] {
            ETH_IPV4 => match ip::header(d) {
                Some(_) if self.ip_ok(ip::addr(d, ip::IP_SRC)) => Verdict::Pass,
                _ => Verdict::BadIp,
            },
            ETH_ARP => {
                // The sender fields must be the VM's own too.
                if d.len() < ARP_SPA + 4 || d[ip::ETH_LEN + 8..ip::ETH_LEN + 14] != self.mac {
                    return Verdict::BadIp;
                }
                if self.ip_ok(ip::addr(d, ARP_SPA)) {
                    Verdict::Pass
                } else {
                    Verdict::BadIp
                }
            }
            _ if self.other => Verdict::Pass,
            _ => Verdict::BadOther,
        }
    }
}

impl Module for AntiSpoof {
    fn class(&self) -> &'static str {
        "AntiSpoof"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            match self.guard.check(&p) {
                Verdict::Pass => {
                    ctx.emit(0, p);
                    continue;
                }
                Verdict::BadMac => self.bad_mac += 1,
                Verdict::BadIp => self.bad_ip += 1,
                Verdict::BadOther => self.bad_other += 1,
            }
            ctx.drop_packet(p);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "set" => {
                let g = Guard::parse(args)?;
                args.finish(cmd)?;
                self.guard = g;
                Ok(no_reply())
            }
            _ => Err(ArgError::general(format!(
                "AntiSpoof has no command `{cmd}`"
            ))),
        }
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("bad_mac", self.bad_mac),
            ("bad_ip", self.bad_ip),
            ("bad_other", self.bad_other),
        ]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(AntiSpoof {
        guard: Guard::parse(args)?,
        bad_mac: 0,
        bad_ip: 0,
        bad_other: 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Harness;

    fn frame(src_mac: [u8; 6], ethertype: [u8; 2], sender_ip: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&src_mac);
        f[12..14].copy_from_slice(&ethertype);
        if ethertype == ETH_IPV4 {
            f[14] = 0x45;
            f[14 + 9] = 17;
            f[26..30].copy_from_slice(&sender_ip);
        } else {
            f[14 + 8..14 + 14].copy_from_slice(&src_mac);
            f[ARP_SPA..ARP_SPA + 4].copy_from_slice(&sender_ip);
        }
        f
    }

    #[test]
    fn only_the_vports_own_addresses_pass() {
        let mut args = Args::from_pairs(&[
            ("mac", Value::Str("02:00:00:00:00:01".into())),
            ("ips", Value::List(vec![Value::Str("10.0.0.1".into()), Value::Str("10.0.1.0/24".into())])),
        ]);
        let env = crate::registry::BuildEnv {
            ports: Default::default(),
            pool: Harness::new().pool().clone(),
        };
        let mut m = build(&mut args, &env).unwrap();
        let me = [2, 0, 0, 0, 0, 1];
        let other = [2, 0, 0, 0, 0, 9];
        let frames = [
            frame(me, ETH_IPV4, [10, 0, 0, 1]),    // pass
            frame(me, ETH_IPV4, [10, 0, 1, 77]),   // pass (prefix)
            frame(me, ETH_IPV4, [10, 0, 0, 2]),    // bad ip
            frame(other, ETH_IPV4, [10, 0, 0, 1]), // bad mac
            frame(me, ETH_ARP, [10, 0, 0, 1]),     // pass
            frame(me, ETH_ARP, [10, 0, 0, 3]),     // bad ip (ARP spoof)
            frame(me, [0x86, 0xdd], [0; 4]),       // other: passes by default
        ];
        let mut h = Harness::new();
        let out = h.run(&mut *m, 0, &frames);
        assert_eq!(out[0], vec![frames[0].clone(), frames[1].clone(), frames[4].clone(), frames[6].clone()]);
        assert_eq!(h.counters().2, 3, "three drops");
        let stats = m.extra_stats();
        assert_eq!(stats, vec![("bad_mac", 1), ("bad_ip", 2), ("bad_other", 0)]);
        let mut set = Args::from_pairs(&[("mac", Value::Str("02:00:00:00:00:01".into())), ("other", Value::Int(0))]);
        m.command("set", &mut set).unwrap();
        let out = h.run(&mut *m, 0, &frames[6..]);
        assert!(out[0].is_empty(), "other frames refused after set(other=0)");
    }
}
