"""What every serving path is (each kind's own are in hopbench.core.kinds, beside the kind's
client path): a ServingPath, chosen once per plan (iperf3's `sp->snd`), checks a plan
against the server's own settings before ACCEPT (`check`) and serves its round trips
(`serve`); GpuServing is the base of the paths that hold CUDA memory. ServerConfig is the
server's settings, read through a PlanContext.

A path holds no state: everything it reads arrives in a frozen `PlanContext` (the
server's configuration and environment, this session's client environment), so sessions
served at once share nothing mutable. A fault on the data stream ends the session with
`Ended` after telling the client (an abort in reply-sized messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from hopbench.core import native
from hopbench.core import protocol as P
from hopbench.core.batcher import Batcher
from hopbench.core.placement import SessionCpus
from hopbench.core.timing import Progress
from hopbench.core.transport import Channel, Transport
from hopbench.errors import HopbenchError, ProtocolError
from hopbench.records import TIMEOUT_S


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    caps: P.Caps = field(default_factory=P.Caps)
    idle_timeout_s: float = 60.0  # a connected client silent this long is dropped
    handshake_timeout_s: float = TIMEOUT_S
    data_accept_timeout_s: float = TIMEOUT_S
    poll: str = "auto"
    transport_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    once: bool = False
    secret: str | None = None  # shared secret for the HMAC challenge-response (--secret)
    loop: str = "auto"  # the echo loop: auto (compiled where it applies), native, python
    #: sessions served at once (each in its own thread; the compiled loops release the GIL);
    #: 1 = one at a time, the others told "busy"
    max_sessions: int = 1
    #: request + reply bytes of the plans served at once, across sessions (None: one
    #: largest plan's, max_request_bytes + max_reply_bytes)
    max_memory_bytes: int | None = None
    #: --session-cpus: each plan served on a CPU of its own (hopbench.core.placement.SessionCpus)
    session_cpus: SessionCpus | None = None
    #: --drafter: the server's drafter model behind its batcher (hopbench.core.batcher.Batcher)
    drafter: Batcher | None = None


class Ended(HopbenchError):
    """The session ends; the client has been told already (REFUSE or a data-stream abort)."""


@dataclass(frozen=True)
class PlanContext:
    """What a serving path may read: the server's settings and environment, this session's
    client environment, the control channel, the server's clock and log."""

    config: ServerConfig
    env: dict[str, Any]
    client_env: dict[str, Any] | None
    control: Channel
    clock: Callable[[], int]
    log: Callable[[str], None]
    #: the loop announced in ACCEPT; the host path refuses to run another
    loop: str = ""
    #: the server's StartGroups (plans started together; a batching drafter's batches), or None
    groups: Any = None
    #: the cycles the plan's loop served, also when it raised (the session's statistics)
    progress: Progress = field(default_factory=Progress)

    @property
    def share_cpu(self) -> bool:
        """The client may run on this plan's CPUs: a busy loop then yields now and then."""
        return native.may_share_cpu(self.env, self.client_env)

    @property
    def drafter(self) -> Batcher:
        """The server's drafter, for a plan its check let through (checks refuse a drafter plan
        on a server without one: NO_DRAFTER)."""
        if self.config.drafter is None:
            raise AssertionError("a drafter plan passed its check on a server without a drafter")
        return self.config.drafter

    def settings(self, plan: P.Plan) -> dict[str, Any]:
        """The server's own settings for the plan's transport (never the client's)."""
        return self.config.transport_settings.get(plan.transport, {})


def abort(chan: Channel, reason: str, plan: P.Plan) -> None:
    """End the plan and the session, telling the client on the data stream."""
    try:
        P.send_abort(chan, reason, plan.reply_bytes)
    except HopbenchError:
        pass
    raise Ended(reason)


def bad_request(ctx: PlanContext, chan: Channel, request: Any, seq: int, plan: P.Plan, why: str | None = None) -> None:
    """A message out of place (a request whose seq is not the expected one; `why` says what
    else was wrong): the client's abort (the plan ends, the session goes on), or a protocol
    fault (the server aborts on the data stream and ends the session)."""
    if P.is_abort(request):
        try:
            reason = P.read_abort(chan, request)
        except ProtocolError as exc:  # a frame other than ERROR: answered padded, as every abort is
            abort(chan, str(exc), plan)
        ctx.log(f"client aborted plan at seq {seq}: {reason[:200]}")
        return
    abort(chan, why or f"request carries seq {P.SEQ.unpack_from(request, 0)[0]}, expected {seq}", plan)


class ServingPath:
    """One plan kind's serving: `check` (the REFUSE line, or None; what it parses it keeps),
    then `serve` on the same instance (path_for makes one per plan)."""

    name = "?"
    codec: Any = None  # a codec-carrying plan's codec, parsed by check()
    #: why the compiled echo loop cannot serve this kind (None: it can)
    python_only: str | None = "this plan needs the Python loop (GPU memory or the spec loop)"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        """Why the server cannot serve this plan (a REFUSE line), or None."""
        return None

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        """The plan's round trips on the data channel; returns the cycles served."""
        raise NotImplementedError

    def parse_codec(self, plan: P.Plan) -> Any:
        """A codec-carrying plan's codec, parsed once (by check(), a ConfigError there is the
        REFUSE line): serve uses self.codec."""
        from hopbench.core import codecs

        self.codec = codecs.parse(str(plan.codec), plan.codec_group)
        return self.codec


class GpuServing(ServingPath):
    """The drafter's side with GPU memory, through the same echo loop: requests end in,
    replies start in, device buffers; the next reply's ids are written into the device
    buffer (a small host->device copy) after each packing, as a drafter would produce them."""

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        from hopbench.core import gpu

        try:
            gpu.check_choice((plan.server_memory,), plan.gpu_path, transport, ctx.settings(plan))
            gpu.load()
        except HopbenchError as exc:
            return f"server cannot hold the payload in CUDA memory: {exc}"
        return None

    @staticmethod
    def buffers(plan: P.Plan) -> tuple[Any, Any]:
        from hopbench.core.gpu import Staging

        req = Staging(plan.request_bytes)
        rep = Staging(plan.reply_bytes, req.stream)
        req.fill_random(1)
        return req, rep


