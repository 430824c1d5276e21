"""Whether an object is a torch tensor, asked without importing torch (the package works without it)."""
import sys


def is_torch(obj):
    """Whether ``obj`` is a ``torch.Tensor``: a Parameter or any other subclass too (a user's own, made
    with ``as_subclass``), as the layers' ``isinstance`` checks take them. An object is a tensor only
    once torch is imported, so torch is never imported to ask (that takes seconds)."""
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)  # None too while torch is half imported
    return isinstance(tensor, type) and isinstance(obj, tensor)


def is_torch_device(obj):
    """Whether ``obj`` is a ``torch.device``, asked as :func:`is_torch` asks (torch is never imported)."""
    device = getattr(sys.modules.get("torch"), "device", None)
    return isinstance(device, type) and isinstance(obj, device)
