//! A request by method name and its encoded message, handled without
//! gRPC: the bytes are decoded as the method's request message and the
//! same [`Daemon`] method the service calls runs. The fuzz target
//! (`daemon_requests`) drives the daemon through this; any failure,
//! a malformed message included, is BESS's `Error` (errno + message).

use crate::error::{Fail, Res};
use crate::pb;
use crate::state::Daemon;
use prost::Message;

/// The methods [`dispatch`] handles (BESS's names), in a fixed order
/// (the fuzz target picks them by index).
pub const METHODS: &[&str] = &[
    "GetVersion",
    "ResetAll",
    "PauseAll",
    "ResumeAll",
    "PauseWorker",
    "ResumeWorker",
    "ListWorkers",
    "AddWorker",
    "DestroyWorker",
    "ResetWorkers",
    "ListTcs",
    "AddTc",
    "UpdateTcParams",
    "UpdateTcParent",
    "GetTcStats",
    "ResetTcs",
    "ListDrivers",
    "GetDriverInfo",
    "ListPorts",
    "CreatePort",
    "DestroyPort",
    "GetPortConf",
    "GetPortStats",
    "GetLinkStatus",
    "ResetPorts",
    "ListMclass",
    "GetMclassInfo",
    "ListModules",
    "CreateModule",
    "DestroyModule",
    "GetModuleInfo",
    "ConnectModules",
    "DisconnectModules",
    "ResetModules",
    "ModuleCommand",
    "DumpMempool",
];

fn de<M: Message + Default>(method: &str, bytes: &[u8]) -> Res<M> {
    M::decode(bytes).map_err(|e| Fail::inval(format!("{method}: malformed request: {e}")))
}

fn ok<M: Message>(m: M) -> Res<Vec<u8>> {
    Ok(m.encode_to_vec())
}

fn empty(r: Res<()>) -> Res<Vec<u8>> {
    r.map(|_| pb::EmptyResponse::default().encode_to_vec())
}

/// Handle `method` with request message `bytes`: the encoded response
/// message, or the error its `error` field would carry.
pub fn dispatch(d: &mut Daemon, method: &str, bytes: &[u8]) -> Res<Vec<u8>> {
    let m = method;
    d.requests += 1;
    match m {
        "GetVersion" => {
            de::<pb::EmptyRequest>(m, bytes)?;
            ok(pb::VersionResponse {
                error: None,
                version: crate::state::VERSION.into(),
            })
        }
        "ResetAll" => empty(de::<pb::EmptyRequest>(m, bytes).and_then(|_| d.reset_all())),
        "PauseAll" => empty(de::<pb::EmptyRequest>(m, bytes).and_then(|_| d.pause_all())),
        "ResumeAll" => empty(de::<pb::EmptyRequest>(m, bytes).and_then(|_| d.resume_all())),
        "PauseWorker" => empty(d.pause_worker(de::<pb::PauseWorkerRequest>(m, bytes)?.wid)),
        "ResumeWorker" => empty(d.resume_worker(de::<pb::ResumeWorkerRequest>(m, bytes)?.wid)),
        "ListWorkers" => {
            de::<pb::EmptyRequest>(m, bytes)?;
            ok(d.list_workers())
        }
        "AddWorker" => empty(d.add_worker(de(m, bytes)?)),
        "DestroyWorker" => empty(d.destroy_worker(de::<pb::DestroyWorkerRequest>(m, bytes)?.wid)),
        "ResetWorkers" => empty(de::<pb::EmptyRequest>(m, bytes).and_then(|_| d.reset_workers())),
        "ListTcs" => ok(d.list_tcs(de::<pb::ListTcsRequest>(m, bytes)?.wid)?),
        "AddTc" => empty(d.add_tc(de::<pb::AddTcRequest>(m, bytes)?.class)),
        "UpdateTcParams" => {
            empty(d.update_tc_params(de::<pb::UpdateTcParamsRequest>(m, bytes)?.class))
        }
        "UpdateTcParent" => {
            empty(d.update_tc_parent(de::<pb::UpdateTcParentRequest>(m, bytes)?.class))
        }
        "GetTcStats" => ok(d.get_tc_stats(&de::<pb::GetTcStatsRequest>(m, bytes)?.name)?),
        "ResetTcs" => empty(de::<pb::EmptyRequest>(m, bytes).and_then(|_| d.reset_tcs())),
        "ListDrivers" => {
            de::<pb::EmptyRequest>(m, bytes)?;
            ok(pb::ListDriversResponse {
                error: None,
                driver_names: crate::drivers::DRIVERS.iter().map(|d| d.0.into()).collect(),
            })
        }
        "GetDriverInfo" => {
            let n = de::<pb::GetDriverInfoRequest>(m, bytes)?.driver_name;
            let d = crate::drivers::DRIVERS
                .iter()
                .find(|d| d.0 == n)
                .ok_or_else(|| Fail::noent(format!("no port driver named `{n}`")))?;
            ok(pb::GetDriverInfoResponse {
                error: None,
                name: d.0.into(),
                help: d.1.into(),
                commands: Vec::new(),
            })
        }
        "ListPorts" => {
            de::<pb::EmptyRequest>(m, bytes)?;
            ok(d.list_ports())
        }
        "CreatePort" => ok(d.create_port(de(m, bytes)?)?),
        "DestroyPort" => empty(d.destroy_port(&de::<pb::DestroyPortRequest>(m, bytes)?.name)),
        "GetPortConf" => ok(d.get_port_conf(&de::<pb::GetPortConfRequest>(m, bytes)?.name)?),
        "GetPortStats" => ok(d.get_port_stats(&de::<pb::GetPortStatsRequest>(m, bytes)?.name)?),
        "GetLinkStatus" => ok(d.get_link_status(&de::<pb::GetLinkStatusRequest>(m, bytes)?.name)?),
        "ResetPorts" => empty(de::<pb::EmptyRequest>(m, bytes).and_then(|_| d.reset_ports())),
        "ListMclass" => {
            de::<pb::EmptyRequest>(m, bytes)?;
            ok(d.list_mclass())
        }
        "GetMclassInfo" => ok(d.get_mclass_info(&de::<pb::GetMclassInfoRequest>(m, bytes)?.name)?),
        "ListModules" => {
            de::<pb::EmptyRequest>(m, bytes)?;
            ok(d.list_modules())
        }
        "CreateModule" => ok(d.create_module(de(m, bytes)?)?),
        "DestroyModule" => empty(d.destroy_module(&de::<pb::DestroyModuleRequest>(m, bytes)?.name)),
        "GetModuleInfo" => ok(d.get_module_info(&de::<pb::GetModuleInfoRequest>(m, bytes)?.name)?),
        "ConnectModules" => empty(d.connect(de(m, bytes)?)),
        "DisconnectModules" => empty(d.disconnect(de(m, bytes)?)),
        "ResetModules" => empty(de::<pb::EmptyRequest>(m, bytes).and_then(|_| d.reset_modules())),
        "ModuleCommand" => ok(d.module_command(de(m, bytes)?)?),
        other => Err(Fail::notsup(format!("{other} is not supported by nfkit"))),
    }
}
