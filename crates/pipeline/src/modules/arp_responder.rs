//! ArpResponder (BESS): answer ARP requests for configured IPv4
//! addresses. A request for one of them is turned into the reply in
//! place (sender = the configured MAC) and leaves by gate 0; every other
//! frame (ARP replies, requests for other addresses, not ARP) is
//! dropped. At most [`MAX_ENTRIES`] addresses.
//!
//! Arguments: `ip="10.0.0.1"`, `mac_addr="02:00:00:00:00:01"` (optional
//! first entry). Commands: `add(ip=, mac_addr=)`, `delete(ip=)`.

use super::classify::{self, FxMap};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("ArpResponder" => build);

pub const MAX_ENTRIES: usize = 4096;

#[derive(Default)]
pub struct ArpResponder {
    entries: FxMap<u32, [u8; 6]>,
}

impl ArpResponder {
    pub fn add(&mut self, ip: u32, mac: [u8; 6]) -> Result<(), ArgError> {
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&ip) {
            return Err(ArgError::general(format!(
                "the table is full ({MAX_ENTRIES} addresses)"
            )));
        }
        self.entries.insert(ip, mac);
        Ok(())
    }

    /// Turn a request for a known address into its reply.
    fn answer(&self, d: &mut [u8]) -> bool {
        // Ethernet/ARP, hardware Ethernet, protocol IPv4, sizes 6 and 4, request.
        if d.len() < 42 || d[12..14] != [0x08, 0x06] || d[14..22] != [0, 1, 8, 0, 6, 4, 0, 1] {
            return false;
        }
        let target = u32::from_be_bytes([d[38], d[39], d[40], d[41]]);
        let Some(mac) = self.entries.get(&target) else {
            return false;
        };
        let mut sender = [0u8; 10];
        sender.copy_from_slice(&d[22..32]);
        d.copy_within(6..12, 0);
        d[6..12].copy_from_slice(mac);
        d[21] = 2;
        d[32..42].copy_from_slice(&sender);
        d[22..28].copy_from_slice(mac);
        d[28..32].copy_from_slice(&target.to_be_bytes());
        true
    }
}

fn entry(args: &mut Args) -> Result<(u32, [u8; 6]), ArgError> {
    let ip = classify::ipv4("ip", &args.required_str("ip")?)?;
    let mac = classify::mac("mac_addr", &args.required_str("mac_addr")?)?;
    Ok((ip.into(), mac))
}

impl Module for ArpResponder {
    fn class(&self) -> &'static str {
        "ArpResponder"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| self.answer(p.data_mut()));
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let (ip, mac) = entry(args)?;
                args.finish(cmd)?;
                self.add(ip, mac)?;
            }
            "delete" => {
                let ip = classify::ipv4("ip", &args.required_str("ip")?)?;
                args.finish(cmd)?;
                if self.entries.remove(&u32::from(ip)).is_none() {
                    return Err(ArgError::new("ip", format!("no entry for {ip}")));
                }
            }
            _ => {
                return Err(ArgError::general(format!(
                    "ArpResponder has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("entries", self.entries.len() as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let mut m = ArpResponder::default();
    if args.pos("ip").is_some() || args.pos("mac_addr").is_some() {
        let (ip, mac) = entry(args)?;
        m.add(ip, mac)?;
    }
    Ok(Box::new(m))
}
