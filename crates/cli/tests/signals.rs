//! SIGTERM and SIGHUP end a command with its totals, as Ctrl-C does; and
//! warnings are shown by default, hidden by `--quiet` (issue 14 item 7).

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn sigterm_and_sighup_print_the_totals() {
    for sig in ["-TERM", "-HUP", "-INT"] {
        let child = Command::new(env!("CARGO_BIN_EXE_nfkit"))
            .args(["fwd", "null:size=60", "null:"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let pid = child.id().to_string();
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("null:size=60 -> null:: received"),
            "{sig}: {:?}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn warnings_are_shown_unless_quiet() {
    let dir = std::env::temp_dir().join(format!("nfkit-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // a pcap header, one 60-byte record, then a record cut short
    let mut f = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for _ in 0..2 {
        for v in [0u32, 0, 60, 60] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(&[0xab; 60]);
    }
    f.truncate(f.len() - 10);
    let cap = dir.join("cut.pcap");
    std::fs::write(&cap, &f).unwrap();
    let run = |quiet: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nfkit"));
        c.env_remove("RUST_LOG");
        if quiet {
            c.arg("--quiet");
        }
        let out = c
            .args(["fwd", &format!("pcap:{}", cap.display()), "null:"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let loud = run(false);
    assert!(loud.contains("WARN") && loud.contains("cut"), "{loud}");
    assert!(!run(true).contains("WARN"));
    let _ = std::fs::remove_dir_all(&dir);
}
