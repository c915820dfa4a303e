"""Benchmark (not a test; on a CUDA machine): the lossy codecs where the hidden states live.

Per payload (T = 1, 3, 8) and codec (fp8, int8): the codec alone (encode + decode of one
body, p50 over 200 calls: the CPU's compiled loops on host memory, the CUDA kernels on
device memory, each kernel synchronised), and in the hop over loopback tcp (server in
another process, MPS when the daemon runs): raw staged (`--memory cuda`, no codec) against
fp8/int8 encoded on the GPU and decoded on the GPU, with the per-cycle encode and decode
stages. Prints a table; --out writes it as CSV.

    python benchmarks/gpu_codecs.py [--cycles 300] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def alone(codec, body, dev: bool, reps: int = 200) -> float:
    import cupy as cp

    out = cp.empty(body.size, dtype=cp.uint8) if dev else np.empty_like(body)
    enc = codec.encode(body)
    codec.decode(enc, out)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        codec.decode(codec.encode(body), out)
        times.append(time.perf_counter_ns() - t0)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import cupy as cp

    from hopbench.core import codecs as C
    from hopbench.core import gpu, gpucodec
    from hopbench.core import protocol as P
    from hopbench.core.client import Session
    from hopbench.core.server import ServerConfig
    from hopbench.orchestration.serverproc import ServerProcess
    from hopbench.workload import hidden

    info = gpu.device_info()
    print(f"device: {info.get('name')}, CuPy {cp.__version__}; CPU codec kernel: {C.Fp8(6144).kernel}")
    src = hidden.synthetic(5, 6144)
    rows = []
    for tokens in (1, 3, 8):
        body = src.bodies(tokens * 61440, tokens, 1)[0]
        for spec in ("fp8", "int8", "zstd:1", "lz4"):
            cpu = C.parse(spec, 6144)
            rows.append({"what": "alone", "tokens": tokens, "codec": spec, "where": "cpu",
                         "p50_us": alone(cpu, body, False) / 1e3})
            try:
                dev = gpucodec.for_memory(cpu, "cuda")
            except Exception as exc:  # nvCOMP not installed: said, not measured
                print(f"{spec} on the GPU: {exc}")
                continue
            rows.append({"what": "alone", "tokens": tokens, "codec": spec, "where": "gpu",
                         "p50_us": alone(dev, cp.asarray(body), True) / 1e3,
                         "ratio": body.size / len(memoryview(dev.encode(cp.asarray(body))).cast("B"))})
    try:
        from nvidia import nvcomp as _nv  # noqa: F401

        nvcomp = True
    except ImportError:
        nvcomp = False
    with ServerProcess(ServerConfig(host="127.0.0.1", port=0)) as srv:
        s = Session("127.0.0.1", srv.address[1])
        try:
            for rep in range(a.repeats):
                for tokens in (1, 3, 8):
                    for memory, codec in ((("host", "host"), None), (("host", "host"), "fp8"),
                                          (("cuda", "cuda"), None), (("cuda", "cuda"), "fp8"),
                                          (("cuda", "cuda"), "int8"), (("cuda", "cuda"), "zstd:1"),
                                          (("cuda", "cuda"), "lz4")):
                        if codec in ("zstd:1", "lz4") and not nvcomp:
                            continue
                        plan = P.Plan("tcp", 8 + tokens * 61440, 8, 2, 4, a.cycles, 30, client_memory=memory[0],
                                      server_memory=memory[1], codec=codec, codec_group=6144 if codec else 0)
                        m = s.measure(plan, source=src)
                        first = 1 + plan.warmup
                        st = {k: float(np.median(v[first:m.completed])) / 1e3 for k, v in m.stages.items()}
                        rows.append({"what": "hop", "tokens": tokens, "codec": codec or "none",
                                     "where": f"{memory[0]}->{memory[1]}", "repeat": rep,
                                     "p50_us": float(np.median(m.timed)) / 1e3,
                                     "encode_us": st.get("encode_ns"), "decode_us": st.get("decode_ns"),
                                     "d2h_us": st.get("d2h_ns"), "h2d_us": st.get("h2d_ns")})
            s.bye()
        finally:
            s.close()
    keys = ["what", "tokens", "codec", "where", "repeat", "p50_us", "ratio", "encode_us", "decode_us", "d2h_us",
            "h2d_us"]
    for r in rows:
        print("  ".join(f"{k}={r[k]:.1f}" if isinstance(r.get(k), float) else f"{k}={r.get(k)}" for k in keys
                        if r.get(k) is not None))
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
