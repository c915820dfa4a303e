"""hopbench.load: tidy DataFrames from result folders of any schema version, and the
notebook-style example in docs/examples runs."""

import shutil
import subprocess
import sys

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

import hopbench  # noqa: E402
from tests.conftest import GOLDEN, ROOT, cli  # noqa: E402


def test_load_gives_tidy_frames_that_match_the_estimator(tmp_path):
    from hopbench.analysis.data import load_groups

    f = hopbench.load(GOLDEN / "sweep-v1")
    assert set(f.cells.columns) >= {"rung", "transport", "payload", "p50_ms", "ci_level", "repeats"}
    assert len(f.cells) == 5 and (f.cells.repeats == 2).all()
    groups, _ = load_groups(GOLDEN / "sweep-v1")
    by_payload = {g.payload: g.estimate().value / 1e6 for g in groups}
    for _, row in f.cells.iterrows():
        assert row.p50_ms == pytest.approx(by_payload[row.payload])  # the same number as every command
    assert len(f.cycles) == sum(int(x.size) for g in groups for x in g.samples)
    assert set(f.fits.regime) <= {"bandwidth-bound", "latency-bound"}
    run = hopbench.load(GOLDEN / "run-v1")
    assert list(run.cells.rung.unique()) == ["run"]


def test_the_notebook_style_example_runs(tmp_path):
    folder = shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "s")
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "analyse_a_sweep.py"), str(folder),
                        str(tmp_path / "ex.png")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "regime" in r.stdout and (tmp_path / "ex.png").stat().st_size > 1000


def test_json_documents_of_the_analysis_commands(tmp_path):
    import json

    from hopbench.analysis.data import load_groups

    folder = shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "s")

    def hb(*args):
        r = cli(*args, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)  # one JSON document, nothing else on stdout

    v = hb("verdict", str(folder), "--json")
    assert v["schema"] == "hopbench.verdict" and v["results"][0]["operating_tokens"] == 3
    groups, _ = load_groups(folder)
    t3 = next(g for g in groups if g.payload == "T3")
    assert v["results"][0]["verdicts"][0]["hop_ms"] == pytest.approx(t3.estimate().value / 1e6)
    f = hb("fit", str(folder), "--json")
    assert {"fits", "crossover", "wire_check"} <= set(f) and f["fits"][0]["ci_level"] == 0.95
    t = hb("transports", "--json")
    assert {row["name"] for row in t["transports"]} >= {"tcp", "zmq", "ucx"}
    c = hb("compare", str(folder), str(folder), "--json")
    assert c["schema"] == "hopbench.compare" and len(c["comparisons"]) == 5
