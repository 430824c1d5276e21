"""ResNets on the crossbar: ImageNet (``ResNet`` / ``ResNet_zoo``) and, in resnet_cifar, CIFAR variants.

Module names follow torchvision's ResNet (``conv1``, ``bn1``, ``layer1..4``, ``downsample``,
``fc``), so torchvision's ImageNet weights load unchanged; ``pretrained=True`` uses
torchvision's own weight loading (``ResNet18_Weights.IMAGENET1K_V1.get_state_dict``).
"""
import torch
import torch.nn as nn

from ..NN_layers import Conv2dMem, LinearMem
from ._common import MemModel, build_mem_args, conv, default_device, linear, load_into

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "ResNet_zoo", "model_urls", "resnet_layers"]
_REEXPORTS = (LinearMem,)  # MemIntelli's module carries it; referenced: pyflakes sees it used

model_urls = {
    'resnet18': 'https://download.pytorch.org/models/resnet18-f37072fd.pth',
    'resnet34': 'https://download.pytorch.org/models/resnet34-b627a593.pth',
    'resnet50': 'https://download.pytorch.org/models/resnet50-0676ba61.pth',
    'resnet101': 'https://download.pytorch.org/models/resnet101-63fe2227.pth',
    'resnet152': 'https://download.pytorch.org/models/resnet152-394f9c45.pth',
}


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection."""
    expansion = 1

    def __init__(self, in_channels, out_channels, stride=1, downsample=None, mem_enabled=False, mem_args=None):
        super().__init__()
        self.mem_enabled = mem_enabled
        self.mem_args = dict(mem_args or {}) if mem_enabled else {}
        a, m = self.mem_args, mem_enabled
        self.conv1 = conv(a, m, in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv(a, m, out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (with the stride), 1x1 expand (x4), with batch norm and a residual connection."""
    expansion = 4

    def __init__(self, in_channels, out_channels, stride=1, downsample=None, mem_enabled=False, mem_args=None):
        super().__init__()
        self.mem_enabled = mem_enabled
        self.mem_args = dict(mem_args or {}) if mem_enabled else {}
        a, m = self.mem_args, mem_enabled
        self.conv1 = conv(a, m, in_channels, out_channels, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv(a, m, out_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv3 = conv(a, m, out_channels, out_channels * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


resnet_layers = {
    'resnet18': (BasicBlock, [2, 2, 2, 2]),
    'resnet34': (BasicBlock, [3, 4, 6, 3]),
    'resnet50': (Bottleneck, [3, 4, 6, 3]),
    'resnet101': (Bottleneck, [3, 4, 23, 3]),
    'resnet152': (Bottleneck, [3, 8, 36, 3]),
}


class _ResNetBase(MemModel):
    def _build(self, block, layers, num_classes, mem_enabled, mem_args, stem, init_mem_convs):
        """Builds the layers. Initialisation, as MemIntelli's: every nn.Conv2d weight Kaiming-normal
        (fan_out, ReLU gain: std sqrt(2 / fan_out)), batch norms 1 / 0; the crossbar convolutions
        (Conv2dMem) too only when ``init_mem_convs`` (the ImageNet ResNet; MemIntelli's CIFAR ResNet
        leaves them, and every fc layer, at the layer's own Kaiming-uniform default)."""
        self.mem_enabled = mem_enabled
        self.mem_args = dict(mem_args or {}) if mem_enabled else {}
        a, m = self.mem_args, mem_enabled
        self.in_channels = 64
        k, s, p = stem
        self.conv1 = conv(a, m, 3, 64, k, stride=s, padding=p, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        for i, (width, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2))):
            setattr(self, "layer%d" % (i + 1), self._make_layer(block, width, layers[i], stride))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = linear(a, m, 512 * block.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d) or (init_mem_convs and isinstance(module, Conv2dMem)):
                nn.init.kaiming_normal_(module.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def _make_layer(self, block, channels, blocks, stride=1):
        a, m = self.mem_args, self.mem_enabled
        downsample = None
        if stride != 1 or self.in_channels != channels * block.expansion:
            downsample = nn.Sequential(conv(a, m, self.in_channels, channels * block.expansion, 1, stride=stride,
                                            bias=False),
                                       nn.BatchNorm2d(channels * block.expansion))
        out = [block(self.in_channels, channels, stride=stride, downsample=downsample, mem_enabled=m, mem_args=a)]
        self.in_channels = channels * block.expansion
        out += [block(self.in_channels, channels, mem_enabled=m, mem_args=a) for _ in range(1, blocks)]
        return nn.Sequential(*out)

    def _stem(self, x):
        return self.relu(self.bn1(self.conv1(x)))

    def forward(self, x):
        x = self._stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class ResNet(_ResNetBase):
    """``ResNet(block, layers, num_classes=1000, mem_enabled=False, mem_args=None)``: ImageNet ResNet
    (7x7 stride-2 stem and 3x3 max pool), any input size (global average pooling)."""

    def __init__(self, block, layers, num_classes=1000, mem_enabled=False, mem_args=None):
        super().__init__()
        self._build(block, layers, num_classes, mem_enabled, mem_args, (7, 2, 3), init_mem_convs=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def _stem(self, x):
        return self.maxpool(super()._stem(x))


def ResNet_zoo(model_name='resnet18', num_classes=1000, pretrained=False, mem_enabled=False, engine=None,
               input_slice=(1, 1, 2, 4), weight_slice=(1, 1, 2, 4), device=None, bw_e=None,
               input_paral_size=(1, 32), weight_paral_size=(32, 32), input_quant_gran=(1, 64),
               weight_quant_gran=(64, 64)):
    """An ImageNet :class:`ResNet` ('resnet18', 'resnet34', 'resnet50', 'resnet101', 'resnet152').

    ``pretrained`` loads torchvision's IMAGENET1K_V1 weights with torchvision's loader (cached in
    ``<torch hub dir>/checkpoints``; ``num_classes`` must be 1000)."""
    if model_name not in resnet_layers:
        raise ValueError(f"Invalid model name: {model_name}")
    mem_args = build_mem_args(mem_enabled, engine=engine, input_slice=input_slice, weight_slice=weight_slice,
                              device=default_device() if device is None else device, bw_e=bw_e,
                              input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                              input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)
    block, layers = resnet_layers[model_name]
    model = ResNet(block=block, layers=layers, num_classes=num_classes, mem_enabled=mem_enabled, mem_args=mem_args)
    if pretrained:
        import torchvision.models as tvm
        weights = getattr(tvm, "ResNet%s_Weights" % model_name[len("resnet"):]).IMAGENET1K_V1
        load_into(model, weights.get_state_dict(progress=True))
    return model
