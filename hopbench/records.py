"""Typed, frozen records shared by every room, and the defaults, each defined once.

- RunConfig: what was asked of one measurement session. `hopbench run`, every sweep cell
  (through the agent) and the benchmarks build the same record; report.json's `config`
  block is `RunConfig.to_dict()`, one shape everywhere (docs/RESULTS.md).
- Payload: one payload of a session (label, tokens, sizes).
- Series, Place, CellKey: the typed identity of what was measured (which transport, codec,
  payload design, stream and number of targets; on which rung, placement and think time),
  built once where a cell is planned or read and carried; the labels ("tcp+fp8@4",
  "emu-1g@split +80 ms gap") are spelled from them for display and never parsed back.

Schema history: hopbench.results (SCHEMA_VERSION). `RunConfig.from_dict` reads the
config blocks of every older version (tests/golden)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

# ---- defaults, defined once ------------------------------------------------------------
TIMEOUT_S = 10.0  # any blocking call
CONNECT_TIMEOUT_S = 5.0
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # the server's default cap per request and reply
MIN_GAIN = 0.05  # the least projected tok/s gain worth a second box: below it a verdict is 'not worth it'
MAX_CYCLES = 1_000_000  # the server's default cap per plan (untimed + warm-up + timed)
#: values per scale of a lossy codec where a record or config predates the field (the
#: study's hidden size; configs/shape.toml's `hidden` is what runs use)
HIDDEN_DEFAULT = 6144
MSS, WIRE_FRAME = 1448, 1538  # TCP payload and Ethernet wire bytes per full frame at MTU 1500
MEMORIES = ("host", "cuda")  # where a payload may live (hopbench.core.gpu checks it)


def gap_label(rung: str, gap_ms: float) -> str:
    """A rung as verdict, fit and the report name it: with its think time when it has one
    (the gap is part of the cell: a hop after 80 ms of idle is another measurement)."""
    return rung if not gap_ms else f"{rung} +{gap_ms:g} ms gap"


@dataclass(frozen=True)
class Payload:
    label: str  # "T3" or "B65536"; a codec's payload "T3+fp8" (codec_label)
    tokens: int | None
    request_bytes: int
    reply_bytes: int
    codec: str = "none"  # the payload crosses encoded (docs/CODECS.md)
    stream: bool = False  # the payload crosses streamed during the forward (docs/STREAM.md)
    #: the payload design (docs/STREAM.md "The projected payload"): "taps" (the aux layers'
    #: hidden states, 5 x hidden per position) or "projected" (the drafter's fc run on the
    #: target: one hidden-wide row per position)
    design: str = "taps"
    drafter: bool = False  # the rows run the server's drafter model (docs/DRAFTER.md)
    #: streamed from a real producer (`--stream layers,target=gpu`: the target's forward on the client's
    #: device, docs/STREAM.md "A real producer"), not from the forward's clock
    produced: bool = False


def codec_label(name: str, codec: str) -> str:
    """A transport or payload as analysis names it under a codec: "tcp" -> "tcp+fp8" (its own
    series: its own fit, verdict and table row); unchanged for "none"."""
    return name if not codec or codec == "none" else f"{name}+{codec}"


TAPS, PROJECTED = "taps", "projected"  # the payload designs (Payload.design)
DESIGNS = (TAPS, PROJECTED)
ARRIVALS = ("fixed", "poisson")  # open loop's schedules (--mps RATE[:poisson])


def design_label(name: str, design: str | None) -> str:
    """A series or payload of the projected design: "tcp" -> "tcp#projected" (its own series:
    its own fit, verdict and row); unchanged for the taps."""
    return name if not design or design == "taps" else f"{name}#{design}"


def stream_label(name: str, stream: str | None) -> str:
    """A series streamed during the verify forward: "tcp" -> "tcp~layers" (its own series:
    the exposed hop, its own verdict; no fit over one payload); unchanged when not streamed."""
    return f"{name}~{stream}" if stream else name


def draft_label(name: str, drafter: str | None) -> str:
    """A series or payload served by the server's drafter model: "tcp" -> "tcp!draft", streamed
    with an early start "tcp~layers!draft:fc" (its own series: the hop with the drafter's
    forward in it); unchanged without one."""
    if not drafter or drafter == "off":
        return name
    return f"{name}!draft" if drafter == "model" else f"{name}!draft:{drafter}"


def clients_label(name: str, clients: int) -> str:
    """A series or payload measured by M targets at once: "tcp" -> "tcp@4" (its own series:
    the per-target hop at M, its own fit and verdict); unchanged for one target."""
    return name if clients <= 1 else f"{name}@{clients}"


def _spelled(value: float) -> str:
    """The shortest text that reads back as the same float."""
    return f"{value:g}" if float(f"{value:g}") == value else repr(value)


@dataclass(frozen=True)
class RunConfig:
    """One session's configuration (report.json `config`)."""

    transport: str
    k: int
    id_bytes: int
    cycles: int
    warmup: int
    verify: bool = False
    gap_ms: float = 0.0
    duration_s: float | None = None  # timed seconds per payload (iperf3's -t) instead of `cycles`
    poll: str = "auto"
    timeout_s: float = TIMEOUT_S
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    loop: str = "auto"  # the timed loop: auto (compiled where it applies), native, python
    client_memory: str = "host"
    server_memory: str = "host"
    gpu_path: str = "staged"
    transport_settings: dict[str, dict[str, str]] = field(default_factory=dict)  # per transport
    # what the user said about the link and the shape (recorded; analysis reads them)
    rate_mbit: float | None = None
    rung: str | None = None
    bytes_per_token: int | None = None
    tokens: tuple[int, ...] = ()
    bytes: tuple[int, ...] = ()
    reply_bytes: str | None = None  # the --reply-bytes the user gave (None = K ids)
    cpu: str | None = None
    shape_file: str | None = None
    # payload codecs (docs/CODECS.md): the codecs measured (each payload under each, "none"
    # = the raw bytes), the hidden states they encode (None = synthetic), the values per scale
    codecs: tuple[str, ...] = ("none",)
    payload_from: str | None = None
    hidden: int = HIDDEN_DEFAULT
    taps: tuple[int, ...] = ()  # the aux layers a token's states come from (the shape's): their count is read here
    # a drafter shared by several targets (docs/RESULTS.md "Several targets"): the targets run
    # at once (one session each, their plans started together), and open-loop load: each target
    # sends `mps` cycles per second on a fixed or poisson schedule (None = closed loop)
    clients: int = 1
    mps: float | None = None
    arrivals: str = "fixed"
    seed: int = 0
    #: the streamed hop (docs/STREAM.md); None when not streamed
    stream: StreamSpec | None = None
    design: str = "taps"  # the payload design (DESIGNS): taps, or projected (fc on the target); --payload
    #: the rows run the server's drafter model (docs/DRAFTER.md; the server's --drafter) and,
    #: streamed, what of its forward starts on the taps that have landed (off, fc, all)
    drafter: bool = False
    early: str = "off"

    @property
    def memory(self) -> tuple[str, str]:
        return self.client_memory, self.server_memory

    def settings_for(self, transport: str | None = None) -> dict[str, str]:
        return dict(self.transport_settings.get(transport or self.transport, {}))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"], d["bytes"], d["codecs"] = list(self.tokens), list(self.bytes), list(self.codecs)
        d["stream"] = self.stream.to_dict() if self.stream is not None else None
        return d

    def to_argv(self, peer: str) -> list[str]:
        """The `hopbench run` command that records this same config (the report's reproduce
        line; tests/test_report.py parses it back through the CLI and compares the configs):
        every recorded choice a flag sets, none left to a hand copy of the CLI."""
        a = ["hopbench", "run", "--peer", peer, "--transport", self.transport, "--k", str(self.k),
             "--cycles", str(self.cycles), "--warmup", str(self.warmup)]

        def opt(flag: str, value: Any, default: Any = None) -> None:
            if value is not None and value != default:
                a.extend([flag, value if isinstance(value, str) else _spelled(value) if isinstance(value, float)
                          else str(value)])

        opt("--tokens", ",".join(map(str, self.tokens)) or None)
        opt("--bytes", ",".join(map(str, self.bytes)) or None)
        opt("--time", self.duration_s)
        opt("--gap-ms", float(self.gap_ms), 0.0)
        opt("--poll", self.poll, "auto")
        opt("--timeout", float(self.timeout_s), float(TIMEOUT_S))
        opt("--loop", self.loop, "auto")
        opt("--reply-bytes", self.reply_bytes)
        if self.rung is not None or self.rate_mbit is not None:  # --link's one spec
            a.extend(["--link", (self.rung or "") + ("" if self.rate_mbit is None
                                                     else f",rate={_spelled(float(self.rate_mbit))}")])
        opt("--cpu", self.cpu)
        if self.verify:
            a.append("--verify")
        for settings in self.transport_settings.values():
            for key, value in (settings or {}).items():
                a.extend(["--opt", f"{key}={value}"])
        memory = self.client_memory + (f":{self.server_memory}" if self.server_memory != self.client_memory else "")
        opt("--memory", memory + (f",{self.gpu_path}" if self.gpu_path != "staged" else ""), "host")
        opt("--codec", ",".join(self.codecs), "none")
        opt("--clients", self.clients, 1)
        opt("--mps", None if self.mps is None else _spelled(float(self.mps))
            + (f":{self.arrivals}" if self.arrivals != "fixed" else ""))
        opt("--payload", self.design + (f",from={self.payload_from}" if self.payload_from else ""), TAPS)
        if self.stream:  # --stream's one spec (hopbench.workload.stream.parse_args reads it back)
            a.extend(["--stream", self.stream.spelled(self.early if self.drafter else "off")])
        if self.drafter:
            a.append("--remote-drafter")
        return a

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """Any recorded config block (schema 1's run and sweep-cell shapes included);
        unknown keys are ignored, missing ones take the defaults."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "design" not in d and isinstance(d.get("payload"), str):  # recorded as `payload` before the rename
            kw["design"] = d["payload"]
        kw.setdefault("transport", d.get("transport", "tcp"))
        kw.setdefault("k", 2)
        kw.setdefault("id_bytes", 4)
        kw.setdefault("cycles", 0)
        kw.setdefault("warmup", 0)
        for key in ("tokens", "bytes", "taps"):
            kw[key] = tuple(kw.get(key) or ())
        kw["codecs"] = tuple(kw.get("codecs") or ("none",))
        if isinstance(kw.get("stream"), dict):
            kw["stream"] = StreamSpec.from_dict(kw["stream"])
        return cls(**kw)


@dataclass(frozen=True)
class StreamSpec:
    """A streamed run's configuration as recorded (docs/STREAM.md): each aux layer's K + 1
    rows as one of `chunks` chunks of `chunk_bytes`, sent at its layer's end (`ready_ms`)
    within a `forward_ms` forward of `layers` layers (+ `cost_ms` of extraction)."""

    chunks: int
    chunk_bytes: int
    taps: tuple[int, ...]
    layers: int
    forward_ms: float
    cost_ms: float = 0.0
    layer_times: str | None = None
    ready_ms: tuple[float, ...] = ()
    mode: str = "layers"
    #: what streaming costs in bytes (accepted_per_cycle, accepted_only, streamed)
    bytes_per_accepted_token: dict[str, float] | None = None
    #: who produces the chunks: "clock" (the schedule above), or a real producer, "gpu" (or
    #: "gpu:full", "gpu:eager"; "cpu": its stand-in), whose measured forward, taps and
    #: extraction cost then set forward_ms, ready_ms and cost_ms (`producer`: what it measured)
    target: str = "clock"
    producer: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["taps"], d["ready_ms"] = list(self.taps), list(self.ready_ms)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StreamSpec":
        return cls(int(d["chunks"]), int(d["chunk_bytes"]), tuple(d.get("taps") or ()), int(d.get("layers") or 0),
                   float(d["forward_ms"]), float(d.get("cost_ms") or 0.0), d.get("layer_times"),
                   tuple(float(r) for r in d.get("ready_ms") or ()), str(d.get("mode") or "layers"),
                   d.get("bytes_per_accepted_token"), str(d.get("target") or "clock"), d.get("producer"))

    def spelled(self, early: str = "off") -> str:
        """This stream as `--stream` spells it (the reproduce line): its forward as asked where a
        real producer measured the cost and the layer times; `early`: the drafter's."""
        produced = self.target != "clock" and self.producer is not None
        forward = float((self.producer or {}).get("forward_ms_asked", self.forward_ms)) if produced else self.forward_ms
        return (f"layers:{self.layers},forward={_spelled(forward)}"
                + (f",cost={_spelled(float(self.cost_ms))}" if self.cost_ms and not produced else "")
                + (f",times={self.layer_times}" if self.layer_times else "")
                + (f",target={self.target}" if self.target != "clock" else "")
                + (f",early={early}" if early != "off" else ""))


@dataclass(frozen=True, order=True)
class Series:
    """What crossed the hop, typed: a transport, the codec the payload crossed under, the payload
    design, whether it was streamed during the verify forward, and how many targets ran at once.
    Each differs from the others in what it measures, so each is its own series (its own fit,
    verdict and table row); `label` spells it for display ("tcp+fp8@4")."""

    transport: str
    codec: str = "none"
    design: str = "taps"  # DESIGNS
    stream: str = "off"  # "layers": streamed during the verify forward (docs/STREAM.md)
    clients: int = 1
    #: "off", or the server's drafter model ran in the hop: "model", or streamed with its
    #: early start ("fc", "all"; docs/DRAFTER.md)
    drafter: str = "off"

    def spell(self, name: str) -> str:
        """`name` (a transport or a payload label) with this series' marks: "+codec",
        "#projected", "~layers", "!draft" (or "!draft:fc"), "@M"."""
        marked = stream_label(design_label(codec_label(name, self.codec), self.design),
                              None if self.stream == "off" else self.stream)
        return clients_label(draft_label(marked, self.drafter), self.clients)

    @property
    def label(self) -> str:
        return self.spell(self.transport)

    @property
    def streamed(self) -> bool:
        return self.stream != "off"

    @property
    def raw(self) -> "Series":
        """The same series without its codec (what a codec is judged against)."""
        return replace(self, codec="none")

    @property
    def alone(self) -> "Series":
        """The same series with one target (what several targets are judged against)."""
        return replace(self, clients=1)

    @classmethod
    def of(cls, s: "Series | str") -> "Series":
        """A Series as given, or a bare transport name's."""
        return s if isinstance(s, Series) else cls(s)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Series":
        return cls(str(d["transport"]), str(d.get("codec") or "none"), str(d.get("design") or "taps"),
                   str(d.get("stream") or "off"), int(d.get("clients") or 1), str(d.get("drafter") or "off"))


@dataclass(frozen=True, order=True)
class Place:
    """Where a hop was measured: the rung (the link), the placement of the two ends when a
    sweep varies it, and the think time before each request (a hop after 80 ms of idle is
    another measurement)."""

    rung: str
    placement: str = ""
    gap_ms: float = 0.0

    @property
    def rung_label(self) -> str:
        """The rung as analysis groups it: one per rung x placement when placements vary."""
        return f"{self.rung}@{self.placement}" if self.placement else self.rung

    @property
    def label(self) -> str:
        """The rung as verdict, fit and the report name it, with its think time (gap_label)."""
        return gap_label(self.rung_label, self.gap_ms)

    @property
    def unhurried(self) -> "Place":
        """The same place back to back (no think time)."""
        return replace(self, gap_ms=0.0)

    @classmethod
    def of(cls, p: "Place | str") -> "Place":
        return p if isinstance(p, Place) else cls(p)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Place":
        return cls(str(d["rung"]), str(d.get("placement") or ""), float(d.get("gap_ms") or 0.0))


@dataclass(frozen=True)
class CellKey:
    """A measurement cell: a series at one payload in one place. Analysis groups repeats by
    it, a sweep plans by it (sweep.plan.Cell adds the repeat), compare pairs by it."""

    place: Place
    series: Series
    payload: str  # the payload as recorded: its base ("T3", "B65536") spelled by the series
    tokens: int | None
    request_bytes: int
    reply_bytes: int

    @property
    def rung(self) -> str:
        return self.place.rung_label

    @property
    def gap_ms(self) -> float:
        return self.place.gap_ms

    @property
    def transport(self) -> str:
        """The series' label (a codec, a design, a stream, M are each their own series)."""
        return self.series.label


@dataclass(frozen=True)
class DrafterInfo:
    """A server's drafter model as its HELLO's `env.drafter` describes it (docs/PROTOCOL.md
    "Drafter plans"; hopbench.models.drafter.describe writes it), read once into this record
    wherever it is used: the session, a run's header, a drafter folder."""

    shape: dict[str, Any]  # the config keys (name, hidden_size, fc_in_features, vocab_size, ...)
    device: str  # cuda or cpu
    dtype: str
    weights: str  # "random" or the weights' file
    weight_bytes: int  # read by one forward
    read_floor_ns: int  # one target's forward: its weights and context KV at the best read bandwidth
    read_bytes_per_s: float  # the best of the measured read bandwidths (bandwidth_methods)
    ids_meaningful: bool
    gpu: str | None = None  # the device's name; None on a CPU (and in folders written before it was sent)
    cuda_graphs: bool = False
    context: int = 0  # the context tokens each target's forward attends over (its KV cache)
    context_kv_bytes: int = 0  # what one target's context adds to a forward's reads
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # as it crossed, kept verbatim

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DrafterInfo:
        try:
            old = "read_floor_ns" not in d  # written before the context (its floor: the weights at copy speed)
            return cls(shape=dict(d["shape"]), device=str(d["device"]), dtype=str(d["dtype"]),
                       weights=str(d["weights"]), weight_bytes=int(d["weight_bytes"]),
                       read_floor_ns=int(d["weight_read_floor_ns" if old else "read_floor_ns"]),
                       read_bytes_per_s=float(d["copy_bytes_per_s" if old else "read_bytes_per_s"]),
                       ids_meaningful=bool(d["ids_meaningful"]), gpu=d.get("gpu"),
                       cuda_graphs=bool(d.get("cuda_graphs")), context=int(d.get("context") or 0),
                       context_kv_bytes=int(d.get("context_kv_bytes") or 0), raw=dict(d))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"env.drafter is not a drafter's description ({exc})") from None

    @classmethod
    def from_env(cls, env: dict[str, Any] | None) -> DrafterInfo | None:
        """The drafter of a server's environment (its HELLO's `env`, a run header's
        `server_env`), or None when it runs none."""
        d = (env or {}).get("drafter")
        return cls.from_dict(d) if d else None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw) if self.raw else {k: v for k, v in asdict(self).items() if k != "raw"}

    @property
    def name(self) -> str:
        return str(self.shape.get("name", "?"))

    @property
    def row_bytes(self) -> int:
        """One row of its input: fc_in_features BF16 values."""
        return int(self.shape["fc_in_features"]) * 2

    @property
    def where(self) -> str:
        """`NAME on DEVICE`: the GPU's name where it has one."""
        return f"{self.name} on {self.gpu or self.device}"

    def cpu_note(self) -> str | None:
        """What a forward on a CPU cannot say, or None on a GPU."""
        if self.device != "cpu":
            return None
        return (f"note: the {self.name} drafter runs on this host's CPU (no GPU): its forward's time says how the path "
                "works, not what the drafter costs on its GPU; measure there (`hopbench drafter` on the GPU host), or "
                "give verdict --t-draft-remote")

    def line(self) -> str:
        """The drafter in one line: where, what one forward reads, its floor, its ids."""
        ids = "real weights" if self.ids_meaningful else "random weights: its ids are not meaningful tokens"
        ctx = (f" and {self.context_kv_bytes / 1e9:.3f} GB of KV a target ({self.context:,}-token context)"
               if self.context else " (no context)")
        return (f"drafter {self.where} ({self.dtype}{', CUDA graphs' if self.cuda_graphs else ''}): "
                f"{self.weight_bytes / 1e9:.3f} GB of weights{ctx} read a forward, floor "
                f"{self.read_floor_ns / 1e6:.3f} ms at the best measured read bandwidth "
                f"{self.read_bytes_per_s / 1e9:.0f} GB/s; {ids}")
