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

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hopbench.errors import ConfigError, HopbenchError

if TYPE_CHECKING:
    from hopbench.models.streamed import StreamedDraft

INSTALL = "pip install 'hopbench[drafter]'"
BF16_BYTES = 2


class DrafterUnavailable(HopbenchError):
    """The drafter's library (torch) is missing; the message carries the install line."""


def load_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise DrafterUnavailable(f"the drafter model needs torch ({exc}); install it with: {INSTALL}") from None
    return torch


@dataclass(frozen=True)
class Shape:
    """A drafter's dimensions (the Hugging Face config.json keys, docs/DRAFTER.md)."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    fc_in_features: int  # the aux taps x hidden: the width of one row the target sends
    markov_rank: int = 0  # DSpark's Markov head: 2 x [vocab, rank]; 0: none
    #: conditioned on the bonus token too (EAGLE-3 embeds it): `--early all` cannot run it
    needs_tokens: bool = False
    source: str = ""

    @property
    def row_bytes(self) -> int:
        """One row of the drafter's input in BF16 (61,440 B for the study's 5 x 6144)."""
        return self.fc_in_features * BF16_BYTES

    @property
    def taps(self) -> int:
        return max(1, self.fc_in_features // self.hidden_size)

    def weight_params(self) -> dict[str, int]:
        """Parameters read by one forward, by part (an embedding table is read by row only,
        so it is not counted)."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attn_in = 2 * h if self.needs_tokens else h  # EAGLE-3's layer reads [embedding; hidden]
        layer = attn_in * (q + 2 * kv) + q * h + 3 * h * self.intermediate_size + 2 * h
        return {"fc": self.fc_in_features * h, "layers": self.num_hidden_layers * layer, "norm": h,
                "lm_head": self.vocab_size * h, "markov": 2 * self.vocab_size * self.markov_rank}

    def weight_bytes(self, dtype_bytes: int = BF16_BYTES) -> int:
        return sum(self.weight_params().values()) * dtype_bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: hidden 6144, 5 decoder layers, 64 heads x 64 (MHA), FFN 12,288, fc [6144, 30720], a Markov
#: head 2 x [154880, 256], lm_head [154880, 6144]: GLM-5.2's DSpark speculator as issue 50
#: reports it from the study (docs/STUDY.md; 5.71 GB of BF16 read per step).
DSPARK_GLM5 = Shape("dspark-glm5", 6144, 5, 12288, 64, 64, 64, 154880, 5 * 6144, markov_rank=256,
                    source="the remote-drafter study's DSpark speculator for GLM-5.2 (issue 50, docs/STUDY.md)")
#: EAGLE-3 for Llama-3.3-70B (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B config.json): hidden 8192,
#: one decoder layer over [embedding; hidden], 64 heads / 8 KV x 128, FFN 28,672, fc 3 x 8192,
#: its reduced draft vocabulary of 32,000 (draft_vocab_size)
EAGLE3_LLAMA70B = Shape("eagle3-llama70b", 8192, 1, 28672, 64, 8, 128, 32000, 3 * 8192, needs_tokens=True,
                        source="EAGLE-3 for Llama-3.3-70B (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B config.json)")
#: a tiny drafter for tests and CPU-only hosts (5 taps x 64)
TINY = Shape("tiny", 64, 2, 128, 4, 2, 16, 512, 5 * 64, markov_rank=8, source="hopbench's test shape")
PRESETS = {s.name: s for s in (DSPARK_GLM5, EAGLE3_LLAMA70B, TINY)}

REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size")


def shape_from_config(path: Path) -> Shape:
    """A drafter's shape from its Hugging Face config.json: the keys of REQUIRED_KEYS, and
    num_key_value_heads (default: the heads), head_dim (hidden / heads), draft_vocab_size
    (EAGLE-3's reduced vocabulary, over vocab_size), the fc input width (fc_in_features, or
    hopbench_taps x hidden, default 3 taps as EAGLE-3), markov_rank (0) and needs_tokens."""
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the drafter's config {path}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: a drafter's config.json is a JSON object")
    for key in REQUIRED_KEYS:
        if key not in cfg:
            raise ConfigError(f"{path}: the drafter's config lacks {key!r} (needs {', '.join(REQUIRED_KEYS)})")

    def num(key: str, default: int) -> int:
        v = cfg.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{path}: {key!r} must be a non-negative integer, not {v!r}")
        return v

    h, heads = num("hidden_size", 0), num("num_attention_heads", 0)
    if h < 1 or heads < 1:
        raise ConfigError(f"{path}: 'hidden_size' and 'num_attention_heads' must be at least 1")
    taps = num("hopbench_taps", 3)
    needs = cfg.get("needs_tokens", "eagle" in str(cfg.get("architectures", "")).lower())
    if not isinstance(needs, bool):
        raise ConfigError(f"{path}: 'needs_tokens' must be true or false, not {needs!r}")
    shape = Shape(path.parent.name or path.stem, h, num("num_hidden_layers", 0), num("intermediate_size", 0), heads,
                  num("num_key_value_heads", heads), num("head_dim", h // heads),
                  num("draft_vocab_size", num("vocab_size", 0)), num("fc_in_features", taps * h),
                  markov_rank=num("markov_rank", 0), needs_tokens=needs, source=str(path))
    if shape.vocab_size < 1 or shape.num_key_value_heads < 1 or shape.head_dim < 1:
        raise ConfigError(f"{path}: vocab_size, num_key_value_heads and head_dim must be at least 1")
    if shape.num_attention_heads % shape.num_key_value_heads:
        raise ConfigError(f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
                          f"{shape.num_key_value_heads}")
    return shape


def parse_shape(spec: str) -> Shape:
    """A preset's name, or the path of a config.json (or of the folder holding one)."""
    if spec in PRESETS:
        return PRESETS[spec]
    p = Path(spec)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" or p.exists():
        return shape_from_config(p)
    raise ConfigError(f"unknown drafter shape {spec!r}: a preset ({', '.join(PRESETS)}) or a config.json")


def weight_shapes(s: Shape) -> dict[str, tuple[int, ...]]:
    """Every tensor the forward reads, by its name in a .safetensors file (docs/DRAFTER.md)."""
    h, q, kv = s.hidden_size, s.num_attention_heads * s.head_dim, s.num_key_value_heads * s.head_dim
    attn_in = 2 * h if s.needs_tokens else h
    out: dict[str, tuple[int, ...]] = {"fc.weight": (h, s.fc_in_features)}
    for i in range(s.num_hidden_layers):
        p = f"layers.{i}."
        out.update({p + "input_layernorm.weight": (h,), p + "self_attn.q_proj.weight": (q, attn_in),
                    p + "self_attn.k_proj.weight": (kv, attn_in), p + "self_attn.v_proj.weight": (kv, attn_in),
                    p + "self_attn.o_proj.weight": (h, q), p + "post_attention_layernorm.weight": (h,),
                    p + "mlp.gate_proj.weight": (s.intermediate_size, h),
                    p + "mlp.up_proj.weight": (s.intermediate_size, h),
                    p + "mlp.down_proj.weight": (h, s.intermediate_size)})
    out["norm.weight"] = (h,)
    out["lm_head.weight"] = (s.vocab_size, h)
    if s.markov_rank:
        out["markov.embed"] = (s.vocab_size, s.markov_rank)
        out["markov.proj"] = (s.vocab_size, s.markov_rank)
    if s.needs_tokens:
        out["embed_tokens.weight"] = (s.vocab_size, h)
    return out


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


class Model:
    """The drafter's weights on its device and its forward. `device`: "cuda" where torch
    sees a GPU, else "cpu" (`device="cpu"` forces it)."""

    def __init__(self, shape: Shape, *, weights: Path | None = None, device: str | None = None, seed: int = 0,
                 graphs: bool = True) -> None:
        torch = self.torch = load_torch()
        self.shape = shape
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("the drafter was asked for on cuda, but torch sees no GPU here")
        self.dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        need = shape.weight_params()
        nbytes = sum(need.values()) * (2 if self.device == "cuda" else 4)
        free = memory_free(torch, self.device)
        if nbytes > 0.9 * free:
            where = "the GPU's free memory" if self.device == "cuda" else "this host's available memory (no GPU)"
            raise ConfigError(f"the {shape.name} drafter's {nbytes / 1e9:.2f} GB of weights do not fit {where} "
                              f"({free / 1e9:.2f} GB): use a smaller shape, or run it on the drafter's GPU")
        self.graphs = graphs and self.device == "cuda"
        self._graphs: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
        self._stages: dict[tuple[Any, ...], tuple[Any, Any]] = {}  # run_bodies' pinned buffers
        self._ev: tuple[Any, Any] | None = None  # the timing events, made once (run_bodies)
        self._info: dict[str, Any] | None = None
        try:
            self.w = pack(load_weights(self, weights) if weights is not None else random_weights(self, seed),
                          shape)
        except RuntimeError as exc:  # an allocation that failed anyway (torch.OutOfMemoryError is one)
            raise ConfigError(f"cannot place the {shape.name} drafter's weights on {self.device}: "
                              f"{str(exc).splitlines()[0][:200]}") from None
        self.weights_from = str(weights) if weights is not None else "random"

    # -- the forward ----------------------------------------------------------------------
    def rows_from(self, body: Any, batch: int, rows: int) -> Any:
        """A (batch x rows) request body of BF16 values as the forward's input on its device."""
        torch = self.torch
        raw = np.frombuffer(body, dtype=np.uint16) if not isinstance(body, np.ndarray) else body.view(np.uint16)
        t = torch.from_numpy(raw.astype(np.int16, copy=False).reshape(batch, rows, self.shape.fc_in_features))
        return self._clean(t.view(torch.bfloat16).to(device=self.device))

    def _norm(self, x: Any, w: Any) -> Any:
        return self.torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def trunk(self, h: Any, tokens: Any = None, last_only: bool = False) -> Any:
        """The decoder layers and the final norm over fc's output h: (batch, rows, hidden).
        `last_only`: only the last row's output is wanted (the row that is sampled), so the
        last layer's attention query, o_proj and MLP run over it alone (its keys and values
        over every row); exact, as a serving engine computes only the positions it samples.
        Returns (batch, 1, hidden) then, else (batch, rows, hidden)."""
        torch, s, w = self.torch, self.shape, self.w
        b, t, _ = h.shape
        nh, nkv, hd = s.num_attention_heads, s.num_key_value_heads, s.head_dim
        for i in range(s.num_hidden_layers):
            p = f"layers.{i}."
            x = self._norm(h, w[p + "input_layernorm.weight"])
            if s.needs_tokens:
                e = w["embed_tokens.weight"][tokens if tokens is not None else torch.zeros(b, t, dtype=torch.long,
                                                                                         device=h.device)]
                x = torch.cat([e, x], dim=-1)
            q, k, v = (x @ w[p + "qkv_proj"].T).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
            k, v = k.view(b, t, nkv, hd).transpose(1, 2), v.view(b, t, nkv, hd).transpose(1, 2)
            if nkv != nh:
                k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
            n = 1 if last_only and i == s.num_hidden_layers - 1 else t
            if n < t:  # the last layer: the last row's query only; it sees every row's key (no mask)
                h, q = h[:, -1:], q[:, -1:]
            q = q.reshape(b, n, nh, hd).transpose(1, 2)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=n == t)
            h = _linear_add(torch, h, a.transpose(1, 2).reshape(b, n, nh * hd), w[p + "self_attn.o_proj.weight"])
            g, u = (self._norm(h, w[p + "post_attention_layernorm.weight"]) @ w[p + "gate_up_proj"].T).chunk(2, -1)
            h = _linear_add(torch, h, torch.nn.functional.silu(g) * u, w[p + "mlp.down_proj.weight"])
        return self._norm(h, w["norm.weight"])

    def sample(self, last: Any, k: int) -> Any:
        """The K ids from the trunk's output at one row per entry (n, hidden): lm_head, its
        argmax, then K - 1 Markov steps that each add the low-rank bigram logits of the
        previous id; without a Markov head, the top K of the logits. Returns (n, K) int64."""
        torch, w = self.torch, self.w
        logits = last @ w["lm_head.weight"].T
        if not self.shape.markov_rank:
            return torch.topk(logits, min(k, logits.shape[-1]), dim=-1).indices
        ids = [logits.argmax(-1)]
        embed, proj = w["markov.embed"], w["markov.proj"]
        for _ in range(k - 1):
            ids.append((logits + embed[ids[-1]] @ proj.T).argmax(-1))
        return torch.stack(ids, dim=1)

    def fc(self, x: Any, tap: int | None = None) -> Any:
        """fc over the whole row, or over one tap's slice (fc is linear over the taps:
        fc(x) = sum_j W_j x_j, so a tap's part can run as its chunk lands)."""
        w = self.w["fc.weight"]
        if tap is None:
            return x @ w.T
        hsz = self.shape.hidden_size
        return x @ w[:, tap * hsz:(tap + 1) * hsz].T

    def logits(self, x: np.ndarray) -> np.ndarray:
        """The head's logits at every row of x (batch, rows, fc_in) float32 values on the host,
        as float32 on the host (the codec agreement's drafts: hopbench.orchestration.agreement)."""
        torch = self.torch
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device=self.device, dtype=self.dtype)
        with torch.inference_mode():
            out: np.ndarray = (self.trunk(self.fc(t)) @ self.w["lm_head.weight"].T).float().cpu().numpy()
        return out

    def forward(self, x: Any, k: int) -> Any:
        return self.sample(self.trunk(self.fc(x), last_only=True)[:, -1, :], k)

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

    def run_bodies(self, bodies: list[Any], rows: int, k: int) -> tuple[Any, int]:
        """The forward on a batch of request bodies (one per session, `rows` rows each): the
        ids (batch, K) and the forward's own ns. On a GPU with graphs it is staged the way a
        serving engine stages a drafter's input: each body copied straight into a pinned
        host buffer, one asynchronous copy into the graph's static input, the cleaning of
        random bytes' NaNs captured in the graph, the ids copied back into pinned memory
        (pageable copies, and cleaning as separate launches, cost ~0.3 ms a cycle outside
        the forward: docs/DRAFTER.md). Elsewhere: rows_from, then run."""
        if not self.graphs:
            flat = np.concatenate([np.frombuffer(b, dtype=np.uint8) for b in bodies])
            return self.run(self.rows_from(flat, len(bodies), rows), k)
        torch = self.torch
        g, inp, out, stage, back = self._graph((len(bodies), rows, self.shape.fc_in_features), k, staged=True)
        host, n = stage.numpy(), rows * self.shape.row_bytes
        for j, b in enumerate(bodies):
            host[j * n:(j + 1) * n] = np.frombuffer(b, dtype=np.uint8)
        start, end = self._events()
        with torch.inference_mode():
            inp.copy_(stage.view(torch.bfloat16).view(inp.shape), non_blocking=True)
            start.record()
            g.replay()
            end.record()
            back.copy_(out, non_blocking=True)
            torch.cuda.current_stream().synchronize()
        return back.numpy().copy(), int(round(start.elapsed_time(end) * 1e6))

    def _events(self) -> tuple[Any, Any]:
        if self._ev is None:
            self._ev = (self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True))
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
        `staged` its input cleaned inside the graph and its pinned host buffers (stage, ids)."""
        torch, key = self.torch, (*xs, k, staged)
        found = self._capture(key, xs, torch.bfloat16 if staged else self.dtype,
                              lambda inp: self.forward(self._clean(inp) if staged else inp, k))
        if not staged:
            return found
        if key not in self._stages:
            self._stages[key] = (torch.empty(found[1].numel() * 2, dtype=torch.uint8, pin_memory=True),
                                 torch.empty(found[2].shape, dtype=found[2].dtype, pin_memory=True))
        return (*found, *self._stages[key])

    def _tail(self, h: Any, k: int, every: bool) -> Any:
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
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    out = fn(inp)
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
    """Model.info's record, its copy bandwidth measured now."""
    torch = m.torch
    out: dict[str, Any] = {"shape": m.shape.to_dict(), "device": m.device,
                           "dtype": str(m.dtype).replace("torch.", ""), "weights": m.weights_from,
                           "weight_bytes": m.shape.weight_bytes(2 if m.device == "cuda" else 4),
                           "cuda_graphs": m.graphs, "torch": torch.__version__,
                           "ids_meaningful": m.weights_from != "random",
                           "gpu": torch.cuda.get_device_name() if m.device == "cuda" else None}
    bw = copy_bandwidth(torch, m.device)
    out["copy_bytes_per_s"] = bw
    out["weight_read_floor_ns"] = int(out["weight_bytes"] / bw * 1e9)
    return out


def _linear_add(torch: Any, h: Any, x: Any, weight: Any) -> Any:
    """h + x @ weight.T as one matrix product (the residual added in its epilogue)."""
    return torch.addmm(h.reshape(-1, h.shape[-1]), x.reshape(-1, x.shape[-1]), weight.T).view(h.shape)


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


def pack(w: dict[str, Any], s: Shape) -> dict[str, Any]:
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
        from safetensors import safe_open
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
    except (OSError, ValueError) as exc:  # not a safetensors file
        raise ConfigError(f"cannot read the drafter's weights {path}: {str(exc)[:200]}") from None
    return out


def copy_bandwidth(torch: Any, device: str, nbytes: int = 1 << 28, repeats: int = 5) -> float:
    """The device's measured copy bandwidth, bytes read + written per second (the best of
    `repeats` copies of `nbytes`): a weight-read-bound forward's floor is weight bytes / it."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(repeats + 1):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            dt = time.perf_counter() - t0
        best = min(best, dt)
    return 2 * nbytes / best


def sweep_rows(model: Model, rows: list[int], k: int, repeats: int, graphs: bool) -> list[dict[str, Any]]:
    """`hopbench drafter`: the forward's time at each row count (one batch), `repeats` timed
    forwards after warm-up, with or without CUDA graphs."""
    was = model.graphs
    model.graphs = graphs and model.device == "cuda"
    out = []
    try:
        for n in rows:
            x = model.rows_from(np.random.default_rng(n).integers(0, 1 << 16, n * model.shape.fc_in_features,
                                                                  dtype=np.uint16).view(np.uint8), 1, n)
            for _ in range(3):
                model.run(x, k)
            ns = np.array([model.run(x, k)[1] for _ in range(repeats)], dtype=np.int64)
            out.append({"rows": n, "graphs": model.graphs, "forward_ns": ns})
    finally:
        model.graphs = was
    return out


__all__ = ["DrafterUnavailable", "Model", "PRESETS", "Shape", "copy_bandwidth", "parse_shape",
           "shape_from_config", "sweep_rows", "weight_shapes"]
