#!/usr/bin/env bash
# Run pyfastpim's OpenCL backend on a GPU: correctness first, then speed (issue 16, parts 2-4).
#
# Usage (from the repository root, on a Debian/Ubuntu machine with an NVIDIA GPU and its driver):
#   bash benchmarks/gpu.sh            # everything below; results in build/gpu/
#   GPU_DEVICE=opencl:1:0 bash benchmarks/gpu.sh   # pick the device yourself
#   STEPS="info test" bash benchmarks/gpu.sh       # a subset: info test kernels bench resnet
#   PREBUILT=1 PYTHON=python3 bash benchmarks/gpu.sh   # no network or -dev packages there: the
#            extension built elsewhere for that Python (pyfastpim/_core*.so, its shared libraries
#            on LD_LIBRARY_PATH), nothing installed; see README "OpenCL devices" (the H100 run)
#
# What it does:
#   deps     the ICD loader (ocl-icd-libopencl1) and clinfo (not with PREBUILT); the NVIDIA driver
#            ships its own ICD (libnvidia-opencl.so.1): registered under /etc/OpenCL/vendors by
#            its full path when no .icd file names it (common in containers)
#   info     pyfastpim.devices(), the chosen device's tile / local memory / float flags
#   test     the whole suite (pytest, as make test runs it, without the lint steps) with the GPU as
#            "opencl" (PYFASTPIM_OPENCL_DEVICE), then the OpenCL
#            test files again with each MVM tile kernel forced (PYFASTPIM_CL_MVM=tiled / untiled);
#            noise off must be bit-identical to the CPU path, noise on within 1e-5 relative
#   kernels  per-kernel device times of the engine case (PYFASTPIM_CL_PROFILE=1), both kernels
#   bench    make bench (the opencl groups run on the GPU; includes the engine case 512x1024 @
#            1024x1024, slices (1,1,2,2), noise on, resident weights, transfers included, and the
#            tiled vs untiled kernel case)
#   resnet   ResNet-18 (CIFAR shape) batch 64 forward, seconds per batch, CPU path vs GPU
#            (benchmarks/gpu_resnet.py), noise off (bit-identity checked) and on
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
OUT=build/gpu
STEPS=${STEPS:-"deps info test kernels bench resnet"}
mkdir -p "$OUT"
FAILED=""
# runs a step's command, keeps going when it fails (the summary at the end lists the failures)
step() { local name=$1; shift; "$@" || FAILED="$FAILED $name"; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
log() { printf '\n==== %s\n' "$*"; }

if has deps; then
  log "deps: ICD loader, clinfo, the project's Debian packages"
  if [ "${PREBUILT:-}" != 1 ]; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q ocl-icd-libopencl1 clinfo
    make deps build
  fi
  # The driver's OpenCL library, registered by its full path unless an .icd file names it where the
  # loader finds it (containers mount the driver under /usr/local/nvidia, outside the loader's search,
  # and may write an .icd with the bare name).
  ocl=$(find /usr/lib /usr/lib64 /usr/local/nvidia -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1 || true)
  found=""
  for f in /etc/OpenCL/vendors/*.icd; do
    lib=$(cat "$f" 2>/dev/null || true)
    case $lib in
      *nvidia-opencl*) if [ -e "$lib" ] || ldconfig -p | grep -q "$lib"; then found=1; fi ;;
    esac
  done
  if [ -n "$ocl" ] && [ -z "$found" ]; then
    $SUDO mkdir -p /etc/OpenCL/vendors
    echo "$ocl" | $SUDO tee /etc/OpenCL/vendors/nvidia.icd >/dev/null
  fi
fi

clinfo -l | tee "$OUT/clinfo.txt" || true

# The GPU: GPU_DEVICE if given, else the first device of type 'gpu' (pyfastpim.devices()).
GPU_DEVICE=${GPU_DEVICE:-$($PY -c '
import pyfastpim
g = [d["device"] for d in pyfastpim.devices() if d.get("type") == "gpu"]
print(g[0] if g else "")')}
if [ -z "$GPU_DEVICE" ]; then
  echo "no OpenCL GPU found (clinfo -l above lists what the ICD loader sees)" >&2
  exit 1
fi
export PYFASTPIM_OPENCL_DEVICE=$GPU_DEVICE
echo "OpenCL device for this run: $PYFASTPIM_OPENCL_DEVICE"

if has info; then
  log "info"
  $PY - <<'EOF' | tee "$OUT/device.json"
import json, pyfastpim
d = pyfastpim.resolve_device("opencl")  # PYFASTPIM_OPENCL_DEVICE
d.build()
print(json.dumps(dict(info=d.info, tile=d.tile, zero_copy=d.zero_copy, mvm_kernel=d.mvm_kernel,
                      auto_tiled_n32=d.mvm_uses_tiled(32)), indent=1, default=str))
EOF
fi

if has test; then
  log "test: the whole suite, OpenCL tests on $GPU_DEVICE"
  step test bash -c 'set -o pipefail; OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive \
    "$1" -m pytest -q -rf tests 2>&1 | tee "$0/test.txt"' "$OUT" "$PY"
  for k in tiled untiled; do
    log "test: OpenCL tests with the $k MVM kernel forced"
    step "test_$k" bash -c 'set -o pipefail; PYFASTPIM_CL_MVM=$1 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive \
      "$2" -m pytest -q tests/backends 2>&1 |
      tee "$0/test_$1.txt"' "$OUT" "$k" "$PY"
  done
fi

if has kernels; then
  log "kernels: device time per kernel, engine case, noise on, both tile kernels"
  for k in untiled tiled; do
    PYFASTPIM_CL_MVM=$k PYFASTPIM_CL_PROFILE=1 $PY - <<'EOF' 2>&1 | grep -E 'pyfastpim opencl|^ms' | tee "$OUT/kernels_$k.txt"
import time, numpy as np, pyfastpim
from pyfastpim.devices import cl_dpe_mvm
import benchmarks.test_bench_opencl as b
d = pyfastpim.resolve_device("opencl")
a = b.args(b.make_operands(), True)
out = np.empty((1, b.R, b.P), np.float32)
for i in range(3):
    t = time.perf_counter()
    cl_dpe_mvm(d, *a, out=out, weights_key=("w", 1))
    print("ms per product (kernel %s, call %d, transfers included): %.3f" % (d.mvm_kernel, i, 1e3 * (time.perf_counter() - t)))
EOF
  done
fi

if has bench; then
  log "bench: make bench with $GPU_DEVICE as the OpenCL device"
  step bench bash -c 'set -o pipefail; make bench PYTHON="$1" 2>&1 | tee "$0/bench.txt"' "$OUT" "$PY"
  cp build/bench.json "$OUT/bench.json" || true
fi

if has resnet; then
  for noise in off on; do
    log "resnet: ResNet-18 CIFAR batch 64, noise $noise"
    step "resnet_$noise" bash -c 'set -o pipefail; "$1" benchmarks/gpu_resnet.py --device "$2" --noise "$3" | tee "$0/resnet_noise_$3.json"' \
      "$OUT" "$PY" "$GPU_DEVICE" "$noise"
  done
fi
log "done: results in $OUT/"
if [ -n "$FAILED" ]; then
  echo "FAILED steps:$FAILED" >&2
  exit 1
fi
