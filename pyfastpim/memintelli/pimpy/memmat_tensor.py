"""MemIntelli's ``DPETensor`` on pyfastpim's fused kernel, with torch devices.

``DPETensor(HGS=1e-5, LGS=1e-7, g_level=16, write_variation=0.02, read_variation=0.02,
vnoise=0.05, wire_resistance=0, rdac=2**4, radc=2**8, vread=0.2, rate_stuck_HGS=0.001,
rate_stuck_LGS=0.0, device=<cuda:0 if available else cpu>, seed=None)``.

``device`` is a torch.device or a string. ``engine.device`` is that torch.device (MemIntelli
code moves tensors ``.to(engine.device)``). The products run on the CPU kernels for ``cpu``;
for ``cuda`` on the best OpenCL GPU when one is present, else on the CPU kernels. Results are
torch tensors on the device of the input's SlicedData (``x.device``; on the host when that is
CUDA and this machine has none); the host copies are counted in :mod:`pyfastpim.memory`
(``cuda_to_host`` / ``host_to_cuda``).

Attributes as MemIntelli's: ``conductance_levels`` is a float tensor on ``device``; a per-slice
``radc`` is an int64 tensor on ``device`` in MemIntelli's order, least significant slice first
(the reverse of the argument; pyfastpim.DPETensor keeps the argument's tuple). Either tensor is
made on the host when this machine cannot hold tensors on ``device`` (no CUDA).
"""
import torch

from ...dpe import DPETensor as _BaseDPETensor
from .. import _device

__all__ = ["DPETensor", "wire_resistance"]  # MemIntelli's module has no __all__: its star import gives both


def _default_device():
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def _tensor_on(values, device):
    """torch.tensor(values) on device, as MemIntelli makes its engine's tensors; on the host when
    torch cannot place tensors there (device='cuda' without CUDA: pyfastpim computes on the host)."""
    try:
        return torch.tensor(values, device=device)
    except (RuntimeError, AssertionError):  # "Torch not compiled with CUDA enabled", no driver
        return torch.tensor(values)


def wire_resistance(x, y, wire_resistance):
    """No-op returning None, as MemIntelli's (an empty function there); kept so that scripts importing
    it run. The IR drop of the wires is ``DPETensor(wire_resistance=R)`` (README, "Device physics")."""
    return None


class DPETensor(_BaseDPETensor):
    __doc__ = __doc__ + "\n" + _BaseDPETensor.__doc__

    def __init__(self, HGS=1e-5, LGS=1e-7, g_level=16, write_variation=0.02, read_variation=0.02, vnoise=0.05,
                 wire_resistance=0, rdac=2 ** 4, radc=2 ** 8, vread=0.2, rate_stuck_HGS=0.001, rate_stuck_LGS=0.0,
                 device=None, seed=None):
        super().__init__(HGS=HGS, LGS=LGS, g_level=g_level, write_variation=write_variation,
                         read_variation=read_variation, vnoise=vnoise, wire_resistance=wire_resistance, rdac=rdac,
                         radc=radc, vread=vread, rate_stuck_HGS=rate_stuck_HGS, rate_stuck_LGS=rate_stuck_LGS,
                         device=device, seed=seed)
        if self.radc_is_list:
            self.radc = _tensor_on(self.radc[::-1], self.device)

    # device, compute_device and conductance_levels follow the attributes they are made from (assigning
    # device, HGS, LGS or g_level after construction acts as giving it to the constructor)
    @property
    def device(self):
        """The torch.device given (tensors are made on it; cpu for pyfastpim's 'opencl...' strings)."""
        return self._user_device

    @device.setter
    def device(self, value):
        value = _default_device() if value is None else value
        if isinstance(value, str) and value.strip().lower().startswith("opencl"):
            compute, user = value, torch.device("cpu")  # pyfastpim's own device strings: tensors stay on the host
        else:
            user = _device.torch_device(value)
            compute = str(user)
        _BaseDPETensor.device.fset(self, compute)
        self._user_device = user

    @property
    def compute_device(self):
        """Where the products run: "cpu" (the C kernels) or "opencl"."""
        return "cpu" if self._cl is None else "opencl"

    @property
    def conductance_levels(self):
        """The g_level conductances LGS + i * Q_G, a float tensor on ``device`` (made on each access)."""
        return _tensor_on(_BaseDPETensor.conductance_levels.fget(self).tolist(), self.device)

    def __setstate__(self, state):
        if "compute_device" in state:  # pickled before device and compute_device followed the device given
            state = dict(state)
            state["_user_device"], state["_device"] = state.pop("device"), state.pop("compute_device")
        super().__setstate__(state)

    def _radc_msb_first(self):
        """radc most significant first; a tensor (MemIntelli's order: least significant first) read as its items
        (the constructor's rule then refuses 256.7 or True as given), kept while the tensor is unchanged: each
        product reads it at every programming check."""
        radc = self.radc
        if not (isinstance(radc, torch.Tensor) and radc.ndim != 0):
            return radc
        read = self.__dict__.get("_radc_read")
        if read is not None and read[0] is radc and read[1] == radc._version:
            return read[2]
        items = tuple(radc.flip(0).tolist())
        self.__dict__["_radc_read"] = (radc, radc._version, items)
        return items

    def MapReduceDot(self, x, mat, out=None):
        """x @ mat through the crossbar (SlicedData input and programmed weights); a torch tensor on x's device."""
        if hasattr(x, "shape") and hasattr(mat, "shape") and x.shape is not None and mat.shape is not None \
                and x.shape[-1] != mat.shape[-2]:
            raise ValueError('The input data mismatches the shape of weight data!')
        result = super().MapReduceDot(x, mat, out=out)
        if not isinstance(result, torch.Tensor):
            result = torch.from_numpy(result)
        device = getattr(x, "device", None)
        if _device.unavailable(device):  # device='cuda' without CUDA: on the host, as the attributes (data_formats)
            return result
        return _device.to_device(result, device)

    def __call__(self, x, mat):
        return self.MapReduceDot(x, mat)


# Names MemIntelli's scripts import from this module (it imports them for its own use); not in __all__.
from .data_formats import SlicedData  # noqa: E402
from .utils import SNR, dot_high_dim  # noqa: E402
_REEXPORTS = (SlicedData, SNR, dot_high_dim)  # referenced: pyflakes sees them used
