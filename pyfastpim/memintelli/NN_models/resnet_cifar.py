"""ResNets for 32x32 CIFAR images (MemIntelli's ``ResNet_CIFAR`` / ``ResNet_CIFAR_zoo``).

The stem is one 3x3 stride-1 convolution without padding and no max pool (the layout of
MemIntelli's pretrained CIFAR ResNet-18 checkpoints, which load unchanged). As in MemIntelli, the
Kaiming-normal initialisation reaches the digital convolutions only: with ``mem_enabled`` the
crossbar convolutions keep Conv2dMem's default (Kaiming-uniform, a=sqrt(5)), unlike ``ResNet``'s.
"""
from ._common import build_mem_args, default_device, load_into, load_url_state_dict
from .ResNet import BasicBlock, Bottleneck, _ResNetBase, resnet_layers

__all__ = ["BasicBlock", "Bottleneck", "ResNet_CIFAR", "ResNet_CIFAR_zoo", "resnet_pretrained_urls"]

_REL = "https://github.com/HUST-ISMD-Odyssey/MemIntelli/releases/download/pretrained_model/"
resnet_pretrained_urls = {10: {'resnet18': _REL + 'resnet18-cifar10_9498.bin'},
                          100: {'resnet18': _REL + 'resnet18-cifar100_7926.bin'}}


class ResNet_CIFAR(_ResNetBase):
    """``ResNet_CIFAR(block, layers, num_classes=100, mem_enabled=False, mem_args=None)``."""

    def __init__(self, block, layers, num_classes=100, mem_enabled=False, mem_args=None):
        super().__init__()
        self._build(block, layers, num_classes, mem_enabled, mem_args, (3, 1, 0), init_mem_convs=False)


def ResNet_CIFAR_zoo(model_name='resnet18', num_classes=100, pretrained=False, mem_enabled=False, engine=None,
                     input_slice=(1, 1, 2, 4), weight_slice=(1, 1, 2, 4), device=None, bw_e=None,
                     input_paral_size=(1, 32), weight_paral_size=(32, 32), input_quant_gran=(1, 64),
                     weight_quant_gran=(64, 64)):
    """A :class:`ResNet_CIFAR` ('resnet18' ... 'resnet152'); ``pretrained``: MemIntelli's ResNet-18
    CIFAR-10/100 weights through torch.hub's loader."""
    if model_name not in resnet_layers:
        raise ValueError(f"Invalid model name: {model_name}")
    mem_args = build_mem_args(mem_enabled, engine=engine, input_slice=input_slice, weight_slice=weight_slice,
                              device=default_device() if device is None else device, bw_e=bw_e,
                              input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                              input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)
    block, layers = resnet_layers[model_name]
    model = ResNet_CIFAR(block=block, layers=layers, num_classes=num_classes, mem_enabled=mem_enabled,
                         mem_args=mem_args)
    if pretrained:
        url = resnet_pretrained_urls.get(num_classes, {}).get(model_name)
        if url is None:
            raise ValueError("no pretrained weights for %s with %d classes" % (model_name, num_classes))
        load_into(model, load_url_state_dict(url))
    return model

# The layers MemIntelli's module imports for its own use (scripts import them from here); not in __all__.
from ..NN_layers import Conv2dMem, LinearMem  # noqa: E402
_REEXPORTS = (Conv2dMem, LinearMem)  # referenced: pyflakes sees them used
