"""The drafter's forward as torch operations over its weights (docs/DRAFTER.md "The
model"): the decoder layers over the cycle's rows (one row sampled) or a block of mask
positions over them (block drafting), each layer's attention over the context KV cache and
the new rows, and the sampling of the K ids. hopbench.models.drafter.Model holds the weights
and the cache and runs this forward as an engine does (CUDA graphs, staging, timing)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hopbench.errors import ConfigError
from hopbench.models.shapes import DrafterShape

#: the rows a forward may add after the context (a cycle's K + 1, a block's, `hopbench drafter --rows`)
NEW_ROWS = 256


class DraftForward:
    """The forward's math; the attributes are the model's (hopbench.models.drafter.Model)."""

    torch: Any
    shape: DrafterShape
    w: dict[str, Any]
    kv: list[tuple[Any, ...]]  # per layer the context's K and V (empty without a context)
    context: int
    device: str
    dtype: Any

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
            n = 1 if last_only and i == s.num_hidden_layers - 1 else t
            if n < t:  # the last layer: the last row's query only; it sees every row's key
                h, q = h[:, -1:], q[:, -1:]
            a = self._attend(i, q.reshape(b, n, nh, hd).transpose(1, 2), k.view(b, t, nkv, hd).transpose(1, 2),
                             v.view(b, t, nkv, hd).transpose(1, 2), causal=True)
            h = self._layer_rest(p, h, a.transpose(1, 2).reshape(b, n, nh * hd))
        return self._norm(h, w["norm.weight"])

    def _layer_rest(self, p: str, h: Any, a: Any) -> Any:
        """A decoder layer after its attention: o_proj added to h, then the SwiGLU MLP."""
        torch, w = self.torch, self.w
        h = _linear_add(torch, h, a, w[p + "self_attn.o_proj.weight"])
        g, u = (self._norm(h, w[p + "post_attention_layernorm.weight"]) @ w[p + "gate_up_proj"].T).chunk(2, -1)
        return _linear_add(torch, h, torch.nn.functional.silu(g) * u, w[p + "mlp.down_proj.weight"])

    def _attend(self, i: int, q: Any, k: Any, v: Any, causal: bool) -> Any:
        """Layer i's attention: q (b, heads, n, hd) over this forward's keys and values (b, kv
        heads, t, hd) and, with a context, the context's before them (the rows' K/V written into
        the cache after it, so the context is read in place, never copied). `causal`: query r
        (of the last n rows) sees the context and rows up to its own; else every row (a block's
        bidirectional attention)."""
        torch = self.torch
        b, n, t = q.shape[0], q.shape[2], k.shape[2]
        c = self.context
        if self.kv:
            kc, vc = self.kv[i]
            if b > kc.shape[0] or t > NEW_ROWS:
                raise ConfigError(f"a forward of {b} targets x {t} rows: the context cache holds {kc.shape[0]} "
                                  f"sessions and {NEW_ROWS} new rows each")
            kc[:b, :, c:c + t].copy_(k)
            vc[:b, :, c:c + t].copy_(v)
            k, v = kc[:b, :, :c + t], vc[:b, :, :c + t]
        mask = None
        if causal and n > 1 and (c or n < t):
            mask = torch.arange(c + t, device=q.device)[None, :] <= (c + t - n + torch.arange(n, device=q.device))[:, None]
        gqa = k.shape[1] != q.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and n == t and n > 1 and not c, enable_gqa=gqa)

    def block_trunk(self, hc: Any, k: int) -> Any:
        """Block drafting (DFlash, DSpark): the cycle's rows hc (b, t, hidden: fc's output) enter
        every layer as keys and values only, after the context; the block (an anchor and k mask
        positions, the mask embedding) runs the layers as query rows over the context, the rows
        and itself (bidirectional). Returns the normed block rows after the anchor (b, k, hidden)."""
        torch, s, w = self.torch, self.shape, self.w
        b, t, hsz = hc.shape
        nh, nkv, hd = s.num_attention_heads, s.num_key_value_heads, s.head_dim
        h = w["mask_embedding"].expand(b, k + 1, hsz)
        n = t + k + 1
        for i in range(s.num_hidden_layers):
            p = f"layers.{i}."
            # one QKV product over the rows and the block, so each layer's QKV weights are read
            # once (the rows' queries are not wanted; at a few rows their compute is free)
            x = self._norm(torch.cat([hc, h], dim=1), w[p + "input_layernorm.weight"]) @ w[p + "qkv_proj"].T
            q = x[:, t:, :nh * hd].view(b, k + 1, nh, hd).transpose(1, 2)
            keys = x[:, :, nh * hd:(nh + nkv) * hd].view(b, n, nkv, hd).transpose(1, 2)
            values = x[:, :, (nh + nkv) * hd:].view(b, n, nkv, hd).transpose(1, 2)
            a = self._attend(i, q, keys, values, causal=False)
            h = self._layer_rest(p, h, a.transpose(1, 2).reshape(b, k + 1, nh * hd))
        return self._norm(h[:, 1:], w["norm.weight"])

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
        if self.shape.block_size:
            return self.sample_block(self.block_trunk(self.fc(x), k))
        return self.sample(self.trunk(self.fc(x), last_only=True)[:, -1, :], k)

    def sample_block(self, rows: Any) -> Any:
        """The K ids of a block (b, K, hidden): lm_head over every position at once, then each
        position's argmax, with a Markov head plus the low-rank bigram logits of the id before
        it (K - 1 sequential steps). Returns (b, K) int64."""
        torch, w = self.torch, self.w
        logits = rows @ w["lm_head.weight"].T
        if not self.shape.markov_rank:
            return logits.argmax(-1)
        ids = [logits[:, 0].argmax(-1)]
        embed, proj = w["markov.embed"], w["markov.proj"]
        for j in range(1, rows.shape[1]):
            ids.append((logits[:, j] + embed[ids[-1]] @ proj.T).argmax(-1))
        return torch.stack(ids, dim=1)


def _linear_add(torch: Any, h: Any, x: Any, weight: Any) -> Any:
    """h + x @ weight.T as one matrix product (the residual added in its epilogue)."""
    return torch.addmm(h.reshape(-1, h.shape[-1]), x.reshape(-1, x.shape[-1]), weight.T).view(h.shape)
