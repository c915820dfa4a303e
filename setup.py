"""The compiled timed loop (hopbench/core/_native.c) is optional: where it cannot be built
(no C compiler or Python headers) the install still succeeds and hopbench uses its Python
loop, saying so (`hopbench transports`, report.json `loop`). It needs no UCX headers or
libraries to build: the ucp functions are resolved at run time from the libucp ucxx loads."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("hopbench._native", sources=["hopbench/core/_native.c"], optional=True,
                             extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE"], libraries=["dl"])])
