"""MemIntelli's model zoo on pyfastpim's crossbar layers."""
from .lenet5 import *  # noqa: F401,F403
from .vgg_cifar import *  # noqa: F401,F403
from .ResNet import *  # noqa: F401,F403
from .DeiT import *  # noqa: F401,F403
from .resnet_cifar import *  # noqa: F401,F403
from .Mobilnetv2 import *  # noqa: F401,F403

__all__ = ["LeNet5", "VGG_CIFAR", "vgg_cifar_zoo", "BasicBlock", "Bottleneck", "ResNet", "ResNet_zoo", "DeiT",
           "deit_zoo", "ResNet_CIFAR", "ResNet_CIFAR_zoo", "InvertedResidual", "MobileNetV2", "MobileNetV2_zoo",
           "PatchEmbed", "Block", "Mlp", "Attention", "cfgs", "cifar_pretrained_urls", "resnet_pretrained_urls",
           "model_urls", "LinearMem", "Conv2dMem"]

# MemIntelli's NN_models star-imports its modules without __all__, so the package (and ``memintelli``)
# also carries the names those modules define or import: the layers, DeiT's parts, the URL tables.
# ``model_urls`` is Mobilnetv2's there (the last module imported that defines one; ResNet and DeiT too).
from ..NN_layers import Conv2dMem, LinearMem  # noqa: E402,F401
from .DeiT import Attention, Block, Mlp, PatchEmbed  # noqa: E402,F401
from .Mobilnetv2 import model_urls  # noqa: E402,F401
from .resnet_cifar import resnet_pretrained_urls  # noqa: E402,F401
from .vgg_cifar import cfgs, cifar_pretrained_urls  # noqa: E402,F401
