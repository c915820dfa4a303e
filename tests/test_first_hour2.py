"""Issue 28 (the first hour, second pass): each item a user hit, as a test."""

from hopbench.analysis.data import Group
from hopbench.analysis.plot import cdf_tokens


def _g(tokens, samples=True, gap=0.0):
    import numpy as np

    g = Group("r", "tcp", f"T{tokens}", tokens, tokens * 61440, 8, gap, None)
    if samples:
        g.samples.append(np.arange(1, 11, dtype=np.int64))
    return g


def test_cdfs_show_the_measured_token_counts_not_a_fixed_list():
    """Item 10: the CDFs were hard-coded to T = 1, 3, 8, so a T = 2 run drew nothing."""
    assert cdf_tokens([_g(2)]) == [2]
    assert cdf_tokens([_g(t) for t in (1, 2, 3)]) == [1, 2, 3]
    picked = cdf_tokens([_g(t) for t in range(1, 9)])
    assert len(picked) == 4 and picked[0] == 1 and picked[-1] == 8
    assert cdf_tokens([_g(3, gap=80.0), _g(5, samples=False)]) == []


def _run(server, folder, payloads, **kw):
    from hopbench.orchestration.runner import run_session
    from hopbench.records import RunConfig

    folder.mkdir()
    run_session(server.host, server.port, payloads, RunConfig("tcp", k=2, id_bytes=4, cycles=20, warmup=2, **kw),
                folder=folder)
    return folder


def _hb(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "hopbench", *map(str, args)], capture_output=True, text=True, timeout=180)


def test_a_run_with_think_time_gets_a_verdict_and_an_answer_for_its_gap(server, tmp_path):
    """Item 1: `run --tokens 3 --gap-ms 80` then verdict said 'no measurement at T = 3 (measured T: 3)'."""
    import json

    from hopbench.records import Payload

    folder = _run(server, tmp_path / "r", [Payload("T3", 3, 184320, 8)], gap_ms=5.0)
    out = _hb("verdict", folder, "--json")
    assert out.returncode == 0, out.stderr
    (v,) = json.loads(out.stdout)["results"][0]["verdicts"]
    assert v["rung"] == "run +5 ms gap"
    assert _hb("report", folder).returncode == 0
    page = (folder / "report.html").read_text()
    assert 'id="answer"' in page and "run +5 ms gap" in page


def test_plot_draws_a_bytes_only_run_like_report_does(server, tmp_path):
    """Item 8: plot refused the README's `run --bytes grid` folder ('no measurement at T = 3')."""
    from hopbench.records import Payload

    folder = _run(server, tmp_path / "b", [Payload(f"B{n}", None, n, 8) for n in (64, 4096, 65536)])
    out = _hb("plot", folder)
    assert out.returncode == 0, out.stderr
    assert (folder / "plots" / "latency_vs_payload.svg").exists() and not (folder / "plots" / "hop_cost.svg").exists()
    assert "no hop-cost figure" in out.stdout
    assert _hb("report", folder).returncode == 0


def test_every_command_gives_the_same_fit_interval(server, tmp_path):
    """Item 5: export and hopbench.load fitted with 50 resamples, fit and report with 300, so
    a single run's (bootstrapped) beta interval differed by command."""
    import json

    import hopbench
    from hopbench.records import Payload

    folder = _run(server, tmp_path / "b", [Payload(f"B{n}", None, n, 8) for n in (64, 4096, 65536, 262144)])
    out = _hb("fit", folder, "--json")
    assert out.returncode == 0, out.stderr
    (f,) = json.loads(out.stdout)["fits"]
    assert f["ci_scope"] == "within-run"  # the bootstrapped case, where the resample count matters
    (row,) = hopbench.load(folder).fits.to_dict("records")
    assert row["beta_ci_lo_mbit_s"] == f["beta_ci"][0] * 8 / 1e6 and row["beta_ci_hi_mbit_s"] == f["beta_ci"][1] * 8 / 1e6
    doc = json.loads(_hb("report", folder, "--json").stdout)
    assert doc["fits"][0]["beta_ci"] == f["beta_ci"]
