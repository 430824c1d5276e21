"""MemIntelli's model zoo on pyfastpim's crossbar layers."""
from .lenet5 import LeNet5
from .vgg_cifar import VGG_CIFAR, vgg_cifar_zoo, cifar_pretrained_urls, cfgs
from .ResNet import BasicBlock, Bottleneck, ResNet, ResNet_zoo, resnet_layers
from .DeiT import DeiT, deit_zoo, PatchEmbed, Block, Mlp, Attention
from .resnet_cifar import ResNet_CIFAR, ResNet_CIFAR_zoo, resnet_pretrained_urls
from .Mobilnetv2 import InvertedResidual, MobileNetV2, MobileNetV2_zoo

__all__ = ["LeNet5", "VGG_CIFAR", "vgg_cifar_zoo", "BasicBlock", "Bottleneck", "ResNet", "ResNet_zoo", "DeiT",
           "deit_zoo", "ResNet_CIFAR", "ResNet_CIFAR_zoo", "InvertedResidual", "MobileNetV2", "MobileNetV2_zoo",
           "PatchEmbed", "Block", "Mlp", "Attention", "cfgs", "cifar_pretrained_urls", "resnet_pretrained_urls",
           "model_urls", "LinearMem", "Conv2dMem"]

# MemIntelli's NN_models star-imports its modules without __all__, so the package (and ``memintelli``)
# also carries the names those modules define or import: the layers, DeiT's parts, the URL tables.
# ``model_urls`` is Mobilnetv2's there (the last module imported that defines one; ResNet and DeiT too).
from ..NN_layers import Conv2dMem, LinearMem  # noqa: E402
from .Mobilnetv2 import model_urls  # noqa: E402
_REEXPORTS = (resnet_layers,)  # in the namespace (ResNet's __all__), not in __all__; pyflakes sees it used
