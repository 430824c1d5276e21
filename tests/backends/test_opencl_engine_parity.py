"""CPU / OpenCL parity of the engine and the layers over the settings a researcher combines.

test_differential.py and test_parity.py draw kernel arguments, noise-free products and noisy
convolutions; this file draws whole engines: read noise (one sigma or one per level), DAC noise,
write variation, stuck-at faults at HGS and LGS, drift (with and without compensation) and IR drop,
INT or BFP slicing, g_level 2..16, rdac, one ADC resolution or one per slice, odd shapes and
granules, on the OpenCL device's own kernel and on the tiled kernel with a GPU's and a ragged tile.
One engine per device runs the same sequence: products with weights programmed once and reused,
reset() (replay), reset(seed) with the weights programmed again, and dpe_matmul; then LinearMem /
Conv2dMem forward and backward twice. Every output and gradient must equal the CPU's bit for bit
(docs/semantics.md section 11; noisy cases only where the CPU draws noise with its SIMD path,
elsewhere the 1e-5 contract is test_opencl.py's).
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from pyfastpim import DPETensor, SlicedData, dpe_matmul
from helpers import CL_TILES, SIMD_NOISE, needs_cl, open_cl_device

torch = pytest.importorskip("torch")
pytestmark = needs_cl

KERNELS = [("device", None), ("gpu", "tiled"), ("ragged", "tiled"), ("ragged", "untiled")]


@pytest.fixture(scope="module")
def cl_devices():
    """One handle per (tile, kernel) of KERNELS, built once for the module."""
    devs = {}
    for tile, kernel in KERNELS:
        d = open_cl_device(CL_TILES[tile])
        if kernel is not None:
            d.mvm_kernel = kernel
        devs[(tile, kernel)] = d
    return devs


@st.composite
def slice_method(draw, widest):
    w = [1] + draw(st.lists(st.integers(1, widest), max_size=4))
    while sum(w) > 16:
        w.pop()
    return tuple(w) if sum(w) >= 2 else (1, 1)


@st.composite
def engines(draw):
    g_level = draw(st.sampled_from([2, 3, 4, 5, 8, 16]))
    ww = draw(slice_method(int(np.log2(g_level))))
    noisy = SIMD_NOISE and draw(st.booleans())
    pick = (lambda *v: draw(st.sampled_from(v))) if noisy else (lambda *v: 0.0)
    read = pick(0.0, 0.05, 1.0)
    if noisy and draw(st.booleans()):
        read = {level: 0.02 * (level % 3) for level in range(g_level)}
    kw = dict(g_level=g_level, rdac=draw(st.sampled_from([2, 4, 16, 256])), seed=draw(st.integers(0, 999)),
              radc=draw(st.one_of(st.sampled_from([2, 16, 256, 2 ** 24]),
                                  st.lists(st.integers(2, 5000), min_size=len(ww), max_size=len(ww)))),
              read_variation=read, vnoise=pick(0.0, 0.05, 2.0), write_variation=pick(0.0, 0.05, 0.7),
              rate_stuck_HGS=pick(0.0, 0.05), rate_stuck_LGS=pick(0.0, 0.05),
              wire_resistance=draw(st.sampled_from([0.0, 0.0, 1.0])))
    drift = draw(st.sampled_from([None, False, True]))  # None: no drift, else compensation
    return kw, drift, ww, draw(slice_method(4)), draw(st.sampled_from([None, 8]))


def make_engine(device, kw, drift):
    e = DPETensor(device=device, **kw)
    if drift is not None:
        e.drift(1000.0, compensation=drift)
    return e


def assert_same_bits(cpu, cl, what):
    for i, (a, b) in enumerate(zip(cpu, cl)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert a.shape == b.shape, (what, i)
        np.testing.assert_array_equal(b.view(np.uint32), a.view(np.uint32), err_msg="%s, output %d" % (what, i))


gran = st.sampled_from(["per-row", "per-col", "per-matrix", None])


@settings(max_examples=12)
@given(engines(), st.integers(1, 40), st.integers(1, 4), st.integers(1, 33), gran, gran,
       st.sampled_from([(1,), (5,), (2, 3)]), st.integers(1, 80), st.integers(1, 40), st.sampled_from(KERNELS),
       st.integers(0, 2 ** 31))
def test_engine_products_replays_and_reprogramming_equal_the_cpu(cl_devices, eng, n, xr, wc, xg, wg, rows, K, P,
                                                                  kernel, seed):
    kw, drift, ww, xw, bw_e = eng
    assume((kw["rdac"] - 1) * (kw["g_level"] - 1) * n < 2 ** 24)
    xp, wp = (xr, n), (n, wc)
    xg, wg = xp if xg is None else xg, wp if wg is None else wg
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(rows + (K,)).astype(np.float32)
    w = rng.standard_normal((K, P)).astype(np.float32)
    outs = []
    for device in (None, cl_devices[kernel]):
        e = make_engine(device, kw, drift)
        ws = SlicedData(ww, bw_e=bw_e, is_weight=True, paral_size=wp, quant_gran=wg, device=device)
        ws.slice_data_imp(e, w)

        def product():
            return e.forward_linear(x, ws, xw, xp, xg, bw_e=bw_e, return_dequant=True)
        r = list(product()) + [product()[0]]  # weights programmed once, used twice
        e.reset()  # replay of the first call
        r.append(product()[0])
        e.reset(kw["seed"] + 1)  # another seed: the weights are programmed again
        ws.slice_data_imp(e, w)
        r += [product()[0], dpe_matmul(x, w, e, xw, ww, xp, wp, xg, wg, bw_e=bw_e)]
        outs.append(r)
    assert_same_bits(*outs, what="engine on %s" % (kernel,))


@settings(max_examples=10)
@given(engines(), st.integers(1, 30), st.booleans(), st.sampled_from(KERNELS), st.integers(0, 2 ** 31),
       st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(3, 7), st.integers(3, 7), st.integers(1, 5)),
       st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(0, 2),
                 st.integers(0, 2), st.integers(1, 2), st.integers(1, 2)))
def test_layers_forward_and_backward_equal_the_cpu(cl_devices, eng, n, conv, kernel, seed, dims, geometry):
    from pyfastpim.nn import Conv2dMem, LinearMem
    kw, drift, ww, xw, bw_e = eng
    assume((kw["rdac"] - 1) * (kw["g_level"] - 1) * n < 2 ** 24)
    N, C, H, W, P = dims
    kh, kwd, sh, sw, ph, pw, dh, dw = geometry
    assume(not conv or (H + 2 * ph > dh * (kh - 1) and W + 2 * pw > dw * (kwd - 1)))  # an output to compare
    rng = np.random.default_rng(seed)
    xp, wp = (int(rng.integers(1, 4)), n), (n, int(rng.integers(1, 20)))
    common = dict(bias=True, bw_e=bw_e, input_paral_size=xp, weight_paral_size=wp, input_quant_gran=xp,
                  weight_quant_gran=wp)
    if conv:
        x = torch.from_numpy(rng.standard_normal((N, C, H, W)).astype(np.float32))

        def layer_on(e):
            return Conv2dMem(e, C, P, (kh, kwd), xw, ww, stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw),
                             **common)
    else:
        K = C * H * W
        x = torch.from_numpy(rng.standard_normal((N, H, K)).astype(np.float32))

        def layer_on(e):
            return LinearMem(e, K, P, xw, ww, **common)
    outs, state = [], None
    for device in (None, cl_devices[kernel]):
        e = make_engine(device, kw, drift)
        torch.manual_seed(seed)
        layer = layer_on(e)
        state = state or layer.state_dict()
        layer.load_state_dict(state)
        r = []
        for _ in range(2):
            xi = x.clone().requires_grad_(True)
            y = layer(xi)
            y.backward(torch.linspace(-1.0, 1.0, y.numel()).reshape(y.shape))
            r += [y.detach().numpy(), xi.grad.numpy(), layer.weight.grad.numpy().copy(), layer.bias.grad.numpy().copy()]
            layer.zero_grad(set_to_none=True)
        outs.append(r)
    assert_same_bits(*outs, what="%s on %s" % ("Conv2dMem" if conv else "LinearMem", kernel))
