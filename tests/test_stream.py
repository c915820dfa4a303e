"""The streamed hop (issue 40, docs/STREAM.md): the forward's schedule and its model, the
streamed plan over every transport, the protocol's checks, the CLI end to end, and across
two namespaces on a shaped link."""

import json
import subprocess
import sys

import numpy as np
import pytest

from hopbench.core import protocol as P
from hopbench.core.client import Session
from hopbench.core.transport import registry
from hopbench.errors import ConfigError
from hopbench.orchestration import netem
from hopbench.workload import stream as ST
from tests.conftest import cli, small_plan
from tests.specpeer import SpecClient

TAPS = (8, 23, 39, 55, 70)
CHUNK = 3 * 6144 * 2  # K + 1 = 3 rows of one aux layer, BF16


def test_the_schedule_puts_each_tap_where_its_layer_ends():
    s = ST.schedule(TAPS, 73.46, 78)
    assert [round(r / 1e6, 2) for r in s.ready_ns] == [7.53, 21.66, 36.73, 51.80, 65.93]
    assert s.forward_ns == 73_460_000 and s.end_ns == s.forward_ns
    assert ST.schedule(TAPS, 73.46, 78, cost_ms=1.2).end_ns == 74_660_000  # the extraction cost delays the count
    profile = [i * 0.5 for i in range(1, 79)]  # a profile: each layer's end in ms
    assert [r / 1e6 for r in ST.schedule(TAPS, 73.46, 78, profile).ready_ns] == [4.0, 11.5, 19.5, 27.5, 35.0]


@pytest.mark.parametrize("args,says", [
    (dict(layers=60), "below the deepest aux layer"),
    (dict(layer_times_ms=[1.0, 3.0, 2.0] + [4.0] * 75), "monotone"),
    (dict(layer_times_ms=[float(i) for i in range(1, 79)]), "after the forward"),
    (dict(layer_times_ms=[1.0] * 10), "deepest aux layer is 70"),
    (dict(cost_ms=-1.0), ">= 0"),
])
def test_a_timeline_that_cannot_be_is_one_line(args, says):
    with pytest.raises(ConfigError, match=says):
        ST.schedule(TAPS, 73.46, **{"layers": 78, **args})
    with pytest.raises(ConfigError, match="positive"):
        ST.schedule(TAPS, 0.0, 78)


def test_the_model_queues_the_chunks_on_the_link():
    """By hand: at 100 Mbit/s a 36,864 B chunk takes (36,864 + 26 x 90) x 8 / 1e8 = 3.136 ms;
    every chunk is done long before the count (no tail); at 10 Mbit/s each takes 31.4 ms and
    they queue: the last finishes at 7.53 + 5 x 31.36 = 164.3 ms, a tail of 90.9 ms."""
    s = ST.schedule(TAPS, 73.46, 78)
    fast, slow = ST.model(s, CHUNK, 100.0), ST.model(s, CHUNK, 10.0)
    assert ST.wire_s(CHUNK, 100.0) == pytest.approx(3.1363e-3, rel=1e-4)
    assert fast.tail_ms == 0.0 and fast.finish_ms[-1] == pytest.approx(65.93 + 3.136, abs=0.01)
    assert slow.tail_ms == pytest.approx(7.53 + 5 * 31.363 - 73.46, abs=0.05)
    # the least rate that hides every chunk: at it the last chunk ends at the count, not before
    edge = ST.model(s, CHUNK, fast.hiding_rate_mbit)
    assert edge.tail_ms == pytest.approx(0.0, abs=1e-3) and ST.model(s, CHUNK, 0.99 * fast.hiding_rate_mbit).tail_ms > 0
    assert ST.disagrees(1.0, 0.7) and not ST.disagrees(0.25, 0.1) and not ST.disagrees(104.0, 100.0)


def _streamed(transport, chunks=5, size=4096, cycles=12):
    return P.Plan(transport, chunks * size, 8, 2, 4, cycles, 2, stream=P.StreamPlan(chunks, size))


@pytest.mark.parametrize("transport", sorted(registry()))  # every registered transport
def test_a_streamed_plan_runs_on_every_transport(server, transport):
    from tests.test_protocol_contract import _need

    _need(transport)
    sched = ST.schedule(TAPS, 4.0, 78)
    with Session(server.host, server.port) as s:  # the in-process server's own UCX settings: the same
        m = s.measure(_streamed(transport), stream=sched)
        s.bye()
    total = m.plan.total
    assert m.completed == total and (m.samples_ns[:total] > 0).all()
    for stage in ("send_lag_ns", "end_lag_ns", "server_hold_ns"):
        assert m.stages[stage].shape == (total,), stage
    assert (m.stages["end_lag_ns"] >= 0).all() and (m.stages["server_hold_ns"] > 0).all()
    assert m.data_info["loop"].startswith("python (a streamed plan")


def test_a_chunk_out_of_place_aborts_with_its_reason_and_bad_stream_plans_are_errors(server):
    c = SpecClient(server.host, server.port)
    c.handshake()
    c.send_frame(P.PLAN, _streamed("tcp", 2, 64).to_wire())
    assert c.recv_frame()[0] == P.ACCEPT
    c.sock.sendall(P.SEQ.pack(0) + bytes(56) + P.SEQ.pack(5) + bytes(56))  # chunk 1 of cycle 0 says 5
    reason = c.read_abort(c.recv_exact(8), 8)
    assert reason == "chunk 1 of cycle 0 carries counter 5, expected 1", reason
    for bad, says in ((dict(request_bytes=100), "chunks x chunk_bytes"), (dict(stream={"chunks": 0, "chunk_bytes": 64}),
                      "chunks must be between"), (dict(stream={"chunks": 2}), "missing key 'chunk_bytes'"),
                      (dict(verify=True, payload_crc32=0), "without verify")):
        c = SpecClient(server.host, server.port)
        c.handshake()
        c.send_frame(P.PLAN, {**_streamed("tcp", 2, 64).to_wire(), **bad})
        t, obj = c.recv_frame()
        assert t == P.ERROR and says in obj["reason"], (bad, obj)


def test_the_client_stops_a_streamed_plan_cleanly_and_the_server_serves_on(server):
    """A wrong reply mid-stream: this end aborts in messages of the size the server expects
    next (a chunk), the server logs it and serves the next plan."""
    sched = ST.schedule(TAPS, 2.0, 78)
    with Session(server.host, server.port) as s:
        plan = _streamed("tcp", 5, 256, cycles=5)
        path_check = P.ReplyIds.checker

        def corrupt(self, reply):  # every reply looks wrong from cycle 3 on
            real = path_check(self, reply)

            def check(seq):
                if seq == 3:
                    from hopbench.errors import VerifyError

                    raise VerifyError("a test's wrong reply")
                real(seq)
            return check

        P.ReplyIds.checker = corrupt
        try:
            with pytest.raises(Exception, match="a test's wrong reply"):
                s.measure(plan, stream=sched)
        finally:
            P.ReplyIds.checker = path_check
        assert s.measured.completed == 3
        m = s.measure(_streamed("tcp", 5, 256, cycles=3), stream=sched)  # served on, the same session
        assert m.completed == m.plan.total
        s.bye()
    assert any("client aborted plan at seq 4: a test's wrong reply" in ln for ln in server.lines), server.lines


def _hb(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "hopbench", *args], capture_output=True, text=True, timeout=timeout)


def test_run_stream_layers_end_to_end_and_its_verdict(server, tmp_path):
    out = tmp_path / "s"
    r = _hb("run", "--peer", f"{server.host}:{server.port}", "--stream", "layers,forward=6", "--cycles", "15",
            "--warmup", "2", "--no-floor", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "exposed hop (ids back - the forward's end)" in r.stdout and "give the link's rate" in r.stdout, r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert [p["payload"] for p in rep["payloads"]] == ["B64", "T3", "T3#projected", "T3~layers", "B80~layers"]
    empty = rep["payloads"][4]["plan"]  # the empty-chunk hop: the same schedule, five 16-byte chunks
    assert empty["stream"] == {"chunks": 5, "chunk_bytes": 16} and empty["request_bytes"] == 80
    assert rep["payloads"][2]["plan"]["request_bytes"] == 3 * 6144 * 2 and rep["payloads"][2]["design"] == "projected"
    assert rep["config"]["stream"]["chunk_bytes"] == CHUNK and rep["config"]["stream"]["taps"] == list(TAPS)
    # by hand: 24.05 tok/s x 89.34 ms = 2.149 tokens accepted a cycle; 5 x 36,864 B / 2.149 = 85,781 B each
    per = rep["config"]["stream"]["bytes_per_accepted_token"]
    assert per["accepted_per_cycle"] == pytest.approx(2.1486, abs=1e-3) and per["accepted_only"] == 61440
    assert per["streamed"] == pytest.approx(85_785, rel=1e-3)
    assert "bytes per accepted token: streamed 85,7" in r.stdout and "(1.40x)" in r.stdout, r.stdout
    assert "stream" in rep["payloads"][3]["plan"] and "stream" not in rep["payloads"][1]["plan"]
    import csv

    rows = [r for r in csv.DictReader(open(out / "samples.csv")) if r["payload"] == "T3~layers"]
    assert len(rows) == 18 and all(int(r["server_hold_ns"]) > 0 and int(r["end_lag_ns"]) >= 0 for r in rows)
    summary = {r["payload"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert float(summary["T3~layers"]["server_hold_p50_ns"]) > 0 and summary["T3"]["server_hold_p50_ns"] == ""
    v = _hb("verdict", str(out), "--json")
    assert v.returncode == 0, v.stderr
    series = {x["transport"] for x in json.loads(v.stdout)["results"][0]["verdicts"]}
    assert series == {"tcp", "tcp#projected", "tcp~layers"}, series
    page = _hb("report", str(out), "-o", str(tmp_path / "p.html"))  # the Answer sets the two designs side by side
    assert page.returncode == 0, page.stderr
    import re

    text = re.sub(r"<[^>]+>", "", (tmp_path / "p.html").read_text())
    head = text[text.index("rung"):text.index("trust")]  # the Answer's columns: each design's call side by side
    assert "synchronous taps" in head and "streamed taps (exposed hop)" in head, head
    assert "synchronous projected (fc on the target)" in head


@pytest.mark.parametrize("args,says", [
    (["--tokens", "1"], "not with --tokens"), (["--stream", "layers:40"], "below the deepest aux layer (70)"),
    (["--stream", "bytes"], "--stream bytes: off, or layers"), (["--stream", "layers,forward=-3"], "positive"),
    (["--stream", "layers,speed=3"], "'speed=3' is not one of forward=MS"),
    (["--payload", "projected"], "not with --tokens"),
])
def test_run_stream_refuses_what_cannot_be_in_one_line(server, tmp_path, args, says):
    base = ["run", "--peer", f"{server.host}:{server.port}", "--stream", "layers", "--out", str(tmp_path / "x")]
    r = _hb(*base, *args)
    assert r.returncode != 0 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and not (tmp_path / "x").exists()


def test_a_projected_run_is_its_own_series(server, tmp_path):
    """--payload projected: the drafter's fc on the target, one hidden-wide row (12,288 B) per
    position; its series tcp#projected, the bytes per token recorded for the fit."""
    out = tmp_path / "p"
    r = _hb("run", "--peer", f"{server.host}:{server.port}", "--payload", "projected", "--tokens", "1,3", "--cycles", "20",
            "--warmup", "2", "--no-floor", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    assert [(p["payload"], p["plan"]["request_bytes"]) for p in rep["payloads"]] == [("T1#projected", 12288),
                                                                                      ("T3#projected", 36864)]
    assert rep["config"]["design"] == "projected" and rep["config"]["bytes_per_token"] == 12288
    bad = _hb("run", "--peer", f"{server.host}:{server.port}", "--payload", "fc", "--out", str(tmp_path / "x"))
    assert bad.returncode != 0 and "--payload fc: taps or projected" in bad.stderr and not (tmp_path / "x").exists()


def test_a_layer_profile_that_is_not_monotone_is_refused(server, tmp_path):
    prof = tmp_path / "layers.csv"
    prof.write_text("end_ms\n" + "\n".join(str(v) for v in [1.0, 0.5] + [2.0] * 76) + "\n")
    r = _hb("run", "--peer", f"{server.host}:{server.port}", "--stream", f"layers,times={prof}",
            "--out", str(tmp_path / "x"))
    assert r.returncode != 0 and "monotone" in r.stderr and not (tmp_path / "x").exists(), r.stderr


ok, why = netem.available()


@pytest.mark.netns
@pytest.mark.skipif(not ok, reason=f"needs network namespaces: {why}")
def test_streaming_hides_the_hop_on_a_100_mbit_link():
    """Across two namespaces, 100 Mbit/s tbf: the synchronous T3 hop is ~15.7 ms of wire; the
    streamed one leaves about one small round trip exposed, as the model says."""
    from hopbench.orchestration.serverproc import ready_port

    with netem.Link.create(rate_mbit=100) as link:
        srv = subprocess.Popen(link.exec_prefix("server") + [sys.executable, "-m", "hopbench", "serve", "--bind",
                                                             f"{link.server_addr}:0"], stdout=subprocess.PIPE, text=True)
        try:
            port = ready_port(srv)
            r = subprocess.run(link.exec_prefix("client") + [
                sys.executable, "-m", "hopbench", "run", "--peer", f"{link.server_addr}:{port}", "--stream", "layers",
                "--link", ",rate=100", "--cycles", "10", "--warmup", "2", "--no-floor", "--json"],
                capture_output=True, text=True, timeout=240)
        finally:
            srv.terminate()
            srv.wait(10)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)["report"]
    p50 = {p["payload"]: p["summary"]["p50_ns"] / 1e6 for p in rep["payloads"]}
    assert p50["T3"] > 14.0 and p50["T3~layers"] < 0.5 * p50["T3"], p50  # the wire's 15.7 ms, mostly hidden
    assert rep["stream_model"]["tail_ms"] == 0.0 and "model at 100 Mbit/s" in r.stderr, r.stderr
    # the model's fixed part is the empty-chunk hop of the same session: the schedule with 16-byte chunks
    assert "the empty-chunk hop (16-byte chunks on the same schedule)" in r.stderr and p50["B80~layers"] < 1.0, r.stderr
    assert np.isfinite(rep["stream_model"]["hiding_rate_mbit"])


def test_the_sweep_plans_streamed_and_projected_cells():
    from dataclasses import replace

    from hopbench.config_sweep import load_rung, load_sweep
    from hopbench.orchestration.sweep.plan import plan_cells
    from hopbench.shape import load_shape

    cfg = replace(load_sweep("configs/sweep.toml", quick=True), stream=("off", "layers"),
                  designs=("taps", "projected"), repeats=1)
    cells = plan_cells(cfg, [load_rung("loopback")], load_shape().shape, 1)
    streamed = [c for c in cells if c.series.stream == "layers"]
    projected = [c for c in cells if c.series.design == "projected"]
    assert {(c.series.transport, c.payload, c.request_bytes) for c in streamed} == {
        (t, "T3~layers", 3 * 61440) for t in cfg.transports}
    assert {c.payload for c in projected} == {f"T{t}#projected" for t in cfg.tokens}
    assert all(c.request_bytes == c.tokens * 12288 for c in projected)
    assert all("/" not in c.payload for c in cells)  # a payload label is a folder name in the sweep
    with pytest.raises(ConfigError, match="sweep.stream must list off and/or layers"):
        import tempfile
        from pathlib import Path

        p = Path(tempfile.mkdtemp()) / "s.toml"
        p.write_text('[sweep]\nrungs = ["loopback"]\nstream = ["on"]\n')
        load_sweep(p)


def test_a_sweep_with_the_stream_axis_reads_as_three_designs(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[sweep]\nrungs = ["loopback"]\ntransports = ["tcp"]\ntokens = [1, 3]\nbytes_points = 3\n'
                   'bytes_max = 65536\nrepeats = 1\ncell_budget_s = 0.05\nmin_cycles = 5\nwarmup = 2\ngaps_ms = [0]\n'
                   'placements = ["same-block"]\nstream = ["off", "layers"]\ndesigns = ["taps", "projected"]\n')
    r = _hb("sweep", str(cfg), "--out", str(tmp_path / "out"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    verdict = json.loads((tmp_path / "out" / "analysis" / "verdict.json").read_text())
    assert {v["transport"] for v in verdict["verdicts"]} == {"tcp", "tcp#projected", "tcp~layers"}
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<th class=t>streamed taps (exposed hop)</th><th class=t>synchronous projected" in page


def test_the_wire_time_check_leaves_streamed_series_out():
    """A streamed sample is an exposed hop: beside the wire time it read -99.6% in make sweep."""
    from hopbench.analysis import fit as F
    from hopbench.analysis.data import Group
    from hopbench.records import CellKey, Place, Series

    def group(rung, transport, streamed, p50, rate=None):
        series = Series(transport, stream="layers" if streamed else "off")
        g = Group(CellKey(Place(rung), series, series.spell("T3"), 3, 184320, 8), rate)
        g.samples.append(np.full(20, p50, dtype=np.int64))
        g.repeat_p50_ns.append(float(p50))
        g.repeat_ids.append(0)
        g.n_cycles.append(20)
        return g

    gs = [group("emu-unshaped", "tcp", False, 100_000), group("emu-100m", "tcp", False, 15_700_000, 100.0),
          group("emu-unshaped", "tcp~layers", True, 60_000), group("emu-100m", "tcp~layers", True, 64_000, 100.0)]
    assert [w["transport"] for w in F.wire_check(gs, 61440, 3)] == ["tcp"]


def _spec_cfg(**kw):
    from hopbench.orchestration.spec import SpecConfig
    from hopbench.shape import load_shape

    sh = load_shape().shape
    base = dict(bytes_per_token=sh.bytes_per_token, id_bytes=sh.id_bytes, modes=("local", "sync", "stream"),
                taps=tuple(sh.aux_layers), cycles=8, warmup=1, repeats=1, time_scale=0.2, seed=5)
    return SpecConfig(**{**base, **kw})


def test_spec_stream_mode_streams_the_layers_during_the_verify(server, tmp_path):
    """spec's mode stream (issue 40): per cycle the five chunks go as their layers end within
    the verify, the header at its end; the drafter drafts on the header. Its verify column is
    the forward as lived (never shorter than the schedule's end) and its hop the exposed one;
    the analysis checks it against the projection with that hop."""
    from hopbench.analysis import spec as A
    from hopbench.orchestration.spec import run_spec

    cfg = _spec_cfg().check()
    sched = cfg.schedule()
    folder = run_spec(server.host, server.port, cfg, folder=tmp_path / "s")
    report, results = A.analyse(folder)
    rows = {r.mode: r for r in results}
    assert set(rows) == {"local", "sync", "stream"} and rows["stream"].reference == "projection"
    _, cycles, _ = A.load(folder)
    streamed = cycles[(cycles["mode"] == "stream") & (cycles["phase"] == 2)]
    assert len(streamed) == 8 and (streamed["verify_ns"] >= sched.end_ns).all()
    assert (streamed["hop_ns"] >= 0).all() and report["config"]["taps"] == list(cfg.taps)
    assert report["runs"][0]["mode"] in ("local", "sync", "stream")


def test_spec_stream_under_a_codec_encodes_each_chunk(server, tmp_path):
    """spec's mode stream with --codec: each aux layer's chunk crosses as its own codec frame
    (its seq the running counter), which the drafter decodes before the accept count."""
    from hopbench.analysis import spec as A
    from hopbench.orchestration.spec import run_spec

    cfg = _spec_cfg(modes=("sync", "stream"), codec="fp8").check()
    folder = run_spec(server.host, server.port, cfg, folder=tmp_path / "c")
    _, cycles, _ = A.load(folder)
    streamed = cycles[(cycles["mode"] == "stream") & (cycles["phase"] == 2)]
    assert len(streamed) == 8 and (streamed["verify_ns"] >= cfg.schedule().end_ns).all()


@pytest.mark.parametrize("kw,says", [
    (dict(verify="file:{durations}"), "mode stream needs a verify of one length"),
    (dict(taps=()), "mode stream needs the shape's aux layers"),
])
def test_spec_stream_refuses_what_it_cannot_schedule(kw, says, tmp_path):
    (tmp_path / "d.txt").write_text("70\n75\n")  # a verify of varying length has no one forward to stream in
    kw = {k: v.format(durations=tmp_path / "d.txt") if isinstance(v, str) else v for k, v in kw.items()}
    with pytest.raises(ConfigError, match=says):
        _spec_cfg(**kw).check()


def test_a_spec_stream_plan_the_drafter_cannot_split_is_refused():
    from hopbench.core import spec as S

    with pytest.raises(ConfigError, match="chunks 1..64 that divide"):
        S.spec_info_from_wire({"mode": "stream", "bytes_per_token": 61440, "chunks": 7}, 2, 4, 10, 1)
    with pytest.raises(ConfigError, match="chunks belong to mode stream"):
        S.spec_info_from_wire({"mode": "sync", "bytes_per_token": 61440, "chunks": 5}, 2, 4, 10, 1)


@pytest.mark.netns
@pytest.mark.skipif(not ok, reason=f"needs network namespaces: {why}")
def test_spec_stream_beats_the_synchronous_hop_on_a_100_mbit_link(tmp_path):
    """Across two namespaces at 100 Mbit/s, the study's forward at full length: the synchronous
    hop (~16 ms of wire for T3) eats the drafter's 15.88 ms, the streamed one hides under the
    forward, so mode stream's tok/s beats sync's in the same session, paired by repeat."""
    from hopbench.analysis import spec as A
    from hopbench.orchestration.serverproc import ready_port

    cfg = _spec_cfg(time_scale=1.0, cycles=12, warmup=2, repeats=1, rung="emu-100m", rate_mbit=100.0).check()
    with netem.Link.create(rate_mbit=100) as link:
        srv = subprocess.Popen(link.exec_prefix("server") + [sys.executable, "-m", "hopbench", "serve", "--bind",
                                                             f"{link.server_addr}:0"], stdout=subprocess.PIPE, text=True)
        try:
            port = ready_port(srv)
            job = json.dumps({"host": link.server_addr, "port": port, "config": cfg.to_dict(), "out": str(tmp_path / "s")})
            r = subprocess.run(link.exec_prefix("client") + [sys.executable, "-m", "hopbench.orchestration.spec", job],
                               capture_output=True, text=True, timeout=240)
        finally:
            srv.terminate()
            srv.wait(10)
    assert r.returncode == 0, r.stderr
    _, cycles, summary = A.load(tmp_path / "s")
    hop = cycles[cycles["phase"] == 2].groupby("mode")["hop_ns"].median() / 1e6
    tok = summary.set_index("mode")["tok_s"]
    assert hop["sync"] > 10.0 and hop["stream"] < 0.25 * hop["sync"], hop  # the wire's time, mostly hidden
    assert tok["stream"] > tok["sync"], tok


def test_a_streamed_run_under_a_codec_encodes_each_chunk_on_its_own(server, tmp_path):
    """--stream layers --codec: each aux layer's chunk crosses as its own codec frame (encoded
    as it is ready, decoded by the drafter), beside the synchronous hop under that codec; each
    is its own series, and the encode and decode times are recorded per cycle."""
    import csv

    out = tmp_path / "s"
    r = _hb("run", "--peer", f"{server.host}:{server.port}", "--stream", "layers,forward=6", "--codec",
            "none,fp8", "--cycles", "8", "--warmup", "1", "--no-floor", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    by = {p["payload"]: p for p in rep["payloads"]}
    assert set(by) == {"B64", "T3", "T3#projected", "T3~layers", "B80~layers", "T3+fp8", "T3+fp8~layers"}, set(by)
    coded = by["T3+fp8~layers"]
    assert coded["plan"]["codec"] == "fp8" and "stream" in coded["plan"] and coded["codec"]["codec"] == "fp8"
    rows = [x for x in csv.DictReader(open(out / "samples.csv")) if x["payload"] == "T3+fp8~layers"]
    assert len(rows) == 10 and all(int(x["encode_ns"]) > 0 and int(x["decode_ns"]) > 0 for x in rows)
    assert all(int(x["wire_bytes"]) < CHUNK * 5 for x in rows)  # fp8: about half the bytes cross
    v = _hb("verdict", str(out), "--json")
    assert v.returncode == 0, v.stderr
    series = {x["transport"] for x in json.loads(v.stdout)["results"][0]["verdicts"]}
    assert {"tcp~layers", "tcp+fp8", "tcp+fp8~layers"} <= series, series


def test_a_streamed_codec_frame_out_of_place_aborts_with_its_reason(server):
    from hopbench.core import codecs

    c = SpecClient(server.host, server.port)
    c.handshake()
    plan = _streamed("tcp", 2, 64)
    c.send_frame(P.PLAN, {**plan.to_wire(), "codec": "fp8", "codec_group": 32})
    assert c.recv_frame()[0] == P.ACCEPT
    enc = bytes(memoryview(codecs.parse("fp8", 32).encode(np.zeros(64, dtype=np.uint8))).cast("B"))
    c.sock.sendall(codecs.FRAME.pack(7, len(enc), 0) + enc)  # chunk 0 of cycle 0 says 7
    reason = c.read_abort(c.recv_exact(8), 8)
    assert reason == "chunk 0 of cycle 0 carries counter 7, expected 0", reason


def test_streamed_targets_at_once_count_their_cycles_by_the_forward(server_factory, tmp_path):
    """--stream layers --clients 2: two targets stream into one drafter at once. A streamed
    cycle lasts at least its forward, so no target can make more than 1 / forward cycles per
    second; counted from the exposed hops alone (the samples) it read thousands per second."""
    server = server_factory(max_sessions=2)
    out = tmp_path / "m"
    r = _hb("run", "--peer", f"{server.host}:{server.port}", "--stream", "layers,forward=6", "--clients", "2",
            "--cycles", "20", "--warmup", "2", "--no-floor", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    streamed = next(p for p in rep["payloads"] if p["payload"] == "T3~layers@2")
    rates = [t["cycles_per_s"] for t in streamed["targets"]]
    assert len(rates) == 2 and all(0 < x <= 1e3 / 6 for x in rates), rates
    assert streamed["aggregate"]["cycles_per_s"] == pytest.approx(sum(rates))


def test_spec_targets_stream_into_one_drafter_each_paired_with_its_own_local(server_factory, tmp_path):
    """spec --targets 1,2 --stream layers: mode stream beside sync at M = 1 and M = 2; every
    target's streamed cycles carry their chunks into the one drafter (the forward as lived is
    the verify, its hop the exposed one) and are paired with that target's co-located runs."""
    from hopbench.analysis import spec as A

    srv = server_factory(max_sessions=4)
    out = tmp_path / "st"
    r = _hb("spec", "--peer", f"{srv.host}:{srv.port}", "--targets", "1,2", "--modes", "local,sync", "--stream",
            "layers", "--cycles", "8", "--warmup", "1", "--repeats", "2", "--time-scale", "0.2", "--out", str(out),
            "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["status"] == "complete"
    assert [(row["targets"], row["mode"]) for row in doc["rows"]] == [(1, "sync"), (1, "stream"), (2, "sync"),
                                                                      (2, "stream")]
    assert "M = 2 stream" in r.stderr and set(doc["capacity"]) == {"sync", "stream"}
    for t in ("t1", "t2"):
        _, cycles, _ = A.load(out / "m2" / t)
        timed = cycles[cycles["phase"] == 2]
        by_mode = timed.groupby("mode")
        assert by_mode.size().to_dict() == {"local": 16, "stream": 16, "sync": 16}, t
        streamed = timed[timed["mode"] == "stream"]
        assert (streamed["hop_ns"] > 0).all() and (streamed["verify_ns"] > 0).all()
        # the streamed verify is the forward's schedule, lived: never shorter than the local one's by much
        assert streamed["verify_ns"].median() >= 0.95 * timed[timed["mode"] == "local"]["verify_ns"].median()
        runs = json.loads((out / "m2" / t / "report.json").read_text())["runs"]
        by = {(x["mode"], x["repeat"]): x["tokens_per_cycle"] for x in runs}
        assert all(by[("stream", k)] == by[("local", k)] for _, k in by), by  # the same acceptance outcomes


def test_a_streamed_run_says_how_long_and_when_its_schedule_was_not_kept(server, tmp_path):
    peer = f"{server.host}:{server.port}"
    out = cli("run", "--peer", peer, "--stream", "layers,forward=0.001", "--cycles", "30", "--no-floor",
               "--results-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "the schedule could not be kept" in out.stderr, out.stdout + out.stderr
    from hopbench.orchestration.runjob import RunRequest, plan, scheduled_s

    loads, cfg = plan(RunRequest(host="h", port=1, transport="tcp", stream="layers", forward_ms=100000.0, cycles=2))
    assert scheduled_s(loads, cfg) > 30 * 60  # 2 streamed payloads x 13 cycles x 100 s


@pytest.mark.parametrize("sent, says", [
    # the end message before the last chunk: read as chunk 1, its counter the end's seq
    (lambda P: P.SEQ.pack(0) + bytes(56) + P.STREAM_END.pack(0, 0, 0) + bytes(48),
     "chunk 1 of cycle 0 carries counter 0, expected 1"),
    # one chunk too many: read as the end message, its seq the chunk's counter
    (lambda P: P.SEQ.pack(0) + bytes(56) + P.SEQ.pack(1) + bytes(56) + P.SEQ.pack(2) + bytes(56),
     "the end message of cycle 0 carries seq 2"),
])
def test_a_streamed_plans_faults_are_answered_as_protocol_md_says(server, sent, says):
    """docs/PROTOCOL.md "Streamed plans": the table of what the drafter answers, on tcp."""
    from hopbench.core import protocol as P
    from tests.specpeer import SpecClient

    c = SpecClient(server.host, server.port)
    c.handshake()
    c.send_frame(P.PLAN, P.Plan("tcp", 2 * 64, 8, 2, 4, 5, 1, stream=P.StreamPlan(2, 64)).to_wire())
    assert c.recv_frame()[0] == P.ACCEPT
    c.sock.sendall(sent(P))
    assert c.read_abort(c.recv_exact(8), 8) == says
    with Session(server.host, server.port) as s:  # and the next client is served
        m = s.measure(small_plan(cycles=5))
        assert m.completed == m.plan.total


def test_a_long_plan_reports_its_cycles_as_they_complete(server, tmp_path, monkeypatch):
    from hopbench.orchestration import runner
    from hopbench.orchestration.runjob import RunRequest, plan

    monkeypatch.setattr(runner, "PROGRESS_EVERY_S", 0.05)
    loads, cfg = plan(RunRequest(host=server.host, port=server.port, transport="tcp", tokens="1", cycles=40,
                                 warmup=2, gap_ms=10.0, floor=False))
    seen = []
    runner.run_session(server.host, server.port, loads[:1], cfg, folder=tmp_path,
                       hooks=runner.SessionHooks(on_progress=lambda *a: seen.append(a)))
    assert seen, "a 0.4 s plan reported nothing at 0.05 s intervals"
    total = 40 + 2 + 1
    assert all(label == loads[0].label and t == total and 0 <= d <= total for label, d, t, _ in seen)
    assert [d for _, d, _, _ in seen] == sorted(d for _, d, _, _ in seen) and seen[-1][1] > 0
    line = runner.progress_line(*seen[-1])
    assert f"{seen[-1][1]}/{total} cycles" in line and ("left" in line or seen[-1][1] == 0)


def test_the_chunk_schedule_is_the_clients_the_server_waits_up_to_its_idle_timeout(server_factory):
    """Issue 62 item 25 (docs/PROTOCOL.md "Streamed plans", the schedule's tolerance): the
    server checks a streamed cycle's order and sizes, never its timing. Chunks sent all at
    once and chunks with a gap are served alike, the gap before the end message is the hold
    time it reports; a gap longer than the idle timeout drops the session."""
    import struct
    import time

    from hopbench.core import protocol as P
    from tests.specpeer import SpecClient, check_reply

    srv = server_factory(idle_timeout_s=1.5)
    chunk = lambda n: P.SEQ.pack(n) + bytes(56)  # noqa: E731
    end = lambda s: struct.pack("<QII", s, 0, 0)  # noqa: E731
    c = SpecClient(srv.host, srv.port)
    c.handshake()
    c.send_frame(P.PLAN, P.Plan("tcp", 2 * 64, 8, 2, 4, 1, 0, stream=P.StreamPlan(2, 64)).to_wire())
    assert c.recv_frame()[0] == P.ACCEPT  # 1 + warmup 0 + cycles 1 = 2 round trips
    c.sock.sendall(chunk(0) + chunk(1) + end(0))  # all at once: no schedule to keep
    check_reply(c.recv_exact(8), 0, 2, 4)
    c.sock.sendall(chunk(2))
    time.sleep(0.3)  # the workload under test: a layer that ends late, within the idle timeout
    c.sock.sendall(chunk(3))
    time.sleep(0.3)  # ... and an accept count that comes late
    c.sock.sendall(end(1))
    check_reply(c.recv_exact(8), 1, 2, 4)
    holds = struct.unpack("<2q", c.recv_exact(16))
    assert holds[1] > max(holds[0], 0.1e9), holds  # the 0.3 s gap before the end message, as the server saw it
    assert c.recv_frame()[0] == P.DONE
    c = SpecClient(srv.host, srv.port)
    c.handshake()
    c.send_frame(P.PLAN, P.Plan("tcp", 2 * 64, 8, 2, 4, 1, 0, stream=P.StreamPlan(2, 64)).to_wire())
    assert c.recv_frame()[0] == P.ACCEPT
    c.sock.sendall(chunk(0))
    assert c.closed(timeout=10.0)  # silent past the idle timeout (1.5 s here, 60 s by default): dropped


@pytest.mark.parametrize("spec, says", [("layers,forward=5", "the forward is the verify work"),
                                        ("bytes", "--stream bytes: off, or layers"),
                                        ("layers:80,cost=x", "forward= and cost= are ms")])
def test_spec_reads_the_same_stream_spec_and_refuses_what_spec_cannot_take(tmp_path, spec, says):
    r = _hb("spec", "--peer", "127.0.0.1:9", "--stream", spec, "--out", str(tmp_path / "x"))
    assert r.returncode != 0 and says in r.stderr and not (tmp_path / "x").exists(), r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr


def test_spec_old_stream_flags_still_read_with_a_note():
    from hopbench.cli.measure import _spec_stream
    from hopbench.cli.respell import OLD, respell

    old = respell(["--stream", "layers", "--layers", "80", "--stream-cost-ms", "0.5"], OLD["spec"], lambda note: None)
    assert old == ["--stream", "layers:80,cost=0.5"]
    assert _spec_stream(old[1]) == {"stream": "layers", "layers": 80, "forward_ms": None, "stream_cost_ms": 0.5,
                                    "layer_times": None}
    assert _spec_stream("off")["stream"] == "off"
    with pytest.raises(ConfigError, match="the forward is the verify work"):
        _spec_stream("layers,target=gpu")
