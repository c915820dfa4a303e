"""The speculative decode loop's models and wire (`hopbench spec`, docs/SPEC.md): the
acceptance and work models, a plan's info and the structs its messages use. The kind's two
ends are hopbench.core.kinds.spec, its loops hopbench.core.timing's spec_*_cycles.

The client is the target, the server the drafter. Per cycle the target "verifies" (a work
model), draws how many of the K drafts it accepts (an acceptance model), emits accepted + 1
tokens and sends the drafter the hidden states of those T tokens (T x bytes_per_token);
the drafter "drafts" (its own work model) and answers K ids. Modes:

- local:   verify, then draft on the target itself; no network (the study's baseline);
- sync:    verify -> hop (header + hidden states) -> remote draft -> ids (the study's design);
- stream:  the aux layers streamed during the verify forward (docs/STREAM.md): each layer's
           K + 1 rows go as one chunk when its layer ends (a schedule over the verify's
           length), the header (the accept count) at the forward's end; the drafter drafts
           once it holds both. The verify is the schedule's forward, not a work model run;
- overlap: a speculation cache in the style of vLLM's disaggregated-drafting RFC: while the
           target verifies, the drafter pre-drafts the F most likely verification outcomes
           (fan-out F, most likely first, one t_draft each, not preempted). The target sends
           the outcome in the header; a hit is answered as soon as the header is read, a miss
           waits for the pre-draft in progress, then the hidden states, then drafts just in
           time. Hits and misses are recorded per cycle.

What is modelled: the verify and draft durations (or, on a GPU, real memory reads), the
acceptance. What is measured: the network, the cadence, the transports, the hosts.

Wire (docs/PROTOCOL.md, "Speculative plans"): per cycle the target sends a 16-byte header
message (seq u64 | tokens u32 | accepted u32), then, when tokens > 0, one message of
tokens x bytes_per_token; the drafter answers reply_bytes = K x id_bytes ids followed by
draft_ns (u64, the drafter's own time this cycle) and flags (u64, bit 0 = cache hit, bits
8..31 = the size of the batch the draft ran in, 0 when not batched).
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hopbench.core.timing import wait_until
from hopbench.errors import ConfigError

HEADER = struct.Struct("<QII")  # seq, tokens, accepted
TAIL = struct.Struct("<QQ")  # draft_ns, flags
STREAM_COUNTER = struct.Struct("<Q")  # mode stream: a chunk's first 8 bytes, seq x chunks + j
HIT = 1
BATCH_SHIFT, BATCH_MASK = 8, 0xFFFFFF  # flags bits 8..31: the size of the batch the draft ran in (0: not batched)
MODES = ("local", "sync", "overlap", "stream")


# ---- acceptance models --------------------------------------------------------------------

@dataclass(frozen=True)
class Acceptance:
    """How many of K drafts the target accepts per cycle: a distribution over 0..K.
    `per_position`: P(draft i accepted | drafts < i accepted); `geometric:A` = the same
    A at every position; `hist:PATH` = a file of measured accepted counts (one per line)."""

    spec: str
    probs: tuple[float, ...]  # P(accepted = a), a = 0..K

    @property
    def k(self) -> int:
        return len(self.probs) - 1

    @property
    def mean_tokens(self) -> float:
        """Expected tokens per cycle: accepted + 1."""
        return float(sum((a + 1) * p for a, p in enumerate(self.probs)))

    def ranked(self) -> list[int]:
        """Outcomes (accepted counts), most likely first (ties: fewer accepted first)."""
        return sorted(range(len(self.probs)), key=lambda a: (-self.probs[a], a))

    def draw(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return rng.choice(len(self.probs), size=n, p=np.asarray(self.probs) / sum(self.probs)).astype(np.int64)


# The study at K = 2: 2.149 tokens per cycle; position 0 accepted with 0.74, so position 1
# with (1.149 - 0.74) / 0.74 = 0.5527.
STUDY_ACCEPTANCE = "0.74,0.5527"


def parse_acceptance(text: str, k: int) -> Acceptance:
    """'0.74,0.5527' (per position, K values) | 'geometric:0.6' | 'hist:PATH'."""
    if text.startswith("hist:"):
        path = Path(text[5:])
        try:
            counts = [int(line.split()[0]) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--accept {text}: cannot read accepted counts ({exc})") from None
        if not counts or min(counts) < 0 or max(counts) > k:
            raise ConfigError(f"--accept {text}: counts must lie in 0..{k} (K = {k})")
        hist = np.bincount(counts, minlength=k + 1).astype(float)
        return Acceptance(text, tuple(float(x) for x in hist / hist.sum()))
    if text.startswith("geometric:"):
        try:
            alpha = float(text.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"--accept {text}: expected geometric:A with 0 <= A <= 1") from None
        per = [alpha] * k
    else:
        try:
            per = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"--accept {text}: expected K probabilities, geometric:A or hist:PATH") from None
        if len(per) != k:
            raise ConfigError(f"--accept {text}: {len(per)} per-position probabilities for K = {k}")
    if any(not 0 <= p <= 1 for p in per):
        raise ConfigError(f"--accept {text}: probabilities must lie in [0, 1]")
    probs, reach = [], 1.0
    for p in per:
        probs.append(reach * (1 - p))
        reach *= p
    probs.append(reach)
    return Acceptance(text, tuple(probs))


# ---- work models ----------------------------------------------------------------------------

@dataclass
class Work:
    """One side's work per cycle. `sleep:MS` (waits, no CPU), `spin:MS` (a busy CPU),
    `gpu-read:BYTES` (a memory-bound read of BYTES on the GPU: bandwidth contention is
    real when both sides share a device), `file:PATH` (per-cycle durations in ms, one
    per line, used in turn). `scale` multiplies every duration (recorded)."""

    spec: str
    scale: float = 1.0
    durations_ms: list[float] = field(default_factory=list)
    _i: int = 0
    _gpu: Any = None
    #: `batch:A+B`: a batch of b drafts takes A + b*B ms (A: the weight read, paid once per
    #: batch; B: the per-draft work); alone, a batch of one. `batcher(a_ms, b_ms)` runs this
    #: draft in the batch of the drafts that arrive together (hopbench.core.busy.StartGroups)
    #: and returns the batch's size
    batch_ms: tuple[float, float] | None = None
    batcher: Callable[[float, float], int] | None = None
    #: `model`: the server's drafter model (serve --drafter, docs/DRAFTER.md) run on the
    #: cycle's hidden states; `model(rows, tokens)` returns the sessions in its batch and
    #: the forward's ms
    model: Callable[[Any, int], tuple[int, float]] | None = None
    #: the drafter model's last measured forward (ms): what mode overlap's pre-drafts take
    model_ms: float | None = None

    @property
    def kind(self) -> str:
        return self.spec.split(":", 1)[0]

    def nominal_ms(self) -> float | None:
        """The duration the model asks for this cycle (None for a GPU read: measured)."""
        if self.kind == "model":
            return self.model_ms
        if self.kind == "gpu-read":
            return None
        if self.batch_ms is not None:
            return (self.batch_ms[0] + self.batch_ms[1]) * self.scale
        return self.durations_ms[self._i % len(self.durations_ms)] * self.scale

    def predrafted(self, fanout: int) -> int:
        """Mode overlap's pre-drafts done when this work takes no time: all of them; none for
        the drafter model not yet measured."""
        return 0 if self.kind == "model" else fanout

    def run(self, clock: Callable[[], int] = time.perf_counter_ns, rows: Any = None, tokens: int = 0) -> int:
        """One draft (or verify); the size of the batch it ran in (0: not batched). `rows`:
        the cycle's hidden states (`tokens` rows), which the drafter model runs on."""
        kind = self.kind
        if kind == "model":
            if self.model is None:
                raise ConfigError("work model 'model' runs only on a server with a drafter model (serve --drafter)")
            sessions, self.model_ms = self.model(rows, tokens)
            return sessions
        if kind == "gpu-read":
            self._gpu()
            return 0
        if self.batch_ms is not None:
            a, b = self.batch_ms[0] * self.scale, self.batch_ms[1] * self.scale
            if self.batcher is not None:
                return self.batcher(a, b)
            wait_until(clock, clock() + int((a + b) * 1e6))
            return 1
        ms = self.durations_ms[self._i % len(self.durations_ms)] * self.scale
        self._i += 1
        if ms <= 0:
            return 0
        deadline = clock() + int(ms * 1e6)
        if kind == "spin":
            while clock() < deadline:
                pass
        else:
            wait_until(clock, deadline)
        return 0

    def describe(self) -> dict[str, Any]:
        if self.batch_ms is not None:
            return {"spec": self.spec, "scale": self.scale, "batch_a_ms": self.batch_ms[0] * self.scale,
                    "batch_b_ms": self.batch_ms[1] * self.scale, "mean_ms": self.nominal_ms()}
        return {"spec": self.spec, "scale": self.scale,
                "mean_ms": None if self.kind in ("gpu-read", "model") else float(np.mean(self.durations_ms)) * self.scale}


#: the longest work model a PLAN carries (its `spec.draft` string, docs/PROTOCOL.md)
MAX_WIRE_WORK = 4096


def parse_work(text: str, scale: float = 1.0, *, files: bool = True) -> Work:
    """A work model from its text (docs/SPEC.md). `files=False` is the server's reading of a
    PLAN's: a client never makes the server open a path (docs/SECURITY.md), so `file:PATH`
    is refused there; the client reads the file and sends `durations:MS,...` (wire_work)."""
    kind, _, arg = text.partition(":")
    if kind == "file" and not files:
        raise ConfigError("a PLAN's work model cannot be file:PATH: the server opens no path a client names "
                          "(the client reads the file and sends durations:MS,...)")
    parse = _WORK_KINDS.get(kind)
    if parse is None:
        raise ConfigError(f"work model {text[:60]!r}: expected sleep:MS, spin:MS, file:PATH, durations:MS,..., "
                          "gpu-read:BYTES, batch:A+B or model")
    return parse(text, arg, scale)


def _durations(text: str, values: list[float], scale: float) -> Work:
    if not values or min(values) < 0 or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"work model {text[:60]!r}: durations are finite ms >= 0")
    return Work(text, scale, values)


def _listed(text: str, arg: str, scale: float) -> Work:
    """durations:MS,MS,...: one duration per cycle, used in turn (what file:PATH becomes on the wire)."""
    try:
        values = [float(v) for v in arg.split(",")]
    except ValueError:
        raise ConfigError(f"work model {text[:60]!r}: expected durations:MS,MS,... (ms, >= 0)") from None
    return _durations(text, values, scale)


def _fixed(text: str, arg: str, scale: float) -> Work:
    """sleep:MS (a wait, no CPU) or spin:MS (a busy CPU)."""
    try:
        ms = float(arg)
    except ValueError:
        raise ConfigError(f"work model {text!r}: expected {text.partition(':')[0]}:MS") from None
    return _durations(text, [ms], scale)


def _from_file(text: str, arg: str, scale: float) -> Work:
    """file:PATH: durations in ms, one per line (read on the client only)."""
    try:
        values = [float(line.split()[0]) for line in Path(arg).read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"work model {text!r}: cannot read durations in ms ({exc})") from None
    if not values:
        raise ConfigError(f"work model {text!r}: needs durations >= 0 in ms, one per line")
    return _durations(text, values, scale)


def _batched(text: str, arg: str, scale: float) -> Work:
    """batch:A+B: a batch of b drafts takes A + b*B ms."""
    try:
        a, b = (float(v) for v in arg.split("+"))
    except ValueError:
        raise ConfigError(f"work model {text!r}: expected batch:A+B (a batch of b drafts takes A + b*B ms)") from None
    if min(a, b) < 0 or not math.isfinite(a + b):
        raise ConfigError(f"work model {text!r}: A and B are durations >= 0 in ms")
    return Work(text, scale, [a + b], batch_ms=(a, b))


def _gpu_read(text: str, arg: str, scale: float) -> Work:
    """gpu-read:BYTES: a memory-bound read of BYTES on the GPU."""
    try:
        nbytes = int(float(arg))
    except ValueError:
        raise ConfigError(f"work model {text!r}: expected gpu-read:BYTES") from None
    w = Work(text, scale, [])
    w._gpu = _gpu_reader(max(1, int(nbytes * scale)))
    return w


#: each work model's parser, by its kind (the text before the colon)
_WORK_KINDS: dict[str, Callable[[str, str, float], Work]] = {
    "durations": _listed, "sleep": _fixed, "spin": _fixed, "file": _from_file, "batch": _batched,
    "model": lambda text, arg, scale: Work(text, scale, []), "gpu-read": _gpu_read}


def wire_work(text: str) -> str:
    """The work model as a PLAN carries it: `file:PATH` read here, on the client, and sent as
    `durations:MS,...` (each spelled shortest, reading back equal); any other as given."""
    if not text.startswith("file:"):
        return text
    values = parse_work(text).durations_ms
    wire = "durations:" + ",".join(repr(v).removesuffix(".0") for v in values)
    if len(wire) > MAX_WIRE_WORK:
        raise ConfigError(f"work model {text!r}: its {len(values)} durations take {len(wire)} characters as "
                          f"durations:MS,...; a PLAN carries at most {MAX_WIRE_WORK}: give fewer lines")
    return wire


def _gpu_reader(nbytes: int) -> Callable[[], None]:
    """A memory-bound read of nbytes on the current GPU, synchronised (CuPy)."""
    from hopbench.core import gpu

    cp = gpu.load()
    buf = cp.ones(nbytes // 8, dtype=cp.float64)
    out = cp.empty((), dtype=cp.float64)

    def read() -> None:
        cp.sum(buf, out=out)
        cp.cuda.get_current_stream().synchronize()

    read()  # first call compiles the kernel
    return read


# ---- the plan's info and the target's inputs ----------------------------------------------------------------

CYCLE_COLUMNS = ("seq", "phase", "accepted", "tokens", "verify_ns", "wait_ns", "draft_ns", "hop_ns", "cycle_ns", "hit",
                 "batch")


@dataclass
class SpecPlanInfo:
    mode: str
    k: int
    id_bytes: int
    bytes_per_token: int
    cycles: int
    warmup: int
    seed: int
    fanout: int = 0
    chunks: int = 0  # stream: the aux layers, one chunk each of K + 1 rows

    @property
    def chunk_bytes(self) -> int:
        """stream: one aux layer's K + 1 rows (its first 8 bytes carry seq x chunks + j)."""
        return self.request_bytes // self.chunks if self.chunks else 0

    @property
    def total(self) -> int:
        return 1 + self.warmup + self.cycles

    @property
    def request_bytes(self) -> int:
        """The largest request message: K + 1 tokens of hidden states."""
        return (self.k + 1) * self.bytes_per_token

    @property
    def reply_bytes(self) -> int:
        return self.k * self.id_bytes + TAIL.size


@dataclass(frozen=True)
class SpecInputs:
    """What the target's side of a spec plan runs on (Session.measure(spec=...)): the plan's
    info, each cycle's accepted count (drawn before any mode runs, the same for every mode)
    and the verify's work model."""

    info: SpecPlanInfo
    outcomes: np.ndarray
    verify: Work


def spec_info_from_wire(spec: Any, k: int, id_bytes: int, cycles: int, warmup: int) -> SpecPlanInfo:
    """A spec plan's info from its typed block (protocol.SpecPlan) or its wire dict."""
    obj = spec.to_dict() if hasattr(spec, "to_dict") else spec
    mode = obj.get("mode")
    if mode not in ("sync", "overlap", "stream"):
        raise ConfigError(f"spec mode {mode!r}: the server runs sync, overlap or stream")
    bpt = obj.get("bytes_per_token")
    if not isinstance(bpt, int) or bpt < 1:
        raise ConfigError("spec bytes_per_token must be a positive integer")
    fanout = obj.get("fanout", 0)
    if not isinstance(fanout, int) or not 0 <= fanout <= k + 1:
        raise ConfigError(f"spec fanout must be 0..{k + 1}")
    chunks = obj.get("chunks", 0)
    if mode == "stream":
        from hopbench.core.protocol import MAX_STREAM_CHUNKS

        if not isinstance(chunks, int) or not 1 <= chunks <= MAX_STREAM_CHUNKS or (k + 1) * bpt % chunks \
                or (k + 1) * bpt // chunks < STREAM_COUNTER.size:
            raise ConfigError(f"spec mode stream needs chunks 1..{MAX_STREAM_CHUNKS} that divide K + 1 tokens of hidden "
                              f"states into chunks of at least {STREAM_COUNTER.size} B")
    elif chunks:
        raise ConfigError("spec chunks belong to mode stream")
    return SpecPlanInfo(mode, k, id_bytes, bpt, cycles, warmup, int(obj.get("seed", 0)), fanout, int(chunks))

