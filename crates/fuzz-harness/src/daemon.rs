//! The daemon's request handling: arbitrary bytes as the request
//! messages of BESS's RPCs, dispatched against a live daemon (its
//! worker running Source -> Sink, and PortInc -> PortOut on a null port).

use nfkit_daemon::dispatch::{dispatch, METHODS};
use nfkit_daemon::mclass::pack;
use nfkit_daemon::{pb, Daemon, OpenFn};
use nfkit_port::{OpenOptions, Port, PortError, PortSpec};
use prost::Message;
use std::sync::Arc;

/// Most requests one input makes (each may start a worker thread).
const MAX_REQUESTS: usize = 24;

/// Only null ports open (no device, file or socket of the machine).
fn open_null(spec: &str) -> Result<Box<dyn Port>, PortError> {
    if !(spec == "null" || spec.starts_with("null:")) {
        return Err(PortError::config(
            spec,
            "the fuzz target opens null ports only",
        ));
    }
    let s: PortSpec = spec
        .parse()
        .map_err(|e: nfkit_port::SpecError| PortError::config(spec, e.to_string()))?;
    nfkit_port::open(
        &s,
        &OpenOptions {
            pool_buffers: 64,
            ..OpenOptions::default()
        },
    )
}

/// Whether a varint starting anywhere in `b` is above a million (a
/// table or queue size the parsers do not bound yet, issue 14).
fn huge_varint(b: &[u8]) -> bool {
    (0..b.len()).any(|i| {
        let mut v: u64 = 0;
        for (k, &x) in b[i..].iter().take(10).enumerate() {
            v |= u64::from(x & 0x7f) << (7 * k);
            if x & 0x80 == 0 {
                return v > 1_000_000;
            }
        }
        true
    })
}

/// Requests the target does not send: ones that would write files or
/// create sockets on the machine, or ask for huge allocations.
fn refused(method: &str, msg: &[u8]) -> bool {
    let sized = matches!(method, "CreateModule" | "ModuleCommand" | "CreatePort");
    if sized && (huge_varint(msg) || crate::has_huge_number(&String::from_utf8_lossy(msg))) {
        return true;
    }
    match method {
        "CreateModule" => pb::CreateModuleRequest::decode(msg)
            .is_ok_and(|r| matches!(r.mclass.as_str(), "Dump" | "PcapCapture")),
        // A UnixSocketPort only in the abstract namespace (no file).
        "CreatePort" => match pb::CreatePortRequest::decode(msg) {
            Ok(r) if r.driver == "UnixSocketPort" => !r.arg.is_some_and(|a| {
                pb::UnixSocketPortArg::decode(&a.value[..]).is_ok_and(|u| u.path.starts_with('@'))
            }),
            _ => false,
        },
        // TcpDump writes into a FIFO the request names: never one of the
        // machine's (a path that does not exist is a clear error).
        "ConfigureGateHook" => pb::ConfigureGateHookRequest::decode(msg).is_ok_and(|r| {
            r.hook.and_then(|h| h.arg).is_some_and(|a| {
                pb::TcpdumpArg::decode(&a.value[..])
                    .is_ok_and(|t| !t.fifo.is_empty() && std::path::Path::new(&t.fifo).exists())
            })
        }),
        _ => false,
    }
}

fn call<M: Message>(d: &mut Daemon, method: &str, m: M) {
    if let Err(e) = dispatch(d, method, &m.encode_to_vec()) {
        panic!("setting up the fuzz daemon: {method}: {e}");
    }
}

/// Every request gets a response or a BESS-shaped error (errno above
/// 0, a message); none panics or hangs, and the daemon still answers.
/// Input: records of (method index, length, message bytes).
pub fn daemon_requests(data: &[u8]) {
    let open: Arc<OpenFn> = Arc::new(open_null);
    let Ok(mut d) = Daemon::new(open) else {
        return;
    };
    // A live pipeline: traffic flows while the requests arrive.
    call(
        &mut d,
        "CreatePort",
        pb::CreatePortRequest {
            name: "p0".into(),
            driver: "NfkitPort".into(),
            arg: Some(pack(
                &pb::NfkitPortArg {
                    spec: "null:size=60".into(),
                },
                "NfkitPortArg",
            )),
            ..Default::default()
        },
    );
    let port_arg = |class: &str| {
        let p = "p0".to_string();
        Some(match class {
            "PortInc" => pack(
                &pb::PortIncArg {
                    port: p,
                    prefetch: false,
                },
                "PortIncArg",
            ),
            _ => pack(&pb::PortOutArg { port: p }, "PortOutArg"),
        })
    };
    for (name, class) in [
        ("src", "Source"),
        ("sink", "Sink"),
        ("pin", "PortInc"),
        ("pout", "PortOut"),
    ] {
        let arg = class.starts_with("Port").then(|| port_arg(class)).flatten();
        call(
            &mut d,
            "CreateModule",
            pb::CreateModuleRequest {
                name: name.into(),
                mclass: class.into(),
                arg,
            },
        );
    }
    for (m1, m2) in [("src", "sink"), ("pin", "pout")] {
        call(
            &mut d,
            "ConnectModules",
            pb::ConnectModulesRequest {
                m1: m1.into(),
                m2: m2.into(),
                ..Default::default()
            },
        );
    }
    let mut rest = data;
    let mut n = 0;
    while rest.len() >= 2 && n < MAX_REQUESTS {
        let method = METHODS[usize::from(rest[0]) % METHODS.len()];
        let len = usize::from(rest[1]).min(rest.len() - 2);
        let msg = &rest[2..2 + len];
        rest = &rest[2 + len..];
        n += 1;
        if refused(method, msg) {
            continue;
        }
        if let Err(e) = dispatch(&mut d, method, msg) {
            assert!(e.code > 0, "{method}: errno {} in {e}", e.code);
            assert!(
                !e.msg.trim().is_empty(),
                "{method}: an error with no message"
            );
        }
    }
    // Still serving: answers, and tears down cleanly.
    dispatch(&mut d, "ListModules", &[]).expect("ListModules after the requests");
    if let Err(e) = dispatch(&mut d, "ResetAll", &[]) {
        assert!(e.code > 0 && !e.msg.is_empty(), "ResetAll: {e}");
    }
    let _ = d.shutdown();
}
