//! Starting `nfkit-daemon` as a child process and talking to it with
//! tonic's generated client (the real gRPC path).
#![allow(dead_code)]

use nfkit_daemon::pb;
use nfkit_daemon::pb::bess_control_client::BessControlClient;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

pub type Client = BessControlClient<Channel>;

/// A running daemon; killed (after a KillBess attempt) on drop.
pub struct Daemon {
    pub child: Option<Child>,
    pub tcp: String,
    pub socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    pub fn start(extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("d.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_nfkit-daemon"))
            .arg("--socket")
            .arg(&socket)
            .args(["--grpc-url", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start nfkit-daemon");
        let out = child.stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines();
        let mut tcp = None;
        while let Some(Ok(l)) = lines.next() {
            if let Some(a) = l.strip_prefix("nfkit daemon: listening on tcp:") {
                tcp = Some(a.to_string());
                break;
            }
        }
        // Keep draining stdout so the daemon never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Daemon {
            child: Some(child),
            tcp: tcp.expect("the daemon printed its TCP address"),
            socket,
            _dir: dir,
        }
    }

    pub async fn client(&self) -> Client {
        BessControlClient::connect(format!("http://{}", self.tcp))
            .await
            .expect("connect")
    }

    /// Stop with KillBess and wait for a clean exit.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        let mut c = self.client().await;
        c.kill_bess(pb::EmptyRequest {}).await.unwrap();
        let mut child = self.child.take().unwrap();
        let t = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "daemon did not stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Assert a response has no error.
#[macro_export]
macro_rules! ok {
    ($e:expr) => {{
        let r = $e.await.expect("transport").into_inner();
        if let Some(err) = &r.error {
            assert_eq!(err.code, 0, "{}: {}", stringify!($e), err.errmsg);
        }
        r
    }};
}

/// The errno of a response that must fail.
#[macro_export]
macro_rules! fails {
    ($e:expr) => {{
        let r = $e.await.expect("transport").into_inner();
        let err = r.error.clone().unwrap_or_default();
        assert_ne!(err.code, 0, "{} should fail", stringify!($e));
        (err.code, err.errmsg)
    }};
}

pub fn any<T: prost::Message>(m: &T, name: &str) -> Option<prost_types::Any> {
    Some(nfkit_daemon::mclass::pack(m, name))
}

pub fn create(name: &str, mclass: &str, arg: Option<prost_types::Any>) -> pb::CreateModuleRequest {
    pb::CreateModuleRequest {
        name: name.into(),
        mclass: mclass.into(),
        arg,
    }
}

pub fn connect(m1: &str, og: u64, m2: &str, ig: u64) -> pb::ConnectModulesRequest {
    pb::ConnectModulesRequest {
        m1: m1.into(),
        m2: m2.into(),
        ogate: og,
        igate: ig,
        skip_default_hooks: false,
    }
}

/// `key=value` from a module's desc (nfkit puts its counters there).
pub fn desc_value(desc: &str, key: &str) -> u64 {
    desc.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Per-module counters from GetModuleInfo.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub created: u64,
    pub consumed: u64,
    pub dropped: u64,
}

pub async fn counts(c: &mut Client, name: &str) -> Counts {
    let r = ok!(c.get_module_info(pb::GetModuleInfoRequest { name: name.into() }));
    Counts {
        created: desc_value(&r.desc, "created"),
        consumed: desc_value(&r.desc, "consumed"),
        dropped: r.deadends,
    }
}
