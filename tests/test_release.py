"""Issue 27 (a tool that installs and answers like a released one): the shipped configs are
found outside a checkout, the registry comes from entry points and the test transport is
not in it, and "move the drafter" needs a gain worth a second box; results of every older schema load, newer ones are refused,
and the typed headers read back to what they were written from."""

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hopbench.analysis import data as D
from hopbench.analysis import export as E
from hopbench.cli import app
from hopbench.config import config_file, resolve_config
from hopbench.core.client import Session
from hopbench.errors import HopbenchError
from hopbench.orchestration.serverproc import ready_port
from hopbench.shape import load_shape
from tests.conftest import GOLDEN, cli, small_plan

runner = CliRunner()


def test_shipped_configs_are_found_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./configs here
    assert load_shape().shape.bytes_per_token == 61440
    assert config_file("rungs/emu-1g.toml").exists()
    assert resolve_config("configs/sweep.toml").exists()
    (tmp_path / "configs").mkdir()  # a local ./configs/shape.toml wins over the shipped one
    (tmp_path / "configs" / "shape.toml").write_text(config_file("shape.toml").read_text().replace("6144", "4096"))
    assert load_shape().shape.bytes_per_token == 5 * 4096 * 2


def test_a_real_server_refuses_the_test_transport(tmp_path):
    """`fake` exists only in the test process (hopbench.testing.register_fake): a `hopbench
    serve` process does not know it and refuses the plan, naming what it knows."""
    proc = subprocess.Popen([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", "--once"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = ready_port(proc)
        s = Session("127.0.0.1", port)
        try:
            with pytest.raises(HopbenchError) as err:
                s.measure(small_plan(transport="fake"))
            assert "fake" in str(err.value) and "tcp" in str(err.value)
        finally:
            s.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _verdict(*args):
    res = runner.invoke(app, ["verdict", "--json", *args])
    assert res.exit_code == 0, res.output
    return {v["rung"]: v for v in json.loads(res.output)["results"][0]["verdicts"]}


def test_a_gain_too_small_for_a_second_box_is_not_move():
    vs = _verdict("--hop-ms", "lab=15.68,1gbe=1.713")
    assert vs["lab"]["call"] == "not worth it (+0.2% < 5%)" and vs["lab"]["min_gain"] == 0.05
    assert vs["1gbe"]["call"] == "move the drafter" and round(vs["1gbe"]["gain"], 3) == 0.188
    assert _verdict("--hop-ms", "lab=15.68", "--min-gain", "0")["lab"]["call"] == "move the drafter"


@pytest.mark.parametrize("args, says", [
    (["--t-draft", "100", "--cycle", "40"], "shorter than the cycle"),
    (["--t-draft-remote", "15.88"], "below t_draft"),
    (["--t-draft-remote", "-1"], "must be >= 0"),
    (["--min-gain", "-0.1"], "min_gain"),
    (["--tolerance", "1.5"], "tolerance"),
])
def test_verdict_refuses_inputs_that_cannot_describe_a_decode_loop(args, says):
    out = subprocess.run([sys.executable, "-m", "hopbench", "verdict", "--hop-ms", "a=1", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and says in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_fit_with_too_few_payloads_says_why_and_exits_non_zero():
    out = subprocess.run([sys.executable, "-m", "hopbench", "fit", "tests/golden/run-v1"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "at least 3 payload sizes" in out.stderr and "run/tcp 2" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_sweep_that_plans_nothing_is_refused_before_creating_a_folder(tmp_path):
    from hopbench.config_sweep import load_sweep
    from hopbench.orchestration.sweep import SweepOptions, run_sweep

    cfg = dataclasses.replace(load_sweep("tests/data/sweep-tiny.toml"), transports=["nosuch"])
    with pytest.raises(HopbenchError, match="nothing to measure"):
        run_sweep(cfg, load_shape().shape, results_root=tmp_path, options=SweepOptions(only_rungs=["loopback"]))
    assert not any(tmp_path.iterdir())


def test_a_csv_edited_after_its_report_is_refused_in_one_line(tmp_path):
    import shutil

    from hopbench.analysis.data import load_groups
    from hopbench.results import manifest_entry

    run = tmp_path / "run"
    shutil.copytree("tests/golden/run-v1", run)
    doc = json.loads((run / "report.json").read_text())
    doc["files"] = {n: manifest_entry((run / n).read_text()) for n in ("samples.csv", "summary.csv")}
    (run / "report.json").write_text(json.dumps(doc))
    load_groups(run)
    text = (run / "samples.csv").read_text()
    (run / "samples.csv").write_text(text[: len(text) // 2])  # cut at a line boundary or not: either is caught
    with pytest.raises(HopbenchError, match="samples.csv: does not match report.json"):
        load_groups(run)


@pytest.mark.parametrize("text, want", [("10.0.0.1", ("10.0.0.1", 5201)), ("10.0.0.1:7000", ("10.0.0.1", 7000)),
                                        ("[::1]:7000", ("::1", 7000)), ("::1", ("::1", 5201)), ("host", ("host", 5201))])
def test_a_peer_without_a_port_is_the_servers_default_port(text, want):
    from hopbench.config import DEFAULT_PORT, parse_hostport

    assert parse_hostport(text, default_port=DEFAULT_PORT) == want


def test_no_build_output_is_tracked():
    """Issue 42: hopbench/_codec.cpython-311-*.so was tracked and rebuilt by the install, so a
    fresh clone was dirty after `make sweep`. Compiled files are build outputs, ignored."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "*.so", "*.o", "*.pyc"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked == [], tracked


def test_golden_results_of_every_older_schema_load_and_newer_are_refused(tmp_path):
    groups, top = D.load_groups(GOLDEN / "sweep-v1")
    assert top["schema_version"] == 1 and {g.payload for g in groups} >= {"T1", "T3"}
    assert all(len(g.repeat_p50_ns) == 2 and g.repeat_ids == [0, 1] for g in groups)
    (g_run, *_), _ = D.load_groups(GOLDEN / "run-v1")
    assert g_run.rung == "run" and g_run.software == "hopbench 0.1.0"
    r = cli("fit", str(shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "s")))
    assert r.returncode == 0, r.stderr
    # export keeps each record's own software version
    assert {rec["software"] for rec in E.records(groups, top, "g", "s", rid="r-1")} == {"hopbench 0.1.0"}
    newer = shutil.copytree(GOLDEN / "run-v1", tmp_path / "newer")
    rep = json.loads((newer / "report.json").read_text())
    rep["schema_version"] = 99
    (newer / "report.json").write_text(json.dumps(rep))
    r = cli("verdict", str(newer))
    assert r.returncode != 0 and "written by a newer hopbench" in r.stderr and "upgrade" in r.stderr


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
