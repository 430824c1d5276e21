"""pyfastpim.memintelli: MemIntelli's module paths, names and behaviour on pyfastpim's kernels.

The MemIntelli-style scripts in tests/api/memintelli_scripts (written for this repository) cover the
shapes of MemIntelli's examples 01-10; the other tests check the compatibility layer against
pyfastpim's own engine and layers, against independent transcriptions, and across devices.
"""
import importlib
import os
import runpy
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="MemIntelli's API is torch's")
F = torch.nn.functional

import pyfastpim
from pyfastpim import memory

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # tests/api -> the checkout
SCRIPTS = os.path.join(HERE, "memintelli_scripts")
SANITIZED = os.environ.get("PYFASTPIM_SANITIZED") == "1"

mi = pytest.importorskip("pyfastpim.memintelli")
from pyfastpim.memintelli._device import torch_device  # noqa: E402
from pyfastpim.memintelli.NN_layers import Conv1dMem, Conv2dMem, LinearMem  # noqa: E402
from pyfastpim.memintelli.NN_layers import functions as fn  # noqa: E402
from pyfastpim.memintelli.pimpy import DPETensor, SlicedData  # noqa: E402
from pyfastpim.memintelli.pimpy import utils  # noqa: E402
from helpers import NOISE_OFF  # noqa: E402

NAMES = {
    "pyfastpim.memintelli": ["DPETensor", "SlicedData", "SNR", "RE", "ABSE", "dot_high_dim", "LinearMem", "Conv1dMem",
                             "Conv2dMem", "linear_mem_func", "LeNet5", "ResNet_CIFAR_zoo"],
    "pyfastpim.memintelli.pimpy": ["SlicedData", "DPETensor", "RE", "ABSE", "SNR", "dot_high_dim"],
    "pyfastpim.memintelli.pimpy.memmat_tensor": ["DPETensor"],
    "pyfastpim.memintelli.pimpy.data_formats": ["SlicedData"],
    "pyfastpim.memintelli.pimpy.utils": ["dot_high_dim", "quant_map_tensor", "bfp_map_tensor", "SNR", "RE", "ABSE"],
    "pyfastpim.memintelli.NN_layers": ["LinearMem", "Conv1dMem", "Conv2dMem", "linear_mem_func", "conv2d_mem_func",
                                       "LinearMemRunc", "Conv2dMemRunc", "map_reduce_dot_func", "MapReduceDot",
                                       "conv1d_mem_func", "Conv1dMemRunc", "is_tuple_2"],
    "pyfastpim.memintelli.NN_layers.linear": ["LinearMem"],
    "pyfastpim.memintelli.NN_layers.convolution": ["Conv1dMem", "Conv2dMem"],
    "pyfastpim.memintelli.NN_layers.functions": ["linear_mem_func", "conv2d_mem_func", "conv1d_mem_func",
                                                 "LinearMemRunc", "Conv2dMemRunc", "Conv1dMemRunc",
                                                 "map_reduce_dot_func", "MapReduceDot", "is_tuple_2"],
    "pyfastpim.memintelli.NN_layers.activation": ["relu_q", "sigmoid_q", "tanh_q", "softmax_q"],
    "pyfastpim.memintelli.NN_layers.model_decorators": ["record_linear", "record_conv2d", "record_conv1d",
                                                        "record_maxpool2d", "record_activation"],
    "pyfastpim.memintelli.NN_models": ["LeNet5", "VGG_CIFAR", "vgg_cifar_zoo", "ResNet_CIFAR", "ResNet_CIFAR_zoo",
                                       "ResNet", "ResNet_zoo", "MobileNetV2", "MobileNetV2_zoo", "DeiT", "deit_zoo",
                                       "BasicBlock", "Bottleneck"],
}


def _quiet_engine(cls=DPETensor, **kw):
    args = dict(NOISE_OFF, radc=2 ** 12, device="cpu", seed=5)
    args.update(kw)
    return cls(**args)


def _noisy_engine(cls=DPETensor, **kw):
    args = dict(HGS=1e-5, LGS=1e-8, write_variation=0.05, rate_stuck_HGS=0.01, read_variation=0.05, vnoise=0.05,
                rdac=2 ** 4, g_level=2 ** 4, radc=2 ** 10, device="cpu", seed=11)
    args.update(kw)
    return cls(**args)


def _run_script(name, **kwargs):
    mod = runpy.run_path(os.path.join(SCRIPTS, name + ".py"), run_name="memintelli_script")
    return mod["main"](**kwargs)


# ----------------------------------------------------------------------------- namespace

@pytest.mark.parametrize("module", sorted(NAMES))
def test_module_paths_and_names(module):
    m = importlib.import_module(module)
    missing = [n for n in NAMES[module] if not hasattr(m, n)]
    assert not missing, (module, missing)


def test_star_import_of_pimpy_is_memintellis_list():
    ns = {}
    exec("from pyfastpim.memintelli.pimpy import *", ns)
    assert {n for n in ns if not n.startswith("__")} == {"SlicedData", "DPETensor", "RE", "ABSE", "SNR",
                                                        "dot_high_dim"}


# ----------------------------------------------------------------------------- engine and devices

def _sliced_pair(engine, x, w, bw_e=None, cls=SlicedData):
    xs = cls([1, 1, 2, 4], bw_e=bw_e, paral_size=(1, 32), quant_gran=(1, 64))
    ws = cls(torch.tensor([1, 1, 2, 4]), bw_e=bw_e, is_weight=True, paral_size=(32, 32), quant_gran=(64, 64))
    xs.slice_data_imp(engine, x)
    ws.slice_data_imp(engine, w)
    return xs, ws


@pytest.mark.parametrize("bw_e", [None, 8])
def test_compat_engine_is_pyfastpims_engine(bw_e):
    """Same parameters and seed: the compatibility classes give pyfastpim's results bit for bit."""
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 7, 90, generator=g), torch.randn(90, 50, generator=g)
    compat = _noisy_engine()
    core = _noisy_engine(pyfastpim.DPETensor)
    y1 = compat(*_sliced_pair(compat, x, w, bw_e))
    y2 = core(*_sliced_pair(core, x, w, bw_e, cls=pyfastpim.SlicedData))
    assert isinstance(y1, torch.Tensor) and y1.shape == (2, 7, 50)
    assert torch.equal(y1, y2)


@pytest.mark.parametrize("device", ["cpu", "CPU", torch.device("cpu"), "cuda", "cuda:1", torch.device("cuda", 0),
                                    torch.device("cpu", 0), "cpu:0", " CPU:1 "])
def test_device_arguments_accept_torch_devices_and_strings(device):
    e = DPETensor(device=device)
    assert e.device == torch_device(str(device).lower())
    assert isinstance(e.device, torch.device)
    # 'cuda' runs on the best OpenCL GPU when there is one, else on the CPU kernels
    gpus = [d for d in pyfastpim.devices() if d.get("type") == "gpu"]
    expect_cl = torch_device(str(device).lower()).type == "cuda" and bool(gpus)
    assert (e._cl is not None) == expect_cl
    # pyfastpim's own engine accepts the same arguments
    core = pyfastpim.DPETensor(device=device)
    assert (core._cl is not None) == expect_cl
    s = SlicedData([1, 1, 2], device=device)
    assert s.device == torch_device(str(device).lower())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA fallback")
@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0)])
def test_a_cuda_engine_without_cuda_multiplies_on_the_host(device):
    # DPETensor(device='cuda') on a machine without CUDA: the engine's tensors and the sliced attributes
    # stay on the host, and so does the product (before: torch's AssertionError "Torch not compiled with
    # CUDA enabled" from moving the result to x.device)
    rng = torch.Generator().manual_seed(3)
    x, w = torch.randn(4, 40, generator=rng), torch.randn(40, 6, generator=rng)
    out = []
    for dev in (device, "cpu"):
        e = DPETensor(device=dev, **NOISE_OFF)
        ws = SlicedData([1, 1, 2, 2], is_weight=True, device=dev)
        xs = SlicedData([1, 1, 2, 2], device=dev)
        ws.slice_data_imp(e, w)
        xs.slice_data_imp(e, x)
        assert ws.G.device.type == "cpu"
        out.append(e(xs, ws))
        assert out[-1].device.type == "cpu"
        assert torch.equal(e.MapReduceDot(xs, ws), out[-1])
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("bad, exc", [("tpu", ValueError), ("cuda:x", ValueError), (3, TypeError)])
def test_bad_devices_raise_clear_errors(bad, exc):
    with pytest.raises(exc, match="device"):
        DPETensor(device=bad)
    with pytest.raises(exc, match="device"):
        pyfastpim.DPETensor(device=bad)


def test_default_device_follows_cuda_availability():
    assert DPETensor().device.type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_cuda_picks_an_opencl_gpu_when_present(monkeypatch):
    """'cuda' selects the OpenCL GPU with the most compute units; results equal the CPU kernels'."""
    dev_mod = importlib.import_module("pyfastpim.devices")
    cl = [d for d in pyfastpim.devices() if d["device"] != "cpu"]
    if not cl:
        pytest.skip("no OpenCL device")
    real = dev_mod._core.cl_devices
    nplat, entries = real()
    fake = [dict(e, type="gpu" if i == 0 else e["type"], compute_units=99 if i == 0 else 1)
            for i, e in enumerate(entries)]
    monkeypatch.setattr(dev_mod._core, "cl_devices", lambda: (nplat, fake))
    e = _noisy_engine(device="cuda")
    assert e._cl is not None and e.compute_device == "opencl" and e.device.type == "cuda"
    cpu = _noisy_engine(device="cpu")
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(5, 70, generator=g), torch.randn(70, 40, generator=g)
    xs, ws = _sliced_pair(cpu, x, w)
    # the engine's device is CUDA (for the user): the result is placed there, which needs CUDA;
    # compare on the compute level through the base class
    y_cl = pyfastpim.DPETensor.MapReduceDot(e, xs, ws)
    y_cpu = pyfastpim.DPETensor.MapReduceDot(cpu, xs, ws)
    assert torch.equal(torch.as_tensor(y_cl), torch.as_tensor(y_cpu))


@pytest.fixture
def fake_cuda(monkeypatch):
    """Treat every torch tensor as living on another device: the layers take their host-hop path
    (copies to the host and back), which is what CUDA tensors go through."""
    from pyfastpim.memintelli import _device
    monkeypatch.setattr(_device, "is_foreign", lambda t: isinstance(t, torch.Tensor))


def _layer_pair(kind, engine_seed=4):
    torch.manual_seed(0)
    if kind == "linear":
        a = LinearMem(_noisy_engine(seed=engine_seed), 40, 24, [1, 1, 2, 4], [1, 1, 2, 4])
        b = LinearMem(_noisy_engine(seed=engine_seed), 40, 24, [1, 1, 2, 4], [1, 1, 2, 4])
        x = torch.randn(3, 5, 40)
    else:
        a = Conv2dMem(_noisy_engine(seed=engine_seed), 3, 6, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=2, padding=1)
        b = Conv2dMem(_noisy_engine(seed=engine_seed), 3, 6, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=2, padding=1)
        x = torch.randn(2, 3, 9, 8)
    b.load_state_dict(a.state_dict())
    return a, b, x


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_host_hop_path_matches_cpu_path(kind, monkeypatch):
    """The path CUDA tensors take gives the CPU path's outputs and gradients, and counts its copies."""
    a, b, x = _layer_pair(kind)
    xa = x.clone().requires_grad_()
    ya = a(xa)
    ya.square().sum().backward()
    from pyfastpim.memintelli import _device
    monkeypatch.setattr(_device, "is_foreign", lambda t: isinstance(t, torch.Tensor))
    xb = x.clone().requires_grad_()
    with memory.trace() as t:
        yb = b(xb)
        yb.square().sum().backward()
    assert torch.equal(ya, yb)
    assert torch.allclose(xa.grad, xb.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(a.weight.grad, b.weight.grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(a.bias.grad, b.bias.grad, rtol=1e-5, atol=1e-6)
    count, nbytes = t.by_kind["cuda_to_host"]
    assert count >= 3 and nbytes >= x.numel() * 4  # input, bias, gradient (and the weight if re-programmed)
    with torch.no_grad():
        a.engine.reset(9)
        b.engine.reset(9)
        assert torch.equal(a(x), b(x))


def test_transfer_counters_record_bytes():
    from pyfastpim.memintelli import _device
    t0 = memory.stats()
    _device.to_host(torch.ones(3))  # already on the host: nothing counted
    assert memory.stats()["cuda_to_host_count"] == t0["cuda_to_host_count"]
    memory._count_transfer("host_to_cuda", 40)
    s = memory.stats()
    assert s["host_to_cuda_count"] == t0["host_to_cuda_count"] + 1
    assert s["host_to_cuda_bytes"] == t0["host_to_cuda_bytes"] + 40


# ----------------------------------------------------------------------------- settable SlicedData

def _small_model(engine):
    torch.manual_seed(2)
    return torch.nn.Sequential(Conv2dMem(engine, 2, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4], padding=1), torch.nn.ReLU(),
                               torch.nn.Flatten(), LinearMem(engine, 4 * 6 * 6, 5, [1, 1, 2, 4], [1, 1, 2, 4]))


def _fork_prepare_for_inference(model):
    """memintelli_flash's prepare_for_inference, as that fork's model code writes it."""
    model.eval()
    for module in model.modules():
        if isinstance(module, (LinearMem, Conv2dMem)):
            module.inference_mode = True
            module.weight_sliced.inference = True
            module.weight_sliced.quantized_data = None
            module.weight_sliced.sliced_data = None


def test_fork_prepare_for_inference_pattern_keeps_results_and_training():
    engine = _noisy_engine()
    model = _small_model(engine)
    x = torch.randn(3, 2, 6, 6)
    y = torch.tensor([0, 3, 1])
    model.eval()
    engine.reset(21)
    with torch.no_grad():
        before = model(x)
    engine.reset(22)
    loss0 = F.cross_entropy(model(x), y)
    loss0.backward()
    grads0 = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    _fork_prepare_for_inference(model)
    engine.reset(21)
    with torch.no_grad():
        after = model(x)
    assert torch.equal(before, after)
    # training after it still works (the dequantized weights are recomputed from the codes)
    engine.reset(22)
    loss1 = F.cross_entropy(model(x), y)
    loss1.backward()
    assert torch.equal(loss0, loss1)
    for g0, p in zip(grads0, model.parameters()):
        assert torch.equal(g0, p.grad)


def test_zoo_prepare_for_inference():
    from pyfastpim.memintelli.NN_models import LeNet5
    engine = _noisy_engine()
    model = LeNet5(engine=engine, device="cpu")
    x = torch.randn(2, 1, 28, 28)
    model.eval()
    engine.reset(1)
    with torch.no_grad():
        before = model(x)
    model.train()
    model.prepare_for_inference()
    assert not model.training
    engine.reset(1)
    with torch.no_grad():
        assert torch.equal(before, model(x))


def test_zoo_copy_after_prepare_for_inference_keeps_inference_mode():
    # a copy or an unpickled model re-programs its weights (the programmed crossbars are not copied): it
    # did so without the inference flag, keeping the dequantized weights prepare_for_inference had released
    import copy
    import pickle
    from pyfastpim.memintelli.NN_models import LeNet5
    engine = _quiet_engine()
    x = torch.randn(2, 1, 28, 28, generator=torch.Generator().manual_seed(3))
    trained, prepared = LeNet5(engine=engine, device="cpu"), LeNet5(engine=engine, device="cpu")
    prepared.load_state_dict(trained.state_dict())
    prepared.prepare_for_inference()
    with torch.no_grad():
        expected = prepared(x)
    for model, inference in ((prepared, True), (trained, False)):
        for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            twin.eval()
            with torch.no_grad():
                assert torch.equal(twin(x), expected)
            layers = [m for m in twin.modules() if isinstance(m, (LinearMem, Conv2dMem))]
            assert len(layers) == 5
            for layer in layers:
                sliced = layer.weight_sliced
                assert sliced.inference is inference
                assert (sliced._dequant is None) is inference  # the dequantized copy the flag drops


@pytest.mark.parametrize("bw_e", [None, 8])
def test_assigned_codes_and_scales_are_what_the_engine_multiplies(bw_e):
    """Writing another matrix's sliced_data / max_data / e_bias makes the crossbar hold that matrix:
    the product equals slicing it directly (programming is re-done with the same seed)."""
    g = torch.Generator().manual_seed(7)
    x, w1, w2 = torch.randn(4, 80, generator=g), torch.randn(80, 36, generator=g), torch.randn(80, 36, generator=g)
    engine = _noisy_engine()
    xs, ws1 = _sliced_pair(engine, x, w1, bw_e)
    _, ws2 = _sliced_pair(engine, x, w2, bw_e)
    ws1.sliced_data = ws2.sliced_data.clone()
    if bw_e is None:
        ws1.max_data = ws2.max_data.clone()
    else:
        ws1.e_bias = ws2.e_bias.clone()
    assert torch.equal(ws1.quantized_data, ws2.quantized_data)
    assert torch.equal(ws1.G, ws2.G)
    engine.reset(3)
    y1 = engine(xs, ws1)
    engine.reset(3)
    y2 = engine(xs, ws2)
    assert torch.equal(y1, y2)


def test_assigned_conductances_are_read():
    """G assigned from a noise-free programming makes a noisy-programmed crossbar give the noise-free product."""
    g = torch.Generator().manual_seed(8)
    x, w = torch.randn(4, 70, generator=g), torch.randn(70, 30, generator=g)
    noisy = _noisy_engine(read_variation=0.0, vnoise=0.0)
    clean = _noisy_engine(read_variation=0.0, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0)
    xs, ws_noisy = _sliced_pair(noisy, x, w)
    _, ws_clean = _sliced_pair(clean, x, w)
    y_noisy, y_clean = noisy(xs, ws_noisy), clean(xs, ws_clean)
    assert not torch.allclose(y_noisy, y_clean)
    ws_noisy.G = ws_clean.G
    assert torch.allclose(noisy(xs, ws_noisy), y_clean, rtol=1e-5, atol=1e-5)
    ws_noisy.G = None  # back to the programmed cells
    assert torch.equal(noisy(xs, ws_noisy), y_noisy)


def test_assignments_are_validated():
    engine = _noisy_engine()
    xs, ws = _sliced_pair(engine, torch.randn(3, 40), torch.randn(40, 20))
    with pytest.raises(ValueError, match="sliced_data"):
        ws.sliced_data = ws.sliced_data[..., :-1]
    bad = ws.sliced_data.clone()
    bad[0, 0, -1, 0, 0] = 3  # slices are stored least significant first: the last is the 1-bit sign slice
    with pytest.raises(ValueError, match="slice widths"):
        ws.sliced_data = bad
    with pytest.raises(ValueError, match="quantized_data"):
        ws.quantized_data = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="G"):
        ws.G = -ws.G
    with pytest.raises(ValueError, match="e_bias"):
        ws.e_bias = ws.max_data
    q = torch.randn(40, 20)
    ws.quantized_data = q
    assert torch.equal(ws.quantized_data, q)


def test_assigned_attributes_refuse_what_is_not_numbers_naming_the_attribute():
    """Ragged nested lists, strings, complex or non-finite values: an exception naming the attribute
    (quantized_data cast them with NumPy's unnamed messages, dropped imaginary parts, kept NaN)."""
    engine = _noisy_engine()
    xs, ws = _sliced_pair(engine, torch.randn(3, 40), torch.randn(40, 20))
    for obj, name in ((ws, "sliced_data"), (ws, "max_data"), (ws, "G"), (ws, "quantized_data"), (xs, "max_data")):
        with pytest.raises(ValueError, match="argument '%s': expected a rectangular array" % name):
            setattr(obj, name, [[1.0, 2.0], [3.0]])
    shape = tuple(ws.quantized_data.shape)
    for bad in ("abc", np.ones(shape, complex), [[object()] * shape[1]] * shape[0]):
        with pytest.raises(TypeError, match="argument 'quantized_data': expected numbers"):
            ws.quantized_data = bad
    for bad in (np.nan, np.inf, 1e39):
        with pytest.raises(ValueError, match="argument 'quantized_data': values must be finite"):
            ws.quantized_data = np.full(shape, bad)
    q = np.ones(shape, np.float64)
    ws.quantized_data = q  # numbers of any real dtype: stored as float32
    assert torch.equal(ws.quantized_data, torch.ones(shape))


# ----------------------------------------------------------------------------- functions and layers

def test_linear_mem_func_forward_and_straight_through_gradients():
    engine = _noisy_engine()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 50, generator=g, requires_grad=True)
    w = torch.randn(30, 50, generator=g, requires_grad=True)
    b = torch.randn(30, generator=g, requires_grad=True)
    xs, ws = _sliced_pair(engine, x.detach(), w.detach().t())
    engine.reset(2)
    y = fn.linear_mem_func(engine, x, w, xs, ws, b)
    engine.reset(2)
    assert torch.equal(y, engine.MapReduceDot(xs, ws) + b.detach())
    dy = torch.randn(6, 30, generator=g)
    y.backward(dy)
    wq, xq = ws.quantized_data, xs.quantized_data
    assert torch.allclose(x.grad, dy @ wq.t(), rtol=1e-5, atol=1e-5)
    assert torch.allclose(w.grad, dy.t() @ xq, rtol=1e-5, atol=1e-5)
    assert torch.allclose(b.grad, dy.sum(0))


def test_map_reduce_dot_func_slices_its_input():
    engine = _noisy_engine()
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 64, generator=g, requires_grad=True)
    ws = SlicedData([1, 1, 2, 4], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(engine, torch.randn(64, 16, generator=g))
    engine.reset(1)
    y = fn.map_reduce_dot_func(engine, x, torch.tensor([1, 1, 2, 2]), ws)
    xs = SlicedData([1, 1, 2, 2], paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(engine, x.detach())
    engine.reset(1)
    assert torch.equal(y, engine(xs, ws))
    y.sum().backward()
    assert torch.allclose(x.grad, torch.ones(5, 16) @ ws.quantized_data.t(), rtol=1e-5, atol=1e-5)


def test_conv2d_mem_func_matches_the_layer():
    torch.manual_seed(3)
    engine = _noisy_engine()
    layer = Conv2dMem(engine, 3, 5, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=2, padding=1, dilation=1,
                      input_quant_gran=(1, 32))
    x = torch.randn(2, 3, 8, 7)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    engine.reset(6)
    y1 = layer(x1)
    y1.square().sum().backward()
    gw1, gb1 = layer.weight.grad.clone(), layer.bias.grad.clone()
    layer.zero_grad()
    xs = SlicedData([1, 1, 2, 4], paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(engine, F.unfold(x, 3, padding=1, stride=2).transpose(1, 2))
    engine.reset(6)
    y2 = fn.conv2d_mem_func(engine, x2, layer.weight, xs, layer.weight_sliced, layer.bias, 2, 1, 1)
    assert torch.allclose(y1, y2, rtol=1e-5, atol=1e-5)
    y2.square().sum().backward()
    assert torch.allclose(x1.grad, x2.grad, rtol=1e-4, atol=1e-4)
    assert torch.allclose(gw1, layer.weight.grad, rtol=1e-4, atol=1e-3)
    assert torch.allclose(gb1, layer.bias.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, 2, 1), (1, 1, 2)])
def test_conv1d_mem_equals_a_height_one_conv2d(stride, padding, dilation):
    """Conv1dMem (a stub in MemIntelli) is the Conv2dMem of height 1: same outputs and gradients."""
    torch.manual_seed(1)
    e1, e2 = _noisy_engine(), _noisy_engine()
    c1 = Conv1dMem(e1, 3, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=stride, padding=padding, dilation=dilation)
    c2 = Conv2dMem(e2, 3, 4, (1, 3), [1, 1, 2, 4], [1, 1, 2, 4], stride=(1, stride), padding=(0, padding),
                   dilation=(1, dilation))
    with torch.no_grad():
        c2.weight.copy_(c1.weight.unsqueeze(2))
        c2.bias.copy_(c1.bias)
    x = torch.randn(2, 3, 11)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1 = c1(x1)
    y2 = c2(x2.unsqueeze(2)).squeeze(2)
    assert y1.shape == F.conv1d(x, c1.weight.detach(), stride=stride, padding=padding, dilation=dilation).shape
    assert torch.equal(y1, y2)
    y1.square().sum().backward()
    y2.square().sum().backward()
    assert torch.allclose(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(c1.weight.grad, c2.weight.grad.squeeze(2), rtol=1e-5, atol=1e-4)
    assert torch.allclose(c1.bias.grad, c2.bias.grad, rtol=1e-5, atol=1e-5)
    # MemIntelli's stub forward signature (engine, input) and unbatched input
    e1.reset(0)
    y3 = c1(e1, x[0])
    e1.reset(0)
    assert torch.equal(y3, c1(x[:1])[0])


def test_conv1d_mem_func():
    torch.manual_seed(2)
    engine = _quiet_engine()
    layer = Conv1dMem(engine, 2, 3, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=2, padding=1)
    x = torch.randn(2, 2, 9, requires_grad=True)
    xs = SlicedData([1, 1, 2, 4], paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(engine, F.unfold(x.detach().unsqueeze(2), (1, 3), padding=(0, 1), stride=(1, 2)).transpose(1, 2))
    y = fn.conv1d_mem_func(engine, x, layer.weight, xs, layer.weight_sliced, layer.bias, 2, 1, 1)
    assert torch.equal(y, layer(x.detach()))
    y.sum().backward()
    assert x.grad.shape == x.shape and layer.weight.grad.shape == layer.weight.shape


def test_float64_data_beyond_float32_is_named_as_such():
    # the wrappers cast the weight, input, bias and upstream gradient to float32 in torch: a finite float64
    # 1e300 became inf, and the error blamed 'data' for "NaN or infinity" (or the output / gradient was inf)
    engine = _quiet_engine()
    beyond = r"argument '%s': values must be finite in float32 .*value 1e\+300 \(element %d\) is beyond float32"
    d = torch.float64
    x1 = torch.ones(2, 2, 9, dtype=d)

    def conv1d():  # Conv1dMem runs through _hop's host functions (as the layers do for CUDA tensors)
        return Conv1dMem(engine, 2, 3, 3, [1, 1, 2, 4], [1, 1, 2, 4], padding=1).to(d)
    for name, k, setup in (("weight", 4, lambda c, x: c.weight.view(-1).__setitem__(4, 1e300)),
                           ("input", 3, lambda c, x: x.view(-1).__setitem__(3, 1e300)),
                           ("bias", 1, lambda c, x: c.bias.__setitem__(1, 1e300))):
        c, x = conv1d(), x1.clone()
        with torch.no_grad():
            setup(c, x)
        with pytest.raises(ValueError, match=beyond % (name, k)):
            c(x.requires_grad_())
    c = conv1d()
    y = c(x1.clone().requires_grad_())
    dy = torch.ones_like(y)
    dy.view(-1)[2] = 1e300
    with pytest.raises(ValueError, match=beyond % ("grad_output", 2)):
        y.backward(dy)

    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 8, generator=g, dtype=d, requires_grad=True)
    w = torch.randn(5, 8, generator=g, dtype=d, requires_grad=True)
    b = torch.randn(5, generator=g, dtype=d, requires_grad=True)
    xs, ws = _sliced_pair(engine, x.detach(), w.detach().t())
    y = fn.linear_mem_func(engine, x, w, xs, ws, b)
    dy = torch.ones_like(y)
    dy.view(-1)[6] = 1e300
    with pytest.raises(ValueError, match=beyond % ("grad_output", 6)):
        y.backward(dy)
    with torch.no_grad():
        b[3] = 1e300
    with pytest.raises(ValueError, match=beyond % ("bias", 3)):
        fn.linear_mem_func(engine, x, w, xs, ws, b)
    with torch.no_grad():
        x[0, 7] = 1e300
    with pytest.raises(ValueError, match=beyond % ("input", 7)):
        fn.map_reduce_dot_func(engine, x, torch.tensor([1, 1, 2, 2]), ws)
    y = fn.map_reduce_dot_func(engine, x.detach()[1:].requires_grad_(), torch.tensor([1, 1, 2, 2]), ws)
    with pytest.raises(ValueError, match=beyond % ("grad_output", 6)):
        y.backward(dy[:2])


def test_is_tuple_2():
    assert fn.is_tuple_2(3) == (3, 3) and fn.is_tuple_2((1, 2)) == (1, 2)
    with pytest.raises(ValueError):
        fn.is_tuple_2("a")


# ----------------------------------------------------------------------------- utils, activations, decorators

def _np_slices_to_int(d, widths):
    """Independent transcription: least-significant-first slices -> two's complement integers."""
    total, shift = np.zeros(d.shape[:-3] + d.shape[-2:], dtype=np.int64), 0
    for i, w in enumerate(reversed(widths)):
        total += d[..., i, :, :].astype(np.int64) << shift
        shift += w
    return np.where(total >= 2 ** (shift - 1), total - 2 ** shift, total)


@pytest.mark.parametrize("blk", [[1, 1, 2, 4], [1, 3, 4, 4]])
def test_quant_map_tensor(blk):
    g = torch.Generator().manual_seed(0)
    mat = torch.randn(2, 3, 2, 4, 5, generator=g)
    mat[1, 2, 1] = 0  # an all-zero block
    d, dq, mx, e = utils.quant_map_tensor(mat, torch.tensor(blk))
    bits = sum(blk)
    assert d.shape == (2, 3, 2, len(blk), 4, 5) and e is None
    assert d.dtype == torch.uint8
    m = np.abs(mat.numpy()).max(axis=(-1, -2), keepdims=True)
    q = _np_slices_to_int(d.numpy(), blk)
    k = 2 ** (bits - 1) - 1
    assert np.array_equal(q, np.round(mat.numpy() / np.where(m > 0, m, 1) * k))
    assert np.allclose(dq.numpy(), q / k * m, atol=1e-6)
    assert np.allclose(mx.numpy(), m)
    assert (dq[1, 2, 1] == 0).all()


def test_bfp_map_tensor():
    g = torch.Generator().manual_seed(1)
    mat = torch.randn(1, 2, 2, 3, 4, generator=g) * 5
    blk = [1, 1, 2, 4]
    d, dq, mx, e = utils.bfp_map_tensor(mat, blk)
    m = np.abs(mat.numpy()).max(axis=(-1, -2), keepdims=True)
    exp = np.floor(np.log2(m + 1e-10))
    assert np.array_equal(e.numpy(), exp)
    q = _np_slices_to_int(d.numpy(), blk)
    assert np.array_equal(q, np.clip(np.round(mat.numpy() / 2.0 ** exp * 2.0 ** 6), -128, 127))
    assert np.allclose(dq.numpy(), q * 2.0 ** (exp + 2 - 8))


def test_dot_high_dim_and_metrics():
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(2, 3, 2, 4, 5, generator=g), torch.randn(3, 2, 3, 5, 6, generator=g)
    out = utils.dot_high_dim(x, y)
    assert out.shape == (2, 3, 2, 2, 3, 4, 6)
    assert torch.allclose(out[1, 2, 0, 1, 2], x[1, 2, 1] @ y[2, 0, 2], atol=1e-5)
    xb = torch.stack([x, -x])
    assert torch.allclose(utils.dot_high_dim(xb, y)[1], -out, atol=1e-5)
    with pytest.raises(ValueError):
        utils.dot_high_dim(x[0], y)
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = a + np.array([[0.1, 0.0], [0.0, -0.2]])
    assert np.isclose(utils.SNR(a, b), 10 * np.log10(30 / 0.05))
    assert np.isclose(utils.RE(a, b), np.sqrt(0.05 / 30))
    assert np.isclose(utils.ABSE(a, b), (0.1 + 0.05) / 4)
    assert np.isclose(utils.SNR(torch.tensor(a), torch.tensor(b)), utils.SNR(a, b))


@pytest.mark.parametrize("fn", ["SNR", "RE", "ABSE"])
def test_utils_metrics_name_mismatched_shapes_and_stay_quiet_on_zero_denominators(fn):
    # found by review: mismatched shapes gave NumPy's unnamed broadcast error (or broadcast silently), a zero
    # denominator a RuntimeWarning; now pyfastpim.metrics' check (metrics._pair) and MemIntelli's inf / nan, quietly
    import warnings
    f = getattr(utils, fn)
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    for other in (np.ones((2, 3)), np.ones(2), np.ones((3, 2))):
        with pytest.raises(ValueError, match="^%s: ytest and ypred must have the same shape" % fn):
            f(a, other)
    zero = np.zeros((2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(zero, a) == {"SNR": -np.inf, "RE": np.inf, "ABSE": np.inf}[fn]  # MemIntelli's values
        assert np.isnan(f(zero, zero))
        assert f(a, a) == {"SNR": np.inf, "RE": 0.0, "ABSE": 0.0}[fn]


def test_quantized_activations():
    from pyfastpim.memintelli.NN_layers.activation import relu_q, sigmoid_q, softmax_q, tanh_q
    x = torch.linspace(-20, 20, 41).reshape(1, 41)
    assert torch.equal(relu_q(x, 4), x.clamp(0, 7))
    assert torch.allclose(sigmoid_q(x, 4), torch.sigmoid(x) * 8)
    assert torch.allclose(tanh_q(x, 3), torch.tanh(x) * 4)
    assert torch.allclose(softmax_q(x, 5).sum(1), torch.tensor([16.0]))
    with pytest.raises(ValueError, match="bit_width"):
        relu_q(x, 0)


def test_model_decorators_record_calls():
    from pyfastpim.memintelli.NN_layers.model_decorators import record_conv2d, record_linear

    class L(LinearMem):
        @record_linear
        def forward(self, x):
            return super().forward(x)

    class C(Conv2dMem):
        @record_conv2d
        def forward(self, x):
            return super().forward(x)

    engine = _quiet_engine()
    lin, conv = L(engine, 8, 3, [1, 1, 2], [1, 1, 2]), C(engine, 2, 3, 3, [1, 1, 2], [1, 1, 2])
    lin(torch.randn(4, 8))
    conv(torch.randn(1, 2, 5, 5))
    assert lin.params["L"] == {"type": "linear", "in_dim": (4, 8), "out_dim": (4, 3), "in_features": 8,
                               "out_features": 3, "bias": True, "input_slice": (1, 1, 2), "len_input_slice": 3,
                               "weight_slice": (1, 1, 2), "len_weight_slice": 3}
    assert conv.params["C"]["out_dim"] == (1, 3, 3, 3) and conv.params["C"]["kernel_size"] == 3  # as given


# ----------------------------------------------------------------------------- pretrained weights

@pytest.fixture
def hub_dir(tmp_path):
    old = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path))
    os.makedirs(os.path.join(str(tmp_path), "checkpoints"))
    yield os.path.join(str(tmp_path), "checkpoints")
    torch.hub.set_dir(old)


def _randomized(model, seed):
    g = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=g) if v.is_floating_point() else v) for k, v in
            model.state_dict().items()}


PRETRAINED = [
    ("ResNet_zoo", dict(model_name="resnet18", num_classes=1000), None),
    ("ResNet_CIFAR_zoo", dict(model_name="resnet18", num_classes=10), None),
    ("vgg_cifar_zoo", dict(model_name="vgg11_bn", num_classes=100), None),
    ("MobileNetV2_zoo", dict(num_classes=1000, width_mult=0.25), None),
    ("deit_zoo", dict(model_name="deit_tiny_patch16_224", num_classes=1000), "model"),
]


@pytest.mark.parametrize("factory, kwargs, key", PRETRAINED, ids=[p[0] for p in PRETRAINED])
def test_pretrained_weights_load_from_the_hub_cache(factory, kwargs, key, hub_dir):
    """pretrained=True reads the checkpoint through torchvision's / torch.hub's loader (here a local
    file in the hub cache: nothing is downloaded) and programs the crossbars with it."""
    if SANITIZED and factory in ("deit_zoo", "ResNet_zoo", "vgg_cifar_zoo"):
        pytest.skip("large model: too slow under the sanitizers")
    from pyfastpim.memintelli import NN_models
    make = getattr(NN_models, factory)
    digital = make(**kwargs, mem_enabled=False, device="cpu")
    state = _randomized(digital, 1)
    if factory == "ResNet_zoo":
        tvm = pytest.importorskip("torchvision.models", reason="torchvision (ResNet_zoo's weights) is not installed")
        url = tvm.ResNet18_Weights.IMAGENET1K_V1.url  # torchvision's own weights and loader
    else:
        module = importlib.import_module(make.__module__)
        url = {"ResNet_CIFAR_zoo": lambda: module.resnet_pretrained_urls[10]["resnet18"],
               "vgg_cifar_zoo": lambda: module.cifar_pretrained_urls[100]["vgg11_bn"],
               "MobileNetV2_zoo": lambda: module.model_urls["mobilenet_v2"],
               "deit_zoo": lambda: module.model_urls["deit_tiny_patch16_224"]}[factory]()
    torch.save({key: state} if key else state, os.path.join(hub_dir, os.path.basename(url)))
    engine = _quiet_engine()
    model = make(**kwargs, pretrained=True, mem_enabled=True, engine=engine, device="cpu")
    loaded = model.state_dict()
    assert set(loaded) == set(state)
    for k, v in state.items():
        assert torch.equal(loaded[k], v), k
    mem_layers = [m for m in model.modules() if isinstance(m, (LinearMem, Conv2dMem))]
    assert mem_layers
    for m in mem_layers:  # the crossbars hold the loaded weights (quantized)
        w = m.weight.detach().reshape(m.weight.shape[0], -1).t()
        assert torch.allclose(m.weight_sliced.quantized_data, w, atol=float(w.abs().max()) / 100)


def test_pretrained_missing_file_is_not_silently_random(hub_dir, monkeypatch):
    from pyfastpim.memintelli.NN_models import ResNet_CIFAR_zoo

    def no_network(*a, **k):
        raise OSError("download attempted")
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    with pytest.raises(OSError, match="download attempted"):
        ResNet_CIFAR_zoo("resnet18", 10, pretrained=True)
    with pytest.raises(ValueError, match="pretrained"):
        ResNet_CIFAR_zoo("resnet34", 10, pretrained=True)


# ----------------------------------------------------------------------------- the example scripts

def test_script_01_matrix_multiplication_snr():
    snr = _run_script("ex01_matrix_multiplication")
    assert snr["INT"] > 10 and snr["FP"] > 5  # measured about 13 dB and 8 dB with these noisy settings


def test_script_02_mlp_inference():
    acc_ref, acc_mem = _run_script("ex02_mlp_inference")
    assert acc_ref > 0.9
    assert acc_mem >= acc_ref - 0.1


def test_script_03_hardware_aware_training():
    losses, acc0, acc1 = _run_script("ex03_mlp_hardware_aware_training")
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert acc1 > max(acc0, 0.8)


def test_script_04_ddp_gloo_two_processes(tmp_path):
    out = str(tmp_path / "ddp.pt")
    here = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))  # the build under test
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "ex04_mlp_hardware_aware_training_ddp.py"), out],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = torch.load(out)
    assert result["param_diff"] == 0.0  # DDP kept the ranks' weights identical
    assert result["wq_diff"] == 0.0     # and every rank re-programmed its crossbars with them
    assert len(result["losses"]) == 3 and all(np.isfinite(result["losses"]))


ZOO = ["vgg_cifar", "vgg_cifar100_finetune", "resnet_cifar", "resnet_imagenet", "mobilenetv2", "deit"]


@pytest.mark.parametrize("case", ZOO)
def test_scripts_05_10_zoo_inference_and_finetuning(case):
    if SANITIZED and case != "mobilenetv2":
        pytest.skip("large model: too slow under the sanitizers")
    mod = runpy.run_path(os.path.join(SCRIPTS, "ex05_10_model_zoo.py"), run_name="memintelli_script")
    r = mod["main"](case)
    out, model, x = r["out"], r["model"], r["x"]
    assert out.shape[0] == x.shape[0] and torch.isfinite(out).all()
    assert np.isfinite(r["loss"]) and r["grads"] and all(r["grads"].values())
    mem = [m for m in model.modules() if isinstance(m, (LinearMem, Conv2dMem))]
    assert mem and all(m.engine is not None for m in mem)
    if case == "mobilenetv2":  # depthwise convolutions stay digital, as in MemIntelli
        assert any(isinstance(m, torch.nn.Conv2d) and m.groups > 1 for m in model.modules())
    # after the fine-tuning step the crossbars hold the updated weights
    for m in mem:
        w = m.weight.detach().reshape(m.weight.shape[0], -1).t()
        assert torch.allclose(m.weight_sliced.quantized_data, w, atol=float(w.abs().max()) / 50)
    # the crossbar model tracks its digital twin (same weights, float layers)
    factory, kwargs, _ = mod["CASES"][case]
    twin = factory(**kwargs, mem_enabled=False, device="cpu")
    twin.load_state_dict(model.state_dict())
    model.eval()
    twin.eval()
    with torch.no_grad():
        a, b = model(x).flatten(), twin(x).flatten()
    assert F.cosine_similarity(a, b, dim=0) > 0.9


def test_names_memintelli_scripts_import_from_its_modules():
    """MemIntelli's modules import these for their own use and its users import them from there."""
    from pyfastpim.memintelli import NN_layers, pimpy
    from pyfastpim.memintelli.pimpy import data_formats, memmat_tensor, utils as mi_utils
    assert memmat_tensor.SlicedData is pimpy.SlicedData and memmat_tensor.SNR is mi_utils.SNR
    assert memmat_tensor.dot_high_dim is mi_utils.dot_high_dim
    assert data_formats.quant_map_tensor is mi_utils.quant_map_tensor
    assert data_formats.bfp_map_tensor is mi_utils.bfp_map_tensor
    assert (NN_layers.DPETensor, NN_layers.SlicedData, NN_layers.SNR) == (DPETensor, SlicedData, pimpy.SNR)


def test_names_memintellis_layer_and_zoo_modules_carry():
    """The rest of those names: NN_layers.linear / convolution / functions import the engine, the
    autograd functions and SlicedData, and NN_models star-imports its modules without __all__, so
    ``memintelli.NN_models`` (and ``memintelli``) carry the layers, DeiT's parts and the URL tables,
    ``model_urls`` being Mobilnetv2's (the last module imported that defines one)."""
    from pyfastpim.memintelli import NN_layers, NN_models, pimpy
    from pyfastpim.memintelli.NN_layers import convolution, functions, linear
    DeiT, Mobilnetv2, resnet_cifar, vgg_cifar = (importlib.import_module("pyfastpim.memintelli.NN_models." + m)
                                                 for m in ("DeiT", "Mobilnetv2", "resnet_cifar", "vgg_cifar"))
    assert (linear.DPETensor, linear.SNR, linear.linear_mem_func) == (
        DPETensor, pimpy.SNR, NN_layers.linear_mem_func)
    assert (convolution.DPETensor, convolution.conv1d_mem_func, convolution.conv2d_mem_func,
            convolution.is_tuple_2) == (DPETensor, NN_layers.conv1d_mem_func, NN_layers.conv2d_mem_func,
                                        NN_layers.is_tuple_2)
    assert functions.SlicedData is SlicedData
    assert (NN_models.LinearMem, NN_models.Conv2dMem) == (LinearMem, Conv2dMem)
    for module in (NN_models, mi):
        assert (module.Attention, module.Block, module.Mlp, module.PatchEmbed) == (
            DeiT.Attention, DeiT.Block, DeiT.Mlp, DeiT.PatchEmbed)
        assert (module.cfgs, module.cifar_pretrained_urls) == (vgg_cifar.cfgs, vgg_cifar.cifar_pretrained_urls)
        assert module.resnet_pretrained_urls is resnet_cifar.resnet_pretrained_urls
        assert module.model_urls is Mobilnetv2.model_urls
    star = {}
    exec("from pyfastpim.memintelli.NN_models import *", star)
    assert {"LinearMem", "Conv2dMem", "Attention", "model_urls", "cfgs"} <= set(star)


# The crossbar layers each zoo module of MemIntelli imports (``from memintelli.NN_layers import ...``).
ZOO_LAYERS = {"lenet5": ("Conv2dMem", "LinearMem"), "vgg_cifar": ("Conv2dMem", "LinearMem"),
              "ResNet": ("Conv2dMem", "LinearMem"), "DeiT": ("LinearMem",),
              "resnet_cifar": ("Conv2dMem", "LinearMem"), "Mobilnetv2": ("Conv2dMem", "LinearMem")}


@pytest.mark.parametrize("module", sorted(ZOO_LAYERS))
def test_names_each_zoo_module_carries_the_layers_it_imports(module):
    """``from memintelli.NN_models.lenet5 import LinearMem`` (and the like) works in MemIntelli because
    the module imports the layer; here each zoo module gives pyfastpim's layer under the same names.
    Before, only ``NN_models`` itself carried them (ImportError from lenet5, vgg_cifar, ...)."""
    from pyfastpim.memintelli import NN_layers
    zoo = importlib.import_module("pyfastpim.memintelli.NN_models." + module)
    for name in ZOO_LAYERS[module]:
        assert getattr(zoo, name) is getattr(NN_layers, name), (module, name)
        assert name not in zoo.__all__  # imported for the module's use, as MemIntelli's: not re-exported


def test_names_memintelli_package_carries_the_submodules_its_star_imports_bind():
    """MemIntelli's package star-imports NN_layers and NN_models (no __all__ there), so ``memintelli``
    carries their submodules: ``from memintelli import lenet5`` gives the zoo module. ``ResNet`` and
    ``DeiT`` are the classes there (the star import rebinds the names), as here."""
    from pyfastpim.memintelli import NN_layers, NN_models
    for name in ("linear", "convolution", "functions"):
        assert getattr(mi, name) is importlib.import_module("pyfastpim.memintelli.NN_layers." + name)
        assert getattr(NN_layers, name) is getattr(mi, name)
    for name in ("lenet5", "vgg_cifar", "resnet_cifar", "Mobilnetv2"):
        assert getattr(mi, name) is importlib.import_module("pyfastpim.memintelli.NN_models." + name)
        assert getattr(NN_models, name) is getattr(mi, name)
    assert mi.ResNet is NN_models.ResNet and isinstance(mi.ResNet, type)
    assert mi.DeiT is NN_models.DeiT and isinstance(mi.DeiT, type)


def test_names_package_all_lists_are_what_star_imports_of_the_modules_give():
    """The packages import their names explicitly (pyflakes cannot see through ``import *``), so their
    literal lists must stay what the star imports gave: NN_layers.__all__ is its three modules' lists,
    ``memintelli``'s __all__ is every public name it holds (those of NN_layers, NN_models and pimpy and
    the submodules), each the same object as in the subpackage, and the subpackages carry no public
    name beyond their __all__ except those their tests above name."""
    from pyfastpim.memintelli import NN_layers, NN_models, pimpy
    from pyfastpim.memintelli.NN_layers import convolution, functions, linear
    assert NN_layers.__all__ == linear.__all__ + convolution.__all__ + functions.__all__
    public = sorted(n for n in vars(mi) if not n.startswith("_"))
    assert sorted(mi.__all__) == public
    submodules = {"pimpy", "NN_layers", "NN_models", "convolution", "functions", "linear", "Mobilnetv2", "lenet5",
                  "resnet_cifar", "vgg_cifar"}
    assert set(public) == set(NN_layers.__all__) | set(NN_models.__all__) | set(pimpy.__all__) | submodules
    for package in (NN_layers, NN_models, pimpy):
        for name in package.__all__:
            assert getattr(mi, name) is getattr(package, name), name
    modules = {n for n in vars(pimpy) if isinstance(getattr(pimpy, n), type(pimpy))}
    assert {n for n in vars(pimpy) if not n.startswith("_")} - set(pimpy.__all__) - modules == {
        "wire_resistance", "quant_map_tensor", "bfp_map_tensor"}
    assert {n for n in vars(NN_layers) if not n.startswith("_")} - set(NN_layers.__all__) == {
        "SNR", "DPETensor", "SlicedData", "activation", "model_decorators", "linear", "convolution", "functions"}
    assert {n for n in vars(NN_models) if not n.startswith("_")} - set(NN_models.__all__) == {
        "resnet_layers", "lenet5", "vgg_cifar", "resnet_cifar", "Mobilnetv2"}


def test_names_wire_resistance_stub_imports_and_does_nothing():
    """MemIntelli's pimpy.memmat_tensor defines ``wire_resistance(x, y, wire_resistance)`` as an empty
    function (pimpy carries it through its star import); importing it works here too and calling it
    returns None without touching its arguments. IR drop is DPETensor(wire_resistance=R)."""
    from pyfastpim.memintelli import pimpy
    from pyfastpim.memintelli.pimpy.memmat_tensor import wire_resistance
    assert pimpy.wire_resistance is wire_resistance
    x, y = torch.ones(2, 3), torch.ones(3, 4)
    assert wire_resistance(x, y, 1.0) is None
    assert torch.equal(x, torch.ones(2, 3)) and torch.equal(y, torch.ones(3, 4))
    assert "wire_resistance" not in pimpy.__all__ and not hasattr(mi, "wire_resistance")  # as MemIntelli's


# ----------------------------------------------------------------------------- the zoo's initialisation

def _uniform_std(fan_in):
    """std of the layers' default weights: Kaiming-uniform with a=sqrt(5), U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    return 1 / np.sqrt(3 * fan_in)


@pytest.mark.parametrize("factory, mem_enabled, convs_kaiming_normal", [
    ("ResNet_CIFAR_zoo", True, False),   # MemIntelli's CIFAR ResNet initialises nn.Conv2d only
    ("ResNet_CIFAR_zoo", False, True),
    ("ResNet_zoo", True, True),          # its ImageNet ResNet initialises nn.Conv2d and Conv2dMem
    ("ResNet_zoo", False, True),
])
def test_resnet_zoo_initialises_as_memintelli(factory, mem_enabled, convs_kaiming_normal):
    """Every convolution weight has MemIntelli's distribution: Kaiming-normal with mode fan_out and
    the ReLU gain (std sqrt(2 / fan_out), unbounded) where MemIntelli applies it, else the layer's
    Kaiming-uniform default (std 1 / sqrt(3 fan_in), |w| <= 1 / sqrt(fan_in)); batch norms 1 / 0;
    the fc layer at its default. The CIFAR ResNet's crossbar convolutions were Kaiming-normal before."""
    from pyfastpim.memintelli import NN_models
    torch.manual_seed(0)
    model = getattr(NN_models, factory)("resnet18", num_classes=10, mem_enabled=mem_enabled, engine=None,
                                        device="cpu")
    convs = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, Conv2dMem))]
    assert len(convs) == 20 and all(isinstance(m, Conv2dMem) == mem_enabled for m in convs)
    for m in convs:
        w = m.weight.detach().double()
        fan_in, fan_out = w[0].numel(), w.shape[0] * w[0, 0].numel()
        kurtosis = float(((w - w.mean()) ** 4).mean() / w.var(unbiased=False) ** 2)
        if convs_kaiming_normal:
            want = np.sqrt(2 / fan_out)
            assert abs(kurtosis - 3) < 0.5, (m, kurtosis)  # a normal's (a uniform's is 1.8)
        else:
            want = _uniform_std(fan_in)
            assert w.abs().max() <= 1 / np.sqrt(fan_in) and abs(kurtosis - 1.8) < 0.3, (m, kurtosis)
        rel = 4 / np.sqrt(2 * w.numel())  # 4 standard errors of a sample std
        assert abs(float(w.std()) / want - 1) < max(rel, 0.02), (m, float(w.std()), want)
        assert abs(float(w.mean())) < 4 * want / np.sqrt(w.numel())
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            assert torch.all(m.weight == 1) and torch.all(m.bias == 0)
    fc = model.fc.weight.detach().double()
    assert fc.abs().max() <= 1 / np.sqrt(512)
    assert abs(float(fc.std()) / _uniform_std(512) - 1) < 4 / np.sqrt(2 * fc.numel())


def test_vgg_cifar_builds_through_memintellis_overridable_methods():
    """MemIntelli's VGG_CIFAR builds features and classifier with _make_layers(cfg) / _make_classifier(n), so a
    subclass changes the head by overriding one (found comparing the classes' members; pyfastpim built them
    inline, so an override was silently ignored). ResNet's _make_layer and MobileNetV2's _make_divisible exist."""
    from pyfastpim.memintelli.NN_models import MobileNetV2, ResNet_CIFAR, VGG_CIFAR, cfgs

    class SmallHead(VGG_CIFAR):
        def _make_classifier(self, num_classes):
            return torch.nn.Linear(512, num_classes)

    model = SmallHead("vgg11_bn", num_classes=3, mem_enabled=False)
    assert isinstance(model.classifier, torch.nn.Linear)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)
    features = model._make_layers(cfgs["vgg11_bn"])
    assert isinstance(features, torch.nn.Sequential) and len(features) == len(model.features)
    assert callable(ResNet_CIFAR._make_layer) and callable(MobileNetV2._make_divisible)


# ----------------------------------------------------------------------------- attribute types

def test_conv_geometry_attributes_are_kept_as_given():
    """MemIntelli's Conv2dMem / Conv1dMem store kernel_size, stride, padding and dilation as passed
    (ints in its examples: ``layer.stride == 2``, ``layer.kernel_size * 2``); pairs were returned.
    The layer still computes with them, reads them at each call (as nn.Conv2d) and pyfastpim.nn's
    own Conv2dMem keeps nn.Conv2d's pairs."""
    engine = _quiet_engine()
    torch.manual_seed(0)
    conv = Conv2dMem(engine, 3, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=2, padding=1)
    assert (conv.kernel_size, conv.stride, conv.padding, conv.dilation) == (3, 2, 1, 1)
    assert all(type(v) is int for v in (conv.kernel_size, conv.stride, conv.padding, conv.dilation))
    assert conv.kernel_size * 2 == 6 and conv.stride + 1 == 3
    pairs = Conv2dMem(engine, 3, 4, (3, 1), [1, 1, 2, 4], [1, 1, 2, 4], padding=(1, 0))
    assert pairs.kernel_size == (3, 1) and pairs.padding == (1, 0) and pairs.stride == 1
    x = torch.randn(2, 3, 9, 8)
    core = pyfastpim.nn.Conv2dMem(engine, 3, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=2, padding=1)
    assert (core.kernel_size, core.stride, core.padding, core.dilation) == ((3, 3), (2, 2), (1, 1), (1, 1))
    core.load_state_dict(conv.state_dict())
    with torch.no_grad():
        engine.reset(5)
        y = conv(x)
        engine.reset(5)
        assert torch.equal(y, core(x)) and y.shape == (2, 4, 5, 4)
        conv.stride = 1  # read at each call
        assert conv(x).shape == (2, 4, 9, 8)
    assert pairs(x).shape == (2, 4, 9, 8)
    assert "kernel_size=3, stride=1" in repr(conv)
    c1 = Conv1dMem(engine, 3, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4], padding=1)
    assert (c1.kernel_size, c1.stride, c1.padding, c1.dilation) == (3, 1, 1, 1) and type(c1.kernel_size) is int
    assert c1(torch.randn(2, 3, 10)).shape == (2, 4, 10)
    with pytest.raises(ValueError, match="stride"):
        Conv1dMem(engine, 3, 4, 3, [1, 1, 2, 4], [1, 1, 2, 4], stride=0)


def test_sliced_data_slice_method_and_shape_as_memintelli():
    """slice_method is the tensor given (it was turned into a list) and shape / size() a torch.Size
    (a tuple before), as MemIntelli's ``self.slice_method = slice_method``, ``self.shape = data.shape``;
    a layer's weight_sliced holds the layer's weight_slice_method tensor (a tuple before)."""
    engine = _quiet_engine()
    method = torch.tensor([1, 1, 2, 4])
    ws = SlicedData(method, is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    assert ws.slice_method is method and len(ws) == 4
    ws.slice_data_imp(engine, torch.randn(64, 48))
    assert isinstance(ws.shape, torch.Size) and ws.shape == (64, 48) and ws.size() == torch.Size([64, 48])
    assert ws.shape.numel() == 64 * 48
    assert isinstance(ws.t().shape, torch.Size) and ws.t().shape == (48, 64)
    assert SlicedData([1, 1, 2, 4]).slice_method == [1, 1, 2, 4]  # MemIntelli needs a tensor; a list stays a list
    core = pyfastpim.SlicedData((1, 1, 2, 4))
    core.slice_data_imp(engine, np.ones((3, 32), np.float32))
    assert type(core.shape) is tuple  # NumPy data: a plain tuple
    for layer in (LinearMem(engine, 64, 48, [1, 1, 2, 4], [1, 1, 2, 4]),
                  Conv2dMem(engine, 3, 8, 3, [1, 1, 2, 4], [1, 1, 2, 4])):
        assert layer.weight_sliced.slice_method is layer.weight_slice_method
        assert layer.weight_slice_method.tolist() == [1, 1, 2, 4] and layer.weight_slice_method.dtype == torch.int64
        assert isinstance(layer.weight_sliced.shape, torch.Size)


def test_engine_conductance_levels_and_radc_as_memintelli():
    """conductance_levels is a float32 tensor on engine.device (a NumPy float64 array before); a
    per-slice radc is an int64 tensor, least significant slice first (MemIntelli flips the list;
    the tuple in the given order before). Products use each slice's own resolution either way."""
    e = _quiet_engine(HGS=1e-5, LGS=1e-8, g_level=16, radc=[2 ** 12, 2 ** 10, 2 ** 8, 2 ** 6])
    levels = e.conductance_levels
    assert isinstance(levels, torch.Tensor) and levels.dtype == torch.float32 and levels.device == e.device
    assert torch.allclose(levels, torch.tensor([1e-8 + i * e.Q_G for i in range(16)]), rtol=1e-6, atol=0)
    assert isinstance(e.radc, torch.Tensor) and e.radc.dtype == torch.int64
    assert e.radc.tolist() == [2 ** 6, 2 ** 8, 2 ** 10, 2 ** 12] and e.radc[0] == 2 ** 6 and e.radc_is_list
    assert "radc=[4096, 1024, 256, 64]" in repr(e)
    core = _quiet_engine(pyfastpim.DPETensor, HGS=1e-5, LGS=1e-8, g_level=16, radc=[2 ** 12, 2 ** 10, 2 ** 8, 2 ** 6])
    assert core.radc == (2 ** 12, 2 ** 10, 2 ** 8, 2 ** 6) and isinstance(core.conductance_levels, np.ndarray)
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(6, 90, generator=g), torch.randn(90, 40, generator=g)
    y = e(*_sliced_pair(e, x, w))
    assert torch.equal(y, torch.as_tensor(core(*_sliced_pair(core, x, w))))
    flipped = _quiet_engine(pyfastpim.DPETensor, HGS=1e-5, LGS=1e-8, g_level=16,
                            radc=[2 ** 6, 2 ** 8, 2 ** 10, 2 ** 12])
    assert not torch.equal(y, torch.as_tensor(flipped(*_sliced_pair(flipped, x, w))))  # the order matters
    assert isinstance(_quiet_engine().radc, int) and not _quiet_engine().radc_is_list


def test_engine_read_variation_and_radc_assigned_after_construction():
    """read_variation=0.05 reads as MemIntelli's per-level dict, and stays one sigma when g_level is changed
    (it was stored as a 16-key dict: the next product raised 'a dict needs the keys 0..7'); a per-slice radc
    assigned to an engine built with one int is used (radc_is_list was fixed at construction: TypeError)."""
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(6, 64, generator=g), torch.randn(64, 9, generator=g)
    e = _noisy_engine(read_variation=0.05)
    assert e.read_variation == dict.fromkeys(range(16), 0.05)
    e.g_level = 32
    assert e.read_variation == dict.fromkeys(range(32), 0.05)
    built = _noisy_engine(read_variation=0.05, g_level=32)
    assert torch.equal(e(*_sliced_pair(e, x, w)), built(*_sliced_pair(built, x, w)))
    e = _noisy_engine()
    e.radc = [2 ** 12, 2 ** 10, 2 ** 8, 2 ** 6]  # the constructor's order, most significant slice first
    assert e.radc_is_list
    built = _noisy_engine(radc=[2 ** 12, 2 ** 10, 2 ** 8, 2 ** 6])
    assert torch.equal(e(*_sliced_pair(e, x, w)), built(*_sliced_pair(built, x, w)))


# ----------------------------------------------------------------------------- settings changed after construction

def _twin_output(make, layer, x, **kw):
    """The output of a layer made with ``kw`` and ``layer``'s parameters (same engine, replayed noise)."""
    twin = make(**kw)
    twin.load_state_dict(layer.state_dict())
    with torch.no_grad():
        layer.engine.reset(1)
        got = layer(x)
        layer.engine.reset(1)
        return got, twin(x)


@pytest.mark.parametrize("kind", ["linear", "conv2d", "nn linear", "nn conv2d"])
def test_input_slice_method_is_read_at_each_call(kind):
    """MemIntelli's layers slice every input with ``self.input_slice_method``: assigning it (an input
    precision sweep) or editing the tensor changes the next call. It was read once at construction
    (the assignment was silently ignored); a bad one is an error naming input_slice_method."""
    engine = _quiet_engine()
    lin, conv = (pyfastpim.nn.LinearMem, pyfastpim.nn.Conv2dMem) if kind.startswith("nn") else (LinearMem, Conv2dMem)
    if kind.endswith("linear"):
        make, x = (lambda input_slice=(1, 1, 2, 4): lin(engine, 40, 7, input_slice, [1, 1, 2, 4])), torch.randn(4, 40)
    else:
        make, x = (lambda input_slice=(1, 1, 2, 4): conv(engine, 3, 5, 3, input_slice, [1, 1, 2, 4])), torch.randn(2, 3, 9, 9)
    torch.manual_seed(0)
    layer = make()
    layer.input_slice_method = torch.tensor([1, 1, 2])
    got, want = _twin_output(make, layer, x, input_slice=(1, 1, 2))
    assert torch.equal(got, want) and layer.input_slice == (1, 1, 2)
    layer.input_slice_method[2] = 4  # in place: MemIntelli builds the input's SlicedData from the tensor
    got, want = _twin_output(make, layer, x, input_slice=(1, 1, 4))
    assert torch.equal(got, want)
    layer.input_slice_method = torch.tensor([2, 2])
    with pytest.raises(ValueError, match="input_slice_method"):
        layer(x)


@pytest.mark.parametrize("nn_layers", [False, True])
def test_update_weight_programs_with_the_weight_sliced_settings(nn_layers):
    """MemIntelli's update_weight() re-slices into ``self.weight_sliced``: a SlicedData of another slice
    method assigned there, or its bw_e edited, is what the weights are programmed with (the input
    follows weight_sliced.bw_e), as a layer made with those settings. Both were silently dropped:
    update_weight() rebuilt the constructor's settings."""
    engine = _quiet_engine()
    lin, sliced = (pyfastpim.nn.LinearMem, pyfastpim.SlicedData) if nn_layers else (LinearMem, SlicedData)
    x = torch.randn(4, 40)

    def make(weight_slice=(1, 1, 2, 4), bw_e=None):
        return lin(engine, 40, 7, [1, 1, 2, 4], weight_slice, bw_e=bw_e)

    torch.manual_seed(0)
    layer = make()
    layer.weight_sliced = sliced(torch.tensor([1, 1, 2]), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    layer.update_weight()
    got, want = _twin_output(make, layer, x, weight_slice=(1, 1, 2))
    assert torch.equal(got, want) and layer.weight_slice == (1, 1, 2)
    assert layer.weight_sliced.slice_method.tolist() == [1, 1, 2] and layer.weight_sliced.shape == (40, 7)
    layer.weight_sliced.bw_e = 8
    layer.update_weight()
    got, want = _twin_output(make, layer, x, weight_slice=(1, 1, 2), bw_e=8)
    assert torch.equal(got, want) and layer.bw_e == 8 and layer.weight_sliced.bw_e == 8
    with pytest.raises(ValueError, match="bw_e"):  # refused when assigned, as SlicedData(bw_e=-1) refuses it
        layer.weight_sliced.bw_e = -1
    assert layer.weight_sliced.bw_e == 8


def test_memintelli_int_arguments_follow_the_type_rule():
    # relu_q(x, 4.0) / relu_q(x, '4') and Conv1dMem(in_channels=2.0 / '2' / True) raised ValueError where every
    # other int argument of a wrong type raises the type rule's TypeError (_core.check_number), and a 0-d array
    # (an int by that rule) was refused; relu_q(x, 64) gave torch's RuntimeError (overflow) naming nothing
    from pyfastpim.memintelli.NN_layers.activation import relu_q
    from pyfastpim import _core
    from pyfastpim.memintelli.pimpy import DPETensor as MiDPETensor
    from helpers import outcome
    x = torch.linspace(-20, 20, 41)
    for bad in (4.0, "4", True, np.bool_(True), None, [4]):
        assert outcome(lambda: relu_q(x, bad)) == (TypeError, outcome(lambda: _core.check_number(bad, "bit_width",
                                                                                                  True))[1]), bad
    assert torch.equal(relu_q(x, np.array(4)), relu_q(x, 4)) and torch.equal(relu_q(x, np.int64(4)), relu_q(x, 4))
    for bad in (0, 64, -1):
        assert outcome(lambda: relu_q(x, bad)) == (ValueError, "argument 'bit_width': expected an int in [1, 63], "
                                                               "got %d" % bad)
    assert torch.equal(relu_q(x, 63), x.clamp(0, 2 ** 62 - 1))
    engine, s = MiDPETensor(), (1, 1, 2)
    for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation"):
        kw = dict(dict(in_channels=2, out_channels=3, kernel_size=3), **{name: 2.0})
        exc, msg = outcome(lambda: Conv1dMem(engine, input_slice=s, weight_slice=s, **kw))
        assert exc is TypeError and msg == "argument '%s': expected an int, got float" % name, (name, msg)
        kw[name] = np.array(2)
        assert Conv1dMem(engine, input_slice=s, weight_slice=s, **kw) is not None
        kw[name] = -1
        exc, msg = outcome(lambda: Conv1dMem(engine, input_slice=s, weight_slice=s, **kw))
        assert exc is ValueError and msg.startswith("argument '%s': must be an int in [" % name), (name, msg)
