"""Files are checked when read (issue 27): the golden folders (and a copy of the run in
today's format, with its CSV manifest) mutated tens of thousands of ways - truncated files,
deleted keys, swapped types, foreign schemas, edited CSV bytes, duplicated cells, deleted
files - and read back by every reader. Each outcome is either an answer or one HopbenchError
line naming a file; never any other exception (a traceback). Where the folder has a manifest,
every edit of a CSV is caught (an error, or a warning that the cell was left out)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hopbench.analysis import data as D
from hopbench.analysis import fit as F
from hopbench.cli import app
from hopbench.errors import HopbenchError
from hopbench.results import manifest_entry

GOLDEN = Path(__file__).parent / "golden"
BATCHES = 10  # 10 x 1,000 = 10,000 mutations (batches keep each test under the 60 s faulthandler limit)
MUTATIONS = int(__import__("os").environ.get("HOPBENCH_MUTATIONS", 1_000))  # per batch
SWAPS = ["x", "", [], {}, None, 1.5, True, -1, 10**30, [1, "a"], {"a": None}, float("nan")]


def _manifested_run(dest: Path) -> Path:
    """run-v1 as today's writer leaves it: report.json with the manifest of its CSVs."""
    shutil.copytree(GOLDEN / "run-v1", dest)
    doc = json.loads((dest / "report.json").read_text())
    doc["files"] = {n: manifest_entry((dest / n).read_text()) for n in ("samples.csv", "summary.csv")}
    (dest / "report.json").write_text(json.dumps(doc, indent=1))
    return dest


def _paths(doc, prefix=()):
    """Every key path in a JSON document (for deletions and type swaps)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:4]):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _at(doc, path):
    for p in path[:-1]:
        doc = doc[p]
    return doc


def mutate(folder: Path, rng: random.Random) -> tuple[str, list[tuple[Path, bytes | None]]]:
    """Apply one mutation; return its name and what to restore (path, original bytes or None to delete)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    f = rng.choice(files)
    orig = f.read_bytes()
    undo = [(f, orig)]
    kind = rng.choice(["truncate", "delete-key", "swap-type", "foreign-schema", "csv-edit", "csv-line", "duplicate-cell",
                       "delete-file"])
    if kind in ("delete-key", "swap-type", "foreign-schema"):
        f = rng.choice([p for p in files if p.suffix == ".json"])
        orig = f.read_bytes()
        undo = [(f, orig)]
        doc = json.loads(orig)
        if kind == "foreign-schema":
            key = rng.choice(["schema", "schema_version"])
            doc[key] = rng.choice(["hopbench.other", "pyperf", 99, "2", None, 0])
        else:
            paths = list(_paths(doc))
            path = rng.choice(paths)
            parent = _at(doc, path)
            if kind == "delete-key" and isinstance(parent, dict):
                del parent[path[-1]]
            elif kind == "delete-key":
                parent.pop(path[-1])
            else:
                parent[path[-1]] = rng.choice(SWAPS)
        f.write_text(json.dumps(doc))
    elif kind == "truncate":
        f.write_bytes(orig[:rng.randrange(len(orig) + 1)])
    elif kind in ("csv-edit", "csv-line"):
        f = rng.choice([p for p in files if p.suffix == ".csv"])
        orig = f.read_bytes()
        undo = [(f, orig)]
        lines = orig.split(b"\n")
        i = rng.randrange(len(lines))
        if kind == "csv-line":
            op = rng.choice(["drop", "dup", "swap"])
            if op == "drop":
                del lines[i]
            elif op == "dup":
                lines.insert(i, lines[i])
            else:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
        elif lines[i]:
            b = bytearray(lines[i])
            b[rng.randrange(len(b))] = rng.choice(b"0123456789,-.aZ\"\xff")
            lines[i] = bytes(b)
        f.write_bytes(b"\n".join(lines))
    elif kind == "duplicate-cell":
        cells = sorted(p.parent for p in folder.glob("cells/*/*/*/*/report.json"))
        if cells:
            src = rng.choice(cells)
            dst = src.parent / f"r{rng.randrange(2, 9)}"
            if not dst.exists():
                shutil.copytree(src, dst)
                undo = [(dst, None)]
        else:
            f.write_bytes(orig + orig)  # a run: the file twice over
    else:  # delete-file
        f.unlink()
    return kind, undo


def restore(undo):
    for path, data in undo:
        if data is None:
            shutil.rmtree(path)
        else:
            path.write_bytes(data)


def read_everything(folder: Path) -> None:
    """What every analysis command reads, in the order they read it."""
    D.recorded_shape(folder, 61440, 3)
    D.result_id(folder)
    D.first_header(folder)
    groups, _ = D.load_groups(folder)
    F.fit_groups(groups, 61440, 3, boot=0)


@pytest.fixture()
def folders(tmp_path):
    out = {}
    for name in ("run-v1", "sweep-v1"):
        shutil.copytree(GOLDEN / name, tmp_path / name)
        out[name] = tmp_path / name
    out["run-now"] = _manifested_run(tmp_path / "run-now")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(BATCHES))
def test_ten_thousand_mutations_no_traceback(folders, batch):
    rng = random.Random(27_000 + batch)
    for f in folders.values():
        read_everything(f)  # the unmutated folders read cleanly
    outcomes: dict[str, int] = {}
    for i in range(MUTATIONS):
        name = rng.choice(sorted(folders))
        folder = folders[name]
        D._WARNED.clear()
        kind, undo = mutate(folder, rng)
        target, before = undo[0]
        csv_changed = (before is not None and target.suffix == ".csv"
                       and (not target.exists() or target.read_bytes() != before))
        try:
            read_everything(folder)
            result = "read"
        except HopbenchError as exc:
            msg = str(exc)
            assert "\n" not in msg.strip() and str(folder) in msg, (kind, msg)
            result = "refused"
        except Exception as exc:  # a traceback: what this test exists to catch
            raise AssertionError(f"mutation {i} ({kind} on {name}) raised {type(exc).__name__}: {exc}") from exc
        finally:
            restore(undo)
        warned = bool(D._WARNED)
        if name == "run-now" and csv_changed:  # the manifest catches every change to a CSV
            assert result == "refused", (kind, target)
        key = f"{kind}:{result}{'+warned' if warned else ''}"
        outcomes[key] = outcomes.get(key, 0) + 1
    print(sorted(outcomes.items()))
    assert sum(outcomes.values()) == MUTATIONS
    assert any(k.endswith("refused") for k in outcomes) and any(":read" in k for k in outcomes)


@pytest.mark.slow
def test_every_command_refuses_a_mutated_folder_in_one_line(folders, tmp_path):
    """Each reading command on a sample of mutations: exit 0, or a one-line error; never an exception."""
    runner = CliRunner()
    rng = random.Random(28)
    commands = [
        lambda f: ["fit", str(f)],
        lambda f: ["verdict", str(f)],
        lambda f: ["compare", str(folders["run-v1"]), str(f)],
        lambda f: ["export", str(f), "--into", str(tmp_path / f"cs-{rng.randrange(10**9)}.json")],
    ]
    import hopbench

    for i in range(160):
        name = rng.choice(sorted(folders))
        folder = folders[name]
        kind, undo = mutate(folder, rng)
        try:
            args = commands[i % len(commands)](folder)
            res = runner.invoke(app, args)
            if res.exception is not None and not isinstance(res.exception, (SystemExit, HopbenchError)):
                raise AssertionError(f"{' '.join(args)} after {kind}: {type(res.exception).__name__}: {res.exception}")
            try:
                hopbench.load(folder)
            except HopbenchError:
                pass
        finally:
            restore(undo)


def test_a_sweeps_closing_analysis_names_the_cell_it_leaves_out(tmp_path, capsys):
    """The sweep's closing analysis (fit, verdict, plots in one reading) read the folder first
    for its recorded shape with warnings silenced, and the memoised reading kept them silent:
    a bad cell was left out without a word. Every reading now says it, once."""
    from hopbench.analysis import commands as C
    from hopbench.shape import load_shape

    folder = shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "s")
    bad = sorted(folder.glob("cells/*/*/*/*/report.json"))[0]
    bad.write_text('{"schema": 3')
    D._WARNED.clear()
    C.report_all(folder, load_shape(None), show=lambda *a, **k: None)
    err = capsys.readouterr().err
    assert err.count("left out") == 1 and str(bad.parent.relative_to(folder)) in err
