//! `nfkit ctl show ...`: what the daemon reports, as text (bessctl's
//! habits), Graphviz dot or JSON. Snapshots ([`PipelineSnap`]) are also
//! what `monitor` differences.

use crate::client::Ctl;
use crate::CtlError;
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

/// How `show pipeline` is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Dot,
    Json,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Format::Text),
            "dot" => Ok(Format::Dot),
            "json" => Ok(Format::Json),
            _ => Err(format!("format `{s}`: expected text, dot or json")),
        }
    }
}

/// One edge: a module's output gate and what it feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSnap {
    pub ogate: u64,
    pub to: String,
    pub igate: u64,
    pub packets: u64,
    pub batches: u64,
    pub bytes: u64,
}

/// One module and its output edges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModSnap {
    pub name: String,
    pub class: String,
    /// nfkit's counters (`in=.. out=.. created=.. consumed=.. dropped=..`).
    pub desc: String,
    pub dropped: u64,
    pub edges: Vec<EdgeSnap>,
}

/// The whole graph with its counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct PipelineSnap {
    pub modules: Vec<ModSnap>,
    /// The daemon's clock (seconds since the epoch) when read.
    pub timestamp: f64,
}

impl PipelineSnap {
    pub fn read(ctl: &mut Ctl) -> Result<PipelineSnap, CtlError> {
        let mut snap = PipelineSnap::default();
        for m in ctl.modules()? {
            let info = match ctl.module_info(&m.name) {
                Ok(i) => i,
                // Destroyed between the two requests.
                Err(CtlError::Daemon { code, .. }) if code == libc::ENOENT => continue,
                Err(e) => return Err(e),
            };
            let mut edges: Vec<EdgeSnap> = info
                .ogates
                .iter()
                .map(|o| {
                    snap.timestamp = snap.timestamp.max(o.timestamp);
                    EdgeSnap {
                        ogate: o.ogate,
                        to: o.name.clone(),
                        igate: o.igate,
                        packets: o.pkts,
                        batches: o.cnt,
                        bytes: o.bytes,
                    }
                })
                .collect();
            edges.sort_by_key(|e| e.ogate);
            snap.modules.push(ModSnap {
                name: info.name,
                class: info.mclass,
                desc: info.desc,
                dropped: info.deadends,
                edges,
            });
        }
        if snap.timestamp == 0.0 {
            snap.timestamp = now();
        }
        Ok(snap)
    }

    fn module(&self, name: &str) -> Option<&ModSnap> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// The graph as indented text: each chain from a module nothing
    /// feeds, one line per edge with its packet count (or the `label`
    /// given for it); a module reached twice is drawn once.
    pub fn render_text(&self, label: &dyn Fn(&ModSnap, &EdgeSnap) -> String) -> String {
        if self.modules.is_empty() {
            return "(no modules)\n".into();
        }
        let fed: HashSet<&str> = self
            .modules
            .iter()
            .flat_map(|m| m.edges.iter().map(|e| e.to.as_str()))
            .collect();
        let mut roots: Vec<&ModSnap> = self
            .modules
            .iter()
            .filter(|m| !fed.contains(m.name.as_str()))
            .collect();
        let mut out = String::new();
        let mut seen: HashSet<String> = HashSet::new();
        // Modules only reachable through a loop are drawn from themselves.
        let mut rest = self.modules.iter();
        loop {
            for r in std::mem::take(&mut roots) {
                if seen.insert(r.name.clone()) {
                    let _ = writeln!(out, "{}", node(r));
                    self.draw(r, "", &mut seen, &mut out, label);
                }
            }
            match rest.find(|m| !seen.contains(&m.name)) {
                Some(m) => roots.push(m),
                None => break,
            }
        }
        out
    }

    fn draw(
        &self,
        m: &ModSnap,
        indent: &str,
        seen: &mut HashSet<String>,
        out: &mut String,
        label: &dyn Fn(&ModSnap, &EdgeSnap) -> String,
    ) {
        let n = m.edges.len();
        for (i, e) in m.edges.iter().enumerate() {
            let last = i + 1 == n;
            let (branch, more) = if last { ("`-", "    ") } else { ("|-", "|   ") };
            let to = self.module(&e.to);
            let target = to.map(node).unwrap_or_else(|| e.to.clone());
            let again = !seen.insert(e.to.clone());
            let _ = writeln!(
                out,
                "{indent}{branch}:{} --[ {} ]--> {}:{}{}",
                e.ogate,
                label(m, e),
                e.igate,
                target,
                if again && to.is_some_and(|t| !t.edges.is_empty()) {
                    " (drawn above)"
                } else {
                    ""
                }
            );
            if !again {
                if let Some(t) = to {
                    self.draw(t, &format!("{indent}{more}"), seen, out, label);
                }
            }
        }
    }

    /// Graphviz dot, edges labelled with `label`.
    pub fn render_dot(&self, label: &dyn Fn(&ModSnap, &EdgeSnap) -> String) -> String {
        let mut out = String::from("digraph pipeline {\n  rankdir=LR;\n  node [shape=box];\n");
        for m in &self.modules {
            let _ = writeln!(
                out,
                "  {} [label=\"{}\\n{}\"];",
                quote(&m.name),
                esc(&m.name),
                esc(&m.class)
            );
        }
        for m in &self.modules {
            for e in &m.edges {
                let _ = writeln!(
                    out,
                    "  {} -> {} [label=\"{}:{} {}\"];",
                    quote(&m.name),
                    quote(&e.to),
                    e.ogate,
                    e.igate,
                    esc(&label(m, e))
                );
            }
        }
        out.push_str("}\n");
        out
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "timestamp": self.timestamp,
            "modules": self.modules.iter().map(|m| json!({
                "name": m.name,
                "class": m.class,
                "desc": m.desc,
                "dropped": m.dropped,
            })).collect::<Vec<_>>(),
            "edges": self.modules.iter().flat_map(|m| m.edges.iter().map(move |e| json!({
                "from": m.name,
                "ogate": e.ogate,
                "to": e.to,
                "igate": e.igate,
                "packets": e.packets,
                "batches": e.batches,
                "bytes": e.bytes,
            }))).collect::<Vec<_>>(),
        })
    }
}

fn node(m: &ModSnap) -> String {
    format!("{}::{}", m.name, m.class)
}

fn quote(s: &str) -> String {
    format!("\"{}\"", esc(s))
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

pub(crate) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `1234567` as `1,234,567`.
pub fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `show pipeline`: per-edge packet counts.
pub fn pipeline(ctl: &mut Ctl, format: Format) -> Result<String, CtlError> {
    let snap = PipelineSnap::read(ctl)?;
    let label = |_: &ModSnap, e: &EdgeSnap| format!("{} pkts", thousands(e.packets));
    Ok(match format {
        Format::Text => snap.render_text(&label),
        Format::Dot => snap.render_dot(&label),
        Format::Json => format!("{:#}\n", snap.to_json()),
    })
}

pub fn version(ctl: &mut Ctl) -> Result<String, CtlError> {
    Ok(format!("{}\n", ctl.version()?))
}

/// `show worker`, as bessctl prints it, plus where each worker's time
/// went (nfkit's fields): busy, polling idle and asleep, as shares of its
/// running time, and its number of sleeps (hybrid polling).
pub fn workers(ctl: &mut Ctl) -> Result<String, CtlError> {
    let mut out = format!(
        "{:>5} {:>5} {:<8} {:>6} {:>7} {:>7} {:>7} {:>10}\n",
        "WID", "CORE", "STATUS", "TCs", "BUSY", "IDLE", "ASLEEP", "SLEEPS"
    );
    for w in ctl.workers()? {
        let total = (w.busy_ns + w.idle_ns + w.asleep_ns).max(1) as f64;
        let pct = |ns: u64| format!("{:.1}%", 100.0 * ns as f64 / total);
        let core = if w.core < 0 {
            "-".to_string()
        } else {
            w.core.to_string()
        };
        let _ = writeln!(
            out,
            "{:>5} {:>5} {:<8} {:>6} {:>7} {:>7} {:>7} {:>10}",
            w.wid,
            core,
            if w.running { "RUNNING" } else { "PAUSED" },
            w.num_tcs,
            pct(w.busy_ns),
            pct(w.idle_ns),
            pct(w.asleep_ns),
            thousands(w.sleeps)
        );
    }
    Ok(out)
}

/// `show port [NAME...]`: each port, its driver and counters.
pub fn ports(ctl: &mut Ctl, names: &[String]) -> Result<String, CtlError> {
    let all = ctl.ports()?;
    check_names("port", names, all.iter().map(|p| p.name.as_str()))?;
    let mut out = String::new();
    for p in all
        .iter()
        .filter(|p| names.is_empty() || names.contains(&p.name))
    {
        let s = ctl.port_stats(&p.name)?;
        let _ = writeln!(
            out,
            "{:<12} {}  MAC {}  queues in {} out {}",
            p.name, p.driver, p.mac_addr, p.num_inc_q, p.num_out_q
        );
        for (dir, st) in [("Inc", s.inc), ("Out", s.out)] {
            let st = st.unwrap_or_default();
            let _ = writeln!(
                out,
                "    {dir}: packets {:>15}  bytes {:>18}  dropped {:>12}",
                thousands(st.packets),
                thousands(st.bytes),
                thousands(st.dropped)
            );
        }
    }
    if all.is_empty() {
        out.push_str("(no ports)\n");
    }
    Ok(out)
}

/// `show module [NAME...]`: class, counters and gates.
pub fn modules(ctl: &mut Ctl, names: &[String]) -> Result<String, CtlError> {
    let all = ctl.modules()?;
    check_names("module", names, all.iter().map(|m| m.name.as_str()))?;
    let mut out = String::new();
    for m in all
        .iter()
        .filter(|m| names.is_empty() || names.contains(&m.name))
    {
        let i = ctl.module_info(&m.name)?;
        let _ = writeln!(out, "{}::{}  {}", i.name, i.mclass, i.desc);
        for g in &i.igates {
            let from: Vec<String> = g
                .ogates
                .iter()
                .map(|o| format!("{}:{}", o.name, o.ogate))
                .collect();
            let _ = writeln!(
                out,
                "    in  {:>3}: packets {:>15}  batches {:>12}  from {}",
                g.igate,
                thousands(g.pkts),
                thousands(g.cnt),
                if from.is_empty() {
                    "-".to_string()
                } else {
                    from.join(", ")
                }
            );
        }
        for g in &i.ogates {
            let _ = writeln!(
                out,
                "    out {:>3}: packets {:>15}  batches {:>12}  to {}:{}",
                g.ogate,
                thousands(g.pkts),
                thousands(g.cnt),
                g.name,
                g.igate
            );
        }
        if !i.metadata.is_empty() {
            let attrs: Vec<String> = i
                .metadata
                .iter()
                .map(|a| format!("{}/{}/{}", a.name, a.size, a.mode))
                .collect();
            let _ = writeln!(out, "    metadata: {}", attrs.join(" "));
        }
    }
    if all.is_empty() {
        out.push_str("(no modules)\n");
    }
    Ok(out)
}

/// `show mclass [NAME...]`: module classes, their help and commands.
pub fn mclasses(ctl: &mut Ctl, names: &[String]) -> Result<String, CtlError> {
    let all = ctl.mclasses()?;
    check_names("module class", names, all.iter().map(String::as_str))?;
    let mut out = String::new();
    for n in all.iter().filter(|n| names.is_empty() || names.contains(n)) {
        let i = ctl.mclass_info(n)?;
        let _ = writeln!(out, "{:<16} {}", i.name, i.help);
        if !i.cmds.is_empty() {
            let _ = writeln!(out, "{:<16}   commands: {}", "", i.cmds.join(", "));
        }
    }
    Ok(out)
}

/// `show tc`: each worker's class tree with its counters.
pub fn tcs(ctl: &mut Ctl) -> Result<String, CtlError> {
    let classes = ctl.tcs()?;
    let mut by_worker: BTreeMap<i64, Vec<_>> = BTreeMap::new();
    for c in classes.iter().filter_map(|c| c.class.as_ref()) {
        by_worker.entry(c.wid).or_default().push(c.clone());
    }
    let mut out = String::new();
    for (wid, cs) in by_worker {
        let _ = writeln!(out, "<worker {wid}>");
        let names: HashSet<&str> = cs.iter().map(|c| c.name.as_str()).collect();
        // Roots: classes whose parent is not one of this worker's classes.
        let roots: Vec<&str> = cs
            .iter()
            .filter(|c| !names.contains(c.parent.as_str()))
            .map(|c| c.parent.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for r in roots {
            let _ = writeln!(out, "  {r}");
            tc_children(ctl, &cs, r, "    ", &mut out)?;
        }
    }
    if out.is_empty() {
        out.push_str("(no traffic classes)\n");
    }
    Ok(out)
}

fn tc_children(
    ctl: &mut Ctl,
    cs: &[nfkit_daemon::pb::TrafficClass],
    parent: &str,
    indent: &str,
    out: &mut String,
) -> Result<(), CtlError> {
    for c in cs.iter().filter(|c| c.parent == parent) {
        let _ = writeln!(out, "{indent}{}", tc_line(ctl, c)?);
        tc_children(ctl, cs, &c.name, &format!("{indent}  "), out)?;
    }
    Ok(())
}

fn tc_line(ctl: &mut Ctl, c: &nfkit_daemon::pb::TrafficClass) -> Result<String, CtlError> {
    use nfkit_daemon::pb::traffic_class::Arg;
    let mut s = format!("{:<20} {:<13}", c.name, c.policy);
    if !c.resource.is_empty() {
        let _ = write!(s, " resource={}", c.resource);
    }
    for (k, v) in &c.limit {
        let _ = write!(s, " limit={}/s {k}", thousands(*v as u64));
    }
    for (k, v) in &c.max_burst {
        let _ = write!(s, " max_burst={} {k}", thousands(*v as u64));
    }
    match c.arg {
        Some(Arg::Priority(p)) => {
            let _ = write!(s, " priority={p}");
        }
        Some(Arg::Share(p)) => {
            let _ = write!(s, " share={p}");
        }
        None => {}
    }
    if let Ok(st) = ctl.tc_stats(&c.name) {
        let _ = write!(
            s,
            "  count {} packets {} bits {} cycles {}",
            thousands(st.count),
            thousands(st.packets),
            thousands(st.bits),
            thousands(st.cycles)
        );
    }
    Ok(s)
}

fn check_names<'a>(
    what: &str,
    asked: &[String],
    have: impl Iterator<Item = &'a str>,
) -> Result<(), CtlError> {
    let have: HashSet<&str> = have.collect();
    match asked.iter().find(|n| !have.contains(n.as_str())) {
        Some(n) => Err(CtlError::Daemon {
            rpc: "show",
            code: libc::ENOENT,
            msg: format!("no {what} named `{n}`"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, class: &str, edges: &[(u64, &str, u64, u64)]) -> ModSnap {
        ModSnap {
            name: name.into(),
            class: class.into(),
            desc: String::new(),
            dropped: 0,
            edges: edges
                .iter()
                .map(|&(og, to, ig, p)| EdgeSnap {
                    ogate: og,
                    to: to.into(),
                    igate: ig,
                    packets: p,
                    batches: p / 32,
                    bytes: p * 60,
                })
                .collect(),
        }
    }

    #[test]
    fn text_graph_draws_branches_and_joins_once() {
        let snap = PipelineSnap {
            modules: vec![
                m("src", "Source", &[(0, "rr", 0, 1000)]),
                m("rr", "RoundRobin", &[(0, "a", 0, 500), (1, "b", 0, 500)]),
                m("a", "Bypass", &[(0, "sink", 0, 500)]),
                m("b", "Bypass", &[(0, "sink", 1, 500)]),
                m("sink", "Sink", &[]),
            ],
            timestamp: 1.0,
        };
        let label = |_: &ModSnap, e: &EdgeSnap| format!("{} pkts", thousands(e.packets));
        let t = snap.render_text(&label);
        assert_eq!(
            t,
            "src::Source\n\
             `-:0 --[ 1,000 pkts ]--> 0:rr::RoundRobin\n    \
             |-:0 --[ 500 pkts ]--> 0:a::Bypass\n    \
             |   `-:0 --[ 500 pkts ]--> 0:sink::Sink\n    \
             `-:1 --[ 500 pkts ]--> 0:b::Bypass\n        \
             `-:0 --[ 500 pkts ]--> 1:sink::Sink\n"
        );
        let d = snap.render_dot(&label);
        assert!(
            d.contains("\"rr\" -> \"b\" [label=\"1:0 500 pkts\"];"),
            "{d}"
        );
        let j = snap.to_json();
        assert_eq!(j["edges"].as_array().unwrap().len(), 5);
        assert_eq!(j["edges"][0]["packets"], 1000);
    }

    #[test]
    fn loops_are_drawn_from_a_member() {
        let snap = PipelineSnap {
            modules: vec![
                m("q", "Queue", &[(0, "b", 0, 7)]),
                m("b", "Bypass", &[(0, "q", 0, 7)]),
            ],
            timestamp: 1.0,
        };
        let t = snap.render_text(&|_, e| e.packets.to_string());
        assert!(
            t.starts_with("q::Queue\n`-:0 --[ 7 ]--> 0:b::Bypass\n"),
            "{t}"
        );
        assert!(t.contains("0:q::Queue (drawn above)"), "{t}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
