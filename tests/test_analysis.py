"""Analysis on synthetic data: the fit recovers alpha/beta and a planted breakpoint, the
verdict arithmetic, export idempotence and preservation, plots, compare."""

import json

import numpy as np
import pytest

from hopbench import compare as C
from hopbench import export as E
from hopbench import fit as F
from hopbench import verdict as V
from hopbench.data import Group


def synth_groups(rung, alpha, beta, sizes, noise=0.02, reps=5, seed=0, rate=None, transport="tcp", bp=None, alpha2=None, beta2=None):
    rng = np.random.default_rng(seed)
    gs = []
    for x in sizes:
        a, b = (alpha, beta) if bp is None or x < bp else (alpha2, beta2)
        true = a + x / b
        g = Group(rung, transport, f"B{x}", None, x, 8, 0.0, rate)
        for _ in range(reps):
            s = (true * (1 + noise * rng.standard_normal(400)) * 1e9).astype(np.int64)
            g.samples.append(s)
            g.repeat_p50_ns.append(float(np.median(s)))
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


def test_verdict_reproduces_the_study():
    inp = V.Inputs(15.88, 89.34, 24.05)
    gbe = V.verdict("1gbe", "tcp", 1.713, inp)
    roce = V.verdict("roce", "tcp", 0.198, inp)
    fast_ethernet = V.verdict("100mb", "tcp", 16.02, inp)
    assert gbe.projected_tok_s == pytest.approx(28.59, abs=0.015) and round(gbe.gain * 100) == 19
    assert round(roce.gain * 100) == 21
    assert fast_ethernet.call == "dead heat" and abs(fast_ethernet.gain) < 0.01
    # hand-computed: cycle 89.34 - 15.88 + 10 = 83.46; 24.05 * 89.34 = 2148.627; / 83.46 = 25.74439
    v = V.verdict("x", "tcp", 10.0, inp, (9.0, 11.0))
    assert v.projected_cycle_ms == pytest.approx(83.46)
    assert v.projected_tok_s == pytest.approx(25.74439, abs=1e-4)
    assert v.projected_tok_s_ci[0] < v.projected_tok_s < v.projected_tok_s_ci[1]
    assert V.verdict("x", "tcp", 15.0, inp, (14.0, 17.0)).call == "dead heat"  # CI straddles break-even
    assert V.verdict("x", "tcp", 20.0, inp, (19.0, 21.0)).call == "keep the drafter local"


def test_export_idempotent_and_preserves_foreign_content(tmp_path):
    path = tmp_path / "data" / "case-studies.json"
    path.parent.mkdir()
    foreign = {"title": "studies", "figures": [{"id": "fig1", "x": [1, 2]}],
               "runs": [{"id": "manual-1", "note": "kept as is", "p50_ms": 16.02}]}
    path.write_text(json.dumps(foreign))
    gs = synth_groups("emu-1g", 100e-6, 117e6, SIZES[:4], reps=2)
    recs = E.records(gs, {"created_utc": "2026-12-02T00:00:00+00:00"}, "sweep-x", "remote-drafter")
    assert E.upsert(path, recs) == (4, 0)
    first = json.loads(path.read_text())
    assert E.upsert(path, recs) == (0, 4)
    second = json.loads(path.read_text())
    assert first == second and len(second["runs"]) == 5
    assert second["figures"] == foreign["figures"] and second["title"] == "studies"
    assert second["runs"][0] == foreign["runs"][0]
    assert E.to_csv(recs).splitlines()[0].startswith("id,study,source")


def test_export_refuses_unparseable_file(tmp_path):
    path = tmp_path / "case-studies.json"
    path.write_text("{not json")
    with pytest.raises(Exception, match="refusing"):
        E.upsert(path, [])
    assert path.read_text() == "{not json"


def test_compare_flags_planted_shift_not_null():
    rng = np.random.default_rng(3)
    base = rng.lognormal(np.log(1e6), 0.2, 2000)

    def grp(samples):
        g = Group("r", "tcp", "T3", 3, 184320, 8, 0.0, None)
        g.samples.append(samples.astype(np.int64))
        g.repeat_p50_ns.append(float(np.median(samples)))
        return g

    shifted = C.compare_groups(grp(base), grp(rng.lognormal(np.log(1.05e6), 0.2, 2000)))
    null = C.compare_groups(grp(base), grp(rng.lognormal(np.log(1e6), 0.2, 2000)))
    assert shifted.significant and shifted.diff_rel == pytest.approx(0.05, abs=0.025)
    assert not null.significant


def test_plots_render_expected_series(tmp_path):
    pytest.importorskip("matplotlib")
    from hopbench import plot as P

    gs = synth_groups("emu-1g", 100e-6, 117e6, SIZES, rate=1000) + synth_groups("loopback", 20e-6, 5e9, SIZES, seed=2)
    for g in gs[:3]:
        g.tokens = 3
    fits = F.fit_groups(gs, 61440, 3, boot=10)
    fig = P.latency_vs_payload(gs, fits, 61440)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("emu-1g (median" in s for s in labels) and any("loopback (median" in s for s in labels)
    assert any("n½" in s for s in labels)
    assert fig.axes[0].get_xscale() == "log" and "bytes" in fig.axes[0].get_xlabel()
    vs = [V.verdict("emu-1g", "tcp", 1.5, V.Inputs(15.88, 89.34, 24.05), (1.4, 1.6))]
    fig2 = P.hop_cost(vs, 15.88, 3)
    labels2 = [t.get_text() for t in fig2.axes[0].get_legend().get_texts()]
    assert "tcp" in labels2 and any("break-even" in s for s in labels2)
    paths = P.write_all(tmp_path, gs, fits, vs, 61440, 15.88, 3)
    assert {p.suffix for p in paths} == {".png", ".svg"} and all(p.stat().st_size > 1000 for p in paths)
