//! UrlFilter (BESS): block HTTP requests for blacklisted URLs. A TCP
//! packet into gate 0 (client to server) whose payload is an HTTP
//! request whose `Host:` equals a blacklisted host (ASCII case ignored)
//! and whose path starts with that entry's path is dropped, and its flow
//! is blocked: later packets of that connection are dropped in both
//! directions (gate 1 carries server to client). Everything else passes,
//! gate i to gate i. (BESS also sends RSTs; nfkit drops.) At most
//! `max_flows` blocked connections (default 65536); when full, the
//! oldest is forgotten. Nothing is allocated per packet.
//!
//! Arguments: `blacklist=[(host="www.example.com", path="/"), ...]` (at
//! most 1024 entries), `max_flows=N`. Commands: `add(blacklist=[...])`,
//! `clear()`.

use super::classify::{ip, FxMap};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;
use std::collections::VecDeque;

crate::modules::declare_class!("UrlFilter" => build);

pub const MAX_RULES: usize = 1024;

/// (host, path prefix).
type Url = (Vec<u8>, Vec<u8>);

pub struct UrlFilter {
    blacklist: Vec<Url>,
    /// Blocked connections (client, server) -> present; oldest first.
    blocked: FxMap<u128, ()>,
    order: VecDeque<u128>,
    max_flows: usize,
}

/// (client addr:port, server addr:port) as one key.
fn conn(client: (u32, u16), server: (u32, u16)) -> u128 {
    (client.0 as u128) << 80
        | (client.1 as u128) << 64
        | (server.0 as u128) << 16
        | server.1 as u128
}

/// The request's path and Host header, if `payload` starts an HTTP request.
fn request(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let sp = payload.iter().take(8).position(|&b| b == b' ')?;
    if !payload[..sp].iter().all(u8::is_ascii_uppercase) || sp == 0 {
        return None;
    }
    let rest = &payload[sp + 1..];
    let path = &rest[..rest.iter().position(|&b| b == b' ')?];
    let mut lines = rest.split(|&b| b == b'\n').skip(1);
    let host = lines.find_map(|l| {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        (l.len() > 5 && l[..5].eq_ignore_ascii_case(b"host:")).then(|| l[5..].trim_ascii())
    })?;
    Some((path, host))
}

impl UrlFilter {
    fn matches(&self, path: &[u8], host: &[u8]) -> bool {
        self.blacklist
            .iter()
            .any(|(h, p)| h.eq_ignore_ascii_case(host) && path.starts_with(p))
    }

    fn block(&mut self, key: u128) {
        if self.blocked.len() >= self.max_flows {
            if let Some(old) = self.order.pop_front() {
                self.blocked.remove(&old);
            }
        }
        if self.blocked.insert(key, ()).is_none() {
            self.order.push_back(key);
        }
    }

    /// Whether to pass a packet arriving on `igate`.
    fn pass(&mut self, d: &[u8], igate: usize) -> bool {
        let Some((ihl, 6)) = ip::header(d) else {
            return true;
        };
        let Some((sp, dp)) = ip::ports(d, ihl, 6) else {
            return true;
        };
        let (src, dst) = ((ip::addr(d, ip::IP_SRC), sp), (ip::addr(d, ip::IP_DST), dp));
        let key = if igate == 0 {
            conn(src, dst)
        } else {
            conn(dst, src)
        };
        if self.blocked.contains_key(&key) {
            return false;
        }
        if igate != 0 {
            return true;
        }
        let l4 = ip::ETH_LEN + ihl;
        let Some(&off) = d.get(l4 + 12) else {
            return true;
        };
        let total = u16::from_be_bytes([d[ip::ETH_LEN + 2], d[ip::ETH_LEN + 3]]) as usize;
        let end = (ip::ETH_LEN + total).min(d.len());
        let start = l4 + (off >> 4) as usize * 4;
        let Some(payload) = d.get(start..end.max(start)) else {
            return true;
        };
        match request(payload) {
            Some((path, host)) if self.matches(path, host) => {
                self.block(key);
                false
            }
            _ => true,
        }
    }

    fn parse(&self, args: &mut Args) -> Result<Vec<Url>, ArgError> {
        let recs = args
            .records("blacklist")?
            .ok_or_else(|| ArgError::new("blacklist", "is required"))?;
        if self.blacklist.len() + recs.len() > MAX_RULES {
            return Err(ArgError::new(
                "blacklist",
                format!("more than {MAX_RULES} entries"),
            ));
        }
        recs.into_iter()
            .map(|mut r| {
                let w = |e: ArgError| ArgError::new("blacklist", e.to_string());
                let host = r.required_str("host").map_err(w)?;
                let path = r.str("path").map_err(w)?.unwrap_or_else(|| "/".into());
                r.finish("a URL").map_err(w)?;
                if host.is_empty() || !path.starts_with('/') {
                    return Err(ArgError::new(
                        "blacklist",
                        format!("`{host}{path}`: needs a host and a path starting with /"),
                    ));
                }
                Ok((host.into_bytes(), path.into_bytes()))
            })
            .collect()
    }
}

impl Module for UrlFilter {
    fn class(&self) -> &'static str {
        "UrlFilter"
    }
    fn igates(&self) -> usize {
        2
    }
    fn ogates(&self) -> usize {
        2
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| self.pass(p.data(), igate));
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(igate, batch);
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let b = self.parse(args)?;
                args.finish(cmd)?;
                self.blacklist.extend(b);
            }
            "clear" => {
                args.finish(cmd)?;
                self.blacklist.clear();
                self.blocked.clear();
                self.order.clear();
            }
            _ => {
                return Err(ArgError::general(format!(
                    "UrlFilter has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("blocked_flows", self.blocked.len() as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let max_flows = args.usize_in("max_flows", 1 << 16, 1, 1 << 24)?;
    let mut blocked = FxMap::default();
    blocked.reserve(max_flows);
    let mut m = UrlFilter {
        blacklist: Vec::new(),
        blocked,
        order: VecDeque::with_capacity(max_flows),
        max_flows,
    };
    if args.pos("blacklist").is_some() {
        m.blacklist = m.parse(args)?;
    }
    Ok(Box::new(m))
}
