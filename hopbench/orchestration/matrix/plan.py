"""The matrix's plan: pairs of nodes, rounds of disjoint pairs (the circle method), the
cells of each and the job a cell sends to its client node."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from hopbench.orchestration.matrix.config import (
    MatrixConfig,
)
from hopbench.orchestration.sweep.plan import Cell as SweepCell
from hopbench.records import Place, RunConfig, Series
from hopbench.shape import payloads


def pairs(nodes: list[str], ordered: bool) -> list[tuple[str, str]]:
    """(client, server) pairs: every ordered pair, or every unordered pair once."""
    return [(a, b) for i, a in enumerate(nodes) for j, b in enumerate(nodes) if i != j and (ordered or i < j)]


def rounds(nodes: list[str], ordered: bool) -> list[list[tuple[str, str]]]:
    """The pairs in rounds of disjoint pairs (round-robin circle method; with an odd count
    one node sits out each round). Ordered pairs: each round twice, once per direction."""
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    n = len(ring)
    out: list[list[tuple[str, str]]] = []
    for _ in range(n - 1):
        rnd = [(a, b) for i in range(n // 2) if (a := ring[i]) is not None and (b := ring[n - 1 - i]) is not None]
        canon = [(a, b) if nodes.index(a) < nodes.index(b) else (b, a) for a, b in rnd]
        out.append(canon)
        if ordered:
            out.append([(b, a) for a, b in canon])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def pair_name(client: str, server: str) -> str:
    """A pair's rung name (a path component: no slashes)."""
    return f"{client}_to_{server}".replace("/", "-")


@dataclass(frozen=True)
class Cell(SweepCell):
    """A sweep cell whose rung is a pair (its key and folder are a sweep cell's)."""

    client: str = ""
    server: str = ""


def plan(nodes: list[str], cfg: MatrixConfig) -> list[list[Cell]]:
    """Batches of cells: within a batch, no node appears twice (they may run at once).
    Repeats are the outer loop; within a repeat, rounds; within a pair, payloads and
    transports in a seeded random order (interleaved, as a sweep)."""
    rng = random.Random(cfg.seed)
    loads = payloads(cfg.bytes_per_token, cfg.tokens, cfg.bytes, cfg.k * cfg.id_bytes)
    batches: list[list[Cell]] = []
    for rep in range(cfg.repeats):
        for rnd in rounds(nodes, cfg.ordered):
            combos = [(tr, p, c) for tr in cfg.transports for p in loads for c in cfg.codecs]
            rng.shuffle(combos)
            for tr, p, c in combos:
                series = Series(tr, c)
                batches.append([Cell(Place(pair_name(a, b)), series, series.spell(p.label), p.tokens, p.request_bytes,
                                     p.reply_bytes, base=p.label, repeat=rep, client=a, server=b) for a, b in rnd])
    return batches


def _job(cell: Cell, cfg: MatrixConfig) -> dict:
    run_cfg = RunConfig(transport=cell.series.transport, k=cfg.k, id_bytes=cfg.id_bytes, cycles=cfg.cycles,
                        warmup=cfg.warmup, poll=cfg.poll, transport_settings=cfg.transport_settings,
                        rung=cell.rung, bytes_per_token=cfg.bytes_per_token, codecs=(cell.series.codec,),
                        hidden=cfg.hidden, taps=cfg.taps)
    return {"config": run_cfg.to_dict(),
            "payload": {"label": cell.payload, "tokens": cell.tokens, "request_bytes": cell.request_bytes,
                        "reply_bytes": cell.reply_bytes, "codec": cell.series.codec},
            "extra": {"sweep": {"cell": asdict(cell), "key": cell.key,
                                "seed": cfg.seed},
                      "rung": cell.rung, "matrix": {"client": cell.client, "server": cell.server}}}
