"""One binding per op, taking ``device=`` (csrc/python/bind_device.h), run through the backend table
(csrc/core/backend.h: pf_backend_cpu, pf_backend_opencl).

``_core.dpe_mvm``, ``dpe_conv2d``, ``slice_quantize``, ``program_conductance`` and ``normals`` take
``device=None`` (the default), ``"cpu"`` or an ``OpenCLDevice`` handle. The same call gives the
same result on each: bit for bit with noise off; with noise on, per the parity rules of
tests/backends/test_parity.py (bit for bit where the CPU draws noise with its SIMD path, else
within the 1e-5 contract). ``weights_key`` (resident device weights) is an OpenCL argument: any
value other than None is a ValueError naming it on the CPU. The handle has no op methods left
but the attention ones.
"""
import numpy as np
import pytest

from pyfastpim import _core
from pyfastpim.devices import cl_dpe_mvm
from helpers import (HAVE_CL, NO_CL_REASON, SIMD_NOISE, conv_args, engine_args, engine_case, rel)

CONV = dict(N=2, C=3, H=9, W=8, P=5, kh=3, kw=3, stride=(2, 1), padding=(1, 1), dilation=(1, 1), n=9,
            g_level=16, xw=(1, 1, 2), ww=(1, 1, 2), xg=(4, 9), wg=(9, 3), bfp=False, rdac=16, radc=256,
            seed=3, scale=1.0, zeros=True)


def _mvm_case(noisy):
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(11))
    if not noisy:
        return engine_args(xs, xsc, wl, wsc)
    return engine_args(xs, xsc, wl, wsc, sigma=np.full(4, 0.05, np.float32), vnoise=0.05, seed=9, call=2)


def _slice_args():
    x = np.random.default_rng(5).standard_normal((40, 72)).astype(np.float32)
    return (x, (1, 1, 2, 2), (8, 8), (16, 8), None, True, 16)


def _levels():
    return np.random.default_rng(6).integers(0, 16, (3, 20, 30)).astype(np.uint8)


# name -> (call(device) -> result as a tuple of arrays, noisy)
OPS = {
    "dpe_mvm": (lambda dev: (_core.dpe_mvm(*_mvm_case(False), device=dev),), False),
    "dpe_mvm noisy": (lambda dev: (_core.dpe_mvm(*_mvm_case(True), device=dev),), True),
    "dpe_conv2d": (lambda dev: _core.dpe_conv2d(*conv_args(CONV), device=dev), False),
    "dpe_conv2d noisy": (lambda dev: _core.dpe_conv2d(*conv_args(CONV, sigma=0.05, vnoise=0.05), device=dev), True),
    "slice_quantize": (lambda dev: _core.slice_quantize(*_slice_args(), device=dev)[:6], False),
    "slice_quantize bfp": (lambda dev: _core.slice_quantize(*_slice_args()[:4], 5, False, None, device=dev)[:6],
                           False),
    "program_conductance": (lambda dev: (_core.program_conductance(_levels(), 16, 1e-5, 1e-7, device=dev),), False),
    "program_conductance noisy": (lambda dev: (_core.program_conductance(_levels(), 16, 1e-5, 1e-7, 0.05, 0.02,
                                                                         0.03, 12345, device=dev),), False),
    "normals": (lambda dev: (_core.normals(11, 1, 5, 3, 5000, device=dev),), "normals"),
}


def _arrays(result):
    return [None if a is None else np.asarray(a) for a in result]


def _assert_same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert (u is None) == (v is None)
        if u is not None:
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("op", sorted(OPS))
def test_device_none_and_cpu_are_the_default_cpu_path(op):
    call, _ = OPS[op]
    none = _arrays(call(None))
    _assert_same(none, _arrays(call("cpu")))
    # no device= at all is the CPU too (the call the library made before device= existed)
    fn_default = {"dpe_mvm": lambda: (_core.dpe_mvm(*_mvm_case(False)),),
                  "slice_quantize": lambda: _core.slice_quantize(*_slice_args())[:6],
                  "normals": lambda: (_core.normals(11, 1, 5, 3, 5000),)}.get(op)
    if fn_default:
        _assert_same(none, _arrays(fn_default()))
    assert any(a is not None and a.size and np.any(a) for a in none)  # a real result, not zeros


@pytest.mark.skipif(not HAVE_CL, reason=NO_CL_REASON)
@pytest.mark.parametrize("op", sorted(OPS))
def test_an_opencl_handle_gives_the_cpu_result(dev, op):
    call, noisy = OPS[op]
    cpu = _arrays(call(None))
    cl = _arrays(call(dev))
    if not noisy or SIMD_NOISE:  # noise off, or the CPU's SIMD noise: the same bits
        _assert_same(cpu, cl)
    elif noisy == "normals":  # the CPU's scalar libm path differs from SLEEF by a few ulp
        np.testing.assert_allclose(cl[0], cpu[0], rtol=0, atol=2e-6)
    else:
        for u, v in zip(cpu, cl):
            if u is not None:
                assert rel(v, u) <= 1e-5


@pytest.mark.parametrize("device, exc", [
    (42, TypeError), (object(), TypeError), (b"cpu", TypeError), (1.0, TypeError),
    ("opencl", ValueError), ("CPU", ValueError), ("cuda", ValueError), ("", ValueError),
])
@pytest.mark.parametrize("op", ["dpe_mvm", "dpe_conv2d", "slice_quantize", "program_conductance", "normals"])
def test_invalid_device_values_raise_naming_device(op, device, exc):
    args = {"dpe_mvm": _mvm_case(False), "dpe_conv2d": conv_args(CONV), "slice_quantize": _slice_args(),
            "program_conductance": (_levels(), 16, 1e-5, 1e-7), "normals": (1, 0, 0, 0, 4)}[op]
    with pytest.raises(exc, match="argument 'device'"):
        getattr(_core, op)(*args, device=device)


def test_device_is_keyword_only_and_normals_takes_no_other_keyword():
    with pytest.raises(TypeError):
        _core.normals(1, 0, 0, 0, 4, None)  # device is keyword-only
    with pytest.raises(TypeError, match="keyword"):
        _core.normals(1, 0, 0, 0, 4, count=4)
    # the caller's keyword dict is not changed by taking device out of it
    kw = {"device": "cpu"}
    _core.normals(1, 0, 0, 0, 4, **kw)
    assert kw == {"device": "cpu"}


@pytest.mark.parametrize("key", [("w", 1), "w", 0, [1, 2]])
def test_weights_key_is_an_opencl_argument_a_value_error_on_the_cpu(key):
    args = _mvm_case(False)
    want = np.asarray(_core.dpe_mvm(*args))
    np.testing.assert_array_equal(np.asarray(_core.dpe_mvm(*args, weights_key=None)), want)
    for device in (None, "cpu"):
        with pytest.raises(ValueError, match="argument 'weights_key'"):
            _core.dpe_mvm(*args, weights_key=key, device=device)
        with pytest.raises(ValueError, match="argument 'weights_key'"):
            _core.dpe_conv2d(*conv_args(CONV), weights_key=key, device=device)
    # the packed CPU forms take no weights_key at all
    packed = _core.dpe_pack(*args[4:16])
    with pytest.raises(TypeError):
        _core.dpe_mvm_packed(packed, *args, weights_key=("w", 1))


@pytest.mark.skipif(not HAVE_CL, reason=NO_CL_REASON)
def test_weights_key_with_an_opencl_handle_keeps_the_weights_resident(dev):
    args = _mvm_case(False)
    key = ("backend-table", 1)
    dev.forget_weights("backend-table")
    try:
        got = np.asarray(_core.dpe_mvm(*args, weights_key=key, device=dev))
        assert key in dev.resident_weights or dev.resident_budget < 1 << 20
        np.testing.assert_array_equal(got, np.asarray(_core.dpe_mvm(*args)))
        np.testing.assert_array_equal(np.asarray(cl_dpe_mvm(dev, *args, weights_key=key)), got)
        with pytest.raises(TypeError, match="unhashable"):
            _core.dpe_mvm(*args, weights_key=[1, 2], device=dev)
    finally:
        dev.forget_weights("backend-table")
    assert key not in dev.resident_weights


REMOVED = ["dpe_mvm", "dpe_conv2d", "slice_quantize", "program_conductance", "normals",
           "attn_update", "attn_apply", "attn_tanh"]
ATTENTION_OPS = ["_attn_update", "_attn_apply", "_attention_tanh"]


def test_the_handle_type_has_no_duplicated_op_methods():
    for name in REMOVED:
        assert not hasattr(_core.OpenCLDevice, name), name
    # what stays on the handle: device state only (the attention ops are _core bindings taking
    # device=, as every other op)
    for name in ("build", "release", "forget_weights", "mvm_uses_tiled"):
        assert hasattr(_core.OpenCLDevice, name), name


@pytest.mark.skipif(not HAVE_CL, reason=NO_CL_REASON)
def test_an_opencl_handle_instance_has_no_op_methods(dev):
    for name in REMOVED:
        with pytest.raises(AttributeError):
            getattr(dev, name)


@pytest.mark.parametrize("op", ["dpe_mvm", "dpe_conv2d", "slice_quantize", "program_conductance", "normals"]
                         + ATTENTION_OPS)
def test_every_op_signature_ends_with_keyword_only_device(op):
    import inspect
    params = inspect.signature(getattr(_core, op)).parameters
    device = params["device"]
    assert device.kind is inspect.Parameter.KEYWORD_ONLY and device.default is None
    assert list(params)[-1] == "device"
    assert ("weights_key" in params) == (op in ("dpe_mvm", "dpe_conv2d"))
