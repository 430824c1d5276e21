"""Conv2dMem / LinearMem geometry and slice arguments are refused in the library's words: "argument 'X': ..."
as every other argument (DPETensor's pairs, the core's validators), not "X must be ..."."""
import pytest

pytest.importorskip("torch")  # the layers need torch, an optional dependency

import pyfastpim  # noqa: E402
from pyfastpim.memintelli.NN_layers.convolution import Conv1dMem as MiConv1d
from pyfastpim.nn import Conv2dMem, LinearMem
from helpers import outcome

S = (1, 1, 2)
ENGINE = pyfastpim.DPETensor()


@pytest.mark.parametrize("name,bad,exc,words", [
    ("kernel_size", 0, ValueError, "values must be >= 1, got 0"),
    ("kernel_size", (3, 1.5), TypeError, "expected an int or a pair of ints, got (3, 1.5)"),
    ("stride", (1, 2, 3), ValueError, "expected an int or a pair of ints, got 3 values"),
    ("stride", (1, 0), ValueError, "values must be >= 1, got (1, 0)"),
    ("padding", -1, ValueError, "values must be >= 0, got -1"),
    ("padding", "same", TypeError, "expected an int or a pair of ints, got 'same'"),
    ("dilation", 0, ValueError, "values must be >= 1, got 0"),
    ("dilation", True, TypeError, "expected an int or a pair of ints, got True"),
    ("input_paral_size", (1, 0), ValueError, "values must be >= 1, got (1, 0)"),
    ("input_quant_gran", "per-block", ValueError, "must be 'per-matrix', 'per-row', 'per-col', None or a pair of "
                                                  "positive ints, got 'per-block'"),
    # the slice methods' words are SlicedData's (pyfastpim.sliced._widths, the one slice-width checker)
    ("input_slice", None, TypeError, "expected a sequence of bit widths, got None"),
    ("weight_slice", (1, 0), ValueError, "every width must be positive, got (1, 0)"),
    ("input_slice", (2, 1, 2), ValueError, "the first (sign) slice must be 1 bit wide, got 2"),
])
def test_conv2dmem_geometry_errors_carry_the_argument_prefix(name, bad, exc, words):
    kw = dict(kernel_size=3)
    kw[name] = bad
    args = {k: kw.pop(k) for k in ("input_slice", "weight_slice") if k in kw}
    fn = lambda: Conv2dMem(ENGINE, 2, 2, input_slice=args.get("input_slice", S),  # noqa: E731
                           weight_slice=args.get("weight_slice", S), **kw)
    assert outcome(fn) == (exc, "argument '%s': %s" % (name, words))


def test_linearmem_slice_errors_carry_the_argument_prefix():
    assert outcome(LinearMem, ENGINE, 4, 4, "12", S)[1].startswith("argument 'input_slice': ")


def test_memintelli_conv1d_size_errors_carry_the_argument_prefix():
    exc, msg = outcome(MiConv1d, ENGINE, 2, 2, 0, S, S)
    assert exc is ValueError and msg.startswith("argument 'kernel_size': must be an int in [1, 2**31 - 1]"), msg


SLICES = [(True, True, 2), (1, True), (1, float("inf")), (1, float("nan")), (1, 2.5), (1, "2"), "112", (1, 8, 8),
          (1, 1, 9), (1,) * 17, (1, 2 ** 70), (1, -1), (), {1: 0, 2: 0}, {1, 2}, None]


@pytest.mark.parametrize("bad", SLICES, ids=repr)
def test_layer_slice_methods_are_checked_as_slicedata_checks_them(bad):
    # the layers had their own slice-width checker (nn.layers._slice_tuple) beside SlicedData's
    # (sliced._widths), more lenient: it took bool widths ((True, True, 2) as (1, 1, 2)), raised OverflowError
    # for an infinite width, took an input_slice of more than 16 bits or a width above 8 (refused only at the
    # first forward), and refused weight_slice's with SlicedData's words naming 'slice_method'; now the one
    # checker, at construction, naming the layer's argument
    for name in ("input_slice", "weight_slice"):
        kw = dict(dict(input_slice=S, weight_slice=S), **{name: bad})
        want = outcome(lambda: pyfastpim.SlicedData(bad))
        assert want[0] in (TypeError, ValueError) and want[1].startswith("argument 'slice_method': "), want
        want = (want[0], want[1].replace("'slice_method'", "'%s'" % name, 1))
        assert outcome(lambda: LinearMem(ENGINE, 4, 4, **kw)) == want, (name, bad)
        assert outcome(lambda: Conv2dMem(ENGINE, 2, 2, 3, **kw)) == want, (name, bad)
    # the input's slice method read at each forward (MemIntelli's input_slice_method attribute): the same checker
    layer = LinearMem(ENGINE, 4, 4, S, S)
    layer.input_slice_method = bad
    want = outcome(lambda: pyfastpim.SlicedData(bad))
    assert outcome(lambda: layer.input_slice) == (want[0], want[1].replace("'slice_method'", "'input_slice_method'"))


def test_geometry_pairs_are_read_by_one_checker_taking_arrays():
    # two int-or-pair checkers (nn.layers._pair, dpe._pair) disagreed: the layers refused a NumPy pair
    # (np.array([32, 32]): TypeError, though the README's pairs are "a list, tuple or array of two ints") and
    # a 0-d array (an int by the type rule), an array granule warned (elementwise ==), and forward_conv2d
    # refused a tensor pair the layers took; now one checker (dpe._pair) for both
    import warnings
    import numpy as np
    import torch
    for pair in (np.array([32, 32]), torch.tensor([32, 32]), np.array(32), (np.int64(32), 32)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            layer = LinearMem(ENGINE, 8, 4, S, S, input_paral_size=pair, weight_paral_size=pair,
                              input_quant_gran=pair, weight_quant_gran=pair)
        assert layer.input_paral_size == (32, 32), pair
    for bad in (np.array([32.0, 32.0]), np.array(True)):
        exc, msg = outcome(lambda: LinearMem(ENGINE, 8, 4, S, S, input_paral_size=bad))
        assert exc is TypeError and msg.startswith("argument 'input_paral_size': expected an int or a pair"), msg
    # an array of the wrong length: a ValueError, as for every pair (test_pairs_of_the_wrong_length_...)
    assert outcome(lambda: LinearMem(ENGINE, 8, 4, S, S, input_paral_size=np.array([32, 32, 32]))) == \
        (ValueError, "argument 'input_paral_size': expected an int or a pair of ints, got 3 values")
    x = torch.ones(1, 2, 5, 5)
    eng = pyfastpim.DPETensor(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0)
    ref = Conv2dMem(eng, 2, 4, 3, S, S)
    want = ref(x)
    for k in (np.array(3), np.array([3, 3]), torch.tensor([3, 3])):
        layer = Conv2dMem(eng, 2, 4, k, S, S)
        layer.load_state_dict(ref.state_dict())
        assert layer.kernel_size == (3, 3) and torch.equal(layer(x), want), k
    w = pyfastpim.SlicedData(S, is_weight=True, paral_size=(32, 32))
    w.slice_data_imp(eng, np.ones((18, 4), np.float32))
    a = eng.forward_conv2d(np.ones((1, 2, 5, 5), np.float32), w, (3, 3), input_slice=S)
    b = eng.forward_conv2d(np.ones((1, 2, 5, 5), np.float32), w, torch.tensor([3, 3]), input_slice=S)
    np.testing.assert_array_equal(a[0], b[0])  # (out, dequantized input)


# ---------------------------------------------------------------- pairs of the wrong length: one rule

WRONG_LENGTH = [(3,), (3, 3, 3), [3, 3, 3], (), (2.5,), ("3", "3", "3")]


def _pair_entries():
    """(label, argument, call taking the bad pair) for every pair argument of every public entry: the layers
    (pyfastpim.nn and the MemIntelli mirror), SlicedData, slice_quantize, the engine's fused entries,
    dpe_matmul and the core's converter (_core.dpe_conv2d)."""
    import numpy as np
    from pyfastpim import _core
    from pyfastpim.memintelli.NN_layers import Conv2dMem as MiConv2d
    from helpers import conv_kwargs
    ws = pyfastpim.SlicedData(S, is_weight=True, paral_size=(32, 32))
    ws.slice_data_imp(ENGINE, np.ones((18, 4), np.float32))
    wl = pyfastpim.SlicedData(S, is_weight=True, paral_size=(32, 32))
    wl.slice_data_imp(ENGINE, np.ones((8, 4), np.float32))
    x4, x2 = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 8), np.float32)
    out = []
    for name in ("kernel_size", "stride", "padding", "dilation", "input_paral_size", "weight_paral_size",
                 "input_quant_gran", "weight_quant_gran"):
        out.append(("Conv2dMem", name, lambda v, n=name: Conv2dMem(ENGINE, 2, 4, **dict(dict(
            kernel_size=3, input_slice=S, weight_slice=S), **{n: v}))))
        out.append(("memintelli Conv2dMem", name, lambda v, n=name: MiConv2d(ENGINE, 2, 4, **dict(dict(
            kernel_size=3, input_slice=S, weight_slice=S), **{n: v}))))
    for name in ("input_paral_size", "weight_paral_size", "input_quant_gran", "weight_quant_gran"):
        out.append(("LinearMem", name, lambda v, n=name: LinearMem(ENGINE, 8, 4, S, S, **{n: v})))
        out.append(("dpe_matmul", name, lambda v, n=name: pyfastpim.dpe_matmul(x2, np.ones((8, 4)), ENGINE,
                                                                                S, S, **{n: v})))
    for name in ("paral_size", "quant_gran"):
        out.append(("SlicedData", name, lambda v, n=name: pyfastpim.SlicedData(S, **{n: v})))
        out.append(("slice_quantize", name, lambda v, n=name: pyfastpim.slice_quantize(x2, S, **{n: v})))
    for name in ("kernel_size", "stride", "padding", "dilation", "input_paral_size", "input_quant_gran"):
        out.append(("forward_conv2d", name, lambda v, n=name: ENGINE.forward_conv2d(x4, ws, **dict(dict(
            kernel_size=3, input_slice=S), **{n: v}))))
        out.append(("_core.dpe_conv2d", name.replace("input_quant_gran", "x_granule"),
                    lambda v, n=name: _core.dpe_conv2d(**conv_kwargs(**{n.replace("input_quant_gran", "x_granule"): v}))))
    for name in ("input_paral_size", "input_quant_gran"):
        out.append(("forward_linear", name, lambda v, n=name: ENGINE.forward_linear(x2, wl, S, **{n: v})))
    return [e for e in out if not (e[0] == "_core.dpe_conv2d" and e[1] == "input_paral_size")]


@pytest.mark.parametrize("bad", WRONG_LENGTH, ids=repr)
def test_pairs_of_the_wrong_length_are_a_value_error_everywhere(bad):
    # a pair of the wrong length was a TypeError in the layers and the engine's fused entries (dpe._pair:
    # "expected an int or a pair of ints, got (1, 2, 3)") but a ValueError in SlicedData / slice_quantize
    # (sliced._pair) and the core's converter, which also read a short pair's items first ((2.5,): TypeError).
    # Now one rule: a wrong type is a TypeError, a list / tuple / array of another length than 2 a ValueError,
    # raised before its items are read
    for label, name, call in _pair_entries():
        exc, msg = outcome(call, bad)
        assert exc is ValueError, (label, name, msg)
        assert msg.startswith("argument '%s': expected " % name) and msg.endswith("got %d values" % len(bad)), \
            (label, name, msg)
    import numpy as np
    if bad and all(isinstance(v, int) for v in bad):  # an array of the wrong length too
        for label, name, call in _pair_entries():
            assert outcome(call, np.array(bad))[0] is ValueError, (label, name)


class _NotAnArray:
    tolist = 3  # an attribute named tolist is not an array's method


def test_every_pair_entry_takes_the_same_sequences_and_refuses_the_same_types():
    # dpe._pair (the layers, forward_*, dpe_matmul) took only lists, tuples and anything with a tolist
    # attribute, while SlicedData and the core take any sequence: range(1, 3) worked in SlicedData and
    # failed in LinearMem. A (1, 2) array was unpacked to one row and called "1 values"; an object whose
    # tolist is not callable raised Python's bare "'int' object is not callable". Now one rule everywhere.
    import numpy as np
    for label, name, call in _pair_entries():
        taken = outcome(call, (2, 3))
        assert outcome(call, range(2, 4)) == taken and outcome(call, np.array([2, 3])) == taken, (label, name)
        # (the core's converter, below the public layer, reads any sequence's items: a 2-D array's rows)
        bads = (_NotAnArray(), {2: 2, 3: 3}, bytearray(b"\x02\x03"), memoryview(b"\x02\x03"))  # bytes-like: data
        for bad in ((np.array([[2, 2]]),) if label != "_core.dpe_conv2d" else ()) + bads:
            exc, msg = outcome(call, bad)
            assert exc is TypeError and msg.startswith("argument '%s': expected " % name), (label, name, bad, msg)


def test_slice_widths_with_a_tolist_attribute_are_not_taken_for_an_array():
    # sliced._widths called any tolist attribute: a non-callable one raised Python's bare "'int' object is
    # not callable", naming no argument; now only NumPy arrays and tensors are unpacked
    exc, msg = outcome(pyfastpim.SlicedData, _NotAnArray())
    assert exc is TypeError and msg.startswith("argument 'slice_method': expected a sequence of bit widths"), msg
    layer = LinearMem(ENGINE, 8, 4, S, S)
    layer.input_slice_method = _NotAnArray()
    import torch
    exc, msg = outcome(layer, torch.ones(2, 8))
    assert exc is TypeError and msg.startswith("argument 'input_slice_method': expected a sequence"), msg


@pytest.mark.parametrize("exc_type", [ValueError, OverflowError, ArithmeticError, KeyError, TypeError],
                         ids=lambda t: t.__name__)
def test_pair_items_own_exceptions_propagate_unchanged(exc_type):
    # dpe._pair took only numbers.Integral items, so an object with __index__ was refused without being asked,
    # a TypeError in the checker's words whatever its __index__ raised (a ValueError among them); now the
    # library's int rule (operator.index): an __index__ object is its int, and the exception its __index__
    # raises reaches the caller as it is (the same object; a TypeError too: it was the rule's "expected an
    # int", as _core.check_number had it for every int argument)
    from helpers import Raises

    class Index:
        def __index__(self):
            return 3
    pairs_only = {"SlicedData", "slice_quantize", "dpe_matmul", "forward_linear", "forward_conv2d input_paral_size",
                  "forward_conv2d input_quant_gran"}  # an int is refused there (a TypeError), not converted
    for bad_of in (lambda r: r, lambda r: (3, r), lambda r: [r, 3]):
        for label, name, call in _pair_entries():
            if label == "_core.dpe_conv2d":
                continue  # the core's converter (tests/api/test_scalar_arguments.py covers it)
            if bad_of(0) == 0 and (label in pairs_only or "%s %s" % (label, name) in pairs_only):
                exc, msg = outcome(call, Raises(exc_type("mine")))
                assert exc is TypeError and "expected a pair" in msg, (label, name, msg)
                continue
            err = exc_type("mine")
            try:
                call(bad_of(Raises(err)))
            except BaseException as got:  # noqa: B902 - compared below
                assert got is err, (label, name, repr(got))
            else:
                raise AssertionError((label, name, "accepted"))
    assert Conv2dMem(ENGINE, 2, 4, Index(), S, S, stride=(Index(), 1)).kernel_size == (3, 3)
    assert LinearMem(ENGINE, 8, 4, S, S, input_paral_size=(Index(), 32)).input_paral_size == (3, 32)
    assert pyfastpim.SlicedData(S, paral_size=(Index(), 2)).paral_size == (3, 2)


# ---------------------------------------------------------------- the input's slice widths: checked once per forward

def _input_width_checks(monkeypatch):
    """A list counting the checks of an input's slice widths (sliced._widths called for input_slice or
    input_slice_method) however they are reached (the layers imported the checker by name)."""
    import pyfastpim.nn.layers as layers
    import pyfastpim.sliced as sliced
    real, seen = sliced._widths, []

    def counting(slice_method, name="slice_method"):
        if name in ("input_slice", "input_slice_method"):
            seen.append(name)
        return real(slice_method, name)
    monkeypatch.setattr(sliced, "_widths", counting)
    monkeypatch.setattr(layers, "_widths", counting)
    return seen


def test_input_widths_are_checked_once_per_forward(monkeypatch):
    # every layer forward checked input_slice_method twice: the layer read it through _widths
    # (layer._input_slice) and handed the widths to forward_linear / forward_conv2d, which checked them
    # again (_slicing_args); now the layer hands the attribute over and the engine checks it, once
    import torch
    from pyfastpim.memintelli.NN_layers import Conv1dMem as MiConv1d, Conv2dMem as MiConv2d, LinearMem as MiLinear
    layers = {"LinearMem": (LinearMem(ENGINE, 8, 4, S, S), torch.ones(3, 8)),
              "Conv2dMem": (Conv2dMem(ENGINE, 2, 4, 3, S, S), torch.ones(1, 2, 5, 5)),
              "memintelli LinearMem": (MiLinear(ENGINE, 8, 4, S, S, device="cpu"), torch.ones(3, 8)),
              "memintelli Conv2dMem": (MiConv2d(ENGINE, 2, 4, 3, S, S, device="cpu"), torch.ones(1, 2, 5, 5)),
              "memintelli Conv1dMem": (MiConv1d(ENGINE, 2, 4, 3, S, S, device="cpu"), torch.ones(1, 2, 7))}
    from pyfastpim import dpe
    seen = _input_width_checks(monkeypatch)
    for label, (layer, x) in layers.items():
        for grad in (False, True):  # inference (fused, no graph) and training (autograd function)
            with torch.set_grad_enabled(grad):
                del seen[:]
                dpe._slicing_memo.clear()  # options not seen before: checked (a repeat is served by the memo)
                layer(x)
                assert seen == ["input_slice"], (label, grad, seen)
                layer(x)  # the same options again: the accepted check is reused (dpe._slicing_args' memo)
                assert seen == ["input_slice"], (label, grad, seen)


def test_edited_input_slice_method_is_checked_again_after_a_memoised_forward(monkeypatch):
    # the engine reuses its check of options it accepted (dpe._slicing_memo, keyed on their values): an
    # in-place edit of the layer's input_slice_method tensor is a new key, checked and used at the next forward
    import torch
    layer, x = LinearMem(ENGINE, 8, 4, S, S), torch.ones(3, 8)
    seen = _input_width_checks(monkeypatch)
    with torch.no_grad():
        layer(x)
        layer(x)
        first = len(seen)
        layer.input_slice_method[2] = 0  # in place: every width must be positive
        with pytest.raises(ValueError, match="argument 'input_slice_method'"):
            layer(x)
        assert len(seen) == first + 1, seen
        layer.input_slice_method[2] = 2
        assert layer(x).shape == (3, 4)  # the accepted widths again


def test_every_entry_still_refuses_bad_input_widths():
    # checked once, in the engine: every entry still refuses bad widths, naming its own argument
    import numpy as np
    import torch
    from pyfastpim.memintelli.NN_layers import Conv1dMem as MiConv1d, Conv2dMem as MiConv2d, LinearMem as MiLinear
    from pyfastpim.memintelli.NN_layers import map_reduce_dot_func
    wl = pyfastpim.SlicedData(S, is_weight=True, paral_size=(32, 32))
    wl.slice_data_imp(ENGINE, np.ones((8, 4), np.float32))
    wc = pyfastpim.SlicedData(S, is_weight=True, paral_size=(32, 32))
    wc.slice_data_imp(ENGINE, np.ones((18, 4), np.float32))
    x2, x4 = np.ones((3, 8), np.float32), np.ones((1, 2, 5, 5), np.float32)
    for bad in ((2, 1, 2), (1, 9), (), (1, 2.5), "12", (1,) * 17):
        want = outcome(lambda: pyfastpim.SlicedData(bad))
        assert want[1].startswith("argument 'slice_method': "), want

        def named(name):
            return (want[0], want[1].replace("'slice_method'", "'%s'" % name, 1))
        direct = {"forward_linear": lambda: ENGINE.forward_linear(x2, wl, bad),
                  "forward_conv2d": lambda: ENGINE.forward_conv2d(x4, wc, 3, input_slice=bad),
                  "dpe_matmul": lambda: pyfastpim.dpe_matmul(x2, np.ones((8, 4)), ENGINE, bad)}
        for label, call in direct.items():
            assert outcome(call) == named("input_slice"), (label, bad)
        memintelli_fn = outcome(lambda: map_reduce_dot_func(ENGINE, torch.ones(3, 8), bad, wl))
        assert memintelli_fn == named("input_slice_method"), (bad, memintelli_fn)
        for layer, x in ((LinearMem(ENGINE, 8, 4, S, S), torch.ones(3, 8)),
                         (Conv2dMem(ENGINE, 2, 4, 3, S, S), torch.ones(1, 2, 5, 5)),
                         (MiLinear(ENGINE, 8, 4, S, S, device="cpu"), torch.ones(3, 8)),
                         (MiConv2d(ENGINE, 2, 4, 3, S, S, device="cpu"), torch.ones(1, 2, 5, 5)),
                         (MiConv1d(ENGINE, 2, 4, 3, S, S, device="cpu"), torch.ones(1, 2, 7))):
            layer.input_slice_method = bad
            for grad in (False, True):
                with torch.set_grad_enabled(grad):
                    assert outcome(layer, x) == named("input_slice_method"), (type(layer), bad, grad)


@pytest.mark.parametrize("exc_type", [ValueError, ArithmeticError, TypeError], ids=lambda t: t.__name__)
def test_slice_widths_follow_the_int_rule_of_pairs(exc_type):
    # the slice-width check took only int, float and NumPy number types, so a width with __index__ (which
    # the pairs and the core's own slice_method converter take as its int) was refused, "widths must be
    # integers", whatever its __index__ would raise; now the one int rule: an __index__ object is its int,
    # and the exception its __index__ raises reaches the caller as it is
    import numpy as np
    import torch
    from helpers import Raises

    class Index:
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v
    data = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    x = torch.ones(2, 8)
    entries = [("slice_method", lambda sm: pyfastpim.SlicedData(sm, is_weight=True).slice_data_imp(ENGINE, data)),
               ("slice_method", lambda sm: pyfastpim.slice_quantize(data, sm, paral_size=(8, 8))),
               ("input_slice", lambda sm: LinearMem(ENGINE, 8, 4, sm, S)),
               ("weight_slice", lambda sm: LinearMem(ENGINE, 8, 4, S, sm)),
               ("input_slice", lambda sm: pyfastpim.dpe_matmul(x.numpy(), data, ENGINE, input_slice=sm)),
               ("weight_slice", lambda sm: pyfastpim.dpe_matmul(x.numpy(), data, ENGINE, weight_slice=sm))]
    for name, call in entries:
        call([1, Index(1), np.int64(2)])  # accepted
        err = exc_type("mine")
        try:
            call([1, Raises(err), 2])
        except BaseException as got:  # noqa: B902 - compared below
            assert got is err, (name, repr(got))
        else:
            raise AssertionError((name, "accepted"))
        with pytest.raises(TypeError, match="^argument '%s': widths must be integers, got True$" % name):
            call([1, True, 2])
    quiet = pyfastpim.DPETensor(read_variation=0.0, write_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0)
    layer = LinearMem(quiet, 8, 4, S, S)
    reference = layer(x)
    layer.input_slice_method = [1, Index(1), Index(2)]
    assert torch.equal(layer(x), reference)
    np.testing.assert_array_equal(pyfastpim.slice_quantize(data, [1, Index(3), 2.0], paral_size=(8, 8))[0],
                                  pyfastpim.slice_quantize(data, [1, 3, 2], paral_size=(8, 8))[0])
