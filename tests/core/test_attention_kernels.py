"""The attention family's split (issue 10): the AttentionContext orchestration lives in
pyfastpim/attention.py, the C layer binds stateless kernels (``_core._attn_*``) that re-check
every size they hand to C and never import a Python module."""
import os
import threading

import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core
from pyfastpim.attention import _ContextCore

from reference import attention_ref as ref

F32 = np.float32
from helpers import ROOT


def test_the_binding_imports_no_python_module():
    src = open(os.path.join(ROOT, "csrc", "python", "bind_attention.c")).read()
    assert "PyImport" not in src and "dpe_matmul\"" not in src


def test_core_name_is_the_cpu_context():
    assert _core.AttentionContext is _ContextCore
    assert issubclass(pyfastpim.AttentionContext, _core.AttentionContext)
    c = _core.AttentionContext(0.5, 0.25, 3)
    assert (c.update_rate, c.strength, c.embed_dim) == (0.5, 0.25, 3)


def test_kernels_recheck_sizes_instead_of_crashing():
    ws = _core.AttentionWorkspace()
    w = _core._attn_new((4, 4), True)
    x = pyfastpim.asarray(np.ones((3, 4), F32))
    bad_out = _core._attn_new((3, 5), False)
    with pytest.raises(ValueError, match="out"):
        _core._attn_apply(ws, bad_out, x, w, 1.0, "x")
    with pytest.raises(ValueError, match="'x'"):
        _core._attn_apply(ws, _core._attn_new((3, 5), False), pyfastpim.asarray(np.ones((3, 5), F32)), w, 1.0, "x")
    with pytest.raises(ValueError, match="exceed"):
        _core._attn_update(ws, w, x, x, 4, 4, 0.5, False)  # t larger than the rows
    with pytest.raises(ValueError, match="exceed"):
        _core._attn_update(ws, _core._attn_new((5, 5), True), x, x, 3, 5, 0.5, False)  # d larger than the columns
    with pytest.raises(ValueError, match="outgoing"):
        _core._attn_update(ws, w, x, x, 3, 3, 0.5, False)  # outgoing is not d x d
    with pytest.raises(TypeError, match="float32"):
        _core._attn_apply(ws, _core._attn_new((3, 4), False), pyfastpim.asarray(np.ones((3, 4))), w, 1.0, "x")
    a = np.ones((3, 4), F32)
    a.flags.writeable = False  # a read-only out
    with pytest.raises(ValueError, match="writable"):
        _core._attn_apply(ws, pyfastpim.asarray(a), x, w, 1.0, "x")
    with pytest.raises(ValueError, match="dpe_matmul"):
        _core._attn_epilogue(_core._attn_new((3, 4), False), x, _core._attn_new((2, 4), False), 0.5)
    with pytest.raises(ValueError, match="negative"):
        _core._attn_new((-1, 2), False)


def test_kernels_match_the_reference():
    rng = np.random.default_rng(3)
    xn = rng.standard_normal((7, 6)).astype(F32)
    wn = (rng.standard_normal((6, 6)) * 0.3).astype(F32)
    gn = rng.standard_normal((7, 6)).astype(F32)
    ws = _core.AttentionWorkspace()
    x, w, g = (pyfastpim.asarray(a) for a in (xn, wn, gn))
    out = _core._attn_new((7, 6), False)
    _core._attn_apply(ws, out, x, w, 0.5, "x")
    np.testing.assert_allclose(np.asarray(out), ref.apply(xn, wn, 0.5), rtol=1e-5, atol=1e-5)
    gx = _core._attn_new((7, 6), False)
    ds = _core._attn_gradients(ws, gx, x, g, w, 0.5)
    assert ds == _core._attn_gradients(ws, None, x, g, w, 0.5)  # grad_strength alone
    c = _ContextCore(strength=0.5)
    c.incoming = wn
    want_gx, want_ds = c.gradients(xn, gn)
    np.testing.assert_array_equal(np.asarray(gx), want_gx)
    assert ds == want_ds
    o = _core._attn_new((6, 6), True)
    _core._attn_update(ws, o, x, x, 7, 6, 0.25, False)
    np.testing.assert_allclose(np.asarray(o), ref.update(np.zeros((6, 6), F32), xn, xn, 0.25), rtol=1e-5, atol=1e-6)
    assert ws.nbytes() > 0
    xf = xn.copy()
    xf[1, 2] = np.inf
    fin = _core._attn_finite(pyfastpim.asarray(xf))
    assert np.asarray(fin)[1, 2] == 0 and np.isfinite(np.asarray(fin)).all()
    same = pyfastpim.asarray(xn)
    assert _core._attn_finite(same) is same


def test_module_forward_sets_strength_and_applies_under_one_guard():
    # nn.AttentionContext.forward used to set the C context's strength and apply in two
    # separately locked calls: another thread setting the context's strength in between changed
    # the forward's result. Now the forward's strength is what its apply uses, always.
    torch = pytest.importorskip("torch")
    from pyfastpim.nn import AttentionContext
    m = AttentionContext(strength=0.5)
    m.incoming = torch.eye(16) * 0.5
    x = torch.randn(64, 16)
    with torch.no_grad():
        want = m(x).clone()
    stop = threading.Event()

    def meddle():
        k = 0
        while not stop.is_set():
            m.context.strength = (3.0, -2.0)[k % 2]
            k += 1

    t = threading.Thread(target=meddle)
    t.start()
    try:
        for _ in range(300):
            with torch.no_grad():
                got = m(x)
            assert torch.equal(got, want)
    finally:
        stop.set()
        t.join()
    # backward uses the forward's strength too
    xg = x.clone().requires_grad_(True)
    m(xg).sum().backward()
    assert m.strength.grad is not None and torch.isfinite(m.strength.grad)


def test_private_apply_stores_the_strength():
    c = _ContextCore(strength=0.0)
    c.incoming = np.eye(4, dtype=F32)
    x = np.ones((2, 4), F32)
    out = c._apply(x, None, None, None, False, strength=2.0)
    assert c.strength == 2.0
    np.testing.assert_allclose(out, x + 2.0 / 4 * x, rtol=1e-6)
    gx, ds = c._gradients(x, x, None, strength=0.0)
    assert c.strength == 0.0 and gx is x
