"""REVIEW4 §5's done-when checks (issue 39), run by `make test` so they stay true. Each was a
shell line in the review; here each is a test over the tree. Two are taken differently, as
the issue asks: transports/ stays at the top level (the design card puts it there) and the
hole that mapping opened is closed by tests/test_architecture.py's
test_the_core_imports_no_transport_module; the `duplicates` tool of the review's §5.4 check
is not on a CI machine, so the identity that was declared twice is checked by type here."""

import ast
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "hopbench").rglob("*.py"), *(ROOT / "transports").rglob("*.py")])


def _grep(pattern: str, *tops: str, exclude: tuple[str, ...] = ()) -> list[str]:
    rx = re.compile(pattern)
    return [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for top in tops for p in sorted((ROOT / top).rglob("*.py"))
            if str(p.relative_to(ROOT)) not in exclude
            for i, line in enumerate(p.read_text().splitlines(), 1) if rx.search(line)]


def test_5_1_the_client_side_is_one_path_per_plan():
    client = (ROOT / "hopbench" / "core" / "client.py").read_text()
    assert client.count("get_transport(") <= 1
    assert not _grep(r'completed_cycles = |\.measurement = |getattr\(exc, "(completed_cycles|measurement)"', "hopbench")
    assert not _grep(r"type: ignore\[attr-defined\]", "hopbench/core")
    tree = ast.parse(client)
    assert max(f.end_lineno - f.lineno + 1 for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)) <= 40
    assert not _grep(r"^\s*(s|session|probe) = Session\(", "hopbench/orchestration")
    assert (ROOT / "hopbench" / "core" / "serving.py").read_text().count("codecs.parse(") <= 2


def test_5_2_one_room_per_file():
    big = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > 600}
    assert not big, big
    classes, functions = {}, {}
    for p in SOURCES:
        for node in ast.walk(ast.parse(p.read_text())):
            size = node.end_lineno - node.lineno + 1 if hasattr(node, "end_lineno") else 0
            if isinstance(node, ast.ClassDef) and size >= 250:
                classes[f"{p.relative_to(ROOT)}:{node.name}"] = size
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > 60:
                functions[f"{p.relative_to(ROOT)}:{node.name}"] = size
    assert not classes, classes
    assert not functions, functions
    ray = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "hopbench" / "orchestration").rglob("*.py"))
           if re.search(r"^\s*(import ray\b|from ray\b)", p.read_text(), re.M)]
    assert ray == ["hopbench/orchestration/matrix/ray.py"], ray
    assert not _grep(r"_run_command", "hopbench")
    assert re.search(r"def test_\w*to_argv", (ROOT / "tests" / "test_report.py").read_text())


def test_5_3_the_transport_contract_is_explicit():
    from hopbench.core import transport
    from hopbench.testing import conformance

    assert not _grep(r"\._timeout", "hopbench/core")
    assert not _grep(r'getattr\((channel|chan), "native_', "hopbench/core")
    assert not _grep(r"sched_yield", "transports")  # one spin policy: core.transport.Spinner
    assert not _grep(r"isinstance\(exc, c\)", "transports")  # the exception maps pick the most specific class
    assert all(hasattr(transport, n) for n in ("NativeCapable", "ControlChannel", "Spinner"))
    import inspect

    assert "maker" in str(inspect.signature(conformance.LOOP_CHECKS[0]))
    assert not _grep(r'check\("mytransport"\)', "hopbench")
    assert '["zmq", "ucx"]' not in (ROOT / "tests" / "test_conformance.py").read_text()


def test_5_4_identity_is_typed_and_read_typed():
    label_parsing = r'split\("@"\)|partition\("@"\)|partition\("\+"\)|split\(" \+"\)|"@" in |"\+" in |removesuffix\(f"@'
    assert not _grep(label_parsing, "hopbench/analysis", "hopbench/orchestration")
    assert not _grep(r"_MEMO", "hopbench/analysis")
    assert not _grep(r"json\.loads\(.*(RUN_FILE|SWEEP_FILE|sweep\.json|report\.json)", "hopbench",
                     exclude=("hopbench/results.py",))
    assert not _grep(r'"hopbench\.spec(-targets)?"', "hopbench", exclude=("hopbench/results.py",))
    # the cell identity declared once: a sweep cell is a records.CellKey, and so is a Group's
    from hopbench.analysis.data import Group
    from hopbench.orchestration.sweep.plan import Cell
    from hopbench.records import CellKey

    assert issubclass(Cell, CellKey) and Group.__dataclass_fields__["cell"].type in ("CellKey", CellKey)


def test_5_5_the_docs_are_true():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert not re.search(r"own three|tcp, zmq, ucx:", doc)
    assert not _grep(r"REGISTRY\)|from_shape|hopbench\.transport\.Channel|_expect\(state", "hopbench")
    seen = collections.defaultdict(set)  # each short alias names one module across the package
    for p in (ROOT / "hopbench").rglob("*.py"):
        for m in re.finditer(r"from (hopbench[\w.]*) import (\w+) as ([A-Z]{1,2})\b|import (hopbench[\w.]+) as "
                             r"([A-Z]{1,2})\b", p.read_text()):
            seen[m[3] or m[5]].add(f"{m[1]}.{m[2]}" if m[1] else m[4])
    assert all(len(v) == 1 for v in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_architecture import LAYOUT

    assert LAYOUT.search('glob("*/sweep.json")')
    assert not _grep(r"hidden: int = 6144", "hopbench")
