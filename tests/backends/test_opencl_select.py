"""Choosing the OpenCL device: PYFASTPIM_OPENCL_DEVICE names the device that "opencl" resolves to
(how benchmarks/gpu.sh points the suite at a GPU); explicit "opencl:P:D" strings ignore it."""
import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core

NPLAT, CL_DEVICES = _core.cl_devices()
pytestmark = pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform: the OpenCL ICD loader reports none "
                                                   "(install pocl-opencl-icd to run these tests)")
VAR = "PYFASTPIM_OPENCL_DEVICE"


def key(handle):
    return handle.info["platform"], handle.info["device"]


@pytest.mark.parametrize("form", ["opencl:%d:%d", "%d:%d", " OpenCL:%d:%d "])
def test_the_variable_picks_the_device_opencl_resolves_to(monkeypatch, form):
    for d in CL_DEVICES:
        monkeypatch.setenv(VAR, form % (d["platform"], d["device"]))
        h = pyfastpim.resolve_device("opencl")
        assert key(h) == (d["platform"], d["device"])
        assert pyfastpim.resolve_device("opencl:%d:%d" % key(h)) is h  # one cached handle per device


def test_unset_or_empty_variable_keeps_the_default_rule(monkeypatch):
    gpus = [d for d in CL_DEVICES if d["type"] == "gpu"]
    first = (gpus or CL_DEVICES)[0]
    for value in (None, "", "  "):
        if value is None:
            monkeypatch.delenv(VAR, raising=False)
        else:
            monkeypatch.setenv(VAR, value)
        assert key(pyfastpim.resolve_device("opencl")) == (first["platform"], first["device"])


@pytest.mark.parametrize("value, exc, words", [
    ("gpu", ValueError, [VAR, "opencl:P:D"]),
    ("opencl:0", ValueError, [VAR, "opencl:P:D"]),
    ("1:-1", ValueError, [VAR]),
    ("0:99", RuntimeError, [VAR, "no device 99 on platform 0", "available"]),
    ("opencl:%d:0" % (NPLAT + 3), RuntimeError, [VAR, "platform %d" % (NPLAT + 3)]),
])
def test_bad_values_raise_errors_naming_the_variable(monkeypatch, value, exc, words):
    monkeypatch.setenv(VAR, value)
    with pytest.raises(exc) as e:
        pyfastpim.resolve_device("opencl")
    for w in words:
        assert w in str(e.value)
    with pytest.raises(exc, match=VAR):
        pyfastpim.DPETensor(device="opencl")


def test_explicit_devices_and_the_cpu_ignore_the_variable(monkeypatch):
    monkeypatch.setenv(VAR, "not a device")
    d = CL_DEVICES[0]
    assert key(pyfastpim.resolve_device("opencl:%d:%d" % (d["platform"], d["device"]))) == (d["platform"],
                                                                                           d["device"])
    assert pyfastpim.resolve_device("cpu") is None and pyfastpim.resolve_device(None) is None


def test_an_engine_on_the_chosen_device_computes_the_cpu_numbers(monkeypatch):
    d = CL_DEVICES[-1]
    monkeypatch.setenv(VAR, "%d:%d" % (d["platform"], d["device"]))
    eng = pyfastpim.DPETensor(device="opencl", write_variation=0.0, read_variation=0.0, vnoise=0.0,
                              rate_stuck_HGS=0.0, seed=3)
    cpu = pyfastpim.DPETensor(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0, seed=3)
    assert key(eng._cl) == (d["platform"], d["device"])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 40)).astype(np.float32)
    w = rng.standard_normal((40, 9)).astype(np.float32)
    a = np.asarray(pyfastpim.dpe_matmul(x, w, eng))
    b = np.asarray(pyfastpim.dpe_matmul(x, w, cpu))
    assert np.abs(b).max() > 0
    np.testing.assert_array_equal(a, b)
