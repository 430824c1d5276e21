"""OpenCL outputs above the device's largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE, e.g. 4 GiB):
the MVM is computed a row chunk at a time into chunk-sized buffers (issue 19). The internal
hook PYFASTPIM_CL_OUTPUT_LIMIT (bytes) lowers the limit so the split path runs on small data."""
import os

import numpy as np
import pytest

import pyfastpim as pf
from pyfastpim import _core, memory
from pyfastpim.devices import cl_dpe_mvm
from helpers import make_case, mvm_args

NPLAT, _ = _core.cl_devices()
pytestmark = pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform")
SANITIZED = os.environ.get("PYFASTPIM_SANITIZED") == "1"
NOISY = dict(write_variation=0.02, read_variation=0.05, vnoise=0.05, rate_stuck_HGS=0.001, rate_stuck_LGS=0.0)


def _operands(engine, rows, k, cols, seed=0):
    rng = np.random.default_rng(seed)
    xs = pf.SlicedData((1, 1, 2, 2), paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(engine, rng.standard_normal((rows, k)).astype(np.float32))
    ws = pf.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(engine, rng.standard_normal((k, cols)).astype(np.float32))
    return xs, ws


def test_output_above_the_buffer_limit_is_split_into_row_chunks(monkeypatch):
    # K = 4096 and 4 input slices: 64 KiB of packed input per row, so the 64 MiB input chunk
    # holds 1024 rows and 2500 rows take 3 chunks (fewer rows under the sanitizers: 2 chunks)
    rows, k, cols = (1100, 4096, 8) if SANITIZED else (2500, 4096, 8)
    e = pf.DPETensor(device="opencl", seed=5, **NOISY)
    xs, ws = _operands(e, rows, k, cols)
    e.reset(5)
    whole = np.asarray(e.MapReduceDot(xs, ws)).copy()
    out_bytes = rows * cols * 4
    # below the whole output, above one chunk (1020-1024 rows): the split path runs
    limit = out_bytes - 4 * cols if SANITIZED else out_bytes // 2
    monkeypatch.setenv("PYFASTPIM_CL_OUTPUT_LIMIT", str(limit))
    before = memory.stats()["device_to_host_bytes"]
    e.reset(5)
    split = np.asarray(e.MapReduceDot(xs, ws))
    # the split path reads each chunk back (counted), even on zero-copy devices
    assert memory.stats()["device_to_host_bytes"] - before >= out_bytes
    np.testing.assert_array_equal(split, whole)  # same kernels, same noise indices: identical
    cpu = pf.DPETensor(seed=5, **NOISY)
    xs_c, ws_c = _operands(cpu, rows, k, cols)
    cpu.reset(5)
    ref = np.asarray(cpu.MapReduceDot(xs_c, ws_c))
    assert np.linalg.norm(split - ref) <= 1e-3 * np.linalg.norm(ref)


def test_output_chunk_above_the_limit_is_a_clear_error(monkeypatch):
    e = pf.DPETensor(device="opencl", **NOISY)
    xs, ws = _operands(e, 40, 64, 8)
    monkeypatch.setenv("PYFASTPIM_CL_OUTPUT_LIMIT", "256")
    with pytest.raises(ValueError, match="CL_DEVICE_MAX_MEM_ALLOC_SIZE"):
        e.MapReduceDot(xs, ws)
    monkeypatch.delenv("PYFASTPIM_CL_OUTPUT_LIMIT")
    assert np.isfinite(np.asarray(e.MapReduceDot(xs, ws))).all()  # the device still works


def test_convolution_output_above_the_limit_is_a_clear_error(monkeypatch):
    e = pf.DPETensor(device="opencl", **NOISY)
    rng = np.random.default_rng(1)
    w = pf.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    w.slice_data_imp(e, rng.standard_normal((3 * 9, 4)).astype(np.float32))
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    monkeypatch.setenv("PYFASTPIM_CL_OUTPUT_LIMIT", "1024")
    with pytest.raises(ValueError, match="CL_DEVICE_MAX_MEM_ALLOC_SIZE"):
        e.forward_conv2d(x, w, 3, padding=1)


def test_a_tall_crossbar_whose_padded_weights_exceed_the_largest_buffer_computes(dev):
    # Crossbars of n = 2**24 - 1 rows (the most a 1-level DAC and 2-level cells allow) holding K = 100
    # inputs. Every block used to be padded to n rows on OpenCL, so the packed weights (Sw x n x Pp
    # floats) needed a buffer above CL_DEVICE_MAX_MEM_ALLOC_SIZE and the call failed ("packed weights
    # needs a buffer of ... bytes") where the CPU computes it; only the rows present are packed now.
    n, sw = 2 ** 24 - 1, 4
    cols = max(16, -(-dev.info["max_alloc_bytes"] // (sw * n * 4)) + 16)  # the padded weights: above the limit
    if cols > 4096:
        pytest.skip("the device's largest buffer (%d bytes) takes the padded weights" % dev.info["max_alloc_bytes"])
    widths, xg, wg = (1,) * sw, (1, n), (n, cols)
    xs, xsc, wl, wsc = make_case(np.random.default_rng(3), 1, 5, 100, cols, n, widths, widths, xg, wg, 2)
    args = mvm_args(xs, xsc, xg, widths, wl, wsc, wg, widths, n, 2, 2, [2 ** 24] * sw)
    cl = np.asarray(cl_dpe_mvm(dev, *args))
    cpu = np.asarray(_core.dpe_mvm(*args))
    assert np.count_nonzero(cpu) > 0
    np.testing.assert_array_equal(cl, cpu)
