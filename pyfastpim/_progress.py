"""Optional progress bars (tqdm) for long work: the demo and evaluation loops.

``progress(total, desc, enable=None)`` gives a tqdm bar when tqdm is installed and progress
is enabled, else a silent stand-in with the same ``update`` / context-manager interface.
``enable=None`` follows ``PYFASTPIM_PROGRESS`` ("1" on, "0" off) and otherwise shows a bar
only when stderr is a terminal, so captured output (pytest, pipes, notebooks' captured
stderr, CI logs) stays clean by default."""
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


def enabled(enable=None):
    if enable is not None:
        return bool(enable)
    env = os.environ.get("PYFASTPIM_PROGRESS", "")
    if env in ("0", "1"):
        return env == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress(total, desc=None, enable=None):
    """A progress bar over ``total`` steps (tqdm when installed and enabled, else silent)."""
    if not enabled(enable):
        return _Silent(total, desc)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Silent(total, desc)
    return tqdm(total=total, desc=desc, leave=False, file=sys.stderr)
