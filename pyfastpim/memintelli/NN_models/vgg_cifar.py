"""VGG with batch norm for 32x32 CIFAR images (MemIntelli's ``VGG_CIFAR`` / ``vgg_cifar_zoo``).

The module layout (``features`` / ``classifier``) is that of the pretrained CIFAR VGG checkpoints
MemIntelli loads (chenyaofo/pytorch-cifar-models), so their state dicts load unchanged.
"""
import torch.nn as nn

from ._common import MemModel, build_mem_args, conv, default_device, linear, load_into, load_url_state_dict

__all__ = ["VGG_CIFAR", "vgg_cifar_zoo", "cifar_pretrained_urls", "cfgs"]

_BASE = "https://github.com/chenyaofo/pytorch-cifar-models/releases/download/vgg/"
cifar_pretrained_urls = {
    10: {"vgg11_bn": _BASE + "cifar10_vgg11_bn-eaeebf42.pt", "vgg13_bn": _BASE + "cifar10_vgg13_bn-c01e4a43.pt",
         "vgg16_bn": _BASE + "cifar10_vgg16_bn-6ee7ea24.pt", "vgg19_bn": _BASE + "cifar10_vgg19_bn-57191229.pt"},
    100: {"vgg11_bn": _BASE + "cifar100_vgg11_bn-57d0759e.pt", "vgg13_bn": _BASE + "cifar100_vgg13_bn-5ebe5778.pt",
          "vgg16_bn": _BASE + "cifar100_vgg16_bn-7d8c4031.pt", "vgg19_bn": _BASE + "cifar100_vgg19_bn-b98f7bd7.pt"},
}


def _stages(convs_per_stage):
    widths = (64, 128, 256, 512, 512)
    out = []
    for n, w in zip(convs_per_stage, widths):
        out += [w] * n + ["M"]
    return out


cfgs = {"vgg11_bn": _stages((1, 1, 2, 2, 2)), "vgg13_bn": _stages((2, 2, 2, 2, 2)),
        "vgg16_bn": _stages((2, 2, 3, 3, 3)), "vgg19_bn": _stages((2, 2, 4, 4, 4))}


class VGG_CIFAR(MemModel):
    """``VGG_CIFAR(cfg='vgg16_bn', num_classes=10, mem_enabled=True, mem_args=None)``: 3x3 convolutions
    (crossbar layers when ``mem_enabled``) with batch norm and ReLU, 2x2 max pools, and a
    512-512-512-num_classes classifier with dropout."""

    def __init__(self, cfg='vgg16_bn', num_classes=10, mem_enabled=True, mem_args=None):
        super().__init__()
        if cfg not in cfgs:
            raise ValueError("Invalid model name: %r (available: %s)" % (cfg, ", ".join(cfgs)))
        self.mem_enabled = mem_enabled
        self.mem_args = dict(mem_args or {}) if mem_enabled else {}
        # built by the methods MemIntelli's VGG_CIFAR builds them with (a subclass may override them)
        self.features = self._make_layers(cfgs[cfg])
        self.classifier = self._make_classifier(num_classes)

    def _make_layers(self, cfg):
        """The feature extractor for ``cfg`` (widths and 'M' for a pool, as the lists in ``cfgs``)."""
        layers, c_in = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [conv(self.mem_args, self.mem_enabled, c_in, v, 3, padding=1), nn.BatchNorm2d(v),
                           nn.ReLU()]
                c_in = v
        return nn.Sequential(*layers)

    def _make_classifier(self, num_classes):
        """The 512-512-512-num_classes head with dropout."""
        a, m = self.mem_args, self.mem_enabled
        return nn.Sequential(linear(a, m, 512, 512), nn.ReLU(), nn.Dropout(),
                             linear(a, m, 512, 512), nn.ReLU(), nn.Dropout(),
                             linear(a, m, 512, num_classes))

    def forward(self, x):
        x = self.features(x)
        return self.classifier(x.reshape(x.shape[0], -1))


def vgg_cifar_zoo(model_name='vgg16_bn', num_classes=10, pretrained=False, mem_enabled=False, engine=None,
                  input_slice=(1, 1, 2, 4), weight_slice=(1, 1, 2, 4), device=None, bw_e=None,
                  input_paral_size=(1, 32), weight_paral_size=(32, 32), input_quant_gran=(1, 64),
                  weight_quant_gran=(64, 64)):
    """A :class:`VGG_CIFAR` ('vgg11_bn', 'vgg13_bn', 'vgg16_bn', 'vgg19_bn'); ``pretrained`` loads the
    CIFAR-10/100 weights (``num_classes`` 10 or 100) through torch.hub's loader."""
    mem_args = build_mem_args(mem_enabled, engine=engine, input_slice=input_slice, weight_slice=weight_slice,
                              device=default_device() if device is None else device, bw_e=bw_e,
                              input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                              input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)
    model = VGG_CIFAR(cfg=model_name, num_classes=num_classes, mem_enabled=mem_enabled, mem_args=mem_args)
    if pretrained:
        if num_classes not in cifar_pretrained_urls or model_name not in cifar_pretrained_urls[num_classes]:
            raise ValueError("no pretrained weights for %s with %d classes" % (model_name, num_classes))
        load_into(model, load_url_state_dict(cifar_pretrained_urls[num_classes][model_name]))
    return model

# The layers MemIntelli's module imports for its own use (scripts import them from here); not in __all__.
from ..NN_layers import Conv2dMem, LinearMem  # noqa: E402
_REEXPORTS = (Conv2dMem, LinearMem)  # referenced: pyflakes sees them used
