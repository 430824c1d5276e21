"""Examples 05-10 shape: the zoo models (VGG / ResNet CIFAR, ResNet / MobileNetV2 / DeiT ImageNet),
inference and one hardware-aware fine-tuning step each, on synthetic images.

``main(name)`` builds one model as MemIntelli's examples do (``*_zoo(..., mem_enabled=True,
engine=..., device=...)``), optionally loads "pretrained" weights (the state dict of a float
model of the same architecture: the zoo's pretrained loaders read such a file from the torch
hub cache), runs inference, then one fine-tuning step.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pyfastpim.memintelli.NN_models import (MobileNetV2_zoo, ResNet_CIFAR_zoo, ResNet_zoo, deit_zoo,  # noqa: E402
                                            vgg_cifar_zoo)
from _common import finetune_step, zoo_engine  # noqa: E402

# name -> (factory, keyword arguments, input shape); small sizes where the constructors allow
CASES = {
    "vgg_cifar": (vgg_cifar_zoo, dict(model_name="vgg11_bn", num_classes=10), (1, 3, 32, 32)),
    "vgg_cifar100_finetune": (vgg_cifar_zoo, dict(model_name="vgg11_bn", num_classes=100), (1, 3, 32, 32)),
    "resnet_cifar": (ResNet_CIFAR_zoo, dict(model_name="resnet18", num_classes=10), (1, 3, 32, 32)),
    "resnet_imagenet": (ResNet_zoo, dict(model_name="resnet18", num_classes=1000), (2, 3, 32, 32)),
    "mobilenetv2": (MobileNetV2_zoo, dict(num_classes=1000, width_mult=0.25), (2, 3, 32, 32)),
    "deit": (deit_zoo, dict(model_name="deit_tiny_patch16_224", num_classes=10), (1, 3, 224, 224)),
}


def main(name, batch=None, state_dict=None, finetune=True):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    factory, kwargs, shape = CASES[name]
    if batch is not None:
        shape = (batch,) + tuple(shape[1:])
    torch.manual_seed(0)
    engine = zoo_engine(device)
    model = factory(**kwargs, pretrained=False, mem_enabled=True, engine=engine, input_slice=[1, 1, 2, 4],
                    weight_slice=[1, 1, 2, 4], device=device, bw_e=None, input_paral_size=(1, 32),
                    weight_paral_size=(32, 32), input_quant_gran=(1, 64), weight_quant_gran=(64, 64))
    if state_dict is not None:
        model.load_state_dict(state_dict)
        model.update_weight()
    model.to(device)
    x = torch.randn(*shape, device=device)
    model.eval()
    with torch.no_grad():
        out = model(x)
    result = {"out": out, "model": model, "x": x}
    if finetune:
        y = torch.randint(0, out.shape[1], (shape[0],), device=device)
        result["loss"], result["grads"] = finetune_step(model, x, y)
    print("%s: output %s%s" % (name, tuple(out.shape), ", fine-tuning loss %.3f" % result["loss"]
                               if finetune else ""))
    return result


if __name__ == "__main__":
    for case in (sys.argv[1:] or CASES):
        main(case)
