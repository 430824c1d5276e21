"""Misaligned buffers (issue 18 item 5): a C-contiguous float32 array whose address is not a multiple
of 4 (a NumPy view at byte offset 1 into a byte buffer) is copied once (counted as a host copy by
pyfastpim.memory) before any kernel reads it, so every entry point computes exactly what it computes
for the aligned array, with no undefined behaviour (these tests run under `make sanitize`, where
UBSan aborts on a misaligned load). A misaligned writable `out=` is refused with a ValueError."""
import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core

from helpers import HGS, LGS, make_case, needs_cl


def misaligned(a):
    """A copy of a in memory at an odd byte address (offset 1 into a bytearray), C-contiguous."""
    a = np.ascontiguousarray(a)
    buf = bytearray(a.nbytes + a.itemsize + 1)
    v = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    v[...] = a
    assert v.flags.c_contiguous and (a.itemsize == 1 or v.ctypes.data % a.itemsize != 0)
    return v


def host_copies(fn):
    """(result, number of host copies) of fn()."""
    with pyfastpim.memory.trace() as t:
        r = fn()
    return r, t.by_kind["host_copy"][0]


def same(a, b):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif a is None:
        assert b is None
    elif isinstance(a, float):
        assert a == b
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def check(fn, aligned_args, bad_positions, expect_copies=None):
    """fn(*args) with the arrays at bad_positions misaligned equals fn(*aligned_args); one counted
    host copy per misaligned array."""
    ref = fn(*aligned_args)
    args = list(aligned_args)
    for i in bad_positions:
        args[i] = misaligned(args[i])
    got, copies = host_copies(lambda: fn(*args))
    same(got, ref)
    assert copies >= (len(bad_positions) if expect_copies is None else expect_copies)
    return got


def test_asarray_copies_misaligned_and_counts_it():
    a = np.arange(10, dtype=np.float32)
    v = misaligned(a)
    arr, copies = host_copies(lambda: pyfastpim.asarray(v))
    assert copies == 1 and arr.owns_data
    assert np.asarray(arr).ctypes.data % 4 == 0
    np.testing.assert_array_equal(np.asarray(arr), a)
    # aligned: still zero-copy
    arr, copies = host_copies(lambda: pyfastpim.asarray(a))
    assert copies == 0 and not arr.owns_data
    with pytest.raises(ValueError, match="aligned"):
        pyfastpim.asarray(v, writable=True)
    # 1-byte elements are always aligned: zero-copy even at an odd address
    u = misaligned(np.arange(7, dtype=np.uint8))
    arr, copies = host_copies(lambda: pyfastpim.asarray(u))
    assert copies == 0


def test_slice_quantize_entry_point():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((2, 13, 37)).astype(np.float32)
    for bw_e in (None, 3):
        check(lambda d: tuple(_core.slice_quantize(d, (1, 1, 2, 4), (4, 8), (4, 8), bw_e, True, None)[:6]),
              [data], [0])
    w = rng.standard_normal((37, 9)).astype(np.float32)
    check(lambda d: tuple(pyfastpim.slice_quantize(d, (1, 1, 2, 4), (8, 8), dequant=True, g_level=16)[:6]), [w], [0])


def test_dpe_mvm_entry_point(isa):  # every ISA's kernels read the copied (aligned) buffers
    rng = np.random.default_rng(1)
    xw, ww, xg, wg = (1, 1, 2), (1, 1, 2), (1, 8), (8, 4)
    xs, xsc, wl, wsc = make_case(rng, 2, 5, 19, 7, 8, xw, ww, xg, wg, 16)
    cond = (wl * ((HGS - LGS) / 15) + LGS).astype(np.float32) * np.float32(1.01)
    sig = np.full(16, 0.05, np.float32)

    def mvm(xsc_, wsc_, cond_, sig_):
        return np.asarray(_core.dpe_mvm(xs, xsc_, xg, xw, wl, cond_, wsc_, wg, ww, 8, 16, 16, [256] * 3, HGS, LGS,
                                        sig_, 0.05, 5, 2))
    check(mvm, [xsc, wsc, cond, sig], [0, 1, 2, 3])
    out = np.empty((2, 5, 7), np.float32)
    with pytest.raises(ValueError, match="out"):
        _core.dpe_mvm(xs, xsc, xg, xw, wl, cond, wsc, wg, ww, 8, 16, 16, [256] * 3, HGS, LGS, sig, 0.05, 5, 2,
                      misaligned(out))


def conv_args(img, wsc, dequant=True, bfp=False):
    rng = np.random.default_rng(2)
    K = img.shape[1] * 9
    wl = rng.integers(0, 4, (3, K, 5)).astype(np.uint8)
    return (img, (3, 3), (1, 2), (1, 0), (1, 1), (1, 8), (1, 1, 2, 2), bfp, wl, None, wsc, (8, 4), (1, 1, 1), 8, 16,
            16, [256] * 3, HGS, LGS, None, 0.0, 7, 3, dequant)


@pytest.mark.parametrize("bfp", [False, True])
def test_dpe_conv2d_im2col_entry_point(isa, bfp):
    rng = np.random.default_rng(3)
    img = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    wsc = rng.random((4, 2)).astype(np.float32)

    def conv(img_, wsc_):
        out, dq = _core.dpe_conv2d(*conv_args(img_, wsc_, bfp=bfp))
        return np.asarray(out), np.asarray(dq)
    check(conv, [img, wsc], [0, 1])
    # the whole engine path (torch-free NumPy input)
    eng = pyfastpim.DPETensor(write_variation=0, read_variation=0, vnoise=0, rate_stuck_HGS=0, seed=1)
    ws = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(8, 4), quant_gran=(8, 4))
    ws.slice_data_imp(eng, rng.standard_normal((27, 4)).astype(np.float32))
    check(lambda x: eng.forward_conv2d(x, ws, 3, input_slice=(1, 1, 2, 2), input_paral_size=(1, 8),
                                       input_quant_gran=(1, 8), return_dequant=True), [img], [0])


def test_attention_entry_points():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal((6, 8)).astype(np.float32)
    g = rng.standard_normal((6, 8)).astype(np.float32)
    inc = rng.standard_normal((8, 8)).astype(np.float32)

    def ctx():
        c = _core.AttentionContext(0.3, 0.7)
        return c

    def update(x_, y_):
        c = ctx()
        c.update_outgoing(x_, y_)
        c.update_outgoing_step(x_[0], y_[1])
        return np.array(c.outgoing)
    check(update, [x, y], [0, 1], expect_copies=2)

    def with_incoming(inc_):
        c = ctx()
        c.incoming = inc_
        return c

    def apply(x_, inc_):
        c = with_incoming(inc_)
        return np.asarray(c.apply(x_)), np.asarray(c.apply_step(x_[2]))
    check(apply, [x, inc], [0, 1])

    def grads(x_, g_):
        gx, ds = with_incoming(inc).gradients(x_, g_)
        return np.asarray(gx), ds
    check(grads, [x, g], [0, 1])
    check(lambda v: np.asarray(_core._attention_tanh(v)), [x.ravel() * 3], [0])
    with pytest.raises(ValueError, match="out"):
        with_incoming(inc).apply(x, out=misaligned(np.empty_like(x)))


@needs_cl
def test_opencl_entry_points():
    dev = pyfastpim.resolve_device("opencl")
    rng = np.random.default_rng(5)
    data = rng.standard_normal((13, 37)).astype(np.float32)
    check(lambda d: tuple(_core.slice_quantize(d, (1, 1, 2, 4), (4, 8), (4, 8), None, True, 16, device=dev)[:6]), [data], [0])
    img = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    wsc = rng.random((4, 2)).astype(np.float32)

    def conv(img_, wsc_):
        out, dq = pyfastpim.cl_dpe_conv2d(dev, *conv_args(img_, wsc_))
        return np.asarray(out), np.asarray(dq)
    ref = conv(img, wsc)
    same(ref, tuple(np.asarray(a) for a in _core.dpe_conv2d(*conv_args(img, wsc))))
    check(conv, [img, wsc], [0, 1])
    ctx = pyfastpim.AttentionContext(0.3, 0.7, device="opencl")
    x = rng.standard_normal((6, 8)).astype(np.float32)
    ctx.incoming = rng.standard_normal((8, 8)).astype(np.float32)
    check(lambda x_: np.asarray(ctx.apply(x_)), [x], [0])
