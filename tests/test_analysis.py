"""Analysis on synthetic data: the fit recovers alpha/beta and a planted breakpoint, the
verdict arithmetic, export idempotence and preservation, plots, compare."""

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from hopbench.analysis import compare as C
from hopbench.analysis import export as E
from hopbench.analysis import fit as F
from hopbench.analysis import verdict as V
from hopbench.analysis.data import Group
from hopbench.analysis.plot import cdf_tokens
from hopbench.cli import app
from hopbench.errors import ConfigError, HopbenchError
from hopbench.records import CellKey, Place, Series
from tests.conftest import cli, run_folder


def synth_groups(rung, alpha, beta, sizes, noise=0.02, reps=5, seed=0, rate=None, transport="tcp", bp=None, alpha2=None,
                 beta2=None):
    rng = np.random.default_rng(seed)
    gs = []
    for x in sizes:
        a, b = (alpha, beta) if bp is None or x < bp else (alpha2, beta2)
        true = a + x / b
        g = Group(CellKey(Place(rung), Series(transport), f"B{x}", None, x, 8), rate)
        for r in range(reps):
            s = (true * (1 + noise * rng.standard_normal(400)) * 1e9).astype(np.int64)
            g.samples.append(s)
            g.repeat_p50_ns.append(float(np.median(s)))
            g.repeat_ids.append(r)
            g.n_cycles.append(len(s))
        gs.append(g)
    return gs


SIZES = [int(v) for v in np.geomspace(64, 4 * 2**20, 12)]


def test_fit_recovers_alpha_beta():
    gs = synth_groups("r", 150e-6, 117.5e6, SIZES, rate=1000)
    (f,) = F.fit_groups(gs, 61440, 3, boot=100)
    assert f.alpha_s == pytest.approx(150e-6, rel=0.05)
    assert f.beta_Bps == pytest.approx(117.5e6, rel=0.03)
    assert f.alpha_ci[0] <= 150e-6 <= f.alpha_ci[1] or abs(f.alpha_s - 150e-6) < 5e-6
    assert f.beta_ci[0] < f.beta_Bps < f.beta_ci[1]
    assert f.breakpoint_bytes is None and f.regime == "bandwidth-bound"
    assert f.n_half_bytes == pytest.approx(150e-6 * 117.5e6, rel=0.06)
    assert f.goodput_ratio == pytest.approx(117.5e6 / (1000e6 / 8 * 1448 / 1538), rel=0.03)


def test_a_fits_interval_holds_its_own_point():
    """Issue 42: loopback zmq printed beta 26,216.8 Mbit/s with a 95% CI of 27,642.8-36,622.4
    (the point from the fit through the cell medians, the interval from the per-repeat fits'
    own centre). The interval is widened to hold the point, and the method says so."""
    mbit = 1e6 / 8
    seg = F.Line(alpha_s=20e-6, beta_Bps=26216.8 * mbit, max_rel_resid=0.1, sse=0.0, lo_bytes=64, hi_bytes=1 << 22)
    ci = F.SegmentCI((18e-6, 22e-6), (27642.8 * mbit, 36622.4 * mbit), 0.95, "repeats", F.RANDOM_GROUPS, 5)
    out = F._holding_point(ci, seg)
    assert out.beta_ci == (26216.8 * mbit, 36622.4 * mbit) and out.alpha_ci == ci.alpha_ci
    assert out.method == F.RANDOM_GROUPS + F.WIDENED
    assert F._holding_point(out, seg) == out  # already holds it: unchanged
    for seed in range(4):  # and every fit of a noisy sweep, two segments or one, holds its own point
        gs = synth_groups("r", 30e-6, 3.3e9, SIZES, noise=0.3, reps=3, seed=seed, bp=300000, alpha2=80e-6, beta2=2e9)
        for f in F.fit_groups(gs, 61440, 3, boot=50):
            assert f.alpha_ci[0] <= f.alpha_s <= f.alpha_ci[1] and f.beta_ci[0] <= f.beta_Bps <= f.beta_ci[1], f


def test_fit_finds_planted_breakpoint():
    # eager below 64 KiB, rendezvous above: another alpha and beta
    gs = synth_groups("r", 20e-6, 2e9, SIZES, bp=65536, alpha2=400e-6, beta2=1e9, noise=0.01)
    (f,) = F.fit_groups(gs, 61440, 3, boot=50)
    assert f.breakpoint_bytes is not None and 20000 < f.breakpoint_bytes < 200000
    assert len(f.segments) == 2


def test_regime_latency_bound_and_crossover_sentence():
    fast = synth_groups("roce", 190e-6, 25e9, SIZES, transport="tcp")
    slow = synth_groups("1gbe", 100e-6, 117e6, SIZES, transport="tcp", seed=1)
    fits = F.fit_groups(fast + slow, 61440, 3, boot=20)
    by = {f.rung: f for f in fits}
    assert by["roce"].regime == "latency-bound" and by["1gbe"].regime == "bandwidth-bound"
    assert "the crossover sits between 1gbe and roce" in F.crossover(fits)["tcp"]


def est(v, lo, hi, level=0.95, reps=5):
    from hopbench.estimate import Estimate

    return Estimate(v, lo, hi, level, "repeats", "test", reps, 1000)


def test_verdict_reproduces_the_study():
    inp = V.Inputs(15.88, 89.34, 24.05)
    gbe = V.verdict("1gbe", "tcp", 1.713, inp)
    roce = V.verdict("roce", "tcp", 0.198, inp)
    fast_ethernet = V.verdict("100mb", "tcp", 16.02, inp)
    assert gbe.projected_tok_s == pytest.approx(28.59, abs=0.015) and round(gbe.gain * 100) == 19
    assert round(roce.gain * 100) == 21
    # the study's rule: hop within 1% of break-even (16.02 / 15.88 = +0.88%)
    assert fast_ethernet.call == "dead heat" and fast_ethernet.hop_vs_break_even == pytest.approx(0.0088, abs=1e-4)
    assert V.verdict("x", "tcp", 16.2, inp).call == "keep the drafter local"  # +2.0%: outside the 1%
    # hand-computed: cycle 89.34 - 15.88 + 10 = 83.46; 24.05 * 89.34 = 2148.627; / 83.46 = 25.74439
    v = V.verdict("x", "tcp", est(10.0, 9.0, 11.0), inp)
    assert v.projected_cycle_ms == pytest.approx(83.46)
    assert v.projected_tok_s == pytest.approx(25.74439, abs=1e-4)
    # propagated: the hop's CI ends map to tok/s near project(11) .. project(9)
    assert v.projected_tok_s_ci[0] == pytest.approx(V.project(11.0, inp)[1], rel=0.01)
    assert v.projected_tok_s_ci[1] == pytest.approx(V.project(9.0, inp)[1], rel=0.01)
    # a CI that straddles break-even, point outside the tolerance: with no bar, undecided, not a dead heat
    assert V.verdict("x", "tcp", est(15.0, 14.0, 17.0), V.Inputs(15.88, 89.34, 24.05, min_gain=0)).call.startswith(
        "undecided")
    # issue 42: the same interval wholly below the 5% bar is a certain no, not undecided
    assert V.verdict("x", "tcp", est(15.0, 14.0, 17.0), inp).call.startswith("not worth it")
    assert V.verdict("x", "tcp", est(20.0, 19.0, 21.0), inp).call == "keep the drafter local"


def test_verdict_calls_from_the_whole_interval_against_the_bar():
    """Issue 42: emu-100m's gain +0.2% with a 95% interval of -0.8%..+0.2% was "undecided
    (straddles break-even)" though all of it is below the 5% bar; the best series per rung
    was the lowest point hop, so one noisy series of a few repeats decided a rung."""
    inp = V.Inputs(15.88, 89.34, 24.05)
    D = V.Decision
    assert V.decide(0.002, (-0.008, 0.002), 0.05, inp)[1].startswith("not worth it (+0.2% < 5%)")
    assert V.decide(0.002, (-0.008, 0.002), 0.05, inp)[0] is D.NOT_WORTH
    assert V.decide(-0.001, (-0.008, -0.0005), 0.05, inp) == (D.KEEP, "keep the drafter local")
    und = V.decide(0.06, (0.04, 0.08), -0.3, inp)
    assert und[0] is D.UNDECIDED and und[1].startswith("undecided (the 95% interval +4.0%..+8.0% holds the 5% bar")
    assert V.decide(0.06, (0.051, 0.08), -0.3, inp) == (D.MOVE, "move the drafter")
    assert V.decide(0.001, (-0.01, 0.01), 0.005, inp) == (D.DEAD_HEAT, "dead heat")
    assert [d.tone for d in (D.MOVE, D.KEEP, D.DEAD_HEAT, D.NOT_NETWORK, D.CHANGES_DRAFTS)] == \
        ["pays", "costs", "even", "costs", "even"]
    noisy = V.verdict("r", "zmq", est(0.5, 0.196, 33.9), inp)  # the lowest point hop, a huge interval
    tight = V.verdict("r", "tcp", est(1.7, 1.65, 1.75), inp)
    slow = V.verdict("s", "tcp", est(5.0, 4.9, 5.1), inp)
    assert noisy.call.startswith("undecided") and tight.call == "move the drafter"
    assert V.best_per_rung([noisy, tight, slow]) == {"r": 1, "s": 2}


def test_verdict_input_uncertainty_widens_the_projection():
    exact = V.verdict("x", "tcp", est(10.0, 9.9, 10.1), V.Inputs(15.88, 89.34, 24.05))
    fuzzy = V.verdict("x", "tcp", est(10.0, 9.9, 10.1), V.Inputs(15.88, 89.34, 24.05, t_draft_pm=2.0, tok_s_pm=1.0))
    w = lambda v: v.projected_tok_s_ci[1] - v.projected_tok_s_ci[0]  # noqa: E731
    assert w(fuzzy) > 3 * w(exact)
    # an input with a +- and no hop CI still gets a propagated interval
    assert V.verdict("x", "tcp", 10.0, V.Inputs(15.88, 89.34, 24.05, t_draft_pm=1.0)).projected_tok_s_ci is not None
    assert V.parse_quantity("15.88+-0.4", "--t-draft") == (15.88, 0.4)
    assert V.parse_quantity("15.88±0.4", "--t-draft") == (15.88, 0.4)
    with pytest.raises(ConfigError, match="expected a number"):
        V.parse_quantity("fast", "--t-draft")


def test_export_idempotent_and_preserves_foreign_content(tmp_path):
    path = tmp_path / "data" / "case-studies.json"
    path.parent.mkdir()
    foreign = {"title": "studies", "figures": [{"id": "fig1", "x": [1, 2]}],
               "runs": [{"id": "manual-1", "note": "kept as is", "p50_ms": 16.02}]}
    path.write_text(json.dumps(foreign))
    gs = synth_groups("emu-1g", 100e-6, 117e6, SIZES[:4], reps=2)
    recs = E.records(gs, {"created_utc": "2026-12-02T00:00:00+00:00"}, "sweep-x", "remote-drafter", rid="r-1")
    assert E.upsert(path, recs) == (4, 0, [])
    first = json.loads(path.read_text())
    assert E.upsert(path, recs) == (0, 4, [])
    second = json.loads(path.read_text())
    assert first == second and len(second["runs"]) == 5
    assert second["figures"] == foreign["figures"] and second["title"] == "studies"
    assert second["runs"][0] == foreign["runs"][0]
    assert E.to_csv(recs).splitlines()[0].startswith("id,schema_version,study,result_id,source")


def test_export_refuses_unparseable_file(tmp_path):
    path = tmp_path / "case-studies.json"
    path.write_text("{not json")
    with pytest.raises(HopbenchError, match="refusing"):
        E.upsert(path, [])
    assert path.read_text() == "{not json"


def _run_group(samples, started=0.0):
    g = Group(CellKey(Place("r"), Series("tcp"), "T3", 3, 184320, 8), None)
    g.samples.append(samples.astype(np.int64))
    g.repeat_p50_ns.append(float(np.median(samples)))
    g.repeat_ids.append(0)
    g.started_unix.append(started)
    g.n_cycles.append(len(samples))
    return g


def test_compare_one_run_each_is_judged_against_the_run_spread():
    rng = np.random.default_rng(3)
    base = rng.lognormal(np.log(1e6), 0.2, 2000)
    # 5% apart with thousands of cycles: cycle-level CIs would call it; run-level cannot
    small = C.compare_groups(_run_group(base), _run_group(rng.lognormal(np.log(1.05e6), 0.2, 2000)))
    assert small.design == "one run each" and not small.significant
    assert small.spread == C.DEFAULT_RUN_SPREAD and "not resolvable" in small.call
    big = C.compare_groups(_run_group(base), _run_group(rng.lognormal(np.log(1.5e6), 0.2, 2000)))
    assert big.significant and big.diff_rel == pytest.approx(0.5, abs=0.05)
    tight = C.compare_groups(_run_group(base), _run_group(rng.lognormal(np.log(1.05e6), 0.2, 2000)), run_spread=0.01)
    assert tight.significant and "given" in tight.spread_source


def test_compare_interleaved_runs_are_paired():
    rng = np.random.default_rng(5)
    a = Group(CellKey(Place("r"), Series("tcp"), "T3", 3, 184320, 8), None)
    b = Group(CellKey(Place("r"), Series("tcp"), "T3", 3, 184320, 8), None)
    for r in range(5):
        f = rng.lognormal(0, 0.05)  # shared by the pair: cancels when paired
        for g, shift, t in ((a, 1.0, 10.0 * r), (b, 1.1, 10.0 * r + 5)):
            g.repeat_p50_ns.append(1e6 * f * shift * rng.lognormal(0, 0.01))
            g.repeat_ids.append(r)
            g.started_unix.append(t)
            g.n_cycles.append(100)
    assert C.interleaved(a, b)
    c = C.compare_groups(a, b, paired=True)
    assert c.design == "paired by repeat" and c.significant and c.diff_rel == pytest.approx(0.10, abs=0.03)
    b.started_unix = [100.0 + t for t in b.started_unix]  # B measured after all of A: not a pairing
    assert not C.interleaved(a, b)


def test_baseline_warnings_list_every_difference():
    a = {"created_utc": "2026-11-01T00:00:00+00:00", "software": "hopbench 0.1.0",
         "client_env": {"hostname": "h1", "kernel": "6.1", "cpu_governor": "performance", "packages": {"numpy": "1"}},
         "config": {"poll": "busy"}}
    b = {"created_utc": "2026-12-01T00:00:00+00:00", "software": "hopbench 0.2.0",
         "client_env": {"hostname": "h1", "kernel": "6.5", "cpu_governor": "powersave", "packages": {"numpy": "2"}},
         "config": {"poll": "block"}}
    ws = C.baseline_warnings(a, b)
    text = "\n".join(ws)
    assert "30.0 days before" in text and "client kernel" in text and "governor" in text
    assert "numpy '1' -> '2'" in text and "poll" in text and "software" in text
    assert "hostname" not in text and C.baseline_warnings(a, a) == []


def test_plots_render_expected_series(tmp_path):
    pytest.importorskip("matplotlib")
    from hopbench.analysis import plot as P

    gs = synth_groups("emu-1g", 100e-6, 117e6, SIZES, rate=1000) + synth_groups("loopback", 20e-6, 5e9, SIZES, seed=2)
    for g in gs[:3]:
        g.cell = replace(g.cell, tokens=3)
    fits = F.fit_groups(gs, 61440, 3, boot=10)
    fig = P.latency_vs_payload(gs, fits, 61440)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("emu-1g (median" in s for s in labels) and any("loopback (median" in s for s in labels)
    assert any("n½" in s for s in labels)
    assert fig.axes[0].get_xscale() == "log" and "bytes" in fig.axes[0].get_xlabel()
    vs = [V.verdict("emu-1g", "tcp", est(1.5, 1.4, 1.6), V.Inputs(15.88, 89.34, 24.05))]
    fig2 = P.hop_cost(vs, 15.88, 3)
    labels2 = [t.get_text() for t in fig2.axes[0].get_legend().get_texts()]
    assert "tcp" in labels2 and any("break-even" in s for s in labels2)
    paths = P.write_all(tmp_path, gs, fits, vs, 61440, 15.88, 3)
    assert {p.suffix for p in paths} == {".png", ".svg"} and all(p.stat().st_size > 1000 for p in paths)


runner = CliRunner()


def test_verdict_without_the_operating_payload_fails_and_takes_several_folders(server, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out, tok in ((a, "1"), (b, "3")):
        res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", tok, "--cycles", "20",
                                  "--warmup", "2", "--no-floor", "--out", str(out)])
        assert res.exit_code == 0, res.output
    r = cli("verdict", str(a))
    assert r.returncode != 0 and "no measurement at the operating payload T = 3 (measured T: 1)" in r.stderr
    r = cli("verdict", str(b), str(b), "--t-draft", "15.88+-0.4")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(f"== {b}") == 2 and "t_draft = 15.88+-0.4 ms" in r.stdout


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


def _g(tokens, samples=True, gap=0.0):
    import numpy as np

    g = Group(CellKey(Place("r", gap_ms=gap), Series("tcp"), f"T{tokens}", tokens, tokens * 61440, 8), None)
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


def test_a_run_with_think_time_gets_a_verdict_and_an_answer_for_its_gap(server, tmp_path):
    """Item 1: `run --tokens 3 --gap-ms 80` then verdict said 'no measurement at T = 3 (measured T: 3)'."""
    import json

    from hopbench.records import Payload

    folder = run_folder(server, tmp_path / "r", [Payload("T3", 3, 184320, 8)], gap_ms=5.0)
    out = cli("verdict", folder, "--json")
    assert out.returncode == 0, out.stderr
    (v,) = json.loads(out.stdout)["results"][0]["verdicts"]
    assert v["rung"] == "run +5 ms gap"
    assert cli("report", folder).returncode == 0
    page = (folder / "report.html").read_text()
    assert 'id="answer"' in page and "run +5 ms gap" in page


def test_export_never_replaces_a_complete_record_with_a_worse_one(tmp_path):
    """Item 4: exporting a copy taken while a run was still writing replaced the complete
    run's records ('0 added, 3 updated') and one lost its fit."""
    import json

    from hopbench.analysis import export as E

    gs = synth_groups("emu-1g", 100e-6, 117e6, SIZES[:4], reps=3)
    path = tmp_path / "cs.json"
    done = E.records(gs, {"status": "complete"}, "s", "study", rid="r-1")
    assert E.upsert(path, done)[:2] == (4, 0)
    partial = E.records([g for g in gs], {"status": "incomplete"}, "s", "study", rid="r-1")
    added, updated, kept = E.upsert(path, partial)
    assert (added, updated, len(kept)) == (0, 0, 4) and all("complete result" in k for k in kept)
    assert json.loads(path.read_text())["runs"] == done
    fewer = [dict(r, n=r["n"] - 1) for r in done]
    assert E.upsert(path, fewer)[1:] == (0, [f"{r['rung']}/{r['transport']}/{r['payload']}: fewer cycles "
                                              f"({r['n'] - 1} < {r['n']})" for r in done])


def test_export_writes_next_to_the_results_by_default(tmp_path):
    """Item 4: the default target was the repository's tracked data/case-studies.json."""

    folder = shutil.copytree("tests/golden/sweep-v1", tmp_path / "sweep-v1")
    out = cli("export", folder)
    assert out.returncode == 0, out.stderr
    assert (folder / "analysis" / "case-studies.json").exists() and "study 'unnamed'" in out.stdout


def test_a_single_runs_hop_bar_is_inside_its_log_axis():
    """Item 10: a single run's hop-cost bar was invisible on its log axis."""
    from hopbench.analysis import verdict as V
    from hopbench.analysis.plot import _plt, hop_cost

    inp = V.Inputs(15.88, 89.34, 24.05)
    fig = hop_cost([V.verdict("run", "tcp", 0.0999, inp)], inp.t_draft_ms, 3)
    try:
        (ax,) = fig.axes
        bottom, top = ax.get_ylim()
        assert bottom < 0.0999 < top and bottom > 0
    finally:
        _plt().close(fig)


def test_the_advice_for_a_missing_operating_payload_is_runnable_as_given():
    """Issue 62 item 13: a streamed run (which takes no --tokens) was advised to measure T = 65."""
    from types import SimpleNamespace

    from hopbench.analysis.hops import hop_rows
    from hopbench.errors import ConfigError

    streamed = [SimpleNamespace(tokens=3, streamed=True, rung="r", gap_ms=0)]
    with pytest.raises(ConfigError, match=r"measure a streamed run with K \+ 1 = 65 \(hopbench run --stream layers --k 64\)"):
        hop_rows("f", 65, streamed)
    plain = [SimpleNamespace(tokens=3, streamed=False, rung="r", gap_ms=0)]
    with pytest.raises(ConfigError, match=r"verdict --tokens with one of them, or measure T = 65 \(hopbench run --tokens 65\)"):
        hop_rows("f", 65, plain)


def test_a_streamed_run_under_another_forward_is_named_by_the_verdict():
    """Issue 62 item 12: a run at --forward-ms 20 was projected with the default cycle's 73.46 ms
    forward without a word."""
    from hopbench.analysis import verdict as V
    from hopbench.analysis.commands import forward_note

    inputs = V.Inputs(15.88, 89.34, 24.05)
    spec = {"chunks": 5, "chunk_bytes": 18432, "forward_ms": 20.0}  # a run's StreamSpec as recorded
    note = forward_note({"config": {"stream": spec}}, inputs)
    assert note.startswith("warning: the streamed series were measured under a 20 ms forward") and "73.46 ms" in note
    assert "warning" not in forward_note({"config": {"stream": {**spec, "forward_ms": 73.46}}}, inputs)
    assert forward_note({"config": {}}, inputs) is None  # not streamed: nothing to say
    assert forward_note({"config": {"stream": ["off", "layers"]}}, inputs) is None  # a sweep's: its modes
