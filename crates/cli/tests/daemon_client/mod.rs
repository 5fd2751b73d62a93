//! Helpers for the tests that drive a running `nfkit daemon` through
//! `nfkit ctl`: the daemon as a child killed on drop, and one `ctl` call.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command};

pub const NFKIT: &str = env!("CARGO_BIN_EXE_nfkit");

/// A child process killed and reaped when the test lets go of it.
pub struct Kill(pub Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `nfkit ctl --socket SOCKET ARGS...`: its standard output; a failure
/// fails the test with ctl's message.
pub fn ctl(socket: &Path, args: &[&str]) -> String {
    let o = Command::new(NFKIT)
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "nfkit ctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}
