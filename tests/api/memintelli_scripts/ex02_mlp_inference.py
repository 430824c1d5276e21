"""Example 02 shape: train a float MLP, load its weights into the crossbar MLP, compare accuracies."""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pyfastpim.memintelli.NN_layers import LinearMem  # noqa: E402
from pyfastpim.memintelli.pimpy.memmat_tensor import DPETensor  # noqa: E402
from _common import synthetic_classes  # noqa: E402


class MLP(nn.Module):
    def __init__(self, engine, sizes, input_slice, weight_slice, device, bw_e=None, mem_enabled=True):
        super().__init__()
        self.mem_enabled = mem_enabled
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(LinearMem(engine, a, b, input_slice, weight_slice, device=device, bw_e=bw_e)
                          if mem_enabled else nn.Linear(a, b, device=device))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)

    def update_weight(self):
        for layer in self.layers:
            if isinstance(layer, LinearMem):
                layer.update_weight()


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def main(n=256, dim=48, classes=5, epochs=60):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    x, y = synthetic_classes(n, dim, classes, seed=1)
    x, y = x.to(device), y.to(device)
    sizes = (dim, 32, classes)
    ref = MLP(None, sizes, None, None, device, mem_enabled=False)
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        opt.step()
    engine = DPETensor(HGS=1e-5, LGS=1e-8, write_variation=0.02, rate_stuck_HGS=0.001, read_variation=0.05,
                       vnoise=0.05, rdac=2 ** 4, g_level=2 ** 4, radc=2 ** 12, device=device)
    mem = MLP(engine, sizes, [1, 1, 2, 4], [1, 1, 2, 4], device)
    mem.load_state_dict(ref.state_dict())
    mem.update_weight()
    acc_ref, acc_mem = accuracy(ref, x, y), accuracy(mem, x, y)
    print("float accuracy %.3f, crossbar accuracy %.3f" % (acc_ref, acc_mem))
    return acc_ref, acc_mem


if __name__ == "__main__":
    main()
