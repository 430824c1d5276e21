"""Device handling of the compatibility layer: torch devices in, host kernels inside.

The kernels read host memory. A tensor on another torch device (CUDA) is copied to the host
before a product and the result copied back to the tensor's device; both copies are counted
in :mod:`pyfastpim.memory` (``cuda_to_host`` / ``host_to_cuda``).
"""
import torch

from .. import memory

_CPU = torch.device("cpu")


def torch_device(device, name="device"):
    """``device`` (None, str or torch.device) as a torch.device; None is the CPU."""
    if device is None:
        return _CPU
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device.strip().lower())
        except RuntimeError as exc:
            raise ValueError("argument '%s': %s" % (name, exc)) from None
    raise TypeError("argument '%s': expected None, a str or a torch.device, got %r" % (name, device))


def is_foreign(t):
    """True for a torch tensor that is not in host memory (e.g. on CUDA)."""
    return isinstance(t, torch.Tensor) and t.device.type != "cpu"


def to_host(t):
    """``t`` on the CPU (counted as cuda_to_host when it was not); None and host tensors pass through."""
    if not is_foreign(t):
        return t
    memory._count_transfer("cuda_to_host", t.numel() * t.element_size())
    return t.to(_CPU)


def unavailable(device):
    """True for a CUDA device on a machine where torch has no CUDA (not built with it, or no driver or GPU):
    tensors meant for it stay on the host, where pyfastpim computes anyway."""
    return device is not None and torch_device(device).type == "cuda" and not torch.cuda.is_available()


def to_device(t, device):
    """Host tensor ``t`` on ``device`` (counted as host_to_cuda when that is not the CPU)."""
    if t is None or not isinstance(t, torch.Tensor):
        return t
    device = torch_device(device)
    if device.type == "cpu" or t.device == device:
        return t
    out = t.to(device)  # counted once copied (torch without CUDA raises here)
    memory._count_transfer("host_to_cuda", t.numel() * t.element_size())
    return out
