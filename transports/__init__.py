"""One module per transport, installed as hopbench.transports. Each imports only the
contract, records and errors from hopbench. The core finds them through the entry points
of the group `hopbench.transports` (pyproject.toml), which name the light records below:
what each transport is called, what it is, where it lives, which extra installs its
libraries and which --opt keys it takes (described: the CLI's help is built from them),
known without importing the library. A new transport is its module and its record here
(and its entry point in pyproject.toml): docs/ARCHITECTURE.md "Adding a transport"."""

from hopbench.core.transport import Option, Registered

TCP = Registered("tcp", "hopbench.transports.tcp:TcpTransport", None, None, carries_control=True,
                 summary="stdlib sockets, TCP_NODELAY")
ZMQ = Registered("zmq", "hopbench.transports.zmq:ZmqTransport", "zmq", "pyzmq", summary="ZeroMQ PAIR, pyzmq",
                 options=(Option("copy_threshold", "int", "bytes below which pyzmq copies a frame", "copy_threshold=65536"),
                          Option("sndhwm", "int", "send high-water mark, messages"),
                          Option("rcvhwm", "int", "receive high-water mark, messages"),
                          Option("io_threads", "int", "the context's I/O threads")))
UCX = Registered("ucx", "hopbench.transports.ucx:UcxTransport", "ucx", "ucxx-cu12", settings_prefix="UCX_",
                 summary="UCX through ucxx: RoCE, InfiniBand, TCP, shared memory", libraries=("libucx-cu12",),
                 options=(Option("UCX_*", "str", "any UCX environment variable", "UCX_TLS=tcp"),))
# NIXL's wheel declares torch, which its agent API does not need: the install line says --no-deps
NIXL = Registered("nixl", "hopbench.transports.nixl:NixlTransport", None, "nixl-cu12", settings_prefix="NIXL_",
                  install="pip install --no-deps 'nixl-cu12>=1.5'", summary="NIXL one-sided WRITEs with notifications",
                  options=(Option("NIXL_*", "str", "NIXL_UCX_* for its UCX backend", "NIXL_UCX_TLS=tcp"),))
MOONCAKE = Registered("mooncake", "hopbench.transports.mooncake:MooncakeTransport", "mooncake",
                      "mooncake-transfer-engine-non-cuda", settings_prefix="MOONCAKE_",
                      # its engine links libibverbs even over TCP: Debian's libibverbs1 first
                      install="apt-get install libibverbs1 && pip install 'hopbench[mooncake]'",
                      summary="Mooncake Transfer Engine one-sided WRITEs with notifications (TCP; RDMA)",
                      options=(Option("MOONCAKE_*", "str", "MOONCAKE_protocol (tcp|rdma), MOONCAKE_device, MOONCAKE_ring_mib, "
                                      "MOONCAKE_progress_delay_us", "MOONCAKE_protocol=tcp"),))
