//! `nfkit ctl run FILE.nfk`: a pipeline file (nfkit's config language)
//! loaded into a running daemon as the requests a client would send:
//! workers, ports (`NfkitPort`), classes, modules (`NfkitArg`), links,
//! task attachments, module commands, in that order. The file is parsed
//! and checked before the first request; a request the daemon refuses
//! stops the load with its message (what was already added stays, as
//! with bessctl's `run`).

use crate::client::Ctl;
use crate::CtlError;
use nfkit_daemon::pb;
use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::config::{self, Desc};
use nfkit_pipeline::graph::ROOT_TC;
use nfkit_pipeline::sched::{Placement, PolicySpec};
use std::collections::HashMap;
use std::path::Path;

/// What a load did, for the command to print.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub workers: usize,
    pub ports: usize,
    pub tcs: usize,
    pub modules: usize,
    pub links: usize,
    pub attachments: usize,
    pub commands: usize,
}

impl std::fmt::Display for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} workers, {} ports, {} traffic classes, {} modules, {} links, {} attachments, {} commands",
            self.workers,
            self.ports,
            self.tcs,
            self.modules,
            self.links,
            self.attachments,
            self.commands
        )
    }
}

/// nfkit argument text for `args` (what `NfkitArg` parses back).
pub fn args_text(args: Args) -> String {
    match args.into_value() {
        Value::Map(items) => items
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        v => v.to_string(),
    }
}

fn place_arg(p: Placement) -> Option<pb::traffic_class::Arg> {
    match (p.priority, p.share) {
        (Some(v), _) => Some(pb::traffic_class::Arg::Priority(v as i64)),
        (None, Some(s)) => Some(pb::traffic_class::Arg::Share(s as i64)),
        _ => None,
    }
}

/// The BESS class for an `.nfk` `tc` line.
fn tc_class(
    name: &str,
    policy: PolicySpec,
    parent: &str,
    wid: i64,
    p: Placement,
) -> pb::TrafficClass {
    let mut c = pb::TrafficClass {
        name: name.into(),
        policy: policy.name().into(),
        parent: if parent == ROOT_TC {
            String::new()
        } else {
            parent.into()
        },
        wid,
        arg: place_arg(p),
        ..Default::default()
    };
    match policy {
        PolicySpec::WeightedFair { resource } => c.resource = resource.to_string(),
        PolicySpec::RateLimit {
            resource,
            limit,
            max_burst,
        } => {
            let r = resource.to_string();
            c.limit.insert(r.clone(), limit as i64);
            if let Some(b) = max_burst {
                c.max_burst.insert(r.clone(), b as i64);
            }
            c.resource = r;
        }
        PolicySpec::Priority | PolicySpec::RoundRobin => {}
    }
    c
}

/// Parse `path` (every module class the daemon's registry knows).
pub fn parse(path: &Path) -> Result<Desc, CtlError> {
    config::load(path).map_err(|e| CtlError::Input(e.to_string()))
}

/// Send `desc` to the daemon.
pub fn load(ctl: &mut Ctl, desc: Desc) -> Result<Loaded, CtlError> {
    let mut done = Loaded::default();
    // Workers by declaration order: the first is wid 0 (nfkit's default
    // worker), the next wid 1, ...
    let wids: HashMap<String, i64> = desc
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| (w.name.clone(), i as i64))
        .collect();
    let wid =
        |w: &Option<String>| -> i64 { w.as_ref().and_then(|n| wids.get(n)).copied().unwrap_or(-1) };
    for (i, w) in desc.workers.iter().enumerate() {
        ctl.add_worker(i as i64, w.core.map(|c| c as i64).unwrap_or(-1))?;
        done.workers += 1;
    }
    for p in &desc.ports {
        ctl.create_port(&p.name, &p.spec)?;
        done.ports += 1;
    }
    for t in &desc.tcs {
        ctl.add_tc(tc_class(
            &t.name,
            t.policy,
            &t.parent,
            wid(&t.worker),
            t.placement,
        ))?;
        done.tcs += 1;
    }
    for m in desc.modules {
        ctl.create_module(&m.name, &m.class, &args_text(m.args))?;
        done.modules += 1;
    }
    for l in &desc.links {
        ctl.connect_modules(&l.from, l.ogate as u64, &l.to, l.igate as u64)?;
        done.links += 1;
    }
    for a in &desc.attachments {
        ctl.add_tc(pb::TrafficClass {
            name: format!("!leaf_{}:0", a.module),
            policy: "leaf".into(),
            leaf_module_name: a.module.clone(),
            parent: a.tc.clone().filter(|t| t != ROOT_TC).unwrap_or_default(),
            wid: wid(&a.worker),
            arg: place_arg(a.placement),
            ..Default::default()
        })?;
        done.attachments += 1;
    }
    for c in desc.commands {
        ctl.command(&c.module, &c.cmd, &args_text(c.args))?;
        done.commands += 1;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip_through_text() {
        let d = config::parse(
            "s::Source(size=60, burst=8) -> b::BPF(filters=[(filter=\"udp\", gate=1)]) -> Sink()",
            "t",
        )
        .unwrap();
        let texts: Vec<String> = d.modules.into_iter().map(|m| args_text(m.args)).collect();
        assert_eq!(texts[0], "size=60, burst=8");
        assert_eq!(texts[1], "filters=[(filter=\"udp\", gate=1)]");
        assert_eq!(texts[2], "");
    }

    #[test]
    fn rate_limit_classes_map_to_bess_fields() {
        let d = config::parse(
            "tc fast = rate_limit(resource=bit, limit=100M, max_burst=100k, priority=0)\nSource() -> Sink()",
            "t",
        )
        .unwrap();
        let t = &d.tcs[0];
        let c = tc_class(&t.name, t.policy, &t.parent, -1, t.placement);
        assert_eq!(c.policy, "rate_limit");
        assert_eq!(c.resource, "bit");
        assert_eq!(c.limit.get("bit"), Some(&100_000_000));
        assert_eq!(c.max_burst.get("bit"), Some(&100_000));
        assert_eq!(c.parent, "");
        assert_eq!(c.arg, Some(pb::traffic_class::Arg::Priority(0)));
    }
}
