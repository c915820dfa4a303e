"""`hopbench codecs --agreement`: each codec's effect on what a network predicts from the
states it decodes (issue 52, docs/CODECS.md "Agreement"), on the shipped proxy
(hopbench.core.proxy: SmolLM2-135M's own taps, five spread over its depth as the study's
drafter's are over GLM-5.2's).

For each codec and tap, two measures, each against the same computation on the raw tap
(BF16, as the hop sends it):
- continued: the decoded tap fed through the network's remaining layers (what the codec's
  noise changes in what the network computes);
- early exit: the final norm and the head on the tap itself (a "drafter" reading that tap).
The headline is the worst tap's continued agreement (the lowest interval)."""

from __future__ import annotations

import time
from importlib import resources
from typing import Any, Callable

import numpy as np

from hopbench.analysis import agreement as AG
from hopbench.core import codecs as C
from hopbench.core import proxy as X
from hopbench.core.hidden import to_bf16_bits

DEFAULT_CODECS = ("none", "zstd:1", "lz4", "fp8", "int8")
MAX_TOKENS = 96  # positions a prompt contributes at most (the table's time grows with them)


def prompts() -> list[str]:
    """The shipped prompts (hopbench/core/proxy_prompts.txt), blank-line separated."""
    text = resources.files("hopbench.core").joinpath("proxy_prompts.txt").read_text("utf-8")
    return [p.strip("\n") for p in text.split("\n\n") if p.strip()]


def measure(model: X.Model, codecs: list[str], texts: list[str], taps: list[int] | None = None,
            on_prompt: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The agreement table: per codec, per tap, continued and early-exit agreement."""
    taps = taps or X.spread_taps(model.cfg.layers)
    coders = {name: C.parse(name, model.cfg.hidden) for name in codecs}
    raw: dict[tuple[int, str], list[np.ndarray]] = {}
    # per (codec, tap, measure) the decoded side, aligned with raw's prompts: a prompt whose
    # decoded bytes are the raw bytes reuses the raw logits (the same inputs, the same logits)
    got: dict[tuple[str, int, str], list[np.ndarray]] = {}
    differs: set[tuple[str, int]] = set()  # (codec, tap) where some prompt's bytes changed
    t0 = time.perf_counter()
    for pi, text in enumerate(texts):
        ids = model.tokenizer.encode(text)[:MAX_TOKENS]
        states = model.taps(ids, taps)
        for k in taps:
            body = to_bf16_bits(states[k], "F32").view(np.uint8).reshape(-1)
            x = C.bf16_floats(body).reshape(states[k].shape)
            base = {"continued": model.continue_from(k, x), "early exit": model.logits(x)}
            for how, logits in base.items():
                raw.setdefault((k, how), []).append(logits)
            for name, codec in coders.items():
                back = np.empty_like(body)
                codec.decode(codec.encode(body), back)
                if np.array_equal(back, body):
                    out = base
                else:
                    differs.add((name, k))
                    y = C.bf16_floats(back).reshape(states[k].shape)
                    out = {"continued": model.continue_from(k, y), "early exit": model.logits(y)}
                for how, logits in out.items():
                    got.setdefault((name, k, how), []).append(logits)
        if on_prompt:
            on_prompt(pi + 1, len(texts))
    rows = []
    for name in codecs:
        for k in taps:
            for how in ("continued", "early exit"):
                n = int(sum(a.shape[0] for a in raw[(k, how)]))
                r = AG.compare(raw[(k, how)], got[(name, k, how)], seed=k) if (name, k) in differs else \
                    AG.identical(n, len(texts))
                rows.append({"codec": coders[name].name, "lossless": coders[name].lossless, "tap": k, "measure": how,
                             **r})
    return {"schema": "hopbench.agreement", "schema_version": 1, "proxy": model.name, "model": model.cfg.__dict__,
            "taps": taps, "prompts": len(texts), "bar": AG.AGREEMENT_BAR, "rows": rows,
            "headline": headlines(rows), "seconds": time.perf_counter() - t0,
            "label": f"proxy: {model.name}, its own taps; it bounds what a codec destroys in a real network's "
                     "states, not the learned drafter's own sensitivity"}


def headlines(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per codec, its worst tap's continued agreement (the lowest interval), and the call."""
    out = {}
    for name in dict.fromkeys(r["codec"] for r in rows):
        worst = min((r for r in rows if r["codec"] == name and r["measure"] == "continued"),
                    key=lambda r: (r["top1_lo"], r["top1"]))
        out[name] = {**worst, "changes_drafts": AG.changes_drafts(worst)}
    return out


def agreement_command(codec: str | None, json_out: bool, say: Callable[[str], None]) -> dict[str, Any]:
    import json

    names = [c.strip() for c in codec.split(",") if c.strip()] if codec else list(DEFAULT_CODECS)
    for name in names:
        C.parse(name, 1)  # an unknown codec, or a missing library, before the model loads (the width: no matter)
    t0 = time.perf_counter()
    model = X.Model(X.shipped_path())
    texts = prompts()
    record = measure(model, names, texts)
    record["seconds_with_load"] = time.perf_counter() - t0
    if json_out:
        say(json.dumps(record, indent=1))
        return record
    say(f"codec agreement on the {record['label']}")
    say(f"{len(texts)} shipped prompts, {record['rows'][0]['n']} positions a tap; taps after layers {record['taps']} of "
        f"{model.cfg.layers}; 95% intervals (top-1: the wider of Wilson's over positions and a bootstrap over prompts)")
    say(f"{'codec':10s} {'tap':>3s} {'measure':10s} {'top-1 agreement':>26s} {'KL nats':>22s}")
    for r in record["rows"]:
        say(f"{r['codec']:10s} {r['tap']:3d} {r['measure']:10s} {agreement_text(r):>26s} "
            f"{r['kl']:.2e} [{r['kl_lo']:.1e}-{r['kl_hi']:.1e}]")
    for name, h in record["headline"].items():
        call = "changes the drafts" if h["changes_drafts"] else "keeps the drafts"
        say(f"{name}: {call} (worst tap {h['tap']}, continued: {agreement_text(h)}; bar {AG.AGREEMENT_BAR:.0%})")
    say(f"{record['seconds_with_load']:.0f} s with the model's load")
    return record


def agreement_text(r: dict[str, Any]) -> str:
    """'99.71% [99.40-99.86, n = 1,234]', or 'identical bytes' for a codec that changed none."""
    if r.get("identical_bytes"):
        return f"100% (identical bytes, n = {r['n']:,})"
    return f"{r['top1']:.2%} [{r['top1_lo']:.2%}-{r['top1_hi']:.2%}, n = {r['n']:,}]"
