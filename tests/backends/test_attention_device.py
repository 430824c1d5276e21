"""The attention kernels' device= (issue 10: one binding per op taking device=).

``_core._attn_update``, ``_core._attn_apply`` and ``_core._attention_tanh`` take a keyword-only
``device=`` as every other op: None or 'cpu' runs csrc/cpu/attention.c, an OpenCLDevice runs
csrc/opencl/attention.c (kernels/attention.cl). Each case runs on both backends (the `backend`
fixture; OpenCL skips with a reason when there is none) and is compared with the NumPy
transcription of the spec (tests/reference/attention_ref.py) and with the CPU binding bit for bit:
the tanh, and the update and apply, whose products are fma chains in k order on both devices
(they once were OpenBLAS sgemm calls on the CPU, equal only within float32 rounding). Bad arguments raise the same exception with the same message on both
devices: the checks are one code path, run before the device is called.
"""
import multiprocessing as mp

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyfastpim
from pyfastpim import _core
from helpers import HAVE_CL, NO_CL_REASON
from reference import attention_ref as ref

F32 = np.float32


def arr(a, writable=False):
    """a as the float32 pyfastpim.Array the bindings take (zero-copy for float32 C-contiguous a)."""
    return _core._attn_view(a, writable, "a")


def with_nonfinite(a, rng, k=3):
    """a copy of a with up to k entries replaced by nan, +inf, -inf."""
    a = a.copy()
    if a.size:
        for v, i in zip((np.nan, np.inf, -np.inf), rng.integers(0, a.size, k)):
            a.flat[i] = v
    return a


def update(backend, o0, x, y, t, d, rate, step=False, ws=None):
    o = o0.copy()
    _core._attn_update(ws, arr(o, True), arr(x), arr(y), t, d, rate, step, device=backend.dev)
    return o


def apply(backend, x, w, s, out=None, ws=None):
    res = _core._attn_new(x.shape, False) if out is None else arr(out, True)
    _core._attn_apply(ws, res, arr(x), arr(w), s, "x", device=backend.dev)
    return np.asarray(res)


def close(got, want):
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


CPU = type("Cpu", (), {"dev": None, "name": "cpu"})()


# ---- results -----------------------------------------------------------------------------------

@given(st.integers(1, 80), st.integers(1, 24), st.integers(0, 5), st.integers(0, 3), st.integers(0, 4),
       st.sampled_from([0.05, 0.5, 1.0]), st.booleans(), st.integers(0, 2 ** 32 - 1))
@settings(deadline=None)
def test_update_matches_the_reference_and_the_cpu(backend, T, D, ex, ey, extra_rows, rate, nonfinite, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T + extra_rows, D + ex)).astype(F32)
    y = (rng.standard_normal((T + extra_rows, D + ey)) * 3).astype(F32)
    o0 = (rng.standard_normal((D, D)) * 0.5).astype(F32)
    if nonfinite:
        x, y = with_nonfinite(x, rng), with_nonfinite(y, rng)
    got = update(backend, o0, x, y, T, D, rate)  # the first T rows and D columns; T = 1 included
    close(got, ref.update(o0, x[:T, :D], y[:T, :D], rate))
    if backend.dev is not None:
        np.testing.assert_array_equal(got, update(CPU, o0, x, y, T, D, rate))
    # a second update blends into the first one's result, as a context's repeated updates do
    close(update(backend, got, x, y, T, D, rate), ref.update(ref.update(o0, x[:T, :D], y[:T, :D], rate),
                                                             x[:T, :D], y[:T, :D], rate))


def test_update_with_no_rows_or_a_non_positive_rate_leaves_outgoing_unchanged(backend):
    o0 = np.arange(16, dtype=F32).reshape(4, 4)
    x = np.ones((3, 4), F32)
    for t, rate in ((0, 0.5), (3, 0.0), (3, -1.0)):
        np.testing.assert_array_equal(update(backend, o0, x, x, t, 4, rate), o0)


@pytest.mark.parametrize("shape", [(0, 6), (1, 6), (7, 6), (3, 5, 6), (2, 1, 33), (6,)])
@pytest.mark.parametrize("nonfinite", [False, True])
def test_apply_matches_the_reference_and_the_cpu(backend, shape, nonfinite):
    rng = np.random.default_rng(len(shape) * 100 + shape[-1] + nonfinite)
    d = shape[-1]
    x = (rng.standard_normal(shape) * 2).astype(F32)
    w = (rng.standard_normal((d, d)) * 0.3).astype(F32)
    if nonfinite:
        x = with_nonfinite(x, rng)
        w[0, -1] = np.inf  # a non-finite product column: 0 on every device
    for s in (0.7, -2.5):
        with np.errstate(invalid="ignore", over="ignore"):  # the reference's inf products, then fin()
            want = ref.apply(x, w, s)
        got = apply(backend, x, w, s)
        assert got.shape == x.shape and got.dtype == F32
        close(got, want)
        assert np.isfinite(got).all()
        if backend.dev is not None:
            np.testing.assert_array_equal(got, apply(CPU, x, w, s))
        inplace = x.copy()
        apply(backend, inplace, w, s, out=inplace)  # out=x itself, as on the CPU
        close(inplace, want)


@pytest.mark.parametrize("shape", [(), (0,), (9,), (3, 4, 5)])
def test_tanh_is_bit_identical_to_the_cpu(backend, shape):
    rng = np.random.default_rng(sum(shape) + len(shape))
    x = (rng.standard_normal(shape) * 6).astype(F32)
    special = np.array([0.0, -0.0, 0.625, -0.625, 20.0, -40.0, 1e30, np.inf, -np.inf, np.nan], F32)
    for a in (x, special, with_nonfinite(x.reshape(-1), rng)):
        got = np.asarray(_core._attention_tanh(a, device=backend.dev))
        assert got.shape == np.shape(a)
        np.testing.assert_array_equal(got, np.asarray(_core._attention_tanh(a)))
        fin = np.where(np.isfinite(a), a, F32(0))
        np.testing.assert_allclose(got, np.tanh(fin.astype(np.float64)), rtol=2e-6, atol=2e-7)


def test_workspace_none_is_a_temporary_one_and_opencl_uses_none(backend):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 12)).astype(F32)
    w = rng.standard_normal((12, 12)).astype(F32)
    o0 = np.zeros((12, 12), F32)
    ws = _core.AttentionWorkspace()
    np.testing.assert_array_equal(update(backend, o0, x, x, 40, 12, 0.5, ws=ws), update(backend, o0, x, x, 40, 12, 0.5))
    np.testing.assert_array_equal(apply(backend, x, w, 0.5, ws=ws), apply(backend, x, w, 0.5))
    assert (ws.nbytes() == 0) == (backend.dev is not None)  # the device kernels need no host scratch


# ---- step mode -------------------------------------------------------------------------------------

def test_step_update_runs_on_the_cpu_and_opencl_refuses_it_naming_device(backend):
    rng = np.random.default_rng(8)
    xv, yv = rng.standard_normal(10).astype(F32), rng.standard_normal(12).astype(F32)
    o0 = (rng.standard_normal((10, 10)) * 0.1).astype(F32)
    want = update(CPU, o0, xv, yv, 1, 10, 0.3, step=True)
    close(want, ref.update_step(o0, xv, yv, 0.3))
    if backend.dev is None:
        np.testing.assert_array_equal(update(backend, o0, xv, yv, 1, 10, 0.3, step=True), want)
        return
    o = o0.copy()
    with pytest.raises(NotImplementedError, match="argument 'device'"):
        _core._attn_update(None, arr(o, True), arr(xv), arr(yv), 1, 10, 0.3, True, device=backend.dev)
    np.testing.assert_array_equal(o, o0)  # untouched
    # what a context on the device does: the step update runs on the CPU, equal to a CPU context
    ctx = pyfastpim.AttentionContext(update_rate=0.3, device=backend.dev)
    ctx.outgoing = o0
    ctx.update_outgoing_step(xv, yv)
    np.testing.assert_array_equal(ctx.outgoing, want)


# ---- argument errors: one code path -----------------------------------------------------------------

def _bad_calls():
    """(label, call(device)) of invalid calls of the three bindings."""
    x = arr(np.ones((3, 4), F32))
    w = arr(np.eye(4, dtype=F32))
    o4 = lambda: arr(np.zeros((4, 4), F32), True)  # noqa: E731
    ro = np.zeros((4, 4), F32)
    ro.flags.writeable = False
    f64 = pyfastpim.asarray(np.ones((3, 4)))
    big = np.zeros((5, 4), F32)
    U, A = _core._attn_update, _core._attn_apply
    return [
        ("update: outgoing not square", lambda d: U(None, arr(np.zeros((4, 3), F32), True), x, x, 3, 4, 0.5, False,
                                                    device=d)),
        ("update: outgoing float64", lambda d: U(None, pyfastpim.asarray(np.zeros((4, 4))), x, x, 3, 4, 0.5, False,
                                                 device=d)),
        ("update: outgoing read-only", lambda d: U(None, pyfastpim.asarray(ro), x, x, 3, 4, 0.5, False, device=d)),
        ("update: outgoing not d x d", lambda d: U(None, o4(), x, x, 3, 3, 0.5, False, device=d)),
        ("update: d exceeds the columns", lambda d: U(None, arr(np.zeros((5, 5), F32), True), x, x, 3, 5, 0.5, False,
                                                      device=d)),
        ("update: t exceeds the rows", lambda d: U(None, o4(), x, x, 4, 4, 0.5, False, device=d)),
        ("update: t negative", lambda d: U(None, o4(), x, x, -1, 4, 0.5, False, device=d)),
        ("update: x float64", lambda d: U(None, o4(), f64, x, 3, 4, 0.5, False, device=d)),
        ("update: rate nan", lambda d: U(None, o4(), x, x, 3, 4, float("nan"), False, device=d)),
        ("update: rate inf", lambda d: U(None, o4(), x, x, 3, 4, float("inf"), False, device=d)),
        ("update: step with rows", lambda d: U(None, o4(), x, x, 1, 4, 0.5, True, device=d)),
        ("update: ws of a wrong type", lambda d: U([], o4(), x, x, 3, 4, 0.5, False, device=d)),
        ("update: x not an Array", lambda d: U(None, o4(), np.ones((3, 4), F32), x, 3, 4, 0.5, False, device=d)),
        ("update: too few arguments", lambda d: U(None, o4(), x, x, 3, 4, 0.5, device=d)),
        ("update: unknown keyword", lambda d: U(None, o4(), x, x, 3, 4, 0.5, False, device=d, rate=1.0)),
        ("apply: out of another size", lambda d: A(None, _core._attn_new((3, 5), False), x, w, 1.0, "x", device=d)),
        ("apply: x of another D", lambda d: A(None, _core._attn_new((3, 5), False), arr(np.ones((3, 5), F32)), w,
                                              1.0, "x", device=d)),
        ("apply: x float64", lambda d: A(None, _core._attn_new((3, 4), False), f64, w, 1.0, "x", device=d)),
        ("apply: out read-only", lambda d: A(None, pyfastpim.asarray(ro[:3]), x, w, 1.0, "x", device=d)),
        ("apply: incoming not square", lambda d: A(None, _core._attn_new((3, 4), False), x,
                                                   arr(np.ones((4, 3), F32)), 1.0, "x", device=d)),
        ("apply: out overlaps incoming", lambda d: (lambda m: A(None, m, arr(np.ones((4, 4), F32)), m, 1.0, "x",
                                                                device=d))(o4())),
        ("apply: out partially overlaps x", lambda d: A(None, arr(big[1:4], True), arr(big[0:3]), w, 1.0, "x",
                                                        device=d)),
        ("apply: ws of a wrong type", lambda d: A(object(), _core._attn_new((3, 4), False), x, w, 1.0, "x",
                                                  device=d)),
        ("tanh: not numbers", lambda d: _core._attention_tanh("abc", device=d)),
        ("tanh: unknown keyword", lambda d: _core._attention_tanh(x, device=d, out=None)),
        ("tanh: no argument", lambda d: _core._attention_tanh(device=d)),
    ]


def _error(call, device):
    try:
        call(device)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return type(exc), str(exc)
    return None, "no error"


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_the_same_bad_arguments_raise_the_same_error_on_every_device(backend, case):
    label, call = _bad_calls()[case]
    want = _error(call, None)
    assert want[0] in (ValueError, TypeError), (label, want)
    assert _error(call, "cpu") == want, label
    got = _error(call, backend.dev)
    assert got == want, (label, got, want)


def test_errors_name_the_argument():
    # the messages the OpenCL handle methods raised, now the one binding's (both devices)
    msgs = {label: _error(call, None)[1] for label, call in _bad_calls()}
    assert "'outgoing'" in msgs["update: d exceeds the columns"] and "exceed" in msgs["update: d exceeds the columns"]
    assert "'t'" in msgs["update: t exceeds the rows"] and "'t'" in msgs["update: t negative"]
    assert "'rate'" in msgs["update: rate nan"] and "finite" in msgs["update: rate inf"]
    assert "'x'" in msgs["update: x float64"] and "float32" in msgs["update: x float64"]
    assert "'x'" in msgs["update: step with rows"]
    assert "'ws'" in msgs["update: ws of a wrong type"] and "'ws'" in msgs["apply: ws of a wrong type"]
    assert "'device'" in msgs["update: unknown keyword"] and "'device'" in msgs["tanh: unknown keyword"]
    assert "'out'" in msgs["apply: out overlaps incoming"] and "'out'" in msgs["apply: out partially overlaps x"]
    assert "'x'" in msgs["apply: x of another D"] and "'incoming'" in msgs["apply: incoming not square"]
    assert "writable" in msgs["apply: out read-only"] and "writable" in msgs["update: outgoing read-only"]


def test_a_failed_check_leaves_outgoing_and_out_untouched(backend):
    o = np.full((4, 4), 7.0, F32)
    x = np.ones((3, 4), F32)
    with pytest.raises(ValueError):
        _core._attn_update(None, arr(o, True), arr(x), arr(x), 4, 4, 0.5, False, device=backend.dev)
    np.testing.assert_array_equal(o, np.full((4, 4), 7.0, F32))


# ---- device= itself ----------------------------------------------------------------------------

def _valid_calls():
    x = arr(np.ones((3, 4), F32))
    w = arr(np.eye(4, dtype=F32))
    return {
        "_attn_update": lambda **kw: _core._attn_update(None, arr(np.zeros((4, 4), F32), True), x, x, 3, 4, 0.5,
                                                        False, **kw),
        "_attn_apply": lambda **kw: _core._attn_apply(None, _core._attn_new((3, 4), False), x, w, 1.0, "x", **kw),
        "_attention_tanh": lambda **kw: _core._attention_tanh(x, **kw),
    }


@pytest.mark.parametrize("op", ["_attn_update", "_attn_apply", "_attention_tanh"])
def test_a_bad_device_raises_naming_device(op):
    call = _valid_calls()[op]
    call(device=None)
    call(device="cpu")
    for bad in ("gpu", "opencl", "CPU "):  # strings are resolved by pyfastpim.resolve_device, not here
        with pytest.raises(ValueError, match="argument 'device'"):
            call(device=bad)
    for bad in (object(), 0, ("opencl", 0), _core.AttentionWorkspace()):
        with pytest.raises(TypeError, match="argument 'device'"):
            call(device=bad)


@pytest.mark.skipif(not HAVE_CL, reason=NO_CL_REASON)
def test_a_forked_child_refuses_the_device_and_keeps_the_cpu(dev):
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(F32)
    _core._attention_tanh(x, device=dev)  # the parent has used the device
    want = np.asarray(_core._attention_tanh(x))
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child(q):
        out = []
        for call in (lambda: _core._attention_tanh(x, device=dev),
                     lambda: apply(type("B", (), {"dev": dev})(), x, np.eye(4, dtype=F32), 1.0),
                     lambda: update(type("B", (), {"dev": dev})(), np.zeros((4, 4), F32), x, x, 5, 4, 0.5)):
            try:
                call()
                out.append("no error")
            except RuntimeError as exc:
                out.append(str(exc))
        out.append(np.asarray(_core._attention_tanh(x)).tolist())
        q.put(out)

    p = ctx.Process(target=child, args=(q,))
    p.start()
    try:
        msgs = q.get(timeout=120)
    except Exception:
        p.kill()
        p.join()
        pytest.fail("the forked child hung on OpenCL")
    p.join(120)
    assert p.exitcode == 0
    for m in msgs[:3]:
        assert "forked" in m and "OpenCL" in m, m
    np.testing.assert_array_equal(np.asarray(msgs[3], F32), want)
