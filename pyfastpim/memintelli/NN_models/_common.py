"""Shared pieces of the model zoo: layer factories, update_weight / prepare_for_inference, weight loading."""
import gc

import torch
import torch.nn as nn

from ..NN_layers import Conv1dMem, Conv2dMem, LinearMem

MEM_LAYERS = (LinearMem, Conv1dMem, Conv2dMem)
_MEM_KEYS = ("engine", "input_slice", "weight_slice", "device", "bw_e", "input_paral_size", "weight_paral_size",
             "input_quant_gran", "weight_quant_gran")


def default_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_mem_args(mem_enabled, **kw):
    """The ``mem_args`` dict MemIntelli's zoo functions pass to every crossbar layer ({} when disabled)."""
    if not mem_enabled:
        return {}
    return {k: kw[k] for k in _MEM_KEYS if k in kw}


def conv(mem_args, mem_enabled, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
    """Conv2dMem with ``mem_args`` when enabled, else nn.Conv2d (same parameters and state-dict keys)."""
    if mem_enabled:
        return Conv2dMem(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                         padding=padding, bias=bias, **mem_args)
    return nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)


def linear(mem_args, mem_enabled, in_features, out_features, bias=True):
    if mem_enabled:
        return LinearMem(in_features=in_features, out_features=out_features, bias=bias, **mem_args)
    return nn.Linear(in_features, out_features, bias=bias)


class MemModel(nn.Module):
    """Methods of every zoo model."""

    def update_weight(self):
        """Re-program the weights of every crossbar layer (call after changing them, as in MemIntelli)."""
        if not getattr(self, "mem_enabled", True):
            return
        for module in self.modules():
            if isinstance(module, MEM_LAYERS) and module.engine is not None:
                module.update_weight()

    def prepare_for_inference(self):
        """The faster fork's (memintelli_flash) inference preparation: eval mode, and the weights'
        training-only copies released (pyfastpim keeps only what the engine needs anyway)."""
        self.eval()
        if not getattr(self, "mem_enabled", True):
            return
        for module in self.modules():
            if isinstance(module, MEM_LAYERS) and module.engine is not None:
                module.inference_mode = True
                sliced = module.weight_sliced
                sliced.inference = True
                sliced.quantized_data = None
                sliced.sliced_data = None
        gc.collect()


def load_url_state_dict(url, progress=True):
    """The state dict at ``url`` through ``torch.hub.load_state_dict_from_url`` (the loader torchvision's
    weights use): a file already in ``<torch hub dir>/checkpoints`` under the URL's name is read, else
    it is downloaded there."""
    from torch.hub import load_state_dict_from_url
    return load_state_dict_from_url(url, progress=progress, map_location="cpu")


def load_into(model, state_dict):
    """``model.load_state_dict(state_dict)`` and re-program its crossbar layers."""
    model.load_state_dict(state_dict)
    model.update_weight()
    return model
