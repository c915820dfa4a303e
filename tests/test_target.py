"""The streamed hop's real producer (issue 65, docs/STREAM.md "A real producer"): a target's
forward whose taps are sent as they land. CI has no GPU: the same layer stack runs on the CPU
(`--target cpu`, its stand-in), so the taps, the copies, the sends, the extraction cost, the
profile and the verdict's cost are tested end to end here; the GPU's graphs on the device."""

from __future__ import annotations

import csv
import json

import pytest

from hopbench.errors import ConfigError
from hopbench.models.target import TargetForward, TargetShape
from hopbench.workload import stream as ST
from tests.conftest import cli

TAPS = (2, 5, 9)


@pytest.fixture(scope="module")
def target():
    return TargetForward(TargetShape(12, TAPS, 64, 3), 6.0, "cpu", width=256)


def test_each_tap_carries_the_rows_the_forward_had_after_its_layer(target):
    torch = target.torch
    start = target.h.clone()
    target.start()
    got = [bytes(target.tap(j)) for j in range(len(TAPS))]
    target.end()
    ready, copied, end = target.times()
    target.h.copy_(start)  # the same forward again, layer by layer, from the same rows
    want = []
    for layers in range(1, 13):
        target.layer()
        if layers in TAPS:
            want.append(bytes(target.h.view(torch.uint8).numpy().reshape(-1)))
    assert got == want  # each chunk is its tap's rows, not a later layer's
    assert all(r <= c for r, c in zip(ready, copied)) and ready == sorted(ready) and copied[-1] <= end


def test_the_extraction_cost_is_a_paired_difference_with_its_interval(target):
    x = target.extraction_cost(blocks=6, reps=2)
    assert x["cost_lo_ms"] <= x["cost_ms"] <= x["cost_hi_ms"] and 0 < x["level"] < 1
    assert x["without_taps_ms"] > 0 and x["with_taps_ms"] > 0 and x["graphs"] == "off"
    prof = target.layer_times_ms(3)
    assert len(prof) == 12 and prof == sorted(prof)


def test_a_bad_target_shape_is_one_line():
    with pytest.raises(ConfigError, match="taps"):
        TargetForward(TargetShape(4, (2, 6), 64, 3), 5.0, "cpu", width=64)
    with pytest.raises(ConfigError, match="rise"):
        TargetForward(TargetShape(8, (5, 2), 64, 3), 5.0, "cpu", width=64)


@pytest.mark.slow  # over 5 s on a 2-core VM (REVIEW6 F10: the fast tier stays fast)
def test_run_target_streams_the_forwards_taps_and_the_verdict_pays_its_measured_cost(server, tmp_path):
    out = tmp_path / "t"
    r = cli("run", "--peer", f"{server.host}:{server.port}", "--stream", "layers,forward=8,target=cpu",
            "--cycles", "12", "--warmup", "2", "--no-floor", "--out", out, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    st = rep["config"]["stream"]
    x = st["producer"]["extraction"]
    assert st["target"] == "cpu" and st["cost_ms"] == pytest.approx(max(0.0, x["cost_ms"]))
    assert st["forward_ms"] == pytest.approx(x["without_taps_ms"]) and len(st["ready_ms"]) == 5
    said = r.stdout + r.stderr
    assert "extraction cost (measured, not given)" in said and "from the clock with its measured times" in said, said
    with open(out / "samples.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["payload"] == "T3~target" and row["phase"] == "timed"]
    assert len(rows) == 12
    for row in rows:
        sent, seen = int(row["taps_sent_ns"]), int(row["forward_seen_ns"])
        assert 0 < int(row["tap_ready_ns"]) <= int(row["tap_copied_ns"]) <= int(row["forward_end_ns"])
        assert 0 < sent <= seen  # every chunk went before the end message
    # the profile it wrote replays on a host without the producer: --layer-times reads it
    prof = ST.read_layer_times(out / "layer-times.csv")
    assert len(prof) == st["layers"] and prof == sorted(prof)
    ST.schedule(st["taps"], st["forward_ms"], st["layers"], prof)
    v = cli("verdict", out)
    assert v.returncode == 0, v.stderr
    assert "extraction cost" in v.stdout and "measured by the run's cpu producer" in v.stdout, v.stdout
    line = next(ln for ln in v.stdout.splitlines() if "tcp~target" in ln)
    exposed = next(p["summary"]["p50_ns"] for p in rep["payloads"] if p["payload"] == "T3~target") / 1e6
    assert float(line.split()[3]) == pytest.approx(exposed + st["cost_ms"], abs=2e-3)  # the hop pays the cost


@pytest.mark.parametrize("args, says", [
    (["--stream", "layers,target=tpu"], "target=tpu: clock, gpu"),
    (["--stream", "layers,target=cpu", "--clients", "2"], "not with --clients"),
    (["--stream", "layers,cost=1,target=cpu"], "measures the layer times and the extraction"),
])
def test_bad_target_runs_are_one_line_before_anything_is_measured(server, tmp_path, args, says):
    r = cli("run", "--peer", f"{server.host}:{server.port}", *args, "--out", tmp_path / "x")
    assert r.returncode != 0 and says in r.stderr and not (tmp_path / "x").exists(), r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr


def test_the_old_target_flag_still_reads_with_its_note(server, tmp_path):
    r = cli("run", "--peer", f"{server.host}:{server.port}", "--target", "cpu", "--out", tmp_path / "x")
    assert r.returncode != 0 and not (tmp_path / "x").exists()
    assert r.stderr.splitlines()[0] == ("note: --target is now --stream layers,target=WHO; the old spelling goes in "
                                        "the next release"), r.stderr
    assert len(r.stderr.splitlines()) == 2 and "--stream off,target=cpu: off, or layers" in r.stderr, r.stderr


def test_target_gpu_without_a_gpu_is_refused_in_one_line(server, tmp_path):
    from hopbench.models.drafter import load_torch

    if load_torch().cuda.is_available():
        pytest.skip("this host has a GPU: the refusal is for hosts without one")
    r = cli("run", "--peer", f"{server.host}:{server.port}", "--stream", "layers,target=gpu", "--out",
            tmp_path / "x")
    assert r.returncode != 0 and "torch sees no GPU" in r.stderr and not (tmp_path / "x").exists(), r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr



def test_the_sizing_scales_the_width_to_the_forward_asked_and_records_its_rounds():
    t = TargetForward(TargetShape(12, TAPS, 64, 3), 8.0, "cpu")
    rounds = t.record()["sizing"]
    assert 1 <= len(rounds) <= 6 and rounds[-1] == {"width": t.width, "forward_ms": t.measured_ms}
    for a, b in zip(rounds, rounds[1:]):  # each round scaled by what the one before missed
        assert b["width"] == max(64, int(a["width"] * 8.0 / a["forward_ms"]))
