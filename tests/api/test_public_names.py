"""One public name per operation (issue 10): the package's name list, MemIntelli's names kept as
documented aliases, and the package-level names of device-level functions as deprecated aliases."""
import importlib

import numpy as np
import pytest

import pyfastpim
from helpers import NOISE_OFF

PUBLIC = ["ABSE", "Array", "AttentionContext", "DEFAULT_SEED", "DPETensor", "OpenCLDevice", "RE", "SNR",
          "SlicedData", "asarray", "cpu_isa", "devices", "dpe_matmul", "get_num_threads", "memory",
          "noise_stream", "program_weights", "resolve_device", "resolve_engine_device", "seed_worker",
          "set_isa_limit", "set_noise_stream", "set_num_threads", "slice_params", "slice_quantize", "threads"]



def test_the_public_name_list():
    assert sorted(pyfastpim.__all__) == sorted(PUBLIC)
    for name in pyfastpim.__all__:
        assert getattr(pyfastpim, name) is not None
    # the product has one name in the package namespace: dpe_matmul
    for other in ("dpe_mvm", "MapReduceDot", "forward_linear", "cl_dpe_mvm", "cl_dpe_conv2d",
                  "cl_attention_update", "cl_attention_apply"):
        assert other not in pyfastpim.__all__


@pytest.mark.parametrize("name", ["cl_dpe_mvm", "cl_dpe_conv2d"])
def test_device_level_names_are_deprecated_aliases(name):
    devices = importlib.import_module("pyfastpim.devices")
    with pytest.warns(DeprecationWarning, match="pyfastpim.devices.%s" % name):
        alias = getattr(pyfastpim, name)
    assert alias is getattr(devices, name)


def test_devices_is_the_module_and_lists_devices():
    # pyfastpim.devices() lists devices, and pyfastpim.devices.<name> is the module's function
    # (binding the function to the package name would hide the submodule)
    module = importlib.import_module("pyfastpim.devices")
    assert pyfastpim.devices is module
    import pyfastpim.devices as imported
    assert imported is module
    assert pyfastpim.devices() == module.devices()
    assert pyfastpim.devices()[0]["device"] == "cpu"
    assert pyfastpim.devices.cl_dpe_mvm is module.cl_dpe_mvm
    assert pyfastpim.devices.resolve_device is pyfastpim.resolve_device


def test_attention_device_functions_live_in_devices_only():
    devices = importlib.import_module("pyfastpim.devices")
    for name in ("cl_attention_update", "cl_attention_apply"):
        assert callable(getattr(devices, name))
        with pytest.raises(AttributeError):
            getattr(pyfastpim, name)


def test_memintelli_names_are_the_same_product():
    # engine(x, w) and engine.MapReduceDot(x, w) (MemIntelli's names) are one method;
    # dpe_matmul is the same product from raw arrays in one call
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    eng = pyfastpim.DPETensor(**NOISE_OFF)
    ws = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    xs = pyfastpim.SlicedData((1, 1, 2, 2), paral_size=(1, 32), quant_gran=(1, 32))
    ws.slice_data_imp(eng, w)
    xs.slice_data_imp(eng, x)
    a = np.asarray(eng(xs, ws))
    b = np.asarray(eng.MapReduceDot(xs, ws))
    c = np.asarray(pyfastpim.dpe_matmul(x, w, eng))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert callable(pyfastpim.DPETensor.forward_linear)  # the engine interface of pyfastpim.nn layers


def test_memintelli_namespace_keeps_its_names():
    pytest.importorskip("torch")
    from pyfastpim.memintelli.NN_layers import functions
    from pyfastpim.memintelli.pimpy.memmat_tensor import DPETensor
    assert issubclass(DPETensor, pyfastpim.DPETensor) and callable(DPETensor.MapReduceDot)
    assert "MapReduceDot" in functions.__all__
