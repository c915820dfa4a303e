"""`hopbench serve`: a long-lived server, one client after another (like iperf3 -s).

The control connection is always TCP on the served port; for a transport that reuses it
(tcp) the cycles run over that same connection, for other transports the server opens a data listener on
an ephemeral port per plan and announces it in ACCEPT (iperf3's control/data split).
A client that breaks the protocol gets an ERROR frame (best effort) and is dropped; the
server logs one line and serves the next one.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from hopbench.core import control, native
from hopbench.core import env as envmod
from hopbench.core import protocol as P
from hopbench.core.timing import echo_cycles
from hopbench.core.transport import TransportOptions, get_transport
from hopbench.errors import ConfigError, HopbenchError, PeerError, ProtocolError, Timeout
from hopbench.records import TIMEOUT_S
from hopbench.version import __version__


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    caps: P.Caps = field(default_factory=P.Caps)
    idle_timeout_s: float = 60.0  # a connected client silent this long is dropped
    handshake_timeout_s: float = TIMEOUT_S
    data_accept_timeout_s: float = TIMEOUT_S
    poll: str = "auto"
    transport_settings: dict = field(default_factory=dict)
    once: bool = False
    secret: str | None = None  # shared secret for the HMAC challenge-response (--secret)
    loop: str = "auto"  # the echo loop: auto (compiled where it applies), native, python


class _Stop(Exception):
    pass


class _Ended(HopbenchError):
    """The session ends; the client has been told already (REFUSE or a data-stream abort)."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _BusyAnswer(threading.Thread):
    """While one session runs, any other client is told that the server is busy (its HELLO
    answered with REFUSE, docs/PROTOCOL.md "States") instead of waiting unanswered in the
    accept queue until its timeout (iperf3's "the server is busy running a test"). A client
    that arrives as the session ends (within GRACE_S) is handed back to be served, unread.
    At most MAX_WAITING clients are held at a time; beyond that they are closed."""

    MAX_WAITING = 16
    GRACE_S = 2.0  # longer than a session takes to wind down after its client has its last reply

    def __init__(self, listener, serving: str, log: Callable[[str], None]):
        super().__init__(name="hopbench-busy", daemon=True)
        self.listener, self.log = listener, log
        self.reason = (f"busy: serving another client ({serving}) since {time.strftime('%H:%M:%S UTC', time.gmtime())}; "
                       "this server runs one session at a time: try again when it ends")
        self.done = threading.Event()
        self.slots = threading.BoundedSemaphore(self.MAX_WAITING)
        self.handed_back: list = []
        self.answering: list[threading.Thread] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                chan = self.listener.accept(0.2)
            except Timeout:
                continue
            except HopbenchError:  # the listener was shut down (stopping) or failed: the queue takes over
                return
            if not self.slots.acquire(blocking=False):
                chan.close()
                continue
            t = threading.Thread(target=self._answer, args=(chan,), daemon=True)
            self.answering = [a for a in self.answering if a.is_alive()] + [t]  # bounded under a flood
            t.start()

    def _answer(self, chan) -> None:
        try:
            if self.done.wait(self.GRACE_S):  # the session ended meanwhile: this client is next
                with self._lock:
                    self.handed_back.append(chan)
                return
            peer = chan.info.get("peer", "?")
            try:
                P.recv_msg(chan, P.HELLO)
                P.send_msg(chan, P.REFUSE, {"reason": self.reason})
                self.log(f"client {peer}: refused, busy with another session")
            except HopbenchError:
                pass
            chan.close()
        finally:
            self.slots.release()

    def stop(self) -> list:
        """End busy answering; returns the clients that arrived as the session ended."""
        self.done.set()
        self.join(5)
        for t in self.answering:
            t.join(self.GRACE_S + 5)  # those still in their grace wait return at once: done is set
        with self._lock:
            return list(self.handed_back)


class Server:
    def __init__(self, config: ServerConfig, log: Callable[[str], None] = print,
                 clock: Callable[[], int] = time.perf_counter_ns):
        self.config = config
        self.log = log
        self.clock = clock  # the server's one clock: read only around a staged GPU path's copies
        self.listener = control.listen(config.host, config.port, idle_timeout_s=config.idle_timeout_s,
                                       poll=config.poll)
        self.address = self.listener.address
        self.env = envmod.collect()
        self._client_env: dict | None = None  # the current client's environment (HELLO or AUTH)
        self.sessions = 0
        self.current = None
        self._stopping = False

    def serve_forever(self) -> None:
        """Serve until SIGINT/SIGTERM, stop(), or after one session with `once`."""
        main = threading.current_thread() is threading.main_thread()
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        try:
            while not self._stopping:
                try:
                    chan = self.listener.accept(None)
                except HopbenchError as exc:
                    if self._stopping:
                        break
                    self.log(f"accept failed: {exc}")
                    continue
                if self._stopping:
                    chan.close()
                    break
                queue = [chan]
                while queue and not self._stopping:  # clients that arrived as a session ended come next
                    chan = queue.pop(0)
                    busy = _BusyAnswer(self.listener, chan.info.get("peer", "?"), self.log)
                    busy.start()
                    try:
                        self.serve_session(chan)
                    finally:
                        queue += busy.stop()
                    if self.config.once:
                        break
                for waiting in queue:  # stopping (or --once): not served
                    waiting.close()
                if self.config.once:
                    break
        except (_Stop, KeyboardInterrupt):
            self.log("server stopping")
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.listener.close()

    def _on_signal(self, signum, frame):
        # Raising interrupts whatever the main thread blocks in (accept, a session's
        # receive). Python drops an exception raised while a finaliser or weakref
        # callback happens to run (seen after UCX sessions), so the flag and a shut-down
        # listening socket end the accept loop even then.
        self._stopping = True
        control.shutdown(self.listener)
        raise _Stop()

    def stop(self) -> None:
        """Stop from another thread: the blocked accept fails and the loop ends."""
        self._stopping = True
        try:  # wake the accept by connecting once; closing alone does not interrupt it
            socket.create_connection(self.address, timeout=1).close()
        except OSError:
            pass

    def serve_session(self, chan) -> dict:
        """Run one client's session to its end; never raises for client faults. Every
        way a session ends is one log line; a client fault gets an ERROR or REFUSE frame
        first (docs/PROTOCOL.md, "Errors")."""
        peer = chan.info.get("peer", "?")
        t0 = time.monotonic()
        self.sessions += 1
        self.current = chan  # the session being served (tests cut it with control.shutdown)
        stats = {"peer": peer, "plans": 0, "cycles": 0, "transports": set(), "error": None}
        try:
            self._session(chan, stats)
        except (_Stop, KeyboardInterrupt):
            raise
        except _Ended as exc:  # the client was already told (REFUSE, or an abort on the data stream)
            stats["error"] = str(exc)
        except PeerError as exc:  # the client reported an error: nothing to answer
            stats["error"] = str(exc)
        except ProtocolError as exc:
            stats["error"] = str(exc)
            try:  # tell the client why, if it still listens
                P.send_msg(chan, P.ERROR, {"reason": str(exc)})
            except HopbenchError:
                pass
        except HopbenchError as exc:  # transport faults: the client went away or timed out
            stats["error"] = str(exc)
        except Exception as exc:  # a bug, but one client must never take the server down
            stats["error"] = f"internal error {exc.__class__.__name__}: {exc}"
            try:
                P.send_msg(chan, P.ERROR, {"reason": "internal server error"})
            except Exception:
                pass
            if os.environ.get("HOPBENCH_DEBUG"):
                import traceback

                traceback.print_exc()
        finally:
            chan.close()
            self.current = None
        outcome = "ok" if stats["error"] is None else f"error: {stats['error']}"
        self.log(
            f"session {self.sessions} from {peer}: {stats['plans']} plans, {stats['cycles']} cycles, "
            f"{'/'.join(sorted(stats['transports'])) or '-'}, {time.monotonic() - t0:.2f} s, {outcome}"
        )
        return stats

    def _session(self, chan, stats: dict) -> None:
        cfg = self.config
        # The whole handshake (HELLO, AUTH) must finish within handshake_timeout_s: a
        # per-call timeout alone would let a client trickling one byte at a time hold
        # the server forever. The watchdog shuts the socket down at the deadline.
        watchdog = threading.Timer(cfg.handshake_timeout_s, control.shutdown, args=(chan,))
        watchdog.daemon = True
        watchdog.start()
        try:
            self._handshake(chan, stats)
        except HopbenchError as exc:
            if not watchdog.is_alive():
                raise ProtocolError(f"handshake not finished within {cfg.handshake_timeout_s} s") from None
            raise exc
        finally:
            watchdog.cancel()
        self._plans(chan, stats)

    @staticmethod
    def _expect(chan, state: str, *allowed: int) -> tuple[int, dict]:
        """The state machine (docs/PROTOCOL.md, "States"): a frame the state does not allow
        is a ProtocolError naming both; an ERROR from the client ends the session."""
        msg_type, obj = P.recv_frame(chan)
        if msg_type in allowed:
            return msg_type, obj
        if msg_type == P.ERROR:
            reason = str(obj["reason"]) if isinstance(obj.get("reason"), str) else "(no reason given)"
            raise PeerError(f"client reported an error in state {state}: {reason[:200]}")
        want = "/".join(P.TYPE_NAMES[t] for t in allowed)
        raise ProtocolError(f"unexpected {P.TYPE_NAMES[msg_type]} in state {state} (expected {want})")

    def _refuse(self, chan, reason: str) -> None:
        P.send_msg(chan, P.REFUSE, {"reason": reason})
        raise _Ended(f"refused: {reason}")

    def _handshake(self, chan, stats: dict) -> None:
        cfg = self.config
        _, hello = self._expect(chan, "AWAIT_HELLO", P.HELLO)
        if _is_int(hello.get("protocol")) and hello["protocol"] != P.VERSION:
            self._refuse(chan, f"protocol version {hello['protocol']} not supported (server speaks {P.VERSION})")
        P.validate(hello, "HELLO client")
        self._client_env = hello.get("env") if isinstance(hello.get("env"), dict) else None
        challenge = os.urandom(16).hex() if cfg.secret else None
        reply = {"protocol": P.VERSION, "role": "server", "software": f"hopbench {__version__}",
                 "auth": {"challenge": challenge} if challenge else None,
                 "caps": {"max_request_bytes": cfg.caps.max_request_bytes,
                          "max_reply_bytes": cfg.caps.max_reply_bytes, "max_cycles": cfg.caps.max_cycles}}
        if not challenge:  # with a secret, nothing but this minimal HELLO before authentication
            reply["env"] = self._env_for(chan)
        P.send_msg(chan, P.HELLO, reply)
        if challenge and cfg.secret:
            # client proves it knows the secret; the server proves it back (mutual)
            _, auth = self._expect(chan, "AWAIT_AUTH", P.AUTH)
            P.validate(auth, "AUTH client")
            if not P.auth_ok(cfg.secret, auth["mac"], "client", challenge, auth["nonce"]):
                self._refuse(chan, "authentication failed: wrong or missing secret")
            self._client_env = auth.get("env") if isinstance(auth.get("env"), dict) else None
            P.send_msg(chan, P.AUTH, {"mac": P.auth_mac(cfg.secret, "server", auth["nonce"], challenge),
                                      "env": self._env_for(chan)})

    def _env_for(self, chan) -> dict:
        """The server's environment plus the interface its route back to this client
        leaves by (for doctor's slower-hop check)."""
        peer = str(chan.info.get("peer", "")).rsplit(":", 1)[0]
        dev = envmod.route_interface(peer) if peer else None
        return {**self.env, "route_to_client": {"peer": peer, "interface": envmod.interface_info(dev) if dev else None}}

    def _plans(self, chan, stats: dict) -> None:
        # A finished plan's data channel is closed only when the next control message
        # (PLAN or BYE) arrives, i.e. once the client has all its replies: closing right
        # after the last send let UCX reset a final rendezvous reply the client had not
        # yet progressed (seen with both ends on one CPU, 1 MiB replies).
        done = None
        try:
            while True:
                msg_type, obj = self._expect(chan, "READY", P.PLAN, P.BYE)
                if done is not None:
                    done.close()
                    done = None
                if msg_type == P.BYE:
                    return
                done = self._plan(chan, P.Plan.from_wire(obj), stats)
        finally:
            if done is not None:
                done.close()

    def _plan(self, chan, plan: P.Plan, stats: dict):
        """Serve one plan; returns its data channel (still open) or None for tcp."""
        cfg = self.config
        reason = cfg.caps.check(plan)
        transport = None
        if reason is None:
            try:
                transport = get_transport(plan.transport)
            except HopbenchError as exc:
                reason = f"server cannot serve transport {plan.transport!r}: {exc}"
        if reason is None and plan.server_memory == "cuda":
            reason = self._gpu_reason(plan)
        if reason is None and plan.spec is not None:
            reason = self._spec_reason(plan)
        loop = ""
        if reason is None:
            try:
                loop = native.predict(transport, cfg.poll, cfg.loop, None if self._host_plan(plan) else
                                      "this plan needs the Python loop (GPU memory or the spec loop)")
            except ConfigError as exc:  # --loop native and a plan it cannot run
                reason = f"server cannot serve this plan: {exc}"
        if reason is not None:
            self._refuse(chan, reason)
        stats["plans"] += 1
        stats["transports"].add(plan.transport)
        assert transport is not None
        if transport.reuses_control:  # tcp: the cycles run on the control connection
            P.send_msg(chan, P.ACCEPT, {"data_port": None, "transport_info": {**chan.info, "loop": loop}})
            self._serve_cycles(chan, plan, stats)
            return None
        options = TransportOptions(timeout_s=cfg.idle_timeout_s, poll=cfg.poll,
                                   settings=cfg.transport_settings.get(plan.transport, {}))
        listener = transport.listen(cfg.host, 0, options)
        try:
            P.send_msg(chan, P.ACCEPT, {"data_port": listener.address[1],
                                        "transport_info": {**listener.info, "loop": loop}})
            data = listener.accept(cfg.data_accept_timeout_s)
        finally:
            listener.close()
        try:
            self._serve_cycles(data, plan, stats)
        except BaseException:
            data.close()
            raise
        return data

    @staticmethod
    def _host_plan(plan: P.Plan) -> bool:
        """A plan the compiled echo loop can serve: host memory, no spec loop."""
        return plan.server_memory != "cuda" and plan.spec is None

    @staticmethod
    def _gpu_reason(plan: P.Plan) -> str | None:
        from hopbench.core import gpu

        try:
            gpu.check_choice((plan.server_memory,), plan.gpu_path, get_transport(plan.transport),
                             plan.transport_settings or {})
            gpu.load()
        except HopbenchError as exc:
            return f"server cannot hold the payload in CUDA memory: {exc}"
        return None

    def _serve_cycles(self, chan, plan: P.Plan, stats: dict) -> None:
        """One plan's round trips through the one echo loop (hopbench.core.timing)."""
        if plan.spec is not None:
            return self._serve_spec(chan, plan, stats)
        if plan.server_memory == "cuda":
            return self._serve_cycles_gpu(chan, plan, stats)
        request, reply = chan.alloc(plan.request_bytes), chan.alloc(plan.reply_bytes)
        done = 0
        try:
            done = echo_cycles(chan, request, reply, P.ReplyCodec(plan.k, plan.id_bytes), plan.total,
                               crc=plan.payload_crc32 if plan.verify else None,
                               on_bad_seq=lambda seq: self._bad_request(chan, request, seq, plan), loop=self.config.loop,
                               share_cpu=native.may_share_cpu(self.env, self._client_env))
        finally:
            stats["cycles"] += done

    def _spec_reason(self, plan: P.Plan) -> str | None:
        """A spec plan the drafter cannot run (its work model, its shape)."""
        from hopbench.core import spec as S

        assert plan.spec is not None
        try:
            info = S.spec_info_from_wire(plan.spec, plan.k, plan.id_bytes, plan.cycles, plan.warmup)
            if plan.request_bytes != info.request_bytes or plan.reply_bytes != info.reply_bytes:
                return (f"a spec plan's request_bytes/reply_bytes must be {info.request_bytes}/{info.reply_bytes} "
                        f"(K + 1 tokens of hidden states; K ids + 16)")
            S.parse_work(str(plan.spec["draft"]), float(plan.spec.get("scale", 1.0)))
        except HopbenchError as exc:
            return f"cannot run this spec plan: {exc}"
        return None

    def _serve_spec(self, chan, plan: P.Plan, stats: dict) -> None:
        """The drafter's loop of a speculative plan (hopbench.core.spec)."""
        from hopbench.core import spec as S

        assert plan.spec is not None
        info = S.spec_info_from_wire(plan.spec, plan.k, plan.id_bytes, plan.cycles, plan.warmup)
        draft = S.parse_work(str(plan.spec["draft"]), float(plan.spec.get("scale", 1.0)))
        ranked = list(plan.spec.get("ranked") or range(plan.k + 1))
        done = 0

        def bad(seq: int, header) -> None:
            self._bad_request(chan, header, seq, dataclasses.replace(plan, reply_bytes=info.reply_bytes))

        try:
            done = S.run_drafter(chan, info, draft, ranked, P.ReplyCodec(plan.k, plan.id_bytes), bad, self.clock)
        finally:
            stats["cycles"] += done

    def _bad_request(self, chan, request, seq: int, plan: P.Plan) -> None:
        """A request whose seq is not the expected one: the client's abort (the plan ends,
        the session goes on), or a protocol fault (the server aborts on the data stream,
        in reply-sized messages, and ends the session)."""
        if P.is_abort(request):
            reason = P.read_abort(chan, request)
            self.log(f"client aborted plan at seq {seq}: {reason[:200]}")
            return
        got = P.SEQ.unpack_from(request, 0)[0]
        self._abort(chan, f"request carries seq {got}, expected {seq}", plan)

    @staticmethod
    def _abort(chan, reason: str, plan: P.Plan) -> None:
        """End the plan and the session, telling the client on the data stream."""
        try:
            P.send_abort(chan, reason, plan.reply_bytes)
        except HopbenchError:
            pass
        raise _Ended(reason)

    def _serve_cycles_gpu(self, chan, plan: P.Plan, stats: dict) -> None:
        """The drafter's side with GPU memory, through the same echo loop: requests end in,
        replies start in, device buffers. staged: a channel wrapper receives into pinned
        memory (the loop checks seq and CRC there; a failed CRC inverts the ids, as on
        host) and around each send copies the request host->device and the reply
        device->host, timed with the server's clock; their int64 (total x 2) array follows
        the last reply on the data channel. direct: the transport receives into and sends
        from the device buffers; the seq check (an 8-byte copy to host) runs after the
        reply is sent, off the client's critical path. Either way the next reply's ids are
        written into the device buffer (a small host->device copy) after each packing, as
        a drafter would produce them on its GPU."""
        import numpy as np

        from hopbench.core.gpu import StagedServerChannel, Staging

        req = Staging(plan.request_bytes)
        rep = Staging(plan.reply_bytes, req.stream)
        req.fill_random(1)
        codec = P.ReplyCodec(plan.k, plan.id_bytes)
        crc = plan.payload_crc32 if plan.verify else None
        push_ids = partial(rep.h2d, 0, plan.k * plan.id_bytes)
        done = 0
        try:
            if plan.gpu_path == "direct":
                def bad_seq(seq: int) -> None:
                    req.d2h()  # the whole message: it may be the client's abort
                    self._bad_request(chan, req.host, seq, plan)

                def bad_crc(seq: int) -> None:
                    self._abort(chan, f"request {seq} failed its CRC-32 check (checked after the reply was sent)",
                                plan)

                done = echo_cycles(chan, req.host, rep.host, codec, plan.total, crc=crc, on_bad_seq=bad_seq,
                                   on_bad_crc=bad_crc, recv_buf=req.device, send_buf=rep.device,
                                   fetch=partial(req.d2h, 0, None if crc is not None else P.SEQ_BYTES),
                                   after_pack=push_ids, check_late=True)
            else:
                timings = np.zeros((plan.total, 2), dtype=np.int64)
                staged = StagedServerChannel(chan, req, rep, timings, self.clock)
                done = echo_cycles(staged, req.host, rep.host, codec, plan.total, crc=crc,
                                   on_bad_seq=lambda seq: self._bad_request(chan, req.host, seq, plan),
                                   after_pack=push_ids)
                if done == plan.total:
                    chan.send(timings.view(np.uint8).reshape(-1))
        finally:
            stats["cycles"] += done
