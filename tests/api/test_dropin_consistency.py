"""One behaviour across the entry points that take the same thing (review r11 items): bw_e=0 in the
layers, errors naming the caller's own arguments, empty batches in dpe_matmul, the attention
module's input checks without an incoming context, the compatibility layers' weight_sliced class."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the layers are torch modules")

import pyfastpim  # noqa: E402
from pyfastpim import memintelli  # noqa: E402
from pyfastpim.nn import AttentionContext, Conv2dMem, LinearMem  # noqa: E402
from helpers import NOISE_OFF, layer_engine as engine, outcome  # noqa: E402

S8 = (1, 1, 2, 4)


# ----------------------------------------------------------------------------- 1. bw_e=0 in the layers

def _layer_out(make, x, bw_e):
    torch.manual_seed(0)
    layer = make(bw_e)
    with torch.no_grad():
        return layer(x)


@pytest.mark.parametrize("kind", ["linear", "conv", "compat linear", "compat conv"])
def test_layers_take_bw_e_0_as_int(kind):
    # SlicedData and the engine read bw_e=0 as INT (docs/semantics.md section 4, MemIntelli's
    # `if bw_e:`); LinearMem / Conv2dMem refused it with "bw_e must be None ... or a positive int"
    lin, conv = (memintelli.LinearMem, memintelli.Conv2dMem) if kind.startswith("compat") else (LinearMem, Conv2dMem)
    rng = np.random.default_rng(1)
    if kind.endswith("linear"):
        def make(bw_e):
            return lin(engine(), 24, 5, S8, S8, bw_e=bw_e)
        x = torch.from_numpy(rng.standard_normal((3, 24)).astype(np.float32) * np.float32([1, 50, 0.02] * 8))
    else:
        def make(bw_e):
            return conv(engine(), 3, 4, 3, S8, S8, bw_e=bw_e)
        x = torch.from_numpy(rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
                             * np.float32([1, 50, 0.02])[None, :, None, None])
    int_out, zero_out, bfp_out = (_layer_out(make, x, b) for b in (None, 0, 8))
    assert torch.equal(zero_out, int_out)
    assert not torch.equal(bfp_out, int_out)  # the data tells INT from BFP
    layer = make(0)
    assert layer.bw_e == 0 and not layer.weight_sliced.bw_e
    # one rule with SlicedData, the engine and the C core (_core.check_bw_e): a wrong type is a TypeError (was
    # ValueError here while slice_quantize raised TypeError), a negative int a ValueError
    for bad, exc in ((-1, ValueError), (True, TypeError), (False, TypeError), (1.5, TypeError), ("8", TypeError)):
        with pytest.raises(exc, match="^argument 'bw_e'"):
            make(bad)


# ----------------------------------------------------------------------------- 2. errors name the caller's arguments

BAD_INPUT = [(dict(input_slice=(2, 1)), "input_slice"), (dict(input_slice="ab"), "input_slice"),
             (dict(input_slice=()), "input_slice"), (dict(input_slice=(1,) * 17), "input_slice"),
             (dict(input_paral_size=(0, 32)), "input_paral_size"), (dict(input_paral_size="ab"), "input_paral_size"),
             (dict(input_paral_size=(1, 2, 3)), "input_paral_size"), (dict(input_paral_size=(1, 16)), "input_paral_size"),
             (dict(input_quant_gran="rows"), "input_quant_gran"), (dict(input_quant_gran=(0, 1)), "input_quant_gran"),
             (dict(bw_e=-1), "bw_e")]


@pytest.mark.parametrize("kw, name", BAD_INPUT, ids=[str(k) for k, _ in BAD_INPUT])
@pytest.mark.parametrize("rows", [4, 0])
def test_forward_linear_errors_name_its_own_arguments(kw, name, rows):
    # they named SlicedData's parameters (slice_method, paral_size, quant_gran), which
    # forward_linear does not have
    eng = engine()
    w = pyfastpim.SlicedData(S8, is_weight=True, paral_size=(32, 32))
    w.slice_data_imp(eng, np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32))
    args = dict(dict(input_slice=S8), **kw)
    kind, message = outcome(lambda: eng.forward_linear(np.ones((rows, 32), np.float32), w, **args))
    assert kind in (TypeError, ValueError) and message.startswith("argument '%s'" % name), message


def test_forward_linear_errors_name_x_and_w_sliced():
    eng = engine()
    w = pyfastpim.SlicedData(S8, is_weight=True, paral_size=(32, 32))
    w.slice_data_imp(eng, np.ones((32, 8), np.float32))
    x = np.ones((2, 32), np.float32)
    with pytest.raises(ValueError, match=r"^argument 'x': contains NaN"):  # was 'data'
        eng.forward_linear(x * np.nan, w, S8)
    with pytest.raises(ValueError, match=r"^argument 'x': expected a 2-D"):
        eng.forward_linear(np.ones((1, 1, 2, 32), np.float32), w, S8)
    unsliced = pyfastpim.SlicedData(S8, is_weight=True, paral_size=(32, 32))
    xs = pyfastpim.SlicedData(S8, paral_size=(1, 32))
    xs.slice_data_imp(eng, np.ones((32, 8), np.float32))
    for rows in (2, 0):
        data = np.ones((rows, 32), np.float32)
        with pytest.raises(TypeError, match=r"^argument 'w_sliced'"):  # was "MapReduceDot takes two SlicedData"
            eng.forward_linear(data, w.G, S8)
        with pytest.raises(ValueError, match=r"^argument 'w_sliced': the weights are not sliced"):  # was 'mat'
            eng.forward_linear(data, unsliced, S8)
        with pytest.raises(ValueError, match=r"^argument 'w_sliced': expected weights"):
            eng.forward_linear(data, xs, S8)


def test_forward_conv2d_errors_name_input_slice():
    eng = engine()
    conv = Conv2dMem(eng, 3, 4, 3, S8, S8)
    for rows in (2, 0):
        x = np.ones((rows, 3, 6, 6), np.float32)
        with pytest.raises(ValueError, match=r"^argument 'input_slice'"):  # was 'slice_method'
            eng.forward_conv2d(x, conv.weight_sliced, 3, input_slice=(2, 2))
        with pytest.raises(ValueError, match=r"^argument 'input_paral_size': paral_size mismatch"):
            eng.forward_conv2d(x, conv.weight_sliced, 3, input_slice=S8, input_paral_size=(1, 16))


BAD_MATMUL = BAD_INPUT[:-1] + [(dict(weight_slice=(1, 0)), "weight_slice"), (dict(weight_slice=7), "weight_slice"),
                               (dict(weight_quant_gran="rows"), "weight_quant_gran"),
                               (dict(weight_paral_size=(16, 32)), "input_paral_size', 'weight_paral_size")]


@pytest.mark.parametrize("kw, name", BAD_MATMUL, ids=[str(k) for k, _ in BAD_MATMUL])
def test_dpe_matmul_errors_name_its_own_arguments(kw, name):
    eng = engine()
    w = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)
    for rows in (3, 0):
        kind, message = outcome(lambda: pyfastpim.dpe_matmul(np.ones((rows, 32), np.float32), w, eng, **kw))
        assert kind in (TypeError, ValueError) and "'%s'" % name in message.split(":")[0], message
    x = np.ones((3, 32), np.float32)
    with pytest.raises(ValueError, match=r"^argument 'x': contains NaN"):
        pyfastpim.dpe_matmul(x * np.nan, w, eng)
    with pytest.raises(ValueError, match=r"^argument 'w': contains NaN"):
        pyfastpim.dpe_matmul(x, w * np.nan, eng)
    with pytest.raises(ValueError, match=r"^argument 'w': weights must be 2-D"):
        pyfastpim.dpe_matmul(x, w[0], eng)


# ----------------------------------------------------------------------------- 3. empty batches in dpe_matmul

@pytest.mark.parametrize("shape", [(0, 32), (3, 0, 32), (0, 4, 32)])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_dpe_matmul_accepts_empty_batches(shape, lib):
    # refused with "argument 'data': the array is empty" while forward_linear gave an empty product
    eng = engine()
    w = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)
    x = np.zeros(shape, np.float64 if lib == "numpy" else np.float32)
    x = torch.from_numpy(x) if lib == "torch" else x
    calls = eng.calls
    y = pyfastpim.dpe_matmul(x, w, eng)
    assert isinstance(y, torch.Tensor if lib == "torch" else np.ndarray)
    assert tuple(y.shape) == shape[:-1] + (8,) and y.dtype == (torch.float32 if lib == "torch" else np.float32)
    assert eng.calls == calls + 1  # a call number, as a non-empty call
    with pytest.raises(ValueError, match="mismatches"):  # K must still match
        pyfastpim.dpe_matmul(np.zeros(shape[:-1] + (31,), np.float32), w, eng)


# ----------------------------------------------------------------------------- 4. the attention module's input

BAD_ATTENTION_INPUTS = {"list": lambda: [[1.0, 2.0, 3.0, 4.0]], "ndarray": lambda: np.ones((2, 4), np.float32),
                        "None": lambda: None, "float": lambda: 1.0, "0-d": lambda: torch.tensor(1.0),
                        "int64": lambda: torch.ones(2, 4, dtype=torch.int64),
                        "bool": lambda: torch.ones(2, 4, dtype=torch.bool),
                        "complex": lambda: torch.ones(2, 4, dtype=torch.complex64),
                        "meta": lambda: torch.ones(2, 4, device="meta")}


@pytest.mark.parametrize("case", list(BAD_ATTENTION_INPUTS))
def test_attention_module_checks_its_input_without_incoming_as_with_it(case):
    # without an incoming context forward returned its input unchecked (a list, a 0-d or an
    # integer tensor passed); with one, some failed with AttributeError and integer tensors were
    # computed in float32 and truncated back
    with_incoming = AttentionContext(strength=0.5)
    with_incoming.incoming = torch.eye(4)
    without = AttentionContext(strength=0.5)
    got = [outcome(lambda m=m: m(BAD_ATTENTION_INPUTS[case]())) for m in (with_incoming, without)]
    assert got[0] == got[1], got
    assert got[0][0] in (TypeError, ValueError) and "argument 'x'" in got[0][1], got


def test_attention_module_without_incoming_still_returns_its_input():
    m = AttentionContext(strength=0.5)
    for x in (torch.randn(3, 4), torch.randn(2, 3, 5, dtype=torch.float64), torch.zeros(0, 4)):
        assert m(x) is x


# ----------------------------------------------------------------------------- 5. the compatibility layers' weight_sliced

@pytest.mark.parametrize("kind", ["linear", "conv2d", "conv1d"])
def test_memintelli_layers_hold_the_device_aware_sliced_data(kind):
    # MemIntelli's layers hold its SlicedData (attributes on the engine's device); pyfastpim.memintelli's
    # held a plain pyfastpim.SlicedData. DPETensor(device="cuda") runs here without CUDA: the attributes
    # then stay on the host, and training gives what a CPU engine gives.
    make = {"linear": lambda e: memintelli.LinearMem(e, 12, 5, [1, 1, 2, 4], [1, 1, 2, 4]),
            "conv2d": lambda e: memintelli.Conv2dMem(e, 3, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4]),
            "conv1d": lambda e: memintelli.Conv1dMem(e, 3, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4])}[kind]
    shape = {"linear": (3, 12), "conv2d": (2, 3, 6, 6), "conv1d": (2, 3, 9)}[kind]
    x = torch.randn(*shape)
    results = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        layer = make(memintelli.DPETensor(device=device, seed=3, **NOISE_OFF))
        ws = layer.weight_sliced
        assert type(ws) is memintelli.SlicedData and type(ws.t()) is memintelli.SlicedData
        assert ws.device == layer.engine.device
        assert ws.G.device.type == "cpu" or torch.cuda.is_available()
        xg = x.clone().requires_grad_()
        y = layer(xg)
        y.square().sum().backward()
        results.append((y.detach(), xg.grad, layer.weight.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ----------------------------------------------------------------------------- 6. one rule per argument (r11s33g)

BAD_BW_E = ["8", 1.5, True, -1, -2 ** 70]


@pytest.mark.parametrize("bad", BAD_BW_E, ids=[repr(b) for b in BAD_BW_E])
def test_bw_e_mistakes_get_one_error_from_every_entry_point(bad):
    # SlicedData, the layers and the engine's Python checks raised ValueError for every mistake, the C core
    # (slice_quantize) TypeError for a wrong type: now one rule (_core.check_bw_e), TypeError for a wrong
    # type, ValueError for a negative int, the same words everywhere
    eng = engine()
    conv = Conv2dMem(eng, 3, 4, 3, S8, S8)
    x, w = np.ones((2, 27), np.float32), np.ones((27, 4), np.float32)
    calls = {"core": lambda: pyfastpim._core.slice_quantize(x, S8, (1, 32), None, bad),
             "SlicedData": lambda: pyfastpim.SlicedData(S8, bw_e=bad),
             "compat SlicedData": lambda: memintelli.SlicedData(S8, bw_e=bad),
             "forward_linear": lambda: eng.forward_linear(x, conv.weight_sliced, S8, bw_e=bad),
             "forward_conv2d": lambda: eng.forward_conv2d(np.ones((1, 3, 5, 5), np.float32), conv.weight_sliced, 3,
                                                          input_slice=S8, bw_e=bad),
             "dpe_matmul": lambda: pyfastpim.dpe_matmul(x, w, eng, bw_e=bad),
             "LinearMem": lambda: LinearMem(eng, 27, 4, S8, S8, bw_e=bad),
             "Conv2dMem": lambda: Conv2dMem(eng, 3, 4, 3, S8, S8, bw_e=bad),
             "compat LinearMem": lambda: memintelli.LinearMem(eng, 27, 4, S8, S8, bw_e=bad),
             "compat Conv2dMem": lambda: memintelli.Conv2dMem(eng, 3, 4, 3, S8, S8, bw_e=bad)}
    got = {label: outcome(fn) for label, fn in calls.items()}
    expected = (ValueError if isinstance(bad, int) and not isinstance(bad, bool) else TypeError)
    assert got["core"][0] is expected and got["core"][1].startswith("argument 'bw_e'"), got["core"]
    assert all(v == got["core"] for v in got.values()), got


def test_paral_sizes_are_pairs_in_every_entry_point():
    # SlicedData (and MemIntelli) take paral_size / quant_gran as pairs and forward_linear refused an int,
    # while forward_conv2d and dpe_matmul read an int n as (n, n): now all refuse it, naming the argument
    eng = engine()
    conv = Conv2dMem(eng, 3, 4, 3, S8, S8)
    x, w, img = np.ones((2, 27), np.float32), np.ones((27, 4), np.float32), np.ones((1, 3, 5, 5), np.float32)
    assert outcome(lambda: pyfastpim.SlicedData(S8, paral_size=32))[0] is TypeError
    calls = {"input_paral_size": [lambda: eng.forward_linear(x, conv.weight_sliced, S8, input_paral_size=32),
                                  lambda: eng.forward_conv2d(img, conv.weight_sliced, 3, input_slice=S8,
                                                             input_paral_size=32),
                                  lambda: pyfastpim.dpe_matmul(x, w, eng, input_paral_size=32)],
             "input_quant_gran": [lambda: eng.forward_linear(x, conv.weight_sliced, S8, input_quant_gran=32),
                                  lambda: eng.forward_conv2d(img, conv.weight_sliced, 3, input_slice=S8,
                                                             input_quant_gran=32),
                                  lambda: pyfastpim.dpe_matmul(x, w, eng, input_quant_gran=32)],
             "weight_paral_size": [lambda: pyfastpim.dpe_matmul(x, w, eng, weight_paral_size=32)],
             "weight_quant_gran": [lambda: pyfastpim.dpe_matmul(x, w, eng, weight_quant_gran=32)]}
    for name, fns in calls.items():
        got = [outcome(fn) for fn in fns]
        assert got[0][0] is TypeError and got[0][1].startswith("argument '%s'" % name), got
        assert all(g == got[0] for g in got), got


@pytest.mark.parametrize("make", [np.array, torch.tensor])
def test_paral_sizes_and_granules_given_as_arrays_or_tensors_work_everywhere(make):
    # MemIntelli's zoo hints these sizes as tensors and its SlicedData takes tensor pairs, as pyfastpim's layers did;
    # pyfastpim's SlicedData, slice_quantize, forward_linear / forward_conv2d and dpe_matmul refused a tensor pair
    # ("expected ints, got tensor([ 1, 32])"): each gives what the tuple gives
    eng = engine()
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 40)).astype(np.float32), rng.standard_normal((40, 5)).astype(np.float32)
    img = rng.standard_normal((1, 40, 3, 3)).astype(np.float32)
    ws = pyfastpim.SlicedData(S8, is_weight=True, paral_size=(32, 32))
    ws.slice_data_imp(eng, w)
    def sliced(cls, data, p, g):
        s = cls(S8, paral_size=p, quant_gran=g)
        s.slice_data_imp(eng, data)
        return s.quantized_data

    calls = [
        lambda p, g: sliced(pyfastpim.SlicedData, x, p, g),
        lambda p, g: sliced(memintelli.pimpy.SlicedData, torch.from_numpy(x), p, g),
        lambda p, g: pyfastpim.slice_quantize(x, S8, paral_size=p, quant_gran=g).dequant,
        lambda p, g: eng.forward_linear(x, ws, S8, p, g)[0],
        lambda p, g: eng.forward_conv2d(img, ws, 1, 1, 0, 1, S8, p, g)[0],
        lambda p, g: pyfastpim.dpe_matmul(x, w, eng, S8, S8, p, make([32, 32]), g, make([32, 16])),
    ]
    for fn in calls:
        want = np.asarray(fn((1, 32), (1, 16)))
        assert np.array_equal(np.asarray(fn(make([1, 32]), make([1, 16]))), want)
    for bad, exc in ((make([1.0, 32.0]), TypeError), (make([True, True]), TypeError), (make(32), TypeError),
                     (make([1, 32, 2]), ValueError), (make([0, 32]), ValueError)):
        assert outcome(lambda: pyfastpim.SlicedData(S8, paral_size=bad))[0] is exc, bad


@pytest.mark.parametrize("grad", [False, True])
def test_layers_name_their_input_argument(grad):
    # a NaN input to LinearMem (nn and compat) and map_reduce_dot_func was reported as argument 'x' (the
    # engine's); Conv2dMem said 'input', but forward_conv2d then said 'input' for its argument x
    eng = engine()
    nan_vec, nan_img = torch.full((2, 27), float("nan")), torch.full((1, 3, 5, 5), float("nan"))
    layers = [(LinearMem(eng, 27, 4, S8, S8), nan_vec), (memintelli.LinearMem(eng, 27, 4, S8, S8), nan_vec),
              (Conv2dMem(eng, 3, 4, 3, S8, S8), nan_img), (memintelli.Conv2dMem(eng, 3, 4, 3, S8, S8), nan_img)]
    for layer, x in layers:
        kind, message = outcome(lambda: layer(x.clone().requires_grad_(grad)))
        assert kind is ValueError and message.startswith("argument 'input': contains NaN"), (layer, message)
    ws = layers[2][0].weight_sliced
    kind, message = outcome(lambda: memintelli.map_reduce_dot_func(eng, nan_vec.clone().requires_grad_(grad), S8, ws))
    assert kind is ValueError and message.startswith("argument 'input': contains NaN"), message
    with pytest.raises(ValueError, match="^argument 'x': contains NaN"):
        eng.forward_conv2d(nan_img.numpy(), ws, 3, input_slice=S8)
