//! Every RPC in one table: BESS's method name, the service method, its
//! request and response messages, and the handler. Two things are made
//! from it, so they cannot drift apart: [`dispatch`] (a method name and
//! its encoded message, handled without gRPC: the bytes are decoded as
//! the method's request and the handler runs; the fuzz target
//! `daemon_requests` drives the daemon through it) and the gRPC service
//! (`crate::service`, each request on a blocking thread with the daemon
//! locked). Any failure, a malformed message included, is BESS's
//! `Error` (errno + message). KillBess alone is outside the table (it
//! stops the server, not the daemon).

use crate::error::{Fail, Res};
use crate::pb;
use crate::state::Daemon;
use prost::Message;

pub(crate) fn unit(r: Res<()>) -> Res<pb::EmptyResponse> {
    r.map(|_| pb::EmptyResponse::default())
}

pub(crate) fn notsup<R>(what: &str) -> Res<R> {
    Err(Fail::notsup(format!("{what} is not supported by nfkit")))
}

/// Calls `$gen!` with one line per RPC:
/// `"Name" method(Request) -> Response = handler;` where the handler is
/// a `fn(&mut Daemon, Request) -> Res<Response>`. The order is fixed
/// (the fuzz target picks methods by index; add new ones at the end).
macro_rules! rpc_table {
    ($gen:ident) => {
        $gen! {
            "GetVersion" get_version(pb::EmptyRequest) -> pb::VersionResponse =
                |_, _| Ok(pb::VersionResponse { error: None, version: crate::state::VERSION.into() });
            "ResetAll" reset_all(pb::EmptyRequest) -> pb::EmptyResponse = |d, _| unit(d.reset_all());
            "PauseAll" pause_all(pb::EmptyRequest) -> pb::EmptyResponse = |d, _| unit(d.pause_all());
            "ResumeAll" resume_all(pb::EmptyRequest) -> pb::EmptyResponse = |d, _| unit(d.resume_all());
            "PauseWorker" pause_worker(pb::PauseWorkerRequest) -> pb::EmptyResponse =
                |d, r| unit(d.pause_worker(r.wid));
            "ResumeWorker" resume_worker(pb::ResumeWorkerRequest) -> pb::EmptyResponse =
                |d, r| unit(d.resume_worker(r.wid));
            "ListWorkers" list_workers(pb::EmptyRequest) -> pb::ListWorkersResponse =
                |d, _| Ok(d.list_workers());
            "AddWorker" add_worker(pb::AddWorkerRequest) -> pb::EmptyResponse = |d, r| unit(d.add_worker(r));
            "DestroyWorker" destroy_worker(pb::DestroyWorkerRequest) -> pb::EmptyResponse =
                |d, r| unit(d.destroy_worker(r.wid));
            "ResetWorkers" reset_workers(pb::EmptyRequest) -> pb::EmptyResponse = |d, _| unit(d.reset_workers());
            "ListTcs" list_tcs(pb::ListTcsRequest) -> pb::ListTcsResponse = |d, r| d.list_tcs(r.wid);
            "AddTc" add_tc(pb::AddTcRequest) -> pb::EmptyResponse = |d, r| unit(d.add_tc(r.class));
            "UpdateTcParams" update_tc_params(pb::UpdateTcParamsRequest) -> pb::EmptyResponse =
                |d, r| unit(d.update_tc_params(r.class));
            "UpdateTcParent" update_tc_parent(pb::UpdateTcParentRequest) -> pb::EmptyResponse =
                |d, r| unit(d.update_tc_parent(r.class));
            "GetTcStats" get_tc_stats(pb::GetTcStatsRequest) -> pb::GetTcStatsResponse =
                |d, r| d.get_tc_stats(&r.name);
            "ResetTcs" reset_tcs(pb::EmptyRequest) -> pb::EmptyResponse = |d, _| unit(d.reset_tcs());
            "ListDrivers" list_drivers(pb::EmptyRequest) -> pb::ListDriversResponse =
                |_, _| Ok(crate::drivers::list());
            "GetDriverInfo" get_driver_info(pb::GetDriverInfoRequest) -> pb::GetDriverInfoResponse =
                |_, r| crate::drivers::info(&r.driver_name);
            "ListPorts" list_ports(pb::EmptyRequest) -> pb::ListPortsResponse = |d, _| Ok(d.list_ports());
            "CreatePort" create_port(pb::CreatePortRequest) -> pb::CreatePortResponse = |d, r| d.create_port(r);
            "DestroyPort" destroy_port(pb::DestroyPortRequest) -> pb::EmptyResponse =
                |d, r| unit(d.destroy_port(&r.name));
            "GetPortConf" get_port_conf(pb::GetPortConfRequest) -> pb::GetPortConfResponse =
                |d, r| d.get_port_conf(&r.name);
            "GetPortStats" get_port_stats(pb::GetPortStatsRequest) -> pb::GetPortStatsResponse =
                |d, r| d.get_port_stats(&r.name);
            "GetLinkStatus" get_link_status(pb::GetLinkStatusRequest) -> pb::GetLinkStatusResponse =
                |d, r| d.get_link_status(&r.name);
            "ResetPorts" reset_ports(pb::EmptyRequest) -> pb::EmptyResponse = |d, _| unit(d.reset_ports());
            "ListMclass" list_mclass(pb::EmptyRequest) -> pb::ListMclassResponse = |d, _| Ok(d.list_mclass());
            "GetMclassInfo" get_mclass_info(pb::GetMclassInfoRequest) -> pb::GetMclassInfoResponse =
                |d, r| d.get_mclass_info(&r.name);
            "ListModules" list_modules(pb::EmptyRequest) -> pb::ListModulesResponse = |d, _| Ok(d.list_modules());
            "CreateModule" create_module(pb::CreateModuleRequest) -> pb::CreateModuleResponse =
                |d, r| d.create_module(r);
            "DestroyModule" destroy_module(pb::DestroyModuleRequest) -> pb::EmptyResponse =
                |d, r| unit(d.destroy_module(&r.name));
            "GetModuleInfo" get_module_info(pb::GetModuleInfoRequest) -> pb::GetModuleInfoResponse =
                |d, r| d.get_module_info(&r.name);
            "ConnectModules" connect_modules(pb::ConnectModulesRequest) -> pb::EmptyResponse =
                |d, r| unit(d.connect(r));
            "DisconnectModules" disconnect_modules(pb::DisconnectModulesRequest) -> pb::EmptyResponse =
                |d, r| unit(d.disconnect(r));
            "ResetModules" reset_modules(pb::EmptyRequest) -> pb::EmptyResponse = |d, _| unit(d.reset_modules());
            "ModuleCommand" module_command(pb::CommandRequest) -> pb::CommandResponse = |d, r| d.module_command(r);
            "DumpMempool" dump_mempool(pb::DumpMempoolRequest) -> pb::DumpMempoolResponse =
                |_, _| notsup("DumpMempool");
            "ListGateHookClass" list_gate_hook_class(pb::EmptyRequest) -> pb::ListGateHookClassResponse =
                |_, _| Ok(crate::hooks::classes());
            "GetGateHookClassInfo" get_gate_hook_class_info(pb::GetGateHookClassInfoRequest)
                -> pb::GetGateHookClassInfoResponse = |_, r| crate::hooks::class_info(&r.name);
            "ConfigureGateHook" configure_gate_hook(pb::ConfigureGateHookRequest)
                -> pb::ConfigureGateHookResponse = |d, r| crate::hooks::configure(d, r);
            "ListGateHooks" list_gate_hooks(pb::EmptyRequest) -> pb::ListGateHooksResponse =
                |d, _| Ok(crate::hooks::list(d));
            "GateHookCommand" gate_hook_command(pb::GateHookCommandRequest) -> pb::CommandResponse =
                |_, _| notsup("gate hook commands");
            "ConfigureResumeHook" configure_resume_hook(pb::ConfigureResumeHookRequest) -> pb::CommandResponse =
                |_, _| notsup("resume hooks");
            "ListPlugins" list_plugins(pb::EmptyRequest) -> pb::ListPluginsResponse =
                |_, _| Ok(pb::ListPluginsResponse::default());
            "ImportPlugin" import_plugin(pb::ImportPluginRequest) -> pb::EmptyResponse =
                |_, _| notsup("ImportPlugin (loading module libraries)");
            "UnloadPlugin" unload_plugin(pb::UnloadPluginRequest) -> pb::EmptyResponse =
                |_, _| notsup("UnloadPlugin");
            "SetPortConf" set_port_conf(pb::SetPortConfRequest) -> pb::CommandResponse =
                |_, _| notsup("SetPortConf (MAC, MTU, admin state)");
            // Placement is checked when each change is committed.
            "CheckSchedulingConstraints" check_scheduling_constraints(pb::EmptyRequest)
                -> pb::CheckSchedulingConstraintsResponse =
                |_, _| Ok(pb::CheckSchedulingConstraintsResponse::default());
        }
    };
}
// The gRPC service is the table's second user (built only with the feature).
#[cfg(feature = "grpc")]
pub(crate) use rpc_table;

macro_rules! gen_dispatch {
    ($($name:literal $method:ident ($req:ty) -> $resp:ty = $h:expr;)*) => {
        /// The methods [`dispatch`] handles (BESS's names), in a fixed
        /// order (the fuzz target picks them by index).
        pub const METHODS: &[&str] = &[$($name),*];

        /// Handle `method` with request message `bytes`: the encoded
        /// response message, or the error its `error` field would carry.
        pub fn dispatch(d: &mut Daemon, method: &str, bytes: &[u8]) -> Res<Vec<u8>> {
            d.requests += 1;
            match method {
                $($name => {
                    let r = <$req>::decode(bytes)
                        .map_err(|e| Fail::inval(format!("{method}: malformed request: {e}")))?;
                    let h: fn(&mut Daemon, $req) -> Res<$resp> = $h;
                    h(d, r).map(|m| m.encode_to_vec())
                })*
                other => notsup(other),
            }
        }
    };
}

rpc_table!(gen_dispatch);
