"""The layers issue's cases: Conv2dMem 64 -> 64 (3x3, padding 1) on (2, 64, 56, 56), a LinearMem
and a 3-layer MLP, inference (torch.no_grad), each beside the PyTorch einsum transcription of the
engine (MemIntelli's approach, benchmarks/einsum_reference.py) and the bare float arithmetic
(16 = input slices x weight slices float32 products of the layer's shape, the roofline).
The per-call overhead at batch 1 (transformer decoding, per-sample evaluation): a LinearMem 64 -> 64
forward on one row beside the engine's own product of that size (slice the row, MapReduceDot with the
programmed weights), the ratio of medians and the ratio of the two calls timed alternately.
"""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import pyfastpim
from pyfastpim.nn import Conv2dMem, LinearMem

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from einsum_reference import einsum_dpe  # noqa: E402
from interleaved import interleaved_ratio  # noqa: E402

SLICES = (1, 1, 2, 2)
ENGINE = dict(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.05, vnoise=0.05, write_variation=0.0,
              rate_stuck_HGS=0.0, rate_stuck_LGS=0.0)
PAIRS = len(SLICES) ** 2
REF = dict(paral_x=(1, 32), paral_w=(32, 32), gran_x=(1, 32), gran_w=(32, 32),
           **{k: ENGINE[k] for k in ("g_level", "rdac", "radc", "read_variation", "vnoise")})

CONV_GROUP = "Conv2dMem 64->64 3x3 on (2,64,56,56)"
LIN_GROUP = "LinearMem (512,1024) -> 1024"
MLP_GROUP = "MLP 784-512-256-10 batch 256"
BATCH1_GROUP = "LinearMem 64->64 batch 1, noise-free"


def _engine():
    return pyfastpim.DPETensor(seed=0, **ENGINE)


def _median(benchmark):
    stats = getattr(benchmark, "stats", None)
    return None if stats is None else stats.stats.median


def _ref_linear(x, w, b):
    """The einsum transcription of one layer: x (R, K), w (out, in) -> (R, out)."""
    gen = torch.Generator().manual_seed(0)
    return einsum_dpe(x, w.t().contiguous(), SLICES, SLICES, generator=gen, **REF) + b


# ----------------------------------------------------------------------------- Conv2dMem

@pytest.fixture(scope="module")
def conv_case():
    torch.manual_seed(0)
    layer = Conv2dMem(_engine(), 64, 64, 3, SLICES, SLICES, padding=1)
    return layer, torch.randn(2, 64, 56, 56)


def _conv_rss_over_operands_mb():
    """Peak RSS of a fresh process running one forward, above the layer, input and output (MB)."""
    code = r"""
import json, torch
torch.set_num_threads(2)
from pyfastpim import DPETensor
from pyfastpim.nn import Conv2dMem
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024
torch.manual_seed(0)
layer = Conv2dMem(DPETensor(seed=0, **%r), 64, 64, 3, %r, %r, padding=1)
x = torch.randn(2, 64, 56, 56)
base = status('VmRSS')
open('/proc/self/clear_refs', 'w').write('5')  # peak (VmHWM) := current RSS
with torch.no_grad():
    y = layer(x)
over = status('VmHWM') - base - y.numel() * 4
print(json.dumps({"over_mb": over / 2**20}))
""" % (ENGINE, SLICES, SLICES)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(r.stdout.strip().splitlines()[-1])["over_mb"]


def test_conv_layer(benchmark, conv_case):
    layer, x = conv_case
    benchmark.group = CONV_GROUP
    benchmark.extra_info["role"] = "subject"
    benchmark.extra_info["rss_over_operands_mb"] = _conv_rss_over_operands_mb()
    benchmark.extra_info["targets"] = {"seconds": 0.1, "rss_over_operands_mb": 100}
    with torch.no_grad():
        layer(x)  # programmed at construction; warm the thread pool
        benchmark(layer, x)
    benchmark.extra_info["seconds"] = _median(benchmark)


def test_conv_roofline_16_conv2d(benchmark, conv_case):
    layer, x = conv_case
    w = layer.weight.detach()
    benchmark.group = CONV_GROUP
    benchmark.extra_info["role"] = "roofline"
    with torch.no_grad():
        benchmark(lambda: [F.conv2d(x, w, padding=1) for _ in range(PAIRS)])


def test_conv_einsum_reference(benchmark, conv_case):
    layer, x = conv_case
    w = layer.weight.detach().reshape(64, -1)
    b = layer.bias.detach()

    def run():
        cols = F.unfold(x, 3, padding=1).transpose(1, 2).reshape(-1, w.shape[1])
        y = _ref_linear(cols, w, b)
        return y.reshape(x.shape[0], -1, 64).transpose(1, 2).reshape(x.shape[0], 64, 56, 56)

    benchmark.group = CONV_GROUP
    benchmark.extra_info["role"] = "reference"
    with torch.no_grad():
        benchmark.pedantic(run, rounds=1, iterations=1)


# ----------------------------------------------------------------------------- LinearMem

@pytest.fixture(scope="module")
def linear_case():
    torch.manual_seed(0)
    return LinearMem(_engine(), 1024, 1024, SLICES, SLICES), torch.randn(512, 1024)


def test_linear_layer(benchmark, linear_case):
    layer, x = linear_case
    benchmark.group = LIN_GROUP
    benchmark.extra_info["role"] = "subject"
    with torch.no_grad():
        layer(x)
        benchmark(layer, x)


def test_linear_roofline_16_sgemm(benchmark, linear_case):
    layer, x = linear_case
    w = layer.weight.detach()
    benchmark.group = LIN_GROUP
    benchmark.extra_info["role"] = "roofline"
    with torch.no_grad():
        benchmark(lambda: [F.linear(x, w) for _ in range(PAIRS)])


def test_linear_einsum_reference(benchmark, linear_case):
    layer, x = linear_case
    benchmark.group = LIN_GROUP
    benchmark.extra_info["role"] = "reference"
    with torch.no_grad():
        benchmark.pedantic(_ref_linear, args=(x, layer.weight.detach(), layer.bias.detach()), rounds=1, iterations=1)


# ----------------------------------------------------------------------------- 3-layer MLP

@pytest.fixture(scope="module")
def mlp_case():
    torch.manual_seed(0)
    float_model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                      torch.nn.ReLU(), torch.nn.Linear(256, 10))
    import copy
    import pyfastpim.nn
    mem = pyfastpim.nn.convert(copy.deepcopy(float_model), _engine(), SLICES, SLICES)
    return float_model, mem, torch.randn(256, 784)


def test_mlp_forward(benchmark, mlp_case):
    _, mem, x = mlp_case
    benchmark.group = MLP_GROUP
    benchmark.extra_info["role"] = "subject"
    with torch.no_grad():
        mem(x)
        benchmark(mem, x)


def test_mlp_roofline_16x(benchmark, mlp_case):
    model, _, x = mlp_case
    benchmark.group = MLP_GROUP
    benchmark.extra_info["role"] = "roofline"
    with torch.no_grad():
        benchmark(lambda: [model(x) for _ in range(PAIRS)])


def test_mlp_einsum_reference(benchmark, mlp_case):
    model, _, x = mlp_case
    lins = [m for m in model if isinstance(m, torch.nn.Linear)]

    def run():
        h = x
        for i, lin in enumerate(lins):
            h = _ref_linear(h, lin.weight.detach(), lin.bias.detach())
            if i < len(lins) - 1:
                h = torch.relu(h)
        return h

    benchmark.group = MLP_GROUP
    benchmark.extra_info["role"] = "reference"
    with torch.no_grad():
        benchmark.pedantic(run, rounds=1, iterations=1)


# ----------------------------------------------------------------------------- batch 1: per-call overhead

@pytest.fixture(scope="module")
def batch1_case():
    """A noise-free LinearMem 64 -> 64, one input row, and the engine's own product of that size: the row
    sliced as the layer slices it and multiplied with the layer's programmed weights (MapReduceDot)."""
    torch.manual_seed(0)
    eng = pyfastpim.DPETensor(seed=0, **dict(ENGINE, read_variation=0.0, vnoise=0.0))
    layer = LinearMem(eng, 64, 64, SLICES, SLICES)
    x = torch.randn(1, 64)
    ws = layer.weight_sliced

    def engine_product():
        xs = pyfastpim.SlicedData(SLICES, paral_size=layer.input_paral_size, quant_gran=layer.input_quant_gran)
        xs.slice_data_imp(eng, x)
        return eng.MapReduceDot(xs, ws)
    with torch.no_grad():
        assert torch.allclose(layer(x) - layer.bias.detach(), engine_product(), atol=1e-5)  # the same product
    return layer, x, engine_product


def test_linear_batch1_engine_product(benchmark, batch1_case):
    _, _, engine_product = batch1_case
    benchmark.group = BATCH1_GROUP
    benchmark.extra_info["role"] = "subject"
    benchmark(engine_product)


def test_linear_batch1_layer(benchmark, batch1_case):
    layer, x, engine_product = batch1_case
    benchmark.group = BATCH1_GROUP
    benchmark.extra_info["role"] = "subject"
    # the layer's own cost beyond the product: its checks, the autograd-free dispatch, the bias
    benchmark.extra_info["targets"] = {"vs:linear_batch1_engine_product": 1.5, "layer_over_engine_interleaved": 1.5}
    with torch.no_grad():
        benchmark(layer, x)
        benchmark.extra_info["layer_over_engine_interleaved"] = interleaved_ratio(lambda: layer(x), engine_product)
