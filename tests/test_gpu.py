"""GPU-resident payloads (--memory cuda). Two layers:

- with tests/fakecupy.py standing in for CuPy (host memory), everywhere: the staged and
  direct paths' plumbing, stage timings and their files, refusals and install lines;
- marked `gpu`, on a real CUDA device only (skipped with the reason elsewhere, e.g. CI):
  the same paths with real device memory, bytes checked on the GPU side.
"""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from hopbench.core import gpu
from hopbench.core.client import Session
from hopbench.errors import ConfigError, HopbenchError
from hopbench.orchestration.runner import run_session
from hopbench.records import Payload, RunConfig
from hopbench.testing import transport_or_skip
from tests import fakecupy
from tests.conftest import small_plan


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "_cp", fakecupy)
    fakecupy.copies.clear()
    return fakecupy


def _real_gpu():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


needs_gpu = pytest.mark.skipif(not _real_gpu(), reason="no CUDA device with CuPy here (GPU tests run on the device machine)")
#: every transport and GPU path the real-device tests take
REAL_GPU_PATHS = pytest.mark.parametrize("transport,path", [("tcp", "staged"), ("ucx", "staged"), ("ucx", "direct"),
                                                            ("nixl", "staged"), ("nixl", "direct")])


@pytest.mark.parametrize("transport", ["tcp", pytest.param("zmq", marks=pytest.mark.zmq),
                                       pytest.param("ucx", marks=pytest.mark.ucx)])
def test_staged_both_ends_records_every_stage(fake_gpu, server, transport):
    transport_or_skip(transport)  # staged works over any transport: it hands over pinned host buffers
    s = Session(server.host, server.port)
    try:
        m = s.measure(small_plan(transport, request_bytes=184320, cycles=60, warmup=5, client_memory="cuda",
                                 server_memory="cuda", verify=True))
    finally:
        s.close()
    assert m.completed == m.plan.total == 66 and m.error is None
    assert set(m.stages) == {"d2h_ns", "transfer_ns", "h2d_ns", "server_h2d_ns", "server_d2h_ns", "wire_ns"}
    for arr in m.stages.values():
        assert len(arr) == 66 and (arr[:66] >= 0).all()
    # the client's stages lie inside its round trip (read with the same clock by the staged
    # channel, inside the loop's span): the remainder is the wrapper's call cost, microseconds
    tiled = m.stages["d2h_ns"] + m.stages["transfer_ns"] + m.stages["h2d_ns"]
    assert (tiled <= m.samples_ns).all() and np.median(m.samples_ns - tiled) < 20_000
    # the wire is what the server's copies leave
    assert (m.stages["wire_ns"] == m.stages["transfer_ns"] - m.stages["server_h2d_ns"] - m.stages["server_d2h_ns"]).all()
    # per cycle: the client copies the payload less its 8-byte seq down, the reply up;
    # the server copies the request up and the reply down
    kinds = {(k, n) for k, n in fake_gpu.copies}
    assert (2, 184320 - 8) in kinds and (1, 184320) in kinds and (1, 8) in kinds and (2, 8) in kinds


def test_staged_run_writes_stage_columns(fake_gpu, server, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    run_session(server.host, server.port, [Payload("T1", 1, 61440, 8), Payload("T3", 3, 184320, 8)],
                RunConfig("tcp", k=2, id_bytes=4, cycles=30, warmup=3, client_memory="cuda", server_memory="cuda"),
                folder=out)
    summary = list(csv.DictReader(open(out / "summary.csv")))
    assert [r["gpu_path"] for r in summary] == ["staged", "staged"]
    for r in summary:
        for st in ("d2h", "transfer", "h2d", "server_h2d", "server_d2h", "wire"):
            assert float(r[f"{st}_p50_ns"]) >= 0 and r[f"{st}_p50_ci_lo_ns"] != ""
    samples = list(csv.DictReader(open(out / "samples.csv")))
    assert len(samples) == 2 * 34 and all(r["wire_ns"] != "" for r in samples)
    rep = json.loads((out / "report.json").read_text())
    assert rep["payloads"][0]["gpu"]["timing"].startswith("synchronised host timers")


def test_host_client_cuda_server(fake_gpu, server):
    s = Session(server.host, server.port)
    try:
        m = s.measure(small_plan(cycles=20, server_memory="cuda"))
    finally:
        s.close()
    assert m.completed == 26 and set(m.stages) == {"server_h2d_ns", "server_d2h_ns"}


@pytest.mark.ucx
def test_direct_over_ucx_hands_device_buffers_to_the_transport(fake_gpu, server):
    pytest.importorskip("ucxx")
    s = Session(server.host, server.port)
    try:
        m = s.measure(small_plan("ucx", request_bytes=61440, cycles=40, client_memory="cuda", server_memory="cuda",
                                 gpu_path="direct", verify=True))
    finally:
        s.close()
    assert m.completed == 46 and m.stages == {}  # UCX's own staging is inside the transfer


def test_direct_needs_a_cuda_aware_transport(fake_gpu, server):
    s = Session(server.host, server.port)
    try:
        with pytest.raises(ConfigError, match="direct needs a transport that moves GPU memory itself"):
            s.measure(small_plan(client_memory="cuda", server_memory="cuda", gpu_path="direct"))
    finally:
        s.close()


@pytest.mark.ucx
def test_direct_over_ucx_needs_a_cuda_lane(fake_gpu, server):
    """UCX_TLS without a cuda transport cannot move GPU memory: refused before measuring
    (needs ucxx; on a GPU machine without it this test is skipped, not failed)."""
    pytest.importorskip("ucxx")
    s = Session(server.host, server.port, transport_settings={"ucx": {"UCX_TLS": "tcp"}})
    try:
        with pytest.raises(ConfigError, match="no cuda transport"):
            s.measure(small_plan("ucx", client_memory="cuda", gpu_path="direct"))
    finally:
        s.close()


def test_server_without_gpu_refuses_and_serves_the_next(server, monkeypatch):
    def missing():
        raise gpu.GpuUnavailable(f"--memory cuda needs CuPy (No module named 'cupy'); install it with: {gpu.INSTALL}")

    monkeypatch.setattr(gpu, "load", missing)
    s = Session(server.host, server.port)
    with pytest.raises(HopbenchError, match=r"server cannot hold the payload in CUDA memory.*pip install 'hopbench\[gpu\]'"):
        s.measure(small_plan(server_memory="cuda"))
    s.close()
    s = Session(server.host, server.port)
    assert s.measure(small_plan(cycles=5)).completed == 11
    s.close()


def test_cli_without_cupy_gives_the_install_line(tmp_path):
    # CuPy made unimportable in a child process: one line naming the extra, nothing measured
    code = ("import sys; sys.modules['cupy'] = None; from hopbench.cli import main; "
            f"sys.argv = ['hopbench', 'run', '--peer', '127.0.0.1:1', '--memory', 'cuda', '--out', '{tmp_path / 'x'}']; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "install it with: pip install 'hopbench[gpu]'" in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1 and not (tmp_path / "x").exists()


# ---- real GPU (device machine) -------------------------------------------------------

@pytest.mark.gpu
@needs_gpu
@REAL_GPU_PATHS
def test_real_gpu_paths_move_the_bytes(server, transport, path):
    """direct over nixl: both ends' CuPy buffers registered as VRAM, the WRITEs GPU to GPU."""
    import cupy as cp

    transport_or_skip(transport)  # ucxx, nixl_cu12: skipped with the reason where missing
    # UCX's defaults (every transport, cuda_copy included): one UCX context per process,
    # shared with the other ucx tests of this process
    s = Session(server.host, server.port)
    try:  # verify: the server checks a CRC-32 of every request as it arrived (on the GPU for direct)
        m = s.measure(small_plan(transport, request_bytes=184320, cycles=50, client_memory="cuda",
                                 server_memory="cuda", gpu_path=path, verify=True))
    finally:
        s.close()
    assert m.completed == 56 and m.error is None
    assert m.gpu_info["name"] and m.gpu_info["device"] == cp.cuda.Device().id
    if path == "staged":
        assert np.median(m.stages["d2h_ns"]) > 0 and np.median(m.stages["server_h2d_ns"]) > 0
    if transport == "nixl" and path == "direct":
        assert m.data_info["transport"] == "nixl" and m.data_info["credits_sent"] <= 3, m.data_info


@pytest.mark.gpu
@needs_gpu
def test_real_staging_round_trips_bytes():
    st = gpu.Staging(184320)
    st.fill_random(7)
    want = st.host.copy()
    st.host[:] = 0
    st.d2h()
    assert (st.host == want).all()
    st.host[8:] = 1
    st.h2d(8)
    assert int(st.device[8:].sum()) == 184312 and (st.device[:8].get() == want[:8]).all()


def test_staged_server_inverts_ids_when_the_body_fails_its_crc(fake_gpu, server, monkeypatch):
    # the client announces a CRC that its body does not have: the GPU server must answer as
    # the host server does (inverted ids -> VerifyError "checksum"), then serve the next plan
    import zlib

    from hopbench.errors import VerifyError

    calls = []

    def crc32(data, *a):  # the client's call (first) announces 1; every server check sees 2
        calls.append(len(data))
        return 1 if len(calls) == 1 else 2

    monkeypatch.setattr(zlib, "crc32", crc32)
    s = Session(server.host, server.port)
    try:
        with pytest.raises(VerifyError, match="checksum"):
            s.measure(small_plan(request_bytes=184320, client_memory="cuda", server_memory="cuda", verify=True))
    finally:
        s.close()
    assert calls[0] == calls[1] == 184320 - 8


# ---- codecs on the GPU (docs/CODECS.md): the same bytes as the CPU codec ------------------

@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("spec", ["fp8", "int8"])
def test_real_gpu_codec_bytes_equal_the_cpu_codec(spec):
    import cupy as cp

    from hopbench.core import codecs as C
    from hopbench.core import gpucodec
    from hopbench.workload import hidden as H

    src = H.synthetic(5, 6144)
    cpu = C.parse(spec, 6144)
    dev = gpucodec.GpuScaled(cpu)
    for nbytes in (3 * 61440, 56, 100001, 2 * 6144 * 2 + 7):
        for body in src.bodies(nbytes, None, 3):
            want = cpu.encode(body)
            got = np.array(dev.encode(cp.asarray(body)))
            assert np.array_equal(got, want), (spec, nbytes)
            out = cp.empty(body.size, dtype=cp.uint8)
            dev.decode(want, out)  # a CPU frame decoded on the GPU
            back = np.empty_like(body)
            cpu.decode(want, back)
            assert np.array_equal(out.get(), back)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("memory", [("cuda", "cuda"), ("cuda", "host"), ("host", "cuda")])
def test_real_gpu_codec_plan_end_to_end(server, memory):
    from hopbench.core import protocol as P
    from hopbench.workload import hidden as H

    s = Session(server.host, server.port)
    try:
        m = s.measure(P.Plan("tcp", 8 + 3 * 61440, 8, 2, 4, 30, 3, verify=True, client_memory=memory[0],
                             server_memory=memory[1], codec="fp8", codec_group=6144), source=H.synthetic(5, 6144))
        s.bye()
    finally:
        s.close()
    assert m.completed == m.plan.total and m.error is None
    assert m.codec_info["kernel"] == ("cuda" if memory[0] == "cuda" else "compiled")
    assert np.median(m.stages["encode_ns"][4:]) > 0 and np.median(m.stages["decode_ns"][4:]) > 0


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("spec", ["zstd:1", "lz4"])
def test_real_nvcomp_round_trips_and_runs_a_plan(server, spec):
    """Lossless on GPU memory through nvCOMP: byte-exact round trip, and a plan with --verify
    (the server checks each decoded body's CRC-32 against the raw body's)."""
    pytest.importorskip("nvidia.nvcomp")
    import cupy as cp

    from hopbench.core import codecs as C
    from hopbench.core import gpucodec
    from hopbench.core import protocol as P
    from hopbench.workload import hidden as H

    src = H.synthetic(5, 6144)
    dev = gpucodec.GpuNvcomp(C.parse(spec, 6144))
    for nbytes in (3 * 61440, 4096, 100001):
        body = cp.asarray(src.bodies(nbytes, None, 1)[0])
        enc = np.array(dev.encode(body))
        out = cp.empty(nbytes, dtype=cp.uint8)
        dev.decode(enc, out)
        assert bool((out == body).all()), (spec, nbytes)
    s = Session(server.host, server.port)
    try:
        m = s.measure(P.Plan("tcp", 8 + 3 * 61440, 8, 2, 4, 30, 3, verify=True, client_memory="cuda",
                             server_memory="cuda", codec=spec, codec_group=6144), source=src)
        s.bye()
    finally:
        s.close()
    assert m.completed == m.plan.total and m.codec_info["kernel"] == "nvcomp"
    wire = np.median(m.stages["wire_bytes"][4:])
    # zstd compresses BF16 states (~1.3x); LZ4 finds almost nothing in them (as on the CPU)
    assert wire < 3 * 61440 / 1.2 if spec.startswith("zstd") else wire < 3 * 61440 * 1.01


@pytest.mark.gpu
@needs_gpu
def test_real_codecs_command_profiles_the_gpu_too():
    from typer.testing import CliRunner

    from hopbench.cli import app

    res = CliRunner().invoke(app, ["codecs", "--codec", "fp8,int8", "--reps", "2"])
    assert res.exit_code == 0, res.output
    lines = [ln.split() for ln in res.output.splitlines() if ln.startswith(("fp8 ", "int8 "))]
    assert {(ln[0], ln[1]) for ln in lines} == {("fp8", "cpu"), ("fp8", "gpu"), ("int8", "cpu"), ("int8", "gpu")}


# ---- a streamed plan in GPU memory (docs/STREAM.md "In GPU memory") -------------------

def _streamed_gpu(transport="tcp", client="cuda", server="cuda", path="staged", chunks=5, size=36864, cycles=6):
    from hopbench.core import protocol as P

    return P.Plan(transport, chunks * size, 8, 2, 4, cycles, 2, client_memory=client, server_memory=server,
                  gpu_path=path, stream=P.StreamPlan(chunks, size))


@pytest.fixture
def chunk_buffers(fake_gpu, monkeypatch):
    """Every ChunkStaging made (the client's first, then the server's): their rows compared."""
    made = []

    class Recorded(gpu.ChunkStaging):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(gpu, "ChunkStaging", Recorded)
    return made


def _run_streamed(server, plan):
    from hopbench.workload import stream as ST

    with Session(server.host, server.port) as s:
        m = s.measure(plan, stream=ST.schedule((8, 23, 39, 55, 70), 4.0, 78))
        s.bye()
    return m


@pytest.mark.parametrize("transport,path", [("tcp", "staged"), pytest.param("ucx", "staged", marks=pytest.mark.ucx),
                                            pytest.param("ucx", "direct", marks=pytest.mark.ucx)])
def test_a_streamed_plan_in_gpu_memory_moves_each_layers_rows_device_to_device(chunk_buffers, server, transport, path):
    """Both ends' rows on the 'GPU' (tests/fakecupy.py): each chunk leaves the target's
    device as its layer ends and lands in the drafter's; after the run the drafter's device
    holds the target's rows, chunk by chunk. Staged: the copies are timed stages."""
    transport_or_skip(transport)
    m = _run_streamed(server, _streamed_gpu(transport, path=path))
    total = m.plan.total
    assert m.completed == total and m.error is None and (m.samples_ns[:total] > 0).all()
    client, drafter = chunk_buffers
    for j in range(5):  # every chunk's rows arrived where the drafter keeps them
        assert (np.asarray(client.device(j))[8:] == np.asarray(drafter.device(j))[8:]).all(), j
        assert int(np.asarray(drafter.device(j))[:8].view(np.uint64)[0]) == (total - 1) * 5 + j  # the last counter
    kinds = [(k, n) for k, n in fakecupy.copies]
    if path == "staged":
        assert {"d2h_ns", "h2d_ns", "server_h2d_ns", "server_d2h_ns", "send_lag_ns", "server_hold_ns"} <= set(m.stages)
        assert kinds.count((2, 36864 - 8)) == 5 * total and kinds.count((1, 36864)) == 5 * total  # down, then up
        assert (m.stages["d2h_ns"][:total] > 0).all() and (m.stages["server_h2d_ns"][:total] > 0).all()
    else:  # direct: the counters are stamped on the device and read back; no rows copied
        assert not {"d2h_ns", "server_h2d_ns"} & set(m.stages)
        assert kinds.count((1, 8)) >= 5 * total and kinds.count((2, 8)) >= 5 * total
        assert (2, 36864 - 8) not in kinds and (1, 36864) not in kinds


@pytest.mark.parametrize("client,server_memory,stages", [
    ("cuda", "host", {"d2h_ns", "h2d_ns"}), ("host", "cuda", {"server_h2d_ns", "server_d2h_ns"})])
def test_a_streamed_plan_with_gpu_memory_at_one_end(chunk_buffers, server, client, server_memory, stages):
    m = _run_streamed(server, _streamed_gpu(client=client, server=server_memory))
    assert m.completed == m.plan.total and m.error is None
    assert stages <= set(m.stages) and not ({"d2h_ns", "h2d_ns", "server_h2d_ns", "server_d2h_ns"} - stages) & set(m.stages)
    assert len(chunk_buffers) == 1


def test_a_streamed_gpu_plan_under_a_codec_is_refused(fake_gpu, server):
    import dataclasses

    plan = dataclasses.replace(_streamed_gpu(), codec="fp8", codec_group=6144)
    assert "not with a codec" in str(plan.range_error())  # a peer's plan of this kind: an ERROR
    with pytest.raises(ConfigError, match="not with a codec"):  # the client's refusal, before the server's
        _run_streamed(server, plan)


@pytest.mark.gpu
@needs_gpu
@REAL_GPU_PATHS
def test_real_gpu_streamed_plan_moves_the_chunks(server, transport, path):
    transport_or_skip(transport)  # ucxx, nixl_cu12: skipped with the reason where missing
    m = _run_streamed(server, _streamed_gpu(transport, path=path, cycles=10))
    assert m.completed == m.plan.total and m.error is None and m.gpu_info["name"]
    if path == "staged":
        assert np.median(m.stages["d2h_ns"]) > 0 and np.median(m.stages["server_h2d_ns"]) > 0


def test_run_stream_layers_in_gpu_memory_writes_its_stages(fake_gpu, server, tmp_path):
    """`run --stream layers --memory cuda` as the CLI plans it: every payload (the small round
    trip, the synchronous taps and projected, the streamed taps) in GPU memory at both ends,
    the streamed one's copy stages in samples.csv and summary.csv beside its stream stages."""
    from hopbench.orchestration.runjob import RunRequest, plan

    loads, cfg = plan(RunRequest(host=server.host, port=server.port, transport="tcp", stream="layers", forward_ms=4.0, cycles=4,
                                 warmup=1, memory=("cuda", "cuda")))
    out = tmp_path / "r"
    out.mkdir()
    run_session(server.host, server.port, loads, cfg, folder=out)
    summary = {r["payload"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert list(summary) == ["B64", "T3", "T3#projected", "T3~layers", "B80~layers"]
    assert {r["gpu_path"] for r in summary.values()} == {"staged"}
    streamed = summary["T3~layers"]
    for st in ("d2h", "h2d", "server_h2d", "server_d2h", "send_lag", "server_hold"):
        assert float(streamed[f"{st}_p50_ns"]) > 0, st
    rows = [r for r in csv.DictReader(open(out / "samples.csv")) if r["payload"] == "T3~layers"]
    assert len(rows) == 6 and all(int(r["d2h_ns"]) > 0 and int(r["server_hold_ns"]) > 0 for r in rows)
    with pytest.raises(ConfigError, match="with --memory cuda streams raw chunks .* not with --codec"):
        plan(RunRequest(host=server.host, port=server.port, transport="tcp", stream="layers", codec="fp8",
                        memory=("cuda", "cuda")))


def test_a_server_without_gpu_refuses_a_streamed_gpu_plan_and_serves_the_next(server, monkeypatch):
    def missing():
        raise gpu.GpuUnavailable(f"--memory cuda needs CuPy (No module named 'cupy'); install it with: {gpu.INSTALL}")

    monkeypatch.setattr(gpu, "load", missing)
    with pytest.raises(HopbenchError, match=r"server cannot hold the payload in CUDA memory.*pip install 'hopbench\[gpu\]'"):
        _run_streamed(server, _streamed_gpu(client="host", server="cuda"))
    m = _run_streamed(server, _streamed_gpu(client="host", server="host", cycles=3))
    assert m.completed == m.plan.total and m.error is None
