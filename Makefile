# pyfastpim: two commands on a fresh Debian 12 machine -- `make run`, `make test`.
PYTHON ?= /usr/bin/python3
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBS := build-essential python3-dev python3-numpy libopenblas-dev ocl-icd-opencl-dev opencl-c-headers \
        pocl-opencl-icd clinfo python3-pytest python3-pytest-benchmark python3-hypothesis python3-torch \
        python3-torchvision python3-sklearn python3-matplotlib python3-tqdm python3-psutil python3-pyflakes librandom123-dev libdlpack-dev libsleef-dev libsimde-dev \
        pkg-config ocl-icd-libopencl1 python3-venv python3-pip python3-nbclient python3-nbconvert python3-ipykernel ngspice
SAN_LIB := $(shell gcc -print-file-name=libasan.so 2>/dev/null) $(shell gcc -print-file-name=libubsan.so 2>/dev/null)
SAN_BUILD := build/sanitize
PYTEST_ENV := OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# Benchmarks measure the defaults a user gets: no thread variables, so pyfastpim uses every CPU
# of its affinity mask and OpenBLAS (the roofline) its own default, every core as well.
# PYFASTPIM_BENCH_THREADS=n pins pyfastpim's and torch's counts to n for a comparison run.
BENCH_ENV := env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u OMP_WAIT_POLICY

# A second interpreter for `make test-venv` (pip install . into a fresh venv, numpy from PyPI,
# no torch): the newest pyenv 3.13 or 3.12 found, else python3.13 / python3.12 on PATH.
VENV_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3 $(HOME)/.pyenv/versions/3.12*/bin/python3) \
                 $(shell command -v python3.13 python3.12 2>/dev/null))
VENV := build/venv
# `make test-venv-torch` (not run by CI: torch's wheel pulls some GB of CUDA libraries): test-venv with
# torch from PyPI, so the suite also runs on a newer torch / numpy / pytest than Debian's 1.13 / 1.24 / 7.2
TORCH_VERSION ?= 2.11.0
TORCH_VENV := build/venv-torch
MLX_DIR := build/mlx-target

.PHONY: all deps build run test test-venv test-venv-torch test-mlx bench bench-peers bench-readme sanitize test-isa-emulation tsan \
        fuzz clean

all: build

# Installs only what is missing (one dpkg query, no network when nothing is).
deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

# PREBUILT=1: the extension was built elsewhere for $(PYTHON) (a machine without Debian's -dev
# packages or a network, such as a lent GPU machine: benchmarks/gpu.sh); build then only checks it.
ifneq ($(PREBUILT),1)
build: deps
	$(PYTHON) setup.py -q build_ext --inplace
else
build:
	$(PYTHON) -c "import pyfastpim._core"
endif

run: build
	$(PYTHON) -m pyfastpim demo

# The whole suite: tests/core (the numbers contract against tests/reference), tests/api (the Python
# API, packaging, robustness) and tests/backends (CPU ISAs, OpenCL, CPU/OpenCL parity), after the
# layer and function-length checks and pyflakes (Debian python3-pyflakes; it has no noqa comments).
test: build
	$(PYTHON) .ci/check_layers.py
	$(PYTHON) .ci/check_function_length.py
	$(PYTHON) -m pyflakes pyfastpim tests
	$(PYTEST_ENV) $(PYTHON) -m pytest -q tests

# The pip/venv path of the README on another Python: `pip install .` (build isolation, setuptools
# and numpy from PyPI), then the suite against the installed package, run from the checkout (whose
# unbuilt pyfastpim/ the tests' conftest keeps off sys.path). torch is not installed: its tests skip.
# MLX is installed when PyPI has a wheel for this platform ("mlx[cpu]"; its tests skip otherwise).
test-venv: deps
	@test -n "$(VENV_PYTHON)" || { echo "test-venv: no Python 3.12/3.13 found (set VENV_PYTHON=...)"; exit 1; }
	rm -rf $(VENV)
	$(VENV_PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q . pytest hypothesis
	$(VENV)/bin/python -m pip install -q "mlx[cpu]" || echo "test-venv: mlx[cpu] not installable here; MLX tests skip"
	# from outside the checkout, so that neither the tests nor their subprocesses import the
	# unbuilt source tree instead of the installed package
	cd build && $(PYTEST_ENV) $(CURDIR)/$(VENV)/bin/python -m pytest -q $(CURDIR)/tests --rootdir=$(CURDIR) -p no:cacheprovider

test-venv-torch: deps
	@test -n "$(VENV_PYTHON)" || { echo "test-venv-torch: no Python 3.12/3.13 found (set VENV_PYTHON=...)"; exit 1; }
	rm -rf $(TORCH_VENV)
	$(VENV_PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q . pytest hypothesis "torch==$(TORCH_VERSION)"
	cd build && $(PYTEST_ENV) $(CURDIR)/$(TORCH_VENV)/bin/python -m pytest -q $(CURDIR)/tests --rootdir=$(CURDIR) -p no:cacheprovider

# Real MLX arrays with the Debian interpreter (which has torch): MLX is installed with
# `pip --target` into build/ (Debian's Python is externally managed; nothing system-wide changes).
test-mlx: build
	[ -d $(MLX_DIR)/mlx ] || $(PYTHON) -m pip install -q --target $(MLX_DIR) "mlx[cpu]"
	PYTHONPATH=$(CURDIR)/$(MLX_DIR) $(PYTEST_ENV) $(PYTHON) -m pytest -q tests/api/test_mlx.py tests/api/test_dlpack.py

# Every run is kept in $(BENCH_HISTORY) (pytest-benchmark autosave, one JSON per run, gitignored);
# report.py prints this run's ratios beside the previous run's. Rounds per case: benchmarks/conftest.py.
# BENCH_ARGS passes pytest options, e.g. BENCH_ARGS="-k slicing".
BENCH_HISTORY := .benchmarks
BENCH_ARGS ?=
bench: build
	mkdir -p build
	$(BENCH_ENV) $(PYTHON) -m pytest -q benchmarks --benchmark-only --benchmark-columns=min,median,rounds \
	  --benchmark-sort=name --benchmark-json=build/bench.json \
	  --benchmark-autosave --benchmark-storage=file://$(BENCH_HISTORY) $(BENCH_ARGS)
	$(PYTHON) benchmarks/report.py build/bench.json --history $(BENCH_HISTORY)

# The model-level comparison with MemIntelli (a checkout of github.com/HUST-ISMD-Odyssey/MemIntelli
# at $(MEMINTELLI); never part of this repository): each model and implementation in its own process,
# results appended to build/peers.json. Several minutes (MemIntelli's ResNet-18 batch takes minutes).
MEMINTELLI ?= /tmp/memintelli
PEER_CASES := lenet5_mnist vgg13_bn_cifar resnet18_cifar
bench-peers: build
	mkdir -p build
	for c in $(PEER_CASES); do $(BENCH_ENV) $(PYTHON) benchmarks/memintelli_models.py pyfastpim $$c || exit 1; done
	@if [ -d "$(MEMINTELLI)/memintelli" ]; then \
	  for c in $(PEER_CASES); do $(BENCH_ENV) PYTHONPATH=$(MEMINTELLI) $(PYTHON) benchmarks/memintelli_models.py memintelli $$c || exit 1; done; \
	else echo "bench-peers: no MemIntelli checkout at $(MEMINTELLI) (MEMINTELLI=path): pyfastpim only"; fi

# README's performance section from ONE run: build/bench.json (the last `make bench`) and
# build/peers.json (`make bench-peers`); machine, ISA and date are named in the generated text.
bench-readme:
	$(PYTHON) benchmarks/report.py build/bench.json --readme README.md --peers build/peers.json

# Sanitized build goes to its own tree so the regular in-place build is untouched.
SAN_ENV := LD_PRELOAD="$(SAN_LIB)" PYFASTPIM_SANITIZED=1 \
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:handle_segv=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# After the suite, the fuzz harness's $(FUZZ_CASES) cases (`make fuzz`) on the same build: run from its
# lib/ with pyfastpim imported first, so that tests/fuzz.py's checkout path does not shadow it. ASan
# warns on every huge allocation it refuses (the MemoryError cases): stderr is printed without those.
SAN_FUZZ = $(PYTHON) -c "import runpy, sys, pyfastpim; sys.argv = ['fuzz.py', '--cases', '$(FUZZ_CASES)']; \
  runpy.run_path('$(CURDIR)/tests/fuzz.py', run_name='__main__')" 2> fuzz.stderr; \
  rc=$$?; grep -v 'AddressSanitizer failed to allocate' fuzz.stderr; exit $$rc
sanitize: deps
	rm -rf $(SAN_BUILD)
	PYFASTPIM_SANITIZE=1 $(PYTHON) setup.py -q build --build-base $(SAN_BUILD) --build-lib $(SAN_BUILD)/lib
	cd $(SAN_BUILD)/lib && $(PYTEST_ENV) $(SAN_ENV) $(PYTHON) -m pytest -q -x $(CURDIR)/tests -p no:cacheprovider \
	  --rootdir=$(CURDIR)
	cd $(SAN_BUILD)/lib && $(PYTEST_ENV) $(SAN_ENV) $(SAN_FUZZ)

# The AVX-512, AVX-512 VNNI and AVX-VNNI kernel instances on a CPU that has only AVX2: a build in its
# own tree whose instances for those ISAs are compiled against SIMDe (csrc/cpu/isa_emulation.h: each
# 512-bit or VNNI intrinsic as AVX2 ones) and which reads every tier as present, under ASan/UBSan as
# in `make sanitize`, then the suites that run each kernel on every tier and the fuzz harness. It
# checks their loop nests, short instances and epilogues bit for bit against the reference, and
# their loads and stores against the buffers' bounds; not their instruction selection or speed. On
# a CPU that has those extensions, `make test` and `make sanitize` run the real instances.
ISA_EMU_BUILD := build/sanitize-isa-emulation
ISA_EMU_TESTS := tests/core tests/backends tests/api/test_array.py
test-isa-emulation: deps
	rm -rf $(ISA_EMU_BUILD)
	PYFASTPIM_SANITIZE=1 PYFASTPIM_ISA_EMULATION=1 $(PYTHON) setup.py -q build --build-base $(ISA_EMU_BUILD) \
	  --build-lib $(ISA_EMU_BUILD)/lib
	cd $(ISA_EMU_BUILD)/lib && $(PYTEST_ENV) $(SAN_ENV) PYFASTPIM_ISA_EMULATED=1 \
	  $(PYTHON) -m pytest -q -x $(addprefix $(CURDIR)/,$(ISA_EMU_TESTS)) -p no:cacheprovider --rootdir=$(CURDIR)
	cd $(ISA_EMU_BUILD)/lib && $(PYTEST_ENV) $(SAN_ENV) $(SAN_FUZZ)

# Structured fuzzing of every public entry point: 10^5 cases, counts printed at the end
# (tests/api/test_fuzz.py runs a short sample in `make test`).
FUZZ_CASES ?= 100000
fuzz: build
	$(PYTEST_ENV) $(PYTHON) tests/fuzz.py --cases $(FUZZ_CASES)

# ThreadSanitizer over the concurrency, thread-safety and stress tests, in its own build tree.
# The extension is built with clang and LLVM's OpenMP runtime (.ci/tsan-cc) and run with LLVM's
# Archer OMPT tool, which hands OpenMP's fork/join barriers to TSan: with GNU libgomp, whose
# barriers TSan cannot see, every parallel region reads as a race between the team's threads
# (184 such reports over test_concurrency.py alone). GCC's libtsan runtime is preloaded (python3
# is not built with TSan); ignore_noninstrumented_modules drops the interceptor calls (malloc,
# memcpy, mutexes) made from uninstrumented libraries (libomp, NumPy, OpenBLAS, PoCL): their own
# synchronization is invisible to TSan. tests/tsan.supp holds the remaining narrow suppressions
# (none for pyfastpim's code). A positive control (.ci/tsan_control.py, a race made on purpose)
# must be reported first; then the target fails on any report; reports go to build/tsan/report.*.
TSAN_BUILD := build/tsan
TSAN_LIB := $(shell gcc -print-file-name=libtsan.so 2>/dev/null)
TSAN_CLANG ?= clang-14
TSAN_ARCHER ?= /usr/lib/llvm-14/lib/libarcher.so
TSAN_DEBS := clang-14 libomp-14-dev
TSAN_TESTS := tests/api/test_concurrency.py tests/api/test_thread_safety.py tests/api/test_stress.py
# the tests that start a fresh interpreter importing torch take over 10 minutes each under TSan
# and check thread-count defaults, not concurrency
TSAN_DESELECT := not default_count and not clean_process
# .ci/tsan_plugin.py runs the kernels' generic code: TSan does not instrument 32/64-byte vector accesses
TSAN_ENV := PYTHONPATH=$(CURDIR)/$(TSAN_BUILD)/lib:$(CURDIR)/.ci LD_PRELOAD="$(TSAN_LIB)" OMP_TOOL_LIBRARIES=$(TSAN_ARCHER)
TSAN_OPTS := suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=0 exitcode=66 report_signal_unsafe=0 \
  ignore_noninstrumented_modules=1
tsan: deps
	@missing=$$(for p in $(TSAN_DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi
	rm -rf $(TSAN_BUILD)
	TSAN_CLANG=$(TSAN_CLANG) CC=$(CURDIR)/.ci/tsan-cc LDSHARED="$(CURDIR)/.ci/tsan-cc -shared" PYFASTPIM_TSAN=1 \
	  $(PYTHON) setup.py -q build --build-base $(TSAN_BUILD) --build-lib $(TSAN_BUILD)/lib
	cd $(TSAN_BUILD)/lib && $(PYTEST_ENV) $(TSAN_ENV) TSAN_OPTIONS="$(TSAN_OPTS) log_path=$(CURDIR)/$(TSAN_BUILD)/control" \
	  $(PYTHON) $(CURDIR)/.ci/tsan_control.py; \
	  n=$$(cat $(CURDIR)/$(TSAN_BUILD)/control.* 2>/dev/null | grep -c '^WARNING: ThreadSanitizer: data race'); \
	  echo "tsan positive control (a race made on purpose): $$n report(s)"; [ $$n -gt 0 ]
	cd $(TSAN_BUILD)/lib && $(PYTEST_ENV) $(TSAN_ENV) PYFASTPIM_SANITIZED=1 PYFASTPIM_STRESS_SECONDS=3 \
	  TSAN_OPTIONS="$(TSAN_OPTS) log_path=$(CURDIR)/$(TSAN_BUILD)/report" \
	  $(PYTHON) -m pytest -p tsan_plugin -q $(addprefix $(CURDIR)/,$(TSAN_TESTS)) -k "$(TSAN_DESELECT)" \
	  -p no:cacheprovider --rootdir=$(CURDIR); \
	  rc=$$?; n=$$(cat $(CURDIR)/$(TSAN_BUILD)/report.* 2>/dev/null | grep -c '^WARNING: ThreadSanitizer'); \
	  echo "tsan: $$n report(s) in $(TSAN_BUILD)/report.*"; [ $$rc = 0 ] && [ $$n = 0 ]

clean:
	rm -rf build pyfastpim/*.so *.egg-info .pytest_cache .benchmarks
