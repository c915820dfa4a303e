"""Issue 29's structural rules that a linter does not express, checked over the source."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = re.compile(r"""["'](sweep\.json|report\.json|samples\.csv|summary\.csv|cycles\.csv|hopbench\.sweep)["']"""
                    r"""|cells/\*|\.failed-""")


def _sources():
    for top in ("hopbench", "transports"):
        yield from sorted((ROOT / top).rglob("*.py"))


def test_the_result_folder_layout_is_spelled_only_in_the_results_module():
    """One owner of the result folder (results.ResultFolder): no other module names a file of
    its layout, the cells glob or the set-aside rule."""
    owner = ROOT / "hopbench" / "results.py"
    assert LAYOUT.search(owner.read_text())  # the pattern still finds the owner's own spelling
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _sources() if p != owner
             for i, line in enumerate(p.read_text().splitlines(), 1) if LAYOUT.search(line)]
    assert not found, "\n".join(found)
