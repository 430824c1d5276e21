"""Differential check of every product path against the spec transcriptions in tests/reference.

Each drawn configuration runs through all the paths that compute the same numbers: the exact
integer path and the float path (integer path switched off), every ISA this CPU has, 1 and 2
threads, weights packed once and reused, the OpenCL device (two tile shapes), and the public
APIs (dpe_matmul, SlicedData + MapReduceDot, LinearMem, Conv2dMem). Noise off, each must equal
reference.dpe_ref.mvm_exact bit for bit (docs/semantics.md 7.1); noise on, the same seed must
give the same bits on every path (section 11).

The space is wider than tests/core/test_dpe.py and test_parity.py draw: g_level that is not a
power of two (3, 5, 129, 255), 8-bit and all-1-bit slice methods, rdac 2..1000, odd per-slice ADC
resolutions up to 2**24, crossbars that divide nothing, zero / subnormal / huge block scales,
inputs with zero, subnormal, equal or widely ranged values, bw_e 0, extreme HGS / LGS, kernels
larger than the input. A bounded version of a hunt that ran thousands of configurations per path.
"""
import functools

import numpy as np
import pytest
try:
    import torch
except ImportError:  # numpy-only install: conftest skips the tests that use torch
    torch = None
from hypothesis import assume, given, settings, strategies as st

import pyfastpim
from pyfastpim import DPETensor, SlicedData, _core, dpe_matmul
from helpers import (CL_TILES, HAVE_CL, HGS, LGS, NOISE_OFF, SIMD_NOISE, available_isas, conductance_levels, needs_cl,
                     no_isa_limit, open_cl_device, reference_product, slice_constants)
from reference.dpe_ref import mvm_exact


@st.composite
def slice_method(draw, widest=8):
    """(1, ...): a sign bit, then slices of 1..widest bits, 2 to 16 bits in all."""
    w = [1] + draw(st.lists(st.integers(1, widest), min_size=0, max_size=7))
    while sum(w) > 16:
        w.pop()
    return tuple(w) if sum(w) >= 2 else (1, 1)


@st.composite
def weight_method(draw, g_level):
    widest = int(np.floor(np.log2(g_level)))  # m[s] = 2**width - 1 <= g_level - 1
    return draw(slice_method(min(widest, 8)))


G_LEVELS = [2, 3, 4, 5, 16, 129, 255, 256]
DATA = ["normal", "zeros", "negative", "subnormal", "equal_rows", "range", "ties", "huge"]


def data(rng, kind, shape):
    x = {"normal": lambda: rng.standard_normal(shape),
         "zeros": lambda: np.zeros(shape),
         "negative": lambda: -np.abs(rng.standard_normal(shape)),
         "subnormal": lambda: rng.standard_normal(shape) * 1e-41,
         "equal_rows": lambda: np.broadcast_to(rng.standard_normal(shape[-1]), shape),
         "range": lambda: rng.standard_normal(shape) * 10.0 ** rng.integers(-38, 30, shape),
         "ties": lambda: rng.integers(-8, 9, shape) / 4.0,
         "huge": lambda: rng.standard_normal(shape) * 1e30}[kind]()
    return np.ascontiguousarray(x, dtype=np.float32)


def scales(rng, kind, shape):
    return {"random": rng.random(shape), "zero": np.zeros(shape), "subnormal": rng.random(shape) * 1e-40,
            "huge": rng.random(shape) * 1e18,
            "mixed": rng.random(shape) * 10.0 ** rng.integers(-30, 30, shape)}[kind].astype(np.float32)


# ---- the fused kernel on its own: slice codes and levels in, every path out ----------------------

@st.composite
def kernel_cases(draw):
    g_level = draw(st.sampled_from(G_LEVELS))
    xw, ww = draw(slice_method()), draw(weight_method(g_level))
    rdac = draw(st.sampled_from([2, 3, 16, 255, 1000]))
    n = draw(st.integers(1, min(40, (2 ** 24 - 1) // ((rdac - 1) * (g_level - 1)))))
    radc = draw(st.one_of(st.sampled_from([2, 3, 7, 255, 2 ** 24]).map(lambda r: [r] * len(ww)),
                          st.lists(st.integers(2, 2 ** 24), min_size=len(ww), max_size=len(ww))))
    K = draw(st.integers(1, 3 * n + 5))
    c = dict(N=draw(st.integers(1, 2)), R=draw(st.integers(1, 9)), K=K, P=draw(st.integers(1, 24)), n=n,
             xg=(draw(st.integers(1, 4)), n * draw(st.integers(1, 3))), wg=(n * draw(st.integers(1, 3)),
                                                                          draw(st.integers(1, 25))),
             scales=draw(st.sampled_from(["random", "zero", "subnormal", "huge", "mixed"])),
             full=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 31)))
    rng = np.random.default_rng(c["seed"])
    mx, _ = slice_constants(xw)
    mw, _ = slice_constants(ww)
    shape = (c["N"], c["R"], c["K"])
    # full: every input slice at its maximum (the largest crossbar sums and DAC codes)
    xs = np.stack([np.full(shape, m) if c["full"] else rng.integers(0, m + 1, shape) for m in mx]).astype(np.uint8)
    wl = np.stack([conductance_levels(rng.integers(0, m + 1, (K, c["P"])), m, g_level) for m in mw]).astype(np.uint8)
    xsc = scales(rng, c["scales"], (c["N"], -(-c["R"] // c["xg"][0]), -(-K // c["xg"][1])))
    wsc = scales(rng, c["scales"], (-(-K // c["wg"][0]), -(-c["P"] // c["wg"][1])))
    return (xs, xsc, c["xg"], xw, wl, None, wsc, c["wg"], ww, n, rdac, g_level, radc, HGS, LGS, None, 0.0, 1, 0)


def exact(args):
    xs, xsc, xg, xw, wl, _, wsc, wg, ww, n, rdac, g_level, radc = args[:13]
    with np.errstate(over="ignore", invalid="ignore"):  # huge scales: inf on both sides
        return mvm_exact(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc)


def assert_bits(got, ref, path):
    got = np.asarray(got)
    assert got.shape == ref.shape, path
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), err_msg=path)


def restores_cpu_state(test):
    """Each example restores the integer-path switch, the ISA limit and the thread count it changed
    (a function-scoped fixture would run once for all of hypothesis' examples)."""
    @functools.wraps(test)
    def run(*args, **kw):
        enabled, threads = _core.dpe_int_path()["enabled"], pyfastpim.get_num_threads()
        try:
            return test(*args, **kw)
        finally:
            _core.dpe_int_path(enabled)
            no_isa_limit()
            pyfastpim.set_num_threads(threads)
    return run


@settings(max_examples=25)
@given(kernel_cases())
@restores_cpu_state
def test_every_cpu_path_equals_the_integer_reference(args):
    ref = exact(args)
    for isa in available_isas():
        pyfastpim.set_isa_limit(isa)
        for threads in (1, 2):
            pyfastpim.set_num_threads(threads)
            for integer in (True, False):  # the exact integer path, then the float path
                _core.dpe_int_path(integer)
                assert_bits(_core.dpe_mvm(*args), ref, "%s, %d threads, integer path %s" % (isa, threads, integer))
        packed = _core.dpe_pack(*args[4:16])  # programmed once, reused
        for _ in range(2):
            assert_bits(_core.dpe_mvm_packed(packed, *args), ref, "packed, %s" % isa)


@pytest.fixture(scope="module")
def cl_tile_devices():
    """The device's own tiles, and ragged ones with panel-packed weights: each built once for the module."""
    return {tile: open_cl_device(tile) for tile in (CL_TILES["device"], CL_TILES["ragged"])}


@needs_cl
@settings(max_examples=15)
@given(kernel_cases())
def test_opencl_tile_shapes_equal_the_integer_reference(cl_tile_devices, args):
    from pyfastpim.devices import cl_dpe_mvm
    ref = exact(args)
    for tile, dev in cl_tile_devices.items():
        assert_bits(cl_dpe_mvm(dev, *args), ref, "OpenCL tile %s" % tile)


@settings(max_examples=10)
@given(kernel_cases(), st.sampled_from([(1, "x_scale"), (6, "w_scale")]),
       st.sampled_from([0x7fc01234, 0xffc00000, 0x7f800000, 0xff800000]))
def test_a_scale_that_is_not_finite_is_refused_on_every_path(request, args, where, bits):
    """A NaN scale's payload reached the output as given on the CPU (x86 keeps a NaN operand's
    payload) and as 0x7FFFFFFF on an NVIDIA GPU: the same arguments gave different bits by device.
    Scales come from quantization and are finite; others are refused, naming the argument."""
    from pyfastpim.devices import cl_dpe_mvm
    i, name = where
    args = list(args)
    scale = args[i].copy()
    scale.view(np.uint32).flat[len(scale.ravel()) // 2] = bits
    args[i] = scale
    devices = request.getfixturevalue("cl_tile_devices").values() if HAVE_CL else ()
    paths = [_core.dpe_mvm] + [functools.partial(cl_dpe_mvm, dev) for dev in devices]
    if name == "w_scale":  # packed once: refused there, before any product keeps it
        paths.append(lambda *a: _core.dpe_pack(*a[4:16]))
    else:
        paths.append(lambda *a: _core.dpe_mvm_packed(_core.dpe_pack(*a[4:16]), *a))
    for run in paths:
        with pytest.raises(ValueError, match="argument '%s': expected finite scales" % name):
            run(*args)


@settings(max_examples=10)
@given(kernel_cases())
@restores_cpu_state
def test_nan_outputs_have_one_bit_pattern_on_every_path(request, args):
    """A NaN programmed conductance (the raw kernel API takes conductances as given) made NaN outputs
    that kept its payload on the CPU, 0xFFC00000 on PoCL (kernels/base.cl canonicalizes, for NVIDIA
    GPUs, which write 0x7FFFFFFF): every path now writes each NaN output as 0xFFC00000."""
    from pyfastpim.devices import cl_dpe_mvm
    args = list(args)
    wl, g_level = args[4], args[11]
    q_g = np.float32((HGS - LGS) / (g_level - 1))
    cond = (np.float32(LGS) + wl.astype(np.float32) * q_g).astype(np.float32)
    cond.view(np.uint32).flat[0] = 0x7fc01234  # slice 0, row 0, column 0: column 0's outputs
    args[5] = cond
    outs = {}
    for isa in available_isas():
        pyfastpim.set_isa_limit(isa)
        for threads in (1, 2):
            pyfastpim.set_num_threads(threads)
            outs["%s, %d threads" % (isa, threads)] = _core.dpe_mvm(*args)
        outs["packed, " + isa] = _core.dpe_mvm_packed(_core.dpe_pack(*args[4:16]), *args)
    for tile, dev in (request.getfixturevalue("cl_tile_devices").items() if HAVE_CL else ()):
        outs["OpenCL tile %s" % tile] = cl_dpe_mvm(dev, *args)
    for path, out in outs.items():
        bits = np.asarray(out).view(np.uint32)
        nan = (bits & 0x7fffffff) > 0x7f800000
        assert nan[..., 0].all(), path  # the NaN cell's column
        assert (bits[nan] == 0xffc00000).all(), "%s: %s" % (path, sorted({hex(b) for b in bits[nan]}))


# ---- the public API: raw data in, quantized, sliced, programmed and multiplied ------------------

gran = st.one_of(st.sampled_from(["per-row", "per-col", "per-matrix", None]),
                 st.tuples(st.integers(1, 40), st.integers(1, 40)))


@st.composite
def api_cases(draw):
    g_level = draw(st.sampled_from(G_LEVELS))
    rdac = draw(st.sampled_from([2, 3, 16, 256]))
    n = draw(st.integers(1, 40))
    ww = draw(weight_method(g_level))
    hgs = draw(st.sampled_from([1e-5, 1.0, 1e20, 3e-30]))
    return dict(g_level=g_level, rdac=rdac, xw=draw(slice_method()), ww=ww, n=n,
                radc=draw(st.one_of(st.sampled_from([2, 3, 2 ** 12, 2 ** 24]),
                                    st.lists(st.integers(2, 2 ** 16), min_size=len(ww), max_size=len(ww)))),
                batch=draw(st.sampled_from([None, 1, 2])), R=draw(st.integers(1, 8)), K=draw(st.integers(1, 60)),
                P=draw(st.integers(1, 24)), bw_e=draw(st.sampled_from([None, 0, 1, 8])),
                xp=(draw(st.integers(1, 5)), n), wp=(n, draw(st.integers(1, 33))), xg=draw(gran), wg=draw(gran),
                x=draw(st.sampled_from(DATA)), w=draw(st.sampled_from(DATA)),
                HGS=hgs, LGS=hgs * draw(st.sampled_from([0.0, 0.01, 0.999])), seed=draw(st.integers(0, 2 ** 31)))


def api_operands(c):
    """(x, w, noise-free engine, input granule, weight granule, reference product) of an api_cases() draw."""
    rng = np.random.default_rng(c["seed"])
    shape = (c["R"], c["K"]) if c["batch"] is None else (c["batch"], c["R"], c["K"])
    x, w = data(rng, c["x"], shape), data(rng, c["w"], (c["K"], c["P"]))
    eng = DPETensor(g_level=c["g_level"], rdac=c["rdac"], radc=c["radc"], HGS=c["HGS"], LGS=c["LGS"], **NOISE_OFF)
    xg = c["xp"] if c["xg"] is None else c["xg"]
    wg = c["wp"] if c["wg"] is None else c["wg"]
    with np.errstate(over="ignore", invalid="ignore"):  # huge data: inf on both sides
        ref = reference_product(x, w, eng, c["xw"], c["ww"], c["xp"], c["wp"], xg, wg, c["bw_e"] or None)
    return x, w, eng, xg, wg, ref


@settings(max_examples=20)
@given(api_cases())
@restores_cpu_state
def test_public_products_equal_the_spec_transcription(c):
    x, w, eng, xg, wg, ref = api_operands(c)
    for threads in (1, 2):
        pyfastpim.set_num_threads(threads)
        got = dpe_matmul(x, w, eng, c["xw"], c["ww"], c["xp"], c["wp"], xg, wg, bw_e=c["bw_e"])
        assert_bits(got, ref, "dpe_matmul, %d threads" % threads)
    ws = SlicedData(c["ww"], bw_e=c["bw_e"], is_weight=True, paral_size=c["wp"], quant_gran=wg)
    xs = SlicedData(c["xw"], bw_e=c["bw_e"], is_weight=False, paral_size=c["xp"], quant_gran=xg)
    ws.slice_data_imp(eng, w)
    xs.slice_data_imp(eng, x)
    for _ in range(2):  # weights programmed once, reused
        assert_bits(eng.MapReduceDot(xs, ws), ref, "MapReduceDot")


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@settings(max_examples=10)
@given(api_cases())
def test_linear_layer_equals_the_spec_transcription(c):
    from pyfastpim.nn import LinearMem
    x, w, eng, xg, wg, ref = api_operands(c)
    layer = LinearMem(eng, c["K"], c["P"], c["xw"], c["ww"], bias=False, bw_e=c["bw_e"], input_paral_size=c["xp"],
                      weight_paral_size=c["wp"], input_quant_gran=xg, weight_quant_gran=wg)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
        layer.update_weight()
        got = layer(torch.from_numpy(x)).numpy()
    assert_bits(got, ref, "LinearMem")


# ---- convolution: the unfolded patches through the reference ------------------------------------

@st.composite
def conv_cases(draw):
    g_level = draw(st.sampled_from([2, 4, 16, 256]))
    n = draw(st.integers(1, 20))
    return dict(N=draw(st.integers(0, 2)), C=draw(st.integers(1, 3)), H=draw(st.integers(1, 6)),
                W=draw(st.integers(1, 6)), P=draw(st.integers(1, 5)), k=(draw(st.integers(1, 5)), draw(st.integers(1, 5))),
                stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                padding=(draw(st.integers(0, 3)), draw(st.integers(0, 3))),
                dilation=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), g_level=g_level,
                xw=draw(slice_method()), ww=draw(weight_method(g_level)), xp=(draw(st.integers(1, 4)), n),
                wp=(n, draw(st.integers(1, 9))), bw_e=draw(st.sampled_from([None, 0, 4])),
                rdac=draw(st.sampled_from([2, 4, 256])), radc=draw(st.sampled_from([2, 5, 4096])),
                seed=draw(st.integers(0, 2 ** 31)))


def out_size(c, axis):
    size = (c["H"], c["W"])[axis]
    return (size + 2 * c["padding"][axis] - c["dilation"][axis] * (c["k"][axis] - 1) - 1) // c["stride"][axis] + 1


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@settings(max_examples=20)
@given(conv_cases())
def test_conv2d_equals_the_reference_on_unfolded_patches(c):
    """Conv2dMem (CPU) and forward_conv2d (OpenCL) against reference_product of torch's unfold;
    a kernel larger than the padded input is a ValueError, an empty batch an empty output."""
    from pyfastpim.nn import Conv2dMem
    ho, wo = out_size(c, 0), out_size(c, 1)
    x = torch.from_numpy(np.random.default_rng(c["seed"]).standard_normal((c["N"], c["C"], c["H"], c["W"]))
                         .astype(np.float32))
    eng = DPETensor(g_level=c["g_level"], rdac=c["rdac"], radc=c["radc"], **NOISE_OFF)
    layer = Conv2dMem(eng, c["C"], c["P"], c["k"], c["xw"], c["ww"], stride=c["stride"], padding=c["padding"],
                      dilation=c["dilation"], bias=False, bw_e=c["bw_e"], input_paral_size=c["xp"],
                      weight_paral_size=c["wp"], input_quant_gran=c["xp"], weight_quant_gran=c["wp"])
    if ho < 1 or wo < 1:
        with pytest.raises(ValueError):
            layer(x)
        return
    with torch.no_grad():
        got = layer(x).numpy()
    assert got.shape == (c["N"], c["P"], ho, wo)
    if c["N"] == 0:
        return
    w2 = layer.weight.detach().numpy().reshape(c["P"], -1).T.copy()
    patches = torch.nn.functional.unfold(x, c["k"], dilation=c["dilation"], padding=c["padding"],
                                         stride=c["stride"]).transpose(1, 2).contiguous().numpy()
    ref = reference_product(patches, w2, eng, c["xw"], c["ww"], c["xp"], c["wp"], c["xp"], c["wp"], c["bw_e"] or None)
    ref = ref.transpose(0, 2, 1).reshape(got.shape)
    assert_bits(got, ref, "Conv2dMem")
    if HAVE_CL:
        dev = pyfastpim.resolve_device("opencl")
        ceng = DPETensor(g_level=c["g_level"], rdac=c["rdac"], radc=c["radc"], device=dev, **NOISE_OFF)
        ws = SlicedData(c["ww"], bw_e=c["bw_e"], is_weight=True, paral_size=c["wp"], quant_gran=c["wp"], device=dev)
        ws.slice_data_imp(ceng, w2)
        out = ceng.forward_conv2d(x.numpy(), ws, c["k"], c["stride"], c["padding"], c["dilation"], c["xw"], c["xp"],
                                  c["xp"], bw_e=c["bw_e"])[0]
        assert_bits(out, ref, "forward_conv2d on OpenCL")


# ---- noise on: the same seed gives the same bits on every path ----------------------------------

@pytest.mark.skipif(torch is None, reason="torch is not installed")
@settings(max_examples=10)
@given(conv_cases(), st.sampled_from([0.0, 0.05]), st.sampled_from([0.0, 0.1]), st.sampled_from([0.0, 0.05]),
       st.sampled_from([0.0, 0.05]))
@restores_cpu_state
def test_noisy_convolution_replays_bit_for_bit_on_every_path(c, read, vnoise, write, stuck):
    """Read noise, DAC noise, write variation and stuck cells with one seed: every ISA and thread
    count, the OpenCL device (where the CPU draws noise with its SIMD path) and the product of the
    unfolded patches give the same bits, call after call."""
    ho, wo = out_size(c, 0), out_size(c, 1)
    assume(ho >= 1 and wo >= 1 and c["N"] > 0)  # a case with an output (a return passed without asserting)
    rng = np.random.default_rng(c["seed"])
    x = rng.standard_normal((c["N"], c["C"], c["H"], c["W"])).astype(np.float32)
    w2 = rng.standard_normal((c["C"] * c["k"][0] * c["k"][1], c["P"])).astype(np.float32)
    kw = dict(g_level=c["g_level"], rdac=c["rdac"], radc=c["radc"], read_variation=read, vnoise=vnoise,
              write_variation=write, rate_stuck_HGS=stuck, rate_stuck_LGS=stuck / 2, seed=c["seed"] % 997)
    geometry = (c["k"], c["stride"], c["padding"], c["dilation"], c["xw"], c["xp"], c["xp"])

    def calls(device=None):
        eng = DPETensor(device=device, **kw)
        ws = SlicedData(c["ww"], bw_e=c["bw_e"], is_weight=True, paral_size=c["wp"], quant_gran=c["wp"],
                        device=device)
        ws.slice_data_imp(eng, w2)
        return [np.asarray(eng.forward_conv2d(x, ws, *geometry, bw_e=c["bw_e"])[0]) for _ in range(2)], eng, ws

    pyfastpim.set_num_threads(2)
    base, eng, ws = calls()
    patches = torch.nn.functional.unfold(torch.from_numpy(x), c["k"], dilation=c["dilation"], padding=c["padding"],
                                         stride=c["stride"]).transpose(1, 2).contiguous().numpy()
    eng.reset(c["seed"] % 997)
    for b in base:
        y = np.asarray(eng.forward_linear(patches, ws, c["xw"], c["xp"], c["xp"], bw_e=c["bw_e"])[0])
        assert_bits(y.transpose(0, 2, 1).reshape(b.shape), b, "forward_linear of the unfolded patches")
    for isa in available_isas():
        pyfastpim.set_isa_limit(isa)
        for threads in (1, 2):
            pyfastpim.set_num_threads(threads)
            for got, b in zip(calls()[0], base):
                assert_bits(got, b, "%s, %d threads" % (isa, threads))
    if HAVE_CL and SIMD_NOISE:
        no_isa_limit()
        for got, b in zip(calls(pyfastpim.resolve_device("opencl"))[0], base):
            assert_bits(got, b, "OpenCL")
