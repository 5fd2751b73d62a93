//! The results of a run as one Markdown table (`summary.md` beside the
//! JSON), a row per DUT, wiring, frame size and flow count: throughput,
//! the DUT's cycles per packet at that rate, latency at 50% of it, and
//! both threads' CPU share, so the README's table is a copy, not a
//! transcription.

use serde_json::Value;

/// `0.123`, or `0.123*` for a tester-bound figure.
fn mpps(t: &Value) -> String {
    match t["mpps"].as_f64() {
        Some(m) => format!(
            "{m:.3}{}",
            if t["tester_bound"].as_bool() == Some(true) {
                "*"
            } else {
                ""
            }
        ),
        None => "-".into(),
    }
}

fn us(ns: &Value) -> String {
    match ns.as_f64() {
        Some(v) if v >= 1e6 => format!("{:.1} ms", v / 1e6),
        Some(v) => format!("{:.1} us", v / 1e3),
        None => "-".into(),
    }
}

fn pct(x: &Value) -> String {
    x.as_f64()
        .map(|v| format!("{:.0}%", v * 100.0))
        .unwrap_or_else(|| "-".into())
}

/// The table, with a legend under it.
pub fn markdown(results: &[Value]) -> String {
    let mut s = String::from(
        "| wiring | DUT | frame (B) | flows | Mpps at the loss bound | DUT cycles/pkt | \
         p50 / p99 at 50% load | tester / DUT thread CPU |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let t = &r["throughput"];
        let cycles = t["dut_cycles_per_packet"]
            .as_f64()
            .map(|c| format!("{c:.0}"))
            .unwrap_or_else(|| "-".into());
        let half = r["latency"].as_array().and_then(|steps| {
            steps
                .iter()
                .find(|st| st["load_pct_of_throughput"].as_f64() == Some(50.0))
        });
        let lat = half
            .map(|h| format!("{} / {}", us(&h["p50_ns"]), us(&h["p99_ns"])))
            .unwrap_or_else(|| "-".into());
        let cpu = &t["cpu"];
        let dut_cpu = if r["dut"].as_str().is_some_and(|d| d.starts_with("kernel-")) {
            // no thread: the softirq time of all cores, as a share of one
            let si: Option<f64> = cpu["cores_softirq"]
                .as_array()
                .map(|c| c.iter().filter_map(Value::as_f64).sum());
            format!(
                "softirq {}",
                pct(&si.map(Value::from).unwrap_or(Value::Null))
            )
        } else {
            pct(&cpu["dut_thread"])
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} |\n",
            r["wiring"].as_str().unwrap_or("?"),
            r["dut"].as_str().unwrap_or("?"),
            r["frame"].as_str().unwrap_or("?"),
            r["flows"],
            mpps(t),
            cycles,
            lat,
            pct(&cpu["tester_thread"]),
            dut_cpu,
        ));
    }
    s.push_str(
        "\n`*`: tester-bound (no loss at the most the tester sent, below the rate asked). \
         Cycles per packet: the DUT's own CPU time (schedstat, so time spent waiting for a \
         core is not in it; a polling DUT's empty polls are) divided by the frames that came \
         through, at the clock of /proc/cpuinfo, in the throughput search's trial that forwarded \
         the most (usually the one at overload); for the kernel (no thread \
         of its own), the softirq time of all cores (sampled at the tick). CPU: share of one core \
         over the throughput trial.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_row_per_result_with_cycles_and_latency() {
        let r = json!({
            "wiring": "vhost", "dut": "nat@agent", "frame": "64", "flows": 1024,
            "throughput": {"mpps": 1.25, "tester_bound": true, "dut_cycles_per_packet": 212.4,
                "cpu": {"tester_thread": 0.97, "dut_thread": 1.0, "softirq_ns": 0.0}},
            "latency": [
                {"load_pct_of_throughput": 10.0, "p50_ns": 1, "p99_ns": 2},
                {"load_pct_of_throughput": 50.0, "p50_ns": 5300, "p99_ns": 2_500_000},
            ],
        });
        let k = json!({
            "wiring": "veth", "dut": "kernel-nat", "frame": "imix", "flows": 1,
            "throughput": {"mpps": 0.5, "tester_bound": false,
                "cpu": {"tester_thread": 0.5, "dut_thread": 0.0, "cores_softirq": [0.25, 0.5]}},
        });
        let t = markdown(&[r, k]);
        assert!(
            t.contains(
                "| vhost | nat@agent | 64 | 1024 | 1.250* | 212 | 5.3 us / 2.5 ms | 97% / 100% |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| veth | kernel-nat | imix | 1 | 0.500 | - | - | 50% / softirq 75% |"),
            "{t}"
        );
    }
}
