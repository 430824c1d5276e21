"""Imports the optional feature modules of pyfastpim into the package namespace.

Each feature module defines ``__all__``; its names become ``pyfastpim.<name>``, except a name
equal to the module's own (``devices``): that is the module itself, callable as the function
(binding the function would hide the submodule).
A module that is absent is skipped (not every build carries every family);
any other import error propagates, so a broken module is never hidden.
"""
import importlib

FEATURE_MODULES = ("sliced", "dpe", "attention", "devices", "metrics")


def load_features(namespace, public):
    for name in FEATURE_MODULES:
        try:
            mod = importlib.import_module("pyfastpim." + name)
        except ModuleNotFoundError as exc:
            if exc.name != "pyfastpim." + name:
                raise
            continue
        for sym in getattr(mod, "__all__", ()):
            namespace[sym] = mod if sym == name else getattr(mod, sym)
            if sym not in public:
                public.append(sym)
