"""A drafter's shape (docs/DRAFTER.md): its dimensions as a Hugging Face config.json names
them, the presets (the study's DSpark for GLM-5.2, EAGLE-3 for Llama-3.3-70B and for
Llama-3.1-8B, a tiny test shape: PRESETS) and every tensor its forward reads."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hopbench.errors import ConfigError

BF16_BYTES = 2


@dataclass(frozen=True)
class DrafterShape:
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
    #: block drafting (DFlash, DSpark): an anchor and block_size - 1 mask positions run as one
    #: pass of query rows over the context and the cycle's rows, up to block_size - 1 drafts a
    #: pass (then the Markov head's sequential steps, where there is one); 0: one row sampled
    block_size: int = 0

    def kv_bytes_per_token(self, dtype_bytes: int = BF16_BYTES) -> int:
        """One context token's K and V in every layer (80 KiB for the study's DSpark)."""
        return self.num_hidden_layers * 2 * self.num_key_value_heads * self.head_dim * dtype_bytes

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
DSPARK_GLM5 = DrafterShape("dspark-glm5", 6144, 5, 12288, 64, 64, 64, 154880, 5 * 6144, markov_rank=256,
                           block_size=8,
                           source="the remote-drafter study's DSpark speculator for GLM-5.2 (issue 50, docs/STUDY.md; "
                                  "block_size 8 as RedHatAI/GLM-5.2-speculator.dspark, pegainfer PR 553)")
#: EAGLE-3 for Llama-3.3-70B (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B config.json): hidden 8192,
#: one decoder layer over [embedding; hidden], 64 heads / 8 KV x 128, FFN 28,672, fc 3 x 8192,
#: its reduced draft vocabulary of 32,000 (draft_vocab_size)
EAGLE3_LLAMA70B = DrafterShape("eagle3-llama70b", 8192, 1, 28672, 64, 8, 128, 32000, 3 * 8192, needs_tokens=True,
                               source="EAGLE-3 for Llama-3.3-70B (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B config.json)")
#: EAGLE-3 for Llama-3.1-8B (the public EAGLE-3 draft configs for Llama-3.1-8B-Instruct, as
#: SpecForge's llama3-8B-eagle3.json): hidden 4096, one decoder layer over [embedding; hidden],
#: 32 heads / 8 KV x 128, FFN 14,336, fc 3 x 4096, the reduced draft vocabulary of 32,000
EAGLE3_LLAMA8B = DrafterShape("eagle3-llama8b", 4096, 1, 14336, 32, 8, 128, 32000, 3 * 4096, needs_tokens=True,
                              source="EAGLE-3 for Llama-3.1-8B-Instruct (the public llama3-8B-eagle3 draft config)")
#: a tiny drafter for tests and CPU-only hosts (5 taps x 64)
TINY = DrafterShape("tiny", 64, 2, 128, 4, 2, 16, 512, 5 * 64, markov_rank=8, block_size=8,
                    source="hopbench's test shape")
PRESETS = {s.name: s for s in (DSPARK_GLM5, EAGLE3_LLAMA70B, EAGLE3_LLAMA8B, TINY)}

REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size")


def shape_from_config(path: Path) -> DrafterShape:
    """A drafter's shape from its Hugging Face config.json: the keys of REQUIRED_KEYS, and
    num_key_value_heads (default: the heads), head_dim (hidden / heads), draft_vocab_size
    (EAGLE-3's reduced vocabulary, over vocab_size), the fc input width (fc_in_features, or
    hopbench_taps x hidden, default 3 taps as EAGLE-3), markov_rank (0), needs_tokens and block_size (0)."""
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
    shape = DrafterShape(path.parent.name or path.stem, h, num("num_hidden_layers", 0), num("intermediate_size", 0),
                         heads, num("num_key_value_heads", heads), num("head_dim", h // heads),
                         num("draft_vocab_size", num("vocab_size", 0)), num("fc_in_features", taps * h),
                         markov_rank=num("markov_rank", 0), needs_tokens=needs, source=str(path),
                         block_size=num("block_size", 0))
    if shape.vocab_size < 1 or shape.num_key_value_heads < 1 or shape.head_dim < 1:
        raise ConfigError(f"{path}: vocab_size, num_key_value_heads and head_dim must be at least 1")
    if shape.num_attention_heads % shape.num_key_value_heads:
        raise ConfigError(f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
                          f"{shape.num_key_value_heads}")
    return shape


def parse_shape(spec: str) -> DrafterShape:
    """A preset's name, or the path of a config.json (or of the folder holding one)."""
    if spec in PRESETS:
        return PRESETS[spec]
    p = Path(spec)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" or p.exists():
        return shape_from_config(p)
    raise ConfigError(f"unknown drafter shape {spec!r}: a preset ({', '.join(PRESETS)}) or a config.json")


def weight_shapes(s: DrafterShape) -> dict[str, tuple[int, ...]]:
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
    if s.block_size:
        out["mask_embedding"] = (h,)  # the block's anchor and mask positions' input
    return out
