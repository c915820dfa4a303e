"""`hopbench spec`: the models, the protocol extension, and the loop end to end against a
real server (tiny scaled times; no assertion on absolute timing)."""

import csv
import dataclasses
import json

import numpy as np
import pytest

from hopbench.analysis import spec as A
from hopbench.analysis import verdict as V
from hopbench.core import protocol as P
from hopbench.core import spec as S
from hopbench.core.client import Session
from hopbench.errors import ConfigError, Refused
from hopbench.orchestration.spec import SpecConfig, run_spec
from hopbench.shape import load_shape

_SH = load_shape().shape
SHAPE = {"bytes_per_token": _SH.bytes_per_token, "id_bytes": _SH.id_bytes}  # the configured shape


def test_the_default_acceptance_reproduces_the_study():
    acc = S.parse_acceptance(S.STUDY_ACCEPTANCE, 2)
    assert acc.mean_tokens == pytest.approx(2.149, abs=1e-3)
    assert acc.probs == pytest.approx((0.26, 0.74 * (1 - 0.5527), 0.74 * 0.5527))
    assert acc.ranked() == [2, 1, 0]  # all accepted is the most likely outcome
    draws = acc.draw(20000, 1)
    assert (draws + 1).mean() == pytest.approx(2.149, abs=0.02)
    g = S.parse_acceptance("geometric:0.5", 3)
    assert g.probs == pytest.approx((0.5, 0.25, 0.125, 0.125))
    with pytest.raises(ConfigError, match="2 per-position probabilities for K = 3"):
        S.parse_acceptance("0.7,0.5", 3)


def test_acceptance_from_a_histogram_file(tmp_path):
    f = tmp_path / "accepted.txt"
    f.write_text("0\n2\n2\n1\n")
    acc = S.parse_acceptance(f"hist:{f}", 2)
    assert acc.probs == pytest.approx((0.25, 0.25, 0.5))
    f.write_text("5\n")
    with pytest.raises(ConfigError, match="0..2"):
        S.parse_acceptance(f"hist:{f}", 2)


def test_work_models_parse_and_scale(tmp_path):
    assert S.parse_work("sleep:73.46", 0.1).nominal_ms() == pytest.approx(7.346)
    f = tmp_path / "d.txt"
    f.write_text("1.5\n2.5\n")
    w = S.parse_work(f"file:{f}")
    w.run()
    assert w.nominal_ms() == 2.5  # used in turn
    for bad in ("sleep:x", "nap:3", "sleep:-1"):
        with pytest.raises(ConfigError):
            S.parse_work(bad)


def _spec_plan(mode="sync", request_bytes=None, draft="sleep:0.1"):
    """A spec plan of 5 + 1 cycles, K = 2, and its target's inputs (every cycle accepts 1)."""
    info = S.SpecPlanInfo(mode, 2, 4, 1024, 5, 1, 1, 2)
    return P.Plan("tcp", request_bytes or info.request_bytes, info.reply_bytes, 2, 4, 5, 1,
                  spec=P.SpecPlan.from_dict({"mode": mode, "bytes_per_token": 1024, "fanout": 2, "seed": 1,
                                             "draft": draft, "ranked": [2, 1, 0]})), \
        S.SpecInputs(info, np.ones(info.total, dtype=np.int64), S.parse_work("sleep:0"))


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_session_measure_runs_a_spec_plan_like_any_other_kind(server, mode):
    """The spec kind's target path is a ClientPath: Session.measure runs it, its rows land in
    the stages (one per CYCLE_COLUMNS), its samples are the waits, and the server confirms."""
    plan, inputs = _spec_plan(mode, draft="sleep:0.2")
    inputs = dataclasses.replace(inputs, verify=S.parse_work("sleep:1"))  # 1 ms: the drafter pre-drafts 2 of 0.2
    with Session(server.host, server.port) as s:
        m = s.measure(plan, spec=inputs)
        s.bye()
    assert m.completed == plan.total and m.error is None
    assert list(m.stages["seq"]) == list(range(plan.total)) and set(m.stages["tokens"]) == {2}
    assert list(m.stages["phase"]) == [0, 1] + [2] * plan.cycles
    assert (m.samples_ns == m.stages["wait_ns"]).all() and (m.stages["wait_ns"] >= m.stages["draft_ns"]).all()
    if mode == "sync":  # every cycle drafts 0.2 ms on the server, its time in the reply's tail
        assert (m.stages["draft_ns"] >= 200_000).all() and not m.stages["hit"].any()
    else:  # overlap: outcome 1 is ranked second of a fan-out of 2, pre-drafted while the target verified (from
        # cycle 1 on: the drafter is ready >= 1 ms before each header; cycle 0's start races the target's)
        assert m.stages["hit"][1:].all() and not m.stages["draft_ns"][1:].any()


def test_a_spec_plan_needs_its_targets_inputs_before_the_plan_crosses(server):
    plan, _ = _spec_plan()
    with Session(server.host, server.port) as s:
        with pytest.raises(ConfigError, match="needs its target's inputs"):
            s.measure(plan)
        assert s.plans == 0


def test_a_spec_plan_the_drafter_cannot_run_is_refused(server):
    s = Session(server.host, server.port)
    plan, inputs = _spec_plan(request_bytes=999)
    with pytest.raises(Refused, match="request_bytes/reply_bytes must be 3072/24"):
        s.measure(plan, spec=inputs)
    s.close()
    s = Session(server.host, server.port)
    plan, inputs = _spec_plan(draft="nap:3")
    with pytest.raises(Refused, match="work model 'nap:3'"):
        s.measure(plan, spec=inputs)
    s.close()


def test_a_plan_never_makes_the_server_open_a_path(server, tmp_path):
    """docs/SECURITY.md: no file access. A PLAN naming file:PATH is refused without the file
    being read (a readable number would otherwise be served; a word would be quoted back)."""
    number, word = tmp_path / "n.txt", tmp_path / "w.txt"
    number.write_text("0.5\n")
    word.write_text("secret-first-line\n")
    for f in (number, word):
        s = Session(server.host, server.port)
        plan, inputs = _spec_plan(draft=f"file:{f}")
        with pytest.raises(Refused, match="opens no path") as got:
            s.measure(plan, spec=inputs)
        assert "secret-first-line" not in str(got.value)
        s.close()


def test_the_client_reads_a_work_file_and_sends_its_values(server, tmp_path):
    f = tmp_path / "d.txt"
    f.write_text("0.25\n1\n0.125\n")
    assert S.wire_work(f"file:{f}") == "durations:0.25,1,0.125"
    assert S.parse_work("durations:0.25,1,0.125", files=False).durations_ms == [0.25, 1.0, 0.125]
    assert S.wire_work("sleep:3") == "sleep:3"
    f.write_text("15.883\n" * 2000)  # more than a PLAN's string carries: refused here, in one line
    with pytest.raises(ConfigError, match="give fewer lines"):
        S.wire_work(f"file:{f}")
    f.write_text("0.25\n")
    cfg = SpecConfig(**SHAPE, cycles=4, warmup=1, repeats=1, time_scale=0.02, seed=5, draft_remote=f"file:{f}")
    out = run_spec(server.host, server.port, cfg, folder=tmp_path / "s")
    assert json.loads((out / "report.json").read_text())["status"] == "complete"


def test_spec_end_to_end_against_a_real_server(server, tmp_path):
    cfg = SpecConfig(**SHAPE, cycles=12, warmup=2, repeats=2, time_scale=0.02, seed=5)
    out = run_spec(server.host, server.port, cfg, folder=tmp_path / "s")
    rep = json.loads((out / "report.json").read_text())
    assert rep["status"] == "complete" and rep["schema"] == "hopbench.spec"
    assert rep["config"]["time_scale"] == 0.02 and rep["acceptance"]["mean_tokens"] == pytest.approx(2.149, abs=1e-3)
    cycles = list(csv.DictReader(open(out / "cycles.csv")))
    assert len(cycles) == 2 * 3 * (1 + 2 + 12)
    # every mode of a repeat saw the same acceptance outcomes (paired)
    for rep_i in ("0", "1"):
        seqs = {m: [c["accepted"] for c in cycles if c["mode"] == m and c["repeat"] == rep_i]
                for m in ("local", "sync", "overlap")}
        assert seqs["local"] == seqs["sync"] == seqs["overlap"]
    assert all(c["hit"] == "0" for c in cycles if c["mode"] != "overlap")
    assert all(c["hop_ns"] == "0" for c in cycles if c["mode"] == "local")
    assert all(int(c["tokens"]) == int(c["accepted"]) + 1 for c in cycles)
    report, res = A.analyse(out)
    by = {r.mode: r for r in res}
    assert set(by) == {"local", "sync", "overlap"}
    assert by["local"].reference == "arithmetic" and by["sync"].reference == "projection"
    assert by["overlap"].hit_rate is not None and 0 <= by["overlap"].hit_rate <= 1
    assert by["local"].gain is None and by["sync"].gain is not None and by["sync"].gain.n_repeats == 2  # paired
    assert "vs local" in A.format_table(report, res)
    assert "modelled:" in A.format_table(report, res) and "measured:" in A.format_table(report, res)


def test_verdict_takes_the_remote_drafters_time():
    inp = V.Inputs(15.88, 89.34, 24.05, t_draft_remote_ms=5.0)
    v = V.verdict("x", "tcp", 1.713, inp)
    # cycle' = 89.34 - 15.88 + 1.713 + 5.0
    assert v.projected_cycle_ms == pytest.approx(89.34 - 15.88 + 1.713 + 5.0)
    assert v.break_even_ms == pytest.approx(10.88)


def test_spec_needs_a_peer_for_remote_modes(tmp_path):
    with pytest.raises(ConfigError, match="need --peer"):
        run_spec(None, None, SpecConfig(**SHAPE, modes=("local", "sync")), folder=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # refused before anything was created


def test_spec_results_export_as_measured_end_to_end_records(server, tmp_path):
    from hopbench.analysis import export as E

    out = run_spec(server.host, server.port, SpecConfig(**SHAPE, cycles=8, warmup=1, repeats=2, time_scale=0.02, seed=3),
                   folder=tmp_path / "s")
    recs = E.spec_records(out, "remote-drafter")
    assert {r["mode"] for r in recs} == {"local", "sync", "overlap"}
    assert all(r["kind"].startswith("spec") and r["tok_s"] > 0 and r["repeats"] == 2 for r in recs)
    path = tmp_path / "case.json"
    assert E.upsert(path, recs) == (3, 0, []) and E.upsert(path, recs) == (0, 3, [])  # stable ids
    assert E.to_csv_fields(recs, E.SPEC_FIELDS).splitlines()[0].startswith("id,schema_version,study,kind,result_id")


def test_the_answer_from_a_measured_spec_names_every_mode_and_what_the_projection_assumes(server, tmp_path):
    """Issue 42: with `report --spec` the Answer said "+12.7% (measured overlap)" above a table
    projecting +19.1% (a remote drafter of 0 ms, in small print), and did not mention sync
    (slower than local). One decision per rung, every measured mode's figure, the model named."""
    import re
    import subprocess
    import sys

    spec = run_spec(server.host, server.port, SpecConfig(**SHAPE, cycles=8, warmup=1, repeats=2, time_scale=0.02,
                                                         seed=3), folder=tmp_path / "s")
    run = tmp_path / "r"
    r = subprocess.run([sys.executable, "-m", "hopbench", "run", "--peer", f"{server.host}:{server.port}", "--tokens", "3",
                        "--cycles", "30", "--out", str(run)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    page = subprocess.run([sys.executable, "-m", "hopbench", "report", str(run), "--spec", str(spec), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert page.returncode == 0, page.stderr
    doc = json.loads(page.stdout)
    (m,) = doc["spec_measured"]
    assert [x["mode"] for x in m["modes"]] == ["sync", "overlap"] and m["status"] == "complete"
    html = subprocess.run([sys.executable, "-m", "hopbench", "report", str(run), "--spec", str(spec), "-o",
                           str(tmp_path / "p.html")], capture_output=True, text=True, timeout=120)
    assert html.returncode == 0, html.stderr
    text = re.sub(r"<[^>]+>", "", (tmp_path / "p.html").read_text())
    answer = text[text.index("measured end to end by hopbench spec"):][:600]
    assert "sync" in answer and "overlap" in answer, answer
    assert "the remote drafter's own time 0.000 ms a cycle (assumed zero" in text


def test_an_unfinished_spec_says_how_many_repeats_it_has():
    """Issue 42: spec-summary said "5 repeats" of a spec interrupted after one."""
    from types import SimpleNamespace

    est = lambda n: SimpleNamespace(n_repeats=n)  # noqa: E731
    res = [SimpleNamespace(mode="local", tok_s=est(2)), SimpleNamespace(mode="overlap", tok_s=est(1))]
    assert A._repeats({"config": {"repeats": 5}, "status": "complete"}, res) == "5 repeats"
    assert A._repeats({"config": {"repeats": 5}, "status": "incomplete"}, res) == (
        "incomplete: of 5 repeats asked, measured local 2, overlap 1")


def test_hopbench_load_reads_a_spec_folder(server, tmp_path):
    """Issue 42: hopbench.load refused spec folders."""
    import hopbench

    out = run_spec(server.host, server.port, SpecConfig(**SHAPE, cycles=8, warmup=1, repeats=2, time_scale=0.02,
                                                        seed=3), folder=tmp_path / "s")
    f = hopbench.load(out)
    assert set(f.cells["mode"]) == {"local", "sync", "overlap"} and (f.cells["repeats"] == 2).all()
    assert {"mode", "repeat"} <= set(f.cycles.columns) and len(f.cycles) > 0 and f.fits.empty
    assert f.top["schema"] == "hopbench.spec"


@pytest.mark.parametrize("flag", ["--verify-work", "--verify"])
def test_spec_verify_work_is_one_word_and_the_old_spelling_still_runs_with_a_note(server, tmp_path, flag):
    """spec's target work is --verify-work (run's --verify is a CRC of the bytes); the old
    spelling still runs this release, with a one-line note."""
    from typer.testing import CliRunner

    from hopbench.cli import app

    res = CliRunner().invoke(app, ["spec", "--peer", f"{server.host}:{server.port}", "--modes", "sync", flag, "sleep:7",
                                   "--cycles", "4", "--warmup", "1", "--repeats", "1", "--time-scale", "0.05",
                                   "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "s" / "report.json").read_text())["config"]["verify"] == "sleep:7"
    noted = "spec --verify is now --verify-work" in res.output
    assert noted == (flag == "--verify"), res.output
