"""Copies and allocations of the layers' forward (README "Arrays, zero copies and memory accounting"): every
copy of the input is counted by pyfastpim.memory, and the forward allocates nothing output-sized beyond
its output."""
import pytest
torch = pytest.importorskip("torch", reason="the layers are torch modules")

import pyfastpim  # noqa: E402
from pyfastpim import memory  # noqa: E402
from pyfastpim.memintelli import Conv1dMem  # noqa: E402
from pyfastpim.nn import Conv2dMem, LinearMem  # noqa: E402

S = (1, 1, 2, 2)


def _layers():
    eng = pyfastpim.DPETensor(rdac=2 ** 2)
    torch.manual_seed(0)
    return ((LinearMem(eng, 64, 16, S, S), (4, 64)),
            (Conv2dMem(eng, 3, 8, 3, S, S, padding=1), (2, 3, 12, 12)),
            (Conv1dMem(eng, 3, 8, 3, S, S), (2, 3, 20)))  # the memintelli host path (HostConv2d)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_input_copies_are_counted(dtype, grad):
    # a float64 input was cast to float32 by torch in the layer (plus an isinf pass over it: two more
    # input-sized temporaries), a copy pyfastpim.memory did not see (0 copies). The engine now narrows it:
    # one dtype_conversion of the input's float32 bytes; a float32 input is read in place (no copy)
    for layer, shape in _layers():
        x = torch.rand(shape, dtype=dtype, requires_grad=grad)
        layer.to(dtype)
        layer(x)  # programs the weights (their own counted copy, outside the traced forward)
        with torch.set_grad_enabled(grad), memory.trace() as t:
            y = layer(x)
        want = {"dtype_conversion": (1, x.numel() * 4)} if dtype == torch.float64 else {}
        assert {k: v for k, v in t.by_kind.items() if v[0]} == want, (type(layer).__name__, t.by_kind)
        assert y.dtype == dtype
        if grad:
            y.sum().backward()
            assert x.grad.dtype == dtype


def _output_sized_allocations(fn, nbytes):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sorted({e.name for e in prof.events() if e.cpu_memory_usage >= nbytes and e.name.startswith("aten::")})


def test_training_forward_adds_the_bias_in_place():
    # the autograd Functions' forward added the bias out of place (out = out + b): one more output-sized
    # tensor per layer and step (aten::add); the engine's output is the layer's own, the bias goes into it
    for layer, shape in _layers():
        x = torch.rand(shape, requires_grad=True)
        y = layer(x)
        assert y.requires_grad
        got = _output_sized_allocations(lambda: layer(x), y.numel() * 4)
        assert "aten::add" not in got, (type(layer).__name__, got)
