"""The OpenCL backend (pyfastpim.devices, kernels/*.cl) against the CPU path (_core.dpe_mvm).

Runs on whatever OpenCL device the ICD loader offers (PoCL in CI); skipped only when the loader
reports no platform at all.

The checks every backend must pass alike (CPU and OpenCL against the reference, the same errors)
are in tests/backends/test_parity.py.
"""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyfastpim
from pyfastpim import _core
from helpers import (CL_DEVICES, HGS, LGS, NPLAT, SIMD_NOISE, config_case, configs, engine_args, engine_case,
                     make_case, mvm_args, needs_cl, rel)

pytestmark = [needs_cl]


def both(dev, *args, **kw):
    a = mvm_args(*args, **kw)
    cpu = np.asarray(_core.dpe_mvm(*a))
    cl = np.asarray(pyfastpim.cl_dpe_mvm(dev, *a))
    return cpu, cl


# ---- devices -------------------------------------------------------------------------------------

def test_devices_lists_the_cpu_first_then_every_opencl_device():
    ds = pyfastpim.devices()
    assert ds[0]["device"] == "cpu"
    cl = ds[1:]
    assert len(cl) == len(CL_DEVICES) >= 1
    for d in cl:
        assert d["device"] == "opencl:%d:%d" % (d["platform"], d["device_index"])
        assert d["type"] in ("cpu", "gpu", "accelerator", "custom", "other")
        assert d["name"] and d["platform_name"] and d["global_mem_bytes"] > 0 and d["compute_units"] >= 1
        assert isinstance(d["host_unified_memory"], bool)


def test_device_strings_resolve_and_are_cached(dev):
    assert pyfastpim.resolve_device(None) is None
    assert pyfastpim.resolve_device("cpu") is None
    gpus = [d for d in CL_DEVICES if d["type"] == "gpu"]
    first = (gpus or CL_DEVICES)[0]
    env = os.environ.get("PYFASTPIM_OPENCL_DEVICE", "").strip()
    if env:  # the suite pointed at a chosen device (benchmarks/gpu.sh)
        p, d = env.lower().replace("opencl:", "").split(":")
        first = next(x for x in CL_DEVICES if (x["platform"], x["device"]) == (int(p), int(d)))
    assert dev.info["platform"] == first["platform"] and dev.info["device"] == first["device"]
    assert pyfastpim.resolve_device("opencl") is dev
    assert pyfastpim.resolve_device("opencl:%d:%d" % (first["platform"], first["device"])) is dev
    assert pyfastpim.resolve_device(dev) is dev
    assert "OpenCL device" in repr(dev)


@pytest.mark.parametrize("bad, exc, word", [
    ("gpu", ValueError, "device"),
    ("opencl:0", ValueError, "opencl:P:D"),
    ("opencl:a:b", ValueError, "opencl:P:D"),
    ("cuda:0", ValueError, "device"),
    (3, TypeError, "device"),
    ("opencl:99:0", RuntimeError, "platform 99"),
    ("opencl:0:99", RuntimeError, "no OpenCL device 99 on platform 0"),
])
def test_bad_device_strings_raise_clear_errors(bad, exc, word):
    with pytest.raises(exc, match=word):
        pyfastpim.resolve_device(bad)


def test_opening_a_missing_device_directly_raises_runtime_error():
    with pytest.raises(RuntimeError, match="no OpenCL"):
        _core.OpenCLDevice(NPLAT + 5, 0)


@pytest.mark.parametrize("args, word", [((-1, 0), "platform"), ((0, -1), "device"), ((-(2 ** 31), 0), "platform")])
def test_opening_a_device_with_a_negative_number_names_the_argument(args, word):
    # a negative platform or device number is a bad argument (ValueError naming it), not a missing device
    with pytest.raises(ValueError, match="argument '%s'" % word):
        _core.OpenCLDevice(*args)


def test_cl_dpe_mvm_rejects_a_non_handle():
    with pytest.raises(TypeError, match="handle"):
        pyfastpim.cl_dpe_mvm("opencl", None)


# ---- results -------------------------------------------------------------------------------------

@given(configs(), st.sampled_from([0.0, 0.02, 0.1]), st.sampled_from([0.0, 0.05]), st.booleans())
@settings(max_examples=10 if os.environ.get("PYFASTPIM_SANITIZED") == "1" else 30)
def test_noisy_output_matches_the_cpu_path(dev, c, sigma, vnoise, with_conductance):
    args, rng = config_case(c)
    wl, g_level = args[4], args[10]
    sig = np.full(g_level, sigma, np.float32) if sigma else None
    cond = None
    if with_conductance:  # programmed conductances (write variation) instead of ideal levels
        QG = (HGS - LGS) / (g_level - 1)
        cond = ((wl * QG + LGS) * (1 + 0.02 * rng.standard_normal(wl.shape))).astype(np.float32)
    cpu, cl = both(dev, *args, sigma=sig, vnoise=vnoise, seed=c["seed"], call=7, cond=cond)
    assert rel(cl, cpu) <= 1e-5  # the contract
    if SIMD_NOISE:  # the kernels transcribe the CPU's SLEEF math: the same bits
        np.testing.assert_array_equal(cl, cpu)


def test_read_noise_on_row_tails_matches_the_cpu_bit_for_bit(dev):
    # rows of P < 8 cells are all tail (the SIMD exp works in runs of 8): the CPU took glibc's expf
    # there, which is not correctly rounded (0.502 ulp), and OpenCL a correctly rounded exp, so a
    # cell's read-noise factor differed by an ulp now and then; n = 1 and a 24-bit ADC turn every
    # such ulp into a different code. Now both use SLEEF's expf on every cell.
    xs, xsc, wl, wsc = make_case(np.random.default_rng(2), 1, 8, 4096, 7, 1, (1, 3), (1, 1), (1, 1), (1, 7), 4)
    sig = np.array([0.2, 0.1, 0.2, 0.3], np.float32)
    for call in range(6):
        cpu, cl = both(dev, xs, xsc, (1, 1), (1, 3), wl, wsc, (1, 7), (1, 1), 1, 4, 4, [2 ** 24] * 2, sigma=sig,
                       seed=5, call=call)
        assert rel(cl, cpu) <= 1e-5
        if SIMD_NOISE:
            np.testing.assert_array_equal(cl, cpu, err_msg="call %d" % call)


def test_normals_equal_the_cpu_generator(dev):
    n = 1 << 20
    for args in ((11, 0, 5, 3, n), (11, 1, 0, (1 << 34) - 40, 80), (2 ** 64 - 1, 3, 2 ** 32 - 1, 7, 1001)):
        a = np.asarray(_core.normals(*args))
        b = np.asarray(_core.normals(*args, device=dev))
        if SIMD_NOISE:
            np.testing.assert_array_equal(a, b)
        else:  # the CPU's scalar libm path differs from SLEEF by a few ulp
            np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)


def test_item0_noise_offsets_match_the_cpu_chunking(dev):
    # a batch split into chunks (item0 = chunk start) sees the noise of the whole batch
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(8), N=5, R=7, K=64, P=24)
    sig = np.full(4, 0.05, np.float32)
    whole = np.asarray(pyfastpim.cl_dpe_mvm(dev, *engine_args(xs, xsc, wl, wsc, sigma=sig, vnoise=0.05)))
    part = np.asarray(pyfastpim.cl_dpe_mvm(dev, *engine_args(np.ascontiguousarray(xs[:, 2:]), xsc[2:], wl, wsc,
                                                             sigma=sig, vnoise=0.05), item0=2))
    np.testing.assert_array_equal(part, whole[2:])
    cpu = np.asarray(_core.dpe_mvm(*engine_args(np.ascontiguousarray(xs[:, 2:]), xsc[2:], wl, wsc, sigma=sig,
                                                vnoise=0.05), item0=2))
    if SIMD_NOISE:
        np.testing.assert_array_equal(part, cpu)
    else:
        assert rel(part, cpu) <= 1e-5
    with pytest.raises(ValueError, match="item0"):
        pyfastpim.cl_dpe_mvm(dev, *engine_args(xs, xsc, wl, wsc), item0=-1)


def test_out_of_range_levels_read_sigma_in_bounds(dev):
    # levels above g_level - 1 (not produced by programming) clamp the sigma lookup, as on the CPU
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(10), N=1, R=6, K=64, P=16)
    wl = np.random.default_rng(1).integers(0, 256, wl.shape).astype(np.uint8)
    sig = np.array([0.01, 0.02, 0.03, 0.5], np.float32)
    cpu, cl = both(dev, xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4,
                   sigma=sig)
    assert rel(cl, cpu) <= 1e-5


def test_row_chunks_of_a_large_batch_match(dev):
    # 4500 rows x 1024 inner x 4 slices exceed one 64 MiB packed-input chunk
    rng = np.random.default_rng(9)
    xs, xsc, wl, wsc = make_case(rng, 3, 1500, 1024, 9, 32, (1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), 4)
    args = (xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [256] * 4)
    cpu, cl = both(dev, *args)
    np.testing.assert_array_equal(cl, cpu)
    cpu, cl = both(dev, *args, sigma=np.full(4, 0.05, np.float32), vnoise=0.05)
    assert rel(cl, cpu) <= 1e-5


def test_another_crossbar_size_with_the_same_padded_sizes_matches(dev):
    # n = 8 and n = 4 both pad K = 39 to 40, with the padding in other places: the device's
    # zero-filled packing scratch must be refilled, not reused (its stale padding gave wrong products)
    xs, xsc, wl, wsc = make_case(np.random.default_rng(12), 1, 6, 39, 10, 8, (1, 2), (1, 2), (1, 8), (8, 8), 4)
    for n in (8, 4, 8):
        cpu, cl = both(dev, xs, xsc, (1, 8), (1, 2), wl, wsc, (8, 8), (1, 2), n, 4, 4, [4096] * 2)
        np.testing.assert_array_equal(cl, cpu)


# ---- memory --------------------------------------------------------------------------------------

def test_host_memory_devices_share_numpy_and_torch_buffers_with_zero_copies(dev):
    if not dev.info["host_unified_memory"]:
        pytest.skip("the default OpenCL device is discrete (%s): transfers are explicit" % dev.info["name"])
    assert dev.zero_copy, "the device reports unified memory and passed the in-place probe"
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(5), N=1, R=12, K=64, P=20)
    args = engine_args(xs, xsc, wl, wsc, sigma=np.full(4, 0.05, np.float32), vnoise=0.05)
    pyfastpim.cl_dpe_mvm(dev, *args)  # build and size the scratch outside the trace
    out = np.zeros((1, 12, 20), np.float32)
    with pyfastpim.memory.trace() as t:
        r = pyfastpim.cl_dpe_mvm(dev, *args, out=out, weights_key=("w", 1))
        r = pyfastpim.cl_dpe_mvm(dev, *args, out=out, weights_key=("w", 1))
    assert t.copies == 0, t.by_kind
    assert np.asarray(r).ctypes.data == out.ctypes.data
    np.testing.assert_array_equal(out, np.asarray(_core.dpe_mvm(*args)))
    torch = pytest.importorskip("torch")
    tout = torch.zeros((1, 12, 20))
    targs = tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
    with pyfastpim.memory.trace() as t:
        pyfastpim.cl_dpe_mvm(dev, *targs, out=tout)
    assert t.copies == 0, t.by_kind
    np.testing.assert_array_equal(tout.numpy(), out)


def test_explicit_transfers_are_counted_and_weights_stay_resident(dev):
    # zero_copy=False exercises the discrete-device path on any device (the suite's device)
    info = dev.info
    d = _core.OpenCLDevice(info["platform"], info["device"], zero_copy=False)
    assert not d.zero_copy
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(6), N=2, R=30, K=96, P=40)
    args = engine_args(xs, xsc, wl, wsc, sigma=np.full(4, 0.05, np.float32), vnoise=0.05)
    ref = np.asarray(_core.dpe_mvm(*args))
    w_bytes = wl.nbytes + wsc.nbytes
    out_bytes = ref.nbytes
    with pyfastpim.memory.trace() as t1:
        a = np.asarray(pyfastpim.cl_dpe_mvm(d, *args, weights_key=("layer", 1)))
    with pyfastpim.memory.trace() as t2:
        b = np.asarray(pyfastpim.cl_dpe_mvm(d, *args, weights_key=("layer", 1)))
    np.testing.assert_array_equal(a, ref)
    np.testing.assert_array_equal(b, ref)
    h2d1, h2d2 = t1.by_kind["host_to_device"], t2.by_kind["host_to_device"]
    assert t1.by_kind["device_to_host"] == (1, out_bytes) == t2.by_kind["device_to_host"]
    assert h2d1[1] - h2d2[1] == w_bytes and h2d1[0] - h2d2[0] == 2  # levels + scales, once
    assert h2d2[1] >= xs.nbytes + xsc.nbytes
    assert list(d.resident_weights) == [("layer", 1)]
    # a new version of the same weights replaces the old buffers
    wl2 = wl.copy()
    c = np.asarray(pyfastpim.cl_dpe_mvm(d, *engine_args(xs, xsc, wl2, wsc), weights_key=("layer", 2)))
    assert list(d.resident_weights) == [("layer", 2)]
    np.testing.assert_array_equal(c, np.asarray(_core.dpe_mvm(*engine_args(xs, xsc, wl2, wsc))))
    # the same key with other arrays is detected, never served stale
    wl3 = np.ascontiguousarray(wl[:, :, ::-1])
    e = np.asarray(pyfastpim.cl_dpe_mvm(d, *engine_args(xs, xsc, wl3, wsc), weights_key=("layer", 2)))
    np.testing.assert_array_equal(e, np.asarray(_core.dpe_mvm(*engine_args(xs, xsc, wl3, wsc))))
    d.release()
    assert d.resident_weights == {} and d.scratch_bytes == 0


def test_scratch_is_accounted_on_zero_copy_devices(dev):
    if not dev.zero_copy:
        pytest.skip("scratch lives in device memory on %s" % dev.info["name"])
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(7))
    dev.release()
    assert dev.scratch_bytes == 0
    with pyfastpim.memory.trace() as t:
        pyfastpim.cl_dpe_mvm(dev, *engine_args(xs, xsc, wl, wsc))
    # the packed operands are pf_alloc'd host memory, kept for the next call
    assert dev.scratch_bytes > 0 and t.allocated_bytes >= dev.scratch_bytes


def test_device_info_and_tile():
    d = pyfastpim.resolve_device("opencl")
    tile = d.tile
    assert tile["rows"] >= 1 and tile["cols"] in (1, 2, 4, 8, 16)
    assert tile["local_x"] * tile["local_y"] <= d.info["max_work_group_size"]


def test_no_platform_gives_clear_errors_not_a_crash(tmp_path):
    # an ICD loader with no vendor files (ocl-icd honours OCL_ICD_VENDORS) reports no platform
    import subprocess
    import sys
    code = ("import sys, pyfastpim\n"
            "if pyfastpim._core.cl_devices()[0]:\n"
            "    print('ignored'); sys.exit(0)\n"
            "assert [d['device'] for d in pyfastpim.devices()] == ['cpu']\n"
            "for s in ('opencl', 'opencl:0:0'):\n"
            "    try:\n"
            "        pyfastpim.resolve_device(s)\n"
            "    except RuntimeError as e:\n"
            "        assert 'no OpenCL platform found' in str(e), e\n"
            "    else:\n"
            "        raise AssertionError(s)\n"
            "print('ok')\n")
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path))
    root = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    if "ignored" in r.stdout:
        pytest.skip("this OpenCL ICD loader ignores OCL_ICD_VENDORS")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


# ---- the engine and the layers on an OpenCL device --------------------------------------------------

@pytest.mark.parametrize("noisy", [False, True])
def test_engine_on_opencl_equals_the_cpu_engine(noisy):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    x = rng.standard_normal((3, 20, 96)).astype(np.float32)
    w = rng.standard_normal((96, 40)).astype(np.float32)
    kw = dict(g_level=4, rdac=4, radc=2 ** 12, seed=5)
    kw.update(dict(read_variation=0.05, vnoise=0.05, write_variation=0.02) if noisy else
              dict(read_variation=0.0, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0))
    cpu = pyfastpim.DPETensor(**kw)
    cl = pyfastpim.DPETensor(device="opencl", **kw)
    assert cl.device == "opencl" and cpu.device == "cpu"
    a = pyfastpim.dpe_matmul(x, w, cpu)
    b = pyfastpim.dpe_matmul(x, w, cl)
    if noisy and not SIMD_NOISE:
        assert rel(b, a) < 1e-5
    else:
        np.testing.assert_array_equal(b, a)
    # a layer follows its engine
    lin_cpu = pyfastpim.nn.LinearMem(cpu, 96, 40, [1, 1, 2, 2], [1, 1, 2, 2])
    lin_cl = pyfastpim.nn.LinearMem(cl, 96, 40, [1, 1, 2, 2], [1, 1, 2, 2])
    lin_cl.load_state_dict(lin_cpu.state_dict())
    cpu.reset(5)
    cl.reset(5)
    with torch.no_grad():
        ya = lin_cpu(torch.from_numpy(x))
        yb = lin_cl(torch.from_numpy(x))
    if noisy and not SIMD_NOISE:
        assert rel(yb.numpy(), ya.numpy()) < 1e-5
    else:
        assert torch.equal(ya, yb)


def test_attention_context_device_option_matches_the_cpu():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((80, 48)).astype(np.float32)
    y = rng.standard_normal((80, 48)).astype(np.float32)
    cpu = pyfastpim.AttentionContext(update_rate=0.5, strength=2.0)
    cl = pyfastpim.AttentionContext(update_rate=0.5, strength=2.0, device="opencl")
    assert cpu.device == "cpu" and cl.device == "opencl"
    for _ in range(2):
        cpu.update_outgoing(x, y)
        cl.update_outgoing(x, y)
    assert rel(cl.outgoing, cpu.outgoing) < 1e-5
    cpu.incoming = cpu.outgoing
    cl.incoming = cl.outgoing
    out = np.empty_like(x)
    r = cl.apply(x, out=out)
    assert np.asarray(r).ctypes.data == out.ctypes.data
    assert rel(out, np.asarray(cpu.apply(x))) < 1e-5
    with pytest.raises((ValueError, RuntimeError), match="device"):
        pyfastpim.AttentionContext(device="opencl:99:0")
