"""LeNet-5 for 28x28 single-channel images (MemIntelli's ``LeNet5``)."""
import torch.nn.functional as F

from ._common import MemModel, build_mem_args, conv, default_device, linear

__all__ = ["LeNet5"]


class LeNet5(MemModel):
    """``LeNet5(mem_enabled=True, engine=None, input_slice=[1, 1, 2, 4], weight_slice=[1, 1, 2, 4], device=<cuda if
    available else cpu>, bw_e=None, input_paral_size=(1, 32), weight_paral_size=(32, 32), input_quant_gran=(1, 64),
    weight_quant_gran=(64, 64))``: conv(1->6, 5) - pool - conv(6->16, 5) - pool - fc 256-120-84-10, softmax output."""

    def __init__(self, mem_enabled=True, engine=None, input_slice=(1, 1, 2, 4), weight_slice=(1, 1, 2, 4), device=None,
                 bw_e=None, input_paral_size=(1, 32), weight_paral_size=(32, 32), input_quant_gran=(1, 64),
                 weight_quant_gran=(64, 64)):
        super().__init__()
        self.mem_enabled = mem_enabled
        self.mem_args = build_mem_args(mem_enabled, engine=engine, input_slice=input_slice, weight_slice=weight_slice,
                                       device=default_device() if device is None else device, bw_e=bw_e,
                                       input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                                       input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)
        a, m = self.mem_args, mem_enabled
        self.conv1 = conv(a, m, 1, 6, 5)
        self.conv2 = conv(a, m, 6, 16, 5)
        self.fc1 = linear(a, m, 16 * 4 * 4, 120)
        self.fc2 = linear(a, m, 120, 84)
        self.fc3 = linear(a, m, 84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.reshape(-1, 16 * 4 * 4)
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        return F.softmax(self.fc3(x), dim=1)

# The layers MemIntelli's module imports for its own use (scripts import them from here); not in __all__.
from ..NN_layers import Conv2dMem, LinearMem  # noqa: E402
_REEXPORTS = (Conv2dMem, LinearMem)  # referenced: pyflakes sees them used
