"""The first hour of a new user (issue 22): every README step works, says what it did, and
fails early with one line. Each test reproduces a hole a user fell into."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hopbench.analysis import data as D
from hopbench.analysis import export as E
from hopbench.cli import app
from hopbench.orchestration.serverproc import ready_port
from tests.conftest import dead_port

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"
runner = CliRunner()


def hb(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "hopbench", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def serve(*extra, env=None):
    p = subprocess.Popen([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})
    return p, ready_port(p)


def test_secret_from_the_environment_covers_the_floor_too(tmp_path):
    srv, port = serve(env={"HOPBENCH_SECRET": "s3"})
    try:
        r = hb("run", "--peer", f"127.0.0.1:{port}", "--tokens", "1", "--cycles", "20", "--warmup", "2",
               "--out", str(tmp_path / "r"), env={"HOPBENCH_SECRET": "s3"})
    finally:
        srv.terminate()
        srv.wait(10)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["status"] == "complete" and rep["floor"]["n"] == 20


@pytest.mark.parametrize("why", ["dead port", "wrong secret"])
def test_a_run_that_never_connects_leaves_nothing_on_disk(tmp_path, why):
    srv = None
    if why == "dead port":
        peer = f"127.0.0.1:{dead_port()}"
    else:
        srv, port = serve(env={"HOPBENCH_SECRET": "right"})
        peer = f"127.0.0.1:{port}"
    try:
        r = hb("run", "--peer", peer, "--out", str(tmp_path / "x"), "--secret", "wrong")
    finally:
        if srv:
            srv.terminate()
            srv.wait(10)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "kept in" not in lines[0], r.stderr
    assert not (tmp_path / "x").exists()


def test_the_servers_caps_are_checked_against_the_whole_plan_first(tmp_path):
    srv, port = serve("--max-request-bytes", "200000")
    try:
        r = hb("run", "--peer", f"127.0.0.1:{port}", "--tokens", "1,8", "--out", str(tmp_path / "x"))
    finally:
        srv.terminate()
        srv.wait(10)
    assert r.returncode != 0 and "T8: request_bytes 491520 exceeds the server cap of 200000" in r.stderr
    assert "nothing was measured" in r.stderr and not (tmp_path / "x").exists()
    assert "T1 " not in r.stdout  # T1 was not measured first


def test_sweep_preflight_names_missing_extras_before_measuring(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text((ROOT / "tests" / "data" / "sweep-tiny.toml").read_text())
    code = ("import sys; sys.modules['zmq'] = None; sys.modules['ucxx'] = None; from hopbench.cli import main; "
            f"sys.argv = ['hopbench', 'sweep', {str(cfg)!r}, '--rungs', 'loopback', '--out', {str(tmp_path / 'o')!r}]; "
            "main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode != 0
    assert "pip install 'hopbench[zmq]'" in r.stderr and "nothing was measured" in r.stderr
    assert r.stderr.count("not available") == 0 and r.stderr.count("is not installed") <= 2
    assert not (tmp_path / "o").exists()


def test_run_records_the_link_and_advises_placement(server, tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", "3", "--cycles", "20",
                              "--warmup", "2", "--no-floor", "--rate", "1000", "--rung", "lab-1g", "--out", str(out)])
    assert res.exit_code == 0, res.output
    if len(os.sched_getaffinity(0)) <= 8:
        assert "unpinned on a" in res.output and "--cpu" in res.output
    cfg = json.loads((out / "report.json").read_text())["config"]
    assert cfg["rate_mbit"] == 1000 and cfg["rung"] == "lab-1g"
    (g,), _ = D.load_groups(out)
    assert g.rung == "lab-1g" and g.rate_mbit == 1000
    rec = E.records([g], {}, "x", "s", rid="r-1")[0]
    assert rec["rung"] == "lab-1g" and rec["rate_mbit"] == 1000


def test_verdict_without_the_operating_payload_fails_and_takes_several_folders(server, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out, tok in ((a, "1"), (b, "3")):
        res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", tok, "--cycles", "20",
                                  "--warmup", "2", "--no-floor", "--out", str(out)])
        assert res.exit_code == 0, res.output
    r = hb("verdict", str(a))
    assert r.returncode != 0 and "no measurement at the operating payload T = 3 (measured T: 1)" in r.stderr
    r = hb("verdict", str(b), str(b), "--t-draft", "15.88+-0.4")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(f"== {b}") == 2 and "t_draft = 15.88+-0.4 ms" in r.stdout


def test_golden_results_of_every_older_schema_load_and_newer_are_refused(tmp_path):
    groups, top = D.load_groups(GOLDEN / "sweep-v1")
    assert top["schema_version"] == 1 and {g.payload for g in groups} >= {"T1", "T3"}
    assert all(len(g.repeat_p50_ns) == 2 and g.repeat_ids == [0, 1] for g in groups)
    (g_run, *_), _ = D.load_groups(GOLDEN / "run-v1")
    assert g_run.rung == "run" and g_run.software == "hopbench 0.1.0"
    r = hb("fit", str(_copy(GOLDEN / "sweep-v1", tmp_path / "s")))
    assert r.returncode == 0, r.stderr
    # export keeps each record's own software version
    assert {rec["software"] for rec in E.records(groups, top, "g", "s", rid="r-1")} == {"hopbench 0.1.0"}
    newer = _copy(GOLDEN / "run-v1", tmp_path / "newer")
    rep = json.loads((newer / "report.json").read_text())
    rep["schema_version"] = 99
    (newer / "report.json").write_text(json.dumps(rep))
    r = hb("verdict", str(newer))
    assert r.returncode != 0 and "written by a newer hopbench" in r.stderr and "upgrade" in r.stderr


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_ucx_falling_back_is_said_on_the_terminal(tmp_path):
    try:
        import ucxx  # noqa: F401
    except ImportError:
        pytest.skip("ucxx not installed")
    srv, port = serve()
    try:
        r = hb("run", "--peer", f"127.0.0.1:{port}", "--transport", "ucx", "--opt", "UCX_TLS=rc,tcp", "--tokens", "1",
               "--cycles", "10", "--warmup", "2", "--no-floor", "--out", str(tmp_path / "r"))
    finally:
        srv.terminate()
        srv.wait(10)
    assert r.returncode == 0, r.stderr
    if not Path("/sys/class/infiniband").exists():  # no RDMA device: UCX must have fallen back to tcp
        assert "warning: UCX_TLS=rc,tcp asked for rc, but UCX put only tcp on the lanes" in r.stderr


def test_doctor_compares_the_rate_it_is_given():
    a, b = hb("doctor", "--rate", "100"), hb("doctor", "--rate", "1000")
    la = [ln for ln in a.stdout.splitlines() if "nominal rate" in ln]
    lb = [ln for ln in b.stdout.splitlines() if "nominal rate" in ln]
    assert la and lb and la != lb and "100 Mb/s" in la[0] and "1000 Mb/s" in lb[0]


def test_hop_cost_figure_labels_each_bar_with_value_and_gain():
    pytest.importorskip("matplotlib")
    from hopbench.analysis import plot as P
    from hopbench.analysis import verdict as V
    from hopbench.estimate import Estimate

    inp = V.Inputs(15.88, 89.34, 24.05)
    vs = [V.verdict("emu-1g", "tcp", Estimate(1.56, 1.5, 1.6, 0.9375, "repeats", "t", 5, 100), inp),
          V.verdict("emu-100m", "tcp", Estimate(15.8, 15.7, 15.9, 0.9375, "repeats", "t", 5, 100), inp)]
    fig = P.hop_cost(vs, 15.88, 3)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("1.56 ms" in t and "+19.1%" in t for t in texts), texts
    assert any("15.8 ms" in t for t in texts)
    assert "93.8%" in fig.axes[0].get_ylabel()


def test_docs_link_only_inside_the_repository():
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = md.read_text()
        assert "../shared" not in text and "shared/seeds" not in text, md
        for target in re.findall(r"\]\(([^)#:]+)\)", text):  # markdown links to files
            assert (md.parent / target).exists(), (md, target)


def test_sweep_preflight_needs_ethtool_for_emulated_rungs(monkeypatch):
    from hopbench import config_sweep as S
    from hopbench.orchestration import sweep as SW

    if os.geteuid() != 0:
        pytest.skip("emulated rungs are checked as root only (otherwise the sweep falls back to loopback)")
    cfg = S.load_sweep(ROOT / "tests" / "data" / "sweep-tiny.toml")
    rungs = [S.load_rung(n) for n in cfg.rungs]
    real_which = shutil.which
    monkeypatch.setattr(SW.run.shutil, "which", lambda name: None if name == "ethtool" else real_which(name))
    lines, _ = SW.missing_requirements(cfg, rungs, analyse=False)
    assert any(ln.startswith("ethtool not found") and "apt-get install ethtool" in ln for ln in lines), lines


def test_a_cell_attempt_set_aside_is_not_counted_as_a_repeat(tmp_path):
    """An attempt interrupted after its cycles (status incomplete, payload whole) is renamed
    r<N>.failed-...; the resumed sweep's cell must still have exactly its repeats."""
    sweep = _copy(GOLDEN / "sweep-v1", tmp_path / "s")
    cell = next(sweep.glob("cells/*/*/*/r0"))
    shutil.copytree(cell, cell.with_name("r0.failed-20261203T000000Z-3"))
    groups, _ = D.load_groups(sweep)
    assert all(len(g.repeat_p50_ns) == 2 for g in groups)


def test_identity_is_typed_from_plan_to_reading(tmp_path):
    """Issue 39 (REVIEW4 §5.4): a cell's identity is built once and carried typed; a golden
    v1 folder (flat sweep cells, no place record) and a fresh plan both read back as
    records.Series/Place, and the labels are spelled from them, never parsed back."""
    from dataclasses import asdict

    from hopbench.analysis.data import cell_of
    from hopbench.config_sweep import load_rung, load_sweep
    from hopbench.orchestration.sweep.plan import plan_cells
    from hopbench.records import Place, Series
    from hopbench.shape import load_shape

    groups, _ = D.load_groups(GOLDEN / "sweep-v1")
    assert {g.series for g in groups} == {Series("tcp")} and {g.place.rung for g in groups} == {"loopback"}
    s = Series("tcp", "fp8", "projected", "layers", 4)
    assert s.label == "tcp+fp8#projected~layers@4" and s.spell("T3") == "T3+fp8#projected~layers@4"
    assert s.raw.alone.label == "tcp#projected~layers" and Series.from_dict(asdict(s)) == s
    p = Place("emu-1g", "split", 80.0)
    assert p.label == "emu-1g@split +80 ms gap" and Place.from_dict(asdict(p)) == p and p.unhurried.label == "emu-1g@split"
    # a planned cell, recorded as a sweep records it, reads back to the same identity
    cfg = dataclasses.replace(load_sweep("configs/sweep.toml", quick=True), codecs=("none", "int8"), clients=(1, 2))
    cells = plan_cells(cfg, [load_rung("loopback")], load_shape().shape, 1, ["split-busy", "same-block"])
    for c in cells[:40]:
        run = {"rung": c.label, "sweep": {"cell": asdict(c)}}
        plan = {"transport": c.series.transport, "codec": c.series.codec, "gap_ms": c.gap_ms,
                "request_bytes": c.request_bytes, "reply_bytes": c.reply_bytes,
                "group": {"size": c.series.clients} if c.series.clients > 1 else None}
        key = cell_of(run, {"plan": plan, "payload": c.payload, "tokens": c.tokens, "design": c.series.design})
        assert (key.place, key.series, key.payload) == (c.place, c.series, c.payload)


def test_result_headers_read_back_typed(tmp_path):
    """Issue 39 (REVIEW4 §5.4): the typed records read as well as they write: a golden v1 run
    and sweep header load into results.RunReport / SweepReport, and each written header reads
    back to the record it was written from."""
    from hopbench import results as R

    run = R.RunReport.from_dict(json.loads((GOLDEN / "run-v1" / "report.json").read_text()))
    assert run.config["transport"] == "tcp" and run.peer and "payloads" not in run.extra
    sweep = R.SweepReport.from_dict(json.loads((GOLDEN / "sweep-v1" / "sweep.json").read_text()))
    assert sweep.kind == "sweep" and sweep.seed == 77 and sweep.shape.bytes_per_token == 61440
    for rec in (R.RunReport("h:1", {"transport": "tcp"}, {"a": 1}, {"b": 2}, "hopbench 9", {"c": 3}, {"rung": "x"}),
                R.SweepReport("matrix", 5, {"name": "m"}, R.ShapeRecord(61440, 2, 4), {"local": {}}, {"matrix": {}}),
                R.SpecReport("h:1", {"modes": ["sync"]}, 3, {"spec": "a"}, {"verify": {}}, {}, None, {"target": 1})):
        assert type(rec).from_dict(rec.to_dict()) == rec
    assert isinstance(R.ResultFolder(GOLDEN / "sweep-v1").read_header(), R.SweepReport)
    assert R.ResultFolder(GOLDEN / "run-v1").read_header() == run
