"""The fuzz driver (atheris, coverage-guided): one target per process.

    python fuzz/run.py TARGET [-runs=N] [-max_len=N] [more libFuzzer flags]
    python fuzz/run.py --list

Seeds (fuzz/seeds.py, real frames and files) are written to a corpus folder
(fuzz/corpus/TARGET, kept between runs, ignored by git) which the fuzzer grows. A crash
(an exception that is not a documented answer, fuzz/targets.py) stops the run non-zero
and leaves the input in crash-* (libFuzzer's artifact) for a regression test."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    import atheris
except ImportError:
    raise SystemExit("fuzzing needs atheris: pip install 'hopbench[dev]' (or pip install atheris)") from None

with atheris.instrument_imports(include=["hopbench"]):
    from fuzz import targets as T
    from fuzz.seeds import seeds


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help", "--list"):
        print("targets: " + ", ".join(T.TARGETS))
        return
    name, flags = sys.argv[1], sys.argv[2:]
    if name not in T.TARGETS:
        raise SystemExit(f"unknown target {name!r} (targets: {', '.join(T.TARGETS)})")
    corpus = ROOT / "fuzz" / "corpus" / name
    corpus.mkdir(parents=True, exist_ok=True)
    for seed in seeds(name):
        (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)

    def one(data: bytes) -> None:
        T.check(name, data)

    atheris.Setup([sys.argv[0], *flags, str(corpus)], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
