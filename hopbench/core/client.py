"""The client side of a session: control connection, handshake, one plan at a time."""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hopbench.core import auth, control, native
from hopbench.core import protocol as P
from hopbench.core.client_paths import ClientPath, DataPath, PlanRun
from hopbench.core.inputs import HiddenSource, Schedule
from hopbench.core.kinds import client_path
from hopbench.core.spec import SpecInputs
from hopbench.core.timing import Progress
from hopbench.core.transport import Channel, Transport, TransportOptions, get_transport, plan_poll
from hopbench.errors import (
    HopbenchError,
    PeerError,
    ProtocolError,
    Refused,
    Timeout,
    VerifyError,
)
from hopbench.records import CONNECT_TIMEOUT_S, TIMEOUT_S, DrafterInfo
from hopbench.version import __version__


@dataclass
class Measurement:
    plan: P.Plan
    samples_ns: np.ndarray  # all round trips in order: [untimed, warm-up..., timed...]
    completed: int  # how many entries of samples_ns are valid
    data_info: dict[str, Any]
    server_info: dict[str, Any]
    started_unix: float
    error: str | None = None
    #: per-cycle stage times (ns) of GPU plans, same indexing as samples_ns:
    #: d2h_ns/transfer_ns/h2d_ns (client, staged), server_h2d_ns/server_d2h_ns (server,
    #: staged) and wire_ns = transfer - the server's copies (both staged)
    stages: dict[str, np.ndarray] = field(default_factory=dict)
    gpu_info: dict[str, Any] | None = None
    #: a codec plan's codec (canonical name, library and version, lossless) and payload source
    codec_info: dict[str, Any] | None = None

    @property
    def timed(self) -> np.ndarray:
        first = 1 + self.plan.warmup
        return self.samples_ns[first:max(first, self.completed)]


def _check_hello(hello: dict[str, Any], where: str) -> None:
    """What docs/PROTOCOL.md says a server's HELLO must be."""
    try:
        P.validate(hello, "HELLO server")
        P.validate(hello["caps"], "caps")
        if hello["auth"] is not None:
            P.validate(hello["auth"], "auth challenge")
            if "env" in hello:
                raise ProtocolError("HELLO server: 'env' must be absent before authentication")
    except ProtocolError as exc:
        raise ProtocolError(f"{where} broke the protocol: {exc}") from None
    if hello["protocol"] != P.VERSION:
        raise ProtocolError(f"{where} speaks protocol {hello['protocol']}, this client {P.VERSION}")


def _authenticate(control: Any, hello: dict[str, Any], secret: str | None, client_env: dict[str, Any],
                  where: str) -> auth.Binding | None:
    """The client's side of the AUTH exchange (docs/PROTOCOL.md "Authentication"): the
    session's binding, or None for a server that does not authenticate (refused when a
    secret was given). The server's environment lands in `hello` once it proved itself."""
    challenge = (hello.get("auth") or {}).get("challenge")
    if not challenge:
        if secret:
            raise Refused(f"{where} does not authenticate, but a secret was given (--secret or HOPBENCH_SECRET): "
                          "refusing an unauthenticated server (an impostor, or a server started without --secret)")
        return None
    if not secret:
        raise Refused("the server requires a secret (--secret or HOPBENCH_SECRET)")
    nonce = os.urandom(16).hex()  # nothing about this client crosses before the server's proof
    P.send_msg(control, P.AUTH, {"nonce": nonce, "mac": auth.auth_mac(secret, "client", challenge, nonce)})
    _, reply = P.recv_msg(control, P.AUTH)
    if not auth.auth_ok(secret, reply.get("mac"), "server", nonce, challenge):
        raise Refused("the server failed to prove it knows the secret")
    try:
        P.validate(reply, "AUTH server")
    except ProtocolError as exc:
        raise ProtocolError(f"{where} broke the protocol: {exc}") from None
    hello["env"] = reply["env"]
    bind = auth.Binding(auth.session_key(secret, challenge, nonce), "client")
    P.send_msg(control, P.ENV, {"env": client_env}, bind)
    return bind


class Session:
    """One client session with a `hopbench serve`: the control connection, opened and
    handshaken (and authenticated, with a secret) on construction; one plan at a time
    (`measure`); `bye()` ends it as the protocol says. A context manager: the
    connection is closed on the way out, whatever happened (`with Session(...) as s:`)."""

    def __init__(self, host: str, port: int, timeout_s: float = TIMEOUT_S, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 poll: str = "auto", transport_settings: dict[str, dict[str, Any]] | None = None,
                 client_env: dict[str, Any] | None = None, secret: str | None = None, loop: str = "auto") -> None:
        self.host, self.port, self.timeout_s, self.connect_timeout_s = host, port, timeout_s, connect_timeout_s
        self.poll, self.secret, self.loop = poll, secret, loop  # loop: the timed loop (auto, native or python)
        self.transport_settings: dict[str, dict[str, Any]] = transport_settings or {}
        self.client_env: dict[str, Any] = client_env or {}
        self.bind: auth.Binding | None = None  # the session bound to its authentication (with a secret)
        self.plans = 0  # plans accepted so far (a plan's number is in its data channel's proof)
        #: the last plan's measurement, complete or not: after an exception, what was measured before it
        self.measured: Measurement | None = None
        self._bye_sent = False
        #: why the session ended under the client: a REFUSE (the server closes after every
        #: one, docs/PROTOCOL.md "States"); a later plan is refused here, naming it
        self.refused: str | None = None
        self.control = control.connect(host, port, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, poll=poll)
        try:
            hello: dict[str, Any] = {"protocol": P.VERSION, "role": "client", "software": f"hopbench {__version__}"}
            if not secret:  # with a secret, the environment crosses only after authentication
                hello["env"] = self.client_env
            P.send_msg(self.control, P.HELLO, hello)
            _, self.server_hello = P.recv_msg(self.control, P.HELLO)
            where = f"the server at {host}:{port}"
            _check_hello(self.server_hello, where)
            self.bind = _authenticate(self.control, self.server_hello, secret, self.client_env, where)
        except BaseException:
            self.control.close()
            raise

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @functools.cached_property
    def drafter(self) -> DrafterInfo | None:
        """The server's drafter model (its HELLO's env.drafter, read once), or None."""
        return DrafterInfo.from_env(self.server_env)

    @property
    def server_env(self) -> dict[str, Any]:
        env: dict[str, Any] = self.server_hello.get("env", {})
        return env

    def measure(self, plan: P.Plan, *, clock: Callable[[], int] = time.perf_counter_ns, gap_s: float = 0.0,
                source: HiddenSource | None = None, schedule: np.ndarray | None = None,
                stream: Schedule | None = None, spec: SpecInputs | None = None) -> Measurement:
        """Run one plan through its client path (hopbench.core.client_paths), chosen once, over
        its transport, resolved once. Transport and verify errors and Ctrl-C propagate; what
        was measured before them is `self.measured`. A codec plan's request bodies are windows
        of `source` (hopbench.workload.hidden.Source); `schedule`: open loop (run_cycles); `stream`:
        a streamed plan's forward schedule (hopbench.workload.stream); `spec`: a spec plan's
        target inputs (its per-cycle rows land in the measurement's stages)."""
        self.measured = None
        path = client_path(plan, schedule, stream)
        transport = self._transport(plan)
        m = self.measured = Measurement(plan, np.zeros(plan.total, dtype=np.int64), 0, {}, {}, time.time())
        run = PlanRun(plan, m, transport, self.transport_settings.get(plan.transport, {}), clock, gap_s, self.loop,
                      self._share_cpu, source, schedule, spec)
        data = None
        try:
            m.plan = run.plan = path.prepare(run)
            data = self._open(run.plan, transport)
            m.server_info, m.data_info = data.server_info, dict(data.channel.info)  # the lanes: refreshed below
            m.completed = self._cycles(data.channel, run.plan, path, lambda: path.cycles(data, run), run.progress)
            path.after(data, run)
            self._confirmed(run.plan)
        except BaseException as exc:
            m.completed, m.error = run.progress.done, str(exc) or exc.__class__.__name__
            raise
        finally:
            self._close_data(data, m, run.loop_info)
        return m

    def _close_data(self, data: DataPath | None, m: Measurement, loop_info: dict[str, str]) -> None:
        """The plan's data channel closed (never the control connection), its info read last:
        UCX's lanes are known only once it has carried the cycles."""
        if data is not None and data.channel is not self.control:
            try:
                m.data_info = dict(data.channel.info)
            except Exception:  # info of a broken channel: keep what was read at connect
                pass
            data.channel.close()
        m.data_info.update(loop_info)

    @property
    def _share_cpu(self) -> bool:
        """The server may run on this client's CPUs: a busy loop then yields now and then."""
        return native.may_share_cpu(self.client_env, self.server_env)

    @staticmethod
    def _transport(plan: P.Plan) -> Transport:
        """The plan's transport: resolved here, once per plan, and handed to whatever needs it."""
        return get_transport(plan.transport)

    def _open(self, plan: P.Plan, transport: Transport) -> DataPath:
        """PLAN, ACCEPT, and the plan's data route over its transport (resolved once, by the
        caller): the control connection itself for a transport that runs on it, else a data
        channel, proven in a bound session."""
        if self.refused is not None:
            raise Refused(f"this session ended when the server refused a plan ({self.refused}); "
                          "open a new session for the next")
        P.send_msg(self.control, P.PLAN, plan.to_wire(), self.bind)
        with control.patience(self.control, self.timeout_s + P.GROUP_WAIT_S if plan.group else self.timeout_s):
            try:
                _, accept = P.recv_msg(self.control, P.ACCEPT, bind=self.bind)
            except Refused as exc:
                self.refused, self._bye_sent = str(exc), True  # the server has closed: no BYE to send
                self.control.close()
                raise
        self._check_accept(accept, transport)
        plan_no, self.plans = self.plans, self.plans + 1  # the server numbers every accepted plan alike
        if transport.reuses_control:
            return DataPath(transport, self.control, accept["transport_info"])
        opts = TransportOptions(timeout_s=self.timeout_s, connect_timeout_s=self.connect_timeout_s,
                                poll=plan_poll(self.poll, plan.drafter is not None),
                                settings=self.transport_settings.get(plan.transport, {}),
                                share_cpu=self._share_cpu)
        data = transport.connect(self.host, int(accept["data_port"]), opts)
        try:
            if self.bind is not None:  # the server proves itself first on the data channel, then this client
                self.bind.prove_data(data, plan_no, f"the data channel at {self.host}:{accept['data_port']}")
        except BaseException:
            data.close()
            raise
        return DataPath(transport, data, accept["transport_info"])

    def _confirmed(self, plan: P.Plan) -> None:
        """DONE: the server confirms it served every cycle (in a bound session, tagged: a relay
        that answered the cycles itself is caught here)."""
        try:
            _, done = P.recv_msg(self.control, P.DONE, bind=self.bind)
        except Timeout:
            who = (": the cycles were answered by another peer than the one that authenticated (a relay between "
                   "the ends)") if self.bind is not None else ""
            raise ProtocolError(f"the server at {self.host}:{self.port} did not confirm the plan (no DONE within "
                                f"{self.timeout_s:g} s of the last reply){who}") from None
        try:
            P.validate(done, "DONE")
        except ProtocolError as exc:
            raise ProtocolError(f"the server at {self.host}:{self.port} broke the protocol: {exc}") from None
        if done["cycles"] != plan.total:
            raise auth.SessionMismatch(f"the server confirms {done['cycles']} cycles where {plan.total} were answered: "
                                    "another peer answered them")

    def _check_accept(self, accept: dict[str, Any], transport: Transport) -> None:
        try:
            P.validate(accept, "ACCEPT")
            if transport.reuses_control != (accept["data_port"] is None):
                raise ProtocolError("ACCEPT: 'data_port' must be null for a transport that runs on the control "
                                    "connection and a port for any other")
        except ProtocolError as exc:
            raise ProtocolError(f"the server at {self.host}:{self.port} broke the protocol: {exc}") from None

    def _cycles(self, data: Channel, plan: P.Plan, path: ClientPath, loop: Callable[[], int],
                progress: Progress) -> int:
        """Run the timed loop; turn a server's abort on the data stream into its reason,
        and abort the plan towards the server when this end stops it (a wrong reply,
        Ctrl-C), so the server logs why and serves on."""
        try:
            return loop()
        except VerifyError as exc:
            if path.reply_host is not None and P.is_abort(path.reply_host):
                try:
                    reason = P.read_abort(data, path.reply_host)
                except HopbenchError as inner:
                    reason = f"(unreadable abort frame: {inner})"
                raise PeerError(f"the server aborted the plan after {progress.done} round trips: {reason}") from None
            self._abort(data, path.abort_bytes(plan), str(exc))
            raise
        except KeyboardInterrupt:
            self._abort(data, path.abort_bytes(plan), "client interrupted")
            raise

    @staticmethod
    def _abort(data: Channel, size: int, reason: str) -> None:
        """Abort the plan towards the server, cut to the message size it expects next."""
        try:
            P.send_abort(data, reason, size)
        except Exception:  # best effort: the peer may be gone
            pass

    def bye(self, wait_s: float = 2.0) -> None:
        """End the session as the protocol says: BYE, then the server closes. A server
        that sends anything after BYE, or does not close, broke the protocol."""
        P.send_msg(self.control, P.BYE, None, self.bind)
        self._bye_sent = True
        extra = control.await_close(self.control, wait_s)
        if extra is None:
            raise ProtocolError(f"the server at {self.host}:{self.port} did not close the connection within "
                                f"{wait_s:g} s of BYE")
        if extra:
            raise ProtocolError(f"the server at {self.host}:{self.port} sent data after BYE")

    def close(self) -> None:
        if not self._bye_sent:
            try:
                P.send_msg(self.control, P.BYE, None, self.bind)
            except Exception:
                pass
        self.control.close()
