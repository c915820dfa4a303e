"""The sweep end to end over the emulated rungs (CI runs it as root), its resume, and
teardown after an interruption mid-sweep; its preflight (missing extras, ethtool, a real
rung's server), its folder lock, and attempts set aside."""

import csv
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hopbench.analysis import data as D
from hopbench.config_sweep import load_rung, load_sweep
from hopbench.errors import ConfigError
from hopbench.orchestration import netem
from hopbench.orchestration.sweep.plan import cycles_for, plan_cells
from hopbench.records import Place, Series
from hopbench.shape import load_shape
from tests.conftest import GOLDEN, ROOT, dead_port

TINY = Path(__file__).parent / "data" / "sweep-tiny.toml"
ok, why = netem.available()
if ok and not __import__("shutil").which("ethtool"):  # the emulated rungs' pre-flight needs it (veth offloads)
    ok, why = False, "ethtool not installed (apt-get install ethtool; `make test` installs it as root)"


def test_plan_is_interleaved_seeded_and_complete():
    cfg = load_sweep(TINY)
    rungs = [load_rung(n) for n in cfg.rungs]
    sh = load_shape().shape
    a = plan_cells(cfg, rungs, sh, 1234)
    assert a == plan_cells(cfg, rungs, sh, 1234)
    assert a != plan_cells(cfg, rungs, sh, 99)
    # every cell once per repeat; repeats are interleaved batches, not one cell repeated
    per = len(a) // cfg.repeats
    assert {c.key.rsplit("/", 1)[0] for c in a[:per]} == {c.key.rsplit("/", 1)[0] for c in a[per:]}
    assert [c.repeat for c in a] == [0] * per + [1] * per
    # gap cells only at the operating payload
    assert {c.payload for c in a if c.gap_ms} == {"T3"}
    assert len({c.rung for c in a[:10]}) > 1  # rungs interleaved within a repeat


def test_cycles_budget_respects_rate():
    cfg = load_sweep(Path("configs/sweep.toml"))
    slow, fast = load_rung("emu-100m"), load_rung("loopback")
    from hopbench.orchestration.sweep.plan import Cell

    big = Cell(Place("x"), Series("tcp"), "B4194304", None, 4194304, 8)
    assert cycles_for(big, slow, cfg) == cfg.min_cycles
    assert cycles_for(big, fast, cfg) > cycles_for(big, slow, cfg)


def test_bad_rung_key_names_key_and_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('[rung]\nname = "x"\nkind = "loopback"\ntransports = ["tcp"]\nspeed = 3\n')
    with pytest.raises(ConfigError, match=r"unknown key 'rung.speed'"):
        load_rung(str(p))


def run_sweep_cli(out, *extra, timeout=600):
    # SIGINT as at a terminal: a job started in the background without job control (make test
    # from a script run with &) inherits SIGINT ignored, Python then never raises
    # KeyboardInterrupt, and the "interrupted" sweep ran to its end (seen once, reproduced)
    return subprocess.Popen([sys.executable, "-m", "hopbench", "sweep", str(TINY), "--out", str(out), "--no-analyse", *extra],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            env={**os.environ, "HOPBENCH_PROGRESS_S": "0"})  # a line per cell: interrupt at 8


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.skipif(not ok, reason=f"needs network namespaces: {why}")
def test_sweep_interrupt_teardown_and_resume(tmp_path):
    out = tmp_path / "sweep"
    before = set(netem.leftovers())
    p = run_sweep_cli(out)
    # wait until a few cells are done (progress goes to a non-terminal as plain lines, here
    # one per cell, no carriage returns), then Ctrl-C the whole process group
    buf = ""
    while True:
        line = p.stderr.readline()
        assert line, f"sweep ended early: {buf[-500:]}"
        assert "\r" not in line
        buf += line
        m = re.match(r"\[(\d+)/\d+\]", line)
        if m and int(m.group(1)) >= 8:
            break
    os.killpg(p.pid, signal.SIGINT)
    p.wait(60)
    assert p.returncode != 0
    assert set(netem.leftovers()) == before, "namespaces left behind after Ctrl-C"
    state = json.loads((out / "sweep.json").read_text())
    assert state["status"] == "incomplete"
    done_before = {str(r.parent) for r in out.glob("cells/*/*/*/*/report.json")
                   if json.loads(r.read_text())["status"] == "complete"}
    assert len(done_before) >= 7
    mtimes = {d: (Path(d) / "report.json").stat().st_mtime_ns for d in done_before}

    r = run_sweep_cli(out)
    stdout, stderr = r.communicate(timeout=600)
    assert r.returncode == 0, stderr[-2000:]
    assert "already complete" in stdout
    assert set(netem.leftovers()) == before
    state = json.loads((out / "sweep.json").read_text())
    assert state["status"] == "complete" and state["seed"] == 1234 and not state["failed_cells"]
    # finished cells were not measured again
    assert all((Path(d) / "report.json").stat().st_mtime_ns == m for d, m in mtimes.items())
    rows = list(csv.DictReader(open(out / "summary.csv")))
    cells = {(r["rung"], r["transport"], r["payload"], r["gap_ms"]) for r in rows}
    # 3 rungs x 3 transports x (T1, T3, 3 byte sizes) + T3 with the gap
    assert len(cells) == 3 * 3 * 6
    assert all(int(r["repeats"]) == 2 for r in rows)
    assert "tbf" in json.dumps(state["rungs"]["emu-1g"]["link"]["qdisc"])
    # analysis runs on it without flags
    a = subprocess.run([sys.executable, "-m", "hopbench", "fit", str(out)], capture_output=True, text=True, timeout=300)
    assert a.returncode == 0 and "emu-1g" in a.stdout, a.stderr


def test_placement_axis_labels_cells():
    cfg = load_sweep(TINY)
    rungs = [load_rung("loopback")]
    sh = load_shape().shape
    one = plan_cells(cfg, rungs, sh, 1, ["split-busy"])
    two = plan_cells(cfg, rungs, sh, 1, ["split-busy", "same-block"])
    assert {c.label for c in one} == {"loopback"}
    assert {c.label for c in two} == {"loopback@split-busy", "loopback@same-block"} and len(two) == 2 * len(one)


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_auto_placement_is_measured_and_swept(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(TINY.read_text().replace('rungs = ["loopback", "emu-unshaped", "emu-1g"]', 'rungs = ["loopback"]')
                   .replace('transports = ["tcp", "zmq", "ucx"]', 'transports = ["tcp"]')
                   .replace('placements = ["unpinned-auto"]', 'placements = ["auto", "unpinned-block"]')
                   .replace("repeats = 2", "repeats = 1"))
    out = tmp_path / "sw"
    r = subprocess.run([sys.executable, "-m", "hopbench", "sweep", str(cfg), "--out", str(out), "--no-analyse"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((out / "sweep.json").read_text())
    chosen = state["placements_resolved"][0]
    cal = state["placement_calibration"]
    assert chosen in cal and all("p50_ns_64" in v for v in cal.values() if "error" not in v)
    assert chosen == min((n for n in cal if "error" not in cal[n]), key=lambda n: sum(cal[n].values()))
    labels = {row["rung"] for row in csv.DictReader(open(out / "summary.csv"))}
    assert labels == {f"loopback@{chosen}", "loopback@unpinned-block"}  # one label when the choice is that one
    # each end's recorded affinity matches the placement
    rep = json.loads(next((out / "cells").glob(f"loopback@{chosen}/tcp/T1-g0/r0/report.json")).read_text())
    if rep["placement"]["client_cpu"] is not None:
        assert rep["client_env"]["cpu_affinity"] == [int(rep["placement"]["client_cpu"])]
        assert rep["server_env"]["cpu_affinity"] == [int(rep["placement"]["server_cpu"])]


def test_rung_placement_overrides_sweep(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('[rung]\nname = "lb"\nkind = "loopback"\ntransports = ["tcp"]\nplacement = "same-block"\n')
    cfg = load_sweep(TINY)
    cells = plan_cells(cfg, [load_rung(str(p)), load_rung("loopback")], load_shape().shape, 1, ["split-busy"])
    assert {c.label for c in cells} == {"lb@same-block", "loopback"}


def test_a_minimal_sweep_config_names_only_its_rungs(tmp_path):
    """Issue 42: a minimal sweep config needed every key, reported one missing key per attempt."""
    from hopbench.config_sweep import SWEEP_DEFAULTS, load_sweep

    p = tmp_path / "mine.toml"
    p.write_text('[sweep]\nrungs = ["loopback"]\n')
    cfg = load_sweep(p)
    assert cfg.name == "mine" and cfg.rungs == ("loopback",) and cfg.repeats == SWEEP_DEFAULTS["repeats"]
    assert cfg.tokens == tuple(SWEEP_DEFAULTS["tokens"]) and cfg.operating_tokens == 3 and cfg.gaps_ms == (0.0,)
    p.write_text('[sweep]\nrepeats = 2\n')
    with pytest.raises(ConfigError, match="missing key sweep.rungs"):
        load_sweep(p)


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
    sweep = shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "s")
    cell = next(sweep.glob("cells/*/*/*/r0"))
    shutil.copytree(cell, cell.with_name("r0.failed-20261203T000000Z-3"))
    groups, _ = D.load_groups(sweep)
    assert all(len(g.repeat_p50_ns) == 2 for g in groups)


def test_a_second_writer_of_a_sweep_folder_is_refused_with_the_first_writers_pid(tmp_path):
    """Item 3: a second `make sweep` resumed the folder the first was writing (96 .failed-
    folders, a crash, sweep.json 'complete'). The first writer here is another process
    holding the folder's lock; the second is refused before it measures anything."""
    import json
    import subprocess
    import sys

    import pytest

    from hopbench.config_sweep import load_sweep
    from hopbench.errors import HopbenchError
    from hopbench.orchestration.sweep import SweepOptions, run_sweep
    from hopbench.shape import load_shape

    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps({"seed": 1, "status": "running"}))
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from hopbench.results import FolderLock; "
                               f"lock = FolderLock({str(folder)!r}).acquire(); print('locked', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        cfg = dataclasses.replace(load_sweep("tests/data/sweep-tiny.toml"), transports=("tcp",), placements=("unpinned-block",))
        before = sorted(p.name for p in folder.rglob("*"))
        with pytest.raises(HopbenchError, match=f"being written by another hopbench \\(pid {holder.pid}\\)"):
            run_sweep(cfg, load_shape().shape, results_root=tmp_path, out=folder, options=SweepOptions(only_rungs=["loopback"]),
                      log=lambda m: None)
        assert sorted(p.name for p in folder.rglob("*")) == before  # nothing written by the refused writer
    finally:
        holder.communicate("", timeout=30)
    from hopbench.results import FolderLock

    with FolderLock(folder):  # the first writer gone, the kernel dropped its lock
        pass


def test_a_real_rung_whose_server_does_not_answer_is_refused_in_the_preflight(tmp_path):
    """Item 7: a real-rung sweep against an unreachable peer printed 72 'cell failed' lines
    and left a folder of failed cells."""

    import pytest

    from hopbench.config_sweep import load_sweep
    from hopbench.errors import ConfigError
    from hopbench.orchestration.sweep import SweepOptions, run_sweep
    from hopbench.shape import load_shape

    rung = tmp_path / "lab.toml"
    rung.write_text(f'[rung]\nname = "lab"\nkind = "real"\npeer = "127.0.0.1:{dead_port()}"\ntransports = ["tcp"]\n')
    cfg = dataclasses.replace(load_sweep("tests/data/sweep-tiny.toml"), transports=("tcp",), placements=("unpinned-block",))
    with pytest.raises(ConfigError, match="no hopbench server answers at 127.0.0.1:"):
        run_sweep(cfg, load_shape().shape, results_root=tmp_path / "results", options=SweepOptions(only_rungs=[str(rung)]),
                  log=lambda m: None)
    assert not (tmp_path / "results").exists()


def test_a_real_rung_whose_server_answers_passes_the_preflight(server):
    from hopbench.orchestration.sweep.run import _server_answers

    assert _server_answers(server.host, server.port) is None


def test_plain_progress_says_something_every_ten_seconds(capsys, monkeypatch):
    """Issue 62: a piped sweep printed a line per 10% of its cells (the first after 201 s).
    Now: the first cell, then at most every PROGRESS_EVERY_S seconds, and the last."""
    from hopbench.orchestration.sweep import run as SR

    monkeypatch.delenv("HOPBENCH_PROGRESS_S", raising=False)
    for done, at in [(1, 0.5), (2, 3.0), (3, 9.0), (4, 11.0), (5, 12.0), (6, 21.5), (7, 22.0)]:
        SR.progress(done, 7, at, 1.0, f"rung/tcp/T{done}")
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split("]")[0] for ln in lines] == ["[1/7", "[4/7", "[6/7", "[7/7"], lines
    assert "left ~" in lines[0] and lines[1].endswith("rung/tcp/T4")
