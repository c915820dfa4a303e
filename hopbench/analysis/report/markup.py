"""The page's small pieces: escaping, a number from the document with its data-k path, a
level's name, a call's class."""

from __future__ import annotations

import html
import json
from typing import Any

from hopbench.analysis import verdict as V
from hopbench.estimate import pct


def _esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def num(doc: dict, path: str, nd: int = 1, x: float = 1.0, sign: bool = False) -> str:
    """A number as shown, tied to its path in the JSON document (data-k) and the factor it is shown in (data-x)."""
    v = _get(doc, path)
    if v is None:
        return "-"
    shown = format(v * x, f"{'+' if sign else ''},.{nd}f").replace("-", "&minus;")
    return f'<span class="n" data-k="{path}" data-x="{x:g}">{shown}</span>'


def _get(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if doc is None:
            return None
        doc = doc[int(part)] if isinstance(doc, list) else doc.get(part)
    return doc


def _level(level: float | None, scope: str | None) -> str:
    """An interval's achieved level, marked when it is within one run only."""
    return "-" if level is None else pct(level) + (" (one run)" if scope == "within-run" else "")


def _call_class(decision: str) -> str:
    """A verdict's decision (verdict.Decision's value, as the document holds it) as its class."""
    return V.Decision(decision).tone




def _flat(v: Any) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else "" if v is None else str(v)
