"""`hopbench codecs [FILE]`: every payload codec on this CPU, on the user's hidden states
(or the synthetic ones, said so), off the wire (docs/CODECS.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hopbench import results as R
from hopbench.core import codecs as C
from hopbench.errors import ConfigError, ProtocolError
from hopbench.shape import load_shape
from hopbench.workload.hidden import source_for

ACCEPTANCE = ("A lossy codec's effect on acceptance is not measured here (`hopbench codecs --agreement` measures its "
              "effect on a real network's predictions, docs/CODECS.md). To measure it, run "
              "the drafter on hidden states passed through the codec (the study's harness: quantize the aux hidden "
              "states with the same per-token-layer scale before the draft forward) and compare the acceptance length "
              "with the raw run's; hopbench measures the hop, not the model.")


def profile_command(file: str | None, tokens: int, codec: str | None, reps: int, shape: Path | None, json_out: bool,
                    say: Callable[[str], None]) -> list[dict]:
    sh = load_shape(shape).shape
    if tokens < 1:
        raise ConfigError("--tokens must be at least 1")
    names = [c.strip() for c in codec.split(",") if c.strip() and c.strip() != "none"] if codec else list(C.ALL)
    layers = len(sh.aux_layers)
    src = source_for(file, layers, sh.hidden)
    bodies = src.bodies(tokens * sh.bytes_per_token, tokens, max(1, src.tokens // tokens))
    rows = [profile(n, bodies, sh.hidden, reps) for n in names]
    gpu_note = _gpu_rows(names, bodies, sh.hidden, reps, rows)
    data = "synthetic hidden states (docs/CODECS.md: a ratio on them is not a claim about any model)" if src.synthetic \
        else f"{src.label} (sha256 {src.record['sha256'][:12]}, {src.record['tokens']} tokens)"
    if json_out:
        say(json.dumps(R.document("codecs", {"source": src.record, "tokens": tokens, "bodies": len(bodies), "codecs": rows,
                                              "acceptance": ACCEPTANCE}), indent=1))
        return rows
    say(f"codecs on this CPU, T = {tokens} ({tokens * sh.bytes_per_token:,} B per body, {len(bodies)} bodies), {data}")
    say(f"{'codec':24s} {'where':5s} {'ratio':>6s} {'enc GB/s':>9s} {'dec GB/s':>9s} {'pays below':>12s}  "
        f"{'rel RMS':>8s} {'max abs':>8s} {'cos min':>8s}  library")
    for r in rows:
        err = (f"{r['rel_rms']:8.4f} {r['max_abs']:8.3g} {r['cosine_min']:8.5f}" if not r["lossless"]
               else f"{'exact':>8s} {'':8s} {'':8s}")
        pays = f"{r['pays_below_mbit'] / 1000:9.2f} Gb" if r["pays_below_mbit"] else f"{'never':>12s}"
        say(f"{r['codec']:24s} {r['where']:5s} {r['ratio']:6.3f} {r['encode_gb_s']:9.2f} {r['decode_gb_s']:9.2f} "
            f"{pays:>12s}  {err}  "
            f"{r['library']}")
    say("pays below = the link rate under which encode + decode cost less than the bytes saved take on the wire "
        "(one core each end; the hop's own measurement, run --codec, is the answer for your link)")
    if gpu_note:
        say(gpu_note)
    say(ACCEPTANCE)
    return rows


def _gpu_rows(names: list[str], bodies: list, width: int, reps: int, rows: list[dict]) -> str | None:
    """Each codec's GPU form where a CUDA device and CuPy are here (appended to rows); else
    a note why there are none. A codec without a GPU form (blosc2) or without nvCOMP is said."""
    from hopbench.core import gpu, gpucodec
    from hopbench.errors import HopbenchError

    try:
        cp = gpu.load()
    except HopbenchError as exc:
        return f"GPU: not profiled here ({exc})"

    def on_gpu(codec: C.Codec) -> tuple:
        return gpucodec.for_memory(codec, "cuda"), cp.asarray

    skipped = []
    for n in names:
        try:
            rows.append(profile(n, bodies, width, reps, place=on_gpu))
        except HopbenchError as exc:
            skipped.append(f"{n}: {exc}")
    return ("GPU: " + "; ".join(skipped)) if skipped else None


def profile(spec: str, bodies: list[np.ndarray], width: int, reps: int = 20,
            place: Callable[[C.Codec], tuple[Any, Callable[[np.ndarray], Any]]] | None = None) -> dict[str, Any]:
    """One codec on these bodies: ratio, encode and decode GB/s (of the raw bytes, p50 over
    reps), the error of a lossy codec (reconstruction_error), and the link rate below which
    it pays: it pays while encode + decode < bytes saved / rate, so break-even = 8 x bytes
    saved / (encode + decode). `place(codec)` -> (the codec's form elsewhere, a function that
    moves a body there): the GPU form (hopbench.orchestration.codecs) on bodies in device
    memory, each call synchronised, the encoded bytes' copy included."""
    import time

    codec: Any = C.parse(spec, width)
    cpu_codec, host_bodies = codec, bodies
    raw = sum(b.size for b in bodies)
    if place is not None:
        codec, move = place(codec)
        bodies = [move(b) for b in host_bodies]
    enc_ns, dec_ns, wire = [], [], 0
    for rep in range(reps):
        e_t = d_t = 0
        for body in bodies:
            back = body.copy()  # an output of the body's own kind (host or device), overwritten
            t0 = time.perf_counter_ns()
            enc = codec.encode(body)
            t1 = time.perf_counter_ns()
            codec.decode(enc, back)
            t2 = time.perf_counter_ns()
            e_t, d_t = e_t + t1 - t0, d_t + t2 - t1
            if rep == 0:
                wire += len(memoryview(enc).cast("B"))
                if codec.lossless and not bool((back == body).all()):
                    raise ProtocolError(f"{codec.name} did not round-trip byte-exact")
        enc_ns.append(e_t)
        dec_ns.append(d_t)
    e, d = float(np.median(enc_ns)), float(np.median(dec_ns))
    saved = raw - wire
    out: dict[str, Any] = {"codec": codec.name, "library": codec.library, "lossless": codec.lossless,
                           "where": "cpu" if place is None else "gpu", "raw_bytes": raw, "wire_bytes": wire, "ratio": raw / wire,
                           "encode_gb_s": raw / e,
                           "decode_gb_s": raw / d, "encode_ns": e, "decode_ns": d,
                           "pays_below_mbit": saved * 8 / (e + d) * 1e3 if saved > 0 else 0.0}
    if not codec.lossless:  # the GPU form's bytes are the CPU codec's: the same error
        out.update(C.reconstruction_error(cpu_codec, host_bodies))
    return out
