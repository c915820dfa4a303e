"""The compiled loop against the Python loop: one conformance suite for both
(hopbench.testing.conformance LOOP_CHECKS) on every transport and poll mode the compiled
loop drives, its declared UCX struct against the installed ucp.h, and the choice of loop."""

import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from hopbench.core import native
from hopbench.errors import ConfigError
from hopbench.testing import conformance as C
from hopbench.testing import transport_or_skip

needs_native = pytest.mark.skipif(native.UNAVAILABLE is not None, reason=str(native.UNAVAILABLE))

CASES = [
    pytest.param("tcp", "block", id="tcp-block"),
    pytest.param("tcp", "busy", id="tcp-busy"),
    pytest.param("ucx", "busy", id="ucx-busy", marks=pytest.mark.ucx),
    pytest.param("nixl", "busy", id="nixl-busy"),
    pytest.param("nixl", "block", id="nixl-block"),
]


#: the checks that end with the client gone mid-plan: UCX's server learns it only at its 5 s
#: receive timeout (no abort is sent here), so on UCX they are the slow tier's
CLIENT_GONE = {C.check_loop_checksum_mismatch}


@pytest.mark.parametrize("loop", ["python", pytest.param("native", marks=needs_native)])
@pytest.mark.parametrize("name,poll,check", [
    pytest.param(*case.values, check, id=f"{case.id}-{check.__name__.removeprefix('check_loop_')}",
                 marks=[*case.marks, *([pytest.mark.slow] if case.values[0] == "ucx" and check in CLIENT_GONE else [])])
    for case in CASES for check in C.LOOP_CHECKS])
def test_loop_conformance(name, poll, check, loop):
    t = transport_or_skip(name)
    # nixl: poll block keeps the Python loop, and its compiled one needs NIXL's C API (said)
    why = t.native_note(poll) if loop == "native" and name == "nixl" else None
    if why is not None:
        pytest.skip(why)
    check(C.maker_for(name), poll, loop)


@needs_native
def test_auto_picks_native_and_says_why_not():
    samples, which, _, _ = C.loop_round_trips("tcp", "block", "auto", 64, 10)
    assert which == {"client": "native", "server": "native"}
    _, which, _, _ = C.loop_round_trips("fake", "auto", "auto", 64, 10)
    assert which["client"] == "python (this transport has no compiled loop)"


def test_native_refuses_where_it_cannot_run():
    with pytest.raises(ConfigError, match="--loop native"):
        C.loop_round_trips("fake", "auto", "native", 64, 3)


@needs_native
def test_ucx_blocking_progress_keeps_the_python_loop():
    transport_or_skip("ucx")
    _, which, _, _ = C.loop_round_trips("ucx", "block", "auto", 64, 5)
    assert which["client"] == "python (UCX blocking progress (arm + epoll) runs in the Python loop)"


def test_cpu_sharing_rule():
    a = {"hostname": "h", "cpu_affinity": [0]}
    assert not native.may_share_cpu(a, {"hostname": "h", "cpu_affinity": [1]})
    assert native.may_share_cpu(a, {"hostname": "h", "cpu_affinity": [0, 1]})
    assert not native.may_share_cpu(a, {"hostname": "other", "cpu_affinity": [0]})
    assert native.may_share_cpu(a, None)  # unknown: assume it may


@needs_native
def test_declared_ucp_request_param_matches_the_installed_header(tmp_path):
    """The UCX transport's C part declares the prefix of ucp_request_param_t itself (no UCX headers
    at build time); the installed ucp.h must lay it out the same."""
    libucx = pytest.importorskip("libucx")
    include = Path(libucx.__file__).parent / "include"
    cc = shutil.which("cc") or shutil.which("gcc")
    if not (include / "ucp" / "api" / "ucp.h").exists() or cc is None:
        pytest.skip("no ucp.h or no C compiler here")
    _ucx = pytest.importorskip("hopbench.transports._ucx", reason="the UCX transport's C part is not built here")

    fields = _ucx.layout()
    src = tmp_path / "offsets.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <ucp/api/ucp.h>\nint main(void){\n"
                   + "".join(f'printf("{f} %zu\\n", offsetof(ucp_request_param_t, {f}));\n' for f in fields)
                   + 'printf("UCS_MEMORY_TYPE_HOST %d\\n", (int)UCS_MEMORY_TYPE_HOST);\n'
                   + 'printf("RECV_INFO %u MEMORY_TYPE %u\\n", (unsigned)UCP_OP_ATTR_FIELD_RECV_INFO, '
                     '(unsigned)UCP_OP_ATTR_FIELD_MEMORY_TYPE);\nreturn 0;}\n')
    exe = tmp_path / "offsets"
    subprocess.run([cc, "-I", str(include), str(src), "-o", str(exe)], check=True, capture_output=True)
    out = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                               check=True).stdout.splitlines() if " " in line)
    for f, off in fields.items():
        assert int(out[f]) == off, (f, out[f], off)
    assert out["UCS_MEMORY_TYPE_HOST"] == "0"


@needs_native
def test_the_echo_loops_checksum_is_zlibs():
    from hopbench import _native

    for data in (b"", b"hello", bytes(range(256)) * 300):
        assert _native.crc32(data) == zlib.crc32(data)


@needs_native
def test_one_status_enum_read_from_the_extension():
    """The statuses are named once, in hb_endpoint.h; Python reads them from the extension."""
    from hopbench import _native

    assert [s.name.lower() for s in native.Status] == list(_native.STATUS)
    header = (Path(native.__file__).parent / "hb_endpoint.h").read_text()
    for code, name in enumerate(_native.STATUS):
        assert f"HB_{name.upper()} = {code}," in header


@needs_native
@pytest.mark.ucx
def test_the_server_records_the_loop_it_ran(server_factory, monkeypatch):
    """ACCEPT's loop is the loop the server runs: with the UCX transport's C part unable to
    bind (forced here), the server announces and runs the Python loop, and says why."""
    transport_or_skip("ucx")
    import hopbench.transports.ucx as U

    from hopbench.core.client import Session
    from tests.conftest import small_plan

    def measured(srv):
        s = Session(srv.host, srv.port, poll="busy")  # UCX's settings as the process has them
        try:
            m = s.measure(small_plan("ucx", cycles=5))
            s.bye()
        except Exception as exc:
            raise AssertionError(srv.lines) from exc
        finally:
            s.close()
        return m

    srv = server_factory(poll="busy")
    assert measured(srv).server_info["loop"] == "native", srv.lines
    monkeypatch.setattr(U, "_native_bind", lambda: "forced: cannot bind")
    m = measured(srv)
    assert m.server_info["loop"] == "python (forced: cannot bind)"
    assert m.data_info["loop"] == "python (forced: cannot bind)"  # the client, in this process, likewise


# ---- nixl's compiled endpoint (transports/_nixl.c, transports/nixl/native.py) ----------

def test_nixl_wire_sizes_are_wire_pys_structs():
    """The C endpoint reads notifications at fixed sizes (transports/_nixl_ep.h); each is the
    size of the struct transports/nixl/wire.py packs, so a field added on one side alone fails
    here, not on a fabric. The extension builds without NIXL, so this runs everywhere."""
    _C = pytest.importorskip("hopbench.transports._nixl", reason="the compiled nixl endpoint was not built")
    from hopbench.transports.nixl import wire

    assert (_C.CREDIT_SIZE, _C.DATA_SIZE, _C.NEXT_SIZE, _C.EAGER_SIZE, _C.MISMATCH_SIZE) == (
        wire._CREDIT.size, wire._DATA.size, wire._NEXT.size, wire._EAGER.size, wire._MISMATCH.size)


def _nixl_native_or_skip():
    transport_or_skip("nixl")
    from hopbench.transports.nixl import native as NX

    why = NX.bind()
    if why is not None or native.UNAVAILABLE is not None:
        pytest.skip(why or native.UNAVAILABLE)
    return NX


def test_nixl_compiled_loop_leaves_only_the_first_cycles_to_python(monkeypatch):
    """The steady loop runs in C: the Python channel is called only for what C leaves it (a
    buffer's first credit, with its registration), not once per cycle."""
    NX = _nixl_native_or_skip()
    calls = []
    for name in ("send", "recv"):
        real = getattr(NX.Bridge, name)
        monkeypatch.setattr(NX.Bridge, name, lambda self, a, n, x, _r=real, _n=name: (calls.append(_n), _r(self, a, n, x)))
    samples, which, _, rep = C.loop_round_trips("nixl", "busy", "native", 4096, 200)
    assert which == {"client": "native", "server": "native"} and (samples > 0).all()
    assert rep == b"".join(((199 * C.K + j).to_bytes(C.ID_BYTES, "little")) for j in range(C.K))
    assert 0 < len(calls) <= 8, calls  # both ends' first send and receive: their buffers' first credits


def test_nixl_compiled_loop_needs_the_agent_pointer_to_check_out(monkeypatch):
    """An agent pointer whose C API view differs from the binding's (another pybind11 layout)
    is never used: the Python loop runs and says why."""
    NX = _nixl_native_or_skip()
    monkeypatch.setattr(NX, "_checked", {})
    monkeypatch.setattr(NX._C, "local_md", lambda ptr: b"not the binding's metadata")
    _, which, _, _ = C.loop_round_trips("nixl", "busy", "auto", 64, 5)
    assert which["client"] == "python (the agent pointer read from the NIXL binding does not check out)", which


def test_nixl_compiled_loops_share_one_agent():
    """Two channels of one process share its agent: each compiled loop files the other's
    notifications where they belong (through the agent's routing) and both finish."""
    _nixl_native_or_skip()
    import threading

    results, errors = [], []

    def one():
        try:
            results.append(C.loop_round_trips("nixl", "busy", "native", 61440, 60))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(results) == 2 and all((r[0] > 0).all() for r in results)
