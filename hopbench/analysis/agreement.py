"""How often a prediction from decoded states agrees with the one from the raw states
(issue 52): top-1 agreement and the mean KL divergence of the logits, each with its
interval over positions and prompts, and the bar below which a codec changes the drafts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: a codec whose top-1 agreement interval reaches below this changes the drafts
AGREEMENT_BAR = 0.99
Z95 = 1.959963984540054


def wilson(hits: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (not zero-width at 0 or 1)."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


def _bootstrap(per_prompt: list[tuple[float, int]], seed: int, reps: int = 2000) -> tuple[float, float]:
    """A 95% percentile interval of a pooled mean, the prompts resampled (positions within a
    prompt are not independent); each prompt's (sum, count)."""
    rng = np.random.default_rng(seed)
    sums = np.array([s for s, _ in per_prompt], dtype=np.float64)
    counts = np.array([c for _, c in per_prompt], dtype=np.float64)
    pick = rng.integers(0, len(per_prompt), size=(reps, len(per_prompt)))
    means = sums[pick].sum(axis=1) / np.maximum(counts[pick].sum(axis=1), 1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def positions(raw: np.ndarray, decoded: np.ndarray, lr: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One prompt's logits from raw and decoded states, [positions, vocab] each: per position
    whether the top-1 agrees, and KL(raw || decoded) in nats (`lr`: raw's log_softmax, where
    several decoded states are compared with the same raw one)."""
    lr = log_softmax(raw) if lr is None else lr
    ld = log_softmax(decoded)
    kl = np.maximum((np.exp(lr) * (lr - ld)).sum(axis=-1), 0.0)
    return raw.argmax(axis=-1) == decoded.argmax(axis=-1), kl


def summarise(hits: list[np.ndarray], kls: list[np.ndarray], seed: int = 0) -> dict[str, Any]:
    """Per prompt, its positions' agreement and KL (positions): top-1 agreement (its interval
    the wider of Wilson's over positions and a bootstrap over prompts) and the mean KL (a
    bootstrap over prompts), with n."""
    n = int(sum(h.size for h in hits))
    agree = int(sum(int(h.sum()) for h in hits))
    w = wilson(agree, n)
    b = _bootstrap([(float(h.sum()), h.size) for h in hits], seed)
    kl_mean = float(sum(k.sum() for k in kls) / max(n, 1))
    kb = _bootstrap([(float(k.sum()), k.size) for k in kls], seed + 1)
    return {"n": n, "prompts": len(hits), "top1": agree / n if n else None,
            "top1_lo": min(w[0], b[0]), "top1_hi": max(w[1], b[1]),
            "kl": kl_mean, "kl_lo": kb[0], "kl_hi": kb[1]}


def compare(raw: list[np.ndarray], decoded: list[np.ndarray], seed: int = 0) -> dict[str, Any]:
    """Logits from raw and decoded states, one [positions, vocab] pair per prompt: summarise
    of their positions."""
    pairs = [positions(r, d) for r, d in zip(raw, decoded)]
    return summarise([h for h, _ in pairs], [k for _, k in pairs], seed)


def identical(n: int, prompts: int) -> dict[str, Any]:
    """A codec whose decoded bytes are the raw bytes: the same inputs, so the same logits."""
    lo, hi = wilson(n, n)
    return {"n": n, "prompts": prompts, "top1": 1.0, "top1_lo": lo, "top1_hi": hi, "kl": 0.0, "kl_lo": 0.0,
            "kl_hi": 0.0, "identical_bytes": True}


def changes_drafts(row: dict[str, Any], bar: float = AGREEMENT_BAR) -> bool:
    """The codec's agreement interval reaches below the bar: it changes the drafts (never
    for identical bytes, whose agreement is exact however few the positions)."""
    return not row.get("identical_bytes") and row.get("top1_lo") is not None and row["top1_lo"] < bar


def headlines(rows: list[dict[str, Any]], measure: str) -> dict[str, dict[str, Any]]:
    """Per codec, its worst tap's agreement by `measure` (the lowest interval), and the call."""
    out = {}
    for name in dict.fromkeys(r["codec"] for r in rows):
        worst = min((r for r in rows if r["codec"] == name and r["measure"] == measure),
                    key=lambda r: (r["top1_lo"], r["top1"]))
        out[name] = {**worst, "changes_drafts": changes_drafts(worst)}
    return out


def verb(h: dict[str, Any], bar: float = AGREEMENT_BAR) -> str:
    """What a headline says the codec does: keeps the drafts (its interval at or above the
    bar), changes them (its agreement below it), or may change them (the agreement above the
    bar, the interval not: too few positions to show it keeps them)."""
    if not changes_drafts(h, bar):
        return "keeps the drafts"
    if h["top1"] is not None and h["top1"] >= bar:
        return f"may change the drafts (too few positions, n = {h['n']:,}, to show it keeps them)"
    return "changes the drafts"


def verb_with_bar(h: dict[str, Any]) -> str:
    """verb, and the bar it was judged against where the codec does not keep the drafts (a
    headline carried by for_codec: its record's bar)."""
    bar = h.get("bar", AGREEMENT_BAR)
    return verb(h, bar) + (f" (the bar: {bar:.0%})" if changes_drafts(h, bar) else "")


def text(r: dict[str, Any]) -> str:
    """'99.71% [99.40-99.86, n = 1,234]', or 'identical bytes' for a codec that changed none."""
    if r.get("identical_bytes"):
        return f"100% (identical bytes, n = {r['n']:,})"
    return f"{r['top1']:.2%} [{r['top1_lo']:.2%}-{r['top1_hi']:.2%}, n = {r['n']:,}]"


def for_codec(record: dict[str, Any] | None, codec: str) -> dict[str, Any] | None:
    """A codec's headline in an agreement record (a run's report.json `agreement`), with the
    record's source label; None where it was not measured."""
    if not record:
        return None
    h = (record.get("headline") or {}).get(codec)
    return None if h is None else {**h, "source": record.get("source", ""), "bar": record.get("bar", AGREEMENT_BAR)}


def said(h: dict[str, Any]) -> str:
    """'top-1 agreement 98.46% [97.20-99.16, n = 651] (proxy: SmolLM2-135M ..., worst tap 9)'."""
    where = f", worst tap {h['tap']}" if h.get("tap") not in (None, "all") else ""
    return f"top-1 agreement {text(h)} ({h.get('source', '')}{where})"


__all__ = ["AGREEMENT_BAR", "changes_drafts", "compare", "for_codec", "headlines", "identical", "log_softmax",
           "positions", "said", "summarise", "text", "verb", "verb_with_bar", "wilson"]
