//! The plots of a run, drawn with `plotters` as SVG and PNG from the
//! results in the JSON: throughput against frame size per DUT, the
//! latency CCDF per DUT and load, and agents against queues per NF.
//!
//! Text is drawn with `ab_glyph` from a TrueType font found on the
//! machine (DejaVu Sans or Liberation Sans; no fontconfig); without one,
//! the plots are not drawn and the run says so.

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

fn font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        let bytes = FONTS.iter().find_map(|p| std::fs::read(p).ok());
        bytes.is_some_and(|b| {
            let b: &'static [u8] = Box::leak(b.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, b).is_ok()
        })
    });
    if !ok {
        bail!("no TrueType font found (looked for {})", FONTS.join(", "));
    }
    Ok(())
}

const W: u32 = 800;
const H: u32 = 500;

/// Draw the body into NAME.svg and NAME.png under the directory.
macro_rules! draw_both {
    ($dir:expr, $name:expr, $files:expr, |$root:ident| $body:block) => {{
        let svg = $dir.join(format!("{}.svg", $name));
        {
            let $root = SVGBackend::new(&svg, (W, H)).into_drawing_area();
            $root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
            $body
            $root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        $files.push(svg);
        let png = $dir.join(format!("{}.png", $name));
        {
            let $root = BitMapBackend::new(&png, (W, H)).into_drawing_area();
            $root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
            $body
            $root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        $files.push(png);
    }};
}

fn color(i: usize) -> RGBColor {
    // 16 distinct colours: a comparison run has 16 DUTs on one wiring
    const C: [RGBColor; 16] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 128),
        RGBColor(128, 0, 0),
        RGBColor(0, 100, 0),
        RGBColor(255, 187, 120),
        RGBColor(152, 223, 138),
        RGBColor(0, 0, 0),
    ];
    C[i % C.len()]
}

fn e<E: std::fmt::Display>(x: E) -> anyhow::Error {
    anyhow::anyhow!("{x}")
}

/// Draw every plot the results allow; returns the files written.
pub fn all(results: &[Value], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if results.is_empty() {
        return Ok(files);
    }
    font()?;
    throughput(results, dir, &mut files).context("throughput plot")?;
    ccdf(results, dir, &mut files).context("latency plots")?;
    models(results, dir, &mut files).context("agents vs queues plot")?;
    Ok(files)
}

fn label(r: &Value) -> String {
    format!(
        "{} {} {}fl",
        r["wiring"].as_str().unwrap_or("?"),
        r["dut"].as_str().unwrap_or("?"),
        r["flows"]
    )
}

/// Throughput (Mpps) against frame size, one line per DUT, wiring and
/// flow count.
fn throughput(results: &[Value], dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let order = ["64", "128", "256", "512", "1024", "1280", "1518", "imix"];
    let mut series: BTreeMap<String, Vec<(usize, f64)>> = BTreeMap::new();
    for r in results {
        let Some(mpps) = r["throughput"]["mpps"].as_f64() else {
            continue;
        };
        let f = r["frame"].as_str().unwrap_or("");
        let Some(x) = order.iter().position(|o| *o == f) else {
            continue;
        };
        series.entry(label(r)).or_default().push((x, mpps));
    }
    if series.is_empty() {
        return Ok(());
    }
    let ymax = series
        .values()
        .flatten()
        .map(|p| p.1)
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.15;
    draw_both!(dir, "throughput", files, |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption("RFC 2544 throughput by frame size", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..7.5f64, 0.0..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_labels(8)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && (0.0..8.0).contains(&i) {
                    order[i as usize].to_string()
                } else {
                    String::new()
                }
            })
            .x_desc("frame size (bytes with FCS)")
            .y_desc("Mpps")
            .draw()
            .map_err(e)?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let c = color(i);
            let pts: Vec<(f64, f64)> = pts.iter().map(|&(x, y)| (x as f64, y)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(e)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(e)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(e)?;
    });
    Ok(())
}

/// Latency CCDF (fraction of frames slower than x), one plot per DUT,
/// wiring, size and flow count, one line per load step.
fn ccdf(results: &[Value], dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for r in results {
        let Some(steps) = r["latency"].as_array() else {
            continue;
        };
        let mut lines = Vec::new();
        for s in steps {
            let hist: Vec<(f64, u64)> = s["histogram_ns_count"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| Some((p[0].as_u64()? as f64 / 1e3, p[1].as_u64()?)))
                        .collect()
                })
                .unwrap_or_default();
            let total: u64 = hist.iter().map(|h| h.1).sum();
            if total == 0 {
                continue;
            }
            let mut above = total;
            let mut pts = Vec::new();
            for (us, n) in hist {
                above -= n;
                // CCDF at this value; the last point is drawn at 1/total
                pts.push((us.max(0.01), (above.max(1) as f64 / total as f64).max(1e-7)));
            }
            lines.push((
                format!("{}% of throughput", s["load_pct_of_throughput"]),
                pts,
            ));
        }
        if lines.is_empty() {
            continue;
        }
        let pts = lines.iter().flat_map(|l| l.1.iter());
        let xmax = pts.clone().map(|p| p.0).fold(0.0f64, f64::max) * 1.5;
        let xmin = pts.clone().map(|p| p.0).fold(f64::MAX, f64::min) / 1.5;
        let ymin = pts.map(|p| p.1).fold(1.0f64, f64::min) / 2.0;
        let name = format!(
            "latency-{}-{}-{}-{}fl",
            r["wiring"].as_str().unwrap_or("?"),
            r["dut"]
                .as_str()
                .unwrap_or("?")
                .replace(['@', ':', '/', '.'], "_"),
            r["frame"].as_str().unwrap_or("?"),
            r["flows"]
        );
        let title = format!(
            "Latency CCDF: {} on {}, {} B, {} flows",
            r["dut"].as_str().unwrap_or("?"),
            r["wiring"].as_str().unwrap_or("?"),
            r["frame"].as_str().unwrap_or("?"),
            r["flows"]
        );
        draw_both!(dir, name, files, |root| {
            let mut chart = ChartBuilder::on(&root)
                .caption(title.as_str(), ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..1.0).log_scale())
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_desc("latency (us)")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_desc("fraction of frames slower")
                .y_label_formatter(&|y| format!("{y:.0e}"))
                .draw()
                .map_err(e)?;
            for (i, (name, pts)) in lines.iter().enumerate() {
                let c = color(i);
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(e)?;
        });
    }
    Ok(())
}

/// Agents against queues: for every NF measured in both models on a
/// wiring (at the smallest frame measured), the two throughputs.
fn models(results: &[Value], dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    // (wiring, nf) -> (agent, queue), first frame size and flow count seen
    let mut pairs: BTreeMap<(String, String), [Option<f64>; 2]> = BTreeMap::new();
    let mut first: BTreeMap<(String, String, usize), (String, String)> = BTreeMap::new();
    for r in results {
        let (Some(dut), Some(mpps)) = (r["dut"].as_str(), r["throughput"]["mpps"].as_f64()) else {
            continue;
        };
        let Some((nf, model)) = dut.split_once('@') else {
            continue;
        };
        let slot = match model {
            "agent" => 0,
            "queue" => 1,
            _ => continue,
        };
        let wiring = r["wiring"].as_str().unwrap_or("?").to_string();
        let at = (r["frame"].to_string(), r["flows"].to_string());
        let seen = first
            .entry((wiring.clone(), nf.to_string(), slot))
            .or_insert(at.clone());
        if *seen != at {
            continue;
        }
        pairs.entry((wiring, nf.to_string())).or_default()[slot] = Some(mpps);
    }
    let both: Vec<(String, f64, f64)> = pairs
        .into_iter()
        .filter_map(|((w, nf), [a, q])| Some((format!("{nf} ({w})"), a?, q?)))
        .collect();
    if both.is_empty() {
        return Ok(());
    }
    let ymax = both
        .iter()
        .map(|b| b.1.max(b.2))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.2;
    let n = both.len();
    draw_both!(dir, "agents-vs-queues", files, |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption("Throughput per NF: agents vs queues", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_labels(n.max(2))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                    both[i as usize].0.clone()
                } else {
                    String::new()
                }
            })
            .y_desc("Mpps")
            .draw()
            .map_err(e)?;
        for (slot, name) in [(0, "agents"), (1, "queues")] {
            let c = color(slot);
            chart
                .draw_series(both.iter().enumerate().map(|(i, b)| {
                    let v = if slot == 0 { b.1 } else { b.2 };
                    let x0 = i as f64 - 0.35 + slot as f64 * 0.35;
                    Rectangle::new([(x0, 0.0), (x0 + 0.33, v)], c.filled())
                }))
                .map_err(e)?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(e)?;
    });
    Ok(())
}
