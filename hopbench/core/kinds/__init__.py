"""The plan kinds, declared once (docs/ARCHITECTURE.md "Adding a plan kind"): each kind's
client path, serving path and whether open-loop pacing applies. `Plan.kind` names a plan's
kind; `Plan.tails` declares what follows its last reply, which both ends iterate
(protocol.send_tails / recv_tails). Both ends look their path up here: there is no second
if-chain. iperf3 keeps `test->mode` and its protocol list the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hopbench.core import client_paths as CP
from hopbench.core import drafting as DK
from hopbench.core import protocol as P
from hopbench.core import serving as SV
from hopbench.core.inputs import Schedule
from hopbench.core.kinds import spec as SK
from hopbench.errors import ConfigError


@dataclass(frozen=True)
class Kind:
    name: str
    #: the client's path for a plan of this kind (plan, the streamed schedule)
    client: Callable[[P.Plan, Any], CP.ClientPath]
    serving: Callable[[P.Plan], SV.ServingPath]
    #: the client's sends may follow an open-loop schedule (--mps)
    open_loop: bool = False
    doc: str = ""


def _gpu_client(direct: bool) -> Callable[[P.Plan, Any], CP.ClientPath]:
    def make(plan: P.Plan, stream: Schedule | None) -> CP.ClientPath:
        return CP.GpuDirect() if direct and plan.client_memory == "cuda" else CP.GpuStaged()
    return make


def _gpu_serving(direct: bool) -> Callable[[P.Plan], SV.ServingPath]:
    def make(plan: P.Plan) -> SV.ServingPath:
        if plan.server_memory != "cuda":
            return SV.HostEcho()
        return SV.GpuDirect() if direct else SV.GpuStaged()
    return make


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("host", lambda plan, stream: CP.HostRoundTrip(), lambda plan: SV.HostEcho(), open_loop=True,
         doc="raw payloads in host memory: the round trip, compiled where it applies"),
    Kind("gpu-staged", _gpu_client(False), _gpu_serving(False),
         doc="CUDA memory at one end or both, copied through pinned host buffers"),
    Kind("gpu-direct", _gpu_client(True), _gpu_serving(True),
         doc="CUDA memory handed to a CUDA-aware transport"),
    Kind("codec", lambda plan, stream: CP.CodecRoundTrip(), lambda plan: SV.CodecEcho(),
         doc="the request bodies cross encoded, decoded by the server"),
    Kind("spec", lambda plan, stream: SK.SpecTarget(stream), lambda plan: SK.SpecDrafter(),
         doc="the speculative loop: the target's verify, the hop and the drafter's draft per cycle, in a mode "
             "(sync, overlap, stream)"),
    Kind("stream", lambda plan, stream: CP.StreamedRoundTrip(stream), lambda plan: SV.StreamDrafter(),
         doc="the request streamed in chunks during the verify forward"),
    Kind("stream-draft", lambda plan, stream: DK.StreamedDraftRoundTrip(stream), lambda plan: DK.StreamDraft(),
         doc="streamed to the server's drafter model, its forward started on the taps that have landed"),
    Kind("draft", lambda plan, stream: DK.DraftRoundTrip(), lambda plan: DK.DraftEcho(),
         doc="the rows run the server's drafter model (batched across sessions); its ids are the reply"),
)}


def client_path(plan: P.Plan, schedule: np.ndarray | None = None, stream: Schedule | None = None) -> CP.ClientPath:
    """The one client path of this plan's kind (Session.measure); `schedule`: open loop's
    send times; `stream`: a streamed plan's forward schedule (hopbench.workload.stream.Schedule)."""
    kind = KINDS[plan.kind]
    wrong = plan.range_error()  # values that cannot describe a plan: refused before any server is asked
    if wrong:
        raise ConfigError(wrong)
    if schedule is not None and not kind.open_loop:
        raise ConfigError("open-loop load (--mps) measures raw payloads in host memory: not with --codec, "
                          "--memory cuda, --stream or --remote-drafter")
    if plan.stream is not None and stream is None:
        raise ConfigError("a streamed plan needs the forward's schedule (hopbench.workload.stream.schedule)")
    return kind.client(plan, stream)


def serving_path(plan: P.Plan) -> SV.ServingPath:
    """The one serving path of this plan's kind (the server's session)."""
    return KINDS[plan.kind].serving(plan)


__all__ = ["KINDS", "Kind", "client_path", "serving_path"]
