//! How `cargo xtask test` spreads its stages over lanes: sequences of
//! stages that run side by side, each on its own thread, sharing no
//! build directory (so no cargo waits for another's lock), always all
//! waited for. The first lane writes to the terminal, the others to
//! `target/lane-NAME.log` (printed where it is, and its end shown, if
//! the lane fails).
//!
//! | cores | lanes | debug test binaries at a time |
//! |---|---|---|
//! | 1 | 1: every stage in turn | 1 (`cargo test --workspace`) |
//! | 2-3 | 1: every stage in turn | 2 |
//! | 4-7 | 2: main; nightly (miri, fuzz) | 2 |
//! | 8 and more | 5: debug (with the guest, which runs the debug build's nfkit); release; loom; miri; fuzz | cores / 4, 2 to 8 |
//!
//! `NFKIT_LANES=1..5` and `NFKIT_TEST_JOBS=N` override the choice (3 and
//! 4 lanes: see [`lanes`]). miri and the fuzz targets share the nightly
//! toolchain, installed once by whichever asks first.

use anyhow::{bail, Result};

/// One step of `cargo xtask test`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Fmt,
    /// The workspace's debug tests (`NFKIT_NO_SKIP=1`), built with
    /// clippy's lints (`-D warnings`) on the workspace's crates.
    DebugTests,
    /// The daemon from Python (grpcio).
    Python,
    Loom,
    ModelCheck,
    Paths,
    /// 10 million packets per driver model, release.
    Long,
    Guest,
    Miri,
    /// nfkit, nfkit-bench and nfkit-soak, release.
    Release,
    Rfc2544,
    Fuzz,
    Soak,
}

use Stage::*;

impl Stage {
    /// Left out by `--quick`.
    fn long(self) -> bool {
        matches!(self, Long | Guest | Miri | Release | Rfc2544 | Fuzz | Soak)
    }
}

/// Stages that run one after the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    pub name: &'static str,
    pub stages: Vec<Stage>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub cores: usize,
    /// The first runs on the calling thread (the terminal).
    pub lanes: Vec<Lane>,
    /// Debug test binaries run at a time; 1 is plain `cargo test
    /// --workspace` (one binary after the other).
    pub test_jobs: usize,
    /// Where the numbers came from.
    pub source: String,
}

/// The lanes for `n` lanes (1 to 5).
fn lanes(n: usize) -> Vec<Lane> {
    let lane = |name, stages: &[Stage]| Lane {
        name,
        stages: stages.to_vec(),
    };
    match n {
        1 => vec![lane(
            "main",
            &[
                Fmt, DebugTests, Python, Loom, ModelCheck, Paths, Long, Guest, Miri, Release,
                Rfc2544, Fuzz, Soak,
            ],
        )],
        2 => vec![
            lane(
                "main",
                &[
                    Fmt, DebugTests, Python, Loom, ModelCheck, Paths, Long, Guest, Release,
                    Rfc2544, Soak,
                ],
            ),
            lane("nightly", &[Miri, Fuzz]),
        ],
        3 => vec![
            lane("debug", &[Fmt, DebugTests, Python, Paths, Guest, Loom]),
            lane("release", &[Release, ModelCheck, Long, Rfc2544, Soak]),
            lane("nightly", &[Miri, Fuzz]),
        ],
        4 => vec![
            lane("debug", &[Fmt, DebugTests, Python, Paths, Guest]),
            lane("release", &[Release, ModelCheck, Long, Rfc2544, Soak]),
            lane("loom", &[Loom]),
            lane("nightly", &[Miri, Fuzz]),
        ],
        _ => vec![
            lane("debug", &[Fmt, DebugTests, Python, Paths, Guest]),
            lane("release", &[Release, ModelCheck, Long, Rfc2544, Soak]),
            lane("loom", &[Loom]),
            lane("miri", &[Miri]),
            lane("fuzz", &[Fuzz]),
        ],
    }
}

fn parse(var: &str, value: &str, max: usize) -> Result<usize> {
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => bail!("{var}={value}: want a number from 1 to {max}"),
    }
}

/// The plan for a machine of `cores` cores, with the values of
/// `NFKIT_LANES` and `NFKIT_TEST_JOBS` if set; `quick` leaves out the
/// long stages (and lanes left empty).
pub fn plan(
    cores: usize,
    lanes_var: Option<&str>,
    jobs_var: Option<&str>,
    quick: bool,
) -> Result<Plan> {
    let cores = cores.max(1);
    let mut source = format!("{cores} cores");
    let n = match lanes_var.filter(|v| !v.is_empty()) {
        Some(v) => {
            source.push_str(&format!(", NFKIT_LANES={v}"));
            parse("NFKIT_LANES", v, 5)?
        }
        None if cores >= 8 => 5,
        None if cores >= 4 => 2,
        None => 1,
    };
    let test_jobs = match jobs_var.filter(|v| !v.is_empty()) {
        Some(v) => {
            source.push_str(&format!(", NFKIT_TEST_JOBS={v}"));
            parse("NFKIT_TEST_JOBS", v, 64)?
        }
        None if cores >= 8 => (cores / 4).clamp(2, 8),
        // Most test binaries wait (namespaces, sockets, sleeps, timeouts):
        // two at a time fill two cores better than one.
        None if cores >= 2 => 2,
        None => 1,
    };
    let mut lanes = lanes(n);
    for lane in &mut lanes {
        lane.stages.retain(|s| !(quick && s.long()));
    }
    lanes.retain(|l| !l.stages.is_empty());
    Ok(Plan {
        cores,
        lanes,
        test_jobs,
        source,
    })
}

impl Plan {
    /// One line per lane, for the start and the summary.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "lane plan ({}): {} lane{}, debug test binaries {} at a time",
            self.source,
            self.lanes.len(),
            if self.lanes.len() == 1 { "" } else { "s" },
            self.test_jobs
        );
        for lane in &self.lanes {
            let stages: Vec<String> = lane
                .stages
                .iter()
                .map(|s| format!("{s:?}").to_lowercase())
                .collect();
            s.push_str(&format!("\n  {:<8} {}", lane.name, stages.join(" -> ")));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_stage_once(p: &Plan, quick: bool) {
        let mut all: Vec<Stage> = p.lanes.iter().flat_map(|l| l.stages.clone()).collect();
        let want = lanes(1).remove(0).stages;
        let want: Vec<Stage> = want.into_iter().filter(|s| !(quick && s.long())).collect();
        assert_eq!(all.len(), want.len(), "{p:?}");
        all.retain(|s| !want.contains(s));
        assert!(all.is_empty(), "{p:?}");
    }

    #[test]
    fn small_machines_run_stages_in_turn_and_two_test_binaries_at_a_time() {
        for (cores, jobs) in [(0, 1), (1, 1), (2, 2), (3, 2)] {
            let p = plan(cores, None, None, false).unwrap();
            assert_eq!(p.lanes.len(), 1);
            assert_eq!(p.test_jobs, jobs, "{cores}");
            every_stage_once(&p, false);
        }
        let p = plan(4, None, None, false).unwrap();
        assert_eq!(p.lanes.len(), 2);
        assert_eq!(p.lanes[1].stages, vec![Miri, Fuzz]);
        assert_eq!(p.test_jobs, 2);
    }

    #[test]
    fn many_cores_get_five_lanes_and_parallel_tests() {
        for (cores, jobs) in [(8, 2), (12, 3), (16, 4), (32, 8), (256, 8)] {
            let p = plan(cores, None, None, false).unwrap();
            assert_eq!(p.lanes.len(), 5, "{cores}");
            assert_eq!(p.test_jobs, jobs, "{cores}");
            every_stage_once(&p, false);
        }
    }

    #[test]
    fn stages_sharing_a_build_directory_share_a_lane() {
        for n in 1..=5 {
            let p = plan(2, Some(&n.to_string()), None, false).unwrap();
            let lane_of = |s: Stage| p.lanes.iter().position(|l| l.stages.contains(&s));
            // target/debug, and the nfkit the guest runs
            for s in [Python, Paths, Guest] {
                assert_eq!(lane_of(DebugTests), lane_of(s), "{n} {s:?}");
            }
            let debug = &p.lanes[lane_of(DebugTests).unwrap()].stages;
            let at = |s| debug.iter().position(|x| *x == s);
            assert!(at(DebugTests) < at(Guest), "{n}");
            // target/release, and the binaries rfc2544 and the soak run
            for s in [ModelCheck, Long, Rfc2544, Soak] {
                assert_eq!(lane_of(Release), lane_of(s), "{n} {s:?}");
            }
            let stages = &p.lanes[lane_of(Release).unwrap()].stages;
            let at = |s| stages.iter().position(|x| *x == s);
            assert!(at(Release) < at(Rfc2544) && at(Release) < at(Soak));
            every_stage_once(&p, false);
        }
    }

    #[test]
    fn overrides_and_quick() {
        let p = plan(64, Some("1"), Some("3"), false).unwrap();
        assert_eq!((p.lanes.len(), p.test_jobs), (1, 3));
        assert!(p.source.contains("NFKIT_LANES=1") && p.source.contains("NFKIT_TEST_JOBS=3"));
        let p = plan(2, Some("4"), None, false).unwrap();
        assert_eq!((p.lanes.len(), p.test_jobs), (4, 2));
        let p = plan(2, None, Some("1"), false).unwrap();
        assert_eq!((p.lanes.len(), p.test_jobs), (1, 1));
        assert!(plan(2, Some("0"), None, false).is_err());
        assert!(plan(2, Some("6"), None, false).is_err());
        assert!(plan(2, Some("five"), None, false).is_err());
        assert!(plan(2, None, Some("0"), false).is_err());
        // --quick: no release, guest or nightly stages; empty lanes go.
        let p = plan(16, None, None, true).unwrap();
        every_stage_once(&p, true);
        assert!(p.lanes.iter().all(|l| !l.stages.is_empty()));
        assert_eq!(p.lanes.len(), 3, "{p:?}");
        let d = p.describe();
        assert!(d.contains("16 cores") && d.contains("debug") && d.contains("4 at a time"));
    }
}
