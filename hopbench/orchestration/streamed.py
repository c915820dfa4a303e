"""A streamed run's own parts (docs/STREAM.md): the link's model said before measuring, the
exposed hop said after, and the real producer of `run --stream layers,target=gpu` (issue
65, "A real producer"): the target's verify forward on this host's GPU produces the chunks. Before the session
the producer is built (its layers sized to the stream's forward, its graphs captured), its extraction
cost measured (the forward with taps against the same forward without, ABBA blocks), and its
taps' times and per-layer profile taken; the run's stream record then carries what it
measured, so the clock-driven streamed payload beside it follows the same layer times and
pays the measured cost, and the verdict's cost is the measured one."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable

from hopbench import results as R
from hopbench.core import protocol as P
from hopbench.errors import ConfigError
from hopbench.estimate import pct
from hopbench.records import PROJECTED, Payload, RunConfig, StreamSpec, codec_label, design_label, stream_label

#: the targets --target takes (gpu's graph modes after a colon; eager: no graphs)
TARGETS = {"gpu": "piecewise", "gpu:piecewise": "piecewise", "gpu:full": "full", "gpu:eager": "off", "cpu": "off"}
#: the producer's profile file in a run's folder (what --stream layers,times=FILE reads)
LAYER_TIMES_FILE = "layer-times.csv"
#: forwards timed for the taps' times (after the extraction cost's blocks)
TAP_FORWARDS = 10


#: the empty-chunk hop's chunk: the least a streamed plan's chunk may be (the end message's size)
EMPTY_CHUNK = P.STREAM_END_BYTES


def stream_payloads(stream: StreamSpec, k: int, row: int, id_bytes: int, codecs: list[str]) -> list[Payload]:
    """A streamed run's payloads, in one session: the link's small round trip (for the model),
    the synchronous T = K + 1 hop, the projected design's, the streamed one (and, with a real
    producer, the producer's beside the clock's with its measured times), the empty-chunk hop
    on the same schedule (the model's fixed part); under each codec both hops again."""
    sent = stream.chunks * stream.chunk_bytes  # the bytes of T = K + 1, sent after the forward or during it
    reply = k * id_bytes
    loads = [Payload("B64", None, 64, reply),
             Payload(f"T{k + 1}", k + 1, sent, reply),
             Payload(design_label(f"T{k + 1}", PROJECTED), k + 1, (k + 1) * row, reply, design=PROJECTED),
             Payload(stream_label(f"T{k + 1}", "layers"), k + 1, sent, reply, stream=True),
             Payload(stream_label(f"B{stream.chunks * EMPTY_CHUNK}", "layers"), None, stream.chunks * EMPTY_CHUNK,
                     reply, stream=True)]
    if stream.target != "clock":
        loads.insert(4, Payload(stream_label(f"T{k + 1}", "target"), k + 1, sent, reply, stream=True, produced=True))
    for c in [c for c in codecs if c != "none"]:  # under a codec: each chunk encoded on its own
        loads += [Payload(codec_label(f"T{k + 1}", c), k + 1, sent, reply, codec=c),
                  Payload(stream_label(codec_label(f"T{k + 1}", c), "layers"), k + 1, sent, reply, codec=c,
                          stream=True)]
    return loads


def check_target(req: Any, dtype: str) -> str:
    """--target, checked before connecting: a known one, a run it can produce (one target, raw
    BF16 rows from host memory), a GPU where it asks for one. Returns it as recorded."""
    if req.target not in TARGETS:
        raise ConfigError(f"--stream layers,target={req.target}: clock, {', '.join(t for t in TARGETS)}")
    if req.clients != 1 or req.codec.strip() not in ("", "none") or "cuda" in req.memory or req.remote_drafter:
        raise ConfigError(f"--stream layers,target={req.target}: one target's forward streams raw rows from host "
                          "memory: not with --clients, --codec, --memory cuda or --remote-drafter")
    if req.layer_times or req.stream_cost_ms:
        raise ConfigError(f"--stream layers,target={req.target} measures the layer times and the extraction cost: not with "
                          "times= or cost= in --stream")
    if dtype != "bf16":
        raise ConfigError(f"--stream layers,target={req.target}: the producer's rows are BF16, the shape's {dtype}")
    if req.target.startswith("gpu"):
        from hopbench.models.drafter import load_torch
        from hopbench.models.target import check_gpu

        check_gpu(load_torch(), f"--stream layers,target={req.target}")
    return str(req.target)


def build(cfg: RunConfig, say: Callable[[str], None]) -> tuple[Any, RunConfig]:
    """The producer for cfg's streamed run, built and measured; cfg with its stream record set
    from what was measured (forward_ms: the forward without taps; ready_ms: each tap's median
    ready time; cost_ms: the measured extraction cost; producer: the whole record)."""
    from hopbench.models.target import TargetForward, TargetShape

    st = cfg.stream
    assert st is not None
    shape = TargetShape(st.layers, tuple(st.taps), cfg.hidden, cfg.k + 1)
    device = "cpu" if st.target == "cpu" else "cuda"
    say(f"target: building a {shape.layers}-layer forward over {shape.rows} x {shape.hidden} rows on "
        f"{device}, sized to {st.forward_ms:g} ms ({TARGETS[st.target]} graphs)")
    t = TargetForward(shape, st.forward_ms, device, TARGETS[st.target])
    cost = t.extraction_cost()
    rec = {**t.record(), "extraction": cost, "layer_times_ms": t.layer_times_ms(), **t.tap_times(TAP_FORWARDS)}
    say(f"target: {rec['device']}, width {t.width:,} ({rec['weight_bytes_per_layer'] / 1e6:,.0f} MB read a layer, "
        f"sized in {len(rec['sizing'])} round{'s' if len(rec['sizing']) > 1 else ''}): "
        f"the forward {cost['without_taps_ms']:.3f} ms without taps, {cost['with_taps_ms']:.3f} with; extraction "
        f"cost {cost['cost_ms']:+.3f} ms [{cost['cost_lo_ms']:+.3f}, {cost['cost_hi_ms']:+.3f}] "
        f"({cost['level']:.0%}, {cost['blocks']} ABBA blocks)")
    ready_ms = tuple(rec.get("tap_ready_ms") or (r / 1e6 for r in t.ready_ns))
    stream = dataclasses.replace(st, forward_ms=cost["without_taps_ms"], ready_ms=ready_ms,
                                 cost_ms=max(0.0, cost["cost_ms"]), producer=rec)
    return t, dataclasses.replace(cfg, stream=stream)


def write_layer_times(folder: Path, producer: dict[str, Any]) -> None:
    """The producer's per-layer profile in the run's folder, as --stream layers,times=FILE reads it: each
    layer's end (ms) within the forward, scaled from the profiled (eager, per-layer events)
    forward to the graphed forward's measured length."""
    times = producer.get("layer_times_ms") or []
    if not times:
        return
    scale = float(producer["extraction"]["without_taps_ms"]) / times[-1]
    lines = ["# layer end ms within the forward (hopbench run --stream layers,target=: per-layer events, scaled to the forward "
             f"measured without taps, {producer['extraction']['without_taps_ms']:.3f} ms)"]
    lines += [f"{math.floor(v * scale * 1e6) / 1e6:.6f}" for v in times]  # rounded down: none after the forward
    R.atomic_write(folder / LAYER_TIMES_FILE, "\n".join(lines) + "\n")


def producer_lines(cfg: RunConfig, rows: list[dict[str, Any]], loads: list[Any], say: Callable[[str], None]) -> None:
    """After a --target run: the exposed hop from the real producer beside the clock-driven
    one that followed its measured layer times and extraction cost (issue 65's check: within
    10%, or the difference named), and where the extraction cost came from."""
    st = cfg.stream
    assert st is not None and st.producer is not None
    by = {r["payload"]: r for r in rows if r.get("n")}
    real = next((by[p.label] for p in loads if p.produced and p.label in by), None)
    clock = next((by[p.label] for p in loads if p.stream and p.tokens and not p.produced and p.codec == "none"
                  and p.label in by), None)
    x = st.producer["extraction"]
    say(f"extraction cost (measured, not given): {x['cost_ms']:+.3f} ms [{x['cost_lo_ms']:+.3f}, "
        f"{x['cost_hi_ms']:+.3f}, {pct(x['level'])}, {x['blocks']} ABBA blocks] a forward ({x['graphs']} graphs on "
        f"{st.producer['device']}: with taps "
        f"{x['with_taps_ms']:.3f} ms, without {x['without_taps_ms']:.3f}); the clock-driven stream and the verdict "
        f"pay {st.cost_ms:.3f} ms")
    if real is None or clock is None:
        return
    ratio = real["p50_ns"] / clock["p50_ns"]
    gap = (real["p50_ns"] - clock["p50_ns"]) / 1e6
    say(f"exposed hop from the target's forward ({real['payload']}): p50 {_p50_ms(real)}; from the clock with its "
        f"measured times ({clock['payload']}): p50 {_p50_ms(clock)}; their p50s {ratio:.2f}x "
        f"({gap:+.3f} ms){'' if abs(ratio - 1) <= 0.10 else _named(real, clock)}")


def _named(real: dict[str, Any], clock: dict[str, Any]) -> str:
    """What the real producer's exposed hop has that the clock's has not, from its stages."""
    seen = real.get("forward_seen_p50_ns")
    end = real.get("forward_end_p50_ns")
    late = f"; the host saw the forward end {(seen - end) / 1e6:+.3f} ms after its length on the device (launch, wake-up)" \
        if seen and end else ""
    return f": more than 10% apart{late} (samples.csv: tap_ready_ns, tap_copied_ns, taps_sent_ns, forward_seen_ns)"


def stream_model(cfg: RunConfig, console: Any) -> Any:
    """The streamed hop's model on the link's nominal rate (--rate), before measuring: its
    tail, the link's idle share of the forward, the least rate that hides every chunk; a
    warning when the chunks cannot all cross before the accept count. None without --rate."""
    from hopbench.workload import stream as ST

    assert cfg.stream is not None
    if not cfg.rate_mbit:
        console.say("note: give the link's rate (--link NAME,rate=MBIT) to check the streamed hop against its model")
        return None
    m = ST.model(ST.from_record(cfg.stream), cfg.stream.chunk_bytes, cfg.rate_mbit)
    if m.tail_ms > 0:
        console.warn(f"at {cfg.rate_mbit:g} Mbit/s the chunks cannot all cross before the accept count: the model "
                     f"exposes a tail of {m.tail_ms:.2f} ms (the least rate that hides them: {m.hiding_rate_mbit:.1f} "
                     "Mbit/s)")
    return m


def stream_lines(cfg: RunConfig, model: Any, rows: list[dict[str, Any]], loads: list[Payload],
                 console: Any) -> None:
    """After a streamed run: the exposed hop beside the model's (a warning when they disagree by
    more than 5% and 0.2 ms), the bytes it costs per cycle, and what the schedule assumed."""
    assert cfg.stream is not None
    by = {r["payload"]: r for r in rows if r.get("n")}

    def row(kind: Callable[[Payload], bool]) -> dict[str, Any] | None:
        return next((by[p.label] for p in loads if kind(p) and p.label in by), None)

    small = row(lambda p: p.tokens is None and not p.stream)
    empty = row(lambda p: p.tokens is None and p.stream)
    sync = row(lambda p: p.tokens is not None and not p.stream and p.design == "taps" and p.codec == "none")
    streamed = row(lambda p: p.tokens is not None and p.stream and p.codec == "none" and not p.produced)
    st = cfg.stream
    _schedule_lines(st, cfg.k, console)
    if streamed is None:
        return
    late = max((r.get("end_lag_p50_ns") or 0) for r in rows if r.get("end_lag_p50_ns") is not None) \
        if any(r.get("end_lag_p50_ns") is not None for r in rows) else 0
    if late > max(0.1 * st.forward_ms * 1e6, 20_000):  # the schedule was not kept (measured, not guessed)
        console.warn(f"the schedule could not be kept: the accept count went a median {late / 1e6:.3f} ms late on a "
                     f"{st.forward_ms:g} ms forward (its chunks could not all be sent in time on this host), so the "
                     "exposed hop is not what a real forward of that length would expose")
    exposed = streamed["p50_ns"] / 1e6
    versus = (f" against the synchronous hop of the same bytes after the forward, {_p50_ms(sync)} "
              f"({exposed / (sync['p50_ns'] / 1e6):.2f}x)") if sync else ""
    console.say(f"exposed hop (ids back - the forward's end): p50 {_p50_ms(streamed)}{versus}")
    base = empty or small
    if model is not None and base is not None:
        _model_lines(model, base, empty is not None, exposed, console)


def _schedule_lines(st: Any, k: int, console: Any) -> None:
    """What the streamed schedule assumed: the chunks, when each goes, the bytes per accepted token."""
    cost = f", extraction cost {st.cost_ms:g} ms" if st.cost_ms else ""
    console.say(f"streamed: {st.chunks} chunks of {st.chunk_bytes:,} B (K + 1 = {k + 1} rows of each aux "
                f"layer {list(st.taps)}) at {', '.join(f'{r:.2f}' for r in st.ready_ms)} ms of a {st.forward_ms:g} ms "
                f"forward ({st.layers} layers{', profile ' + str(st.layer_times) if st.layer_times else ''}"
                f"{cost}); the accept count at its end")
    per = st.bytes_per_accepted_token
    if per:
        console.say(f"bytes per accepted token: streamed {per['streamed']:,.0f} B (K + 1 rows of every aux layer a "
                    f"cycle, {per['accepted_per_cycle']:.2f} tokens accepted a cycle), against "
                    f"{per['accepted_only']:,} B when only the accepted tokens cross after the forward "
                    f"({per['streamed'] / per['accepted_only']:.2f}x)")


def _model_lines(model: Any, base: dict[str, Any], empty: bool, exposed: float, console: Any) -> None:
    """The exposed hop against the model's on the link's rate (a warning past 5% and 0.2 ms);
    `base`: the empty-chunk hop (`empty`) or one small round trip."""
    from hopbench.workload import stream as ST

    want = model.expected_exposed_ms(base["p50_ns"] / 1e6)
    what = "the empty-chunk hop (16-byte chunks on the same schedule)" if empty else "one small round trip"
    console.say(f"model at {model.rate_mbit:g} Mbit/s: tail {model.tail_ms:.3f} ms + {what} {_p50_ms(base)} "
                f"= {want:.3f} ms expected; the link idles {model.idle_share:.0%} of the forward; the least rate that "
                f"hides every chunk: {model.hiding_rate_mbit:.1f} Mbit/s")
    if ST.disagrees(exposed, want):
        console.warn(f"the exposed hop {exposed:.3f} ms and the model's {want:.3f} ms disagree by more than 5% and "
                     "0.2 ms: the link is not the rate given, or the sends ran late (send_lag_ns in samples.csv)")


def _p50_ms(row: dict[str, Any]) -> str:
    """A payload's p50 in ms as printed: its within-run interval with the level it achieves,
    and its n."""
    ci = (f" [{row['p50_ci_lo_ns'] / 1e6:.3f}-{row['p50_ci_hi_ns'] / 1e6:.3f}, within-run "
          f"{pct(row['p50_ci_level'])}]") if row.get("p50_ci_level") else ""
    return f"{row['p50_ns'] / 1e6:.3f} ms{ci} over {row['n']} cycles"


__all__ = ["LAYER_TIMES_FILE", "TARGETS", "build", "check_target", "producer_lines", "stream_lines", "stream_model",
           "stream_payloads", "EMPTY_CHUNK",
           "write_layer_times"]
