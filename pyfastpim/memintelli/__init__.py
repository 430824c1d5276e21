"""MemIntelli compatibility namespace: ``import memintelli`` -> ``import pyfastpim.memintelli``.

The module paths of MemIntelli (github HUST-ISMD-Odyssey/MemIntelli) are mirrored so that
changing the import lines of a MemIntelli script is the whole migration::

    from pyfastpim.memintelli.pimpy.memmat_tensor import DPETensor
    from pyfastpim.memintelli.NN_layers import LinearMem, Conv2dMem
    from pyfastpim.memintelli.NN_models import ResNet_CIFAR_zoo

``pimpy`` (DPETensor, SlicedData, SNR/RE/ABSE, dot_high_dim; ``pimpy.utils`` also
quant_map_tensor / bfp_map_tensor), ``NN_layers`` (LinearMem, Conv1dMem, Conv2dMem and the
autograd functions of ``NN_layers.functions``; quantized activations in
``NN_layers.activation``) and ``NN_models`` (the model zoo) are written for pyfastpim from
MemIntelli's public API and run on pyfastpim's C / OpenCL kernels. Differences are listed in
README.md, "Migrating from MemIntelli".

Devices: ``device=`` takes torch.device objects and strings. ``cpu`` runs the CPU kernels;
``cuda`` keeps tensors on the CUDA device for the caller while the products run on the best
OpenCL GPU (else the CPU kernels); each CUDA -> host and host -> CUDA copy is counted in
:func:`pyfastpim.memory.stats` as ``cuda_to_host`` / ``host_to_cuda``.
"""
from .NN_layers import *  # noqa: F401,F403
from .NN_models import *  # noqa: F401,F403
from .pimpy import *  # noqa: F401,F403
from . import pimpy, NN_layers, NN_models  # noqa: F401

# MemIntelli's package star-imports NN_layers and NN_models, which have no __all__ there, so it also
# carries their submodules (``from memintelli import lenet5``); ResNet and DeiT are the classes.
from .NN_layers import convolution, functions, linear  # noqa: E402,F401
from .NN_models import Mobilnetv2, lenet5, resnet_cifar, vgg_cifar  # noqa: E402,F401
