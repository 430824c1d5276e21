"""The OpenCL resident-weights cache (issue 18 item 4): entries die with their SlicedData, the cache
is bounded by bytes (handle.resident_budget), and training (re-programming every step) keeps device
buffers and the process's memory flat."""
import gc
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the training test uses torch")

import pyfastpim
from pyfastpim import _core
from pyfastpim.nn import LinearMem

pytestmark = pytest.mark.skipif(_core.cl_devices()[0] == 0,
                                reason="no OpenCL platform (install pocl-opencl-icd to run these tests)")
SANITIZED = os.environ.get("PYFASTPIM_SANITIZED") == "1"
S8 = (1, 1, 2, 4)


@pytest.fixture
def engine():
    eng = pyfastpim.DPETensor(device="opencl", seed=1, radc=2 ** 10)
    handle = eng._cl
    handle.release()
    budget = handle.resident_budget
    yield eng
    handle.resident_budget = budget
    handle.release()


def weights(eng, rows, cols, seed):
    ws = pyfastpim.SlicedData(S8, is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32))
    return ws


def product(eng, ws, x):
    return np.asarray(eng.forward_linear(x, ws, S8)[0])


def set_bytes(ws):
    return ws._levels.nbytes + (0 if ws._conductance is None else ws._conductance.nbytes) + ws._gran_scale[0].nbytes


def test_entries_die_with_their_sliced_data(engine):
    h = engine._cl
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    a, b = weights(engine, 64, 48, 1), weights(engine, 64, 48, 2)
    product(engine, a, x)
    product(engine, b, x)
    keys = set(h.resident_weights)
    assert {(id(a), a._version), (id(b), b._version)} <= keys
    assert h.resident_bytes == sum(h.resident_weights.values()) == set_bytes(a) + set_bytes(b)
    del a
    gc.collect()
    assert set(h.resident_weights) == {(id(b), b._version)}
    assert h.resident_bytes == set_bytes(b)
    del b
    gc.collect()
    assert h.resident_weights == {} and h.resident_bytes == 0


def test_forget_weights_and_explicit_keys(engine):
    h = engine._cl
    ws = weights(engine, 40, 24, 3)
    x = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32)
    engine.reset(5)
    ref = product(engine, ws, x)
    key = (id(ws), ws._version)
    assert key in h.resident_weights
    h.forget_weights(id(ws))
    assert key not in h.resident_weights and h.resident_bytes == 0
    engine.reset(5)  # the same noise: the weights made resident again give the same product
    np.testing.assert_array_equal(product(engine, ws, x), ref)
    assert key in h.resident_weights
    h.forget_weights(key)  # a whole key works too
    assert h.resident_weights == {}
    with pytest.raises(TypeError):
        h.forget_weights([1])


def test_cache_is_bounded_by_bytes(engine):
    h = engine._cl
    x = np.random.default_rng(2).standard_normal((2, 96)).astype(np.float32)
    sets = [weights(engine, 96, 64, s) for s in range(6)]
    one = set_bytes(sets[0])
    h.resident_budget = 2 * one + one // 2  # room for two sets
    for ws in sets:
        product(engine, ws, x)
        assert h.resident_bytes <= h.resident_budget
    assert len(h.resident_weights) == 2
    # the two most recently used stay
    assert set(h.resident_weights) == {(id(ws), ws._version) for ws in sets[-2:]}
    # a budget below one set: nothing is kept, results are unchanged
    engine_free = pyfastpim.DPETensor(device="opencl", seed=1, radc=2 ** 10, write_variation=0, read_variation=0,
                                      vnoise=0, rate_stuck_HGS=0)
    ws = weights(engine_free, 96, 64, 9)
    h.resident_budget = 1 << 40
    ref = product(engine_free, ws, x)
    h.resident_budget = set_bytes(ws) // 2
    assert h.resident_weights == {}
    np.testing.assert_array_equal(product(engine_free, ws, x), ref)
    assert h.resident_weights == {} and h.resident_bytes == 0
    with pytest.raises(ValueError):
        h.resident_budget = -1
    with pytest.raises(TypeError):
        h.resident_budget = 1.5


def _rss():
    psutil = pytest.importorskip("psutil")
    return psutil.Process().memory_info().rss


def test_training_keeps_device_and_host_memory_flat(engine):
    """200 optimizer steps re-program the weights every step: the device holds only the live sets."""
    h = engine._cl
    n = 128 if SANITIZED else 256
    torch.manual_seed(0)
    model = torch.nn.Sequential(LinearMem(engine, n, n, S8, S8), torch.nn.ReLU(), LinearMem(engine, n, 10, S8, S8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, n), torch.randint(0, 10, (8,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for _ in range(3):
        step()
    live = sum(set_bytes(m.weight_sliced) for m in (model[0], model[2]))
    rss0, scratch0 = _rss(), h.scratch_bytes
    for i in range(200):
        step()
        assert len(h.resident_weights) <= 2, i
        assert h.resident_bytes <= live, i
    gc.collect()
    assert h.scratch_bytes == scratch0
    assert h.resident_bytes == sum(h.resident_weights.values()) <= live
    if not SANITIZED:  # ASan's quarantine keeps freed memory resident
        grown = _rss() - rss0
        # 16 stale sets of the big layer (what the count-bounded cache kept) would be ~16 * live
        assert grown < max(3 * live, 8 << 20), "RSS grew by %d bytes over 200 steps (live weights: %d bytes)" % (grown, live)


def test_forget_weights_hashes_a_user_key_once(engine):
    # forget_weights hashed the key itself (a bad key is a TypeError before the fork check) and forget_key
    # hashed it again: a user key's __hash__ (user code) ran twice per call
    calls = []

    class Key:
        def __hash__(self):
            calls.append(1)
            return 7

        def __eq__(self, other):
            return self is other

    engine._cl.forget_weights(Key())
    assert len(calls) == 1
    engine._cl._weights_died(Key())
    assert len(calls) == 2
