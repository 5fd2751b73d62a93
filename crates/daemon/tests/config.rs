//! `nfkit daemon --config FILE.nfk`: the pipeline a `.nfk` file
//! describes is built before serving; an error names the line.

use nfkit_daemon::{pb, Daemon};
use nfkit_port::{OpenOptions, Port, PortError, PortSpec};
use std::sync::Arc;
use std::time::Duration;

fn open(spec: &str) -> Result<Box<dyn Port>, PortError> {
    let s: PortSpec = spec
        .parse()
        .map_err(|e: nfkit_port::SpecError| PortError::config(spec, e.to_string()))?;
    nfkit_port::open(&s, &OpenOptions::default())
}

const PIPELINE: &str = r#"
port p0 = "null:size=64"
worker w1
tc rl = rate_limit(worker=w1, resource=packet, limit=100k, max_burst=64)
src::Source(size=64) -> Sink()
in::PortInc(port=p0) -> out::PortOut(port=p0)
src.attach(tc=rl)
"#;

#[test]
fn a_config_file_is_loaded_and_runs() {
    let mut d = Daemon::new(Arc::new(open)).unwrap();
    d.load_config("p.nfk", PIPELINE).expect("load");
    let names: Vec<String> = d
        .list_modules()
        .modules
        .into_iter()
        .map(|m| m.name)
        .collect();
    for m in ["src", "in", "out"] {
        assert!(names.iter().any(|n| n == m), "{m} missing from {names:?}");
    }
    assert_eq!(d.list_ports().ports.len(), 1);
    let tcs = d.list_tcs(-1).unwrap().classes_status;
    assert!(tcs.iter().any(|t| t.class.as_ref().unwrap().name == "rl"));
    std::thread::sleep(Duration::from_millis(200));
    let info = d.get_module_info("src").unwrap();
    assert!(info.ogates[0].pkts > 0, "the loaded Source sent nothing");
    // Requests act on what the file made.
    d.disconnect(pb::DisconnectModulesRequest {
        name: "in".into(),
        ogate: 0,
    })
    .unwrap();
    let _ = d.shutdown();
}

#[test]
fn an_error_in_the_config_names_its_line() {
    for (src, want) in [
        ("port p0 = \"null:\"\nx::NoSuchClass()\n", "c.nfk:2:"),
        ("s::Source()\ns.attach(tc=none)\n", "c.nfk:2:"),
        ("port p0 = \"afpacket:nfkit-no-such-if0\"\n", "c.nfk:1:"),
        ("\n\ns::Source(size=99999999999)\n", "c.nfk:3:"),
    ] {
        let mut d = Daemon::new(Arc::new(open)).unwrap();
        let e = d.load_config("c.nfk", src).expect_err(src);
        assert!(e.code > 0, "{e}");
        assert!(e.msg.contains(want), "`{}` should name {want}", e.msg);
    }
}

#[test]
fn the_daemon_binary_refuses_to_start_on_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.nfk");
    std::fs::write(&file, "s::Source()\nt::Nope()\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfkit-daemon"))
        .arg("--socket")
        .arg(dir.path().join("d.sock"))
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.nfk:2:"), "{err}");
}
