# pyfastpim: two commands on a fresh Debian 12 machine -- `make run`, `make test`.
PYTHON ?= /usr/bin/python3
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBS := build-essential python3-dev python3-numpy libopenblas-dev ocl-icd-opencl-dev opencl-c-headers \
        pocl-opencl-icd clinfo python3-pytest python3-pytest-benchmark python3-hypothesis python3-torch \
        python3-torchvision python3-sklearn python3-matplotlib python3-tqdm python3-psutil librandom123-dev libdlpack-dev libsleef-dev
SAN_LIB := $(shell gcc -print-file-name=libasan.so 2>/dev/null) $(shell gcc -print-file-name=libubsan.so 2>/dev/null)
SAN_BUILD := build/sanitize
PYTEST_ENV := OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# Benchmarks give OpenBLAS (the roofline) the same 2 threads as the kernels; idle OpenMP
# threads sleep instead of spinning on the cores OpenBLAS needs (passive wait).
BENCH_ENV := OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=passive

.PHONY: all deps build run test bench sanitize clean

all: build

# Installs only what is missing (one dpkg query, no network when nothing is).
deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

build: deps
	$(PYTHON) setup.py -q build_ext --inplace

run: build
	$(PYTHON) -m pyfastpim demo

test: build
	$(PYTEST_ENV) $(PYTHON) -m pytest -q tests

bench: build
	mkdir -p build
	$(BENCH_ENV) $(PYTHON) -m pytest -q benchmarks --benchmark-only --benchmark-columns=min,median,rounds \
	  --benchmark-sort=name --benchmark-json=build/bench.json
	$(PYTHON) benchmarks/report.py build/bench.json

# Sanitized build goes to its own tree so the regular in-place build is untouched.
sanitize: deps
	rm -rf $(SAN_BUILD)
	PYFASTPIM_SANITIZE=1 $(PYTHON) setup.py -q build --build-base $(SAN_BUILD) --build-lib $(SAN_BUILD)/lib
	cd $(SAN_BUILD)/lib && $(PYTEST_ENV) LD_PRELOAD="$(SAN_LIB)" PYFASTPIM_SANITIZED=1 \
	  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:handle_segv=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(PYTHON) -m pytest -q -x $(CURDIR)/tests -p no:cacheprovider --rootdir=$(CURDIR)

clean:
	rm -rf build pyfastpim/*.so *.egg-info .pytest_cache .benchmarks
