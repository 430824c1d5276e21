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
from .NN_layers import (LinearMem, Conv1dMem, Conv2dMem, MapReduceDot, map_reduce_dot_func, LinearMemRunc,
                        linear_mem_func, Conv1dMemRunc, conv1d_mem_func, Conv2dMemRunc, conv2d_mem_func, is_tuple_2)
from .NN_models import (LeNet5, VGG_CIFAR, vgg_cifar_zoo, BasicBlock, Bottleneck, ResNet, ResNet_zoo, DeiT, deit_zoo,
                        ResNet_CIFAR, ResNet_CIFAR_zoo, InvertedResidual, MobileNetV2, MobileNetV2_zoo, PatchEmbed,
                        Block, Mlp, Attention, cfgs, cifar_pretrained_urls, resnet_pretrained_urls, model_urls)
from .pimpy import SlicedData, DPETensor, RE, ABSE, SNR, dot_high_dim
from . import pimpy, NN_layers, NN_models

# MemIntelli's package star-imports NN_layers and NN_models, which have no __all__ there, so it also
# carries their submodules (``from memintelli import lenet5``); ResNet and DeiT are the classes.
from .NN_layers import convolution, functions, linear
from .NN_models import Mobilnetv2, lenet5, resnet_cifar, vgg_cifar

# The __all__ of NN_layers, NN_models and pimpy and the modules above: the names ``import *`` gave when
# this package star-imported those three (tests/api/test_memintelli.py checks the union).
__all__ = [
    "LinearMem", "Conv1dMem", "Conv2dMem", "MapReduceDot", "map_reduce_dot_func", "LinearMemRunc", "linear_mem_func",
    "Conv1dMemRunc", "conv1d_mem_func", "Conv2dMemRunc", "conv2d_mem_func", "is_tuple_2",
    "LeNet5", "VGG_CIFAR", "vgg_cifar_zoo", "BasicBlock", "Bottleneck", "ResNet", "ResNet_zoo", "DeiT", "deit_zoo",
    "ResNet_CIFAR", "ResNet_CIFAR_zoo", "InvertedResidual", "MobileNetV2", "MobileNetV2_zoo", "PatchEmbed", "Block",
    "Mlp", "Attention", "cfgs", "cifar_pretrained_urls", "resnet_pretrained_urls", "model_urls",
    "SlicedData", "DPETensor", "RE", "ABSE", "SNR", "dot_high_dim",
    "pimpy", "NN_layers", "NN_models", "convolution", "functions", "linear", "Mobilnetv2", "lenet5", "resnet_cifar",
    "vgg_cifar"]
