"""Model-level speed beside MemIntelli: one inference batch of a zoo model, same script, either engine.

Usage (run each implementation in its own process; MemIntelli is not part of this repository):

    python3 benchmarks/memintelli_models.py pyfastpim resnet18_cifar 16
    PYTHONPATH=/tmp/memintelli python3 benchmarks/memintelli_models.py memintelli resnet18_cifar 16

The model and engine settings are those of MemIntelli's examples 05 (VGG CIFAR) and 07 (ResNet
CIFAR); weights are random (the speed does not depend on them). Prints seconds for one batch
(after one warm-up batch of 1 image) and the process's peak RSS.
"""
import importlib
import resource
import sys
import time

import torch

CASES = {
    # name: (zoo function, kwargs, engine kwargs, layer kwargs)
    "resnet18_cifar": ("ResNet_CIFAR_zoo", dict(model_name="resnet18", num_classes=10),
                       dict(HGS=1e-5, LGS=1e-8, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0,
                            read_variation=0.05, vnoise=0.0, rdac=2 ** 1, g_level=2 ** 1, radc=2 ** 6),
                       dict(input_slice=(1, 1, 1, 1), weight_slice=(1, 1, 1, 1), input_paral_size=(1, 64),
                            weight_paral_size=(64, 1), input_quant_gran=(1, 256), weight_quant_gran=(256, 1))),
    "vgg13_bn_cifar": ("vgg_cifar_zoo", dict(model_name="vgg13_bn", num_classes=10),
                       dict(HGS=1e-5, LGS=1e-8, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0,
                            read_variation=0.05, vnoise=0.0, rdac=2 ** 2, g_level=2 ** 2, radc=2 ** 10),
                       dict(input_slice=(1, 1, 2, 2), weight_slice=(1, 1, 2, 2), input_paral_size=(1, 64),
                            weight_paral_size=(64, 64), input_quant_gran=(1, 64), weight_quant_gran=(64, 64))),
}


def main(impl, case, batch):
    pkg = {"pyfastpim": "pyfastpim.memintelli", "memintelli": "memintelli"}[impl]
    engine_cls = importlib.import_module(pkg + ".pimpy.memmat_tensor").DPETensor
    zoo = importlib.import_module(pkg + ".NN_models")
    factory, kwargs, engine_kw, layer_kw = CASES[case]
    torch.manual_seed(0)
    device = torch.device("cpu")
    engine = engine_cls(**engine_kw, device=device)
    t0 = time.perf_counter()
    model = getattr(zoo, factory)(**kwargs, pretrained=False, mem_enabled=True, engine=engine, device=device,
                                  bw_e=None, **layer_kw)
    model.update_weight()
    model.eval()
    t_build = time.perf_counter() - t0
    with torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
        x = torch.randn(batch, 3, 32, 32)
        t0 = time.perf_counter()
        model(x)
        t_batch = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("%s %s batch %d: %.2f s per batch, build+program %.2f s, peak RSS %.0f MB"
          % (impl, case, batch, t_batch, t_build, rss))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 16)
