"""MemIntelli's model zoo on pyfastpim's crossbar layers."""
from .lenet5 import *  # noqa: F401,F403
from .vgg_cifar import *  # noqa: F401,F403
from .ResNet import *  # noqa: F401,F403
from .DeiT import *  # noqa: F401,F403
from .resnet_cifar import *  # noqa: F401,F403
from .Mobilnetv2 import *  # noqa: F401,F403

__all__ = ["LeNet5", "VGG_CIFAR", "vgg_cifar_zoo", "BasicBlock", "Bottleneck", "ResNet", "ResNet_zoo", "DeiT",
           "deit_zoo", "ResNet_CIFAR", "ResNet_CIFAR_zoo", "InvertedResidual", "MobileNetV2", "MobileNetV2_zoo"]
