//! Replays, on stable, every committed input in `fuzz/regressions/TARGET/`
//! (seeds, and each input that once found a bug) through its target.

use std::path::Path;

#[test]
fn every_regression_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let mut ran = 0;
    for (name, run) in nfkit_fuzz_harness::TARGETS {
        let dir = root.join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            eprintln!("{name}: {}", path.display());
            run(&data);
            ran += 1;
        }
    }
    assert!(ran > 0, "no inputs under {}", root.display());
}

#[test]
fn every_regression_directory_names_a_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    for e in std::fs::read_dir(&root).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(
            nfkit_fuzz_harness::target(&name).is_some(),
            "fuzz/regressions/{name} is no target"
        );
    }
}

#[test]
fn empty_and_short_inputs() {
    for (name, run) in nfkit_fuzz_harness::TARGETS {
        for data in [&[][..], &[0], &[0xff; 3], &[1; 64]] {
            eprintln!("{name}: {data:?}");
            run(data);
        }
    }
}
