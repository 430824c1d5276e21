"""SlicedData's slice_method, paral_size and quant_gran assigned after construction: checked as the
constructor checks them, and data sliced with another geometry dropped (they were plain attributes: a
slice_method assigned was never sliced with, a paral_size assigned after slicing was read with the old
blocks, giving products that match neither geometry)."""
import copy
import pickle

import numpy as np
import pytest

import pyfastpim
from pyfastpim import SlicedData

NOT_SLICED = r"argument '%s': the (weights|input) (are|is) not sliced yet \(call slice_data_imp\)"
RNG = np.random.default_rng(38)
W = RNG.standard_normal((64, 48)).astype(np.float32)
X = RNG.standard_normal((5, 64)).astype(np.float32)
BASE = dict(slice_method=(1, 1, 2, 2), paral_size=(32, 32), quant_gran=(32, 32))
# each assignment, and the constructor arguments of its twin (quant_gran None is resolved at construction)
CHANGES = [("slice_method", (1, 1, 1, 1, 2, 2), {}),
           ("paral_size", (16, 16), dict(quant_gran=(32, 32))),
           ("quant_gran", (64, 16), {}),
           ("quant_gran", "per-row", {})]


def engine():
    return pyfastpim.DPETensor(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0, seed=3)


def weights(**kw):
    return SlicedData(**dict(BASE, is_weight=True, **kw))


def sliced(sd, eng, data):
    sd.slice_data_imp(eng, data)
    return sd


def inputs(eng, paral):
    return sliced(SlicedData((1, 1, 2, 2), paral_size=(1, paral[0]), quant_gran=(1, paral[0])), eng, X)


def assert_same_slicing(a, b):
    assert len(a) == len(b) and a._widths == b._widths and a.shape == b.shape
    assert a.paral_size == b.paral_size and a.quant_gran == b.quant_gran and a._granule == b._granule
    for name in ("_codes", "_gran_max", "_gran_scale", "_levels"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.sliced_data, b.sliced_data)  # the block layout of the new paral_size


@pytest.mark.parametrize("name, value, twin_kw", CHANGES)
def test_assigned_before_slicing_slices_as_a_twin_constructed_with_it(name, value, twin_kw):
    eng = engine()
    sd = weights()
    setattr(sd, name, value)
    twin = weights(**dict(twin_kw, **{name: value}))
    sliced(sd, eng, W), sliced(twin, eng, W)
    assert_same_slicing(sd, twin)
    x = inputs(eng, sd.paral_size)
    np.testing.assert_array_equal(eng(x, sd), eng(x, twin))


@pytest.mark.parametrize("name, value, twin_kw", CHANGES)
def test_assigned_after_slicing_drops_the_slicing_until_sliced_again(name, value, twin_kw):
    eng = engine()
    sd = sliced(weights(), eng, W)
    x = inputs(eng, (32, 32))
    eng(x, sd)  # programmed and packed for this engine
    setattr(sd, name, value)
    assert sd._codes is None and sd._levels is None and sd.shape is None and "not sliced yet" in repr(sd)
    x = inputs(eng, sd.paral_size)
    with pytest.raises(ValueError, match=NOT_SLICED % "mat"):
        eng(x, sd)
    assert sd.sliced_data is None and sd.G is None  # as a SlicedData not sliced yet
    with pytest.raises(RuntimeError, match=r"call slice_data_imp\(engine, data\) first"):
        sd.max_data = np.ones((2, 3, 1, 1), np.float32)
    twin = sliced(weights(**dict(twin_kw, **{name: value})), eng, W)
    sliced(sd, eng, W)
    assert_same_slicing(sd, twin)
    np.testing.assert_array_equal(eng(x, sd), eng(x, twin))


def test_an_input_assigned_another_geometry_is_refused_as_not_sliced():
    eng = engine()
    w = sliced(weights(paral_size=(16, 16)), eng, W)
    x = inputs(eng, (32, 32))
    x.paral_size = (1, 16)  # was read with its (1, 32) blocks: a product matching neither geometry
    with pytest.raises(ValueError, match=NOT_SLICED % "x"):
        eng(x, w)
    sliced(x, eng, X)
    twin = sliced(SlicedData((1, 1, 2, 2), paral_size=(1, 16), quant_gran=(1, 32)), eng, X)
    np.testing.assert_array_equal(eng(x, w), eng(twin, w))


@pytest.mark.parametrize("name, equal", [("slice_method", [1, 1, 2, 2]), ("slice_method", np.array([1, 1, 2, 2])),
                                         ("paral_size", [32, 32]), ("quant_gran", np.array([32, 32]))])
def test_an_equal_geometry_keeps_the_slicing(name, equal):
    eng = engine()
    sd = sliced(weights(), eng, W)
    x = inputs(eng, (32, 32))
    before, codes, version = eng(x, sd), sd._codes, sd._version
    setattr(sd, name, equal)
    assert sd._codes is codes and sd._version == version
    np.testing.assert_array_equal(eng(x, sd), before)
    if name == "slice_method":
        assert sd.slice_method is equal  # the object as given (a layer's is its tensor)
    else:
        assert getattr(sd, name) == (32, 32) and type(getattr(sd, name)) is tuple  # checked, as constructed


def test_slice_method_given_as_a_tensor_stays_a_tensor():
    torch = pytest.importorskip("torch")
    sd = sliced(weights(), engine(), W)
    t = torch.tensor([1, 1, 2, 2])
    sd.slice_method = t
    assert sd.slice_method is t and sd._codes is not None
    t6 = torch.tensor([1.0, 1.0, 1.0, 1.0, 2.0, 2.0])
    sd.slice_method = t6
    assert sd.slice_method is t6 and sd._widths == (1, 1, 1, 1, 2, 2) and sd._codes is None and len(sd) == 6
    assert tuple(sd.sliced_weights.shape) == (6,)  # the per-slice constants follow the widths


@pytest.mark.parametrize("name, value", [
    ("slice_method", (2, 2)), ("slice_method", "abc"), ("slice_method", (1, 9)), ("slice_method", ()),
    ("slice_method", (1, 1.5)), ("paral_size", (0, 4)), ("paral_size", 4), ("paral_size", (4, 4, 4)),
    ("paral_size", "ab"), ("paral_size", (2 ** 63, 1)), ("quant_gran", "per-block"), ("quant_gran", (0, 4)),
    ("quant_gran", 7), ("quant_gran", (2 ** 63 - 1, 1)), ("bw_e", -1), ("bw_e", 2.0), ("bw_e", True), ("bw_e", "8"),
    ("is_weight", 2), ("is_weight", "yes"), ("is_weight", None)])
def test_invalid_values_are_refused_as_the_constructor_refuses_them(name, value):
    kw = dict(dict(BASE, is_weight=True), **{name: value})
    if name == "quant_gran":
        kw["paral_size"] = (64, 64)  # a granule rounded up to whole blocks of the current paral_size
    with pytest.raises((TypeError, ValueError)) as constructed:
        SlicedData(**kw)
    eng = engine()
    sd = sliced(weights(paral_size=(64, 64), quant_gran=(64, 64)), eng, W)
    codes, stored = sd._codes, getattr(sd, name)
    with pytest.raises(constructed.type) as assigned:
        setattr(sd, name, value)
    assert str(assigned.value) == str(constructed.value) and "'%s'" % name in str(assigned.value)
    assert getattr(sd, name) == stored and sd._codes is codes  # nothing changed


def test_paral_size_is_checked_against_the_current_quant_gran():
    sd = weights(paral_size=(1, 1), quant_gran=(2 ** 63 - 1, 1))
    with pytest.raises(ValueError, match="argument 'quant_gran': .* rounded up to a multiple of paral_size"):
        sd.paral_size = (2, 1)
    assert sd.paral_size == (1, 1)


def test_quant_gran_none_is_the_current_paral_size():
    sd = weights(paral_size=(16, 8))
    sd.quant_gran = None
    assert sd.quant_gran == (16, 8)


def test_transpose_keeps_its_transposed_data():
    eng = engine()
    w = sliced(weights(paral_size=(32, 16), quant_gran="per-col"), eng, W)
    t = w.t()
    assert t.paral_size == (16, 32) and t.quant_gran == "per-row" and t._codes is not None
    np.testing.assert_array_equal(t._codes, np.swapaxes(w._codes, -1, -2))


@pytest.mark.parametrize("copier", [lambda s: pickle.loads(pickle.dumps(s)), copy.copy, copy.deepcopy])
def test_pickles_and_copies_keep_the_geometry_and_its_checks(copier):
    eng = engine()
    sd = sliced(weights(quant_gran="per-matrix"), eng, W)
    c = copier(sd)
    assert (c.slice_method, c.paral_size, c.quant_gran, len(c)) == ((1, 1, 2, 2), (32, 32), "per-matrix", 4)
    x = inputs(eng, (32, 32))
    np.testing.assert_array_equal(eng(x, c), eng(x, sd))
    with pytest.raises(ValueError, match="argument 'slice_method'"):
        c.slice_method = (2, 2)
    c.paral_size = (16, 16)
    assert c._codes is None and sd._codes is not None  # the copy's slicing only


def test_a_state_pickled_before_the_properties_loads():
    # pickles of the earlier SlicedData hold the three values as plain entries of the instance dictionary
    eng = engine()
    sd = sliced(weights(), eng, W)
    old = SlicedData.__new__(SlicedData)
    state = dict(sd.__getstate__(), slice_method=[1, 1, 2, 2], paral_size=(32, 32), quant_gran=(32, 32))
    old.__dict__.update(state)  # what unpickling does with a class that has no __setstate__
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.slice_method == [1, 1, 2, 2] and loaded.paral_size == (32, 32) and len(loaded) == 4
    x = inputs(eng, (32, 32))
    np.testing.assert_array_equal(eng(x, loaded), eng(x, sd))
    loaded.slice_method = (1, 1, 1, 1, 2, 2)
    with pytest.raises(ValueError, match=NOT_SLICED % "mat"):
        eng(x, loaded)


# ---- the effective geometry decides (docs/semantics.md section 2): the granule rounded up to whole blocks,
# a granularity name as the granule it stands for in this data (W is 64 x 48, blocks 32 x 32). The values
# stored were compared before: an assignment that slices the data exactly as before dropped it.

@pytest.mark.parametrize("given, equal", [
    ((32, 32), (30, 30)), ((30, 30), (32, 32)), ((32, 32), (np.int64(17), 32)), ((32, 32), [31, 1]),
    ("per-matrix", (64, 64)), ("per-matrix", (33, 48)), ((64, 48), "per-matrix"), ("per-row", (1, 48)),
    ("per-col", (64, 1)), ("per-row", np.str_("per-row"))])
def test_an_assignment_slicing_the_data_alike_keeps_the_slicing(given, equal):
    eng = engine()
    sd = sliced(weights(quant_gran=given), eng, W)
    x = inputs(eng, (32, 32))
    before, codes, version = eng(x, sd), sd._codes, sd._version
    sd.quant_gran = equal
    assert sd._codes is codes and sd._version == version
    np.testing.assert_array_equal(eng(x, sd), before)
    twin = sliced(weights(quant_gran=equal), eng, W)  # the slicing held is the one the new value gives
    assert_same_slicing(sd, twin)
    assert type(sd.quant_gran) in (tuple, str) and type(sd.quant_gran) is type(twin.quant_gran)


@pytest.mark.parametrize("given, other", [((32, 32), (33, 32)), ((30, 30), (32, 64)), ("per-matrix", (64, 32)),
                                          ("per-row", (1, 65)), ("per-col", "per-row"), ((32, 32), "per-row")])
def test_an_assignment_slicing_the_data_otherwise_drops_it(given, other):
    eng = engine()
    sd = sliced(weights(quant_gran=given), eng, W)
    sd.quant_gran = other
    assert sd._codes is None and sd.shape is None
    with pytest.raises(ValueError, match=NOT_SLICED % "mat"):
        eng(inputs(eng, (32, 32)), sd)


def test_a_granularity_name_is_read_by_its_characters():
    class Agreeable(str):  # equal to every string: was taken for a granularity name, and stored as itself
        __hash__ = str.__hash__

        def __eq__(self, other):
            return True

    with pytest.raises(ValueError, match="argument 'quant_gran': expected None, 'per-matrix'"):
        SlicedData((1, 1, 2, 2), quant_gran=Agreeable("per-block"))
    sd = SlicedData((1, 1, 2, 2), quant_gran=np.str_("per-row"))
    assert type(sd.quant_gran) is str and sd.quant_gran == "per-row"


# ---- a geometry assigned from another thread while slice_data_imp slices (outside the lock): the slicing
# was dropped at its commit, so slice_data_imp returned normally with no data. It now slices again with the
# new geometry, so the data held is always the one its geometry gives.

def _assign_during_slicing(monkeypatch, name, value, make=weights):
    import threading
    from pyfastpim import sliced as sliced_module
    real, calls = sliced_module._core.slice_quantize, []

    def slice_quantize(*args, **kw):
        calls.append(args[1:4])
        if len(calls) == 1:  # another thread assigns while the first slicing runs
            t = threading.Thread(target=setattr, args=(sd, name, value))
            t.start()
            t.join()
        return real(*args, **kw)

    monkeypatch.setattr(sliced_module._core, "slice_quantize", slice_quantize)
    sd = make()
    return sd, calls


@pytest.mark.parametrize("name, value, twin_kw", CHANGES)
def test_a_geometry_assigned_while_slicing_is_the_one_sliced_with(monkeypatch, name, value, twin_kw):
    sd, calls = _assign_during_slicing(monkeypatch, name, value)
    eng = engine()
    sd.slice_data_imp(eng, W)
    monkeypatch.undo()
    assert len(calls) == 2 and sd._codes is not None and sd.shape == W.shape
    assert getattr(sd, name) == value or name == "slice_method" and sd._widths == value
    twin = sliced(weights(**dict(twin_kw, **{name: value})), eng, W)
    assert_same_slicing(sd, twin)
    x = inputs(eng, sd.paral_size)
    np.testing.assert_array_equal(eng(x, sd), eng(x, twin))


def test_an_alike_geometry_assigned_while_slicing_slices_once(monkeypatch):
    sd, calls = _assign_during_slicing(monkeypatch, "quant_gran", (30, 30))
    eng = engine()
    sd.slice_data_imp(eng, W)
    monkeypatch.undo()
    assert len(calls) == 1 and sd.quant_gran == (30, 30) and sd._granule == (32, 32)
    assert_same_slicing(sd, sliced(weights(quant_gran=(30, 30)), eng, W))


# ---- a geometry assigned from another thread while a product runs, between its checks and its kernel call
# (the engine's _prepare_weights, outside the lock): the product passed the dropped slicing's None arrays on
# (TypeError "argument 'x_granule': expected a pair of ints, got NoneType", or the programming's 'codes').
# It now raises the check's own "not sliced yet" ValueError, naming its argument.

def _assign_during_product(monkeypatch, eng, target, name, value):
    import threading
    real = eng._prepare_weights

    def prepare(mat):
        t = threading.Thread(target=setattr, args=(target, name, value))
        t.start()
        t.join()
        return real(mat)

    monkeypatch.setattr(eng, "_prepare_weights", prepare)


@pytest.mark.parametrize("which, name, value", [("x", "quant_gran", (1, 64)), ("x", "slice_method", (1, 2, 2)),
                                                ("mat", "paral_size", (16, 16)), ("mat", "quant_gran", "per-row")])
def test_a_geometry_assigned_during_a_product_is_refused_as_not_sliced(monkeypatch, which, name, value):
    eng = engine()
    w = sliced(weights(), eng, W)
    x = inputs(eng, (32, 32))
    eng(x, w)  # programmed and packed
    _assign_during_product(monkeypatch, eng, x if which == "x" else w, name, value)
    with pytest.raises(ValueError, match=NOT_SLICED % which):
        eng(x, w)


def test_a_geometry_assigned_during_a_convolution_is_refused_as_not_sliced(monkeypatch):
    eng = engine()
    w = sliced(weights(), eng, W[:18])
    image = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    want = eng.forward_conv2d(image, w, 3, input_paral_size=(1, 32), input_quant_gran=(1, 32))[0]
    _assign_during_product(monkeypatch, eng, w, "paral_size", (16, 16))
    with pytest.raises(ValueError, match=NOT_SLICED % "w_sliced"):
        eng.forward_conv2d(image, w, 3, input_paral_size=(1, 32), input_quant_gran=(1, 32))
    monkeypatch.undo()
    w.paral_size = (32, 32)
    sliced(w, eng, W[:18])
    np.testing.assert_array_equal(eng.forward_conv2d(image, w, 3, input_paral_size=(1, 32),
                                                     input_quant_gran=(1, 32))[0], want)


@pytest.mark.parametrize("data", [np.ones(5, np.float32), np.float32(1)], ids=["1-D", "0-D"])
def test_data_of_too_few_dimensions_gets_the_cores_refusal(data):
    # the geometry comparison of slice_data_imp (the data's rows and columns) must not refuse it first
    # (it unpacked data.shape[-2:]: "not enough values to unpack", found by tests/api/test_fuzz.py)
    with pytest.raises(ValueError, match=r"argument 'data': expected a 2-D \(rows, cols\) or 3-D"):
        SlicedData((1, 1, 2)).slice_data_imp(engine(), data)


# ---- bw_e and is_weight assigned after slicing (they were plain attributes). bw_e: the data kept its INT or BFP
# quantization while the products' INT/BFP check compared the new bw_e, so an INT input made BFP multiplied with
# BFP weights (scales of both kinds mixed, e_bias None though bw_e said BFP). INT against BFP slices differently
# (docs/semantics.md sections 3, 4): the slicing is dropped; another positive bw_e, or 0 for None, slices alike.

def _bfp_inputs(eng, bw_e):
    return sliced(SlicedData((1, 1, 2, 2), bw_e=bw_e, paral_size=(1, 32), quant_gran=(1, 32)), eng, X)


@pytest.mark.parametrize("given, other", [(None, 8), (8, None), (0, 4), (4, 0)])
@pytest.mark.parametrize("which", ["x", "mat"])
def test_bw_e_switching_int_and_bfp_after_slicing_drops_the_slicing(which, given, other):
    eng = engine()
    x, w = _bfp_inputs(eng, given), sliced(weights(bw_e=other), eng, W)
    target = x if which == "x" else w
    target.bw_e = other if which == "x" else given  # the two now agree: the INT/BFP check passed on the old code
    assert target._codes is None and target.shape is None and target.bw_e == (other if which == "x" else given)
    with pytest.raises(ValueError, match=NOT_SLICED % which):
        eng(x, w)
    assert target.e_bias is None and target.max_data is None
    sliced(target, eng, X if which == "x" else W)
    twin_x = _bfp_inputs(eng, other) if which == "x" else x
    twin_w = w if which == "x" else sliced(weights(bw_e=given), eng, W)
    assert (target.e_bias is None) == (not target.bw_e)
    np.testing.assert_array_equal(eng(x, w), eng(twin_x, twin_w))


@pytest.mark.parametrize("given, alike", [(4, 8), (8, np.int64(3)), (None, 0), (0, None)])
def test_a_bw_e_of_the_same_kind_keeps_the_slicing(given, alike):
    eng = engine()
    x, w = _bfp_inputs(eng, given), sliced(weights(bw_e=given), eng, W)
    before, codes, version = eng(x, w), w._codes, w._version
    w.bw_e = alike
    x.bw_e = alike
    assert w._codes is codes and w._version == version and w.bw_e is alike
    np.testing.assert_array_equal(eng(x, w), before)


def test_bw_e_assigned_while_slicing_is_the_one_sliced_with(monkeypatch):
    sd, calls = _assign_during_slicing(monkeypatch, "bw_e", 8)
    eng = engine()
    sd.slice_data_imp(eng, W)
    monkeypatch.undo()
    assert len(calls) == 2 and sd._gran_exp is not None  # the old code committed INT codes under bw_e 8
    twin = sliced(weights(bw_e=8), eng, W)
    assert_same_slicing(sd, twin)
    np.testing.assert_array_equal(sd._gran_exp, twin._gran_exp)


def test_an_alike_bw_e_assigned_while_slicing_slices_once(monkeypatch):
    sd, calls = _assign_during_slicing(monkeypatch, "bw_e", 0)
    sd.slice_data_imp(engine(), W)
    assert len(calls) == 1 and sd.bw_e == 0 and sd._codes is not None


# is_weight does not change the codes (weights are 2-D data sliced as inputs are, then programmed): data keeps its
# slicing, except batched data made weights (slice_data_imp refuses it as weights), which was multiplied as weights
# (or refused naming the programming's 'codes'). Weights made an input and back kept levels that the codes
# assigned meanwhile (sliced_data) no longer matched; 2-D data made weights was refused by forward_conv2d.

def test_batched_data_made_weights_is_dropped():
    eng = engine()
    batch = sliced(SlicedData((1, 1, 2, 2), paral_size=(32, 32)), eng, RNG.standard_normal((2, 64, 48)))
    batch.is_weight = True
    assert batch._codes is None and batch.shape is None
    with pytest.raises(ValueError, match=NOT_SLICED % "mat"):
        eng(inputs(eng, (32, 32)), batch)
    with pytest.raises(ValueError, match="weights must be 2-D"):
        batch.slice_data_imp(eng, RNG.standard_normal((2, 64, 48)))


def test_2d_data_made_weights_keeps_its_slicing_and_is_programmed_at_its_first_product():
    eng = engine()
    w = sliced(SlicedData(**BASE), eng, W[:18])
    codes = w._codes
    w.is_weight = True
    assert w._codes is codes and w._levels is None
    twin = sliced(weights(), eng, W[:18])
    image = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    conv = dict(input_paral_size=(1, 32), input_quant_gran=(1, 32))
    got, want = eng.forward_conv2d(image, w, 3, **conv)[0], eng.forward_conv2d(image, twin, 3, **conv)[0]
    np.testing.assert_array_equal(got, want)  # the old code refused w: "expected programmed weights"
    np.testing.assert_array_equal(w._levels, twin._levels)


def test_weights_made_an_input_and_back_are_programmed_with_the_codes_assigned_meanwhile():
    eng = engine()
    w, other = sliced(weights(), eng, W), sliced(weights(), eng, -W)
    x = inputs(eng, (32, 32))
    eng(x, w)
    w.is_weight = False
    with pytest.raises(ValueError, match=r"argument 'mat': expected weights"):
        eng(x, w)
    w.sliced_data = other.sliced_data
    w.is_weight = True
    np.testing.assert_array_equal(eng(x, w), eng(x, other))  # the old code multiplied the levels of W


def test_batched_data_made_weights_while_slicing_is_refused_as_weights(monkeypatch):
    sd, calls = _assign_during_slicing(monkeypatch, "is_weight", True, make=lambda: SlicedData(**BASE))
    with pytest.raises(ValueError, match="argument 'data': weights must be 2-D"):  # as made before the call
        sd.slice_data_imp(engine(), RNG.standard_normal((2, 64, 48)))
    assert len(calls) == 1 and sd._codes is None and sd.is_weight  # the old code committed batched weights


# ---- slice_data_imp outdated again and again: it sliced again for every geometry assigned meanwhile, so a thread
# that kept assigning kept it slicing forever. After _UNLOCKED_SLICINGS such slicings it slices holding the lock.

def _assign_at_every_slicing(monkeypatch, same_thread=False):
    import threading
    from pyfastpim import sliced as sliced_module
    real, calls, waiting = sliced_module._core.slice_quantize, [], []
    grans = [(64, 16), (32, 64)]

    def slice_quantize(*args, **kw):
        owned = sliced_module._state_lock._is_owned()
        calls.append((owned, tuple(args[3])))  # the granule sliced with
        value = grans[len(calls) % 2]
        if len(calls) >= 20:  # a bound for the old code, which sliced again for every assignment
            pass
        elif same_thread:
            sd.quant_gran = value
        elif owned:  # the lock held: an assignment waits for the slicing (joined by the test)
            t = threading.Thread(target=setattr, args=(sd, "quant_gran", value))
            t.start()
            t.join(0.05)
            waiting.append((t, t.is_alive(), value))
        else:
            t = threading.Thread(target=setattr, args=(sd, "quant_gran", value))
            t.start()
            t.join()
        return real(*args, **kw)

    monkeypatch.setattr(sliced_module._core, "slice_quantize", slice_quantize)
    sd = weights()
    return sd, calls, waiting


def test_a_geometry_assigned_at_every_slicing_is_sliced_with_once_holding_the_lock(monkeypatch):
    sd, calls, waiting = _assign_at_every_slicing(monkeypatch)
    eng = engine()
    sd.slice_data_imp(eng, W)
    assert [owned for owned, _ in calls] == [False, False, False, True]  # _UNLOCKED_SLICINGS, then one locked
    (t, blocked, value), = waiting
    t.join()  # the assignment tried while the lock was held waited for it, and acts after the call
    monkeypatch.undo()
    assert blocked
    # each slicing with the geometry assigned before it (the last one: (32, 64)), then (64, 16) assigned: dropped
    assert [gran for _, gran in calls] == [(32, 32), (32, 64), (64, 16), (32, 64)]
    assert sd.quant_gran == value == (64, 16) and sd._codes is None
    sd.quant_gran = (32, 64)
    sliced(sd, eng, W)
    assert_same_slicing(sd, sliced(weights(quant_gran=(32, 64)), eng, W))


def test_a_geometry_assigned_by_the_slicing_thread_while_it_holds_the_lock_is_a_runtime_error(monkeypatch):
    sd, calls, _ = _assign_at_every_slicing(monkeypatch, same_thread=True)
    with pytest.raises(RuntimeError, match="changed while it sliced"):
        sd.slice_data_imp(engine(), W)
    assert len(calls) == 4 and calls[-1][0] and sd._codes is None
