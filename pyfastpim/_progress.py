"""Optional progress bars (tqdm) for long work: model conversion, evaluation loops, the demo.

``progress(total, desc, enable=None)`` gives a tqdm bar when tqdm is installed and progress
is enabled, else a silent stand-in with the same ``update`` / ``close`` / context-manager
interface. tqdm is optional: nothing here needs it.

``enable``: True / False force the bar on / off. ``None`` (the default everywhere) follows
``PYFASTPIM_PROGRESS`` ("1" on, "0" off; another value than those or empty is a ValueError naming
it) and otherwise shows a bar only where someone is
watching: stderr is a terminal, or the code runs in a Jupyter kernel (a notebook). Captured
output (pytest, pipes, CI logs, subprocesses) stays clean. A bar appears only after ``delay``
seconds, so quick work shows nothing even where bars are on.
"""
import importlib
import os
import sys


class _Silent:
    def __init__(self, total=None, desc=None):
        self.total, self.desc, self.n = total, desc, 0

    def update(self, n=1):
        self.n += n

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def in_notebook():
    """True inside a Jupyter kernel (IPython's ZMQ shell), where stderr is not a terminal but is shown."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # an IPython too old or half imported: no notebook detection
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def enabled(enable=None):
    if enable is not None:
        return bool(enable)
    env = os.environ.get("PYFASTPIM_PROGRESS", "")
    if env in ("0", "1"):
        return env == "1"
    if env:  # as PYFASTPIM_CL_PROFILE: a value meant as a setting ('on', 'true', ' 1') is not silently automatic
        raise ValueError("environment variable PYFASTPIM_PROGRESS: expected '1' (bars on), '0' (off) or empty "
                         "(automatic), got %r" % env)
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    return in_notebook()


def _tqdm_class():
    """tqdm's bar class, or None when tqdm is not installed. In a notebook, the widget bar when
    ipywidgets is there (tqdm.auto would warn without it), else the text bar."""
    try:
        if in_notebook():
            try:
                importlib.import_module("ipywidgets")  # tqdm.notebook draws with it
                from tqdm.notebook import tqdm
                return tqdm
            except ImportError:
                pass
        from tqdm.std import tqdm
        return tqdm
    except ImportError:
        return None


def progress(total, desc=None, enable=None, unit="it", delay=0.0):
    """A progress bar over ``total`` steps (tqdm when installed and enabled, else silent)."""
    if not enabled(enable):
        return _Silent(total, desc)
    cls = _tqdm_class()
    if cls is None:
        return _Silent(total, desc)
    return cls(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr, delay=delay)
