"""The build maps the repository's top level into one installed package, `hopbench`:
hopbench/ -> hopbench, transports/ -> hopbench.transports, configs/ -> hopbench.configs
(TOML files as package data). Packages are discovered, never listed by hand; `make
wheel-check` installs the wheel outside the checkout and imports every module.

The compiled loops are optional: where they cannot be built (no C compiler or Python
headers) the install still succeeds and hopbench uses its Python loop, saying so
(`hopbench transports`, report.json `loop`). Five extensions: four share one ABI
(hopbench/core/hb_endpoint.h): the core's loops (hopbench/core/_native.c) and each
transport's bytes (transports/_tcp.c, transports/_ucx.c, transports/_nixl.c); the fifth is the lossy codecs'
per-value loops (hopbench/core/_codec.c). None needs UCX or NIXL headers or libraries to
build: the ucp functions are resolved at run time from the libucp ucxx loads, NIXL's C API
from the libnixl_capi.so of the nixl-cu12 wheel."""

from setuptools import Extension, find_namespace_packages, find_packages, setup

ABI_HEADER = "hopbench/core/hb_endpoint.h"
HEADERS = {"hopbench.transports._nixl": ["transports/_nixl_capi.h", "transports/_nixl_ep.h"]}  # one translation unit each
NATIVE = {"hopbench._native": "hopbench/core/_native.c", "hopbench.transports._tcp": "transports/_tcp.c",
          "hopbench.transports._ucx": "transports/_ucx.c",
          "hopbench.transports._nixl": "transports/_nixl.c", "hopbench._codec": "hopbench/core/_codec.c"}
MAPPED = {"hopbench.transports": "transports", "hopbench.configs": "configs"}
packages = find_packages(include=["hopbench", "hopbench.*"])
for name, folder in MAPPED.items():  # configs/rungs holds TOML only: a namespace package of data
    packages += [name] + [f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]

setup(packages=packages,
      package_dir=MAPPED,
      package_data={"hopbench": ["py.typed", "_native.pyi", "_codec.pyi"], "hopbench.models": ["proxy_prompts.txt"], "hopbench.transports": ["*.pyi"], "hopbench.configs": ["*.toml"],
                    "hopbench.configs.rungs": ["*.toml"]},
      ext_modules=[Extension(name, sources=[source], depends=[ABI_HEADER, *HEADERS.get(name, [])], include_dirs=["hopbench/core"],
                             optional=True, extra_compile_args=["-O3" if name == "hopbench._codec" else "-O2", "-std=c11", "-D_GNU_SOURCE"], libraries=["dl"])
                   for name, source in NATIVE.items()])
