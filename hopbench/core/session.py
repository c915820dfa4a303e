"""One client's session on the server: a state machine (docs/PROTOCOL.md, "States").

    AWAIT_HELLO --HELLO--> [AWAIT_AUTH --AUTH--> AWAIT_ENV --ENV-->] READY --PLAN--> SERVING
    SERVING --(all cycles, DONE sent)--> READY;  READY --BYE--> CLOSED

With a secret, every frame after the AUTH exchange is bound to it (auth.Binding: a tag
per frame, a proof first on each data channel), so a relay that passed the handshake
through cannot answer for the server; the client's environment arrives only then (ENV).

Every frame is read through `_expect(allowed...)` in the session's state: a frame the
state does not allow is a ProtocolError naming both. A plan is negotiated (caps, transport, its serving path's
check against the server's own settings, the loop) and then served by the one serving path
of its kind (hopbench.core.serving). A session owns everything it touches (its channels,
its client's environment, its counts); the server hands it only frozen things."""

from __future__ import annotations

import dataclasses
import enum
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from hopbench.core import auth, codecs, control, native
from hopbench.core import env as envmod
from hopbench.core import protocol as P
from hopbench.core.kinds import serving_path
from hopbench.core.serving import Ended, PlanContext, ServerConfig, ServingPath
from hopbench.core.transport import Channel, TransportOptions, get_transport, plan_poll
from hopbench.errors import ConfigError, HopbenchError, PeerError, ProtocolError
from hopbench.version import __version__


def data_poll(poll: str, plan: P.Plan) -> str:
    """The poll mode of the server's data channel for a plan: a lone target's drafter plan
    busy-polls where the host has the CPUs (core.transport.plan_poll); a start group's do not
    (their sessions' spinners would take turns at one interpreter's lock)."""
    return plan_poll(poll, plan.drafter is not None and plan.group is None)

class State(enum.Enum):
    AWAIT_HELLO = "AWAIT_HELLO"
    AWAIT_AUTH = "AWAIT_AUTH"
    AWAIT_ENV = "AWAIT_ENV"
    READY = "READY"
    SERVING = "SERVING"
    CLOSED = "CLOSED"


@dataclass
class SessionStats:
    peer: str
    plans: int = 0
    cycles: int = 0
    transports: set[str] = field(default_factory=set)
    error: str | None = None
    cpus: set[int] = field(default_factory=set)  # --session-cpus: where its plans ran


class ServerSession:
    def __init__(self, chan: Channel, config: ServerConfig, env: dict[str, Any], clock: Callable[[], int],
                 log: Callable[[str], None], budget: Any = None, groups: Any = None):
        self.chan, self.config, self.env, self.clock, self.log = chan, config, env, clock, log
        self.budget = budget  # the server's MemoryBudget, shared by the sessions served at once (or None)
        self.groups = groups  # the server's StartGroups (plans started together), or None (one at a time)
        self.state = State.AWAIT_HELLO
        self.client_env: dict[str, Any] | None = None
        self.bind: auth.Binding | None = None  # set once the client has authenticated
        self.plans = 0
        self._served = 0  # cycles the current plan served (DONE confirms a complete plan)
        self.stats = SessionStats(peer=str(chan.info.get("peer", "?")))

    def run(self) -> SessionStats:
        """The session to its end; never raises for client faults (the server's own stop
        and KeyboardInterrupt pass). A client fault gets an ERROR frame first when it still
        listens (docs/PROTOCOL.md, "Errors")."""
        try:
            self._handshake()
            self._plans()
        except (Ended, PeerError) as exc:  # the client was told already, or reported the error itself
            self.stats.error = str(exc)
        except ProtocolError as exc:
            self.stats.error = str(exc)
            self._tell(str(exc))
        except HopbenchError as exc:  # transport faults: the client went away or timed out
            self.stats.error = str(exc)
        except Exception as exc:  # a bug, but one client must never take the server down
            self.stats.error = f"internal error {exc.__class__.__name__}: {exc}"
            self._tell("internal server error")
            if os.environ.get("HOPBENCH_DEBUG"):
                import traceback

                traceback.print_exc()
        finally:
            self.state = State.CLOSED
            if self.groups is not None:
                self.groups.leave(self)
            self.chan.close()
        return self.stats

    def _tell(self, reason: str) -> None:
        try:
            P.send_msg(self.chan, P.ERROR, {"reason": reason}, self.bind)
        except Exception:  # it no longer listens
            pass

    def _expect(self, *allowed: int) -> tuple[int, dict[str, Any]]:
        """The next frame, if this state allows it; an ERROR from the client ends the session."""
        msg_type, obj = P.recv_frame(self.chan, self.bind)
        if msg_type in allowed:
            return msg_type, obj
        if msg_type == P.ERROR:
            reason = str(obj["reason"]) if isinstance(obj.get("reason"), str) else "(no reason given)"
            raise PeerError(f"client reported an error in state {self.state.value}: {reason[:200]}")
        want = "/".join(P.TYPE_NAMES[t] for t in allowed)
        raise ProtocolError(f"unexpected {P.TYPE_NAMES[msg_type]} in state {self.state.value} (expected {want})")

    def _refuse(self, reason: str) -> None:
        P.send_msg(self.chan, P.REFUSE, {"reason": reason}, self.bind)
        raise Ended(f"refused: {reason}")

    def _handshake(self) -> None:
        """HELLO (and AUTH), all within handshake_timeout_s: a per-call timeout alone would let
        a client trickling one byte at a time hold the server; a timer shuts the socket down."""
        limit = self.config.handshake_timeout_s
        watchdog = threading.Timer(limit, control.shutdown, args=(self.chan,))
        watchdog.daemon = True
        watchdog.start()
        try:
            self._hello()
        except HopbenchError:
            if not watchdog.is_alive():
                raise ProtocolError(f"handshake not finished within {limit} s") from None
            raise
        finally:
            watchdog.cancel()

    def _hello(self) -> None:
        cfg = self.config
        _, hello = self._expect(P.HELLO)
        version = hello.get("protocol")
        if P.is_protocol_number(version) and version != P.VERSION:  # another version's HELLO: REFUSE
            self._refuse(f"protocol version {version} not supported (server speaks {P.VERSION})")
        P.validate(hello, "HELLO client")  # ours, malformed (no integer protocol, env no object): ERROR
        self.client_env = hello.get("env") if isinstance(hello.get("env"), dict) else None
        challenge = os.urandom(16).hex() if cfg.secret else None
        reply: dict[str, Any] = {
            "protocol": P.VERSION, "role": "server", "software": f"hopbench {__version__}",
            "auth": {"challenge": challenge} if challenge else None,
            "caps": {"max_request_bytes": cfg.caps.max_request_bytes, "max_reply_bytes": cfg.caps.max_reply_bytes,
                     "max_cycles": cfg.caps.max_cycles, "max_sessions": cfg.max_sessions,
                     "codecs": codecs.decodable()}}
        if not challenge:  # with a secret, nothing but this minimal HELLO before authentication
            reply["env"] = self._env_for()
        P.send_msg(self.chan, P.HELLO, reply)
        if challenge and cfg.secret:  # the client proves it knows the secret; the server proves it back
            self.state = State.AWAIT_AUTH
            _, proof = self._expect(P.AUTH)
            P.validate(proof, "AUTH client")
            if not auth.auth_ok(cfg.secret, proof["mac"], "client", challenge, proof["nonce"]):
                self._refuse("authentication failed: wrong or missing secret")
            P.send_msg(self.chan, P.AUTH, {"mac": auth.auth_mac(cfg.secret, "server", proof["nonce"], challenge),
                                           "env": self._env_for()})
            self.bind = auth.Binding(auth.session_key(cfg.secret, challenge, proof["nonce"]), "server")
            self.state = State.AWAIT_ENV  # the client's environment, now that this server proved itself
            _, env = self._expect(P.ENV)
            self.client_env = P.validate(env, "ENV")["env"]
        self.state = State.READY

    def _env_for(self) -> dict[str, Any]:
        """The server's environment plus the interface its route back to this client leaves
        by (for doctor's slower-hop check)."""
        peer = self.stats.peer.rsplit(":", 1)[0] if self.stats.peer != "?" else ""
        dev = envmod.route_interface(peer) if peer else None
        return {**self.env, "route_to_client": {"peer": peer, "interface": envmod.interface_info(dev) if dev else None}}

    def _plans(self) -> None:
        """READY: PLAN or BYE. A finished plan's data channel is closed only when the next
        control frame arrives, i.e. once the client has all its replies: closing right after
        the last send let UCX reset a final rendezvous reply the client had not progressed."""
        done: Channel | None = None
        try:
            while True:
                msg_type, obj = self._expect(P.PLAN, P.BYE)
                if done is not None:
                    done.close()
                    done = None
                if msg_type == P.BYE:
                    return
                done = self._plan(P.Plan.from_wire(obj))
        finally:
            if done is not None:
                done.close()

    def _negotiate(self, plan: P.Plan) -> tuple[Any, ServingPath, PlanContext]:
        """The plan's transport and context, or REFUSE with the first reason it cannot be served."""
        cfg = self.config
        path = serving_path(plan)
        ctx = PlanContext(cfg, self.env, self.client_env, self.chan, self.clock, self.log, groups=self.groups)
        reason = cfg.caps.check(plan)
        transport = None
        if reason is None:
            try:
                transport = get_transport(plan.transport)
            except HopbenchError as exc:
                reason = f"server cannot serve transport {plan.transport!r}: {exc}"
        if transport is not None and reason is None:
            reason = path.check(plan, ctx, transport)
        if reason is None and plan.group is not None:
            reason = (self.groups.refusal(self, plan.group) if self.groups is not None else
                      f"this server serves one session at a time (--max-sessions 1): a start group of "
                      f"{plan.group.size} targets needs --max-sessions {plan.group.size} or more")
        if transport is not None and reason is None:
            try:
                ctx = PlanContext(cfg, self.env, self.client_env, self.chan, self.clock, self.log,
                                  str(native.predict(transport, cfg.poll, cfg.loop, path.python_only)), self.groups)
            except ConfigError as exc:  # --loop native and a plan it cannot run
                reason = f"server cannot serve this plan: {exc}"
        if reason is not None:
            self._refuse(reason)
        return transport, path, ctx

    def _plan(self, plan: P.Plan) -> Channel | None:
        """Serve one plan; returns its data channel (still open), or None when the cycles ran
        on the control connection."""
        transport, path, ctx = self._negotiate(plan)
        need = plan.request_bytes + plan.reply_bytes
        if self.budget is not None and not self.budget.reserve(need):
            self._refuse(f"busy: the plans of the other sessions hold {self.budget.used} of the server's "
                         f"{self.budget.total} B of request and reply memory; this one needs {need} B "
                         "(try again when one ends, or a smaller plan)")
        self._served = 0
        try:
            if self.config.session_cpus is None:
                opened = self._accepted(transport, path, ctx, plan)
            else:
                with self.config.session_cpus.pinned() as cpu:
                    self.stats.cpus.add(cpu)
                    # where the plan runs, for may_share_cpu (a busy loop beside its peer yields)
                    ctx = dataclasses.replace(ctx, env={**ctx.env, "cpu_affinity": [cpu]})
                    opened = self._accepted(transport, path, ctx, plan, where={"server_cpu": cpu})
        finally:
            if self.budget is not None:
                self.budget.release(need)
        # every cycle served: confirmed on the control connection only now, with the plan's CPU
        # and memory given back, so a client that has DONE finds them free (issue 42: a test
        # saw the CPU still held right after its plan ended)
        if self._served == plan.total:
            P.send_msg(self.chan, P.DONE, {"cycles": self._served}, self.bind)
        return opened

    def _accepted(self, transport: Any, path: ServingPath, ctx: PlanContext, plan: P.Plan,
                  where: dict[str, Any] | None = None) -> Channel | None:
        """ACCEPT the plan, serve it; `where` (--session-cpus: the plan's CPU) goes into ACCEPT's transport_info."""
        self.stats.plans += 1
        self.stats.transports.add(plan.transport)
        self.state = State.SERVING
        plan_no, self.plans = self.plans, self.plans + 1
        if transport.reuses_control:
            self._together(plan)
            P.send_msg(self.chan, P.ACCEPT, {"data_port": None, "transport_info": {**self.chan.info, "loop": ctx.loop,
                                                                                   **(where or {})}}, self.bind)
            self._serve(path, self.chan, plan, ctx)
            return None
        options = TransportOptions(timeout_s=self.config.idle_timeout_s,
                                   poll=data_poll(self.config.poll, plan),
                                   settings=ctx.settings(plan), share_cpu=ctx.share_cpu)
        try:
            listener = transport.listen(self.config.host, 0, options)
        except HopbenchError as exc:  # the server's own settings (NIXL_UCX_TLS=...) or host: the client is told why
            self._refuse(f"server cannot open a {plan.transport} data listener: {exc}")
        try:
            self._together(plan)
            P.send_msg(self.chan, P.ACCEPT, {"data_port": listener.address[1],
                                             "transport_info": {**listener.info, "loop": ctx.loop, **(where or {})}},
                       self.bind)
            data = listener.accept(self.config.data_accept_timeout_s)
        finally:
            listener.close()
        try:
            if self.bind is not None:  # in a bound session each end proves itself first (server first)
                self.bind.prove_data(data, plan_no, "the data channel's peer")
            self._serve(path, data, plan, ctx)
        except BaseException:
            data.close()
            raise
        opened: Channel = data
        return opened

    def _together(self, plan: P.Plan) -> None:
        """A plan of a start group: its ACCEPT waits for the group's other sessions (busy.StartGroups)."""
        if plan.group is not None and self.groups is not None:
            reason = self.groups.together(self, plan.group)
            if reason is not None:
                self.state = State.READY
                self._refuse(reason)

    def _serve(self, path: ServingPath, chan: Channel, plan: P.Plan, ctx: PlanContext) -> None:
        try:
            done = path.serve(chan, plan, ctx)
        except BaseException:
            self.stats.cycles += ctx.progress.done  # what the loop served before it stopped
            raise
        self.stats.cycles += done
        self._served = done  # DONE is sent by _plan, once the plan's CPU and memory are given back
        self.state = State.READY
