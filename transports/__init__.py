"""One module per transport, installed as hopbench.transports. Each imports only the
contract, records and errors from hopbench. The core finds them through the entry points
of the group `hopbench.transports` (pyproject.toml), which name the light records below:
what each transport is called, where it lives, which extra installs its library and which
--opt keys it owns, known without importing the library."""

from hopbench.core.transport import Registered

TCP = Registered("tcp", "hopbench.transports.tcp:TcpTransport", None, None, carries_control=True)
ZMQ = Registered("zmq", "hopbench.transports.zmq:ZmqTransport", "zmq", "pyzmq",
                 settings=frozenset({"copy_threshold", "sndhwm", "rcvhwm", "io_threads"}))
UCX = Registered("ucx", "hopbench.transports.ucx:UcxTransport", "ucx", "ucxx-cu12", settings_prefix="UCX_")
# NIXL's wheel declares torch, which its agent API does not need: the install line says --no-deps
NIXL = Registered("nixl", "hopbench.transports.nixl:NixlTransport", None, "nixl-cu12", settings_prefix="NIXL_",
                  install="pip install --no-deps 'nixl-cu12>=1.5'")
