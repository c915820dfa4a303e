"""The streamed hop (issue 40, docs/STREAM.md): the target's verify forward as a schedule, and
the model of what a link exposes of it.

The target streams each aux layer's K + 1 rows while its verify forward computes: tap k
(the residual stream after k layers) is ready when layer k ends, and the accept count is
sent when the forward ends (t_f). Only the forward is a schedule; the wire, the bytes and the
drafter's wait are real. The exposed hop is ids back - t_f: what the cycle still pays.

Layer end times: uniform (layer i of L ends at i / L of the forward), or a profile (a CSV of
each layer's end time in ms within the forward, one per line, monotone, the last at most the
forward's length): dense, MoE and indexer layers and TP all-reduces are not uniform.

The model (beside every measurement, like the wire-time check): the chunks queue on one link
of `rate` Mbit/s (TCP goodput: 1448 of every 1538 wire bytes), chunk j starting when it is
ready and the link is free; the tail is the last chunk's finish - t_f (0 when it finished
before), the exposed hop about the tail plus one small round trip. The least rate that hides
every chunk is the streamed design's break-even bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hopbench.config import parse_spec
from hopbench.errors import ConfigError
from hopbench.records import MSS, WIRE_FRAME, StreamSpec

#: GLM-5.2's layer count (3 dense + 75 MoE), whose DSpark speculator taps [8, 23, 39, 55, 70]
#: (RedHatAI/GLM-5.2-speculator.dspark's fc.weight [6144, 30720] over those five taps)
DEFAULT_LAYERS = 78


@dataclass(frozen=True)
class Schedule:
    """One cycle's timeline, ns from the forward's start: each chunk's ready time, the forward's
    end (where the accept count goes), and the extraction cost paid per streamed forward
    (added to the forward: the accept count goes that much later)."""

    ready_ns: tuple[int, ...]
    forward_ns: int
    cost_ns: int = 0

    @property
    def end_ns(self) -> int:
        """When the accept count is sent: the forward's end plus the extraction cost."""
        return self.forward_ns + self.cost_ns

    def to_dict(self) -> dict[str, object]:
        return {"ready_ms": [r / 1e6 for r in self.ready_ns], "forward_ms": self.forward_ns / 1e6,
                "cost_ms": self.cost_ns / 1e6}


@dataclass(frozen=True)
class StreamArgs:
    """`--stream`'s one spec, as typed: off, or layers[:LAYERS][,forward=MS][,cost=MS][,times=FILE]
    [,target=WHO][,early=WHAT] (the target's layer count, the verify forward's length, the
    extraction cost, a per-layer profile, the chunks' producer, what of the remote drafter's
    forward starts on the landed taps), one option where seven were (as `--codec zstd:3`
    groups a codec's)."""

    mode: str = "off"
    layers: int | None = None
    forward_ms: float | None = None
    cost_ms: float | None = None
    times: str | None = None
    target: str | None = None  # clock, gpu[:piecewise|full|eager] or cpu (checked by the run: its host's GPU)
    early: str | None = None  # off, fc or all (with --remote-drafter)


#: what of the remote drafter's forward may start on the landed taps (--stream layers,early=)
EARLY = ("off", "fc", "all")
STREAM_SPEC = "off, or layers[:LAYERS][,forward=MS][,cost=MS][,times=FILE][,target=WHO][,early=off|fc|all]"
_KEYS = {"forward": "MS", "cost": "MS", "times": "FILE", "target": "WHO", "early": "off|fc|all"}


def parse_args(text: str) -> StreamArgs:
    """`--stream` as typed, or a one-line ConfigError naming what is wrong."""
    head, _, rest = text.partition(",")
    mode, _, layers = head.strip().partition(":")
    if mode not in ("off", "layers") or (mode == "off" and (layers or rest)):
        raise ConfigError(f"--stream {text}: {STREAM_SPEC}")
    _, kw = parse_spec(text, "--stream", _KEYS)
    if kw.get("early", "off") not in EARLY:
        raise ConfigError(f"--stream {text}: early={kw['early']}: off, fc or all")
    try:
        return StreamArgs(mode, int(layers) if layers else None,
                          float(kw["forward"]) if "forward" in kw else None,
                          float(kw["cost"]) if "cost" in kw else None, kw.get("times"), kw.get("target"),
                          kw.get("early"))
    except ValueError:
        raise ConfigError(f"--stream {text}: LAYERS is a whole number, forward= and cost= are ms") from None


def record(taps: tuple[int, ...] | list[int], row_bytes: int, k: int, forward_ms: float, layers: int | None = None,
           layer_times: str | Path | None = None, cost_ms: float = 0.0) -> StreamSpec:
    """A streamed run's configuration as recorded (RunConfig.stream), its schedule checked:
    each aux layer's K + 1 rows of `row_bytes` as one chunk, sent when its layer ends."""
    times = read_layer_times(layer_times) if layer_times else None
    n = layers if layers is not None else (len(times) if times else DEFAULT_LAYERS)
    sched = schedule(taps, forward_ms, n, times, cost_ms)
    return StreamSpec(len(taps), (k + 1) * row_bytes, tuple(taps), n, forward_ms, cost_ms,
                      str(layer_times) if layer_times else None, tuple(r / 1e6 for r in sched.ready_ns))


def from_record(stream: StreamSpec) -> Schedule:
    """The schedule a run recorded (RunConfig.stream): what every cycle follows."""
    return Schedule(tuple(int(round(r * 1e6)) for r in stream.ready_ms), int(round(stream.forward_ms * 1e6)),
                    int(round(stream.cost_ms * 1e6)))


def read_layer_times(path: str | Path) -> list[float]:
    """A per-layer profile: each layer's end time in ms within the forward, one per line (a
    header line and blank lines are skipped; a comma-separated first column is read)."""
    out: list[float] = []
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the layer profile {path} (--stream layers,times=FILE): cannot be read ({exc})") from None
    for n, line in enumerate(lines, 1):
        cell = line.split(",")[0].strip()
        if not cell or cell.startswith("#"):
            continue
        try:
            out.append(float(cell))
        except ValueError:
            if n == 1:  # a header
                continue
            raise ConfigError(f"the layer profile {path}: line {n} is not a time in ms ({cell[:40]!r})") from None
    return out


def schedule(taps: tuple[int, ...] | list[int], forward_ms: float, layers: int = DEFAULT_LAYERS,
             layer_times_ms: list[float] | None = None, cost_ms: float = 0.0) -> Schedule:
    """The forward's timeline, or a one-line ConfigError: a layer count below the deepest tap,
    a profile that is not monotone or ends after the forward, a forward that is not positive."""
    if not (math.isfinite(forward_ms) and forward_ms > 0):
        raise ConfigError(f"the verify forward of {forward_ms:g} ms: expected a positive length")
    if not (math.isfinite(cost_ms) and cost_ms >= 0):
        raise ConfigError(f"the extraction cost {cost_ms:g} ms: expected >= 0")
    if not taps or min(taps) < 1:
        raise ConfigError(f"aux layers {list(taps)}: expected layer numbers of 1 or more")
    if layer_times_ms is not None:
        ends = list(layer_times_ms)
        if len(ends) < max(taps):
            raise ConfigError(f"the layer profile: {len(ends)} layers, but the deepest aux layer is {max(taps)}")
        if any(b < a for a, b in zip(ends, ends[1:])) or ends[0] < 0:
            raise ConfigError("the layer profile: each layer's end time must be >= 0 and >= the one before (monotone)")
        if ends[-1] > forward_ms:
            raise ConfigError(f"the layer profile: the last layer ends at {ends[-1]:g} ms, after the forward "
                              f"({forward_ms:g} ms)")
        ready = [ends[t - 1] for t in taps]
    else:
        if layers < max(taps):
            raise ConfigError(f"the target's {layers} layers: below the deepest aux layer ({max(taps)})")
        ready = [t / layers * forward_ms for t in taps]
    return Schedule(tuple(int(round(r * 1e6)) for r in ready), int(round(forward_ms * 1e6)),
                    int(round(cost_ms * 1e6)))


def wire_s(nbytes: int, rate_mbit: float) -> float:
    """Seconds a TCP message of nbytes occupies a link of rate_mbit (Ethernet framing charged)."""
    frames = max(1, math.ceil(nbytes / MSS))
    return (nbytes + frames * (WIRE_FRAME - MSS)) * 8 / (rate_mbit * 1e6)


@dataclass(frozen=True)
class Model:
    """What the model expects of one cycle on a link of rate_mbit: each chunk's finish (ms from
    the forward's start), the tail past the accept count, the link's idle share of the
    forward, and the least rate that hides every chunk."""

    rate_mbit: float
    finish_ms: tuple[float, ...]
    tail_ms: float
    idle_share: float
    hiding_rate_mbit: float

    def expected_exposed_ms(self, small_rtt_ms: float) -> float:
        return self.tail_ms + small_rtt_ms

    def to_dict(self) -> dict[str, object]:
        return {"rate_mbit": self.rate_mbit, "finish_ms": list(self.finish_ms), "tail_ms": self.tail_ms,
                "idle_share": self.idle_share, "hiding_rate_mbit": self.hiding_rate_mbit}


def _finish(sched: Schedule, chunk_bytes: int, rate_mbit: float) -> list[float]:
    w = wire_s(chunk_bytes, rate_mbit)
    free, out = 0.0, []
    for r in sched.ready_ns:
        free = max(r / 1e9, free) + w
        out.append(free)
    return out


def model(sched: Schedule, chunk_bytes: int, rate_mbit: float) -> Model:
    finish = _finish(sched, chunk_bytes, rate_mbit)
    end = sched.end_ns / 1e9
    busy = len(sched.ready_ns) * wire_s(chunk_bytes, rate_mbit)
    lo, hi = 1e-3, 1e7  # Mbit/s: the least rate whose last chunk finishes by the accept count
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _finish(sched, chunk_bytes, mid)[-1] > end else (lo, mid)
    return Model(rate_mbit, tuple(f * 1e3 for f in finish), max(0.0, finish[-1] - end) * 1e3,
                 max(0.0, 1 - busy / end), hi)


def disagrees(measured_ms: float, expected_ms: float) -> bool:
    """More than 5% and more than 0.2 ms apart (the wire-time check's rule for the streamed hop)."""
    return abs(measured_ms - expected_ms) > max(0.05 * expected_ms, 0.2)


__all__ = ["DEFAULT_LAYERS", "Model", "Schedule", "disagrees", "model", "read_layer_times", "schedule", "wire_s"]
