"""Layers through their life cycle (issue 18 items 1, 7, 8): re-programming after `weight.data = t`,
empty batches, copy.deepcopy / pickle / torch.save of models holding an AttentionContext or a layer
on an OpenCL engine."""
import copy
import io
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the layers are torch modules")

import pyfastpim
from pyfastpim import _core
from pyfastpim.nn import AttentionContext, Conv2dMem, LinearMem

NOISY = dict(write_variation=0.02, read_variation=0.05, vnoise=0.05, rate_stuck_HGS=0.001)
S8 = (1, 1, 2, 4)
from helpers import layer_engine, needs_cl, outcome  # noqa: E402
DEVICES = ["cpu", pytest.param("opencl", marks=needs_cl)]


def engine(device="cpu", **kw):
    return layer_engine(device=device, **kw)


def fresh_output(layer, x):
    """What a layer freshly programmed with layer's current weights computes (same engine settings)."""
    twin = copy.deepcopy(layer)
    twin.update_weight()
    with torch.no_grad():
        return twin(x)


# ----------------------------------------------------------------------------- 1. stale weights

@pytest.mark.parametrize("n", [8, 16, 32, 64])
def test_assigning_weight_data_twice_reprograms(n):
    """`weight.data = t` leaves _version unchanged and the allocator may hand the programmed storage's
    address to a later assignment: the layer must still see the new weights."""
    torch.manual_seed(n)
    layer = LinearMem(engine(), n, n, S8, S8, bias=False)
    x = torch.randn(5, n)
    for _ in range(6):
        layer.weight.data = torch.randn(n, n)
        with torch.no_grad():
            layer(x)                               # programs these weights
        layer.weight.data = torch.randn(n, n)      # two assignments without a forward in between
        layer.weight.data = torch.randn(n, n)
        with torch.no_grad():
            y = layer(x)
        assert torch.equal(y, fresh_output(layer, x))


def test_assigning_conv_weight_data_reprograms():
    torch.manual_seed(1)
    conv = Conv2dMem(engine(), 2, 3, 3, S8, S8, bias=False)
    x = torch.randn(2, 2, 6, 6)
    for _ in range(4):
        conv.weight.data = torch.randn(3, 2, 3, 3)
        with torch.no_grad():
            conv(x)
        conv.weight.data = torch.randn(3, 2, 3, 3)
        conv.weight.data = torch.randn(3, 2, 3, 3)
        with torch.no_grad():
            assert torch.equal(conv(x), fresh_output(conv, x))


def test_a_transposed_weight_of_the_same_storage_reprograms():
    """`weight.data = weight.data.t()` on a square layer keeps the storage (address), shape and version:
    only the strides tell the new weights from the programmed ones (the layer kept its old crossbars)."""
    torch.manual_seed(3)
    layer = LinearMem(engine(), 16, 16, S8, S8, bias=False)
    x = torch.randn(5, 16)
    with torch.no_grad():
        before = layer(x)
        layer.weight.data = layer.weight.data.t()
        after = layer(x)
    assert not torch.equal(after, before)
    assert torch.equal(after, fresh_output(layer, x))


@pytest.mark.parametrize("grad", [False, True])
def test_a_subclass_update_weight_is_called_when_a_forward_reprograms(grad):
    """A subclass that overrides update_weight (MemIntelli's way to hook re-programming) sees the forward's
    automatic re-programming go through it, as it did before the weight was read once per forward."""
    class Counting(LinearMem):
        calls = 0

        def update_weight(self):
            type(self).calls += 1
            super().update_weight()

    torch.manual_seed(4)
    layer = Counting(engine(), 8, 4, S8, S8)
    x = torch.randn(3, 8, requires_grad=grad)
    start = Counting.calls
    with torch.no_grad():
        layer.weight.mul_(2)
    y = layer(x)
    assert Counting.calls == start + 1
    layer(x)                                       # programmed: no second call
    assert Counting.calls == start + 1
    with torch.no_grad():
        assert torch.equal(y, fresh_output(layer, x))


@pytest.mark.parametrize("kind", ["linear", "conv", "lenet5"])
def test_layers_built_under_inference_mode_work(kind):
    """Parameters made under torch.inference_mode() are inference tensors, which have no version counter
    (reading it raises RuntimeError): layers and zoo models built and run there work, as MemIntelli's do,
    and compute what the same layer built outside computes; an in-place write there is programmed by
    update_weight()."""
    from pyfastpim.memintelli.NN_models import LeNet5

    def build():
        torch.manual_seed(4)
        if kind == "linear":
            return LinearMem(engine(), 12, 5, S8, S8), torch.randn(3, 12)
        if kind == "conv":
            return Conv2dMem(engine(), 2, 3, 3, S8, S8, padding=1), torch.randn(2, 2, 5, 5)
        return (LeNet5(engine=engine(), input_slice=S8, weight_slice=S8, mem_enabled=True).eval(),
                torch.randn(2, 1, 28, 28))

    model, x = build()
    with torch.no_grad():
        expected = model(x)
    with torch.inference_mode():
        model, x = build()
        assert next(model.parameters()).is_inference()
        assert torch.equal(model(x), expected)
        for p in model.parameters():
            p.mul_(0.5)
        model.update_weight()
        halved = model(x)
    assert torch.equal(model(x), halved)  # outside inference_mode too
    model, x = build()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
        assert torch.equal(model(x), halved)


def _negate_weight_in_place(layer):
    with torch.no_grad():
        layer.weight.mul_(-1)


@pytest.mark.parametrize("method,kind,memintelli", [("fork", "linear", False), ("fork", "conv", False),
                                                    ("fork", "linear", True), ("spawn", "linear", False)])
def test_a_shared_weight_written_by_another_process_reprograms(method, kind, memintelli):
    """Hogwild training (torch's MNIST Hogwild example): after `model.share_memory()` worker processes
    step the weights in place in shared memory, which moves their version counters, not this process's,
    and the parent then evaluates the model. The layer computed with the weights programmed before the
    workers ran (found passing layers to torch.multiprocessing workers); it now compares a shared
    weight with a copy of what it programmed and re-programs."""
    from helpers import CHILD_TIMEOUT
    cls = None
    if memintelli:
        from pyfastpim.memintelli.NN_layers import LinearMem as cls
    layer, shape = _small_layer(kind, cls)
    layer.share_memory()
    x = torch.randn(shape)
    original = layer.weight.detach().clone()
    with torch.no_grad():
        before = layer(x)                                  # programs the shared weights
    assert "programmed" in repr(layer) and "re-programs" not in repr(layer)
    worker = torch.multiprocessing.get_context(method).Process(target=_negate_weight_in_place, args=(layer,))
    worker.start()
    worker.join(CHILD_TIMEOUT)
    assert worker.exitcode == 0
    assert torch.equal(layer.weight, -original)            # the worker's write is this layer's weight
    shown = repr(layer)
    with torch.no_grad():
        after = layer(x)
    assert torch.equal(after, fresh_output(layer, x))
    assert not torch.equal(after, before)
    assert "re-programs on next forward" in shown and "re-programs" not in repr(layer)
    state = layer.__getstate__()                           # the copy is derived state, as the cells are
    assert state["_programmed_snapshot"] is None


def test_a_weight_not_in_shared_memory_keeps_no_copy():
    layer, shape = _small_layer("linear")
    with torch.no_grad():
        layer(torch.randn(shape))
    assert layer._programmed_snapshot is None
    layer.share_memory()
    with torch.no_grad():
        layer(torch.randn(shape))
    assert torch.equal(layer._programmed_snapshot, layer.weight)


def test_programmed_reference_is_not_state():
    layer = LinearMem(engine(), 8, 4, S8, S8)
    layer(torch.randn(2, 8))
    assert set(layer.state_dict()) == {"weight", "bias"}
    state = layer.__getstate__()
    assert state["_programmed_ref"] is None and state["_weight_sliced"] is None


# ----------------------------------------------------------------------------- torch's module tools
# torch.jit.trace and torch.nn.utils.parametrize with the layers (found comparing with MemIntelli:
# its layers crash under trace and compute with stale weights under a parametrization)

def _small_layer(kind, cls=None):
    torch.manual_seed(0)
    if kind == "linear":
        return (cls or LinearMem)(engine(), 20, 7, S8, S8), (4, 20)
    return (cls or Conv2dMem)(engine(), 3, 5, 3, S8, S8, padding=1), (2, 3, 6, 6)


@pytest.mark.parametrize("kind", ["linear", "conv"])
@pytest.mark.parametrize("grad", [False, True])
def test_jit_trace_records_the_crossbar_product_not_its_result(kind, grad):
    """A module traced (under torch.no_grad(), as for inference, or with grad) computes each new input on
    the crossbar: the inference path was recorded as its output, a constant, so the traced module
    returned the traced input's result for every input (and the trace's own check failed)."""
    layer, shape = _small_layer(kind)
    x, x2 = torch.randn(shape), torch.randn(shape)
    with torch.set_grad_enabled(grad):
        traced = torch.jit.trace(layer, (x,))
        got, want = traced(x2), layer(x2)
    assert torch.equal(got, want)
    assert not torch.equal(traced(x), got)


def test_host_path_traced_under_no_grad_keeps_what_backward_needs():
    """pyfastpim.memintelli's host path (tensors on CUDA, and Conv1dMem always) told its Function
    whether to keep the dequantized input as a bool, which torch.jit.trace records as a constant: a
    module traced under no_grad kept nothing forever, and its backward failed. Now the bool is
    pyfastpim.nn.layers._through_function's (true while tracing), as for pyfastpim.nn's layers."""
    from pyfastpim.memintelli.NN_layers import Conv1dMem
    torch.manual_seed(0)
    layer = Conv1dMem(engine(), 3, 5, 3, S8, S8)
    with torch.no_grad():
        traced = torch.jit.trace(layer, (torch.randn(2, 3, 9),))
    x = torch.randn(2, 3, 9, requires_grad=True)
    out = traced(x)
    out.square().sum().backward()
    want_x = x.detach().clone().requires_grad_()
    layer(want_x).square().sum().backward()
    assert torch.equal(x.grad, want_x.grad)


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_traced_module_cannot_be_saved(kind, tmp_path):
    """README: a traced module calls the layers' Python Function at each run, so torch.jit.save
    refuses it (it can be used in the process that traced it, not exported)."""
    layer, shape = _small_layer(kind)
    with torch.no_grad():
        traced = torch.jit.trace(layer, (torch.randn(shape),))
    with pytest.raises(RuntimeError, match="export Python function"):
        torch.jit.save(traced, str(tmp_path / "traced.pt"))


def _tool_layer(kind, **kw):
    """A small layer of kind ('linear', 'conv', or pyfastpim.memintelli's 'conv1d', which runs the host
    path) on an engine of kw, and an input shape."""
    from pyfastpim.memintelli.NN_layers import Conv1dMem
    torch.manual_seed(0)
    if kind == "conv1d":
        return Conv1dMem(engine(**kw), 3, 5, 3, S8, S8), (2, 3, 9)
    layer, shape = _small_layer(kind)
    layer.engine = engine(**kw)
    return layer, shape


@pytest.mark.parametrize("kind", ["linear", "conv", "conv1d"])
@pytest.mark.parametrize("traced_with_grad", [False, True])
def test_traced_module_computes_dequantized_copies_only_for_a_gradient(kind, traced_with_grad, monkeypatch):
    """A traced module runs the layer's autograd Function at each run; it computed the dequantized input
    (an engine allocation, seen in pyfastpim.memory's peak) and weight copies that only backward uses under
    torch.no_grad() too, whether traced with or without grad (the host path: when traced with grad). Now
    its no_grad run does no more work than the layer's own no_grad forward, with the same outputs (noisy
    engine, same call number), and a run with grad still gives the layer's gradients."""
    from pyfastpim.memintelli.NN_layers import _hop
    from pyfastpim.nn import layers as layers_module
    layer, shape = _tool_layer(kind, **NOISY)
    x = torch.randn(shape)
    with torch.set_grad_enabled(traced_with_grad):
        traced = torch.jit.trace(layer, (x,), check_trace=False)
    weight_copies = []
    for module in (layers_module, _hop):
        counted = (lambda s, f=module._host_quantized: weight_copies.append(1) or f(s))
        monkeypatch.setattr(module, "_host_quantized", counted)
    with torch.no_grad():
        layer.engine.reset()
        with pyfastpim.memory.trace() as own:
            want = layer(x)
        layer.engine.reset()
        with pyfastpim.memory.trace() as run:
            got = traced(x)
    assert torch.equal(got, want)
    assert weight_copies == []
    assert run.copies <= own.copies and run.peak_bytes <= own.peak_bytes, (run, own)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    grads = []
    for module, xi in zip((layer, traced), xs):
        layer.zero_grad()
        layer.engine.reset()
        module(xi).square().sum().backward()
        grads.append((xi.grad, layer.weight.grad.clone()))
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize("kind", ["linear", "conv", "conv1d", "memintelli_linear", "in_sequential"])
def test_jit_script_is_a_clear_error_pointing_to_trace(kind):
    """torch.jit.script failed deep in pyfastpim's Python with a TorchScript compile error ("Unknown type name
    'np.ndarray'" for LinearMem / Conv2dMem, "Compiled functions can't take variable number of arguments" for
    Conv1dMem): now NotImplementedError naming the layer, saying that scripting is unsupported and trace works
    (README), for a layer anywhere in a model."""
    from pyfastpim.memintelli.NN_layers import LinearMem as MemIntelliLinearMem
    if kind == "memintelli_linear":
        layer, name = MemIntelliLinearMem(engine(), 20, 7, S8, S8), "LinearMem"
    elif kind == "in_sequential":
        layer, name = torch.nn.Sequential(torch.nn.ReLU(), _tool_layer("conv")[0]), "Conv2dMem"
    else:
        layer, _ = _tool_layer(kind)
        name = type(layer).__name__
    message = r"^%s: torch\.jit\.script is not supported.*use torch\.jit\.trace" % name
    with pytest.raises(NotImplementedError, match=message):
        torch.jit.script(layer)


@pytest.mark.parametrize("in_sequential", [False, True])
def test_jit_script_of_an_attention_context_is_the_layers_clear_error(in_sequential):
    """torch.jit.script(pyfastpim.nn.AttentionContext()) failed with a TorchScript error ("Module
    'AttentionContext' has no attribute '_ctx'"; found by review): now the layers' NotImplementedError."""
    module = AttentionContext(update_rate=0.1, strength=0.5)
    module = torch.nn.Sequential(torch.nn.ReLU(), module) if in_sequential else module
    message = r"^AttentionContext: torch\.jit\.script is not supported.*use torch\.jit\.trace"
    with pytest.raises(NotImplementedError, match=message):
        torch.jit.script(module)


def _functorch():
    """torch.func (torch >= 2.0) or functorch (torch 1.13): the transforms, or a skip."""
    func = getattr(torch, "func", None)
    if func is None or not hasattr(func, "vmap"):
        func = pytest.importorskip("functorch", reason="torch.func / functorch is needed")
    return func


@pytest.mark.parametrize("kind", ["linear", "conv", "conv1d"])
@pytest.mark.parametrize("transform", ["vmap", "grad", "jacrev", "vmap_no_grad", "grad_of_parameters"])
def test_functorch_transforms_are_a_clear_error_naming_the_layer(kind, transform):
    """torch.func / functorch's vmap, grad and jacrev over a layer failed with messages naming neither the
    layer nor the cause (vmap without grad: "argument 'input': its __dlpack_device__() failed: ... Batching rule
    not implemented for aten::is_pinned"; otherwise torch's "functorch functions ... do not support the use of
    autograd.Function"). They are unsupported (the engine reads the tensors' memory; a batched rule would draw
    the noise of one call where a loop draws one per sample): NotImplementedError naming the layer and the
    way out (README); the layer works afterwards."""
    func = _functorch()
    layer, shape = _tool_layer(kind)
    x = torch.randn((3,) + shape)
    name = type(layer).__name__
    message = r"^%s: torch\.func / functorch transforms .* not supported" % name
    with torch.set_grad_enabled(transform != "vmap_no_grad"), pytest.raises(NotImplementedError, match=message):
        if transform.startswith("vmap"):
            func.vmap(layer)(x)
        elif transform == "grad":
            func.grad(lambda a: layer(a).sum())(x[0])
        elif transform == "jacrev":
            func.jacrev(layer)(x[0])
        else:  # the parameters wrapped, the input not
            params = {k: v.detach() for k, v in layer.named_parameters()}
            call = getattr(func, "functional_call", None) or torch.nn.utils.stateless.functional_call
            func.grad(lambda p: call(layer, p, (x[0],)).sum())(params)
    with torch.no_grad():
        layer(x[0])  # no transform level left behind


def _compile_or_skip(model, backend):
    compile_ = getattr(torch, "compile", None)
    if compile_ is None:
        pytest.skip("torch.compile is not in this torch build (torch %s)" % torch.__version__)
    try:
        return compile_(model, backend=backend)
    except Exception as exc:  # a torch build whose dynamo cannot run here (e.g. an unsupported Python)
        pytest.skip("torch.compile is not usable in this torch build: %s" % exc)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("noisy", [False, True])
def test_torch_compile_gives_the_eager_outputs(backend, noisy):
    """torch.compile over a model using the layers (graph breaks at the C engine are fine) computes what the
    eager model computes, noise-free and, from the same engine call number, noisy; training gives the same
    gradients. Skipped where torch.compile does not exist (torch < 2.0, as Debian's 1.13)."""
    eng = engine(**(NOISY if noisy else {}))
    torch.manual_seed(0)
    model = torch.nn.Sequential(Conv2dMem(eng, 3, 4, 3, S8, S8, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                LinearMem(eng, 4 * 6 * 6, 5, S8, S8))
    compiled = _compile_or_skip(model, backend)
    x = torch.randn(2, 3, 6, 6)
    for grad in (False, True):
        outs = []
        for m in (model, compiled):
            model.zero_grad()
            eng.reset()
            with torch.set_grad_enabled(grad):
                y = m(x)
            if grad:
                y.square().sum().backward()
            outs.append([y.detach()] + [p.grad.clone() for p in model.parameters() if grad])
        assert all(torch.equal(a, b) for a, b in zip(*outs))


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_functional_call_computes_with_the_parameters_given(kind):
    """torch.nn.utils.stateless.functional_call swaps the parameters for one call: the layer computes
    with the ones given (their gradients go to them), then again with its own (MemIntelli's crossbars
    keep the weights programmed before)."""
    from torch.nn.utils.stateless import functional_call
    layer, shape = _small_layer(kind)
    doubled = copy.deepcopy(layer)
    with torch.no_grad():
        for p in doubled.parameters():
            p.mul_(2)
    x = torch.randn(shape)
    own = layer(x)
    given = {name: (2 * p).detach().requires_grad_() for name, p in layer.named_parameters()}
    out = functional_call(layer, given, (x,))
    assert torch.equal(out, doubled(x))
    out.square().sum().backward()
    assert given["weight"].grad is not None and layer.weight.grad is None
    assert torch.equal(layer(x), own)


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("cls", ["nn", "memintelli"])
def test_conv2dmem_string_padding_is_a_type_error_naming_padding(padding, cls):
    from pyfastpim.memintelli.NN_layers import Conv2dMem as MemIntelliConv2dMem
    with pytest.raises(TypeError, match="'padding'"):
        (Conv2dMem if cls == "nn" else MemIntelliConv2dMem)(engine(), 3, 5, 3, S8, S8, padding=padding)


class _Halve(torch.nn.Module):
    """w * 0.5, counting its evaluations."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, w):
        self.calls += 1
        return w * 0.5


@pytest.mark.parametrize("kind", ["linear", "conv", "conv1d"])
@pytest.mark.parametrize("grad", [False, True])
def test_parametrized_weight_is_programmed_once_per_forward(kind, grad):
    """Under torch.nn.utils.parametrize the weight is recomputed at each access. The layer read it twice
    when programming (once for the key, once for the reference it keeps), so the tensor of the key was
    freed, the next forward's weight often got its address with version 0, the key matched and the old
    crossbar was kept: only 8 of 30 forwards re-programmed under no_grad. Now a forward reads the weight
    once (one evaluation of the parametrization), programs the crossbar from that very tensor (the one
    the gradient goes through) and computes as a freshly programmed twin with the same weights."""
    from torch.nn.utils import parametrize
    from pyfastpim.memintelli.NN_layers import Conv1dMem
    if kind == "conv1d":
        torch.manual_seed(0)
        layer, shape = Conv1dMem(engine(), 3, 5, 3, S8, S8), (2, 3, 9)
    else:
        layer, shape = _small_layer(kind)
    twin = copy.deepcopy(layer)  # the unparametrized layer, programmed with the halved weights below
    halve = _Halve()
    parametrize.register_parametrization(layer, "weight", halve)
    original = layer.parametrizations.weight.original
    torch.manual_seed(1)
    for step in range(25):
        with torch.no_grad():
            original.copy_(torch.randn_like(original))  # in place: the parameter's storage is kept
            twin.weight.copy_(original * 0.5)
        x = torch.randn(shape, requires_grad=grad)
        halve.calls = 0
        with torch.set_grad_enabled(grad):
            out = layer(x)
        assert halve.calls == 1, (step, halve.calls)
        with torch.no_grad():
            assert torch.equal(out, twin(x)), step  # computed with this step's halved weights
        if grad:
            original.grad = None
            out.square().sum().backward()
            assert original.grad is not None and original.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["linear", "conv", "conv1d"])
def test_a_parametrized_layer_deep_copies_as_a_parametrized_nn_linear_does(kind):
    """torch deep-copies a parametrized module (its class refuses only pickling). The layers' __deepcopy__
    called the parametrized class's __getstate__, which raises torch's 'Serialization of parametrized
    modules' RuntimeError, so copy.deepcopy of a parametrized LinearMem / Conv2dMem failed where that of a
    parametrized nn.Linear works (found deep-copying modules with their weights under a parametrization)."""
    from torch.nn.utils import parametrize
    from pyfastpim.memintelli.NN_layers import Conv1dMem
    if kind == "conv1d":
        torch.manual_seed(0)
        layer, shape = Conv1dMem(engine(), 3, 5, 3, S8, S8), (2, 3, 9)
    else:
        layer, shape = _small_layer(kind)
    parametrize.register_parametrization(layer, "weight", _Halve())
    x = torch.randn(shape)
    with torch.no_grad():
        before = layer(x)
    twin = copy.deepcopy(layer)
    assert parametrize.is_parametrized(twin, "weight") and twin.engine is layer.engine
    with torch.no_grad():
        assert torch.equal(twin(x), before)
        twin.parametrizations.weight.original.mul_(-1)   # an in-place edit of the copy only
        assert torch.equal(layer(x), before)
        edited = twin(x)
    assert not torch.equal(edited, before) and torch.equal(edited, fresh_output(twin, x))
    with pytest.raises(RuntimeError, match="Serialization of parametrized modules"):
        pickle.dumps(layer)                              # as for a parametrized nn.Linear


def test_a_parametrized_attention_context_deep_copy_views_its_own_context():
    """A parametrized nn.AttentionContext (strength under a parametrization) was deep-copied by torch's
    default deep copy for parametrized modules: the copied buffers were copies apart from the copied C
    context, so the copy's update_outgoing changed its context but not its outgoing buffer, and the
    incoming assigned from it was the old matrix. It now copies as pickling does (a new context, the
    buffers viewing it)."""
    from torch.nn.utils import parametrize
    torch.manual_seed(0)
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    ctx = AttentionContext(update_rate=0.5, strength=0.4)
    ctx.update_outgoing(x, y)
    ctx.incoming = ctx.outgoing.clone()
    parametrize.register_parametrization(ctx, "strength", _Halve())
    before = ctx(x)
    twin = copy.deepcopy(ctx)
    assert torch.equal(twin(x), before) and parametrize.is_parametrized(twin, "strength")
    twin.update_outgoing(3 * x, y)
    assert torch.equal(twin.outgoing, torch.from_numpy(twin.context.outgoing))
    assert not torch.equal(twin.outgoing, ctx.outgoing)
    twin.incoming = twin.outgoing
    assert not torch.equal(twin(x), before)
    assert torch.equal(ctx(x), before)                   # the original is left as it was


@pytest.mark.parametrize("kind", ["linear", "conv", "conv1d", "memintelli_linear"])
def test_layers_made_on_the_meta_device_load_their_weights_later(kind):
    """torch's deferred initialization (torch.nn.utils.skip_init: construction on the meta device, then
    to_empty; or device='meta' and to_empty by hand) and a state_dict loaded after it, as for nn.Linear. The
    layers programmed the weight at construction, so device='meta' failed there with torch's
    NotImplementedError 'Cannot copy out of meta tensor' (found loading a state_dict into layers built
    without weights). A meta layer now programs at its first forward after to_empty (its slice-method
    tensors stay on the host: to_empty moves only parameters and buffers); run while still on meta it raises
    a RuntimeError naming the layer and what to do."""
    from pyfastpim.memintelli import NN_layers
    cls, args, shape = {"linear": (LinearMem, (20, 7), (4, 20)), "conv": (Conv2dMem, (3, 5, 3), (2, 3, 6, 6)),
                        "conv1d": (NN_layers.Conv1dMem, (3, 5, 3), (2, 3, 9)),
                        "memintelli_linear": (NN_layers.LinearMem, (20, 7), (4, 20))}[kind]
    torch.manual_seed(0)
    reference = cls(engine(), *args, S8, S8)
    x = torch.randn(shape)
    with torch.no_grad():
        expected = reference(x)
    deferred = torch.nn.utils.skip_init(cls, engine(), *args, S8, S8)
    deferred.load_state_dict(reference.state_dict())
    meta = cls(engine(), *args, S8, S8, device="meta")
    assert meta.weight.is_meta
    with pytest.raises(RuntimeError, match="%s: its weight is on the meta device .*to_empty" % cls.__name__):
        meta(x)
    meta.to_empty(device="cpu").load_state_dict(reference.state_dict())
    with torch.no_grad():
        assert torch.equal(deferred(x), expected) and torch.equal(meta(x), expected)


# ----------------------------------------------------------------------------- 7. empty batches

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 12), (3, 0, 12), (0, 4, 12), (2, 3, 0, 12)])
@pytest.mark.parametrize("grad", [False, True])
def test_linear_empty_batches_like_nn_linear(device, shape, grad):
    torch.manual_seed(0)
    layer = LinearMem(engine(device), 12, 5, S8, S8)
    ref = torch.nn.Linear(12, 5)
    x = torch.randn(*shape, requires_grad=grad)
    if grad:
        y = layer(x)
        y.sum().backward()
        assert layer.weight.grad is not None and not layer.weight.grad.any()
        assert x.grad.shape == x.shape
    else:
        with torch.no_grad():
            y = layer(x)
    assert y.shape == ref(x).shape == shape[:-1] + (5,)
    assert y.dtype == x.dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True])
def test_conv_empty_batch_like_nn_conv2d(device, grad):
    torch.manual_seed(0)
    conv = Conv2dMem(engine(device), 3, 4, 3, S8, S8, padding=1, stride=2)
    ref = torch.nn.Conv2d(3, 4, 3, padding=1, stride=2)
    x = torch.randn(0, 3, 9, 8, requires_grad=grad)
    y = conv(x)
    assert y.shape == ref(x).shape == (0, 4, 5, 4)
    if grad:
        y.sum().backward()
        assert x.grad.shape == x.shape and not conv.weight.grad.any()


@pytest.mark.parametrize("device", DEVICES)
def test_engine_entry_points_accept_empty_batches(device):
    eng = engine(device)
    conv = Conv2dMem(eng, 3, 4, 3, S8, S8)
    for x in (np.zeros((0, 3, 8, 8), np.float32), torch.zeros(0, 3, 8, 8)):
        out, dq = eng.forward_conv2d(x, conv.weight_sliced, 3, input_slice=S8, return_dequant=True)
        assert tuple(out.shape) == (0, 4, 6, 6) and tuple(dq.shape) == (0, 36, 27)
    for x in (np.zeros((0, 27), np.float32), torch.zeros(4, 0, 27)):
        out, dq = eng.forward_linear(x, conv.weight_sliced, S8, return_dequant=True)
        assert tuple(out.shape) == tuple(x.shape[:-1]) + (4,) and tuple(dq.shape) == tuple(x.shape)
    with pytest.raises(ValueError, match="mismatches"):
        eng.forward_linear(np.zeros((0, 26), np.float32), conv.weight_sliced, S8)


BAD_LINEAR = {"input_slice": dict(input_slice=(1, 0, 2)), "input_slice type": dict(input_slice="x"),
              "input_paral_size": dict(input_paral_size=(1, 0)), "paral mismatch": dict(input_paral_size=(1, 16)),
              "input_quant_gran": dict(input_quant_gran="bogus"), "bw_e INT/BFP": dict(bw_e=8),
              "bw_e value": dict(bw_e="x"), "exactness": dict(), "w_sliced": dict()}


@pytest.mark.parametrize("case", list(BAD_LINEAR))
def test_forward_linear_checks_an_empty_batch_as_a_non_empty_one(case):
    # an empty batch returned before any argument check: a bad input_slice (paral size, granule,
    # bw_e, weights) gave empty results instead of the error a non-empty batch raises
    eng = engine(rdac=2 ** 12, g_level=256) if case == "exactness" else engine()
    conv = Conv2dMem(eng, 3, 4, 3, S8, S8)  # weights (27, 4), paral_size (32, 32)
    w = 3.0 if case == "w_sliced" else conv.weight_sliced
    kw = dict(dict(input_slice=S8), **BAD_LINEAR[case])
    full = outcome(lambda: eng.forward_linear(np.ones((4, 27), np.float32), w, **kw))
    assert full[0] in (TypeError, ValueError), full
    for shape in [(0, 27), (2, 0, 27), (0, 5, 27)]:
        assert outcome(lambda: eng.forward_linear(np.zeros(shape, np.float32), w, **kw)) == full, shape


@pytest.mark.parametrize("kw", [dict(input_slice=(1, 0, 2)), dict(input_slice="x"), dict(bw_e="x"), dict(bw_e=-1)],
                         ids=["input_slice", "input_slice type", "bw_e value", "bw_e negative"])
def test_forward_conv2d_checks_an_empty_batch_as_a_non_empty_one(kw):
    # input_slice was parsed only after the empty-batch return; bw_e's value was never checked
    eng = engine()
    conv = Conv2dMem(eng, 3, 4, 3, S8, S8)
    full = outcome(lambda: eng.forward_conv2d(np.ones((2, 3, 8, 8), np.float32), conv.weight_sliced, 3, **kw))
    assert full[0] in (TypeError, ValueError) and ("argument 'input_slice'" in full[1] or "argument 'bw_e'" in full[1]), full
    assert outcome(lambda: eng.forward_conv2d(np.zeros((0, 3, 8, 8), np.float32), conv.weight_sliced, 3,
                                              **kw)) == full


def test_forward_conv2d_bw_e_0_is_int_as_for_linear_layers():
    # bw_e=0 means INT (docs/semantics.md section 4, MemIntelli's `if bw_e:`) for SlicedData and
    # forward_linear, but forward_conv2d quantized the input as BFP (it tested `bw_e is not None`)
    eng = engine()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32) * np.float32([1, 100, 0.01, 1])[None, :, None, None]
    W = rng.standard_normal((36, 4)).astype(np.float32)
    outs = {}
    for bw_e in (None, 0):
        w = pyfastpim.SlicedData(S8, bw_e=bw_e, is_weight=True, paral_size=(36, 4), quant_gran=(36, 4))
        w.slice_data_imp(eng, W)
        conv, _ = eng.forward_conv2d(x, w, 3, input_slice=S8, input_paral_size=(1, 36), input_quant_gran=(1, 36),
                                     bw_e=bw_e)  # one 3x3 patch: the unfolded input is x.reshape(1, 36)
        lin, _ = eng.forward_linear(x.reshape(1, 36), w, S8, (1, 36), (1, 36), bw_e=bw_e)
        outs[bw_e] = (conv.ravel(), lin.ravel())
    np.testing.assert_array_equal(outs[0][0], outs[0][1])
    np.testing.assert_array_equal(outs[0][0], outs[None][0])


# ----------------------------------------------------------------------------- 8. copy and save

def torch_roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


class Block(torch.nn.Module):
    def __init__(self, eng):
        super().__init__()
        self.fc = LinearMem(eng, 8, 8, S8, S8)
        self.ctx = AttentionContext(update_rate=0.25, strength=0.5)

    def forward(self, x):
        return self.ctx(self.fc(x))


def trained_block(device="cpu"):
    torch.manual_seed(2)
    block = Block(engine(device))
    x = torch.randn(6, 8)
    block.ctx.update_outgoing(x, x)
    block.ctx.incoming = block.ctx.outgoing.clone()
    block.ctx.update_outgoing(x, 2 * x)
    return block, x


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
def test_model_with_attention_context_copies_and_saves(how):
    block, x = trained_block()
    with torch.no_grad():
        y = block(x)
    other = {"deepcopy": copy.deepcopy, "pickle": lambda m: pickle.loads(pickle.dumps(m)),
             "torch.save": torch_roundtrip}[how](block)
    assert other.ctx is not block.ctx and other.ctx.context is not block.ctx.context
    for name in ("incoming", "outgoing"):
        assert torch.equal(getattr(other.ctx, name), getattr(block.ctx, name))
    assert other.ctx.update_rate == block.ctx.update_rate and other.ctx.embed_dim == block.ctx.embed_dim
    with torch.no_grad():
        assert torch.equal(other(x), y)
    # the copy is independent and its buffers still view its own C context
    other.ctx.update_outgoing(x, x)
    assert torch.equal(other.ctx.outgoing, torch.from_numpy(other.ctx.context.outgoing))
    assert not torch.equal(other.ctx.outgoing, block.ctx.outgoing)
    # gradients flow through the restored context
    out = other(x.requires_grad_())
    out.sum().backward()
    assert other.ctx.strength.grad is not None and torch.isfinite(other.ctx.strength.grad)


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_cl)])
def test_plain_attention_context_copies_and_pickles(device):
    ctx = pyfastpim.AttentionContext(update_rate=0.5, strength=0.25, embed_dim=6, device=device)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    ctx.update_outgoing(x, x)
    ctx.incoming = ctx.outgoing
    core = _core.AttentionContext(0.5, 0.25, 6)
    core.update_outgoing(x, x)
    for c in (ctx, core):
        for other in (copy.deepcopy(c), pickle.loads(pickle.dumps(c))):
            assert type(other) is type(c)
            assert (other.update_rate, other.strength, other.embed_dim) == (c.update_rate, c.strength, c.embed_dim)
            for name in ("incoming", "outgoing"):
                a, b = getattr(other, name), getattr(c, name)
                assert (a is None) == (b is None) and (a is None or np.array_equal(a, b))
            if type(c) is not _core.AttentionContext:
                assert other.device == c.device
                assert np.array_equal(other.apply(x[:, :6]), c.apply(x[:, :6]))


@needs_cl
@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
@pytest.mark.parametrize("noise", [False, True])
def test_opencl_layers_copy_and_save(how, noise):
    """The OpenCL handle is re-opened on load (same device), the programmed cells re-programmed."""
    torch.manual_seed(4)
    eng = engine("opencl", **(NOISY if noise else {}))
    model = torch.nn.Sequential(Conv2dMem(eng, 2, 3, 3, S8, S8, padding=1), torch.nn.Flatten(),
                                LinearMem(eng, 3 * 5 * 5, 4, S8, S8))
    x = torch.randn(2, 2, 5, 5)
    with torch.no_grad():
        model(x)
    copier = {"deepcopy": copy.deepcopy, "pickle": lambda m: pickle.loads(pickle.dumps(m)),
              "torch.save": torch_roundtrip}[how]
    other = copier(model)
    e2 = other[0].engine
    assert e2._cl is not None and e2._cl.info["name"] == eng._cl.info["name"]
    assert other[2].engine is e2
    if how == "deepcopy":
        assert e2 is eng            # layers share their engine on deepcopy (as on the CPU)
    else:
        assert e2.calls == eng.calls and e2.seed == eng.seed
    with torch.no_grad():
        if how == "deepcopy":
            eng.calls -= 2          # the shared engine: rewind so both see the same noise
            y2 = other(x)
            eng.calls -= 2
            y1 = model(x)
        else:
            y1, y2 = model(x), other(x)
    assert torch.equal(y1, y2)
    # the engine alone pickles too
    e3 = pickle.loads(pickle.dumps(eng))
    assert e3._cl is eng._cl and e3.device == eng.device
