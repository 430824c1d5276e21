"""The exact integer path of noise-free products (csrc/cpu/dpe_int*.c) against the float32 roofline (16 GEMMs of the
same shape through OpenBLAS, one per slice pair of slices (1, 1, 2, 2)) and against the float path of the same
engine (switched with _core.dpe_int_path), measured in the same run, at batch 512, 64 and 1 of the engine case
x (B, 1024) @ W (1024, 1024), n = 32, g_level = rdac = 4, radc = 2**12.

Each case records the CPU tier (pyfastpim's ``cpu_tier``) and the integer kernel it ran on; the programmed weights'
integer panels are packed once, at programming, so no batch size repacks them. The target at batch 512 is <= 0.8x
the roofline with the AVX2 kernel and <= 0.5x with AVX-512 VNNI; at every batch, no slower than the float path, a ratio
of calls alternating between the two paths (interleaved.py)."""
import numpy as np
import pytest

from pyfastpim import DPETensor, SlicedData, _core
from engine_case import float_kernel
from interleaved import interleaved_ratio

K, P = 1024, 1024
SLICES = (1, 1, 2, 2)
ENGINE = dict(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.0, vnoise=0.0, write_variation=0.0,
              rate_stuck_HGS=0.0, rate_stuck_LGS=0.0)
BATCHES = [512, 64, 1]
ROOFLINE_TARGET = {"avx512vnni": 0.5, "avxvnni": 0.8, "avx2": 0.8}


def group(batch):
    return "dpe int %dx1024 @ 1024x1024" % batch


@pytest.fixture(scope="module")
def weights():
    return np.random.default_rng(0).standard_normal((K, P)).astype(np.float32)


def inputs(batch):
    return np.random.default_rng(batch).standard_normal((batch, K)).astype(np.float32)


def sliced(engine, x, w):
    ws = SlicedData(SLICES, is_weight=True, paral_size=(32, 32), quant_gran=(32, 32), inference=True)
    ws.slice_data_imp(engine, w)
    xs = SlicedData(SLICES, paral_size=(1, 32), quant_gran=(1, 32), inference=True)
    xs.slice_data_imp(engine, x)
    return xs, ws


def describe(benchmark, batch, role):
    benchmark.group = group(batch)
    benchmark.extra_info["role"] = role
    benchmark.extra_info["cpu_tier"] = _core.cpu_tier()[0]
    benchmark.extra_info["int_kernel"] = _core.dpe_int_path()["kernel"]


@pytest.mark.parametrize("batch", BATCHES)
def test_int_roofline_16_sgemm(benchmark, weights, batch):
    x = inputs(batch)
    describe(benchmark, batch, "roofline")
    benchmark(lambda: [np.dot(x, weights) for _ in range(16)])


@pytest.mark.parametrize("batch", BATCHES)
def test_int_path(benchmark, weights, batch):
    eng = DPETensor(**ENGINE)
    xs, ws = sliced(eng, inputs(batch), weights)
    describe(benchmark, batch, "subject")
    kernel = _core.dpe_int_path()["kernel"]
    targets = {"vs_float_path_interleaved": 1.0}
    if batch == 512 and kernel in ROOFLINE_TARGET:
        targets["roofline"] = ROOFLINE_TARGET[kernel]
    benchmark.extra_info["targets"] = targets
    _core.dpe_int_path(True)
    c0 = _core.dpe_int_path()["calls"]
    out = benchmark(eng, xs, ws)
    assert _core.dpe_int_path()["calls"] > c0  # the integer path really ran
    assert np.array_equal(np.asarray(out), np.asarray(float_path_call(eng, xs, ws)))  # the float path's bits
    # against the float path: the two paths' calls alternating (interleaved.py)
    benchmark.extra_info["vs_float_path_interleaved"] = interleaved_ratio(lambda: eng(xs, ws),
                                                                          lambda: float_path_call(eng, xs, ws))


def float_path_call(eng, xs, ws):
    with float_kernel():
        return eng(xs, ws)


@pytest.mark.parametrize("batch", BATCHES)
def test_int_float_path(benchmark, weights, batch):
    eng = DPETensor(**ENGINE)
    xs, ws = sliced(eng, inputs(batch), weights)
    describe(benchmark, batch, "float path")
    with float_kernel():
        benchmark(eng, xs, ws)
