"""nfkit daemon driven by a Python gRPC client (grpcio) with stubs
generated from nfkit's own .proto files, as BESS's pybess drives bessd.

Run by `cargo xtask test` (and `cargo xtask daemon-python`): it makes a
venv under target/, generates the stubs into target/, builds the
`nfkit-daemon` binary and runs this file with
NFKIT_DAEMON=<binary> and PYTHONPATH=<stubs>.

Checks: Source -> Timestamp -> Measure -> Sink with class statistics and
a Measure command; a UnixSocketPort pipeline (packets in and out over
the socket, compared byte for byte after MACSwap); port statistics; a
module command implemented by the module (ExactMatch add); errors in
BESS's shape; tear-down; KillBess.
"""

import os
import random
import socket
import subprocess
import sys
import tempfile
import time

import grpc
from google.protobuf import any_pb2

import bess_msg_pb2 as bess
import module_msg_pb2 as mod
import service_pb2_grpc
import util_msg_pb2 as util
from ports import port_msg_pb2 as port_msg

ENOENT, EEXIST, EINVAL, EBUSY = 2, 17, 22, 16


def pack(msg):
    a = any_pb2.Any()
    a.Pack(msg)
    return a


def ok(resp, what=""):
    if resp.HasField("error") and resp.error.code != 0:
        raise AssertionError(f"{what}: errno {resp.error.code}: {resp.error.errmsg}")
    return resp


def fails(resp, code, what=""):
    assert resp.error.code == code, f"{what}: expected errno {code}, got {resp.error}"
    assert resp.error.errmsg, what
    return resp.error.errmsg


def wait_for(cond, what, timeout=20.0):
    t = time.time()
    while not cond():
        if time.time() - t > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def desc_value(desc, key):
    for kv in desc.split():
        if kv.startswith(key + "="):
            return int(kv.split("=", 1)[1])
    return 0


def start_daemon(tmp):
    sock = os.path.join(tmp, "daemon.sock")
    proc = subprocess.Popen(
        [os.environ["NFKIT_DAEMON"], "--socket", sock],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("nfkit daemon: listening on unix:"), line
    return proc, sock


def source_to_sink(stub):
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="src", mclass="Source", arg=pack(mod.SourceArg(pkt_size=60)))), "src")
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="ts", mclass="Timestamp", arg=pack(mod.TimestampArg()))), "ts")
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="lat", mclass="Measure", arg=pack(mod.MeasureArg()))), "lat")
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="sink", mclass="Sink", arg=pack(mod.SinkArg()))), "sink")
    for a, b in [("src", "ts"), ("ts", "lat"), ("lat", "sink")]:
        ok(stub.ConnectModules(bess.ConnectModulesRequest(m1=a, m2=b)), f"{a}->{b}")
    # A rate limit over the source, as pybess's add_tc + attach_task do.
    tc = bess.TrafficClass(name="rl", policy="rate_limit", resource="packet", wid=-1)
    tc.limit["packet"] = 100000
    ok(stub.AddTc(bess.AddTcRequest(**{"class": tc})), "AddTc")
    leaf = bess.TrafficClass(leaf_module_name="src", parent="rl", wid=-1)
    ok(stub.UpdateTcParent(bess.UpdateTcParentRequest(**{"class": leaf})), "attach")

    def sunk():
        info = ok(stub.GetModuleInfo(bess.GetModuleInfoRequest(name="sink")))
        return desc_value(info.desc, "consumed")

    wait_for(lambda: sunk() >= 2000, "packets at the sink")
    s1 = ok(stub.GetTcStats(bess.GetTcStatsRequest(name="rl")))
    time.sleep(0.3)
    s2 = ok(stub.GetTcStats(bess.GetTcStatsRequest(name="rl")))
    assert s2.packets > s1.packets and s2.bits > s1.bits and s2.count > s1.count, (s1, s2)
    assert s2.bits >= s2.packets * 60 * 8, s2
    rate = (s2.packets - s1.packets) / (s2.timestamp - s1.timestamp)
    assert rate < 100000 * 1.25, rate
    tcs = ok(stub.ListTcs(bess.ListTcsRequest(wid=-1)))
    names = {getattr(c, "class").name for c in tcs.classes_status}
    assert {"rl", "!leaf_src:0"} <= names, names

    # Measure's command: a latency summary.
    arg = mod.MeasureCommandGetSummaryArg(latency_percentiles=[50.0, 99.0])
    r = ok(stub.ModuleCommand(bess.CommandRequest(name="lat", cmd="get_summary", arg=pack(arg))))
    summary = mod.MeasureCommandGetSummaryResponse()
    assert r.data.Unpack(summary), r.data.type_url
    assert summary.latency.count > 0 and summary.packets > 0, summary
    assert len(summary.latency.percentile_values_ns) == 2, summary

    info = ok(stub.GetModuleInfo(bess.GetModuleInfoRequest(name="lat")))
    assert info.mclass == "Measure" and info.metadata[0].name == "timestamp", info
    assert info.ogates[0].name == "sink" and info.ogates[0].pkts > 0, info

    # Bad requests get BESS's error shape and change nothing.
    fails(stub.ConnectModules(bess.ConnectModulesRequest(m1="src", m2="sink")), EBUSY, "gate busy")
    fails(stub.CreateModule(bess.CreateModuleRequest(name="src", mclass="Sink")), EEXIST, "dup")
    fails(stub.CreateModule(bess.CreateModuleRequest(name="x", mclass="NoSuch")), ENOENT, "class")
    fails(stub.CreateModule(bess.CreateModuleRequest(
        name="x", mclass="Source", arg=pack(mod.SinkArg()))), EINVAL, "wrong Any type")
    fails(stub.DestroyModule(bess.DestroyModuleRequest(name="ts")), EBUSY, "in use")
    fails(stub.GetTcStats(bess.GetTcStatsRequest(name="nope")), ENOENT, "no class")

    # Tear down this pipeline: disconnect, destroy.
    for m in ["src", "ts", "lat"]:
        ok(stub.DisconnectModules(bess.DisconnectModulesRequest(name=m, ogate=0)), m)
    for m in ["src", "ts", "lat", "sink"]:
        ok(stub.DestroyModule(bess.DestroyModuleRequest(name=m)), m)
    ok(stub.ResetTcs(bess.EmptyRequest()), "ResetTcs")


def unix_socket_port(stub, pid):
    name = f"nfkit-pytest-{pid}"
    r = ok(stub.CreatePort(bess.CreatePortRequest(
        name="usp", driver="UnixSocketPort",
        arg=pack(port_msg.UnixSocketPortArg(path="@" + name, confirm_connect=True)))), "port")
    assert r.name == "usp" and len(r.mac_addr) == 17, r
    fails(stub.CreatePort(bess.CreatePortRequest(
        name="usp", driver="UnixSocketPort",
        arg=pack(port_msg.UnixSocketPortArg(path="@x")))), EEXIST, "dup port")
    fails(stub.CreatePort(bess.CreatePortRequest(
        name="p", driver="PMDPort", arg=pack(port_msg.PMDPortArg(port_id=0)))), EINVAL, "port_id")
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="inc", mclass="PortInc", arg=pack(mod.PortIncArg(port="usp")))), "inc")
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="swap", mclass="MACSwap", arg=pack(mod.MACSwapArg()))), "swap")
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="out", mclass="PortOut", arg=pack(mod.PortOutArg(port="usp")))), "out")
    ok(stub.ConnectModules(bess.ConnectModulesRequest(m1="inc", m2="swap")))
    ok(stub.ConnectModules(bess.ConnectModulesRequest(m1="swap", m2="out")))
    ports = ok(stub.ListPorts(bess.EmptyRequest())).ports
    assert [(p.name, p.driver) for p in ports] == [("usp", "UnixSocketPort")], ports

    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect("\0" + name)
    assert s.recv(16) == b"yes\0", "confirm_connect"
    rng = random.Random(7)
    sent, got = [], []
    # In rounds of 16, so that nothing waits on a full socket buffer.
    for _ in range(16):
        burst = []
        for _ in range(16):
            size = rng.choice([60, 64, 128, 512, 1000, 1514])
            burst.append(bytes(rng.getrandbits(8) for _ in range(size)))
        for pkt in burst:
            s.send(pkt)
        got += [s.recv(4096) for _ in burst]
        sent += burst
    for a, b in zip(sent, got):
        assert b == a[6:12] + a[0:6] + a[12:], "MACSwap'd byte for byte"
    st = ok(stub.GetPortStats(bess.GetPortStatsRequest(name="usp")))
    assert st.inc.packets == len(sent) and st.out.packets == len(sent), st
    assert st.inc.bytes == sum(map(len, sent)) == st.out.bytes, st
    assert st.inc.dropped == 0 and st.out.dropped == 0, st
    link = ok(stub.GetLinkStatus(bess.GetLinkStatusRequest(name="usp")))
    assert link.link_up, link
    fails(stub.DestroyPort(bess.DestroyPortRequest(name="usp")), EBUSY, "port in use")
    s.close()

    # A command the module implements: ExactMatch's add.
    em = mod.ExactMatchArg(fields=[util.Field(offset=12, num_bytes=2)])
    ok(stub.CreateModule(bess.CreateModuleRequest(name="em", mclass="ExactMatch", arg=pack(em))))
    add = mod.ExactMatchCommandAddArg(gate=1, fields=[util.FieldData(value_bin=b"\x08\x00")])
    ok(stub.ModuleCommand(bess.CommandRequest(name="em", cmd="add", arg=pack(add))), "em add")
    msg = fails(stub.ModuleCommand(bess.CommandRequest(name="em", cmd="no_such")), 95, "no cmd")
    assert "no_such" in msg, msg

    # ResetAll tears everything down.
    ok(stub.ResetAll(bess.EmptyRequest()), "ResetAll")
    assert not ok(stub.ListModules(bess.EmptyRequest())).modules
    assert not ok(stub.ListPorts(bess.EmptyRequest())).ports
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect("\0" + name)
        raise AssertionError("the UnixSocketPort still listens after ResetAll")
    except OSError:
        pass


def abuse(stub, channel, sock):
    """Bad input at the transport level, and load, while a pipeline runs."""
    ok(stub.CreateModule(bess.CreateModuleRequest(
        name="src", mclass="Source", arg=pack(mod.SourceArg(pkt_size=60)))))
    ok(stub.CreateModule(bess.CreateModuleRequest(name="sink", mclass="Sink")))
    ok(stub.ConnectModules(bess.ConnectModulesRequest(m1="src", m2="sink")))

    def sunk():
        return desc_value(ok(stub.GetModuleInfo(bess.GetModuleInfoRequest(name="sink"))).desc,
                          "consumed")

    # Malformed protobuf bytes: a gRPC error, not a crash.
    raw = channel.unary_unary("/bess.pb.BESSControl/CreateModule")
    for junk in [b"\xff\xff\xff", b"\x0a\x10abc", bytes(range(256))]:
        try:
            raw(junk, timeout=5)
            raise AssertionError("malformed request accepted")
        except grpc.RpcError as e:
            assert e.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT), e
    # An RPC that does not exist.
    try:
        channel.unary_unary("/bess.pb.BESSControl/NoSuchRpc")(b"", timeout=5)
        raise AssertionError("unknown RPC answered")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e
    # Bigger than the limit (4 MiB by default).
    try:
        stub.CreateModule(bess.CreateModuleRequest(name="x" * (5 << 20), mclass="Sink"), timeout=10)
        raise AssertionError("oversize request accepted")
    except grpc.RpcError as e:
        assert e.code() in (grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED), e
        assert "too large" in e.details(), e.details()
    # Clients that hang up mid-call (a deadline far too short).
    for _ in range(20):
        try:
            stub.ListModules(bess.EmptyRequest(), timeout=0.0001)
        except grpc.RpcError:
            pass
    # Several clients, many requests each, at once.
    import threading
    errors = []

    def client(n):
        try:
            ch = grpc.insecure_channel("unix:" + sock,
                                       options=[("grpc.default_authority", "localhost")])
            st = service_pb2_grpc.BESSControlStub(ch)
            for i in range(300):
                if i % 3 == 0:
                    ok(st.GetTcStats(bess.GetTcStatsRequest(name="!leaf_src:0")))
                elif i % 3 == 1:
                    ok(st.ListModules(bess.EmptyRequest()))
                else:
                    fails(st.GetModuleInfo(bess.GetModuleInfoRequest(name=f"none{n}")), ENOENT)
            ch.close()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    before = sunk()
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    assert not errors, errors
    print(f"4 clients x 300 requests in {dt:.2f} s ({1200 / dt:.0f} requests/s)")
    # Still forwarding.
    wait_for(lambda: sunk() > before + 1000, "traffic after the abuse")
    ok(stub.ResetAll(bess.EmptyRequest()), "ResetAll")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        proc, sock = start_daemon(tmp)
        try:
            # grpc-core sends the socket path as :authority, which is not
            # a valid HTTP/2 authority for the Rust server: name one.
            channel = grpc.insecure_channel(
                "unix:" + sock, options=[("grpc.default_authority", "localhost")])
            stub = service_pb2_grpc.BESSControlStub(channel)
            v = ok(stub.GetVersion(bess.EmptyRequest()))
            assert v.version.startswith("nfkit"), v
            assert "UnixSocketPort" in ok(stub.ListDrivers(bess.EmptyRequest())).driver_names
            assert "Source" in ok(stub.ListMclass(bess.EmptyRequest())).names
            workers = ok(stub.ListWorkers(bess.EmptyRequest())).workers_status
            assert [w.wid for w in workers] == [0], workers
            fails(stub.ImportPlugin(bess.ImportPluginRequest(path="/x.so")), 95, "ENOTSUP")
            source_to_sink(stub)
            abuse(stub, channel, sock)
            unix_socket_port(stub, os.getpid())
            ok(stub.KillBess(bess.EmptyRequest()), "KillBess")
            assert proc.wait(timeout=20) == 0, "the daemon exits cleanly"
            assert not os.path.exists(sock), "the control socket is removed"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print("python client test: ok")


if __name__ == "__main__":
    sys.exit(main())
