"""`hopbench codecs --agreement`: each codec's effect on what a network predicts from the
states it decodes (issue 52, docs/CODECS.md "Agreement"), through one of two networks:

- the shipped proxy (ProxySource: hopbench.models.proxy, SmolLM2-135M on the shipped prompts,
  its own taps, five spread over its depth as the study's drafter's are over GLM-5.2's).
  Two measures per tap, each against the same computation on the raw tap (BF16, as the hop
  sends it): continued (the decoded tap fed through the remaining layers: what the codec's
  noise changes in what the network computes) and early exit (the final norm and the head
  on the tap itself: a "drafter" reading that tap). The headline: the worst tap's continued.
- the user's own drafter (DrafterSource: hopbench.models.drafter, its config.json or a preset,
  its weights), fed with the user's own aux states (FILE, as `codecs` and `run
  --payload-from` read them), T rows a body: its drafts (the argmax of its logits at every
  row) from decoded rows against those from raw rows. This is the real drafter's answer.

One loop (measure) serves both: per group (a prompt, a body) every state, raw and each
codec's decoded one, goes through the network in one batch (evaluate); a codec whose decoded
bytes are the raw ones reuses the raw logits (the same inputs); per position the top-1
agreement and KL are kept, the logits dropped (a table's logits would not fit in memory)."""

from __future__ import annotations

import json
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from hopbench import results as R
from hopbench.analysis import agreement as AG
from hopbench.core import codecs as C
from hopbench.errors import ConfigError
from hopbench.workload.hidden import to_bf16_bits

DEFAULT_CODECS = ("none", "zstd:1", "lz4", "fp8", "int8")
MAX_TOKENS = 96  # positions a prompt contributes at most (the table's time grows with them)
MAX_BODIES = 64  # bodies of the user's states the drafter runs on at most

Group = dict[Any, tuple[np.ndarray, tuple[int, ...]]]  # tap -> (its BF16 bytes, the states' shape)


class Source(Protocol):
    """A network and the states it is fed with."""

    source: str  # short, said beside every figure: "proxy: SmolLM2-135M ..." / "drafter: ..."
    label: str  # what it can and cannot say
    width: int  # the codecs' row width (a lossy codec's scale is per row of this many values)
    headline: str  # the measure the call is made on

    def groups(self) -> Iterator[Group]: ...

    def evaluate(self, inputs: dict[Any, list[np.ndarray]]) -> dict[Any, dict[str, list[np.ndarray]]]: ...

    def describe(self) -> dict[str, Any]: ...  # kind, model, taps, groups, group (what a group is)


def prompts() -> list[str]:
    """The shipped prompts (hopbench/models/proxy_prompts.txt), blank-line separated."""
    text = resources.files("hopbench.models").joinpath("proxy_prompts.txt").read_text("utf-8")
    return [p.strip("\n") for p in text.split("\n\n") if p.strip()]


class ProxySource:
    """The shipped proxy on the shipped prompts, at its five spread taps."""

    headline = "continued"

    def __init__(self, model: Any, texts: list[str] | None = None, taps: list[int] | None = None):
        from hopbench.models import proxy as X

        self.model, self.texts = model, texts if texts is not None else prompts()
        self.taps = taps or X.spread_taps(model.cfg.layers)
        self.width = model.cfg.hidden
        self.source = f"proxy: {model.name}"
        self.label = (f"proxy: {model.name}, its own taps; it bounds what a codec destroys in a real network's states, "
                      "not the learned drafter's own sensitivity")

    def groups(self) -> Iterator[Group]:
        for text in self.texts:
            states = self.model.taps(self.model.tokenizer.encode(text)[:MAX_TOKENS], self.taps)
            yield {k: (to_bf16_bits(states[k], "F32").view(np.uint8).reshape(-1), states[k].shape) for k in self.taps}

    def evaluate(self, inputs: dict[Any, list[np.ndarray]]) -> dict[Any, dict[str, list[np.ndarray]]]:
        out: dict[Any, dict[str, list[np.ndarray]]] = self.model.evaluate(inputs)
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": "proxy", "model": self.model.cfg.__dict__, "taps": self.taps, "groups": len(self.texts),
                "group": "prompt"}


class DrafterSource:
    """The user's drafter (hopbench.models.drafter.Model) on the user's aux states, T rows a body."""

    headline = "drafts"

    def __init__(self, model: Any, states: Any, tokens: int):
        s = model.shape
        if tokens < 1:
            raise ConfigError("--tokens must be at least 1")
        self.model, self.rows, self.fc_in = model, tokens, s.fc_in_features
        self.bodies = states.bodies(tokens * s.row_bytes, tokens, min(MAX_BODIES, max(1, states.tokens // tokens)))
        self.width = s.hidden_size
        self.states = states
        weights = "random weights: its drafts are not meaningful tokens" if model.weights_from == "random" else \
            f"weights {Path(model.weights_from).name}"
        data = "synthetic states" if states.synthetic else f"states {states.label}"
        self.source = f"drafter: {s.name}, {weights}, {data}"
        self.label = (f"drafter {s.name} ({weights}) on {data}, {tokens} rows a body on {model.device}: its drafts "
                      "(the argmax of its logits at each row) from decoded states against those from raw states")

    def groups(self) -> Iterator[Group]:
        for body in self.bodies:
            yield {"all": (body.view(np.uint8).reshape(-1), (self.rows, self.fc_in))}

    def evaluate(self, inputs: dict[Any, list[np.ndarray]]) -> dict[Any, dict[str, list[np.ndarray]]]:
        logits = self.model.logits(np.stack(inputs["all"]))
        return {"all": {"drafts": list(logits)}}

    def describe(self) -> dict[str, Any]:
        return {"kind": "drafter", "model": self.model.shape.to_dict(), "weights": self.model.weights_from,
                "device": self.model.device, "states": self.states.record, "taps": ["all"], "body_rows": self.rows,
                "groups": len(self.bodies), "group": "body"}


#: seconds between progress lines of a long agreement (issue 62: 300 s of silence on a loaded host)
PROGRESS_EVERY_S = 10.0


def _round_trips(group: dict[Any, Any], coders: dict[str, Any],
                 differs: set[tuple[str, Any]]) -> tuple[dict[Any, list[np.ndarray]], dict[tuple[str, Any], int]]:
    """One group's states per tap, raw and after each codec's round trip (each distinct result
    once), and where each (codec, tap)'s states are among them (0: the raw's); `differs`
    gains each (codec, tap) whose round trip changed a state."""
    inputs: dict[Any, list[np.ndarray]] = {}
    index: dict[tuple[str, Any], int] = {}
    for tap, (body, shape) in group.items():
        seen = {body.tobytes(): 0}
        xs = [C.bf16_floats(body).reshape(shape)]
        for name, codec in coders.items():
            back = np.empty_like(body)
            codec.decode(codec.encode(body), back)
            j = seen.setdefault(back.tobytes(), len(xs))
            if j == len(xs):
                xs.append(C.bf16_floats(back).reshape(shape))
            if j:
                differs.add((name, tap))
            index[(name, tap)] = j
        inputs[tap] = xs
    return inputs, index


def measure(source: Source, codecs: list[str], say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The agreement table: per codec, tap and measure, top-1 agreement and KL with their
    intervals and n (hopbench.analysis.agreement.summarise); `say` hears a progress line at
    most every PROGRESS_EVERY_S seconds (groups done of all, the time left at the rate so far)."""
    coders = {name: C.parse(name, source.width) for name in codecs}
    hits: dict[tuple[str, Any, str], list[np.ndarray]] = {}
    kls: dict[tuple[str, Any, str], list[np.ndarray]] = {}
    differs: set[tuple[str, Any]] = set()  # (codec, tap) where some group's bytes changed
    t0 = last = time.perf_counter()
    groups = 0
    total = len(getattr(source, "texts", None) or getattr(source, "bodies", None) or [])
    for group in source.groups():
        inputs, index = _round_trips(group, coders, differs)
        out = source.evaluate(inputs)
        for tap, by in out.items():
            for how, logits in by.items():
                lr = AG.log_softmax(logits[0]) if len(logits) > 1 else None  # only where a codec changed a state
                for name in coders:
                    j = index[(name, tap)]
                    agree, kl = (np.ones(logits[0].shape[0], bool), np.zeros(logits[0].shape[0])) if j == 0 else \
                        AG.positions(logits[0], logits[j], lr)
                    hits.setdefault((name, tap, how), []).append(agree)
                    kls.setdefault((name, tap, how), []).append(kl)
        groups += 1
        if say is not None and (now := time.perf_counter()) - last >= PROGRESS_EVERY_S:
            last, rate = now, groups / (now - t0)
            left = f", ~{(total - groups) / rate:.0f} s left" if total else ""
            say(f"  agreement: {groups}{f' of {total}' if total else ''} {source.describe()['group']}s done in "
                f"{now - t0:.0f} s{left}")
    rows: list[dict[str, Any]] = []
    for (name, tap, how), each in hits.items():
        r = AG.summarise(each, kls[(name, tap, how)], seed=len(rows)) if (name, tap) in differs else \
            AG.identical(int(sum(x.size for x in each)), groups)
        rows.append({"codec": coders[name].name, "asked": name, "lossless": coders[name].lossless, "tap": tap,
                     "measure": how, **r})
    return R.document("agreement", {"source": source.source, "label": source.label, **source.describe(),
                                     "bar": AG.AGREEMENT_BAR, "measure": source.headline, "rows": rows,
                                     "headline": AG.headlines(rows, source.headline),
                                     "seconds": time.perf_counter() - t0})


def codec_names(codec: str | None) -> list[str]:
    """The codecs asked for (a list), each checked (an unknown codec, a missing library) before
    any model loads; default DEFAULT_CODECS."""
    names = [c.strip() for c in codec.split(",") if c.strip()] if codec else list(DEFAULT_CODECS)
    for name in names:
        C.parse(name, 1)  # the width: no matter here
    return names


def proxy_source() -> ProxySource:
    from hopbench.models import proxy as X

    return ProxySource(X.Model(X.shipped_path()))


def drafter_source(drafter: str, weights: Path | None, file: str | None, tokens: int) -> DrafterSource:
    from hopbench.models.drafter import Model, parse_shape
    from hopbench.workload.hidden import from_file, synthetic

    shape = parse_shape(drafter)
    # a file of another width: one line, before the model loads; synthetic: a body's worth each
    states = from_file(file, shape.taps, shape.hidden_size) if file else \
        synthetic(shape.taps, shape.hidden_size, tokens=MAX_BODIES * max(1, tokens))
    return DrafterSource(Model(shape, weights=weights, graphs=False), states, tokens)


def agreement_command(codec: str | None, json_out: bool, say: Callable[[str], None], *, drafter: str | None = None,
                      weights: Path | None = None, file: str | None = None, tokens: int = 3,
                      save: Path | None = None) -> dict[str, Any]:
    names = codec_names(codec)
    if file and not drafter:
        raise ConfigError("the states FILE feeds --drafter (the user's drafter); the proxy makes its own from its prompts: "
                          "give --drafter CONFIG_OR_PRESET, or leave FILE out")
    if weights and not drafter:
        raise ConfigError("--drafter-weights needs --drafter (the config or preset the weights are of)")
    R.refuse_existing(save, "", "--save")
    t0 = time.perf_counter()
    note = say if not json_out else (lambda line: print(line, file=sys.stderr, flush=True))  # stdout: the JSON
    note(f"loading {'the drafter ' + drafter if drafter else 'the proxy (SmolLM2-135M)'} for the agreement of "
         f"{', '.join(names)} ...")
    source: Source = drafter_source(drafter, weights, file, tokens) if drafter else proxy_source()
    note(f"loaded in {time.perf_counter() - t0:.0f} s; measuring")
    record = measure(source, names, note)
    record["seconds_with_load"] = time.perf_counter() - t0
    if save is not None:
        from hopbench.results import atomic_write

        atomic_write(save, json.dumps(record, indent=1) + "\n")
    if json_out:
        say(json.dumps(record, indent=1))
        return record
    for line in table_lines(record):
        say(line)
    if save is not None:
        say(f"saved: {save} (hopbench run --agreement-from {save} carries it into a codec run's report)")
    return record


def table_lines(record: dict[str, Any]) -> list[str]:
    what = "prompts" if record.get("group") == "prompt" else f"bodies of {record.get('body_rows')} rows"
    out = [f"codec agreement on the {record['label']}",
           f"{record['groups']} {what}, {record['rows'][0]['n']:,} positions a tap; taps {record['taps']}; 95% intervals "
           "(top-1: the wider of Wilson's over positions and a bootstrap over the " + what.split()[0] + ")",
           f"{'codec':10s} {'tap':>3s} {'measure':10s} {'top-1 agreement':>30s} {'KL nats':>22s}"]
    for r in record["rows"]:
        out.append(f"{r['codec']:10s} {str(r['tap']):>3s} {r['measure']:10s} {AG.text(r):>30s} "
                   f"{r['kl']:.2e} [{r['kl_lo']:.1e}-{r['kl_hi']:.1e}]")
    out += headline_lines(record)
    out.append(f"{record.get('seconds_with_load', record['seconds']):.0f} s with the model's load")
    return out


def headline_lines(record: dict[str, Any], codecs: list[str] | None = None) -> list[str]:
    """One line per codec: its call on the drafts, its worst tap's top-1 agreement and the bar
    (the codecs given, or all the record holds)."""
    out = []
    for name, h in record["headline"].items():
        if codecs is not None and name not in codecs:
            continue
        worst = f"worst tap {h['tap']}, " if h["tap"] != "all" else ""
        out.append(f"{name}: {AG.verb(h)} ({worst}{h['measure']}: {AG.text(h)}; bar {record['bar']:.0%})")
    return out


def for_run(agreement: bool, agreement_from: Path | None, codecs: list[str], say: Callable[[str], None]
            ) -> dict[str, Any] | None:
    """`run --agreement` (measured on the proxy now, for the run's codecs) or
    `--agreement-from FILE` (a saved `codecs --agreement --save` record): the record the
    run's report.json carries, so verdict and report put it beside each codec's call."""
    if agreement_from is not None:
        try:
            record: dict[str, Any] = json.loads(agreement_from.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the agreement record {agreement_from}: {exc}") from None
        if record.get("schema") != "hopbench.agreement" or record.get("schema_version") != 2:
            raise ConfigError(f"{agreement_from} is not an agreement record (hopbench codecs --agreement --save FILE)")
        missing = [c for c in codecs if c != "none" and c not in record.get("headline", {})]
        if missing:
            say(f"note: {agreement_from} has no agreement for {', '.join(missing)}: their calls say it was not measured")
        return record
    if not agreement:
        return None
    lossy = [c for c in codecs if c != "none"]
    if not lossy:
        return None
    say(f"measuring {', '.join(lossy)}'s agreement on the shipped proxy before the run (about 20 s on 2 CPUs)")
    return measure(proxy_source(), lossy)
