"""OpenCL kernels run in pieces so that Ctrl-C can stop a long call (csrc/opencl/launcher.c
enqueue_split): the first piece has the caller's size (PF_CL_PIECE_ELEMS elements, ...), each next
one is sized from the last one's measured rate to take handle.piece_time, at most 8 times larger
(or smaller) than the last. The pieces used to start at the first size and only double while a piece
took under 20 ms, so a large call on PoCL took many launches. handle.launches counts them (a split
kernel counts each piece). Results never depend on the pieces."""
import threading

import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core

NPLAT, _ = _core.cl_devices()
pytestmark = pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform: the OpenCL ICD loader reports none "
                                                   "(install pocl-opencl-icd to run these tests)")
METHOD = (1, 1, 2, 4)


@pytest.fixture
def dev():
    d = pyfastpim.resolve_device("opencl")
    default = d.piece_time
    yield d
    d.piece_time = default  # the handle is cached: leave it as found


def _slice(dev, x, paral, gran):
    return _core.slice_quantize(x, METHOD, paral, gran, None, True, None, device=dev)


def _launches(dev, kernel, call):
    before = dev.launches[kernel]
    out = call()
    return out, dev.launches[kernel] - before


def test_piece_time_default_and_validation(dev):
    assert dev.piece_time == 0.05
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="argument 'piece_time'"):
            dev.piece_time = bad
    for bad in ("0.1", True, None):
        with pytest.raises(TypeError, match="argument 'piece_time'"):
            dev.piece_time = bad
    with pytest.raises(TypeError, match="argument 'piece_time'"):
        del dev.piece_time
    dev.piece_time = 1
    assert dev.piece_time == 1.0
    # the library's number rule (found by review: NumPy numbers and Fractions were a TypeError, an int beyond
    # float64 an OverflowError naming nothing)
    from fractions import Fraction
    for good, want in ((np.float32(0.25), 0.25), (np.int64(2), 2.0), (Fraction(1, 8), 0.125)):
        dev.piece_time = good
        assert dev.piece_time == want
    with pytest.raises(ValueError, match="argument 'piece_time'"):
        dev.piece_time = 10 ** 400
    dev.piece_time = 1
    assert set(dev.launches) == {name for name, _, _ in dev._kernel_table()}


def test_a_large_call_takes_few_launches(dev):
    """4096 x 4096 float32 input sliced per row (one quantize kernel over 4096 rows): the first piece
    is 1/9 of the rows (2M elements of 16M); at a rate that fits the rest in one piece's time the
    second piece is the rest, at most 8 times the first plus the under-half-a-piece tail: 2 launches
    (the doubling rule took 4 or more: 455, 910, 1820 rows, then the rest). A piece time of 1000 s
    makes the count independent of the machine's speed."""
    x = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
    dev.piece_time = 1000.0
    _, n = _launches(dev, "pf_slice_quant", lambda: _slice(dev, x, (1, 32), (1, 32)))
    assert n == 2
    # granules of 32 rows: a max pass (split over rows of the first column block, then whole) first
    _, n = _launches(dev, "pf_slice_max", lambda: _slice(dev, x, (32, 32), (32, 32)))
    assert 2 <= n <= 3


def test_pieces_follow_the_piece_time_down_too(dev):
    """A piece time far below what the first piece took shrinks the next pieces (by at most 8 times each):
    many launches, where a long first piece kept its size before."""
    x = np.random.default_rng(1).standard_normal((2048, 1536)).astype(np.float32)  # 2 pieces' worth
    dev.piece_time = 1e-9
    _, n = _launches(dev, "pf_slice_quant", lambda: _slice(dev, x, (1, 32), (1, 32)))
    assert n > 100


def _off_main_thread(call):
    """call() on another thread: no Ctrl-C flag there, so every kernel runs as one launch."""
    out = []
    t = threading.Thread(target=lambda: out.append(call()))
    t.start()
    t.join()
    return out[0]


@pytest.mark.parametrize("layout", [((1, 32), (1, 32)), ((32, 32), (32, 32)), ((16, 64), (48, 128))])
def test_outputs_do_not_depend_on_the_pieces(dev, layout):
    """Ragged sizes (rows and columns not multiples of the pieces' steps), split with piece times that
    shrink, keep and grow the pieces, and run whole: bit-identical codes, granule maxima, scales and
    dequantized values."""
    x = np.random.default_rng(2).standard_normal((3001, 2900)).astype(np.float32)
    whole = _off_main_thread(lambda: _slice(dev, x, *layout))
    for seconds in (1e-4, 0.05, 1000.0):
        dev.piece_time = seconds
        got, n = _launches(dev, "pf_slice_quant", lambda: _slice(dev, x, *layout))
        assert n >= 2, "the call on the main thread runs in pieces"
        for a, b in zip(got, whole):
            if a is None or b is None or isinstance(a, tuple):
                assert a == b
            else:
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
