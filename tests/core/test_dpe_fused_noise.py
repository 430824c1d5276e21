"""Small-batch products with read noise (issue 11, batch 1 and 64): when the packed inputs are small
the CPU driver draws the read noise of one column chunk and one crossbar block at a time into a
per-thread buffer of a few dozen KB and runs the tiles against it, continuing their sums over the
blocks (run_fused in csrc/cpu/dpe.c), instead of refilling the whole resident weight buffer first
(run_blocks). The two loop nests must give the same bits, and the fused one must not touch memory
of the size of the weights.

Read noise is indexed by weight cell and call only, shared by every input row (spec section 7), so
the rows of a small call (fused: few packed input rows) equal the same rows inside a call with many
rows (run_blocks: more than PF_DPE_FUSED_A_BYTES of packed inputs); DAC noise is indexed by row,
so it is off here. K = 80 with 32-row crossbars: two full blocks and a short one (rows past K in
the reused block buffer must read as zeros)."""
import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core
from helpers import SAN, at_isa, available_isas, make_case, mvm_args, rel, written_conductance

XW, WW, N_ROWS, K = (1, 1, 2), (1, 1, 2), 32, 80
XG, WG = (1, N_ROWS), (N_ROWS, 8)
# rows whose packed inputs exceed the fused path's 4 MiB: K rounded up to whole crossbars, times
# sx slices of 4-byte voltages per row
BIG_ROWS = (4 << 20) // (-(-K // N_ROWS) * N_ROWS * len(XW) * 4) + 64


def _case(seed, R, P, cond):
    rng = np.random.default_rng(seed)
    xs, xsc, wl, wsc = make_case(rng, 1, R, K, P, N_ROWS, XW, WW, XG, WG, 4)
    wc = written_conductance(rng, wl, 4) if cond else None  # read noise multiplies programmed conductances
    return xs, xsc, wl, wsc, wc


def _args(xs, xsc, wl, wsc, wc, sigma, call):
    return mvm_args(xs, xsc, XG, XW, wl, wsc, WG, WW, N_ROWS, 4, 4, [2 ** 12] * len(WW), sigma=sigma, seed=3,
                    call=call, cond=wc)


def _rows(xs, xsc, lo, hi):
    return np.ascontiguousarray(xs[:, :, lo:hi]), np.ascontiguousarray(xsc[:, lo:hi])


@pytest.mark.parametrize("cond", [False, True])
@pytest.mark.parametrize("P", [40, 250, 513])  # partial last panels; chunks of 1-8 panels, a partial chunk
def test_fused_rows_give_the_bits_of_the_same_rows_in_a_large_call(cond, P):
    xs, xsc, wl, wsc, wc = _case(P + cond, BIG_ROWS, P, cond)
    sigma = np.array([0.02, 0.05, 0.0, 0.1], np.float32)  # per level, one of them zero
    packed = _core.dpe_pack(wl, wc, wsc, WG, WW, N_ROWS, 4, 4, [2 ** 12] * len(WW), 1e-5, 1e-7, sigma)
    assert packed.kind == "noisy"
    with pyfastpim.threads(1):
        big = np.asarray(_core.dpe_mvm_packed(packed, *_args(xs, xsc, wl, wsc, wc, sigma, call=4)))[0]
    isas = available_isas() if not SAN else available_isas()[-1:]
    for isa in isas:
        for threads in (1, 2, 3):
            with pyfastpim.threads(threads):
                for lo, hi in ((0, 1), (7, 71), (BIG_ROWS - 5, BIG_ROWS)):  # batch 1, 64, the last rows
                    sub = _rows(xs, xsc, lo, hi)
                    got = at_isa(isa, lambda: np.asarray(
                        _core.dpe_mvm_packed(packed, *_args(*sub, wl, wsc, wc, sigma, call=4)))[0])
                    np.testing.assert_array_equal(got, big[lo:hi], err_msg=f"{isa} threads={threads} rows {lo}:{hi}")
                    plain = np.asarray(_core.dpe_mvm(*_args(*sub, wl, wsc, wc, sigma, call=4)))[0]
                    np.testing.assert_array_equal(plain, got)  # unpacked weights: the same loop nests
    # the noise is there and is fresh per call
    sub = _rows(xs, xsc, 0, 1)
    ideal = np.asarray(_core.dpe_mvm(*_args(*sub, wl, wsc, wc, None, call=4)))[0] if not cond else None
    other = np.asarray(_core.dpe_mvm_packed(packed, *_args(*sub, wl, wsc, wc, sigma, call=5)))[0]
    assert not np.array_equal(other, big[:1])
    if ideal is not None:
        assert 1e-4 < rel(big[:1], ideal) < 0.2


def test_fused_call_allocates_far_less_than_the_weight_panels():
    # batch 1 against 80 x 1024 weights with read noise: block buffers of a few dozen KB per
    # thread, the resident buffer untouched (nothing of the weights' size allocated)
    xs, xsc, wl, wsc, wc = _case(5, 1, 1024, False)
    sigma = np.full(4, 0.05, np.float32)
    packed = _core.dpe_pack(wl, wc, wsc, WG, WW, N_ROWS, 4, 4, [2 ** 12] * len(WW), 1e-5, 1e-7, sigma)
    panels = K * len(WW) * 1024 * 4  # float32 weight panels of the pack
    for threads in (1, 2):
        with pyfastpim.threads(threads):
            args = _args(xs, xsc, wl, wsc, wc, sigma, call=1)
            first = np.asarray(_core.dpe_mvm_packed(packed, *args))
            before = pyfastpim.memory.stats()
            pyfastpim.memory.reset_peak()
            again = np.asarray(_core.dpe_mvm_packed(packed, *args))
            after = pyfastpim.memory.stats()
        np.testing.assert_array_equal(again, first)
        assert after["peak_bytes"] - before["current_bytes"] <= panels // 8 + (64 << 10)
        assert after["current_bytes"] - before["current_bytes"] == again.nbytes  # only the output stays
        del first, again


@pytest.mark.parametrize("cond", [False, True])
@pytest.mark.parametrize("sigma", [np.full(4, 0.07, np.float32), np.array([0.1, 0.0, 0.05, 0.2], np.float32)])
@pytest.mark.parametrize("P", [37, 128, 250])  # rows starting mid Philox group; runs of 8 and a glibc tail
def test_read_noise_values_give_the_same_bits_on_every_isa(cond, sigma, P):
    # the AVX2 table's one-pass read-noise kernel (normals, sigma by level, SLEEF exp, the value)
    # against the portable passes (generic table); the resident-buffer path against the fused one
    # across ISAs: test_fused_rows_give_the_bits_of_the_same_rows_in_a_large_call
    xs, xsc, wl, wsc, wc = _case(7 + P, 70, P, cond)
    packed = _core.dpe_pack(wl, wc, wsc, WG, WW, N_ROWS, 4, 4, [2 ** 12] * len(WW), 1e-5, 1e-7, sigma)
    outs = {}
    for isa in available_isas():
        for rows in (1, 70):
            sub = _rows(xs, xsc, 0, rows)
            outs[isa, rows] = at_isa(isa, lambda: np.asarray(
                _core.dpe_mvm_packed(packed, *_args(*sub, wl, wsc, wc, sigma, call=2))))
    for (isa, rows), out in outs.items():
        np.testing.assert_array_equal(out, outs["generic", rows], err_msg=f"{isa} rows={rows}")
        np.testing.assert_array_equal(out[0, :1], outs["generic", 1][0], err_msg=f"{isa} rows={rows}")
