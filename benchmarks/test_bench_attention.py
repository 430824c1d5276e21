"""Attention context at T=512, D=768: update_outgoing against the NumPy transcription of
spec section 9 (which allocates a covariance, a denominator and an output per call), and
apply against a bare sgemm of the same shape. Each subject records the core's bytes
allocated per call after the first (expected 0)."""
import os
import sys

import numpy as np
import pytest

import pyfastpim
from pyfastpim import memory

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from reference import attention_ref as ref  # noqa: E402

T, D = 512, 768


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, D)).astype(np.float32)
    y = rng.standard_normal((T, D)).astype(np.float32)
    w = (rng.standard_normal((D, D)) * 0.05).astype(np.float32)
    return x, y, w


def allocated_per_call(fn):
    fn()  # first call sizes the workspace
    with memory.trace() as t:
        fn()
    return {"allocated_bytes_per_call": t.allocated_bytes, "peak_bytes_per_call": t.peak_bytes,
            "copies_per_call": t.copies}


def test_update_outgoing(benchmark, data):
    x, y, _ = data
    ctx = pyfastpim.AttentionContext(update_rate=0.01)
    fn = lambda: ctx.update_outgoing(x, y)  # noqa: E731
    benchmark.group = "attention_update_T512_D768"
    benchmark.extra_info.update(role="subject", targets={"speedup_vs_reference": 3.0}, **allocated_per_call(fn))
    benchmark(fn)


def test_update_outgoing_numpy(benchmark, data):
    x, y, _ = data
    state = {"out": np.zeros((D, D), np.float32)}

    def fn():
        state["out"] = ref.update(state["out"], x, y, 0.01)

    benchmark.group = "attention_update_T512_D768"
    benchmark.extra_info["role"] = "reference"
    benchmark(fn)


def test_apply(benchmark, data):
    x, _, w = data
    ctx = pyfastpim.AttentionContext(strength=0.5)
    ctx.incoming = w
    out = np.empty_like(x)
    fn = lambda: ctx.apply(x, out=out)  # noqa: E731
    benchmark.group = "attention_apply_T512_D768"
    benchmark.extra_info.update(role="subject", targets={"roofline": 1.2}, **allocated_per_call(fn))
    benchmark(fn)


def test_apply_sgemm_roofline(benchmark, data):
    x, _, w = data
    out = np.empty_like(x)
    benchmark.group = "attention_apply_T512_D768"
    benchmark.extra_info["role"] = "roofline"
    benchmark(lambda: np.dot(x, w, out=out))


def test_gradients(benchmark, data):
    x, y, w = data
    ctx = pyfastpim.AttentionContext(strength=0.5)
    ctx.incoming = w
    out = np.empty_like(x)
    fn = lambda: ctx.gradients(x, y, out=out)  # noqa: E731
    benchmark.group = "attention_gradients_T512_D768"
    benchmark.extra_info.update(role="subject", **allocated_per_call(fn))
    benchmark(fn)


def test_gradients_numpy(benchmark, data):
    x, y, w = data
    benchmark.group = "attention_gradients_T512_D768"
    benchmark.extra_info["role"] = "reference"
    benchmark(lambda: ref.gradients(x, y, w, 0.5))
