//! Connecting to `nfkit daemon` (its Unix socket, or `--grpc-url`) and
//! one blocking method per request. A failed request is the daemon's
//! own message ([`CtlError::Daemon`]); a socket nobody answers on is
//! named in the error.

use crate::CtlError;
use nfkit_daemon::mclass::pack;
use nfkit_daemon::pb;
use nfkit_daemon::pb::bess_control_client::BessControlClient;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long one request may take (a port's counters are read between
/// two batches; a busy daemon answers in milliseconds).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Its Unix socket (the default: [`nfkit_daemon::default_socket`]).
    Unix(PathBuf),
    /// `HOST:PORT` (`nfkit daemon --grpc-url`).
    Tcp(String),
}

impl Target {
    /// `--socket PATH`, else `--grpc-url HOST:PORT`, else the daemon's
    /// default socket.
    pub fn new(socket: Option<PathBuf>, grpc_url: Option<String>) -> Target {
        match (socket, grpc_url) {
            (Some(p), _) => Target::Unix(p),
            (None, Some(u)) => Target::Tcp(u),
            (None, None) => Target::Unix(nfkit_daemon::default_socket()),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "{}", p.display()),
            Target::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// Why a Unix socket path cannot be a live daemon, before gRPC is tried.
fn probe_unix(path: &Path) -> Result<(), CtlError> {
    use std::os::unix::fs::FileTypeExt;
    let hint = "start one with `nfkit daemon`, or name its socket with --socket PATH";
    let meta = std::fs::metadata(path).map_err(|e| {
        CtlError::Connect(format!(
            "no nfkit daemon at {}: {} ({hint})",
            path.display(),
            io_reason(&e)
        ))
    })?;
    if !meta.file_type().is_socket() {
        return Err(CtlError::Connect(format!(
            "{} is not a socket, so no nfkit daemon listens there ({hint})",
            path.display()
        )));
    }
    std::os::unix::net::UnixStream::connect(path).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => {
                "nothing listens on it (a daemon that stopped without removing it?)".to_string()
            }
            Some(libc::EACCES) | Some(libc::EPERM) => format!(
                "{} (the socket is mode 0660: run as its owner or a member of its group)",
                io_reason(&e)
            ),
            Some(libc::EPROTOTYPE) => {
                "it is not a stream socket (not an nfkit daemon's)".to_string()
            }
            _ => io_reason(&e),
        };
        CtlError::Connect(format!(
            "no nfkit daemon at {}: {why} ({hint})",
            path.display()
        ))
    })?;
    Ok(())
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// Responses that carry BESS's `error`.
pub trait Answer {
    fn error(&self) -> Option<&pb::Error>;
}

macro_rules! answer {
    ($($t:ident),* $(,)?) => {$(
        impl Answer for pb::$t {
            fn error(&self) -> Option<&pb::Error> {
                self.error.as_ref()
            }
        }
    )*};
}

answer!(
    EmptyResponse,
    VersionResponse,
    ListWorkersResponse,
    ListTcsResponse,
    GetTcStatsResponse,
    ListDriversResponse,
    ListPortsResponse,
    CreatePortResponse,
    CommandResponse,
    GetPortStatsResponse,
    GetLinkStatusResponse,
    ListMclassResponse,
    GetMclassInfoResponse,
    ListModulesResponse,
    CreateModuleResponse,
    GetModuleInfoResponse,
    ListGateHookClassResponse,
    ConfigureGateHookResponse,
    ListGateHooksResponse,
);

/// A connection to one daemon. Methods block (a small runtime of its
/// own drives tonic).
pub struct Ctl {
    rt: tokio::runtime::Runtime,
    client: BessControlClient<Channel>,
    target: Target,
}

/// Call one RPC: a transport failure or the daemon's `error` becomes a
/// [`CtlError`] naming the request.
macro_rules! rpc {
    ($self:ident, $method:ident, $rpc:literal, $req:expr) => {{
        let req = $req;
        let target = $self.target.clone();
        let fut = $self.client.$method(req);
        let r = $self
            .rt
            .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, fut).await });
        let r = match r {
            Err(_) => {
                return Err(CtlError::Transport(format!(
                    "{}: no answer from the daemon at {target} in {} s",
                    $rpc,
                    REQUEST_TIMEOUT.as_secs()
                )))
            }
            Ok(Err(status)) => {
                return Err(CtlError::Transport(format!(
                    "{}: the daemon at {target}: {}",
                    $rpc,
                    status_reason(&status)
                )))
            }
            Ok(Ok(r)) => r.into_inner(),
        };
        check($rpc, r)?
    }};
}

fn status_reason(s: &tonic::Status) -> String {
    if s.message().is_empty() {
        format!("{:?}", s.code())
    } else {
        format!("{:?}: {}", s.code(), s.message())
    }
}

fn check<R: Answer>(rpc: &'static str, r: R) -> Result<R, CtlError> {
    match r.error() {
        Some(e) if e.code != 0 => Err(CtlError::Daemon {
            rpc,
            code: e.code,
            msg: e.errmsg.clone(),
        }),
        _ => Ok(r),
    }
}

impl Ctl {
    /// Connect and check that an nfkit daemon (or a BESS-compatible one)
    /// answers GetVersion.
    pub fn connect(target: Target) -> Result<Ctl, CtlError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CtlError::Connect(format!("client runtime: {e}")))?;
        let channel = match &target {
            Target::Unix(path) => {
                probe_unix(path)?;
                let path = path.clone();
                let ep = Endpoint::from_static("http://localhost").connect_timeout(CONNECT_TIMEOUT);
                rt.block_on(ep.connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                    }
                })))
            }
            Target::Tcp(addr) => {
                let ep = Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| CtlError::Connect(format!("--grpc-url {addr}: {e}")))?
                    .connect_timeout(CONNECT_TIMEOUT);
                rt.block_on(ep.connect())
            }
        }
        .map_err(|e| {
            CtlError::Connect(format!(
                "no nfkit daemon at {target}: {} (start one with `nfkit daemon`)",
                source_chain(&e)
            ))
        })?;
        let client = BessControlClient::new(channel).max_decoding_message_size(64 << 20);
        let mut ctl = Ctl {
            rt,
            client,
            target: target.clone(),
        };
        ctl.version().map_err(|e| match e {
            CtlError::Transport(m) => CtlError::Connect(format!(
                "{target} answered, but not as an nfkit daemon ({m})"
            )),
            e => e,
        })?;
        Ok(ctl)
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    pub fn version(&mut self) -> Result<String, CtlError> {
        Ok(rpc!(self, get_version, "GetVersion", pb::EmptyRequest {}).version)
    }

    pub fn workers(&mut self) -> Result<Vec<pb::list_workers_response::WorkerStatus>, CtlError> {
        Ok(rpc!(self, list_workers, "ListWorkers", pb::EmptyRequest {}).workers_status)
    }

    pub fn ports(&mut self) -> Result<Vec<pb::list_ports_response::Port>, CtlError> {
        Ok(rpc!(self, list_ports, "ListPorts", pb::EmptyRequest {}).ports)
    }

    pub fn port_stats(&mut self, name: &str) -> Result<pb::GetPortStatsResponse, CtlError> {
        Ok(rpc!(
            self,
            get_port_stats,
            "GetPortStats",
            pb::GetPortStatsRequest { name: name.into() }
        ))
    }

    pub fn modules(&mut self) -> Result<Vec<pb::list_modules_response::Module>, CtlError> {
        Ok(rpc!(self, list_modules, "ListModules", pb::EmptyRequest {}).modules)
    }

    pub fn module_info(&mut self, name: &str) -> Result<pb::GetModuleInfoResponse, CtlError> {
        Ok(rpc!(
            self,
            get_module_info,
            "GetModuleInfo",
            pb::GetModuleInfoRequest { name: name.into() }
        ))
    }

    pub fn mclasses(&mut self) -> Result<Vec<String>, CtlError> {
        Ok(rpc!(self, list_mclass, "ListMclass", pb::EmptyRequest {}).names)
    }

    pub fn mclass_info(&mut self, name: &str) -> Result<pb::GetMclassInfoResponse, CtlError> {
        Ok(rpc!(
            self,
            get_mclass_info,
            "GetMclassInfo",
            pb::GetMclassInfoRequest { name: name.into() }
        ))
    }

    pub fn tcs(&mut self) -> Result<Vec<pb::list_tcs_response::TrafficClassStatus>, CtlError> {
        Ok(rpc!(self, list_tcs, "ListTcs", pb::ListTcsRequest { wid: -1 }).classes_status)
    }

    pub fn tc_stats(&mut self, name: &str) -> Result<pb::GetTcStatsResponse, CtlError> {
        Ok(rpc!(
            self,
            get_tc_stats,
            "GetTcStats",
            pb::GetTcStatsRequest { name: name.into() }
        ))
    }

    /// CreateModule with nfkit's argument text (`size=60, burst=8`) in
    /// a `bess.pb.NfkitArg`; returns the module's name (the daemon picks
    /// one when `name` is empty).
    pub fn create_module(
        &mut self,
        name: &str,
        class: &str,
        args: &str,
    ) -> Result<String, CtlError> {
        let arg = (!args.trim().is_empty()).then(|| {
            pack(
                &pb::NfkitArg {
                    args: args.to_string(),
                },
                "NfkitArg",
            )
        });
        Ok(rpc!(
            self,
            create_module,
            "CreateModule",
            pb::CreateModuleRequest {
                name: name.into(),
                mclass: class.into(),
                arg,
            }
        )
        .name)
    }

    /// CreatePort with the `NfkitPort` driver (any nfkit port spec).
    pub fn create_port(&mut self, name: &str, spec: &str) -> Result<String, CtlError> {
        Ok(rpc!(
            self,
            create_port,
            "CreatePort",
            pb::CreatePortRequest {
                name: name.into(),
                driver: "NfkitPort".into(),
                arg: Some(pack(
                    &pb::NfkitPortArg { spec: spec.into() },
                    "NfkitPortArg"
                )),
                ..Default::default()
            }
        )
        .name)
    }

    pub fn destroy_module(&mut self, name: &str) -> Result<(), CtlError> {
        rpc!(
            self,
            destroy_module,
            "DestroyModule",
            pb::DestroyModuleRequest { name: name.into() }
        );
        Ok(())
    }

    pub fn destroy_port(&mut self, name: &str) -> Result<(), CtlError> {
        rpc!(
            self,
            destroy_port,
            "DestroyPort",
            pb::DestroyPortRequest { name: name.into() }
        );
        Ok(())
    }

    pub fn connect_modules(
        &mut self,
        m1: &str,
        ogate: u64,
        m2: &str,
        igate: u64,
    ) -> Result<(), CtlError> {
        rpc!(
            self,
            connect_modules,
            "ConnectModules",
            pb::ConnectModulesRequest {
                m1: m1.into(),
                m2: m2.into(),
                ogate,
                igate,
                skip_default_hooks: false,
            }
        );
        Ok(())
    }

    pub fn disconnect_modules(&mut self, m: &str, ogate: u64) -> Result<(), CtlError> {
        rpc!(
            self,
            disconnect_modules,
            "DisconnectModules",
            pb::DisconnectModulesRequest {
                name: m.into(),
                ogate,
            }
        );
        Ok(())
    }

    pub fn add_worker(&mut self, wid: i64, core: i64) -> Result<(), CtlError> {
        rpc!(
            self,
            add_worker,
            "AddWorker",
            pb::AddWorkerRequest {
                wid,
                core,
                scheduler: String::new(),
            }
        );
        Ok(())
    }

    /// AddTc (an inner class, or a leaf: `policy: "leaf"` attaches a
    /// module's task).
    pub fn add_tc(&mut self, class: pb::TrafficClass) -> Result<(), CtlError> {
        rpc!(
            self,
            add_tc,
            "AddTc",
            pb::AddTcRequest { class: Some(class) }
        );
        Ok(())
    }

    /// ModuleCommand with nfkit's argument text (a
    /// `bess.pb.NfkitCommandArg`); the reply as text (nfkit's value
    /// syntax), empty when there is none.
    pub fn command(&mut self, module: &str, cmd: &str, args: &str) -> Result<String, CtlError> {
        let arg = (!args.trim().is_empty()).then(|| {
            pack(
                &pb::NfkitCommandArg {
                    text: args.to_string(),
                },
                "NfkitCommandArg",
            )
        });
        let r = rpc!(
            self,
            module_command,
            "ModuleCommand",
            pb::CommandRequest {
                name: module.into(),
                cmd: cmd.into(),
                arg,
            }
        );
        Ok(match r.data {
            None => String::new(),
            Some(a) if a.type_url.is_empty() && a.value.is_empty() => String::new(),
            Some(a) if nfkit_daemon::mclass::type_name(&a) == "bess.pb.NfkitCommandArg" => {
                <pb::NfkitCommandArg as prost::Message>::decode(a.value.as_slice())
                    .map(|t| t.text)
                    .unwrap_or_default()
            }
            Some(a) => match nfkit_daemon::reflect::any_to_value(&a) {
                Ok((msg, v)) => format!("{msg} {v}"),
                Err(_) => format!("{} ({} bytes)", a.type_url, a.value.len()),
            },
        })
    }

    /// ConfigureGateHook; the hook's name.
    pub fn configure_gate_hook(
        &mut self,
        hook: pb::GateHookInfo,
        enable: bool,
    ) -> Result<String, CtlError> {
        Ok(rpc!(
            self,
            configure_gate_hook,
            "ConfigureGateHook",
            pb::ConfigureGateHookRequest {
                hook: Some(hook),
                enable,
            }
        )
        .name)
    }

    pub fn gate_hooks(&mut self) -> Result<Vec<pb::GateHookInfo>, CtlError> {
        Ok(rpc!(self, list_gate_hooks, "ListGateHooks", pb::EmptyRequest {}).hooks)
    }

    pub fn reset_all(&mut self) -> Result<(), CtlError> {
        rpc!(self, reset_all, "ResetAll", pb::EmptyRequest {});
        Ok(())
    }

    /// KillBess: the daemon stops (workers drained, final statistics
    /// logged).
    pub fn kill(&mut self) -> Result<(), CtlError> {
        rpc!(self, kill_bess, "KillBess", pb::EmptyRequest {});
        Ok(())
    }

    pub fn pause_all(&mut self) -> Result<(), CtlError> {
        rpc!(self, pause_all, "PauseAll", pb::EmptyRequest {});
        Ok(())
    }

    pub fn resume_all(&mut self) -> Result<(), CtlError> {
        rpc!(self, resume_all, "ResumeAll", pb::EmptyRequest {});
        Ok(())
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}
