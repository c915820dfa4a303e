"""Test support for anyone adding a transport or changing the core (trio's testing/ and
httpx's MockTransport spirit): the transport conformance suite, fake channels and a fake
clock. `hopbench.testing.conformance.CHECKS` runs against any registered transport:

    from hopbench.testing import conformance
    for check in conformance.CHECKS:
        check("mytransport")
"""

from hopbench.testing.fakes import FakeClock, fake_pair

__all__ = ["FakeClock", "fake_pair"]
