//! `--cores LIST`: where the data-path thread of `fwd`, `nf` and
//! `pktgen` runs (issue 14 item 11). A list in DPDK's `-l` form: `3`,
//! `0-3`, `1,3,5-7`. The data path is pinned to the first core of the
//! list; without `--cores` it is pinned to the core it starts on (so the
//! kernel does not move it between cores, which cost a third of the
//! packet rate in the AF_XDP measurement).

use anyhow::{bail, Result};

/// The most cores a list may name (a bound on what is parsed).
const MAX_CORE: usize = 4095;

/// Parse a core list: comma-separated cores and `a-b` ranges, each core
/// once, every one a core this process may run on.
pub fn parse(list: &str) -> Result<Vec<usize>> {
    parse_for(list, &allowed())
}

/// [`parse`] against a given set of allowed cores (tests).
pub fn parse_for(list: &str, allowed: &[usize]) -> Result<Vec<usize>> {
    let num = |s: &str| -> Result<usize> {
        let s = s.trim();
        match s.parse::<usize>() {
            Ok(n) if n <= MAX_CORE => Ok(n),
            Ok(n) => bail!("--cores {list}: core {n} is above {MAX_CORE}"),
            Err(_) => bail!("--cores {list}: `{s}` is not a core number (use a list like 0-3,5)"),
        }
    };
    let mut out: Vec<usize> = Vec::new();
    for part in list.split(',') {
        if part.trim().is_empty() {
            bail!("--cores {list:?}: an empty entry (use a list like 0-3,5)");
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(part)?;
                (n, n)
            }
        };
        if lo > hi {
            bail!("--cores {list}: range {lo}-{hi} is inverted");
        }
        for c in lo..=hi {
            if out.contains(&c) {
                bail!("--cores {list}: core {c} is named twice");
            }
            out.push(c);
        }
    }
    if let Some(c) = out.iter().find(|c| !allowed.contains(c)) {
        bail!(
            "--cores {list}: core {c} is not one this process may use (allowed: {})",
            allowed
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(out)
}

/// The cores this process may run on.
pub fn allowed() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// The core the calling thread runs on now (`/proc/thread-self/stat`,
/// field 39), if known.
fn current() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // after the command name, which may hold spaces, in parentheses
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(36)?.parse().ok()
}

/// Pin the calling (data-path) thread: to the first core of `cores`, or
/// without a list to the core it runs on now. Returns the line to print
/// at start-up.
pub fn pin_data_path(cores: Option<&[usize]>) -> Result<String> {
    let (core, how) = match cores.and_then(|c| c.first()) {
        Some(&c) => (c, "--cores"),
        None => match current() {
            Some(c) => (c, "the core it started on; --cores LIST to choose"),
            None => return Ok("data path: not pinned (the current core is unknown)".into()),
        },
    };
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        bail!("cannot pin the data path to core {core}");
    }
    Ok(format!("data path: pinned to core {core} ({how})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_ones_are_clear_errors() {
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(parse_for("3", &all).unwrap(), [3]);
        assert_eq!(parse_for("0-2,5", &all).unwrap(), [0, 1, 2, 5]);
        for (bad, want) in [
            ("", "empty entry"),
            ("1,,2", "empty entry"),
            ("x", "not a core number"),
            ("-1", "not a core number"),
            ("3-1", "inverted"),
            ("1,1", "named twice"),
            ("0-3,2", "named twice"),
            ("9", "not one this process may use"),
            ("99999999999999999999", "not a core number"),
            ("5000", "above 4095"),
        ] {
            let e = parse_for(bad, &all).unwrap_err().to_string();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_data_path_is_pinned() {
        let line = pin_data_path(None).unwrap();
        assert!(line.contains("pinned to core"), "{line}");
        let first = allowed()[0];
        let line = pin_data_path(Some(&[first])).unwrap();
        assert!(line.contains(&format!("core {first} (--cores)")), "{line}");
        // the thread now runs only there
        assert_eq!(current(), Some(first));
    }
}
