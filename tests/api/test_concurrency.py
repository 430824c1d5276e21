"""Concurrency (issue 13): noise counters are reserved atomically, so N concurrent noisy calls give
exactly the outputs of N serial calls (as a set); mixed workloads from 8 threads give bit-identical
results to the same work done serially (noise off).

These run under ThreadSanitizer too (`make tsan`). PYFASTPIM_STRESS_SECONDS overrides the duration
of the mixed-workload run (default 10 s, 3 s under the sanitizers)."""
import os
import threading
import time
import warnings

import numpy as np
import pytest

import pyfastpim
from pyfastpim import DPETensor, SlicedData, dpe_matmul

SAN = os.environ.get("PYFASTPIM_SANITIZED") == "1"
THREADS = 8
NPLAT = pyfastpim._core.cl_devices()[0]
DEVICES = ["cpu", pytest.param("opencl", marks=pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform"))]


def run_threads(fn, n=THREADS):
    """Run fn(i) on n threads started together; re-raise the first exception."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def body(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return results


def noisy_engine(device, seed=7):
    return DPETensor(read_variation=0.05, vnoise=0.05, write_variation=0.02, device=device, seed=seed)


def sliced(engine, x, w):
    """(x sliced, w programmed) on the engine: slices (1, 1, 2), 32 x 8 crossbars."""
    xs = SlicedData((1, 1, 2), is_weight=False, paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(engine, x)
    ws = SlicedData((1, 1, 2), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8))
    ws.slice_data_imp(engine, w)
    return xs, ws


def as_set(arrays):
    return {np.ascontiguousarray(a).tobytes() for a in arrays}


# ---------------------------------------------------------------- noise counters

@pytest.mark.parametrize("device", DEVICES)
def test_concurrent_products_draw_the_noise_of_distinct_serial_calls(device):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 40)).astype(np.float32)
    w = rng.standard_normal((40, 12)).astype(np.float32)
    per = 3 if SAN else 6
    n = THREADS * per

    serial_eng = noisy_engine(device)
    xs, ws = sliced(serial_eng, x, w)
    serial = [serial_eng.MapReduceDot(xs, ws) for _ in range(n)]
    assert len(as_set(serial)) == n  # every call draws fresh noise

    eng = noisy_engine(device)
    xs, ws = sliced(eng, x, w)
    eng.MapReduceDot(xs, ws)  # programs the weights once (serial) ...
    eng.reset(7)              # ... and rewinds the counter
    got = run_threads(lambda i: [eng.MapReduceDot(xs, ws) for _ in range(per)])
    got = [a for r in got for a in r]
    assert eng.calls == n
    assert as_set(got) == as_set(serial)


def test_concurrent_large_batch_products_share_one_lazily_allocated_noise_buffer():
    """A noisy pack allocates its resident work buffer at the first product too large to draw the
    noise beside the tiles. Concurrent first products on a pack never run: one of them allocates
    it (once), the others pack into their own buffers; outputs are those of serial calls."""
    rng = np.random.default_rng(4)
    # 9000 rows x 40 columns x 3 input slices of float32: over the 4 MiB of packed inputs up to which
    # read noise is drawn beside the tiles (csrc/cpu/dpe.c PF_DPE_FUSED_A_BYTES; the last crossbar block
    # packs its 8 rows present, not 32)
    x = rng.standard_normal((9000, 40)).astype(np.float32)
    w = rng.standard_normal((40, 12)).astype(np.float32)
    n = 4

    serial_eng = noisy_engine("cpu")
    xs, ws = sliced(serial_eng, x, w)
    serial = [serial_eng.MapReduceDot(xs, ws) for _ in range(n)]
    one_buffer = ws._packed[2].nbytes
    assert one_buffer >= 3 * 40 * 12 * 4  # the work buffer: a float per weight cell and slice at least
    eng = noisy_engine("cpu")
    xs, ws = sliced(eng, x, w)
    got = run_threads(lambda i: eng.MapReduceDot(xs, ws), n)
    assert as_set(got) == as_set(serial)
    assert ws._packed[2].nbytes == one_buffer  # allocated by one call only


@pytest.mark.parametrize("device", DEVICES)
def test_concurrent_fused_linear_and_conv_calls_equal_serial_calls(device):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    img = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    wl = rng.standard_normal((16, 8)).astype(np.float32)
    wc = rng.standard_normal((2 * 3 * 3, 4)).astype(np.float32)
    per = 2 if SAN else 4

    def weights(engine):
        a = SlicedData((1, 1, 2), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8))
        a.slice_data_imp(engine, wl)
        b = SlicedData((1, 1, 2), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8))
        b.slice_data_imp(engine, wc)
        return a, b

    def one(engine, a, b, k):
        if k % 2:
            return engine.forward_linear(x, a, (1, 1, 2))[0]
        return engine.forward_conv2d(img, b, 3, padding=1, input_slice=(1, 1, 2))[0]

    ser = noisy_engine(device, seed=3)
    a, b = weights(ser)
    # which call number each concurrent call gets is not known in advance, so the serial run
    # makes every call number with each kind of call (linear, conv)
    n = THREADS * per
    serial = {}
    for kind in (0, 1):
        ser.reset(3)
        serial[kind] = [one(ser, a, b, kind) for _ in range(n)]
    eng = noisy_engine(device, seed=3)
    a2, b2 = weights(eng)
    eng.reset(3)
    got = run_threads(lambda i: [(c, one(eng, a2, b2, i + c)) for c in range(per)])
    assert eng.calls == n
    used = set()
    # every output is the serial output of exactly one call number, all numbers distinct
    for i, r in enumerate(got):
        for c, out in r:
            kind = (i + c) % 2
            matches = [k for k, s in enumerate(serial[kind]) if np.array_equal(s, out)]
            assert len(matches) == 1
            used.add(matches[0])
    assert used == set(range(n))


def test_concurrent_layer_forwards_draw_distinct_noise():
    torch = pytest.importorskip("torch")
    from pyfastpim.nn import LinearMem
    torch.manual_seed(0)
    per = 3 if SAN else 6
    n = THREADS * per
    x = torch.randn(4, 24)

    def layer():
        eng = noisy_engine("cpu", seed=11)
        lay = LinearMem(eng, 24, 6, (1, 1, 2), (1, 1, 2), weight_paral_size=(32, 8), weight_quant_gran=(32, 8))
        with torch.no_grad():
            lay.weight.copy_(torch.linspace(-1, 1, 24 * 6).reshape(6, 24))
            lay.bias.zero_()
        return eng, lay

    eng, lay = layer()
    with torch.no_grad():
        lay(x)
        eng.reset(11)
        serial = [lay(x).numpy() for _ in range(n)]
        eng.reset(11)

        def fwd(i):
            with torch.no_grad():
                return [lay(x).numpy() for _ in range(per)]
        got = [a for r in run_threads(fwd) for a in r]
    assert eng.calls == n
    assert len(as_set(serial)) == n and as_set(got) == as_set(serial)


def test_call_counter_is_64_bit_and_warns_when_the_noise_counter_wraps():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    w = rng.standard_normal((32, 8)).astype(np.float32)
    eng = noisy_engine("cpu")
    first = dpe_matmul(x, w, eng)
    eng.calls = 2 ** 32 - 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = dpe_matmul(x, w, eng)  # call 2**32 - 1: no warning
    assert not np.array_equal(before, first)
    with pytest.warns(RuntimeWarning, match="wraps"):
        again = dpe_matmul(x, w, eng)   # call 2**32: the noise of call 0, said out loud
    np.testing.assert_array_equal(again, first)
    assert eng.calls == 2 ** 32 + 1
    eng.calls = 2 ** 64 - 1
    dpe_matmul(x, w, eng)
    assert eng.calls == 0  # the 64-bit counter wraps modulo 2**64
    for bad, exc in ((-1, ValueError), (2 ** 64, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="calls"):
            eng.calls = bad


def test_call_counter_survives_copy_and_pickle():
    import copy
    import pickle
    eng = noisy_engine("cpu")
    eng.calls = 12345
    for clone in (copy.deepcopy(eng), pickle.loads(pickle.dumps(eng))):
        assert clone.calls == 12345
        clone._reserve_call()
        assert clone.calls == 12346 and eng.calls == 12345
    c = pyfastpim._core.CallCounter(5)
    assert [c.reserve() for _ in range(3)] == [5, 6, 7] and c.value == 8


@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_engine_copies_draw_the_originals_noise_and_are_independent(how):
    """copy.copy shared the call counter (a copy's calls, or copy.calls = n, moved the original's) and the
    read_variation dict; copy.deepcopy went through the counter's pickling reduce, so the copy counted as
    inherited and, in a process with a noise stream (seed_worker, set_noise_stream), drew other noise
    than the original for the same seed and call number."""
    import copy
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 40)).astype(np.float32)
    w = rng.standard_normal((40, 12)).astype(np.float32)
    before = pyfastpim.noise_stream()
    pyfastpim.set_noise_stream(123)
    try:
        eng = noisy_engine("cpu")
        dpe_matmul(x, w, eng)
        clone = getattr(copy, how)(eng)
        assert not clone._counter.inherited
        assert np.array_equal(dpe_matmul(x, w, clone), dpe_matmul(x, w, eng))  # call 1 of each
        clone.calls = 100
        clone.read_variation[0] = 0.3
        assert eng.calls == 2 and eng.read_variation[0] == 0.05
    finally:
        pyfastpim.set_noise_stream(before)


def test_counter_reservations_from_threads_are_distinct():
    c = pyfastpim._core.CallCounter()
    per = 2000 if SAN else 20000
    got = run_threads(lambda i: [c.reserve() for _ in range(per)])
    flat = [v for r in got for v in r]
    assert sorted(flat) == list(range(THREADS * per))


# ---------------------------------------------------------------- mixed workloads

def _workloads():
    """(name, fn) pairs; each fn(rng) builds fresh inputs from rng and returns a result array.
    All noise off: results must be bit-identical however the calls interleave."""
    torch = pytest.importorskip("torch")
    quiet = dict(read_variation=0.0, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0)
    eng = DPETensor(**quiet)
    wl = np.random.default_rng(99).standard_normal((40, 16)).astype(np.float32)
    ws = SlicedData((1, 1, 2, 4), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8))
    ws.slice_data_imp(eng, wl)
    ws_conv = SlicedData((1, 1, 2), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8))
    ws_conv.slice_data_imp(eng, np.random.default_rng(98).standard_normal((3 * 9, 5)).astype(np.float32))
    incoming = np.random.default_rng(97).standard_normal((12, 12)).astype(np.float32) * 0.3

    def slicing(rng):
        x = rng.standard_normal((int(rng.integers(1, 9)), 40)).astype(np.float32)
        s = SlicedData((1, 2, 4), is_weight=False, paral_size=(1, 32), quant_gran=(1, 32))
        s.slice_data_imp(eng, x)
        return np.asarray(s.quantized_data)

    def product(rng):
        x = rng.standard_normal((int(rng.integers(1, 6)), 40)).astype(np.float32)
        return np.asarray(eng.forward_linear(x, ws, (1, 1, 2, 4))[0])

    def matmul(rng):
        x = rng.standard_normal((2, 3, 20)).astype(np.float32)
        w = rng.standard_normal((20, 6)).astype(np.float32)
        return dpe_matmul(x, w, eng)

    def conv(rng):
        img = rng.standard_normal((1, 3, 7, 7)).astype(np.float32)
        return np.asarray(eng.forward_conv2d(img, ws_conv, 3, padding=1, input_slice=(1, 1, 2))[0])

    def attention(rng):
        # one context per call (contexts are not shared between threads)
        c = pyfastpim.AttentionContext(update_rate=0.2, strength=0.5)
        c.incoming = incoming
        x = rng.standard_normal((5, 12)).astype(np.float32)
        y = c.apply(x)
        c.update_outgoing(x, rng.standard_normal((5, 12)).astype(np.float32))
        return np.concatenate([np.asarray(y).ravel(), c.outgoing.ravel()])

    def asarray(rng):
        t = torch.from_numpy(rng.standard_normal((3, 5)))
        a = pyfastpim.asarray(t, dtype="float32")
        b = pyfastpim.asarray(np.asarray(a)[:, ::2])
        return np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()])

    return [("slicing", slicing), ("product", product), ("matmul", matmul), ("conv", conv),
            ("attention", attention), ("asarray", asarray)]


def test_mixed_workloads_from_threads_are_bit_identical_to_serial():
    seconds = float(os.environ.get("PYFASTPIM_STRESS_SECONDS", 3 if SAN else 10))
    work = _workloads()
    expected = {}

    def task(seed):
        name, fn = work[seed % len(work)]
        return fn(np.random.default_rng(seed))

    # serial reference for a pool of task seeds, then threads draw seeds from the pool until time runs out
    pool = list(range(len(work) * 8))
    for s in pool:
        expected[s] = task(s)
    deadline = time.monotonic() + seconds
    counts = [0] * THREADS

    def worker(i):
        mism = []
        rng = np.random.default_rng(1000 + i)
        while time.monotonic() < deadline:
            s = int(rng.choice(pool))
            got = task(s)
            counts[i] += 1
            if not np.array_equal(got, expected[s]):
                mism.append((work[s % len(work)][0], s))
        return mism

    mismatches = [m for r in run_threads(worker) for m in r]
    assert not mismatches, mismatches[:10]
    assert sum(counts) >= THREADS  # every thread ran
