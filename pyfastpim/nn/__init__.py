"""PyTorch layers running on the simulated crossbar (MemIntelli drop-ins) and model conversion.

Submodules: ``layers`` (LinearMem, Conv2dMem), ``convert`` (convert a float model),
``attention`` (AttentionContext module). Each adds its names to ``__all__``.
"""
import importlib

__all__ = []
for _name in ("layers", "convert", "attention"):
    try:
        _mod = importlib.import_module(__name__ + "." + _name)
    except ModuleNotFoundError as _exc:
        if _exc.name != __name__ + "." + _name:
            raise
        continue
    for _sym in getattr(_mod, "__all__", ()):
        globals()[_sym] = getattr(_mod, _sym)
        __all__.append(_sym)
