"""fork and spawn (issues 13 and 18): children made after the parent ran parallel (OpenMP) kernels
and OpenCL run the CPU kernels (forked children on one thread: GNU libgomp's pool does not survive
fork) and never hang; a forked child refuses OpenCL with a RuntimeError naming the cause.

Every child runs under a timeout: a hang fails the test instead of blocking the suite."""
import multiprocessing as mp
import os

import numpy as np
import pytest

import pyfastpim
from pyfastpim import DPETensor, dpe_matmul
from helpers import CHILD_TIMEOUT, needs_cl, run_script

NPLAT = pyfastpim._core.cl_devices()[0]
TIMEOUT = CHILD_TIMEOUT


def _inputs():
    rng = np.random.default_rng(5)
    return (rng.standard_normal((2, 16, 64)).astype(np.float32),
            rng.standard_normal((64, 24)).astype(np.float32))


def _child_product(q):
    try:
        x, w = _inputs()
        out = dpe_matmul(x, w, DPETensor(seed=3))
        sl = pyfastpim.slice_quantize(x[0], (1, 1, 2, 4), (1, 32))
        q.put(("ok", out, pyfastpim._core.forked_child(), pyfastpim.get_num_threads(), sl is not None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put(("error", repr(exc), None, None, None))


def _run_child(method, target=_child_product, *args):
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(q,) + args)
    p.start()
    try:
        res = q.get(timeout=TIMEOUT)
    except Exception:  # queue.Empty: the child hangs
        p.kill()
        p.join()
        pytest.fail("the %s child did not answer within %d s (hang)" % (method, TIMEOUT))
    p.join(TIMEOUT)
    assert p.exitcode == 0
    assert res[0] == "ok", res[1]
    return res


def _fork_while_held(hold, held, release, child, *args):
    """_run_child("fork", child, *args) while a parent thread running hold() holds a lock (held set),
    until release is set; fails the test on a hang."""
    import threading
    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(TIMEOUT)
        return _run_child("fork", child, *args)
    finally:
        release.set()
        t.join()


def _parent_runs_parallel_kernels():
    x, w = _inputs()
    with pyfastpim.threads(2):
        expected = dpe_matmul(x, w, DPETensor(seed=3))  # the OpenMP pool now has workers
        pyfastpim.slice_quantize(x[0], (1, 1, 2, 4), (1, 32))
    return expected


def test_fork_child_after_parallel_kernels_runs_single_threaded():
    expected = _parent_runs_parallel_kernels()
    status, out, forked, nthreads, _ = _run_child("fork")
    np.testing.assert_array_equal(out, expected)  # results never depend on the thread count
    assert forked is True and nthreads == 1
    assert pyfastpim._core.forked_child() is False  # the parent keeps its threads


@pytest.mark.skipif("site-packages" in os.path.abspath(pyfastpim.__file__).split(os.sep),
                    reason="against an installed package (make test-venv) the spawn child hangs re-importing this "
                           "module outside the checkout; make test and make sanitize run it")
def test_spawn_child_after_parallel_kernels_keeps_its_threads():
    expected = _parent_runs_parallel_kernels()
    status, out, forked, nthreads, _ = _run_child("spawn")
    np.testing.assert_array_equal(out, expected)
    assert forked is False  # a fresh process: nothing inherited


@pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform")
def test_fork_child_refuses_the_parents_opencl_context_with_a_clear_error():
    x, w = _inputs()
    eng = DPETensor(device="opencl", seed=3)
    dpe_matmul(x, w, eng)  # the parent has used this device
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    info = pyfastpim.resolve_device("opencl").info
    name = "opencl:%d:%d" % (info["platform"], info["device"])

    def child(q):
        msgs = []
        for fn in (lambda: dpe_matmul(x, w, eng),                          # the parent's context
                   lambda: pyfastpim._core.OpenCLDevice(0, 0),             # a new one
                   lambda: DPETensor(device=name)):                        # a new one, at construction
            try:
                fn()
                msgs.append("no error")
            except RuntimeError as exc:
                msgs.append(str(exc))
        # the CPU still works in the same child
        msgs.append(float(np.abs(dpe_matmul(x, w, DPETensor(seed=3))).sum()))
        q.put(msgs)

    p = ctx.Process(target=child, args=(q,))
    p.start()
    try:
        msgs = q.get(timeout=TIMEOUT)
    except Exception:
        p.kill()
        p.join()
        pytest.fail("the forked child hung on OpenCL")
    p.join(TIMEOUT)
    assert p.exitcode == 0
    for m in msgs[:3]:
        assert "forked" in m and "OpenCL" in m and "spawn" in m, m
    # opening a device names it ("opening the OpenCL device" named none)
    assert msgs[1].startswith("opening the OpenCL device 'opencl:0:0': "), msgs[1]
    assert msgs[2].startswith("opening the OpenCL device '%s': " % name), msgs[2]
    assert msgs[3] > 0


def _child_handle_settings(q, dev):
    msgs = []
    for name, fn in (("scratch_bytes", lambda: dev.scratch_bytes),
                     ("paired_calls", lambda: dev.paired_calls),
                     ("resident_weights", lambda: dev.resident_weights),
                     ("resident_budget", lambda: setattr(dev, "resident_budget", 1 << 20)),
                     ("mvm_kernel", lambda: setattr(dev, "mvm_kernel", "untiled")),
                     ("pair_slices", lambda: setattr(dev, "pair_slices", True))):
        try:
            fn()
            msgs.append((name, "no error"))
        except RuntimeError as exc:
            msgs.append((name, str(exc)))
    q.put(("ok", msgs))


@pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform")
def test_fork_while_a_thread_holds_an_opencl_device_refuses_the_handle_instead_of_hanging():
    """A thread of the parent was inside a call on an OpenCL handle (its lock held) at fork time: in the
    child, where that thread does not exist, the handle's settings and counters (scratch_bytes,
    resident_budget = ..., mvm_kernel = ...) waited for the lock forever; they raise the fork
    RuntimeError as every OpenCL operation there does."""
    import threading
    from helpers import engine_args, engine_case
    dev = pyfastpim._core.OpenCLDevice(*[pyfastpim.resolve_device("opencl").info[k] for k in ("platform", "device")])
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(7))
    args = engine_args(xs, xsc, wl, wsc)
    held, release = threading.Event(), threading.Event()

    class Key:  # its __eq__ runs under the device lock while the resident-weights cache is searched
        def __hash__(self):
            return 1

        def __eq__(self, other):
            if threading.current_thread() is not threading.main_thread():
                held.set()
                release.wait(TIMEOUT)
            return isinstance(other, Key)

    pyfastpim.devices.cl_dpe_mvm(dev, *args, weights_key=Key())
    res = _fork_while_held(lambda: pyfastpim.devices.cl_dpe_mvm(dev, *args, weights_key=Key()), held, release,
                           _child_handle_settings, dev)
    for name, msg in res[1]:
        assert "forked" in msg and "OpenCL" in msg, (name, msg)


DATALOADER = """
import numpy as np, torch, pyfastpim
from pyfastpim.nn import LinearMem
torch.manual_seed(0)
eng = pyfastpim.DPETensor(read_variation=0.0, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0,
                          device=%(device)r)
layer = LinearMem(eng, 32, 8, (1, 1, 2), (1, 1, 2), weight_paral_size=(32, 8), weight_quant_gran=(32, 8))
xs = torch.randn(6, 4, 32)

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return len(xs)
    def __getitem__(self, i):
        with torch.no_grad():
            return layer(xs[i])

with torch.no_grad(), pyfastpim.threads(2):
    serial = torch.stack([layer(x) for x in xs])  # the parent runs parallel kernels (and OpenCL) first
loader = torch.utils.data.DataLoader(Data(), batch_size=2, num_workers=2, multiprocessing_context="fork",
                                     timeout=%(timeout)d)
try:
    got = torch.cat(list(loader))
except RuntimeError as exc:
    print("ERROR", str(exc).replace("\\n", " "))
else:
    assert torch.equal(got, serial), (got - serial).abs().max()
    print("EQUAL")
"""


def test_dataloader_fork_workers_run_cpu_layers():
    pytest.importorskip("torch")
    out = run_script(DATALOADER % {"device": "cpu", "timeout": TIMEOUT - 60}, "the DataLoader script")
    assert "EQUAL" in out, out


@pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform")
def test_dataloader_fork_workers_with_an_opencl_layer_raise_instead_of_hanging():
    pytest.importorskip("torch")
    out = run_script(DATALOADER % {"device": "opencl", "timeout": TIMEOUT - 60}, "the DataLoader script")
    assert "ERROR" in out and "forked" in out and "spawn" in out, out


def test_fork_while_other_threads_hold_pyfastpims_locks():
    """A thread of the parent held pyfastpim's state lock (a product, a re-programming) or an
    AttentionContext's guard (an update) at fork time: in the child, where that thread does not
    exist, they are free (the child hung in slice_data_imp before)."""
    import threading
    from pyfastpim import sliced, memory
    ctx = pyfastpim.AttentionContext(update_rate=0.5)
    x, w = _inputs()
    ctx.update_outgoing(x[0], x[0])
    held, release = threading.Event(), threading.Event()

    def hold():
        with sliced._state_lock, memory._py_lock:
            ctx._guard.acquire("test")
            held.set()
            release.wait(TIMEOUT)
            ctx._guard.release()
    res = _fork_while_held(hold, held, release, _child_with_context, ctx)
    np.testing.assert_array_equal(res[1], dpe_matmul(x, w, DPETensor(seed=3)))


def _child_with_context(q, ctx):
    try:
        x, w = _inputs()
        out = dpe_matmul(x, w, DPETensor(seed=3))
        ctx.update_outgoing(x[0], x[0])
        pyfastpim.memory.stats()
        q.put(("ok", out))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put(("error", repr(exc)))


def _quiet_engine(device):
    return DPETensor(read_variation=0.0, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0,
                     device=device, seed=3)


def _handle_holders():
    """Every kind of object that holds an OpenCL handle, made and used in this (the parent) process:
    {name: call using the handle}. The calls are noise-free, so each gives the same result every time."""
    x, w = _inputs()
    eng = _quiet_engine("opencl")
    xs = pyfastpim.SlicedData((1, 1, 2, 4), paral_size=(1, 32), quant_gran=(1, 32), device="opencl")
    ws = pyfastpim.SlicedData((1, 1, 2, 4), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8), device="opencl")
    xs.slice_data_imp(eng, x[0])
    ws.slice_data_imp(eng, w)
    ctx = pyfastpim.AttentionContext(update_rate=0.5, strength=0.5, device="opencl")
    ctx.update_outgoing(x[0], x[0])
    ctx.incoming = ctx.outgoing.copy()
    handle, mvm_args = pyfastpim.resolve_device("opencl"), _mvm_args()
    calls = {"resolve_device handle": lambda: pyfastpim.devices.cl_dpe_mvm(handle, *mvm_args),
             "handle.zero_copy": lambda: handle.zero_copy,
             "DPETensor": lambda: dpe_matmul(x, w, eng),
             "SlicedData (slicing)": lambda: xs.slice_data_imp(eng, x[1]),
             "SlicedData (product)": lambda: eng.MapReduceDot(xs, ws),
             "AttentionContext.update_outgoing": lambda: ctx.update_outgoing(x[0], x[0]),
             "AttentionContext.apply": lambda: ctx.apply(x[0])}
    try:
        import torch
    except ImportError:
        return calls
    from pyfastpim.nn import Conv2dMem, LinearMem
    torch.manual_seed(0)
    lin = LinearMem(eng, 64, 24, (1, 1, 2), (1, 1, 2), weight_paral_size=(32, 8), weight_quant_gran=(32, 8))
    conv = Conv2dMem(eng, 3, 4, 3, (1, 1, 2), (1, 1, 2), input_paral_size=(1, 27), input_quant_gran=(1, 27),
                     weight_paral_size=(27, 4), weight_quant_gran=(27, 4))
    xt, img = torch.from_numpy(x[0]), torch.randn(1, 3, 8, 8)
    calls["LinearMem"] = lambda: lin(xt).detach()
    calls["Conv2dMem"] = lambda: conv(img).detach()
    return calls


def _mvm_args():
    from helpers import engine_args, engine_case
    return engine_args(*engine_case(np.random.default_rng(7)))


def _results(calls):
    out = {}
    for name, call in calls.items():
        r = call()
        out[name] = [np.asarray(a) for a in (r if isinstance(r, tuple) else (r,)) if a is not None]
    return out


def _child_uses_parents_handles(q, calls):
    msgs = {}
    for name, call in calls.items():
        try:
            call()
            msgs[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            msgs[name] = "%s: %s" % (type(exc).__name__, exc)
    q.put(("ok", msgs))


@pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform")
def test_fork_child_refuses_every_parents_opencl_handle_naming_the_device():
    """Each object holding an OpenCL handle opened by the parent (the handle itself, DPETensor, SlicedData
    sliced on it, AttentionContext, the nn layers), used in a forked child, raises the RuntimeError of the
    construction-time refusal, naming the device ('opencl:P:D' and its name) and saying that OpenCL handles
    do not survive fork and what to do; they failed with 'slice_quantize on OpenCL: ...' (or 'OpenCL device
    handle: ...') naming no device. The parent's handle keeps working, with the same results."""
    calls = _handle_holders()
    before = _results(calls)
    info = pyfastpim.resolve_device("opencl").info
    dev = "'opencl:%d:%d' (%s)" % (info["platform"], info["device"], info["name"])
    status, msgs = _run_child("fork", _child_uses_parents_handles, calls)
    for name, msg in msgs.items():
        assert msg.startswith("RuntimeError: "), (name, msg)
        assert dev in msg and "OpenCL device handles do not survive fork" in msg, (name, msg)
        assert "in the worker itself" in msg and "'spawn'" in msg, (name, msg)
    after = _results(calls)
    for name in calls:
        assert len(after[name]) == len(before[name]), name
        for a, b in zip(after[name], before[name]):
            np.testing.assert_array_equal(a, b, err_msg=name)


def _child_resolves_devices(q, parent_listing):
    try:
        _resolve_in_child(q, parent_listing)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put(("error", repr(exc)))


def _resolve_in_child(q, parent_listing):
    before = pyfastpim._core._cl_platform_queries()
    msgs, listed = [], []
    real = pyfastpim._core.cl_devices
    pyfastpim._core.cl_devices = lambda: listed.append(1) or real()  # the refusals list nothing
    try:
        for make in (lambda: pyfastpim.resolve_device("opencl"), lambda: pyfastpim.resolve_device("opencl:0:0"),
                     lambda: pyfastpim.resolve_engine_device("opencl"), lambda: _quiet_engine("opencl"),
                     lambda: pyfastpim.AttentionContext(device="opencl"), lambda: pyfastpim._core.OpenCLDevice(0, 0)):
            try:
                make()
                msgs.append("no error")
            except RuntimeError as exc:
                msgs.append(str(exc))
    finally:
        pyfastpim._core.cl_devices = real
    listing = pyfastpim.devices()  # the parent's listing, not the driver's
    cuda = _quiet_engine("cuda").device  # 'cuda' picks from that listing too
    q.put(("ok", msgs, len(listed), listing == parent_listing, cuda,
           pyfastpim._core._cl_platform_queries() - before))


@pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform")
def test_fork_child_refuses_opencl_before_any_opencl_call():
    """resolve_device (and every constructor taking device='opencl') in a forked child listed the OpenCL
    platforms and devices (clGetPlatformIDs) before refusing: some drivers hang there. Now the refusal
    comes first and the child makes no OpenCL call at all (pyfastpim.devices() and device='cuda' answer
    from the parent's listing): its count of clGetPlatformIDs calls stays unchanged."""
    _quiet_engine("opencl")
    parent_listing = pyfastpim.devices()
    parent_cuda = _quiet_engine("cuda").device
    status, msgs, listed, same_listing, cuda, queries = _run_child("fork", _child_resolves_devices, parent_listing)
    assert listed == 0 and queries == 0
    for m in msgs:
        assert "forked" in m and "do not survive fork" in m and "'spawn'" in m, m
    assert msgs[0].startswith("opening the OpenCL device 'opencl': ")
    assert msgs[1].startswith("opening the OpenCL device 'opencl:0:0': ")
    assert same_listing and cuda == parent_cuda
    assert pyfastpim._core._cl_platform_queries() > 0  # the parent's own listings count


@needs_cl
def test_fork_after_a_failed_open_is_refused_in_the_child_without_an_opencl_call():
    """The mark that this process started OpenCL was set only after a listing or an open succeeded, but a
    failed open (a device number beyond the platform's) has already started the runtime (PoCL): a child forked
    after it was not refused, opened a new context and hung at its first kernel (found by review). The mark is
    now set at the first call into the runtime, whatever its result."""
    out = run_script("""
        import os, pyfastpim
        from pyfastpim import _core
        try:
            pyfastpim.devices.OpenCLDevice(0, 999)
        except (RuntimeError, ValueError):
            pass
        else:
            raise SystemExit("device 999 opened")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            before = _core._cl_platform_queries()
            try:
                pyfastpim.devices.OpenCLDevice(0, 0).build()
                msg = "opened"
            except RuntimeError as exc:
                msg = str(exc)
            os.write(w, ("%d|%s" % (_core._cl_platform_queries() - before, msg)).encode())
            os._exit(0)
        os.close(w)
        got = os.read(r, 4096).decode()
        os.waitpid(pid, 0)
        print(got)
    """, "a child forked after a failed OpenCL open")
    queries, msg = out.strip().split("|", 1)
    assert queries == "0", out
    assert "forked" in msg and "do not survive fork" in msg, msg


# Every method and attribute of an OpenCL handle, with the arguments a child uses them with. A name
# missing here fails the test below, so that a new one is checked in a forked child too.
_HANDLE_CALLS = {
    "build": (), "_kernel_table": (), "_check_kernel_args": ("pf_dpe_mvm", 1), "mvm_uses_tiled": (32,),
    "release": (), "forget_weights": ("forked-key",), "_weights_died": ("forked-key",),
}
# attributes a forked child answers from the handle's host-side copy (no OpenCL call, no lock)
_HOST_SIDE = {"info", "mvm_kernel", "pair_slices", "piece_time", "resident_bytes", "resident_budget"}


def _child_uses_every_handle_member(q, handle, values, holder, dying):
    import gc
    import sys
    unraisable = []
    sys.unraisablehook = lambda u: unraisable.append("%r in %r" % (u.exc_value, u.object))
    out = {}
    for name in sorted(n for n in dir(type(handle)) if not n.startswith("__")):
        attr = getattr(type(handle), name)
        ops = [("call", lambda: getattr(handle, name)(*_HANDLE_CALLS[name]))] if callable(attr) else \
            [("get", lambda: getattr(handle, name))] + \
            ([("set", lambda: setattr(handle, name, values[name]))] if name in values else [])
        for op, fn in ops:
            try:
                fn()
                out[name, op] = "ok"
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                out[name, op] = "%s: %s" % (type(exc).__name__, exc)
    out["repr", "get"] = "ok" if repr(handle).startswith("<pyfastpim OpenCL device") else repr(handle)
    try:
        handle.forget_weights([])
        bad_key = "no error"
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        bad_key = type(exc).__name__
    before = handle.resident_bytes
    dying.clear()  # the SlicedData programmed on the parent's device dies here: its finalizer runs
    gc.collect()
    holder.clear()  # a handle of the parent's, freed here: no OpenCL call (no hang)
    gc.collect()
    q.put(("ok", out, unraisable, before, handle.resident_bytes, bad_key))


@pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform")
def test_fork_child_refuses_forget_weights_and_answers_or_refuses_every_handle_member():
    """In a child forked after the parent programmed weights on an OpenCL handle, handle.forget_weights(key)
    changed the child's copy of the resident-weights bookkeeping (which the parent does not share) instead of
    refusing as every other use of the handle does; it now raises the fork RuntimeError naming the device.
    A SlicedData programmed on that handle dying in the child (its finalizer) raises nothing (no 'Exception
    ignored') and changes nothing. Every other method and attribute of the handle either answers from its
    host-side state or raises that RuntimeError; freeing a parent's handle in the child does not hang; the
    parent's handle and its resident weights are untouched."""
    eng = _quiet_engine("opencl")
    handle = eng._cl
    x, w = _inputs()
    dying = [pyfastpim.SlicedData((1, 1, 2, 4), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8))]
    dying[0].slice_data_imp(eng, w)
    expected = np.asarray(eng.forward_linear(x[0], dying[0], (1, 1, 2, 4))[0])
    key = (id(dying[0]), dying[0]._version)
    assert key in handle.resident_weights
    info = handle.info
    holder = [pyfastpim._core.OpenCLDevice(info["platform"], info["device"])]
    holder[0].build()
    values = {name: getattr(handle, name) for name in ("mvm_kernel", "pair_slices", "piece_time", "resident_budget")}
    res = _run_child("fork", _child_uses_every_handle_member, handle, values, holder, dying)
    out, unraisable, before, after, bad_key = res[1:]
    dev = "'opencl:%d:%d' (%s)" % (info["platform"], info["device"], info["name"])
    unknown = {name for name, op in out if op == "call" and name not in _HANDLE_CALLS}
    assert not unknown, "add these handle methods to _HANDLE_CALLS: %s" % sorted(unknown)
    for (name, op), msg in out.items():
        if name in _HOST_SIDE and op == "get" or name in ("repr", "_weights_died"):
            assert msg == "ok", (name, op, msg)
        else:
            assert msg.startswith("RuntimeError: ") and dev in msg, (name, op, msg)
            assert "OpenCL device handles do not survive fork" in msg, (name, op, msg)
    assert out["forget_weights", "call"].startswith("RuntimeError: forget_weights(): "), out["forget_weights", "call"]
    assert bad_key == "TypeError"  # an unhashable key is a bad argument first, as a setter's bad value is
    assert unraisable == [], unraisable
    assert after == before > 0  # the finalizer changed nothing in the child
    # the parent's handle keeps its weights and gives the same product
    assert key in handle.resident_weights
    np.testing.assert_array_equal(np.asarray(eng.forward_linear(x[0], dying[0], (1, 1, 2, 4))[0]), expected)


def _child_unpickles_parents_devices(q, blobs):
    import pickle
    out = {}
    for name, blob in blobs.items():
        try:
            obj = pickle.loads(blob)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out[name] = "unpickling: %s: %s" % (type(exc).__name__, exc)
            continue
        out[name] = _use_unpickled(name, obj)
    q.put(("ok", out))


def _use_unpickled(name, obj):
    x, w = _inputs()
    try:
        if name == "engine":
            dpe_matmul(x, w, obj)
        else:
            obj.update_outgoing(x[0, :, :24], x[1, :, :24])
        return "no error"
    except RuntimeError as exc:
        return "RuntimeError: %s" % exc


def _pool_task(obj):
    return _use_unpickled("engine" if isinstance(obj, DPETensor) else "context", obj)


def _parents_opencl_objects():
    import pickle
    x, w = _inputs()
    eng = DPETensor(device="opencl:0:0", seed=3)
    dpe_matmul(x, w, eng)  # the parent has used the device
    ctx = pyfastpim.AttentionContext(update_rate=0.5, device="opencl:0:0")
    info = pyfastpim.resolve_device("opencl:0:0").info
    return {"engine": eng, "context": ctx}, pickle, "'opencl:0:0' (%s)" % info["name"]


@needs_cl
def test_an_opencl_engine_or_context_unpickled_in_a_forked_child_refuses_at_first_use():
    """An engine or AttentionContext on OpenCL pickled to a child forked after the parent opened the device
    (a multiprocessing Pool task's arguments) refused already while being unpickled: the refusal is right,
    but raised there it kills a Pool worker before its task starts and the Pool waits for the task forever
    (found passing an OpenCL engine to a fork Pool). Unpickled there they now hold the parent's handle and
    refuse at their first use, naming the device, as objects inherited through fork do."""
    objects, pickle, dev = _parents_opencl_objects()
    blobs = {name: pickle.dumps(obj) for name, obj in objects.items()}
    status, out = _run_child("fork", _child_unpickles_parents_devices, blobs)
    for name, msg in out.items():
        assert msg.startswith("RuntimeError: "), (name, msg)
        assert dev in msg and "OpenCL device handles do not survive fork" in msg, (name, msg)
    # in the parent the pickles re-open the device as before
    for name, blob in blobs.items():
        assert _use_unpickled(name, pickle.loads(blob)) == "no error", name


@needs_cl
def test_a_fork_pool_task_with_an_opencl_engine_reports_the_refusal_instead_of_hanging():
    objects, _, dev = _parents_opencl_objects()
    with mp.get_context("fork").Pool(1) as pool:
        for name, obj in objects.items():
            res = pool.apply_async(_pool_task, (obj,))
            try:
                msg = res.get(timeout=TIMEOUT)
            except mp.TimeoutError:
                pytest.fail("the fork Pool never ran its task with the %s (its worker died unpickling it)" % name)
            assert msg.startswith("RuntimeError: ") and dev in msg, (name, msg)
