"""MobileNetV2 (MemIntelli's ``MobileNetV2`` / ``MobileNetV2_zoo``).

Pointwise (1x1) convolutions, the stem and the classifier run on the crossbar; the depthwise
3x3 convolutions stay digital (``nn.Conv2d`` with groups), as in MemIntelli. Module layout
(``features.0`` stem, ``features.i.conv`` blocks, ``conv`` last 1x1, ``classifier``) matches
MemIntelli's pretrained checkpoint.
"""
import torch
import torch.nn as nn

from ._common import MemModel, build_mem_args, conv, default_device, linear, load_into, load_url_state_dict

__all__ = ["InvertedResidual", "MobileNetV2", "MobileNetV2_zoo"]

model_urls = {'mobilenet_v2': 'https://github.com/HUST-ISMD-Odyssey/MemIntelli/releases/download/pretrained_model/'
                              'mobilenetv2_1.0-0c6065bc.pth'}


def _make_divisible(v, divisor, min_value=None):
    """Round ``v`` to a multiple of ``divisor`` (at least ``min_value``), never more than 10% below ``v``."""
    min_value = divisor if min_value is None else min_value
    out = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


class InvertedResidual(nn.Module):
    """1x1 expansion (crossbar) - 3x3 depthwise (digital) - 1x1 projection (crossbar), residual when shapes allow."""

    def __init__(self, inp, oup, stride, expand_ratio, mem_enabled=False, mem_args=None):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError("stride must be 1 or 2, got %r" % (stride,))
        self.stride = stride
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        self.mem_enabled = mem_enabled
        self.mem_args = dict(mem_args or {}) if mem_enabled else {}
        a, m = self.mem_args, mem_enabled
        layers = []
        if expand_ratio != 1:
            layers += [conv(a, m, inp, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(inplace=True),
                   conv(a, m, hidden, oup, 1, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]


class MobileNetV2(MemModel):
    """``MobileNetV2(num_classes=1000, width_mult=1.0, inverted_residual_setting=None, round_nearest=8,
    mem_enabled=False, mem_args=None)``."""

    def __init__(self, num_classes=1000, width_mult=1.0, inverted_residual_setting=None, round_nearest=8,
                 mem_enabled=False, mem_args=None):
        super().__init__()
        setting = _SETTING if inverted_residual_setting is None else inverted_residual_setting
        if len(setting) == 0 or any(len(row) != 4 for row in setting):
            raise ValueError("inverted_residual_setting should be non-empty "
                             "or a 4-element list, got {}".format(setting))
        self.mem_enabled = mem_enabled
        self.mem_args = dict(mem_args or {}) if mem_enabled else {}
        a, m = self.mem_args, mem_enabled
        c_in = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features = [nn.Sequential(conv(a, m, 3, c_in, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c_in),
                                  nn.ReLU6(inplace=True))]
        for t, c, n, s in setting:
            c_out = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(c_in, c_out, s if i == 0 else 1, expand_ratio=t, mem_enabled=m,
                                                 mem_args=a))
                c_in = c_out
        self.features = nn.Sequential(*features)
        self.conv = nn.Sequential(conv(a, m, c_in, self.last_channel, 1, bias=False),
                                  nn.BatchNorm2d(self.last_channel), nn.ReLU6(inplace=True))
        self.dropout = nn.Dropout(0.2)
        self.classifier = linear(a, m, self.last_channel, num_classes)
        for module in self.modules():
            name = module.__class__.__name__
            if isinstance(module, nn.Conv2d) or name == "Conv2dMem":
                nn.init.kaiming_normal_(module.weight, mode='fan_out')
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear) or name == "LinearMem":
                nn.init.normal_(module.weight, 0, 0.01)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def _make_divisible(self, v, divisor, min_value=None):
        return _make_divisible(v, divisor, min_value)

    def forward(self, x):
        x = self.conv(self.features(x))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.classifier(self.dropout(x))


def MobileNetV2_zoo(model_name='mobilenet_v2', num_classes=1000, width_mult=1.0, pretrained=False, mem_enabled=False,
                    engine=None, input_slice=(1, 1, 2, 4), weight_slice=(1, 1, 2, 4), device=None, bw_e=None,
                    input_paral_size=(1, 32), weight_paral_size=(32, 32), input_quant_gran=(1, 64),
                    weight_quant_gran=(64, 64)):
    """A :class:`MobileNetV2`; ``pretrained`` loads MemIntelli's ImageNet weights (width 1.0, 1000 classes)."""
    if model_name not in model_urls:
        raise ValueError(f"Invalid model name: {model_name}. Available: {list(model_urls.keys())}")
    mem_args = build_mem_args(mem_enabled, engine=engine, input_slice=input_slice, weight_slice=weight_slice,
                              device=default_device() if device is None else device, bw_e=bw_e,
                              input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                              input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)
    model = MobileNetV2(num_classes=num_classes, width_mult=width_mult, mem_enabled=mem_enabled, mem_args=mem_args)
    if pretrained:
        load_into(model, load_url_state_dict(model_urls[model_name]))
    return model

# The layers MemIntelli's module imports for its own use (scripts import them from here); not in __all__.
from ..NN_layers import Conv2dMem, LinearMem  # noqa: E402
_REEXPORTS = (Conv2dMem, LinearMem)  # referenced: pyflakes sees them used
