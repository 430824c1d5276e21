"""Resident weights without read noise are packed for the tile kernel once, not per call (the CPU's
packed weights, issue 11 item 2, on OpenCL): the packed form stays in the device's scratch until
another packing (other weights, read noise, another crossbar size) or a refill replaces it. Noise-
free products pair two weight slices per float (OpenCLDevice.pair_slices) in a scratch slot of
their own, so that calls alternating between them and voltage-noise products keep both packings.
Each call's kernels are seen through PYFASTPIM_CL_PROFILE=1 in a child interpreter; every output is
compared with the CPU path."""
import json

from helpers import needs_cl

pytestmark = needs_cl

CHILD = r"""
import json, os, sys
import numpy as np
import pyfastpim
from pyfastpim import _core
from helpers import engine_case, engine_args, mvm_args

dev = pyfastpim.resolve_device("opencl")
dev.release()
steps, dev.pair_slices = json.loads(sys.argv[1])
paired0 = dev.paired_calls
rng = np.random.default_rng(3)
xs, xsc, wl_a, wsc = engine_case(rng, N=1, R=12, K=96, P=40)
wl_b = np.ascontiguousarray(wl_a[:, ::-1])
sigma = np.full(4, 0.05, np.float32)
ARGS = {
    "A": engine_args(xs, xsc, wl_a, wsc),
    "B": engine_args(xs, xsc, wl_b, wsc),
    "A read noise": engine_args(xs, xsc, wl_a, wsc, sigma=sigma),
    "A vnoise": engine_args(xs, xsc, wl_a, wsc, vnoise=0.05),
    # the same weights on 16-row crossbars (another B layout, same resident arrays)
    "A n=16": mvm_args(xs, xsc, (1, 32), (1, 1, 2, 2), wl_a, wsc, (32, 32), (1, 1, 2, 2), 16, 4, 4, [4096] * 4),
}
KEYS = {"A": ("a", 1), "B": ("b", 1), "A read noise": ("a", 1), "A vnoise": ("a", 1), "A n=16": ("a", 1)}
packs = []
for step in steps:
    name, keyed = step.split(":") if ":" in step else (step, "key")
    if name == "release":
        dev.release()
        packs.append(None)
        continue
    args = ARGS[name]
    key = KEYS[name] if keyed == "key" else None
    sys.stderr.write("@@ call\n")
    sys.stderr.flush()
    out = np.asarray(_core.dpe_mvm(*args, weights_key=key, device=dev))
    sys.stderr.write("@@ end\n")
    sys.stderr.flush()
    np.testing.assert_array_equal(out, np.asarray(_core.dpe_mvm(*args)))
assert dev.pair_slices or dev.paired_calls == paired0
print("ok")
"""


def packs_per_call(steps, pair_slices=True):
    """Whether each call of `steps` ran the weight-packing kernel (None for a release)."""
    import os
    import subprocess
    import sys
    from helpers import CHILD_TIMEOUT, PKG_ROOT
    here = os.path.dirname(os.path.abspath(__file__))
    code = "import sys; sys.path[:0] = [%r, %r]\n" % (PKG_ROOT, os.path.dirname(here)) + CHILD
    env = dict(os.environ, PYFASTPIM_CL_PROFILE="1")
    r = subprocess.run([sys.executable, "-c", code, json.dumps([steps, pair_slices])], capture_output=True, text=True,
                       env=env,
                       timeout=CHILD_TIMEOUT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    calls, current = [], None
    for line in r.stderr.splitlines():
        if line == "@@ call":
            current = False
        elif line == "@@ end":
            calls.append(current)
            current = None
        elif current is not None and "pf_dpe_pack_w" in line:
            current = True
    return calls


def test_noise_free_resident_weights_are_packed_once():
    assert packs_per_call(["A", "A", "A"]) == [True, False, False]


def test_other_weights_read_noise_and_crossbar_size_repack():
    steps = ["A", "A", "B", "B", "A", "A read noise", "A", "A", "A n=16", "A n=16", "A", "A vnoise", "A"]
    # one slice per float, one slot: voltage noise leaves the weights noise-free, their packing stays
    assert packs_per_call(steps, pair_slices=False) == [True, False, True, False, True, True, True, False, True,
                                                        False, True, False, False]
    # paired noise-free packings in their own slot: read noise does not replace them; the first
    # voltage-noise call packs one slice per float beside them
    assert packs_per_call(steps) == [True, False, True, False, True, True, False, False, True, False, True, True,
                                     False]


def test_alternating_noise_free_and_voltage_noise_calls_keep_both_packings():
    steps = ["A", "A vnoise", "A", "A vnoise", "A", "A read noise", "A vnoise", "A"]
    assert packs_per_call(steps) == [True, True, False, False, False, True, True, False]


def test_unkeyed_weights_and_a_released_device_repack():
    assert packs_per_call(["A:none", "A:none", "A", "release", "A", "A"]) == [True, True, True, True, False]
