"""The client side of a session: control connection, handshake, one plan at a time."""

from __future__ import annotations

import dataclasses
import hmac
import os
import time
import zlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np

from hopbench.core import control, native
from hopbench.core import protocol as P
from hopbench.core.timing import run_cycles
from hopbench.core.transport import Channel, TransportOptions, get_transport
from hopbench.errors import (
    ConfigError,
    HopbenchError,
    PeerError,
    ProtocolError,
    Refused,
    Timeout,
    VerifyError,
)
from hopbench.records import CONNECT_TIMEOUT_S, TIMEOUT_S
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


@dataclass
class Session:
    host: str
    port: int
    timeout_s: float = TIMEOUT_S
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    poll: str = "auto"
    transport_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    client_env: dict[str, Any] = field(default_factory=dict)
    secret: str | None = None
    loop: str = "auto"  # the timed loop (hopbench.core.native): auto, native or python

    def __post_init__(self) -> None:
        self.bind: P.Binding | None = None  # the session bound to its authentication (with a secret)
        self.plans = 0  # plans accepted so far (a plan's number is in its data channel's proof)
        self.control = control.connect(self.host, self.port, timeout_s=self.timeout_s,
                                       connect_timeout_s=self.connect_timeout_s, poll=self.poll)
        try:
            hello: dict[str, Any] = {"protocol": P.VERSION, "role": "client", "software": f"hopbench {__version__}"}
            if not self.secret:  # with a secret, the environment crosses only after authentication
                hello["env"] = self.client_env
            P.send_msg(self.control, P.HELLO, hello)
            _, self.server_hello = P.recv_msg(self.control, P.HELLO)
            self._check_hello(self.server_hello)
            self._authenticate()
        except BaseException:
            self.control.close()
            raise

    def _check_hello(self, hello: dict[str, Any]) -> None:
        """What docs/PROTOCOL.md says a server's HELLO must be."""
        where = f"the server at {self.host}:{self.port}"
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

    def _authenticate(self) -> None:
        challenge = (self.server_hello.get("auth") or {}).get("challenge")
        if not challenge:
            if self.secret:
                raise Refused(f"the server at {self.host}:{self.port} does not authenticate, but a secret was given "
                              "(--secret or HOPBENCH_SECRET): refusing an unauthenticated server (an impostor, or a "
                              "server started without --secret)")
            return
        if not self.secret:
            raise Refused("the server requires a secret (--secret or HOPBENCH_SECRET)")
        nonce = os.urandom(16).hex()  # nothing about this client crosses before the server's proof
        P.send_msg(self.control, P.AUTH, {"nonce": nonce, "mac": P.auth_mac(self.secret, "client", challenge, nonce)})
        _, reply = P.recv_msg(self.control, P.AUTH)
        if not P.auth_ok(self.secret, reply.get("mac"), "server", nonce, challenge):
            raise Refused("the server failed to prove it knows the secret")
        try:
            P.validate(reply, "AUTH server")
        except ProtocolError as exc:
            raise ProtocolError(f"the server at {self.host}:{self.port} broke the protocol: {exc}") from None
        self.server_hello["env"] = reply["env"]
        self.bind = P.Binding(P.session_key(self.secret, challenge, nonce), "client")
        P.send_msg(self.control, P.ENV, {"env": self.client_env}, self.bind)

    @property
    def server_env(self) -> dict[str, Any]:
        env: dict[str, Any] = self.server_hello.get("env", {})
        return env

    def measure(self, plan: P.Plan, *, clock: Callable[[], int] = time.perf_counter_ns,
                gap_s: float = 0.0, source: Any = None, schedule: np.ndarray | None = None) -> Measurement:
        """Run one plan. Transport/verify errors and Ctrl-C propagate with
        `exc.measurement` attached (the samples measured before it). A codec plan's request
        bodies are windows of `source` (hopbench.core.hidden.Source). `schedule`: open loop
        (hopbench.core.timing.run_cycles), host memory and raw payloads only; each send's lag
        behind its intended time is the stage `send_lag_ns`."""
        if schedule is not None and (plan.codec or plan.uses_gpu):
            raise ConfigError("open-loop load (--mps) measures raw payloads in host memory: not with --codec or "
                              "--memory cuda")
        data = None
        loop_info: dict[str, str] = {}  # which timed loop ran (hopbench.core.native)
        started = time.time()
        samples = np.zeros(plan.total, dtype=np.int64)
        m = Measurement(plan, samples, 0, {}, {}, started)
        body = None
        coded = None
        if plan.codec:
            coded = self._codec_setup(plan, m, source)
            plan = m.plan
        elif plan.verify:  # a random body, fixed for the plan; the server checks its CRC-32 per cycle
            body = os.urandom(plan.request_bytes - P.SEQ_BYTES)
            plan = m.plan = dataclasses.replace(plan, payload_crc32=zlib.crc32(body))
        try:
            gpu_bufs = None if coded is not None else self._gpu_buffers(plan, m)  # CUDA context first, then UCX
            data, m.server_info = self._data_channel(plan)
            m.data_info = dict(data.info)  # refreshed after the cycles (below): UCX's lanes are known by then
            codec = P.ReplyCodec(plan.k, plan.id_bytes)
            if coded is not None:
                m.completed = self._codec_cycles(data, plan, m, coded, codec, clock, gap_s, loop_info)
            elif gpu_bufs is None:
                request, reply = data.alloc(plan.request_bytes), data.alloc(plan.reply_bytes)
                if body is not None:
                    memoryview(request).cast("B")[P.SEQ_BYTES:] = body
                lag = None
                if schedule is not None:
                    lag = m.stages["send_lag_ns"] = np.zeros(plan.total, dtype=np.int64)
                    m.stages["intended_ns"] = schedule
                m.completed = self._cycles(data, plan, reply, lambda: run_cycles(
                    data, request, reply, codec, samples, clock=clock, gap_s=gap_s, loop=self.loop, info=loop_info,
                    share_cpu=self._share_cpu, schedule=schedule, lag=lag))
                self._check_tail(reply, plan)
            else:
                request, reply = gpu_bufs
                if body is not None:
                    request.host[P.SEQ_BYTES:] = np.frombuffer(body, dtype=np.uint8)
                    request.h2d()
                from hopbench.core.gpu import CLIENT_STAGES, StagedClientChannel

                if plan.gpu_path == "direct":  # the transport moves device memory itself
                    loop = partial(run_cycles, data, request.host, reply.host, codec, samples, clock=clock,
                                   gap_s=gap_s, send_buf=request.device, recv_buf=reply.device,
                                   stamp=partial(request.h2d, 0, P.SEQ_BYTES), settle=reply.d2h, loop=self.loop,
                                   info=loop_info)
                else:  # staged: the copies are a channel wrapper, timed with the same clock
                    stages = np.zeros((plan.total, len(CLIENT_STAGES)), dtype=np.int64)
                    m.stages.update({name: stages[:, j] for j, name in enumerate(CLIENT_STAGES)})
                    staged = StagedClientChannel(data, request, reply, stages, clock)
                    loop = partial(run_cycles, staged, request.host, reply.host, codec, samples, clock=clock,
                                   gap_s=gap_s, loop=self.loop, info=loop_info)
                m.completed = self._cycles(data, plan, reply.host, loop)
            if plan.server_stages:  # the server's own copy times follow the last reply
                server = np.zeros((plan.total, 2), dtype=np.int64)
                data.recv_into(server.view(np.uint8).reshape(-1))
                m.stages["server_h2d_ns"], m.stages["server_d2h_ns"] = server[:, 0], server[:, 1]
                if "transfer_ns" in m.stages:
                    m.stages["wire_ns"] = m.stages["transfer_ns"] - server[:, 0] - server[:, 1]
            self._confirmed(plan)
        except BaseException as exc:
            m.completed = getattr(exc, "completed_cycles", 0)
            m.error = str(exc) or exc.__class__.__name__
            exc.measurement = m  # type: ignore[attr-defined]
            raise
        finally:
            if data is not None and data is not self.control:
                try:
                    m.data_info = dict(data.info)
                except Exception:  # info of a broken channel: keep what was read at connect
                    pass
                data.close()
            m.data_info.update(loop_info)
        return m

    def _codec_setup(self, plan: P.Plan, m: Measurement, source: Any) -> Any:
        """The codec and this plan's request bodies (windows of the source) with the CRC-32 each
        must decode to (a lossy codec's reconstruction), made before anything is timed."""
        from hopbench.core import codecs

        if source is None:
            raise ConfigError("a codec plan needs its hidden states (hopbench.core.hidden.Source)")
        codec = codecs.parse(plan.codec or "none", plan.codec_group)
        body_bytes = plan.request_bytes - P.SEQ_BYTES
        per_token = source.bits.shape[1] * 2
        tokens = body_bytes // per_token if body_bytes % per_token == 0 else None
        bodies = source.bodies(body_bytes, tokens, min(plan.total, -(-source.tokens // (tokens or 1))))
        crcs = codecs.expected_crcs(codec, bodies) if plan.verify else [0] * len(bodies)
        if plan.verify:
            m.plan = dataclasses.replace(plan, payload_crc32=crcs[0])
        where: Any = codec
        host_bodies = bodies
        if plan.client_memory == "cuda":  # the states are born on the GPU: cast there, only the codes cross
            from hopbench.core import gpu, gpucodec

            if codec.lossless and plan.server_memory != "cuda":
                raise ConfigError(f"--codec {codec.name} from CUDA memory: nvCOMP's bitstream needs nvCOMP at both "
                                  "ends (--memory cuda for both); fp8 and int8 cross between GPU and CPU ends")
            where = gpucodec.for_memory(codec, "cuda")  # fp8/int8: the CPU codec's bytes, so the same CRCs
            m.gpu_info = gpu.device_info()
            bodies = [gpu.load().asarray(b) for b in bodies]
        m.codec_info = {"codec": codec.name, "library": where.library, "lossless": codec.lossless,
                        "kernel": getattr(where, "kernel", "library"), "source": source.record, "bodies": len(bodies)}
        if not codec.lossless:  # what the lossy codec does to these states (computed untimed, on the CPU codec)
            m.codec_info["error"] = codecs.reconstruction_error(codec, host_bodies)
        return where, bodies, crcs

    def _codec_cycles(self, data: Channel, plan: P.Plan, m: Measurement, coded: Any, reply_codec: P.ReplyCodec,
                      clock: Callable[[], int], gap_s: float, loop_info: dict[str, str]) -> int:
        from hopbench.core import codecs

        codec, bodies, crcs = coded
        stages = codecs.CodecStages(np.zeros(plan.total, dtype=np.int64), np.zeros(plan.total, dtype=np.int64))
        m.stages["encode_ns"], m.stages["wire_bytes"] = stages.encode_ns, stages.wire_bytes
        wrapped = codecs.CodecClientChannel(data, codec, bodies, crcs, stages, clock)
        request, reply = data.alloc(plan.request_bytes), data.alloc(plan.reply_bytes)
        done = self._cycles(data, plan, reply, lambda: run_cycles(
            wrapped, request, reply, reply_codec, m.samples_ns, clock=clock, gap_s=gap_s, loop="python",
            info=loop_info))
        self._check_tail(reply, plan)
        decode = np.zeros(plan.total, dtype=np.int64)  # the server's decode times follow the last reply
        data.recv_into(decode.view(np.uint8).reshape(-1))
        m.stages["decode_ns"] = decode
        m.stages["codec_wire_ns"] = m.samples_ns - stages.encode_ns - decode
        return done

    def run_spec(self, plan: P.Plan, info: Any, outcomes: np.ndarray, verify: Any,
                 clock: Callable[[], int] = time.perf_counter_ns, source: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """One speculative plan against the drafter (hopbench.core.spec): per-cycle rows and
        the data channel's settings. A server's abort is reported with its reason. A codec
        plan's hidden states are windows of `source`, encoded inside the hop."""
        from hopbench.core import spec as S

        send_states = None
        if plan.codec:
            from hopbench.core import codecs

            if source is None:
                raise ConfigError("a codec plan needs its hidden states (hopbench.core.hidden.Source)")
            codec = codecs.parse(plan.codec, plan.codec_group)
            by_tokens = {t: source.bodies(t * info.bytes_per_token, t, max(1, source.tokens // t))
                         for t in range(1, info.k + 2)}
            header = bytearray(codecs.FRAME_BYTES)
            codecs.steady_heap()
        data, _ = self._data_channel(plan)
        if plan.codec:
            def send_states(seq: int, tokens: int) -> None:
                bodies = by_tokens[tokens]
                codecs.send_frame(data, codec, bodies[seq % len(bodies)], seq, 0, header, clock)
        try:
            rows = S.run_target(data, info, outcomes, verify, None, P.ReplyCodec(plan.k, plan.id_bytes), clock,
                                send_states)
            self._confirmed(plan)
            return rows, dict(data.info)
        except VerifyError as exc:
            raise PeerError(f"the drafter broke the plan: {exc}") from None
        finally:
            if data is not self.control:
                data.close()

    @property
    def _share_cpu(self) -> bool:
        """The server may run on this client's CPUs: a busy loop then yields now and then."""
        return native.may_share_cpu(self.client_env, self.server_env)

    def _data_channel(self, plan: P.Plan) -> tuple[Channel, dict[str, Any]]:
        """PLAN, ACCEPT, and the plan's data channel (the control connection itself for a
        transport that runs on it), proven in a bound session; the server's channel info."""
        transport = get_transport(plan.transport)
        P.send_msg(self.control, P.PLAN, plan.to_wire(), self.bind)
        with control.patience(self.control, self.timeout_s + P.GROUP_WAIT_S if plan.group else self.timeout_s):
            _, accept = P.recv_msg(self.control, P.ACCEPT, bind=self.bind)
        self._check_accept(accept, plan)
        plan_no, self.plans = self.plans, self.plans + 1  # the server numbers every accepted plan alike
        if transport.reuses_control:
            return self.control, accept["transport_info"]
        opts = TransportOptions(timeout_s=self.timeout_s, connect_timeout_s=self.connect_timeout_s,
                                poll=self.poll, settings=self.transport_settings.get(plan.transport, {}),
                                share_cpu=self._share_cpu)
        data = transport.connect(self.host, int(accept["data_port"]), opts)
        if self.bind is not None:  # the server proves itself first, then this client
            try:
                got = bytearray(32)
                data.recv_into(got)
                if not hmac.compare_digest(bytes(got), self.bind.data_proof("server", plan_no)):
                    raise P.SessionMismatch(f"the data channel at {self.host}:{accept['data_port']} failed the "
                                            "session's proof: not the server that authenticated (a relay between "
                                            "the ends)")
                data.send(bytearray(self.bind.data_proof("client", plan_no)))
            except BaseException:
                data.close()
                raise
        return data, accept["transport_info"]

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
            raise P.SessionMismatch(f"the server confirms {done['cycles']} cycles where {plan.total} were answered: "
                                    "another peer answered them")

    def _check_accept(self, accept: dict[str, Any], plan: P.Plan) -> None:
        try:
            P.validate(accept, "ACCEPT")
            if get_transport(plan.transport).reuses_control != (accept["data_port"] is None):
                raise ProtocolError("ACCEPT: 'data_port' must be null for a transport that runs on the control "
                                    "connection and a port for any other")
        except ProtocolError as exc:
            raise ProtocolError(f"the server at {self.host}:{self.port} broke the protocol: {exc}") from None

    @staticmethod
    def _check_tail(reply: Any, plan: P.Plan) -> None:
        """The bytes of a reply after the K ids are zero (docs/PROTOCOL.md); checked on
        the last reply, after the loop, so it costs nothing per cycle."""
        tail = np.frombuffer(memoryview(reply).cast("B"), dtype=np.uint8)[plan.k * plan.id_bytes:]
        if tail.size and tail.any():
            raise ProtocolError(f"the server's reply carries non-zero bytes after the {plan.k} ids "
                                f"(first at offset {plan.k * plan.id_bytes + int(np.argmax(tail != 0))})")

    def _cycles(self, data: Channel, plan: P.Plan, reply_host: Any, loop: Callable[[], int]) -> int:
        """Run the timed loop; turn a server's abort on the data stream into its reason,
        and abort the plan towards the server when this end stops it (a wrong reply,
        Ctrl-C), so the server logs why and serves on."""
        try:
            return loop()
        except VerifyError as exc:
            if P.is_abort(reply_host):
                done = getattr(exc, "completed_cycles", 0)
                try:
                    reason = P.read_abort(data, reply_host)
                except HopbenchError as inner:
                    reason = f"(unreadable abort frame: {inner})"
                err = PeerError(f"the server aborted the plan after {done} round trips: {reason}")
                err.completed_cycles = done  # type: ignore[attr-defined]
                raise err from None
            self._abort(data, plan, str(exc))
            raise
        except KeyboardInterrupt:
            self._abort(data, plan, "client interrupted")
            raise

    @staticmethod
    def _abort(data: Channel, plan: P.Plan, reason: str) -> None:
        try:
            P.send_abort(data, reason, plan.request_frame_bytes)
        except Exception:  # best effort: the peer may be gone
            pass

    def _gpu_buffers(self, plan: P.Plan, m: Measurement) -> Any:
        """Device + pinned buffers for a plan whose client end is in CUDA memory."""
        if not plan.uses_gpu:
            return None
        from hopbench.core import gpu

        transport = get_transport(plan.transport)
        gpu.check_choice((plan.client_memory, plan.server_memory), plan.gpu_path, transport,
                         self.transport_settings.get(plan.transport, {}))
        if plan.client_memory != "cuda":
            return None
        m.gpu_info = gpu.device_info()
        request = gpu.Staging(plan.request_bytes)
        reply = gpu.Staging(plan.reply_bytes, request.stream)
        request.fill_random(0)
        return request, reply

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
        if not getattr(self, "_bye_sent", False):
            try:
                P.send_msg(self.control, P.BYE, None, self.bind)
            except Exception:
                pass
        self.control.close()
