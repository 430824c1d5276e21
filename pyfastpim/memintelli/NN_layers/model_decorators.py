"""MemIntelli's model decorators (stubs or broken there), working: they record a layer's call in ``self.params``.

Each decorator wraps a module's ``forward``; every call stores a dict under the class name in
``self.params`` (created when missing): the layer type, input and output shapes and the layer's
configuration (sizes, slice methods when present).
"""
from functools import wraps

__all__ = ["record_linear", "record_conv1d", "record_conv2d", "record_maxpool2d", "record_activation"]


def _slices(module):
    out = {}
    for name in ("input_slice", "weight_slice"):
        value = getattr(module, name, None)
        if value is not None:
            value = tuple(int(v) for v in value)
            out[name] = value
            out["len_" + name] = len(value)
    return out


def _recorder(kind, fields):
    def decorator(func):
        @wraps(func)
        def wrapper(self, *args, **kwargs):
            out = func(self, *args, **kwargs)
            x = args[-1] if args else next(iter(kwargs.values()), None)
            entry = {"type": kind, "in_dim": tuple(getattr(x, "shape", ())),
                     "out_dim": tuple(getattr(out, "shape", ()))}
            for f in fields:
                if hasattr(self, f):
                    entry[f] = getattr(self, f)
            if "bias" in entry:
                entry["bias"] = entry["bias"] is not None
            entry.update(_slices(self))
            if not isinstance(getattr(self, "params", None), dict):
                self.params = {}
            self.params[self.__class__.__name__] = entry
            return out
        return wrapper
    return decorator


record_linear = _recorder("linear", ("in_features", "out_features", "bias"))
record_conv1d = _recorder("conv1d", ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                                     "bias"))
record_conv2d = _recorder("conv", ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                                   "bias"))
record_maxpool2d = _recorder("maxpool2d", ("kernel_size", "stride", "padding", "dilation"))
record_activation = _recorder("activation", ())
