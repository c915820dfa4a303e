"""A drafter model of the user's drafter's shape (docs/DRAFTER.md): its forward on a cycle's
rows, timed on the drafter's own device, and a batcher that runs the rows of the sessions
waiting at once in one forward.

The forward is a speculative drafter's: fc (the aux taps' concatenated hidden states ->
hidden), `layers` decoder layers (RMSNorm, attention over the cycle's rows with causal
masking, SwiGLU MLP), the final norm and lm_head; the K ids are the argmax of the last row's
logits, then, with a Markov head (DSpark), K - 1 steps that each add the low-rank bigram
logits of the previous id (without one: the argmax of each of the last K rows). Weights are
random unless a .safetensors file is given: a weight-read-bound forward's time depends on the
bytes it reads, not their values, so the ids are NOT meaningful tokens.

torch is the library (the `drafter` extra): a GPU drafter runs in BF16 with a CUDA graph
captured per (batch, rows) and is timed with CUDA events, as serving engines run one; a CPU
runs float32, timed with the process clock. CuPy (the `gpu` extra) was the other candidate:
it has no BF16 matrix product, and the user's drafter runs on torch.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hopbench.errors import ConfigError, HopbenchError
from hopbench.models.forward import NEW_ROWS, DraftForward
from hopbench.models.shapes import (
    BF16_BYTES,
    DSPARK_GLM5,
    EAGLE3_LLAMA70B,
    PRESETS,
    TINY,
    DrafterShape,
    parse_shape,
    shape_from_config,
    weight_shapes,
)

if TYPE_CHECKING:
    from hopbench.models.streamed import StreamedDraft

INSTALL = "pip install 'hopbench[drafter]'"


class DrafterUnavailable(HopbenchError):
    """The drafter's library (torch) is missing; the message carries the install line."""


def load_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise DrafterUnavailable(f"the drafter model needs torch ({exc}); install it with: {INSTALL}") from None
    return torch


def memory_free(torch: Any, device: str) -> int:
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


class _Pool:
    """Model.slots' pinned host memory: `count` slots of `n` bytes (a request each), where a
    graphed GPU forward can stage its batch from: a batch whose bodies are slots 0..b-1, in
    order, is copied to the device from here, with no host copy first (the server's Loop
    receives into them; docs/DRAFTER.md "Batched across targets"); `batch(b)` is the BF16
    view of the first b slots shaped as the batch's input (made once per b)."""

    def __init__(self, torch: Any, count: int, n: int) -> None:
        self.tensor = torch.empty(count * n, dtype=torch.uint8, pin_memory=True)
        host = self.tensor.numpy()
        self.n, self.base = n, host.ctypes.data
        self.slots = [memoryview(host[j * n:(j + 1) * n]) for j in range(count)]
        self._views: dict[int, Any] = {}
        self.torch = torch

    def holds(self, bodies: list[Any], n: int) -> bool:
        """The bodies are slots 0..len-1, in order."""
        return n == self.n and len(bodies) <= len(self.slots) and all(
            np.frombuffer(b, dtype=np.uint8).ctypes.data == self.base + j * n for j, b in enumerate(bodies))

    def batch(self, b: int, shape: Any) -> Any:
        if b not in self._views:
            self._views[b] = self.tensor[:b * self.n].view(self.torch.bfloat16).view(shape)
        return self._views[b]


class Model(DraftForward):
    """The drafter's weights on its device and its forward. `device`: "cuda" where torch
    sees a GPU, else "cpu" (`device="cpu"` forces it)."""

    def __init__(self, shape: DrafterShape, *, weights: Path | None = None, device: str | None = None, seed: int = 0,
                 graphs: bool = True, context: int = 0, sessions: int = 1) -> None:
        torch = self.torch = load_torch()
        self.shape = shape
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("the drafter was asked for on cuda, but torch sees no GPU here")
        self.dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        if context < 0 or sessions < 1:
            raise ConfigError(f"--context {context}: a number of tokens >= 0 (0: no context), for >= 1 sessions")
        self.context, self.sessions = context, sessions
        dtype_bytes = 2 if self.device == "cuda" else 4
        nbytes = sum(shape.weight_params().values()) * dtype_bytes
        cache = self.cache_bytes(dtype_bytes)
        free = memory_free(torch, self.device)
        if nbytes + cache > 0.9 * free:
            where = "the GPU's free memory" if self.device == "cuda" else "this host's available memory (no GPU)"
            what = (f"{nbytes / 1e9:.2f} GB of weights" + (f" and {cache / 1e9:.2f} GB of context KV cache ({sessions} "
                    f"sessions x {context:,} tokens)" if cache else ""))
            raise ConfigError(f"the {shape.name} drafter's {what} do not fit {where} ({free / 1e9:.2f} GB): use a "
                              "smaller shape, --context or --max-sessions, or run it on the drafter's GPU")
        self.graphs = graphs and self.device == "cuda"
        self._graphs: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
        #: run_bodies' pinned buffers (stage, ids back) and their views (host bytes, BF16 input, ids)
        self._stages: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: slots(): per (rows, K), pinned host memory for `sessions` requests and its batch views
        self._pools: dict[tuple[int, int], _Pool] = {}
        self._ev: tuple[Any, ...] | None = None  # the timing events, made once (run_bodies)
        #: the SDPA backend each captured graph runs (the fastest measured: fastest_attention)
        self.attention: dict[tuple[Any, ...], str] = {}
        self._info: dict[str, Any] | None = None
        try:
            self.w = pack(load_weights(self, weights) if weights is not None else random_weights(self, seed),
                          shape)
        except RuntimeError as exc:  # an allocation that failed anyway (torch.OutOfMemoryError is one)
            raise ConfigError(f"cannot place the {shape.name} drafter's weights on {self.device}: "
                              f"{str(exc).splitlines()[0][:200]}") from None
        self.weights_from = str(weights) if weights is not None else "random"
        #: per layer the context's K and V, one slot per session: (sessions, kv heads, context +
        #: NEW_ROWS, head_dim); a forward writes its rows' K/V after the context and attends over
        #: both. A batch of b reads slots 0..b-1 (the time, not the values, is measured: each
        #: target's forward reads a context of its own, as an engine's paged cache does)
        self.kv = [tuple(torch.zeros(sessions, shape.num_key_value_heads, context + NEW_ROWS, shape.head_dim,
                                     dtype=self.dtype, device=self.device) for _ in range(2))
                   for _ in range(shape.num_hidden_layers)] if context else []

    def cache_bytes(self, dtype_bytes: int = 2) -> int:
        """The context KV cache's bytes (every session's, every layer's)."""
        return self.sessions * (self.context + NEW_ROWS) * self.shape.kv_bytes_per_token(dtype_bytes) \
            if self.context else 0

    def read_bytes(self, batch: int = 1, rows: int = 1) -> int:
        """What one forward of `batch` targets reads: the weights, and each target's context KV."""
        dtype_bytes = 2 if self.device == "cuda" else 4
        ctx = batch * (self.context + rows) * self.shape.kv_bytes_per_token(dtype_bytes) if self.context else 0
        return self.shape.weight_bytes(dtype_bytes) + ctx

    # -- the forward ----------------------------------------------------------------------
    def rows_from(self, body: Any, batch: int, rows: int) -> Any:
        """A (batch x rows) request body of BF16 values as the forward's input on its device."""
        torch = self.torch
        raw = np.frombuffer(body, dtype=np.uint16) if not isinstance(body, np.ndarray) else body.view(np.uint16)
        t = torch.from_numpy(raw.astype(np.int16, copy=False).reshape(batch, rows, self.shape.fc_in_features))
        return self._clean(t.view(torch.bfloat16).to(device=self.device))

    def tap_rows(self, body: Any, rows: int) -> Any:
        """One tap's chunk (rows x hidden BF16) as fc's input slice on the device."""
        torch = self.torch
        raw = np.frombuffer(body, dtype=np.uint16).astype(np.int16, copy=False)
        return self._clean(torch.from_numpy(raw.reshape(1, rows, self.shape.hidden_size)).view(torch.bfloat16)
                           .to(device=self.device))

    # -- timed runs -----------------------------------------------------------------------
    def run(self, x: Any, k: int) -> tuple[Any, int]:
        """The forward on x (batch, rows, fc_in): the ids (host int64 array) and the forward's
        own ns (CUDA events on a GPU: a captured graph per (batch, rows) replayed where graphs
        are on; the process clock on a CPU)."""
        torch = self.torch
        if self.device != "cuda":
            t0 = time.perf_counter_ns()
            with torch.inference_mode():
                ids = self.forward(x, k)
            return ids.numpy(), time.perf_counter_ns() - t0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.inference_mode():
            if self.graphs:
                g, inp, out = self._graph(tuple(x.shape), k)
                inp.copy_(x)
                start.record()
                g.replay()
                end.record()
                ids = out
            else:
                start.record()
                ids = self.forward(x, k)
                end.record()
            host = ids.to("cpu")
        return host.numpy(), int(round(start.elapsed_time(end) * 1e6))

    def run_bodies(self, bodies: list[Any], rows: int, k: int) -> tuple[Any, int, int, int]:
        """The forward on a batch of request bodies (one per session, `rows` rows each): the
        ids (batch, K), the forward's own ns, and the ns before and after it: staging (the
        bodies into the forward's input on its device) and the ids back on the host (the
        ledger's parts, docs/DRAFTER.md). On a GPU with graphs it is staged the way a
        serving engine stages a drafter's input: each body copied straight into a pinned
        host buffer, one asynchronous copy into the graph's static input, the cleaning of
        random bytes' NaNs captured in the graph, the ids copied back into pinned memory
        (pageable copies, and cleaning as separate launches, cost ~0.3 ms a cycle outside
        the forward: docs/DRAFTER.md). Elsewhere: rows_from, then run."""
        t0 = time.perf_counter_ns()
        if not self.graphs:
            flat = np.concatenate([np.frombuffer(b, dtype=np.uint8) for b in bodies])
            x = self.rows_from(flat, len(bodies), rows)
            if self.device == "cuda":
                self.torch.cuda.current_stream().synchronize()
            staged = time.perf_counter_ns() - t0
            ids, ns = self.run(x, k)
            return ids, ns, staged, 0
        g, inp, out, stage, back, host, src, ids = self._graph((len(bodies), rows, self.shape.fc_in_features), k,
                                                               staged=True)
        n = rows * self.shape.row_bytes
        pool = self._pools.get((rows, k))
        if pool is not None and pool.holds(bodies, n):  # received straight into its slots: no copy
            src = pool.batch(len(bodies), src.shape)
        else:
            for j, b in enumerate(bodies):
                host[j * n:(j + 1) * n] = np.frombuffer(b, dtype=np.uint8)
        copied = time.perf_counter_ns() - t0
        h2d, start, end, d2h = self._events()
        h2d.record()  # no autograd context: the tensors here need none, and entering one costs a cycle ~5 us
        inp.copy_(src, non_blocking=True)
        start.record()
        g.replay()
        end.record()
        back.copy_(out, non_blocking=True)
        d2h.record()
        d2h.synchronize()
        return (ids.copy(), int(round(start.elapsed_time(end) * 1e6)),
                copied + int(round(h2d.elapsed_time(start) * 1e6)), int(round(end.elapsed_time(d2h) * 1e6)))

    def slots(self, rows: int, k: int) -> list[Any]:
        """_Pool's slots for `sessions` requests of `rows` rows; [] where nothing is staged."""
        if self.graphs and (rows, k) not in self._pools:
            self._pools[rows, k] = _Pool(self.torch, self.sessions, rows * self.shape.row_bytes)
        return self._pools[rows, k].slots if self.graphs else []

    def _events(self) -> tuple[Any, Any, Any, Any]:
        """The timing events of run_bodies, made once: before the H2D copy, the forward's start
        and end, after the D2H copy."""
        if self._ev is None:
            self._ev = tuple(self.torch.cuda.Event(enable_timing=True) for _ in range(4))
        return self._ev

    def _clean(self, raw: Any) -> Any:
        """Random bytes as BF16 hold NaNs and infinities: 0 and +-1; with random weights also
        +-4 at most (their ids mean nothing). Real weights see the rows as sent, but for
        non-finite values: a real state's outliers are far beyond 4, and clamping them would
        make ids that are not the drafter's."""
        x = self.torch.nan_to_num(raw.to(self.dtype), nan=0.0, posinf=1.0, neginf=-1.0)
        return x.clamp_(-4.0, 4.0) if self.weights_from == "random" else x

    def _graph(self, xs: tuple[int, ...], k: int, staged: bool = False) -> tuple[Any, ...]:
        """A captured forward per (batch, rows, K): (graph, static input, output), and with
        `staged` its input cleaned inside the graph, its pinned host buffers (stage, ids) and
        their views, made once (the stage's bytes, the stage as the input's BF16, the ids)."""
        torch, key = self.torch, (*xs, k, staged)
        found = self._capture(key, xs, torch.bfloat16 if staged else self.dtype,
                              lambda inp: self.forward(self._clean(inp) if staged else inp, k))
        if not staged:
            return found
        if key not in self._stages:  # made once, with the views run_bodies reads each cycle
            stage = torch.empty(found[1].numel() * 2, dtype=torch.uint8, pin_memory=True)
            back = torch.empty(found[2].shape, dtype=found[2].dtype, pin_memory=True)
            self._stages[key] = (stage, back, stage.numpy(), stage.view(torch.bfloat16).view(found[1].shape),
                                 back.numpy())
        return (*found, *self._stages[key])

    def _tail(self, h: Any, k: int, every: bool) -> Any:
        if self.shape.block_size and not every:
            return self.sample_block(self.block_trunk(h, k))
        return self.sample(self.trunk(h, last_only=not every)[0], k)

    def tail(self, h: Any, k: int, every: bool) -> Any:
        """The forward after fc, from fc's output h (1, rows, hidden) on the device: the K ids
        of the last row (1, K), or with `every` of every row (rows, K) (--early all's
        candidates). Graphed where graphs are on (the copy into its static input and the
        replay are queued: the ids are ready once the stream is)."""
        if not self.graphs:
            return self._tail(h, k, every)
        g, inp, out = self._capture(("tail", *h.shape, k, every), tuple(h.shape), self.dtype,
                                    lambda inp: self._tail(inp, k, every))
        inp.copy_(h)
        g.replay()
        return out

    def _capture(self, key: tuple[Any, ...], xs: tuple[int, ...], dtype: Any, fn: Any) -> tuple[Any, Any, Any]:
        """A CUDA graph of fn over a static input of shape xs, made once per key: (graph,
        static input, output)."""
        torch = self.torch
        if key not in self._graphs:
            try:
                inp = torch.zeros(xs, dtype=dtype, device=self.device)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):  # warm-up before capture, as torch's graph docs ask
                        fn(inp)
                torch.cuda.current_stream().wait_stream(side)
                backend = fastest_attention(torch, fn, inp)
                g = torch.cuda.CUDAGraph()
                with torch.nn.attention.sdpa_kernel([backend]), torch.cuda.graph(g):
                    out = fn(inp)
                self.attention[key] = backend.name
            except RuntimeError as exc:
                raise ConfigError(f"the {self.shape.name} drafter cannot run a batch of {xs[0]} x {xs[1]} rows on "
                                  f"this GPU: {str(exc).splitlines()[0][:200]}") from None
            self._graphs[key] = (g, inp, out)
        return self._graphs[key]

    def tensors(self) -> dict[str, Any]:
        """The weights by their names in a .safetensors file (what `--drafter-weights` reads)."""
        return file_tensors(self)

    def streamed(self, rows: int, k: int, early: str) -> StreamedDraft:
        """One streamed cycle's work on this model, begun on the taps as they land."""
        from hopbench.models.streamed import StreamedDraft

        return StreamedDraft(self, rows, k, early)

    def refusal(self, k: int) -> str | None:
        """Why this drafter cannot draft K ids a pass (a REFUSE line), or None."""
        b = self.shape.block_size
        if b and k + 1 > b:
            return (f"the {self.shape.name} drafter drafts blocks of {b} (an anchor and at most {b - 1} drafts): "
                    f"K = {k} does not fit; use K <= {b - 1}")
        return None

    def info(self) -> dict[str, Any]:
        """What report.json names: the shape, the device, the weight bytes read and their floor
        (the copy bandwidth measured once)."""
        if self._info is None:
            self._info = describe(self)
        return dict(self._info)


def file_tensors(m: Model) -> dict[str, Any]:
    """The model's weights by their names in a .safetensors file: the packed matrices split
    back into q/k/v and gate/up."""
    shapes, out = weight_shapes(m.shape), dict[str, Any]()
    for name, t in m.w.items():
        if name.endswith(("qkv_proj", "gate_up_proj")):
            p = name[:name.rindex(".") + 1]
            parts = ([p + f"self_attn.{c}_proj.weight" for c in "qkv"] if name.endswith("qkv_proj")
                     else [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"])
            out.update(zip(parts, t.split([shapes[n][0] for n in parts], dim=0)))
        else:
            out[name] = t
    return out


def describe(m: Model) -> dict[str, Any]:
    """Model.info's record, the device's read bandwidth measured now (each method's, the
    best the floor's): the floor of one target's forward is what it reads (the weights and
    its context's KV) at that bandwidth."""
    torch = m.torch
    dtype_bytes = 2 if m.device == "cuda" else 4
    methods = read_bandwidth(torch, m.device)
    best = max(methods.values())
    return {"shape": m.shape.to_dict(), "device": m.device, "dtype": str(m.dtype).replace("torch.", ""),
            "weights": m.weights_from, "weight_bytes": m.shape.weight_bytes(dtype_bytes), "cuda_graphs": m.graphs,
            "torch": torch.__version__, "ids_meaningful": m.weights_from != "random",
            "gpu": torch.cuda.get_device_name() if m.device == "cuda" else None,
            "context": m.context, "context_kv_bytes": m.read_bytes(1, 1) - m.shape.weight_bytes(dtype_bytes),
            "bandwidth_methods": methods, "read_bytes_per_s": best,
            "read_floor_ns": int(m.read_bytes(1, 1) / best * 1e9)}


def random_weights(m: Model, seed: int) -> dict[str, Any]:
    """Random weights of the model's shape on its device (the norms ones)."""
    torch = m.torch
    gen = torch.Generator(device=m.device).manual_seed(seed)
    out = {}
    for name, shp in weight_shapes(m.shape).items():
        if name.endswith("norm.weight"):
            out[name] = torch.ones(shp, dtype=m.dtype, device=m.device)
            continue
        t = torch.empty(shp, dtype=m.dtype, device=m.device)
        t.normal_(0.0, 1.0 / math.sqrt(shp[-1]), generator=gen)
        out[name] = t
    return out


def pack(w: dict[str, Any], s: DrafterShape) -> dict[str, Any]:
    """Each layer's q/k/v projections as one matrix (`qkv_proj`) and gate/up as one
    (`gate_up_proj`), as serving engines pack them (vLLM's QKVParallelLinear and
    MergedColumnParallelLinear): one matrix product each, the same bytes read. The parts are
    freed as each layer is packed."""
    torch = load_torch()
    for i in range(s.num_hidden_layers):
        p = f"layers.{i}."
        for fused, parts in (("qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                             ("gate_up_proj", ("mlp.gate_proj", "mlp.up_proj"))):
            w[p + fused] = torch.cat([w.pop(p + part + ".weight") for part in parts], dim=0)
    return w


def load_weights(m: Model, path: Path) -> dict[str, Any]:
    """The weights of a .safetensors file, each tensor's shape checked against the model's."""
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        raise DrafterUnavailable(f"--drafter-weights needs safetensors; install it with: {INSTALL}") from None
    want = weight_shapes(m.shape)
    out = {}
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            have = set(f.keys())
            missing = sorted(set(want) - have)
            if missing:
                raise ConfigError(f"{path}: no tensor {missing[0]!r} ({len(missing)} of the {m.shape.name} "
                                  f"drafter's {len(want)} missing; docs/DRAFTER.md names them)")
            for name, shp in want.items():
                t = f.get_tensor(name)
                if tuple(t.shape) != shp:
                    raise ConfigError(f"{path}: {name} is {list(t.shape)}, the config says {list(shp)}")
                out[name] = t.to(device=m.device, dtype=m.dtype)
    except (OSError, ValueError, SafetensorError) as exc:  # not a safetensors file, or a truncated one
        raise ConfigError(f"{path}: not a .safetensors file of the drafter's weights ({str(exc)[:160]})") from None
    return out


def read_bandwidth(torch: Any, device: str, nbytes: int | None = None, repeats: int = 5) -> dict[str, float]:
    """The device's read bandwidth in bytes/s by three methods, each the best of `repeats`:
    `copy` (bytes read + written by a copy), `sum` (a reduction: each byte read once), `gemv`
    (a matrix-vector product over a weight-like matrix: a decode forward's own access). The
    highest is the floor's (a weight- and KV-read-bound forward cannot beat it). On a GPU the
    buffers are 1 GiB where an eighth of the free memory allows: with 256 MiB ones the best
    method read 2,774 GB/s on an H100 where a plain 1 GiB copy read 2,996 (docs/DRAFTER.md)."""
    if nbytes is None:
        nbytes = min(1 << 30, memory_free(torch, device) // 8 >> 20 << 20) if device == "cuda" else 1 << 28
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)  # written: untouched pages read as one zero page
    dst = torch.zeros_like(src)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    mat = torch.ones((nbytes // dt.itemsize) // 4096, 4096, dtype=dt, device=device)
    vec = torch.ones(4096, 1, dtype=dt, device=device)
    work = {"copy": (lambda: dst.copy_(src), 2 * nbytes),
            "sum": (lambda: torch.sum(src.view(dt), dtype=torch.float32), nbytes),
            "gemv": (lambda: mat @ vec, mat.numel() * dt.itemsize)}
    return {name: moved / _best_s(torch, device, fn, repeats) for name, (fn, moved) in work.items()}


def _best_s(torch: Any, device: str, fn: Any, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats + 1):  # the first warms up (and is as likely to be the best as not)
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
    return best


def fastest_attention(torch: Any, fn: Any, inp: Any, runs: int = 3) -> Any:
    """The SDPA backend to capture fn under: the fastest of cuDNN's, FlashAttention's and
    the memory-efficient one that run it (each timed over `runs` eager runs after a warm-up,
    CUDA events), as an engine autotunes its attention kernel. cuDNN's, torch's first
    choice on an H100, keeps a batch-1 decode's few query rows on few SMs (0.223 ms for 335
    MB of context KV, 1.5 TB/s: docs/DRAFTER.md "Calibrated")."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    best: tuple[float, Any] | None = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel([backend]), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a backend's "not used because ..." lines
                fn(inp)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(runs):
                    fn(inp)
                end.record()
                end.synchronize()
        except RuntimeError:  # this backend cannot run these shapes (a mask, a head size)
            continue
        ms = start.elapsed_time(end)
        if best is None or ms < best[0]:
            best = (ms, backend)
    return best[1] if best is not None else SDPBackend.MATH


def sweep_rows(model: Model, rows: list[int], k: int, repeats: int, graphs: bool, targets: int = 1) -> list[dict[str, Any]]:
    """`hopbench drafter`: the forward's time at each row count (a batch of `targets`, each
    with its rows and context), `repeats` timed forwards after warm-up, with or without CUDA
    graphs."""
    was = model.graphs
    model.graphs = graphs and model.device == "cuda"
    out = []
    try:
        for n in rows:
            x = model.rows_from(np.random.default_rng(n).integers(0, 1 << 16, targets * n * model.shape.fc_in_features,
                                                                  dtype=np.uint16).view(np.uint8), targets, n)
            for _ in range(3):
                model.run(x, k)
            ns = np.array([model.run(x, k)[1] for _ in range(repeats)], dtype=np.int64)
            out.append({"rows": n, "graphs": model.graphs, "forward_ns": ns,
                        "attention": model.attention.get((targets, n, model.shape.fc_in_features, k, False), "")
                        if model.graphs else ""})  # eager runs torch's default backend
    finally:
        model.graphs = was
    return out


__all__ = ["BF16_BYTES", "DSPARK_GLM5", "DrafterShape", "DrafterUnavailable", "EAGLE3_LLAMA70B", "Model", "PRESETS",
           "TINY", "parse_shape", "read_bandwidth", "shape_from_config", "sweep_rows", "weight_shapes"]
