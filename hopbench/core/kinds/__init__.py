"""The plan kinds, declared once (docs/ARCHITECTURE.md "Adding a plan kind"): each kind is an
exchange (the round trip, the stream, spec, the drafter's two) with its two ends in one
module of this package, and whether open-loop pacing applies; beside it the bodies
(Plan.body: raw, codec, staged, direct), each with both halves of every exchange that moves
hidden states. `Plan.kind` names a plan's
kind; `Plan.tails` declares what follows its last reply, which both ends iterate
(protocol.send_tails / recv_tails). Both ends look their path up here: there is no second
if-chain. iperf3 keeps `test->mode` and its protocol list the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hopbench.core import protocol as P
from hopbench.core.client_paths import ClientPath
from hopbench.core.inputs import Schedule
from hopbench.core.kinds import draft as DK
from hopbench.core.kinds import roundtrip as RT
from hopbench.core.kinds import spec as SK
from hopbench.core.kinds import stream as SR
from hopbench.core.serving import ServingPath
from hopbench.errors import ConfigError


@dataclass(frozen=True)
class Body:
    """How a request's bytes live and cross (Plan.body), with both halves of each exchange
    that moves hidden states: the round trip's client and serving paths, and the streamed
    exchange's chunks out (the client's) and chunks in (the server's)."""

    name: str
    client: Callable[[P.Plan], ClientPath]
    serving: Callable[[P.Plan], ServingPath]
    chunks_out: Callable[[Any], SR.RawBody]
    chunks_in: type[SR.ChunksIn]
    doc: str = ""


BODIES: dict[str, Body] = {b.name: b for b in (
    Body("raw", lambda plan: RT.HostRoundTrip(), lambda plan: RT.HostEcho(), SR.RawBody, SR.ChunksIn,
         doc="host memory, the bytes as they are"),
    Body("codec", lambda plan: RT.CodecRoundTrip(), lambda plan: RT.CodecEcho(), SR.CodecBody, SR.FramesIn,
         doc="encoded inside the hop, each request (or chunk) a frame the server decodes"),
    Body("staged", RT.staged_client, RT.gpu_serving(direct=False), SR.StagedBody, SR.StagedIn,
         doc="CUDA memory at one end or both, copied through pinned host buffers"),
    Body("direct", RT.direct_client, RT.gpu_serving(direct=True), SR.DirectBody, SR.DirectIn,
         doc="CUDA memory handed to a CUDA-aware transport"),
)}


@dataclass(frozen=True)
class Kind:
    name: str
    #: the client's path for a plan of this kind (plan, the streamed schedule)
    client: Callable[[P.Plan, Any], ClientPath]
    serving: Callable[[P.Plan], ServingPath]
    #: the client's sends may follow an open-loop schedule (--mps), with raw bodies
    open_loop: bool = False
    doc: str = ""


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("round-trip", lambda plan, stream: BODIES[plan.body].client(plan),
         lambda plan: BODIES[plan.body].serving(plan), open_loop=True,
         doc="one request, one reply per cycle, in the plan's body; compiled where it applies"),
    Kind("stream", lambda plan, stream: SR.StreamedRoundTrip(stream, BODIES[plan.body].chunks_out),
         lambda plan: SR.StreamDrafter(BODIES[plan.body].chunks_in),
         doc="the request streamed in chunks during the verify forward"),
    Kind("spec", lambda plan, stream: SK.SpecTarget(stream), lambda plan: SK.SpecDrafter(),
         doc="the speculative loop: the target's verify, the hop and the drafter's draft per cycle, in a mode "
             "(sync, overlap, stream)"),
    Kind("stream-draft", lambda plan, stream: DK.StreamedDraftRoundTrip(stream, BODIES[plan.body].chunks_out),
         lambda plan: DK.StreamDraft(BODIES[plan.body].chunks_in),
         doc="streamed to the server's drafter model, its forward started on the taps that have landed"),
    Kind("draft", lambda plan, stream: DK.DraftRoundTrip(), lambda plan: DK.DraftEcho(),
         doc="the rows run the server's drafter model (batched across sessions); its ids are the reply"),
)}


def client_path(plan: P.Plan, schedule: np.ndarray | None = None, stream: Schedule | None = None) -> ClientPath:
    """The one client path of this plan's kind (Session.measure); `schedule`: open loop's
    send times; `stream`: a streamed plan's forward schedule (hopbench.workload.stream.Schedule)."""
    kind = KINDS[plan.kind]
    wrong = plan.range_error()  # values that cannot describe a plan: refused before any server is asked
    if wrong:
        raise ConfigError(wrong)
    if schedule is not None and not (kind.open_loop and plan.body == "raw"):
        raise ConfigError("open-loop load (--mps) measures raw payloads in host memory: not with --codec, "
                          "--memory cuda, --stream or --remote-drafter")
    if plan.stream is not None and stream is None:
        raise ConfigError("a streamed plan needs the forward's schedule (hopbench.workload.stream.schedule)")
    return kind.client(plan, stream)


def serving_path(plan: P.Plan) -> ServingPath:
    """The one serving path of this plan's kind (the server's session)."""
    return KINDS[plan.kind].serving(plan)


__all__ = ["BODIES", "KINDS", "Body", "Kind", "client_path", "serving_path"]
