"""Fakes: an in-memory channel pair (hopbench.testing.fake_transport) and a clock that advances by a fixed
step per read, so a loop's clock reads can be counted and its samples predicted."""

from __future__ import annotations

from hopbench.testing.fake_transport import PAIR_TIMEOUT_S, FakeChannel, pair


def fake_pair(timeout_s: float = PAIR_TIMEOUT_S) -> tuple[FakeChannel, FakeChannel]:
    """Two connected in-memory channels (message-framed, like zmq and ucx)."""
    return pair(timeout_s)


class FakeClock:
    """Returns 0, step, 2*step, ... (ns); `reads` counts the calls."""

    def __init__(self, step: int):
        self.step = step
        self.reads = 0

    def __call__(self) -> int:
        value = self.reads * self.step
        self.reads += 1
        return value
