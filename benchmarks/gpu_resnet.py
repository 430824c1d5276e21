"""ResNet-18 (CIFAR-10 shape) forward, batch 64, on the CPU path and on an OpenCL device.

Usage: python3 benchmarks/gpu_resnet.py [--device opencl:P:D] [--batches 3] [--noise on|off]

torchvision's resnet18(num_classes=10) with the CIFAR stem (3x3 conv1, stride 1, no max-pool),
every Conv2d and the Linear converted to Conv2dMem / LinearMem (pyfastpim.nn.convert), random
weights and inputs (fixed seeds: the timing does not depend on trained weights). Prints seconds
per batch on each device (median of --batches timed batches after one warm-up batch) and the
largest difference between the two outputs (noise off: they must be bit-identical; noise on:
within the documented 1e-5 relative). Used by benchmarks/gpu.sh; runs on PoCL too (slowly).
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time


def build(seed=0):
    import torch
    import torch.nn as nn
    import torchvision
    torch.manual_seed(seed)
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m.eval()


def on_device(model, device, noise):
    import pyfastpim
    import pyfastpim.nn
    kw = {} if noise else dict(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0)
    engine = pyfastpim.DPETensor(device=device, seed=1, radc=2 ** 12, **kw)
    return pyfastpim.nn.convert(copy.deepcopy(model), engine, (1, 1, 2, 2), (1, 1, 2, 2))


def time_forward(model, x, batches):
    import torch
    times = []
    with torch.no_grad():
        out = model(x)  # warm-up: kernels built, weights programmed and resident, scratch sized
        for _ in range(batches):
            t0 = time.perf_counter()
            out = model(x)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv=None):
    import numpy as np
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl", help="OpenCL device string (default: 'opencl')")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--noise", choices=("on", "off"), default="on")
    a = ap.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)  # the checkout's in-place build, as `make bench` uses (memintelli_models.py too)
    import pyfastpim
    dev = pyfastpim.resolve_device(a.device)
    torch.manual_seed(1)
    x = torch.randn(a.batch_size, 3, 32, 32)
    base = build()
    res = {"device": dev.info["name"], "platform": dev.info["platform_name"], "batch": a.batch_size,
           "noise": a.noise, "mvm_kernel": dev.mvm_kernel, "tile": dev.tile}
    t_cpu, out_cpu = time_forward(on_device(base, "cpu", a.noise == "on"), x, a.batches)
    t_cl, out_cl = time_forward(on_device(base, a.device, a.noise == "on"), x, a.batches)
    o1, o2 = out_cpu.numpy(), out_cl.numpy()
    res.update(cpu_s_per_batch=t_cpu, opencl_s_per_batch=t_cl, speedup=t_cpu / t_cl,
               max_abs_diff=float(np.abs(o1 - o2).max()),
               rel_diff=float(np.linalg.norm(o1 - o2) / max(np.linalg.norm(o1), 1e-30)),
               bit_identical=bool(np.array_equal(o1, o2)))
    print(json.dumps(res, indent=1))
    if a.noise == "off" and not res["bit_identical"]:
        print("FAILED: noise off, the OpenCL outputs differ from the CPU path's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
