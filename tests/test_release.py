"""Issue 27 (a tool that installs and answers like a released one): the shipped configs are
found outside a checkout, the registry comes from entry points and the test transport is
not in it, and "move the drafter" needs a gain worth a second box."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hopbench.cli import app
from hopbench.config import config_file, resolve_config
from hopbench.core.client import Session
from hopbench.errors import HopbenchError
from hopbench.orchestration.serverproc import ready_port
from hopbench.shape import load_shape
from tests.conftest import small_plan

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
    import dataclasses

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
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "*.so", "*.o", "*.pyc"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked == [], tracked
