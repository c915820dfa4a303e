"""What the measuring core takes from the rooms beside it, declared here as Protocols: the
core never imports the models wing (hopbench.models) or the workload (hopbench.workload);
the orchestration builds their objects and hands them in, and mypy holds both sides to
these signatures (vLLM's proposer takes typed, shaped tensors the same way; SGLang's
BaseSpecWorker declares its draft worker's methods).

- a streamed plan's **Schedule**: each aux tap's ready time and the forward's end, ns from
  the forward's start (hopbench.workload.stream.Schedule), or its **Producer**: a real
  forward whose taps land as they are computed (hopbench.models.target.TargetForward);
- a codec plan's **HiddenSource**: the hidden states its request bodies are windows of
  (hopbench.workload.hidden.Source);
- the server's **DraftModel**: run the waiting sessions' rows as one forward and give the
  K ids and the forward's ns; start a streamed cycle's work on the taps as they land
  (hopbench.models.drafter.Model)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


class Schedule(Protocol):
    """One streamed cycle's timeline, ns from the forward's start."""

    @property
    def ready_ns(self) -> tuple[int, ...]: ...  # each chunk's (aux tap's) ready time

    @property
    def end_ns(self) -> int: ...  # when the accept count goes: the forward's end (plus any extraction cost)


@runtime_checkable
class Producer(Protocol):
    """A streamed cycle's real producer (hopbench.models.target.TargetForward): the verify
    forward runs on the client's device and each aux tap's rows land in host memory as they
    are computed. `start` begins a cycle's forward; `tap(j)` waits until tap j's rows have
    landed and returns them (writable bytes, the chunk); `end` waits for the forward's end;
    `times` gives the last cycle's device times, ns from the forward's start: each tap ready,
    each copy landed (empty where a graph hides them), the forward's end."""

    @property
    def chunk_bytes(self) -> int: ...  # the bytes each tap(j) returns

    def start(self) -> None: ...

    def tap(self, j: int) -> Any: ...

    def end(self) -> None: ...

    def times(self) -> tuple[list[int], list[int], int]: ...


class HiddenSource(Protocol):
    """Hidden states of [tokens, layers, width] BF16 values, as bits."""

    @property
    def bits(self) -> np.ndarray: ...  # uint16 [tokens, layers x width]

    @property
    def layers(self) -> int: ...

    @property
    def width(self) -> int: ...

    @property
    def label(self) -> str: ...  # "synthetic (seed 0)" or the file's name

    @property
    def record(self) -> dict[str, Any]: ...  # what the results keep about it

    @property
    def tokens(self) -> int: ...

    def bodies(self, body_bytes: int, tokens: int | None, count: int) -> list[np.ndarray]: ...


class DraftShape(Protocol):
    """A drafter's dimensions, as far as the server checks a plan against them."""

    @property
    def name(self) -> str: ...

    @property
    def hidden_size(self) -> int: ...

    @property
    def fc_in_features(self) -> int: ...  # one row: the aux taps x hidden

    @property
    def vocab_size(self) -> int: ...

    @property
    def needs_tokens(self) -> bool: ...  # conditioned on the bonus token too: no early "all"

    @property
    def block_size(self) -> int: ...  # block drafting: an anchor and up to block_size - 1 drafts a pass

    @property
    def row_bytes(self) -> int: ...

    @property
    def taps(self) -> int: ...


class StreamedWork(Protocol):
    """One streamed cycle's drafter work: `chunk` as tap j's rows land, `end` once the last is
    in, `answer` after the accept count (the K ids and the ns the cycle waited for them)."""

    early_ns: int  # the early work from the last tap's arrival on (its own device time)

    def chunk(self, j: int, body: Any) -> None: ...

    def end(self) -> None: ...

    def answer(self, accepted: int) -> tuple[np.ndarray, int]: ...


class DraftModel(Protocol):
    """The server's drafter model (`hopbench serve --drafter`)."""

    @property
    def shape(self) -> DraftShape: ...

    def info(self) -> dict[str, Any]: ...  # the HELLO's env.drafter (records.DrafterInfo)

    def refusal(self, k: int) -> str | None: ...  # why it cannot draft K ids a pass (a block too short)

    #: ids [batch, k], the forward's ns, and the ns staging its input and bringing the ids back
    def run_bodies(self, bodies: list[Any], rows: int, k: int) -> tuple[Any, int, int, int]: ...

    #: host buffers a batch's bodies may be received into, so that run_bodies copies none ([]: none)
    def slots(self, rows: int, k: int) -> list[Any]: ...

    def streamed(self, rows: int, k: int, early: str) -> StreamedWork: ...
