"""The build maps the repository's top level into one installed package, `hopbench`:
hopbench/ -> hopbench, transports/ -> hopbench.transports, configs/ -> hopbench.configs
(TOML files as package data). Packages are discovered, never listed by hand; `make
wheel-check` installs the wheel outside the checkout and imports every module.

The compiled timed loop (hopbench/core/_native.c) is optional: where it cannot be built
(no C compiler or Python headers) the install still succeeds and hopbench uses its Python
loop, saying so (`hopbench transports`, report.json `loop`). It needs no UCX headers or
libraries to build: the ucp functions are resolved at run time from the libucp ucxx loads."""

from setuptools import Extension, find_namespace_packages, find_packages, setup

MAPPED = {"hopbench.transports": "transports", "hopbench.configs": "configs"}
packages = find_packages(include=["hopbench", "hopbench.*"])
for name, folder in MAPPED.items():  # configs/rungs holds TOML only: a namespace package of data
    packages += [name] + [f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]

setup(packages=packages,
      package_dir=MAPPED,
      package_data={"hopbench": ["py.typed", "_native.pyi"], "hopbench.configs": ["*.toml"],
                    "hopbench.configs.rungs": ["*.toml"]},
      ext_modules=[Extension("hopbench._native", sources=["hopbench/core/_native.c"], optional=True,
                             extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE"], libraries=["dl"])])
