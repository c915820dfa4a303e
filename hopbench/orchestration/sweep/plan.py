"""Pure planning of a sweep: the cells (rung x transport x payload x gap x placement x codec),
repeated, each repeat in a seeded random order, and how many cycles each gets."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from hopbench.config_sweep import Rung, SweepConfig
from hopbench.records import PROJECTED, CellKey, Payload, Place, Series
from hopbench.shape import Shape, log_grid, payloads

WIRE_PER_MSS = 1538 / 1448  # Ethernet frame on the wire (incl. preamble, IFG) per TCP MSS at MTU 1500


@dataclass(frozen=True)
class Cell(CellKey):
    """A planned cell: the identity analysis reads back (records.CellKey), the name of its
    payload before its series' marks ("T3" for "T3+fp8@4"), and the repeat."""

    base: str = ""
    repeat: int = 0

    @property
    def label(self) -> str:
        """The rung as analysis sees it: one per rung x placement when placements vary."""
        return self.place.rung_label

    @property
    def key(self) -> str:
        """The cell's folder under cells/ (results.ResultFolder.cell_dir)."""
        return f"{self.label}/{self.series.transport}/{self.payload}-g{self.gap_ms:g}/r{self.repeat}"


def cell(rung: str, placement: str, gap_ms: float, series: Series, p: Payload) -> Cell:
    """The cell of a payload (shape.payloads) in a series at a place."""
    return Cell(Place(rung, placement, gap_ms), series, series.spell(p.label), p.tokens, p.request_bytes,
                p.reply_bytes, base=p.label)


def plan_cells(cfg: SweepConfig, rungs: list[Rung], shape: Shape, seed: int,
               placements: list[str] | None = None) -> list[Cell]:
    """All cells, repeat by repeat, each repeat's cells in a seeded random order. With more
    than one placement, every placement is an axis like the others."""
    per_repeat: list[Cell] = []
    many = bool(placements and len(placements) > 1)

    def axis(r: Rung) -> list[str]:
        if r.placement:  # the rung's own placement wins over the sweep's list
            return [r.placement]
        return list(placements or []) if many else [""]

    for rung, pl in ((r, p) for r in rungs for p in axis(r)):
        grid = log_grid(cfg.bytes_min, min(cfg.bytes_max, rung.bytes_max or cfg.bytes_max), cfg.bytes_points)
        for tr in cfg.transports:
            if tr not in rung.transports:
                continue
            for p in payloads(shape.bytes_per_token, cfg.tokens, grid, shape.reply_bytes(cfg.k)):
                for gap in cfg.gaps_ms:
                    if gap and p.tokens != cfg.operating_tokens:
                        continue  # think time is measured at the operating payload only
                    for codec in cfg.codecs:
                        if codec != "none" and gap:
                            continue  # a codec is measured back to back (its think-time cells would add nothing new)
                        for m in cfg.clients:
                            if m > 1 and gap:
                                continue  # several targets are measured back to back, like a codec
                            per_repeat.append(cell(rung.name, pl, gap, Series(tr, codec, clients=m), p))
            per_repeat += _design_cells(cfg, rung.name, tr, shape, pl)
    rng = random.Random(seed)
    cells = []
    for rep in range(cfg.repeats):
        batch = [replace(c, repeat=rep) for c in per_repeat]
        rng.shuffle(batch)
        cells.extend(batch)
    return cells


def _design_cells(cfg: SweepConfig, rung: str, transport: str, shape: Shape, placement: str) -> list[Cell]:
    """The streamed and projected cells of a rung x transport (docs/STREAM.md): the streamed hop
    at the operating payload (K + 1 rows of each aux layer), and the token payloads of the
    projected design (one hidden-wide row per position); raw, one target, no think time."""
    out = []
    ids = shape.reply_bytes(cfg.k)
    if "layers" in cfg.stream:
        t = cfg.k + 1
        out.append(cell(rung, placement, 0.0, Series(transport, stream="layers"),
                        Payload(f"T{t}", t, t * shape.bytes_per_token, ids)))
    if PROJECTED in cfg.designs:
        row = shape.bytes_per_token // len(shape.aux_layers)
        out += [cell(rung, placement, 0.0, Series(transport, design=PROJECTED), Payload(f"T{t}", t, t * row, ids))
                for t in cfg.tokens]
    return out


def cycles_for(cell: Cell, rung: Rung, cfg: SweepConfig, forward_s: float = 0.0) -> int:
    """Timed cycles: about cell_budget_s of work, clamped to [min_cycles, max_cycles].
    The round trip is estimated from the wire time at the rung's rate (plus think time)."""
    est = 100e-6 + cell.gap_ms / 1000 + (forward_s if cell.series.streamed else 0.0)  # a streamed cycle: the forward
    if rung.rate_mbit:
        est += (cell.request_bytes + cell.reply_bytes) * WIRE_PER_MSS * 8 / (rung.rate_mbit * 1e6)
    else:
        est += cell.request_bytes / 1e9  # ~8 Gbit/s through a veth or loopback
    return int(min(cfg.max_cycles, max(cfg.min_cycles, math.ceil(cfg.cell_budget_s / est))))
