"""Example 03 shape: hardware-aware training of a crossbar MLP (Adam, update_weight after each step)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pyfastpim.memintelli.pimpy.memmat_tensor import DPETensor  # noqa: E402
from _common import synthetic_classes  # noqa: E402
from ex02_mlp_inference import MLP, accuracy  # noqa: E402


def main(n=256, dim=48, classes=5, steps=40, batch=64):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    x, y = synthetic_classes(n, dim, classes, seed=2)
    x, y = x.to(device), y.to(device)
    engine = DPETensor(HGS=1e-5, LGS=1e-8, write_variation=0.02, rate_stuck_HGS=0.001, read_variation=0.05,
                       vnoise=0.05, rdac=2 ** 4, g_level=2 ** 4, radc=2 ** 12, device=device)
    model = MLP(engine, (dim, 32, classes), [1, 1, 2, 4], [1, 1, 2, 4], device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    acc0 = accuracy(model, x, y)
    for step in range(steps):
        model.train()
        i = (step * batch) % n
        xb, yb = x[i:i + batch], y[i:i + batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        model.update_weight()
        losses.append(float(loss))
    acc1 = accuracy(model, x, y)
    print("loss %.3f -> %.3f, accuracy %.3f -> %.3f" % (losses[0], losses[-1], acc0, acc1))
    return losses, acc0, acc1


if __name__ == "__main__":
    main()
