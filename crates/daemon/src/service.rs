//! The gRPC service: `bess.pb.BESSControl` over the [`Daemon`]. Each
//! request runs on a blocking thread with the daemon locked (requests
//! are applied one at a time, in arrival order); a failure becomes the
//! response's `error` (errno and message), never a transport error, as
//! BESS answers.

use crate::dispatch::{notsup, unit};
use crate::error::{Fail, Res};
use crate::pb::{self, bess_control_server::BessControl};
use crate::state::Daemon;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

/// Responses carry an `error` field.
pub trait HasError: Default {
    fn set_error(&mut self, e: pb::Error);
}

macro_rules! has_error {
    ($($t:ident),* $(,)?) => {$(
        impl HasError for pb::$t {
            fn set_error(&mut self, e: pb::Error) {
                self.error = Some(e);
            }
        }
    )*};
}

has_error!(
    EmptyResponse,
    VersionResponse,
    ListPluginsResponse,
    ListWorkersResponse,
    ListTcsResponse,
    CheckSchedulingConstraintsResponse,
    GetTcStatsResponse,
    ListDriversResponse,
    GetDriverInfoResponse,
    ListPortsResponse,
    CreatePortResponse,
    CommandResponse,
    GetPortConfResponse,
    GetPortStatsResponse,
    GetLinkStatusResponse,
    ListMclassResponse,
    GetMclassInfoResponse,
    ListModulesResponse,
    CreateModuleResponse,
    GetModuleInfoResponse,
    DumpMempoolResponse,
    ListGateHookClassResponse,
    GetGateHookClassInfoResponse,
    ConfigureGateHookResponse,
    ListGateHooksResponse,
);

/// The service object tonic serves.
#[derive(Clone)]
pub struct Service {
    pub daemon: Arc<Mutex<Daemon>>,
    /// Notified by KillBess.
    pub kill: Arc<Notify>,
}

fn answer<R: HasError>(r: Res<R>) -> R {
    match r {
        Ok(v) => v,
        Err(f) => {
            tracing::debug!("request failed: {f}");
            let mut v = R::default();
            v.set_error(f.to_pb());
            v
        }
    }
}

impl Service {
    async fn call<R, F>(&self, f: F) -> Result<Response<R>, Status>
    where
        R: HasError + Send + 'static,
        F: FnOnce(&mut Daemon) -> Res<R> + Send + 'static,
    {
        let d = self.daemon.clone();
        // A client that hangs up mid-call drops this future, not the
        // blocking task: the change completes or fails as a whole.
        let r = tokio::task::spawn_blocking(move || {
            let mut d = d.lock();
            d.requests += 1;
            f(&mut d)
        })
        .await
        .unwrap_or_else(|e| Err(Fail::new(libc::EIO, format!("request handler failed: {e}"))));
        Ok(Response::new(answer(r)))
    }
}

type Rs<T> = Result<Response<T>, Status>;

/// The service's methods from the one table of RPCs
/// ([`crate::dispatch`]): each runs its handler on the locked daemon.
macro_rules! gen_service {
    ($($name:literal $method:ident ($req:ty) -> $resp:ty = $h:expr;)*) => {
        #[tonic::async_trait]
        impl BessControl for Service {
            $(async fn $method(&self, r: Request<$req>) -> Rs<$resp> {
                let r = r.into_inner();
                let h: fn(&mut Daemon, $req) -> Res<$resp> = $h;
                self.call(move |d| h(d, r)).await
            })*
            async fn kill_bess(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
                tracing::info!("KillBess: stopping");
                self.kill.notify_one();
                Ok(Response::new(pb::EmptyResponse::default()))
            }
        }
    };
}

crate::dispatch::rpc_table!(gen_service);
