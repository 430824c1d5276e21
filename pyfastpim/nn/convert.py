"""Convert a float PyTorch model to run its linear layers and convolutions on the crossbar."""
import warnings

import torch
import torch.nn as nn

from .._progress import progress as _progress_bar
from .layers import Conv2dMem, LinearMem

__all__ = ["convert"]


def convert(model, engine, input_slice, weight_slice, *, exclude=(), progress=None, **layer_kwargs):
    """Replace ``nn.Linear`` and ``nn.Conv2d`` modules of ``model`` by LinearMem / Conv2dMem, in place.

    Weights and biases are copied and programmed into ``engine`` once. Conv2d layers are mapped
    when ``groups == 1`` and ``padding_mode == 'zeros'`` (``padding='same'`` only when it is
    symmetric). Everything that looks like it should have been mapped but could not be (grouped
    or non-zero-padded convolutions, other convolutions, lazy layers, the projections inside
    ``nn.MultiheadAttention``, which uses their weights directly) is left as it was and listed
    in one ``warnings.warn`` (UserWarning).

    Args:
        model: any ``nn.Module``; converted recursively in place. Modules shared between
            several parents stay shared.
        engine: the :class:`pyfastpim.DPETensor` all converted layers use.
        input_slice, weight_slice: slice methods (bit widths, most significant first).
        exclude: qualified module names (as in ``model.named_modules()``) to leave as they are,
            with their submodules.
        progress: a progress bar over the layers (tqdm, when installed): True / False force it;
            None (default) shows it only where stderr is a terminal or in a notebook, and only
            when converting takes more than half a second (``PYFASTPIM_PROGRESS=0/1`` overrides).
        **layer_kwargs: passed to every new layer: ``bw_e``, ``input_paral_size``,
            ``weight_paral_size``, ``input_quant_gran``, ``weight_quant_gran``.

    Returns:
        ``model`` (or the new layer when ``model`` itself is an ``nn.Linear`` / ``nn.Conv2d``).
    """
    allowed = {"bw_e", "input_paral_size", "weight_paral_size", "input_quant_gran", "weight_quant_gran"}
    unknown = sorted(set(layer_kwargs) - allowed)
    if unknown:
        raise TypeError("convert() got unexpected keyword argument(s) %s; layer options are %s"
                        % (", ".join(unknown), ", ".join(sorted(allowed))))
    if not isinstance(model, nn.Module):
        raise TypeError("convert: model must be a torch.nn.Module, got %s" % type(model).__name__)
    exclude = {exclude} if isinstance(exclude, str) else set(exclude)
    skipped = []
    memo = {}

    def visit(module, prefix, bar):
        for name, child in list(module.named_children()):
            qual = prefix + name
            if qual in exclude or child is None:
                continue
            if id(child) in memo:
                new = memo[id(child)]
            else:
                new = _convert_one(child, qual, engine, input_slice, weight_slice, layer_kwargs, skipped)
                memo[id(child)] = new
                if _is_candidate(child):
                    bar.update(1)
                if new is child and not isinstance(child, nn.MultiheadAttention):
                    visit(child, qual + ".", bar)
                elif isinstance(child, nn.MultiheadAttention):
                    skipped.append("%s (MultiheadAttention: uses its projection weights directly)" % qual)
            if new is not child:
                setattr(module, name, new)

    if "" in exclude:
        result = model
    else:
        with _progress_bar(_count_candidates(model, exclude), "pyfastpim.nn.convert", progress, unit="layer",
                           delay=0.5) as bar:
            result = _convert_one(model, "<model>", engine, input_slice, weight_slice, layer_kwargs, skipped)
            if _is_candidate(model):
                bar.update(1)
            if result is model:
                visit(model, "", bar)
    if skipped:
        warnings.warn("pyfastpim.nn.convert left %d layer(s) unconverted: %s" % (len(skipped), "; ".join(skipped)),
                      UserWarning, stacklevel=2)
    return result


def _is_candidate(module):
    """A layer convert() maps or reports (Linear and convolutions not converted already)."""
    return isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)) and not isinstance(module, (LinearMem, Conv2dMem))


def _count_candidates(model, exclude):
    """The number of layers convert() will visit: the progress bar's total (same walk as visit())."""
    if _is_candidate(model):
        return 1
    seen, stack = set(), [(model, "")]
    count = 0
    while stack:
        module, prefix = stack.pop()
        for name, child in module.named_children():
            qual = prefix + name
            if qual in exclude or child is None or id(child) in seen:
                continue
            seen.add(id(child))
            if _is_candidate(child):
                count += 1
            elif not isinstance(child, nn.MultiheadAttention):
                stack.append((child, qual + "."))
    return count


def _is_lazy(module):
    return isinstance(module, nn.modules.lazy.LazyModuleMixin)


def _same_padding(conv):
    """Explicit symmetric padding for padding='same'/'valid', or None when asymmetric."""
    if conv.padding == "valid":
        return (0, 0)
    pad = []
    for k, d in zip(conv.kernel_size, conv.dilation):
        total = d * (k - 1)
        if total % 2:
            return None
        pad.append(total // 2)
    return tuple(pad)


def _convert_one(child, qual, engine, input_slice, weight_slice, kw, skipped):
    if isinstance(child, (LinearMem, Conv2dMem)):
        return child
    if _is_lazy(child) and isinstance(child, (nn.Linear, nn.modules.conv._ConvNd)):
        skipped.append("%s (%s: uninitialized lazy layer)" % (qual, type(child).__name__))
        return child
    if isinstance(child, nn.Linear):
        new = LinearMem(None, child.in_features, child.out_features, input_slice, weight_slice,
                        bias=child.bias is not None, device=child.weight.device, dtype=child.weight.dtype, **kw)
    elif type(child) is nn.Conv2d or (isinstance(child, nn.Conv2d) and not isinstance(child, nn.ConvTranspose2d)):
        reasons = []
        if child.groups != 1:
            reasons.append("groups=%d" % child.groups)
        if child.padding_mode != "zeros":
            reasons.append("padding_mode=%r" % child.padding_mode)
        padding = child.padding
        if isinstance(padding, str):
            padding = _same_padding(child)
            if padding is None:
                reasons.append("asymmetric padding='same'")
        if reasons:
            skipped.append("%s (Conv2d %s)" % (qual, ", ".join(reasons)))
            return child
        new = Conv2dMem(None, child.in_channels, child.out_channels, child.kernel_size, input_slice, weight_slice,
                        stride=child.stride, padding=padding, dilation=child.dilation, bias=child.bias is not None,
                        device=child.weight.device, dtype=child.weight.dtype, **kw)
    elif isinstance(child, nn.modules.conv._ConvNd):
        skipped.append("%s (%s: only Conv2d is mapped)" % (qual, type(child).__name__))
        return child
    else:
        return child
    with torch.no_grad():
        new.weight.copy_(child.weight)
        if child.bias is not None:
            new.bias.copy_(child.bias)
    new.weight.requires_grad_(child.weight.requires_grad)
    if child.bias is not None:
        new.bias.requires_grad_(child.bias.requires_grad)
    new.train(child.training)
    new.engine = engine
    new.update_weight()
    return new
