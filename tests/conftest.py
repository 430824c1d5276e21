"""Shared test configuration: deterministic hypothesis profile, thread helpers."""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # tests/reference is importable as `reference`


def _drop_unbuilt_source_tree():
    """Test the installed package when the checkout has no extension built for this interpreter.

    `python -m pytest` puts the current directory first on sys.path; from a clone whose
    pyfastpim/ holds no _core for this Python (never built, or built for another version),
    that directory would shadow the pip-installed package."""
    import glob
    import sysconfig
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    if glob.glob(os.path.join(root, "pyfastpim", "_core" + suffix)):
        return
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != root]


_drop_unbuilt_source_tree()

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:  # the numpy-only install
    HAVE_TORCH = False


def pytest_collection_modifyitems(config, items):
    """Without torch (an optional dependency), tests whose code uses torch skip with a reason."""
    if HAVE_TORCH:
        return
    import inspect
    skip = pytest.mark.skip(reason="torch is not installed (optional dependency: pip install pyfastpim[torch])")
    for item in items:
        fn = getattr(item, "function", None)
        try:
            src = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            src = ""
        if "torch" in src or "torch" in item.fixturenames:
            item.add_marker(skip)

# Under sanitizers everything runs ~10x slower: fewer examples, same properties.
_SAN = os.environ.get("PYFASTPIM_SANITIZED") == "1"
settings.register_profile("pyfastpim", max_examples=8 if _SAN else 40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("pyfastpim")


@pytest.fixture
def sanitized():
    return _SAN
