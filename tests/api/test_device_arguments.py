"""The device= argument of DPETensor, AttentionContext and SlicedData: one rule (pyfastpim.devices._engine_form)
for all three: the same forms accepted (torch.device included, as MemIntelli's scripts pass them), the same
TypeError / ValueError naming 'device' for the rest, and device strings shown as normalized (stripped,
lower-cased) by every entry; a forked child of a process that used OpenCL refuses an OpenCL engine or
context when it is made, not at its first product."""
import multiprocessing as mp

import pytest

import pyfastpim
from pyfastpim import AttentionContext, DPETensor, SlicedData
from helpers import CHILD_TIMEOUT, HAVE_CL, needs_cl

try:
    import torch
except ImportError:  # make test-venv: no torch
    torch = None


def _entries():
    return {"DPETensor": lambda d: DPETensor(device=d),
            "AttentionContext": lambda d: AttentionContext(device=d),
            "SlicedData": lambda d: SlicedData((1, 1, 2), device=d)}


def _handle(obj):
    return getattr(obj, "_cl", getattr(obj, "_device", None))


def _torch_forms():
    if torch is None:
        return []
    return [torch.device("cpu"), torch.device("cpu", 0), torch.device("cuda"), torch.device("cuda", 1)]


@pytest.mark.parametrize("device", ["cpu", " CPU ", "cpu:0", "cuda", " Cuda:1 "] + _torch_forms(),
                         ids=str)
def test_the_attention_context_takes_the_engines_device_forms(device):
    """AttentionContext refused torch.device('cpu') (TypeError) and 'cuda' / 'cpu:0' (ValueError), which
    DPETensor takes; it runs where the engine does, with the same .device."""
    e, ctx = DPETensor(device=device), AttentionContext(device=device)
    assert ctx.device == e.device
    assert _handle(ctx) is e._cl


@pytest.mark.parametrize("bad", ["bogus", "opencl:0", "opencl:x:1", "cuda:", "", "gpu", 42, 1.5, b"cpu", ("cpu",),
                                 object()], ids=lambda v: "object()" if type(v) is object else repr(v))
def test_a_bad_device_is_refused_alike_by_every_entry(bad):
    """SlicedData accepted any device silently (device='bogus' stored); AttentionContext's messages
    differed from DPETensor's. Now one type and one message naming 'device'."""
    with pytest.raises((TypeError, ValueError)) as want:
        DPETensor(device=bad)
    assert "argument 'device'" in str(want.value)
    for name, make in _entries().items():
        with pytest.raises(want.type) as got:
            make(bad)
        assert str(got.value) == str(want.value), name


@pytest.mark.parametrize("device, shown", [(" cpu ", "cpu"), ("CPU", "cpu"), (" cuda:0 ", "cuda:0"),
                                           (" opencl ", "opencl"), ("OpenCL", "opencl"),
                                           (" OPENCL:0:0\t", "opencl:0:0")])
def test_device_strings_are_normalized_by_every_entry(device, shown):
    """' opencl ' ran on OpenCL but DPETensor / AttentionContext showed .device ' opencl ' and SlicedData
    kept it as given; every entry now strips and lower-cases a device string (the CPU shown as 'cpu')."""
    if "opencl" in shown and not HAVE_CL:
        pytest.skip("no OpenCL platform")
    for name, make in _entries().items():
        obj = make(device)
        want = shown
        if name != "SlicedData" and shown.startswith("cuda") and _handle(obj) is None:
            want = "cpu"  # an engine on 'cuda' without an OpenCL GPU runs on (and shows) the CPU
        assert obj.device == want, (name, obj.device)


def _fork_child(q):
    out = []
    for make in (lambda: DPETensor(device="opencl"), lambda: AttentionContext(device="opencl"),
                 lambda: DPETensor(device=" OpenCL ")):
        try:
            make()
            out.append("constructed")
        except RuntimeError as exc:
            out.append(str(exc))
    out.append(DPETensor(device="cpu").device)  # the CPU still works there
    q.put(out)


@needs_cl
def test_a_forked_child_refuses_an_opencl_engine_when_it_is_made():
    """The parent's cached handle was handed to the child's new DPETensor(device='opencl'), which then
    failed only at its first product; now making it raises the fork RuntimeError."""
    DPETensor(device="opencl")
    AttentionContext(device="opencl")  # the parent holds the cached handle
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_fork_child, args=(q,))
    p.start()
    try:
        msgs = q.get(timeout=CHILD_TIMEOUT)
    finally:
        p.join(CHILD_TIMEOUT)
        if p.exitcode is None:
            p.kill()
    for m in msgs[:3]:
        assert "forked" in m and "OpenCL" in m and "spawn" in m, m
    assert msgs[3] == "cpu"
    assert pyfastpim.resolve_device("opencl") is pyfastpim.resolve_device("opencl")  # the parent keeps its handle
