"""Issue 30: coverage-guided fuzzing (fuzz/: atheris). `make test` runs a short campaign of
every target (a regression that makes a parser crash on bad input fails CI); `make fuzz`
runs long ones. Every crash a campaign found is replayed here as a regression test."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import targets as T
from fuzz.seeds import seeds

ROOT = Path(__file__).resolve().parent.parent
FOUND = ROOT / "tests" / "data" / "fuzz"  # inputs that crashed a target once: <target>-<what>


@pytest.mark.parametrize("path", sorted(FOUND.iterdir()), ids=lambda p: p.name)
def test_every_crash_found_is_answered_now(path):
    T.check(path.name.split("-")[0], path.read_bytes())


@pytest.mark.parametrize("name", sorted(T.TARGETS))
def test_the_seeds_are_answered_and_real(name):
    """The seeds (real frames and files) pass through their target; the session seeds are
    served as the document says (the plain stream ends in BYE with no error)."""
    for data in seeds(name):
        T.check(name, data)


def test_the_harness_leaves_the_process_as_it_found_it():
    from hopbench.core import session as S

    before = S.get_transport
    for data in seeds("session"):
        T.check("session", data)
    assert S.get_transport is before


def test_a_target_fails_on_what_is_not_a_documented_answer(monkeypatch):
    """The harness cannot pass everything: an exception outside the documented answers is a crash."""
    monkeypatch.setitem(T.TARGETS, "boom", lambda data: {}["missing"])
    with pytest.raises(KeyError):
        T.check("boom", b"x")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(T.TARGETS))
def test_short_campaign(name, tmp_path):
    pytest.importorskip("atheris", reason="atheris is not installed (pip install 'hopbench[dev]')")
    r = subprocess.run([sys.executable, str(ROOT / "fuzz" / "run.py"), name, "-runs=3000", "-max_len=4096",
                        f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    crash = [p.name for p in tmp_path.glob("crash-*")]
    assert r.returncode == 0 and not crash, (crash, r.stderr[-3000:])
    assert re.search(r"Done 300[0-9] runs", r.stderr), r.stderr[-500:]  # libFuzzer may count a few past -runs


def test_a_huge_size_grid_is_refused_at_once():
    """Found by the long campaign as a slow unit (28 s and 51 M sizes for one flag)."""
    import time

    from hopbench.errors import ConfigError
    from hopbench.shape import load_shape, parse_bytes_grid

    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="at most 10000"):
        parse_bytes_grid("log:5:6:51946544", load_shape())
    assert time.monotonic() - t0 < 5
