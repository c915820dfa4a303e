"""`hopbench report`: one self-contained HTML page for a run or a sweep folder.

The page leads with the question and the verdict, then the fit (CIs, regimes), the
figures (inline SVG: no network fetch, no script needed to read it), the cells, the
warnings, both ends' environments and the commands that reproduce it. The same numbers
are one JSON document (`build(...)[0]`, `hopbench report --json`, and embedded in the page
as <script type="application/json" id="hopbench-data">); every number the page shows
carries `data-k` (its path in that document) and `data-x` (the factor it was shown in), so
a test can check the page against the JSON (tests/test_report_browser.py).

Rooms: document.py (the JSON document), answers.py (the Answer's sentences), page.py (the
HTML), markup.py (their shared small pieces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hopbench.analysis.report.answers import _answer
from hopbench.analysis.report.document import REPORT_SCHEMA, REPORT_SCHEMA_VERSION, Analysed, analyse, build_document
from hopbench.analysis.report.page import render
from hopbench.records import MIN_GAIN

__all__ = ["REPORT_SCHEMA", "REPORT_SCHEMA_VERSION", "Analysed", "_answer", "analyse", "build", "build_document", "render"]


def build(folder: Path, scfg, min_gain: float = MIN_GAIN, spec: list[Path] | None = None,
          inputs: Any = None) -> tuple[dict, str]:
    a = analyse(folder, scfg, min_gain, spec, inputs)  # one Reading for the document, the figures and the warnings
    doc = build_document(a)
    return doc, render(a, doc)

