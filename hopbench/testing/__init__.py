"""Test support for anyone adding a transport or changing the core (trio's testing/ and
httpx's MockTransport spirit): the transport conformance suite, fake channels and a fake
clock. `hopbench.testing.conformance.CHECKS` runs against any registered transport, each
check taking a `Maker` (the transport and a way to make a connected pair); the loop checks
(`LOOP_CHECKS`) take a Maker, a poll mode and a loop:

    from hopbench.testing import conformance
    maker = conformance.maker_for("mytransport")
    for check in conformance.CHECKS:
        check(maker)
    for check in conformance.LOOP_CHECKS:
        check(maker, "auto", "python")
"""

from typing import TYPE_CHECKING

from hopbench.testing.fakes import FakeClock, fake_pair

if TYPE_CHECKING:
    from hopbench.core.transport import Transport

__all__ = ["FakeClock", "fake_pair", "register_fake", "transport_or_skip"]


def transport_or_skip(name: str) -> "Transport":
    """The transport, or the test skipped with its install line (pytest's skip) where its
    library is absent."""
    import pytest

    from hopbench.core.transport import get_transport
    from hopbench.errors import TransportUnavailable

    try:
        return get_transport(name)
    except TransportUnavailable as exc:
        pytest.skip(str(exc))


def register_fake() -> str:
    """Register the in-memory test transport `fake` in this process (it is never in the
    product registry: `hopbench serve` and `hopbench transports` do not know it)."""
    from hopbench.core.transport import Registered, register
    register(Registered("fake", "hopbench.testing.fake_transport:FakeTransport", None, None))
    return "fake"
