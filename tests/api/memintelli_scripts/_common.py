"""Shared helpers of the example scripts: synthetic data and a fast engine for the zoo models."""
import torch

from pyfastpim.memintelli.pimpy.memmat_tensor import DPETensor


def zoo_engine(device):
    """An engine with read and DAC noise but no programming noise (programming 10^7 cells with
    write variation takes seconds; the zoo scripts only need a realistic product)."""
    return DPETensor(HGS=1e-5, LGS=1e-8, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0,
                     read_variation=0.02, vnoise=0.02, rdac=2 ** 4, g_level=2 ** 4, radc=2 ** 12, device=device)


def synthetic_classes(n, dim, classes, seed):
    """Linearly separable points: class centres on a sphere plus small noise."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centres[y] + 0.3 * torch.randn(n, dim, generator=g)
    return x, y


def finetune_step(model, x, y, lr=1e-3):
    """One hardware-aware fine-tuning step (MemIntelli's loop: forward, backward, step, update_weight)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    grads = {n: p.grad is not None and bool(torch.isfinite(p.grad).all()) for n, p in model.named_parameters()
             if p.requires_grad}
    opt.step()
    model.update_weight()
    return float(loss), grads
