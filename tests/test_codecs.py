"""Payload codecs (docs/CODECS.md): each codec round-trips (lossless byte-exact, lossy within
its error), fp8's table is ml_dtypes' own rounding, files are checked when read, bad input is
one line, and a codec plan runs end to end on every transport with --verify, its stages and
ratio recorded and read by analysis as its own series."""

import json

import ml_dtypes
import numpy as np
import pytest
from typer.testing import CliRunner

from hopbench.cli import app
from hopbench.core import codecs as C
from hopbench.core import protocol as P
from hopbench.core.client import Session
from hopbench.core.transport import registry
from hopbench.errors import ConfigError
from hopbench.testing import transport_or_skip
from hopbench.workload import hidden as H

runner = CliRunner()
W = 6144
SRC = H.synthetic(5, W)
LOSSLESS = ["zstd:1", "zstd:3", "lz4", "blosc2:shuffle+zstd:1", "blosc2:bitshuffle+lz4:1", "blosc2:none+blosclz:2"]


@pytest.mark.parametrize("spec", LOSSLESS + ["fp8", "int8"])
@pytest.mark.parametrize("nbytes", [3 * 61440, 56, 100001, 2 * W * 2 + 7])
def test_round_trip(spec, nbytes):
    codec = C.parse(spec, W)
    body = SRC.bodies(nbytes, None, 1)[0]
    enc = codec.encode(body)
    assert len(memoryview(enc).cast("B")) <= codec.bound(nbytes)
    out = np.empty_like(body)
    codec.decode(memoryview(enc).cast("B"), out)
    if codec.lossless:
        assert np.array_equal(out, body)
    else:
        x, y = C.bf16_floats(body), C.bf16_floats(out)
        rel = np.sqrt(np.mean((x - y) ** 2) / np.mean(x ** 2))
        assert rel < (0.05 if spec == "fp8" else 0.2), rel
        assert out[-1] == body[-1] or nbytes % 2 == 0  # an odd trailing byte crosses raw


@pytest.mark.parametrize("spec", ["fp8", "int8"])
def test_compiled_kernel_equals_numpy_byte_for_byte(spec):
    """The compiled loops (hopbench/core/_codec.c) and the NumPy path: the same codes, scales
    and reconstruction, whole groups, a short last group and an odd trailing byte."""
    cls = {"fp8": C.Fp8, "int8": C.Int8}[spec]
    fast, ref = cls(W), cls(W, kernel="numpy")
    if fast.kernel != "compiled":
        pytest.skip("hopbench._codec was not built here (no C compiler): the NumPy path serves")
    for nbytes in (3 * 61440, 56, 100001, 2 * W * 2 + 7):
        for body in SRC.bodies(nbytes, None, 3):
            a, b = fast.encode(body), ref.encode(body)
            assert np.array_equal(a, b)
            x, y = np.empty_like(body), np.empty_like(body)
            fast.decode(a, x)
            ref.decode(b, y)
            assert np.array_equal(x, y)


def test_fp8_table_is_ml_dtypes_rounding():
    """Every BF16 value, values between them (ties and sticky bits), against ml_dtypes' cast."""
    codec = C.parse("fp8", W)
    rng = np.random.default_rng(3)
    grid = (np.arange(65536, dtype=np.uint32) << 16)
    v = np.concatenate([grid.view(np.float32), (grid | 0x8000).view(np.float32), (grid | 0x0001).view(np.float32),
                        (rng.standard_normal(200_000) * rng.lognormal(0, 4, 200_000)).astype(np.float32)])
    v = v[np.isfinite(v) & (np.abs(v) <= C.FP8_MAX)]
    codes = np.empty(v.size, np.uint8)
    codec._quantize(v, codes, codec._work(v.size))
    assert np.array_equal(codes, v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))


def test_lossy_error_is_reported_and_synthetic_is_said():
    from hopbench.orchestration.codecs import profile

    rows = {r["codec"]: r for r in (profile(n, SRC.bodies(3 * 61440, 3, 2), W, reps=2) for n in ("fp8", "int8", "zstd:1"))}
    assert rows["fp8"]["ratio"] > 1.99 and 0 < rows["fp8"]["rel_rms"] < 0.05 and rows["fp8"]["cosine_min"] > 0.99
    assert rows["int8"]["rel_rms"] > rows["fp8"]["rel_rms"]  # the massive channels cost int8 its resolution
    assert "rel_rms" not in rows["zstd:1"] and rows["zstd:1"]["ratio"] > 1.1
    res = runner.invoke(app, ["codecs", "--codec", "fp8,zstd:1", "--reps", "2"])
    assert res.exit_code == 0, res.output
    assert "synthetic hidden states" in res.output and "not measured here" in res.output


@pytest.mark.parametrize("spec,says", [("bogus", "unknown codec 'bogus'"), ("zstd:0", "level '0'"),
                                       ("zstd:x", "level 'x'"), ("lz4:3", "takes no options"),
                                       ("blosc2:shuffle+gzip", "FILTER+CODEC"), ("fp8:1", "takes no options")])
def test_bad_codec_is_one_line_with_the_list(spec, says):
    with pytest.raises(ConfigError) as e:
        C.parse(spec, W)
    assert says in str(e.value) and "Codecs: none, zstd" in str(e.value) and "\n" not in str(e.value)


def test_missing_library_names_the_install_line(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now raises ImportError
    with pytest.raises(C.CodecUnavailable) as e:
        C.parse("zstd:1", W)
    assert "pip install 'hopbench[codecs]'" in str(e.value)


def test_hidden_states_from_safetensors_and_npy(tmp_path):
    from safetensors.numpy import save_file

    x = np.random.default_rng(0).standard_normal((4, 5, W)).astype(ml_dtypes.bfloat16)
    save_file({"aux": x}, str(tmp_path / "h.safetensors"))
    src = H.from_file(str(tmp_path / "h.safetensors"), 5, W)
    assert src.tokens == 4 and np.array_equal(src.bits, x.view(np.uint16).reshape(4, -1))
    assert src.record["dtype"] == "BF16" and len(src.record["sha256"]) == 64 and not src.synthetic
    save_file({"a": x, "b": x}, str(tmp_path / "two.safetensors"))
    with pytest.raises(ConfigError, match="name one"):
        H.from_file(str(tmp_path / "two.safetensors"), 5, W)
    assert H.from_file(str(tmp_path / "two.safetensors") + ":b", 5, W).tokens == 4
    np.save(tmp_path / "h.npy", x.astype(np.float32).reshape(1, 4, 5 * W))  # a batch of one, flat per token
    assert np.array_equal(H.from_file(str(tmp_path / "h.npy"), 5, W).bits, src.bits)
    with pytest.raises(ConfigError, match=r"expected \[tokens, 4, 6144\]"):
        H.from_file(str(tmp_path / "h.safetensors"), 4, W)
    data = (tmp_path / "h.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-100])
    with pytest.raises(ConfigError, match="truncated or corrupt"):
        H.from_file(str(tmp_path / "cut.safetensors"), 5, W)
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ConfigError, match="not a safetensors file"):
        H.from_file(str(tmp_path / "junk.safetensors"), 5, W)
    with pytest.raises(ConfigError, match="no such file"):
        H.from_file(str(tmp_path / "absent.npy"), 5, W)


@pytest.mark.parametrize("transport", sorted(registry()))  # every registered transport
def test_codec_plans_end_to_end_with_verify(server, transport):
    transport_or_skip(transport)
    s = Session(server.host, server.port)
    try:
        for spec in ("zstd:1", "fp8"):
            m = s.measure(P.Plan(transport, 8 + 3 * 61440, 8, 2, 4, 20, 3, verify=True, codec=spec, codec_group=W),
                          source=SRC)
            assert m.completed == m.plan.total and m.error is None
            first = 1 + m.plan.warmup
            assert (m.stages["encode_ns"][first:] > 0).all() and (m.stages["decode_ns"][first:] > 0).all()
            wire = m.stages["wire_bytes"][first:]
            assert (wire < 3 * 61440).all() and (wire > 3 * 61440 / 2.2).all()
            assert m.codec_info["codec"] == spec and m.codec_info["source"]["synthetic"]
        s.bye()
    finally:
        s.close()


def test_a_corrupt_frame_is_a_one_line_abort_and_the_server_serves_on(server):
    """A frame longer than its body can encode to, then one that does not decode: each ends
    its plan with the server's reason; the next session is served."""
    for bad in ("long", "garbage"):
        s = Session(server.host, server.port)
        plan = P.Plan("tcp", 8 + 61440, 8, 2, 4, 5, 0, codec="zstd:1", codec_group=W)
        data = s._open(plan, s._transport(plan)).channel
        n = 10**7 if bad == "long" else 100
        data.send(bytearray(C.FRAME.pack(0, n, 0)))
        if bad == "garbage":
            data.send(bytearray(b"\x01" * n))
        reply = bytearray(8)
        data.recv_into(reply)
        assert P.is_abort(reply)
        reason = P.read_abort(data, reply)
        assert ("more than the" in reason) if bad == "long" else ("does not decode" in reason), reason
        s.close()
    s = Session(server.host, server.port)
    m = s.measure(P.Plan("tcp", 8 + 61440, 8, 2, 4, 5, 0, codec="lz4", codec_group=W), source=SRC)
    assert m.completed == m.plan.total
    s.bye()
    s.close()


def test_run_cli_codecs_side_by_side_and_analysis_series(server, tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", "1,3", "--bytes", "4096",
                              "--codec", "none,zstd,int8", "--cycles", "20", "--warmup", "2", "--no-floor", "--verify",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "T3+zstd:1" in res.output and "ratio" in res.output and "(synthetic data)" in res.output
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["codecs"] == ["none", "zstd:1", "int8"]
    coded = [p for p in report["payloads"] if p.get("codec")]
    assert {p["codec"]["codec"] for p in coded} == {"zstd:1", "int8"} and len(coded) == 6
    import csv

    rows = {r["payload"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert float(rows["T3+int8"]["ratio"]) > 1.9 and rows["T3"]["codec"] == ""
    assert float(rows["T3+zstd:1"]["encode_p50_ns"]) > 0
    from hopbench.analysis.data import load_groups
    from hopbench.analysis.verdict import codec_calls, verdict

    groups, _ = load_groups(out)
    assert {g.transport for g in groups} == {"tcp", "tcp+zstd:1", "tcp+int8"}
    from hopbench.analysis.hops import hop_rows
    from hopbench.analysis.verdict import inputs_from
    from hopbench.shape import load_shape

    vs = [verdict(c.place, c.series, est, inputs_from(load_shape(), None, None, None)) for c, est in hop_rows(out, 3, groups)]
    calls = {c["codec"]: c for c in codec_calls(vs)}
    assert set(calls) == {"zstd:1", "int8"}
    by = {v.transport: v for v in vs}
    for c in calls.values():  # the call needs the two hops' intervals apart (verdict.codec_calls)
        lo, hi = by[f"tcp+{c['codec']}"].hop_ci_ms or (c["hop_ms"],) * 2
        rlo, rhi = by["tcp"].hop_ci_ms or (c["raw_hop_ms"],) * 2
        assert c["pays"] == (hi < rlo) and c["undecided"] == (not hi < rlo and not lo > rhi)
    res = runner.invoke(app, ["verdict", str(out)])
    assert res.exit_code == 0 and "codec zstd:1 on run (tcp (synthetic data))" in res.output, res.output
    # issue 41: --json carries every call the text prints, the codecs' included
    js = runner.invoke(app, ["verdict", str(out), "--json"])
    doc = json.loads(js.stdout)["results"][0]
    assert {c["codec"]: c["call"] for c in doc["codecs"]} == {k: c["call"] for k, c in calls.items()}
    assert all(c["line"] in res.output for c in doc["codecs"]) and doc["status"] == "complete"
    assert float(rows["T3+int8"]["rel_rms"]) > 0 and rows["T3+zstd:1"]["rel_rms"] == ""  # lossy error, lossless none
    import hopbench

    res = hopbench.load(out)  # the Python API reads the codec series beside the raw ones
    assert {"tcp", "tcp+int8", "tcp+zstd:1"} <= set(res.cells["transport"])
    for cmd in (["export", str(out), "--into", str(tmp_path / "cs.json")], ["compare", str(out), str(out)],
                ["report", str(out), "-o", str(tmp_path / "r.html")]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 0, (cmd, r.output)
    page = (tmp_path / "r.html").read_text()
    assert "<th class=t>codec</th>" in page and "synthetic hidden states" in page  # the Answer's codec column
    records = json.loads((tmp_path / "cs.json").read_text())["runs"]
    assert {r["transport"] for r in records} == {"tcp", "tcp+int8", "tcp+zstd:1"}


def test_run_refuses_a_bad_codec_before_connecting(tmp_path):
    from tests.conftest import dead_port

    res = runner.invoke(app, ["run", "--peer", f"127.0.0.1:{dead_port()}", "--codec", "zstd,brotli",
                              "--out", str(tmp_path / "x")])
    assert isinstance(res.exception, ConfigError) and "unknown codec 'brotli'" in str(res.exception)
    assert not (tmp_path / "x").exists()
    res = runner.invoke(app, ["run", "--peer", f"127.0.0.1:{dead_port()}", "--codec", "fp8", "--payload",
                              f"taps,from={tmp_path / 'absent.safetensors'}", "--out", str(tmp_path / "x")])
    assert isinstance(res.exception, ConfigError) and "no such file" in str(res.exception)


@pytest.mark.slow  # over 5 s on a 2-core VM (REVIEW6 F10: the fast tier stays fast)
def test_sweep_codec_axis_plan_and_analysis(tmp_path):
    """codecs = [...] is an axis: each payload under each codec (gap cells raw only), the
    cells' labels carry the codec, and fit/verdict read each codec as its own series."""
    import subprocess
    import sys
    from pathlib import Path

    from hopbench.config_sweep import load_rung, load_sweep
    from hopbench.orchestration.sweep.plan import plan_cells
    from hopbench.shape import load_shape

    cfg_path = Path(__file__).parent / "data" / "sweep-codecs.toml"
    cfg = load_sweep(cfg_path)
    cells = plan_cells(cfg, [load_rung("loopback")], load_shape().shape, 1)
    per = [c for c in cells if c.repeat == 0]
    assert {c.series.codec for c in per} == {"none", "int8", "zstd"}
    assert all(c.payload.endswith(f"+{c.series.codec}") for c in per if c.series.codec != "none")
    assert not [c for c in per if c.gap_ms and c.series.codec != "none"]
    assert len(per) == 5 * 3 + 1  # 5 payloads x 3 codecs + the raw T3 think-time cell
    out = tmp_path / "sweep"
    r = subprocess.run([sys.executable, "-m", "hopbench", "sweep", str(cfg_path), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    from hopbench.analysis.data import load_groups

    groups, top = load_groups(out)
    assert {g.transport for g in groups} == {"tcp", "tcp+int8", "tcp+zstd:1"}  # zstd spelled one way
    assert top["config"]["codecs"] == ["none", "int8", "zstd:1"]
    fit = subprocess.run([sys.executable, "-m", "hopbench", "fit", str(out)], capture_output=True, text=True)
    assert fit.returncode == 0 and "tcp+int8" in fit.stdout, fit.stdout + fit.stderr
    ver = subprocess.run([sys.executable, "-m", "hopbench", "verdict", str(out)], capture_output=True, text=True)
    assert ver.returncode == 0 and "codec int8 on loopback (tcp (synthetic data))" in ver.stdout, ver.stdout + ver.stderr


def test_spec_with_a_codec(server, tmp_path):
    """spec --codec: the target encodes each cycle's hidden states and the drafter decodes
    them inside the hop; the result says so."""
    res = runner.invoke(app, ["spec", "--peer", f"{server.host}:{server.port}", "--codec", "zstd", "--modes", "sync",
                              "--cycles", "8", "--warmup", "1", "--repeats", "2", "--time-scale", "0.02",
                              "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "s" / "report.json").read_text())
    assert report["config"]["codec"] == "zstd:1" and report["payload_source"]["synthetic"]
    assert "encoded by zstd:1 inside the hop (synthetic data)" in res.output
    assert all(r["hop_ms"] > 0 for r in report["runs"])


def test_a_server_announces_its_codecs_and_a_codec_it_lacks_is_refused_before_measuring(server_factory, tmp_path,
                                                                                          monkeypatch):
    """Issue 42: a second host installed without the codecs extra refused --codec only after T1
    had been measured. The server's HELLO caps name the codecs it can decode; the client
    checks every plan against them first, nothing measured, the install line given."""
    import subprocess
    import sys

    from hopbench.core import codecs as CD

    monkeypatch.setattr(CD, "decodable", lambda: ["none", "int8"])  # the server thread's install: no zstandard
    srv = server_factory()
    out = tmp_path / "r"
    r = subprocess.run([sys.executable, "-m", "hopbench", "run", "--peer", f"{srv.host}:{srv.port}", "--tokens", "1,3",
                        "--codec", "zstd:1", "--cycles", "20", "--out", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "cannot decode codec 'zstd'" in r.stderr and "pip install 'hopbench[codecs]'" in r.stderr, r.stderr
    assert "nothing was measured" in r.stderr
    assert not (out / "samples.csv").exists() or not (out / "samples.csv").read_text().count("\n") > 1
    ok = subprocess.run([sys.executable, "-m", "hopbench", "run", "--peer", f"{srv.host}:{srv.port}", "--tokens", "1",
                         "--codec", "int8", "--cycles", "20", "--out", str(tmp_path / "ok")], capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("tokens", [1, 3])
def test_a_token_payloads_bodies_start_at_token_i_times_t(tokens):
    """docs/CODECS.md: body i starts at token i x T, whatever the seq's 8 bytes take off its
    end (it was cut at i x (request_bytes - 8) bytes, across the tokens' boundaries)."""
    from hopbench.core.kinds.roundtrip import request_bodies

    layers, width, n = 5, 16, 40
    marked = np.repeat(np.arange(n, dtype=np.uint16)[:, None], layers * width, axis=1)  # token t's values are t
    src = H.Source(marked, layers, width, "marked")
    row = layers * width * 2
    bodies = request_bodies(src, tokens * row, 1 + 2 + 8)
    assert [int(b.view(np.uint16)[0]) for b in bodies[:4]] == [i * tokens for i in range(4)]
    assert all(b.size == tokens * row - P.SEQ_BYTES for b in bodies)
