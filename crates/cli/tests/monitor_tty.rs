//! `nfkit ctl monitor` on a real terminal (a tmux session the test
//! starts): the screen is redrawn in place with fresh per-second rates
//! (capture-pane shows one frame, its number advancing).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NFKIT: &str = env!("CARGO_BIN_EXE_nfkit");

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Session(String);
impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

fn frame_number(screen: &str) -> Option<u64> {
    let i = screen.find("frame ")?;
    screen[i + 6..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn monitor_redraws_in_place_on_a_terminal() {
    nfkit_testkit::require_tool!("tmux");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let mut d = Kill(
        Command::new(NFKIT)
            .arg("daemon")
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(d.0.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("listening on unix:")));
    std::thread::spawn(move || for _ in lines {});
    let ctl = |args: &[&str]| {
        let o = Command::new(NFKIT)
            .arg("ctl")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    ctl(&["add", "module", "src", "Source", "size=60"]);
    ctl(&["add", "module", "sink", "Sink"]);
    ctl(&["connect", "src", "sink"]);

    let name = format!("nfkit-monitor-{}", std::process::id());
    let cmd = format!(
        "{NFKIT} ctl --socket {} monitor pipeline --interval 0.3",
        socket.display()
    );
    assert!(Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &name,
            "-x",
            "160",
            "-y",
            "40",
            &cmd
        ])
        .status()
        .unwrap()
        .success());
    let _s = Session(name.clone());
    let capture = || {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    // Two screens, some frames apart: each shows exactly one frame (the
    // screen was cleared), with rates, and the frame number advances.
    let t = Instant::now();
    let first = loop {
        let s = capture();
        if let Some(n) = frame_number(&s) {
            break (n, s);
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no frame on the screen:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let second = loop {
        std::thread::sleep(Duration::from_millis(200));
        let s = capture();
        if frame_number(&s).is_some_and(|n| n > first.0) {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the frame did not advance:\n{s}"
        );
    };
    for s in [&first.1, &second] {
        assert_eq!(s.matches("nfkit ctl monitor pipeline").count(), 1, "{s}");
        assert!(s.contains("src::Source") && s.contains("Mpps"), "{s}");
    }
}
