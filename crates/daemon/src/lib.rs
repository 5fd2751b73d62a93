//! # nfkit-daemon: `nfkit daemon`
//!
//! A long-running process that owns a SoftNIC pipeline (workers, ports,
//! modules, traffic classes), all created and changed at run time over
//! gRPC. The service is wire-compatible with BESS's
//! `bess.pb.BESSControl` (nfkit's own `.proto` files in `proto/`, same
//! package, methods, messages and field numbers), so BESS's `pybess`
//! client and scripts can drive nfkit.
//!
//! - Listens on a Unix socket (mode 0660; refuses to start if a live
//!   daemon answers there, removes only a stale socket nobody answers
//!   on) and, with `--grpc-url HOST:PORT`, on TCP (loopback only unless
//!   `--allow-remote`).
//! - Requests larger than a limit are refused; clients are served
//!   concurrently, changes are applied one at a time.
//! - Every graph, class or port change is applied between batches
//!   ([`nfkit_pipeline::Pipeline::edit`]); a change that fails is
//!   undone. Errors are BESS's `Error` (errno + message) in the
//!   response; the daemon never exits on a bad request.
//! - SIGTERM, SIGINT or KillBess stop it: workers paused, final
//!   statistics logged, ports and sockets released.
//!
//! Modules: [`state`] (the requests), [`mclass`] (BESS module arguments),
//! [`drivers`] (BESS port drivers), [`unix_port`] (`UnixSocketPort`),
//! [`service`] (gRPC).
#![forbid(unsafe_code)]

pub mod dispatch;
pub mod drivers;
pub mod error;
pub mod hooks;
pub mod mclass;
#[cfg(feature = "grpc")]
pub mod metrics;
pub mod reflect;
#[cfg(feature = "grpc")]
pub mod service;
pub mod state;
pub mod unix_port;

#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/bess.pb.rs"));
}

pub use drivers::OpenFn;
pub use error::Fail;
pub use state::Daemon;

#[cfg(feature = "grpc")]
use parking_lot::Mutex;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
#[cfg(feature = "grpc")]
use std::sync::Arc;
#[cfg(feature = "grpc")]
use tokio::sync::Notify;

/// Default largest request accepted, in bytes (gRPC's own default).
pub const DEFAULT_MAX_REQUEST: usize = 4 << 20;

/// How `nfkit daemon` listens.
#[derive(Debug, Clone)]
pub struct Options {
    /// Unix socket path (default: [`default_socket`]).
    pub socket: Option<PathBuf>,
    /// Also listen on TCP `HOST:PORT` (port 0: any free port).
    pub grpc_url: Option<String>,
    /// Allow a non-loopback `grpc_url`.
    pub allow_remote: bool,
    /// Largest request accepted, in bytes.
    pub max_request: usize,
    /// Worker threads of the control plane's runtime.
    pub control_threads: usize,
    /// A `.nfk` file whose pipeline is built before serving.
    pub config: Option<PathBuf>,
    /// Serve Prometheus metrics on `HOST:PORT` ([`metrics`]; loopback
    /// only unless `allow_remote`).
    pub metrics: Option<String>,
    /// Hybrid polling (idle workers sleep, the default) or pure polling.
    pub idle: nfkit_port::IdleOptions,
    /// Cores that workers without one (AddWorker core -1, worker 0) are
    /// pinned to in turn (`--cores`); `None`: the cores this process may
    /// use, in turn.
    pub cores: Option<Vec<usize>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            socket: None,
            grpc_url: None,
            allow_remote: false,
            max_request: DEFAULT_MAX_REQUEST,
            control_threads: 2,
            config: None,
            metrics: None,
            idle: nfkit_port::IdleOptions::default(),
            cores: None,
        }
    }
}

/// Errors that stop the daemon from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Listen(String),
    #[error("{0}")]
    Daemon(Fail),
    #[error("control runtime: {0}")]
    Runtime(std::io::Error),
}

/// `$XDG_RUNTIME_DIR/nfkit/daemon.sock`, else
/// `<temp dir>/nfkit-daemon.sock`.
pub fn default_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("nfkit").join("daemon.sock"),
        _ => std::env::temp_dir().join("nfkit-daemon.sock"),
    }
}

/// Where the gRPC URL may listen.
pub fn check_grpc_url(url: &str, allow_remote: bool) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = url
        .to_socket_addrs()
        .map_err(|e| format!("--grpc-url {url}: expected HOST:PORT ({e})"))?
        .collect();
    let addr = *addrs
        .first()
        .ok_or_else(|| format!("--grpc-url {url}: no address"))?;
    if !allow_remote && !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err(format!(
            "--grpc-url {url} is not a loopback address: anyone who reaches it controls the daemon; add --allow-remote to listen there anyway"
        ));
    }
    Ok(addr)
}

/// Run the daemon until SIGTERM, SIGINT or KillBess. Ports are opened
/// with `open` (the command's port registry). `ready` is called with
/// each address listened on (`unix:PATH`, `tcp:HOST:PORT`).
#[cfg(feature = "grpc")]
pub fn run(
    opts: Options,
    open: Arc<OpenFn>,
    ready: impl Fn(&str) + Send + 'static,
) -> Result<String, StartError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.control_threads.max(1))
        .max_blocking_threads(8)
        .thread_name("nfkit-control")
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    rt.block_on(serve(opts, open, ready))
}

#[cfg(feature = "grpc")]
async fn serve(
    opts: Options,
    open: Arc<OpenFn>,
    ready: impl Fn(&str) + Send + 'static,
) -> Result<String, StartError> {
    use socket2::Type;
    use std::os::unix::fs::PermissionsExt;
    use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

    let path = opts.socket.clone().unwrap_or_else(default_socket);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StartError::Listen(format!("cannot create {}: {e}", dir.display())))?;
        }
    }
    unix_port::remove_stale_socket(&path, Type::STREAM).map_err(|m| {
        StartError::Listen(format!(
            "{m} (another nfkit daemon?); stop it or give --socket PATH"
        ))
    })?;
    let tcp = match &opts.grpc_url {
        Some(url) => {
            let addr = check_grpc_url(url, opts.allow_remote).map_err(StartError::Listen)?;
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| StartError::Listen(format!("cannot listen on {addr}: {e}")))?;
            Some(l)
        }
        None => None,
    };
    let metrics_listener = match &opts.metrics {
        Some(addr) => Some(
            metrics::bind(addr, opts.allow_remote)
                .await
                .map_err(StartError::Listen)?,
        ),
        None => None,
    };
    let unix = tokio::net::UnixListener::bind(&path)
        .map_err(|e| StartError::Listen(format!("cannot listen on {}: {e}", path.display())))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| StartError::Listen(format!("chmod 0660 {}: {e}", path.display())))?;
    // From here on the socket is ours: remove it whatever happens.
    let _guard = RemoveOnDrop(path.clone());

    let mut daemon = Daemon::new(open).map_err(StartError::Daemon)?;
    daemon.set_idle(opts.idle).map_err(StartError::Daemon)?;
    if let Some(file) = &opts.config {
        let src = std::fs::read_to_string(file).map_err(|e| {
            StartError::Daemon(Fail::noent(format!("cannot read {}: {e}", file.display())))
        })?;
        daemon
            .load_config(&file.display().to_string(), &src)
            .map_err(StartError::Daemon)?;
        tracing::info!(config = %file.display(), "pipeline loaded");
    }
    let (cores, how) = match &opts.cores {
        Some(c) => (c.clone(), "--cores"),
        None => (
            core_affinity::get_core_ids()
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.id)
                .collect(),
            "the allowed cores in turn; --cores LIST to choose",
        ),
    };
    for line in daemon.pin_workers(cores, how).map_err(StartError::Daemon)? {
        eprintln!("{line}");
    }
    let kill = Arc::new(Notify::new());
    let svc = service::Service {
        daemon: Arc::new(Mutex::new(daemon)),
        kill: kill.clone(),
    };
    let server = || {
        pb::bess_control_server::BessControlServer::new(svc.clone())
            .max_decoding_message_size(opts.max_request)
    };
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stopped = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    ready(&format!("unix:{}", path.display()));
    let unix_srv = tonic::transport::Server::builder()
        .add_service(server())
        .serve_with_incoming_shutdown(UnixListenerStream::new(unix), stopped(&stop_tx));
    let mut tasks = vec![tokio::spawn(unix_srv)];
    if let Some(l) = tcp {
        let addr = l
            .local_addr()
            .map_err(|e| StartError::Listen(e.to_string()))?;
        ready(&format!("tcp:{addr}"));
        let srv = tonic::transport::Server::builder()
            .add_service(server())
            .serve_with_incoming_shutdown(TcpListenerStream::new(l), stopped(&stop_tx));
        tasks.push(tokio::spawn(srv));
    }
    if let Some(l) = metrics_listener {
        let addr = l
            .local_addr()
            .map_err(|e| StartError::Listen(e.to_string()))?;
        ready(&format!("metrics:http://{addr}/metrics"));
        tasks.push(tokio::spawn({
            let (d, stop) = (svc.daemon.clone(), stopped(&stop_tx));
            async move {
                metrics::serve(l, d, stop).await;
                Ok(())
            }
        }));
    }
    let why = wait_for_stop(&kill).await;
    tracing::info!("stopping: {why}");
    let _ = stop_tx.send(());
    for t in tasks {
        match t.await {
            Ok(Err(e)) => tracing::warn!("server: {e}"),
            Err(e) => tracing::warn!("server task: {e}"),
            Ok(Ok(())) => {}
        }
    }
    let report = {
        let mut d = svc.daemon.lock();
        let r = d.shutdown();
        tracing::info!(requests = d.requests, "final statistics:\n{r}");
        r
    };
    drop(svc);
    Ok(report)
}

#[cfg(feature = "grpc")]
async fn wait_for_stop(kill: &Notify) -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => tokio::select! {
            _ = t.recv() => "SIGTERM",
            _ = i.recv() => "SIGINT",
            _ = kill.notified() => "KillBess",
        },
        _ => {
            kill.notified().await;
            "KillBess"
        }
    }
}

#[cfg(feature = "grpc")]
struct RemoveOnDrop(PathBuf);

#[cfg(feature = "grpc")]
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
