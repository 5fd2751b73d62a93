//! The gRPC service: `bess.pb.BESSControl` over the [`Daemon`]. Each
//! request runs on a blocking thread with the daemon locked (requests
//! are applied one at a time, in arrival order); a failure becomes the
//! response's `error` (errno and message), never a transport error, as
//! BESS answers.

use crate::error::{Fail, Res};
use crate::pb::{self, bess_control_server::BessControl};
use crate::state::{Daemon, VERSION};
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

fn unit(r: Res<()>) -> Res<pb::EmptyResponse> {
    r.map(|_| pb::EmptyResponse::default())
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

    fn notsup<R: HasError>(what: &str) -> Result<Response<R>, Status> {
        Ok(Response::new(answer(Err(Fail::notsup(format!(
            "{what} is not supported by nfkit"
        ))))))
    }
}

type Rs<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl BessControl for Service {
    async fn get_version(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::VersionResponse> {
        Ok(Response::new(pb::VersionResponse {
            error: None,
            version: VERSION.into(),
        }))
    }
    async fn reset_all(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        self.call(|d| unit(d.reset_all())).await
    }
    async fn kill_bess(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        tracing::info!("KillBess: stopping");
        self.kill.notify_one();
        Ok(Response::new(pb::EmptyResponse::default()))
    }
    async fn import_plugin(&self, _: Request<pb::ImportPluginRequest>) -> Rs<pb::EmptyResponse> {
        Self::notsup("ImportPlugin (loading module libraries)")
    }
    async fn unload_plugin(&self, _: Request<pb::UnloadPluginRequest>) -> Rs<pb::EmptyResponse> {
        Self::notsup("UnloadPlugin")
    }
    async fn list_plugins(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::ListPluginsResponse> {
        Ok(Response::new(pb::ListPluginsResponse::default()))
    }
    async fn pause_all(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        self.call(|d| unit(d.pause_all())).await
    }
    async fn pause_worker(&self, r: Request<pb::PauseWorkerRequest>) -> Rs<pb::EmptyResponse> {
        let wid = r.into_inner().wid;
        self.call(move |d| unit(d.pause_worker(wid))).await
    }
    async fn resume_worker(&self, r: Request<pb::ResumeWorkerRequest>) -> Rs<pb::EmptyResponse> {
        let wid = r.into_inner().wid;
        self.call(move |d| unit(d.resume_worker(wid))).await
    }
    async fn resume_all(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        self.call(|d| unit(d.resume_all())).await
    }
    async fn reset_workers(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        self.call(|d| unit(d.reset_workers())).await
    }
    async fn list_workers(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::ListWorkersResponse> {
        self.call(|d| Ok(d.list_workers())).await
    }
    async fn add_worker(&self, r: Request<pb::AddWorkerRequest>) -> Rs<pb::EmptyResponse> {
        let r = r.into_inner();
        self.call(move |d| unit(d.add_worker(r))).await
    }
    async fn destroy_worker(&self, r: Request<pb::DestroyWorkerRequest>) -> Rs<pb::EmptyResponse> {
        let wid = r.into_inner().wid;
        self.call(move |d| unit(d.destroy_worker(wid))).await
    }
    async fn reset_tcs(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        self.call(|d| unit(d.reset_tcs())).await
    }
    async fn list_tcs(&self, r: Request<pb::ListTcsRequest>) -> Rs<pb::ListTcsResponse> {
        let wid = r.into_inner().wid;
        self.call(move |d| d.list_tcs(wid)).await
    }
    async fn check_scheduling_constraints(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> Rs<pb::CheckSchedulingConstraintsResponse> {
        // Placement is checked when each change is committed.
        Ok(Response::new(
            pb::CheckSchedulingConstraintsResponse::default(),
        ))
    }
    async fn add_tc(&self, r: Request<pb::AddTcRequest>) -> Rs<pb::EmptyResponse> {
        let c = r.into_inner().class;
        self.call(move |d| unit(d.add_tc(c))).await
    }
    async fn update_tc_params(
        &self,
        r: Request<pb::UpdateTcParamsRequest>,
    ) -> Rs<pb::EmptyResponse> {
        let c = r.into_inner().class;
        self.call(move |d| unit(d.update_tc_params(c))).await
    }
    async fn update_tc_parent(
        &self,
        r: Request<pb::UpdateTcParentRequest>,
    ) -> Rs<pb::EmptyResponse> {
        let c = r.into_inner().class;
        self.call(move |d| unit(d.update_tc_parent(c))).await
    }
    async fn get_tc_stats(&self, r: Request<pb::GetTcStatsRequest>) -> Rs<pb::GetTcStatsResponse> {
        let n = r.into_inner().name;
        self.call(move |d| d.get_tc_stats(&n)).await
    }
    async fn list_drivers(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::ListDriversResponse> {
        Ok(Response::new(pb::ListDriversResponse {
            error: None,
            driver_names: crate::drivers::DRIVERS
                .iter()
                .map(|d| d.0.to_string())
                .collect(),
        }))
    }
    async fn get_driver_info(
        &self,
        r: Request<pb::GetDriverInfoRequest>,
    ) -> Rs<pb::GetDriverInfoResponse> {
        let n = r.into_inner().driver_name;
        Ok(Response::new(answer(
            crate::drivers::DRIVERS
                .iter()
                .find(|d| d.0 == n)
                .map(|d| pb::GetDriverInfoResponse {
                    error: None,
                    name: d.0.into(),
                    help: d.1.into(),
                    commands: Vec::new(),
                })
                .ok_or_else(|| Fail::noent(format!("no port driver named `{n}`"))),
        )))
    }
    async fn reset_ports(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        self.call(|d| unit(d.reset_ports())).await
    }
    async fn list_ports(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::ListPortsResponse> {
        self.call(|d| Ok(d.list_ports())).await
    }
    async fn create_port(&self, r: Request<pb::CreatePortRequest>) -> Rs<pb::CreatePortResponse> {
        let r = r.into_inner();
        self.call(move |d| d.create_port(r)).await
    }
    async fn destroy_port(&self, r: Request<pb::DestroyPortRequest>) -> Rs<pb::EmptyResponse> {
        let n = r.into_inner().name;
        self.call(move |d| unit(d.destroy_port(&n))).await
    }
    async fn set_port_conf(&self, _: Request<pb::SetPortConfRequest>) -> Rs<pb::CommandResponse> {
        Self::notsup("SetPortConf (MAC, MTU, admin state)")
    }
    async fn get_port_conf(
        &self,
        r: Request<pb::GetPortConfRequest>,
    ) -> Rs<pb::GetPortConfResponse> {
        let n = r.into_inner().name;
        self.call(move |d| d.get_port_conf(&n)).await
    }
    async fn get_port_stats(
        &self,
        r: Request<pb::GetPortStatsRequest>,
    ) -> Rs<pb::GetPortStatsResponse> {
        let n = r.into_inner().name;
        self.call(move |d| d.get_port_stats(&n)).await
    }
    async fn get_link_status(
        &self,
        r: Request<pb::GetLinkStatusRequest>,
    ) -> Rs<pb::GetLinkStatusResponse> {
        let n = r.into_inner().name;
        self.call(move |d| d.get_link_status(&n)).await
    }
    async fn list_mclass(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::ListMclassResponse> {
        self.call(|d| Ok(d.list_mclass())).await
    }
    async fn get_mclass_info(
        &self,
        r: Request<pb::GetMclassInfoRequest>,
    ) -> Rs<pb::GetMclassInfoResponse> {
        let n = r.into_inner().name;
        self.call(move |d| d.get_mclass_info(&n)).await
    }
    async fn reset_modules(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::EmptyResponse> {
        self.call(|d| unit(d.reset_modules())).await
    }
    async fn list_modules(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::ListModulesResponse> {
        self.call(|d| Ok(d.list_modules())).await
    }
    async fn create_module(
        &self,
        r: Request<pb::CreateModuleRequest>,
    ) -> Rs<pb::CreateModuleResponse> {
        let r = r.into_inner();
        self.call(move |d| d.create_module(r)).await
    }
    async fn destroy_module(&self, r: Request<pb::DestroyModuleRequest>) -> Rs<pb::EmptyResponse> {
        let n = r.into_inner().name;
        self.call(move |d| unit(d.destroy_module(&n))).await
    }
    async fn get_module_info(
        &self,
        r: Request<pb::GetModuleInfoRequest>,
    ) -> Rs<pb::GetModuleInfoResponse> {
        let n = r.into_inner().name;
        self.call(move |d| d.get_module_info(&n)).await
    }
    async fn connect_modules(
        &self,
        r: Request<pb::ConnectModulesRequest>,
    ) -> Rs<pb::EmptyResponse> {
        let r = r.into_inner();
        self.call(move |d| unit(d.connect(r))).await
    }
    async fn disconnect_modules(
        &self,
        r: Request<pb::DisconnectModulesRequest>,
    ) -> Rs<pb::EmptyResponse> {
        let r = r.into_inner();
        self.call(move |d| unit(d.disconnect(r))).await
    }
    async fn dump_mempool(
        &self,
        _: Request<pb::DumpMempoolRequest>,
    ) -> Rs<pb::DumpMempoolResponse> {
        Self::notsup("DumpMempool")
    }
    async fn module_command(&self, r: Request<pb::CommandRequest>) -> Rs<pb::CommandResponse> {
        let r = r.into_inner();
        self.call(move |d| d.module_command(r)).await
    }
    async fn list_gate_hook_class(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> Rs<pb::ListGateHookClassResponse> {
        Ok(Response::new(crate::hooks::classes()))
    }
    async fn get_gate_hook_class_info(
        &self,
        r: Request<pb::GetGateHookClassInfoRequest>,
    ) -> Rs<pb::GetGateHookClassInfoResponse> {
        let n = r.into_inner().name;
        Ok(Response::new(answer(crate::hooks::class_info(&n))))
    }
    async fn configure_gate_hook(
        &self,
        r: Request<pb::ConfigureGateHookRequest>,
    ) -> Rs<pb::ConfigureGateHookResponse> {
        let r = r.into_inner();
        self.call(move |d| crate::hooks::configure(d, r)).await
    }
    async fn list_gate_hooks(&self, _: Request<pb::EmptyRequest>) -> Rs<pb::ListGateHooksResponse> {
        self.call(|d| Ok(crate::hooks::list(d))).await
    }
    async fn gate_hook_command(
        &self,
        _: Request<pb::GateHookCommandRequest>,
    ) -> Rs<pb::CommandResponse> {
        Self::notsup("gate hooks")
    }
    async fn configure_resume_hook(
        &self,
        _: Request<pb::ConfigureResumeHookRequest>,
    ) -> Rs<pb::CommandResponse> {
        Self::notsup("resume hooks")
    }
}
