"""LinearMem / Conv2dMem: docs/semantics.md section 8 against the NumPy transcription, autograd, caching, errors."""
import copy
import pickle

import numpy as np
import pytest
torch = pytest.importorskip("torch", reason="the layers are torch modules")
import torch.nn.functional as F  # noqa: E402

import pyfastpim
from pyfastpim.nn import Conv2dMem, LinearMem
from helpers import layer_engine

S4 = (1, 1, 2, 2)
S8 = (1, 1, 2, 4)


def engine(**kw):
    if not hasattr(pyfastpim, "DPETensor") or not hasattr(pyfastpim, "SlicedData"):
        pytest.skip("pyfastpim.DPETensor / SlicedData not in this build")
    return layer_engine(**dict(dict(seed=0), **kw))


# ----------------------------------------------------------------------------- NumPy references

def _refs():
    spec = pytest.importorskip("reference.spec")
    dpe_ref = pytest.importorskip("reference.dpe_ref")
    return spec, dpe_ref


def ref_mvm(x, w, eng, layer):
    """The spec's noise-free MapReduceDot of x (N, K) or (B, N, K) with w (K, P): the NumPy
    transcriptions of sections 2-6 (quantize, slice, program) and 7 (exact MVM), float32."""
    spec, dpe_ref = _refs()
    x = np.asarray(x, dtype=np.float32)
    x3 = x if x.ndim == 3 else x[None]
    xw, ww, bw_e = layer.input_slice, layer.weight_slice, layer.bw_e
    qx = spec.quantize_reference(x3, layer.input_paral_size, layer.input_quant_gran, xw, bw_e)
    qw = spec.quantize_reference(np.asarray(w, dtype=np.float32), layer.weight_paral_size, layer.weight_quant_gran,
                                 ww, bw_e)
    xs = spec.slice_reference(qx["q"], xw)
    levels = spec.program_levels_reference(spec.slice_reference(qw["q"], ww)[:, 0], ww, eng.g_level)
    radc = list(eng.radc)[::-1] if isinstance(eng.radc, (tuple, list)) else [eng.radc] * len(ww)
    out = dpe_ref.mvm_exact(xs, qx["gran_scale"], qx["granule"], xw, levels, qw["gran_scale"][0], qw["granule"], ww,
                            layer.input_paral_size[1], eng.rdac, eng.g_level, radc)
    return torch.from_numpy(out if x.ndim == 3 else out[0])


def ref_dequant(x, paral, gran, widths, bw_e):
    """Dequantized values (spec 3-4) of one matrix (R, C)."""
    spec, _ = _refs()
    return torch.from_numpy(spec.quantize_reference(np.asarray(x, dtype=np.float32), paral, gran, widths,
                                                    bw_e=bw_e)["dequant"][0])


def ref_dequant_rows(x, layer):
    """Dequantized input (N, K) or batched (B, N, K), each item quantized on its own."""
    if x.dim() == 2:
        return ref_dequant(x, layer.input_paral_size, layer.input_quant_gran, layer.input_slice, layer.bw_e)
    return torch.stack([ref_dequant_rows(xi, layer) for xi in x])


def ref_wq(layer):
    """Dequantized programmed matrix W.reshape(out, -1)^T (C, P)."""
    wt = layer.weight.detach().reshape(layer.weight.shape[0], -1).t().contiguous()
    return ref_dequant(wt, layer.weight_paral_size, layer.weight_quant_gran, layer.weight_slice, layer.bw_e)


LINEAR_CASES = [
    # (in, out, input_slice, weight_slice, input_paral, weight_paral, input_gran, weight_gran, bw_e, engine kw)
    (70, 40, S4, S4, (1, 32), (32, 32), (1, 32), (32, 32), None, dict(g_level=4, rdac=4, radc=2 ** 12)),
    (64, 10, S8, S8, (1, 32), (32, 32), (1, 64), (64, 64), None, {}),
    (33, 17, S8, (1, 1, 2), (2, 16), (16, 8), "per-row", "per-col", None, dict(radc=2 ** 6)),
    (50, 20, (1, 1, 2, 2, 2), S4, (1, 32), (32, 16), "per-matrix", None, 4, dict(radc=[2 ** 8, 2 ** 10, 2 ** 10, 2 ** 12])),
]


def make_linear(case, bias=True, seed=0):
    i, o, xs, ws, xp, wp, xg, wg, bw_e, ekw = case
    torch.manual_seed(seed)
    eng = engine(**ekw)
    return LinearMem(eng, i, o, xs, ws, bias=bias, bw_e=bw_e, input_paral_size=xp, weight_paral_size=wp,
                     input_quant_gran=xg, weight_quant_gran=wg), eng


# ----------------------------------------------------------------------------- LinearMem numbers

@pytest.mark.parametrize("case", LINEAR_CASES, ids=range(len(LINEAR_CASES)))
@pytest.mark.parametrize("batched", [False, True])
def test_linear_forward_matches_spec(case, batched):
    layer, eng = make_linear(case)
    shape = (3, 5, case[0]) if batched else (7, case[0])
    x = torch.randn(*shape) * 3
    with torch.no_grad():
        y = layer(x)
    wt = layer.weight.detach().t().contiguous()
    expect = ref_mvm(x.numpy(), wt.numpy(), eng, layer) + layer.bias.detach()
    assert y.dtype == torch.float32 and y.shape == shape[:-1] + (case[1],)
    assert torch.equal(y, expect)
    # the graph-building path computes the same numbers
    x.requires_grad_(True)
    assert torch.equal(layer(x).detach(), expect)


@pytest.mark.parametrize("case", LINEAR_CASES, ids=range(len(LINEAR_CASES)))
@pytest.mark.parametrize("batched", [False, True])
def test_linear_straight_through_gradients(case, batched):
    layer, _ = make_linear(case)
    shape = (2, 6, case[0]) if batched else (9, case[0])
    x = (torch.randn(*shape) * 2).requires_grad_(True)
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    wq = ref_wq(layer)                                   # (in, out)
    xq = ref_dequant_rows(x.detach(), layer)
    assert torch.equal(torch.as_tensor(np.asarray(layer.weight_sliced.quantized_data)), wq)
    dy2 = dy.reshape(-1, dy.shape[-1])
    torch.testing.assert_close(x.grad, dy @ wq.t())
    torch.testing.assert_close(layer.weight.grad, dy2.t() @ xq.reshape(-1, xq.shape[-1]))
    torch.testing.assert_close(layer.bias.grad, dy2.sum(0))


def test_linear_batched_items_are_independent():
    layer, _ = make_linear(LINEAR_CASES[1])
    x = torch.randn(3, 4, 64)
    with torch.no_grad():
        y = layer(x)
        for b in range(3):
            assert torch.equal(y[b], layer(x[b]))
        # 1-D input is one row; more leading dimensions fold into the batch
        assert torch.equal(layer(x[0, 0]), y[0, 0])
        assert torch.equal(layer(x.reshape(1, 3, 4, 64))[0], y)


def test_linear_float64_input_and_params():
    torch.manual_seed(0)
    layer = LinearMem(engine(), 40, 8, S8, S8, dtype=torch.float64)
    x = torch.randn(5, 40, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    assert y.dtype == torch.float64
    y.sum().backward()
    assert x.grad.dtype == torch.float64 and layer.weight.grad.dtype == torch.float64
    with torch.no_grad():
        assert torch.equal(layer(x.float()).double(), y.detach())


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_autocast_leaves_the_crossbar_arithmetic_alone(kind):
    """README: under torch.autocast the layers compute as outside it (MemIntelli's move by ~3%): the same
    outputs in the input's dtype, and the same gradients."""
    torch.manual_seed(2)
    if kind == "linear":
        layer, x = LinearMem(engine(), 40, 8, S8, S8), torch.randn(5, 40)
    else:
        layer, x = Conv2dMem(engine(), 3, 4, 3, S8, S8, padding=1), torch.randn(2, 3, 6, 6)
    runs = []
    for autocast in (False, True):
        xr = x.clone().requires_grad_()
        layer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = layer(xr)
        y.backward(torch.ones_like(y))
        runs.append((y, xr.grad, layer.weight.grad.clone()))
    (y0, dx0, dw0), (y1, dx1, dw1) = runs
    assert y1.dtype == torch.float32
    assert torch.equal(y1, y0) and torch.equal(dx1, dx0) and torch.equal(dw1, dw0)


def test_linear_no_bias_and_partial_requires_grad():
    layer, _ = make_linear(LINEAR_CASES[0], bias=False)
    assert layer.bias is None
    layer.weight.requires_grad_(False)
    x = torch.randn(4, 70, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None and layer.weight.grad is None


# ----------------------------------------------------------------------------- Conv2dMem numbers

CONV_CASES = [
    # (C_in, C_out, kernel, stride, padding, dilation, H, W)
    (3, 8, 3, 1, 1, 1, 9, 9),
    (4, 6, (3, 2), (2, 1), (1, 0), 1, 10, 7),
    (2, 5, (2, 3), 2, 2, (2, 1), 11, 8),
    (5, 7, 1, 1, 0, 1, 6, 5),
    (8, 4, 3, (1, 3), (0, 2), (1, 2), 7, 12),
]


def make_conv(case, ekw=None, bias=True, seed=0, **kw):
    cin, cout, k, s, p, d, _, _ = case
    torch.manual_seed(seed)
    eng = engine(**(ekw or {}))
    return Conv2dMem(eng, cin, cout, k, S8, S4, stride=s, padding=p, dilation=d, bias=bias, **kw), eng


def unfold(layer, x):
    return F.unfold(x, layer.kernel_size, dilation=layer.dilation, padding=layer.padding,
                    stride=layer.stride).transpose(1, 2).contiguous()


@pytest.mark.parametrize("case", CONV_CASES, ids=range(len(CONV_CASES)))
def test_conv_forward_matches_spec(case):
    layer, eng = make_conv(case, input_quant_gran=(1, 16), weight_paral_size=(32, 16), weight_quant_gran=(32, 16))
    x = torch.randn(2, case[0], case[6], case[7])
    with torch.no_grad():
        y = layer(x)
    expect_shape = F.conv2d(x, layer.weight, stride=layer.stride, padding=layer.padding, dilation=layer.dilation).shape
    assert y.shape == expect_shape
    cols = unfold(layer, x)
    wt = layer.weight.detach().reshape(case[1], -1).t().contiguous()
    ref = ref_mvm(cols.numpy(), wt.numpy(), eng, layer) + layer.bias.detach()
    assert torch.equal(y, ref.transpose(1, 2).reshape(expect_shape))


@pytest.mark.parametrize("case", CONV_CASES, ids=range(len(CONV_CASES)))
def test_conv_equals_unfold_then_linear(case):
    conv, eng = make_conv(case, ekw=dict(radc=2 ** 8))
    lin = LinearMem(eng, conv.weight[0].numel(), conv.out_channels, conv.input_slice, conv.weight_slice)
    with torch.no_grad():
        lin.weight.copy_(conv.weight.reshape(conv.out_channels, -1))
        lin.bias.copy_(conv.bias)
    x = torch.randn(3, case[0], case[6], case[7])
    with torch.no_grad():
        y = conv(x)
        z = lin(unfold(conv, x))
    assert torch.equal(y, z.transpose(1, 2).reshape(y.shape))
    # unbatched input
    with torch.no_grad():
        assert torch.equal(conv(x[1]), y[1])


@pytest.mark.parametrize("case", CONV_CASES, ids=range(len(CONV_CASES)))
def test_conv_straight_through_gradients(case):
    layer, _ = make_conv(case)
    x = torch.randn(2, case[0], case[6], case[7], requires_grad=True)
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    wq = ref_wq(layer)                                               # (C_in*kh*kw, C_out)
    xq = ref_dequant_rows(unfold(layer, x.detach()), layer)          # (N, L, C_in*kh*kw)
    wq4 = wq.t().reshape(layer.weight.shape)
    dy_cols = dy.reshape(dy.shape[0], dy.shape[1], -1)               # (N, C_out, L)
    dw = torch.einsum("nol,nlk->ok", dy_cols, xq).reshape(layer.weight.shape)
    dx = F.fold((dy_cols.transpose(1, 2) @ wq.t()).transpose(1, 2), x.shape[2:], layer.kernel_size,
                dilation=layer.dilation, padding=layer.padding, stride=layer.stride)
    torch.testing.assert_close(layer.weight.grad, dw, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, dx, rtol=1e-5, atol=1e-5)
    # the same as autograd through an ordinary convolution with Wq (dx) 
    xv = x.detach().clone().requires_grad_(True)
    F.conv2d(xv, wq4, stride=layer.stride, padding=layer.padding, dilation=layer.dilation).backward(dy)
    torch.testing.assert_close(x.grad, xv.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, dy.sum((0, 2, 3)))


def _geometry_twins(kind):
    """Two identical layers of kind on engines of the same seed, and an input shape."""
    from pyfastpim.memintelli.NN_layers import Conv1dMem, Conv2dMem as MiConv2dMem
    cls, shape = {"nn": (Conv2dMem, (2, 3, 7, 7)), "memintelli": (MiConv2dMem, (2, 3, 7, 7)),
                  "conv1d": (Conv1dMem, (2, 3, 9))}[kind]
    twins = []
    for _ in range(2):
        torch.manual_seed(0)
        twins.append(cls(engine(), 3, 4, 3, S8, S8, padding=1))
    return twins, shape


@pytest.mark.parametrize("kind", ["nn", "memintelli", "conv1d"])
def test_conv_backward_takes_the_geometry_its_forward_used(kind):
    """Conv2dMem read stride / padding / dilation for its output-size check, again for the engine call and
    again for backward's saved state: one assigned while the engine ran (another thread; here the engine's
    forward_conv2d, after computing) gave backward another geometry than the forward's (a shape error or
    wrong gradients). Now the forward reads them once and backward keeps that snapshot; an assignment after
    the forward, before backward, changes nothing either. Gradients equal an unchanged twin's."""
    (layer, twin), shape = _geometry_twins(kind)
    computing = layer.engine.forward_conv2d

    def assigning(*args, **kw):
        result = computing(*args, **kw)
        layer.stride, layer.padding, layer.dilation = 2, 0, 2
        return result

    layer.engine.forward_conv2d = assigning
    x = torch.randn(shape)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    outs = [m(xi) for m, xi in zip((layer, twin), xs)]
    assert torch.equal(outs[0], outs[1])
    del layer.engine.forward_conv2d
    layer.stride, layer.padding, layer.dilation = 3, 2, 1  # between forward and backward
    dy = torch.randn_like(outs[0])
    for out in outs:
        out.backward(dy)
    assert torch.equal(xs[0].grad, xs[1].grad)
    assert torch.equal(layer.weight.grad, twin.weight.grad) and torch.equal(layer.bias.grad, twin.bias.grad)


# ----------------------------------------------------------------------------- inference path, caching

def _spy(monkeypatch, eng, name):
    calls = []
    orig = getattr(eng, name, None)
    if orig is None:
        pytest.skip("engine has no %s" % name)

    def wrapper(*a, **kw):
        calls.append(kw.get("return_dequant", False))
        return orig(*a, **kw)
    try:
        monkeypatch.setattr(eng, name, wrapper)
    except (AttributeError, TypeError):
        pytest.skip("cannot wrap %s on this engine" % name)
    return calls


def test_inference_path_keeps_no_dequantized_copies(monkeypatch):
    lin, eng = make_linear(LINEAR_CASES[1])
    calls = _spy(monkeypatch, eng, "forward_linear")
    x = torch.randn(4, 64)
    with torch.no_grad():
        assert lin(x).grad_fn is None
    lin.requires_grad_(False)
    assert lin(x).grad_fn is None                       # nothing requires grad
    lin.requires_grad_(True)
    assert lin(x).grad_fn is not None                   # training
    assert calls == [False, False, True]

    conv, eng = make_conv(CONV_CASES[0])
    calls = _spy(monkeypatch, eng, "forward_conv2d")
    x = torch.randn(1, 3, 9, 9)
    with torch.no_grad():
        assert conv(x).grad_fn is None
    assert conv(x.requires_grad_(True)).grad_fn is not None
    assert calls == [False, True]


def _programs(monkeypatch, layer):
    count = [0]
    orig = type(layer)._program  # update_weight and the automatic re-programming both program through it

    def counting(self, w):
        count[0] += 1
        return orig(self, w)
    monkeypatch.setattr(type(layer), "_program", counting)
    return count


def test_weights_programmed_once_and_reprogrammed_when_changed(monkeypatch):
    layer, _ = make_linear(LINEAR_CASES[1])
    count = _programs(monkeypatch, layer)
    x = torch.randn(4, 64)
    with torch.no_grad():
        y0 = layer(x)
        layer(x)
    assert count[0] == 0                                 # cached
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(x).sum().backward()
    opt.step()                                           # in-place update bumps weight._version
    with torch.no_grad():
        y1 = layer(x)
        layer(x)
    assert count[0] == 1 and not torch.equal(y0, y1)
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    assert set(state) == {"weight", "bias"}              # the programmed crossbars are not state
    with torch.no_grad():
        layer.weight.mul_(-1)                            # in place on the parameter
        layer(x)
    assert count[0] == 2
    layer.load_state_dict(state)                         # copy_ into the parameter
    with torch.no_grad():
        assert torch.equal(layer(x), y1)
    assert count[0] == 3
    layer.weight.data = state["weight"].clone()          # new storage
    with torch.no_grad():
        assert torch.equal(layer(x), y1)
    assert count[0] == 4
    layer.update_weight()                                # explicit, MemIntelli style
    assert count[0] == 5


def test_update_weight_only_touches_its_layer(monkeypatch):
    eng = engine()
    a = LinearMem(eng, 32, 8, S8, S8)
    b = LinearMem(eng, 8, 4, S8, S8)
    ws_b = b.weight_sliced
    a.update_weight()
    assert b.weight_sliced is ws_b


def test_deepcopy_and_state_dict_roundtrip():
    conv, eng = make_conv(CONV_CASES[1])
    x = torch.randn(2, 4, 10, 7)
    with torch.no_grad():
        y = conv(x)
        c2 = copy.deepcopy(conv)
        assert c2.engine is conv.engine                  # the engine is shared, not copied
        assert torch.equal(c2(x), y)
        c2.weight.mul_(0.5)
        assert torch.equal(conv(x), y)                   # the original is untouched
        assert not torch.equal(c2(x), y)
    c3, _ = make_conv(CONV_CASES[1], seed=5)
    c3.engine = eng
    c3.load_state_dict(conv.state_dict())
    with torch.no_grad():
        assert torch.equal(c3(x), y)
    # pickling (torch.save of a whole model) drops the programmed crossbars, re-programmed on first use
    assert conv.__getstate__()["_weight_sliced"] is None
    c4 = pickle.loads(pickle.dumps(conv))
    assert c4._weight_sliced is None
    with torch.no_grad():
        assert torch.equal(c4(x), y)


def test_noisy_engine_is_reproducible_with_its_seed():
    torch.manual_seed(0)
    noisy = dict(write_variation=0.05, read_variation=0.05, vnoise=0.05, rate_stuck_HGS=0.01)
    a = LinearMem(engine(seed=3, **noisy), 64, 16, S8, S8)
    b = LinearMem(engine(seed=3, **noisy), 64, 16, S8, S8)
    b.load_state_dict(a.state_dict())
    x = torch.randn(8, 64)
    with torch.no_grad():
        ya, yb = a(x), b(x)
        assert torch.equal(ya, yb)                       # same seed, same call number: same noise
        assert not torch.equal(a(x), ya)                 # fresh read noise every call
        ideal = F.linear(x, a.weight, a.bias)
    assert 0 < pyfastpim.RE(ideal, ya) < 0.3


def test_memintelli_style_script_runs_unchanged():
    """MemIntelli's MLP example, imports switched to pyfastpim."""
    engine()  # skips without an engine
    from torch import nn, optim
    from pyfastpim import ABSE, RE, SNR, DPETensor, SlicedData

    class MNISTClassifier(nn.Module):
        def __init__(self, engine, input_slice, weight_slice, device, layer_dims=(64, 32, 10), bw_e=None,
                     mem_enabled=True):
            super().__init__()
            self.layers = nn.ModuleList()
            for i, o in zip(layer_dims[:-1], layer_dims[1:]):
                self.layers.append(LinearMem(engine, i, o, input_slice, weight_slice, device=device, bw_e=bw_e,
                                             input_paral_size=(1, 32), weight_paral_size=(32, 32),
                                             input_quant_gran=(1, 64), weight_quant_gran=(64, 64))
                                   if mem_enabled else nn.Linear(i, o))

        def forward(self, x):
            for layer in self.layers[:-1]:
                x = F.relu(layer(x))
            return F.softmax(self.layers[-1](x), dim=1)

        def update_weight(self):
            for layer in self.layers:
                layer.update_weight()

    device = torch.device("cpu")
    torch.manual_seed(0)
    mem_engine = DPETensor(HGS=1e-5, LGS=1e-8, write_variation=0.05, rate_stuck_HGS=0.005, rate_stuck_LGS=0.005,
                           read_variation={0: 0.05, 1: 0.05, 2: 0.05, 3: 0.05}, vnoise=0.05, rdac=2 ** 2,
                           g_level=2 ** 2, radc=2 ** 12)
    soft = MNISTClassifier(None, (1, 1, 2), (1, 1, 2), device, mem_enabled=False).to(device)
    model = MNISTClassifier(mem_engine, (1, 1, 2), (1, 1, 2), device).to(device)
    model.load_state_dict(soft.state_dict())
    model.update_weight()
    x, labels = torch.randn(16, 64), torch.randint(0, 10, (16,))
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        optimizer.zero_grad()
        loss = nn.CrossEntropyLoss()(model(x), labels)
        loss.backward()
        optimizer.step()
        model.update_weight()
    model.eval()
    with torch.no_grad():
        out = model(x)
        ideal = soft(x)
    assert out.shape == (16, 10) and torch.isfinite(out).all()
    assert np.isfinite(SNR(ideal.numpy(), out.numpy())) and RE(ideal, out) >= 0 and ABSE(ideal, out) >= 0
    assert isinstance(model.layers[0].weight_sliced, SlicedData)


# ----------------------------------------------------------------------------- errors

def test_bad_inputs_raise_clear_errors():
    lin, _ = make_linear(LINEAR_CASES[1])
    conv, _ = make_conv(CONV_CASES[0])
    with pytest.raises(ValueError, match="in_features=64"):
        lin(torch.randn(4, 63))
    with pytest.raises(TypeError, match="floating-point"):
        lin(torch.ones(4, 64, dtype=torch.int32))
    with pytest.raises(TypeError, match="torch.Tensor"):
        lin(np.ones((4, 64), dtype=np.float32))
    with pytest.raises(ValueError, match="4-D"):
        conv(torch.randn(3, 81))
    with pytest.raises(ValueError, match="4-D"):
        conv(torch.randn(1, 1, 3, 9, 9))
    with pytest.raises(ValueError, match="in_channels=3"):
        conv(torch.randn(2, 4, 9, 9))
    with pytest.raises(TypeError, match="floating-point"):
        conv(torch.ones(2, 3, 9, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="too small"):
        conv(torch.randn(1, 3, 0, 0))


def test_bad_layer_arguments_raise_clear_errors():
    eng = engine()
    with pytest.raises(ValueError, match=r"input_paral_size\[1\] \(16\) must equal weight_paral_size\[0\] \(32\)"):
        LinearMem(eng, 8, 8, S8, S8, input_paral_size=(1, 16))
    with pytest.raises(ValueError, match="input_paral_size"):
        Conv2dMem(eng, 2, 2, 3, S8, S8, input_paral_size=(1, 32), weight_paral_size=(64, 32))
    with pytest.raises(ValueError, match="weight_slice"):
        LinearMem(eng, 8, 8, S8, (2, 2))
    with pytest.raises(TypeError, match="input_slice"):
        LinearMem(eng, 8, 8, None, S8)
    with pytest.raises(ValueError, match="kernel_size"):
        Conv2dMem(eng, 2, 2, 0, S8, S8)
    with pytest.raises(ValueError, match="stride"):  # a pair of the wrong length: a ValueError, as everywhere
        Conv2dMem(eng, 2, 2, 3, S8, S8, stride=(1, 2, 3))
    with pytest.raises(ValueError, match="input_quant_gran"):
        LinearMem(eng, 8, 8, S8, S8, input_quant_gran="per-block")
    with pytest.raises(ValueError, match="in_features"):
        LinearMem(eng, 0, 8, S8, S8)
    with pytest.raises(ValueError):                       # 4-bit weight slices need g_level >= 16
        LinearMem(engine(g_level=4), 8, 8, S8, S8)


# ----------------------------------------------------------------------------- metrics

@pytest.mark.parametrize("to", [np.asarray, torch.as_tensor])
def test_metrics_match_memintelli_definitions(to):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = a + 0.1 * rng.standard_normal((6, 5)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    snr = 10 * np.log10(np.sum(a64 ** 2) / np.sum((a64 - b64) ** 2))
    re = np.sqrt(np.sum((a64 - b64) ** 2)) / np.sqrt(np.sum(a64 ** 2))
    abse = np.sum(np.abs((a64 - b64) / a64)) / (a.shape[0] * a.shape[1])
    assert pyfastpim.SNR(to(a), to(b)) == pytest.approx(snr, rel=1e-12)
    assert pyfastpim.RE(to(a), to(b)) == pytest.approx(re, rel=1e-12)
    assert pyfastpim.ABSE(to(a), to(b)) == pytest.approx(abse, rel=1e-12)
    assert pyfastpim.SNR(a, a) == float("inf") and pyfastpim.RE(a, a) == 0.0
    t = torch.tensor(a, requires_grad=True)
    assert pyfastpim.RE(t, torch.as_tensor(b)) == pytest.approx(re, rel=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        pyfastpim.SNR(a, b[:, :4])


def test_metrics_name_a_ragged_argument():
    # ragged nested lists reached NumPy, whose "inhomogeneous shape" error named neither argument
    ragged, ok = [[1.0, 2.0], [3.0]], [[1.0, 2.0], [3.0, 4.0]]
    for fn in (pyfastpim.SNR, pyfastpim.RE, pyfastpim.ABSE):
        with pytest.raises(ValueError, match="^argument 'ytest': expected a rectangular array"):
            fn(ragged, ok)
        with pytest.raises(ValueError, match="^argument 'ypred': expected a rectangular array"):
            fn(ok, ragged)
    assert pyfastpim.RE(ok, [[1.0, 2.0], [3.0, 4.0]]) == 0.0  # rectangular lists work as before
    assert pyfastpim.SNR([1, 2], (1, 2)) == float("inf")


def test_a_weight_too_large_is_a_clear_error_naming_the_sizes():
    """torch's allocator failure and size overflow (RuntimeErrors) reach the user as MemoryError /
    ValueError naming the constructor arguments that set the weight's shape (found by tests/fuzz.py)."""
    eng = pyfastpim.DPETensor()
    with pytest.raises(MemoryError, match="'out_features', 'in_features'"):
        LinearMem(eng, 2 ** 40, 4, (1, 1, 2, 2), (1, 1, 2, 2))
    with pytest.raises(MemoryError, match="'out_channels', 'in_channels', 'kernel_size'"):
        Conv2dMem(eng, 2 ** 20, 2 ** 20, 3, (1, 1, 2, 2), (1, 1, 2, 2))
    with pytest.raises(ValueError, match="'out_channels', 'in_channels', 'kernel_size'.*overflows"):
        Conv2dMem(eng, 2 ** 62, 2 ** 62, 3, (1, 1, 2, 2), (1, 1, 2, 2))
    assert LinearMem(eng, 8, 4, (1, 1, 2, 2), (1, 1, 2, 2)).weight.shape == (4, 8)  # and the process goes on


@pytest.mark.parametrize("arg", ["padding", "stride", "dilation", "kernel_size"])
def test_conv_geometry_beyond_the_core_limit_is_refused_naming_it(arg):
    """Sizes past 2**31 - 1 would wrap torch's int64 size arithmetic (padding 2**63 - 1 made an
    empty batch's torch conv2d fail with a meaningless message; found by tests/fuzz.py)."""
    eng = pyfastpim.DPETensor()
    kw = dict(kernel_size=3, padding=1)
    kw[arg] = 2 ** 31
    with pytest.raises(ValueError, match=arg):
        Conv2dMem(eng, 2, 3, input_slice=(1, 1, 2), weight_slice=(1, 1, 2), **kw)
    kw[arg] = 2 ** 31 - 1 if arg != "kernel_size" else 3
    if arg != "kernel_size":
        Conv2dMem(eng, 2, 3, input_slice=(1, 1, 2), weight_slice=(1, 1, 2), **kw)  # the limit itself is fine


@pytest.mark.parametrize("bad, exc, words", [
    ([["abc", "1"], ["2", "3"]], TypeError, "expected numbers, got an array of dtype <U3"),
    (np.array([[1 + 1j, 2], [3, 4]]), TypeError, "expected numbers, got an array of dtype complex128"),
    (torch.ones(2, 2, dtype=torch.complex64), TypeError, "expected numbers, got an array of dtype complex64"),
    (np.ma.masked_array(np.ones((2, 2)), mask=[[1, 0], [0, 0]]), ValueError, "a masked array is not supported"),
])
def test_metrics_name_an_argument_that_holds_no_real_numbers(bad, exc, words):
    # strings reached NumPy's unnamed "could not convert string to float: 'abc'"; complex data lost its
    # imaginary part (a ComplexWarning, a wrong value); a masked array's masked elements were read as data
    ok = np.ones((2, 2))
    for fn in (pyfastpim.SNR, pyfastpim.RE, pyfastpim.ABSE):
        with pytest.raises(exc, match="^argument 'ytest': " + words):
            fn(bad, ok)
        with pytest.raises(exc, match="^argument 'ypred': " + words):
            fn(ok, bad)


def test_metrics_read_real_numbers_held_as_objects():
    # an object array of floats or a list of Fractions was refused after the metrics took sliced._numeric's rule
    # (MemIntelli and the previous release read them); an object holding a str or a complex is still refused
    from fractions import Fraction
    from pyfastpim.memintelli.pimpy import utils
    ref, got = np.array([[1.0, 2.0], [3.0, 4.5]]), np.array([[1.0, 2.5], [3.0, 4.0]])
    for fn in (pyfastpim.SNR, pyfastpim.RE, pyfastpim.ABSE, utils.SNR, utils.RE, utils.ABSE):
        want = fn(ref, got)
        assert fn(ref.astype(object), got) == want
        assert fn([[Fraction(1), Fraction(2)], [Fraction(3), Fraction(9, 2)]], got) == want
        for bad in ("abc", "1.5", 1 + 1j):
            with pytest.raises(TypeError, match="^argument 'ytest': expected numbers, got an array of dtype object"):
                fn(np.array([[1.0, bad], [3.0, 4.5]], dtype=object), got)


def test_metrics_and_assigned_attributes_read_bfloat16_tensors():
    # torch's .numpy() refused bfloat16 ("TypeError: Got unsupported ScalarType BFloat16", naming nothing)
    a = torch.tensor([[1.0, 2.0], [3.0, 4.5]])
    assert pyfastpim.RE(a.bfloat16(), a) == 0.0
    eng = pyfastpim.DPETensor()
    sd = pyfastpim.SlicedData((1, 1, 2))
    sd.slice_data_imp(eng, a)
    want = sd.quantized_data.clone()
    sd.quantized_data = want.bfloat16()
    torch.testing.assert_close(sd.quantized_data, want.bfloat16().float())


@pytest.mark.parametrize("codes", [torch.zeros(3, 2, 2, requires_grad=True), torch.zeros(3, 2, 2).bfloat16()],
                         ids=["grad", "bfloat16"])
def test_program_weights_names_codes_from_any_float_tensor(codes):
    # np.asarray(codes) raised torch's unnamed RuntimeError ("Can't call numpy() on Tensor that requires
    # grad") or TypeError ("Got unsupported ScalarType BFloat16"); now the codes rule's (no float codes)
    with pytest.raises(TypeError, match="^argument 'codes': refusing to convert float32 to uint8"):
        pyfastpim.program_weights(codes, (1, 1, 2), 16)


def test_float64_input_beyond_float32_is_named_as_such():
    # the layers cast their input to float32 first: a finite float64 1e300 became inf, and the error blamed
    # the input for holding "NaN or infinity"
    eng = layer_engine()
    lin = LinearMem(eng, 4, 3, (1, 1, 2, 2), (1, 1, 2, 2), dtype=torch.float64)
    conv = Conv2dMem(eng, 1, 2, 2, (1, 1, 2, 2), (1, 1, 2, 2), dtype=torch.float64)
    for layer, x in ((lin, torch.ones(2, 4, dtype=torch.float64)), (lin, torch.ones(2, 1, 2, 4, dtype=torch.float64)),
                     (conv, torch.ones(1, 1, 3, 3, dtype=torch.float64))):
        x.view(-1)[5] = -1e300
        with pytest.raises(ValueError, match=r"argument 'input': values must be finite in float32 .*value -1e\+300 "
                                             r"\(element 5\) is beyond float32's range"):
            layer(x)
        x.view(-1)[5] = float("inf")  # an infinity given as such: the quantization's own refusal
        with pytest.raises(ValueError, match="argument 'input': contains NaN or infinity"):
            layer(x)
        x.view(-1)[5] = 3.4028235677973362e38  # rounds to float32's largest: taken (the product may overflow)
        assert layer(x).dtype == torch.float64


def test_batched_input_is_quantized_per_item():
    # docs/semantics.md section 8 said "(a batch is flattened)": the items of (B, N, in) are quantized each on
    # its own (section 2), only the weight gradient sums the rows of all items
    layer = LinearMem(layer_engine(), 8, 3, (1, 1, 2, 4), (1, 1, 2, 4), input_quant_gran="per-matrix", bias=False)
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1))
    x[1] *= 1000  # flattened, item 0 would share item 1's scale and lose its low bits
    x.requires_grad_()
    y = layer(x)
    for b in range(2):
        assert torch.equal(y[b], layer(x[b]))
    assert not torch.allclose(y[0], layer(x.reshape(-1, 8))[:4], rtol=1e-2, atol=1e-2)
    y.sum().backward()
    xq = torch.cat([layer.engine.forward_linear(x[b].detach(), layer.weight_sliced, layer.input_slice_method,
                                                layer.input_paral_size, layer.input_quant_gran,
                                                return_dequant=True)[1] for b in range(2)])
    assert torch.allclose(layer.weight.grad, torch.ones(8, 3).t() @ xq, rtol=1e-5, atol=1e-4)


def test_float64_weight_and_bias_beyond_float32_are_named_as_such():
    # the weight is cast to float32 for programming (_weight_matrix), the bias to add it to the float32
    # product: a finite float64 1e300 became inf, and the weight's error blamed 'data' for holding "NaN or
    # infinity" (the bias gave an inf output)
    eng = layer_engine()
    beyond = r"argument '%s': values must be finite in float32 .*value 1e\+300 \(element %d\) is beyond float32"
    for make, x in ((lambda: LinearMem(eng, 4, 3, (1, 1, 2, 2), (1, 1, 2, 2), dtype=torch.float64),
                     torch.ones(2, 4, dtype=torch.float64)),
                    (lambda: Conv2dMem(eng, 1, 2, 2, (1, 1, 2, 2), (1, 1, 2, 2), dtype=torch.float64),
                     torch.ones(1, 1, 3, 3, dtype=torch.float64))):
        layer = make()
        with torch.no_grad():
            layer.weight.view(-1)[5] = 1e300  # element 5 of the weight as given, not of the crossbar matrix
        for run in (lambda: layer(x), layer.update_weight, lambda: layer(x.requires_grad_()).sum().backward()):
            with pytest.raises(ValueError, match=beyond % ("weight", 5)):
                run()
        with torch.no_grad():
            layer.weight.view(-1)[5] = float("inf")  # an infinity given as such: the quantization's own refusal
        with pytest.raises(ValueError, match="argument 'data': contains NaN or infinity"):
            layer(x)
        layer = make()
        with torch.no_grad():
            layer.bias[1] = 1e300
        for grad in (False, True):
            with pytest.raises(ValueError, match=beyond % ("bias", 1)):
                layer(x.detach().requires_grad_(grad))


def _float64_twins(kind):
    """A float64 layer of kind, a float32 one with the same (float32-exact) parameters, and an input for them."""
    eng = layer_engine()
    if kind == "linear":
        make, x = (lambda dt: LinearMem(eng, 6, 3, (1, 1, 2, 2), (1, 1, 2, 2), dtype=dt)), torch.randn(2, 6)
    else:
        make, x = (lambda dt: Conv2dMem(eng, 2, 3, 2, (1, 1, 2, 2), (1, 1, 2, 2), dtype=dt)), torch.randn(1, 2, 4, 4)
    l64, l32 = make(torch.float64), make(torch.float32)
    with torch.no_grad():
        l32.weight.copy_(l64.weight)
        l32.bias.copy_(l64.bias)
        l64.weight.copy_(l32.weight)  # float32-exact, the twins program the same crossbar
        l64.bias.copy_(l32.bias)
    return l64, l32, x


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_float64_grad_output_beyond_float32_is_named_as_such(kind):
    # the layers cast their input to float32 outside their autograd Function and its float32 output back
    # to the input's dtype: torch's backward of that cast narrowed a float64 upstream gradient of 1e300 to
    # inf before the Function saw it, x.grad and weight.grad were non-finite, no error
    l64, l32, x = _float64_twins(kind)
    x64 = x.double().requires_grad_()
    y = l64(x64)
    g = torch.full_like(y, 0.5)
    g.view(-1)[2] = 1e300
    with pytest.raises(ValueError, match=r"argument 'grad_output': values must be finite in float32 .*value 1e\+300 "
                                         r"\(element 2\) is beyond float32's range"):
        y.backward(g)
    # a finite float64 gradient: narrowed to float32 as before, the gradients those of the float32 twin
    g = torch.randn(y.shape, dtype=torch.float64)
    l64(x64).backward(g)
    x32 = x.clone().requires_grad_()
    l32(x32).backward(g.float())
    for got, want in ((x64.grad, x32.grad), (l64.weight.grad, l32.weight.grad), (l64.bias.grad, l32.bias.grad)):
        assert got.dtype == torch.float64 and torch.equal(got, want.double())
