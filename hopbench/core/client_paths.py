"""What every client path is (each kind's own are in hopbench.core.kinds, beside the kind's
serving path): chosen once by `kinds.client_path(plan)`, run over the plan's data route,
resolved once (`DataPath`: the transport and its channel). iperf3's `sp->snd`.

Each path has three steps, called by `Session.measure` in this order:
- `prepare(run)`: everything untimed before the PLAN crosses, the rules of its kind checked
  (a random body and its CRC-32, a codec's bodies and their CRCs, GPU buffers); returns the
  plan to send (it may now carry its `payload_crc32`);
- `cycles(data, run)`: the timed loop over the data channel; the round trips completed are
  in `run.progress.done`, also when it raises;
- `after(data, run)`: what follows the last reply (the reply's tail, the server's stage
  times).

Each path is a ClientPath reading one PlanRun (the plan, its measurement, transport and
clock); the tails that follow the last reply become its stages here (tail_stages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hopbench.core import protocol as P
from hopbench.core.inputs import HiddenSource
from hopbench.core.timing import (
    LoopPolicy,
    Pacing,
    Progress,
)
from hopbench.core.transport import Channel, Transport
from hopbench.errors import ProtocolError


@dataclass
class DataPath:
    """A plan's data route, resolved once per plan: its transport, the channel (the control
    connection itself for a transport that runs on it) and the server's channel info."""

    transport: Transport
    channel: Channel
    server_info: dict[str, Any]


@dataclass
class PlanRun:
    """One plan's run as its path sees it: the plan, where its samples and stages go, and the
    loop's settings."""

    plan: P.Plan
    m: Any  # hopbench.core.client.Measurement
    transport: Transport
    settings: dict[str, Any]  # this transport's client settings
    clock: Callable[[], int]
    gap_s: float
    loop: str
    share_cpu: bool
    source: HiddenSource | None = None  # a codec plan's hidden states (hopbench.workload.hidden.Source)
    schedule: np.ndarray | None = None  # open loop: each cycle's intended send time
    spec: Any = None  # a spec plan's target inputs (hopbench.core.spec.SpecInputs)
    progress: Progress = field(default_factory=Progress)
    loop_info: dict[str, str] = field(default_factory=dict)  # which timed loop ran (hopbench.core.native)

    @property
    def ids(self) -> P.ReplyIds:
        return P.ReplyIds(self.plan.k, self.plan.id_bytes)

    def loop_args(self, loop: str | None = None, lag: np.ndarray | None = None) -> dict[str, Any]:
        """run_cycles' clock, pacing (this run's think time, or its open-loop schedule with
        `lag`), loop policy (`loop`: this path's own choice, else the run's) and progress."""
        return {"clock": self.clock, "pacing": Pacing(self.gap_s, schedule=self.schedule, lag=lag),
                "loop": LoopPolicy(loop or self.loop, self.share_cpu, self.loop_info), "progress": self.progress}


class ClientPath:
    name = "?"
    #: the host buffer the last reply lands in (an abort from the server is read from it)
    reply_host: Any = None

    def abort_bytes(self, plan: P.Plan) -> int:
        """The size of the message the server expects next: this end's abort is cut to it."""
        return plan.request_frame_bytes

    def prepare(self, run: PlanRun) -> P.Plan:
        return run.plan

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        raise NotImplementedError

    def after(self, data: DataPath, run: PlanRun) -> None:
        """After the last reply: its zero tail checked, then the arrays the plan's kind declares
        (Plan.tails) received into the stages."""
        check_tail(self.reply_host, run.plan)
        stages = run.m.stages
        stages.update(tail_stages(P.recv_tails(data.channel, run.plan)))
        if "server_h2d_ns" in stages and "transfer_ns" in stages:
            stages["wire_ns"] = stages["transfer_ns"] - stages["server_h2d_ns"] - stages["server_d2h_ns"]


#: a tail of several columns -> its stages, one per column
TAIL_COLUMNS = {P.SERVER_STAGES.name: ("server_h2d_ns", "server_d2h_ns"),
                P.DRAFT_TAIL.name: ("draft_ns", "queue_ns", "batch_rows", "early_ns", "stage_ns", "back_ns", "server_ns")}


def tail_stages(tails: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The received tails as per-cycle stage columns."""
    out: dict[str, np.ndarray] = {}
    for name, a in tails.items():
        if a.ndim == 1:
            out[name] = a
        else:
            out.update({col: a[:, j].copy() for j, col in enumerate(TAIL_COLUMNS[name])})
    return out


def check_tail(reply: Any, plan: P.Plan) -> None:
    """The bytes of a reply after the K ids are zero (docs/PROTOCOL.md); checked on the last
    reply, after the loop, so it costs nothing per cycle."""
    tail = np.frombuffer(memoryview(reply).cast("B"), dtype=np.uint8)[plan.k * plan.id_bytes:]
    if tail.size and tail.any():
        raise ProtocolError(f"the server's reply carries non-zero bytes after the {plan.k} ids "
                            f"(first at offset {plan.k * plan.id_bytes + int(np.argmax(tail != 0))})")


__all__ = ["TAIL_COLUMNS", "ClientPath", "DataPath", "PlanRun", "check_tail", "tail_stages"]
