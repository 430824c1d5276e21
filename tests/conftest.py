"""Shared test configuration: deterministic hypothesis profile, thread helpers."""
import importlib
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
    importlib.import_module("torch")
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


@pytest.fixture(autouse=True, scope="session")
def _full_teams_for_small_kernels():
    """Every kernel of the test process on the full thread count, whatever its size, so that the
    thread-count tests' small cases still run on a team (by default a kernel with some tens of
    microseconds of work or less runs on fewer threads; child interpreters, as in
    test_thread_safety.py, keep that default)."""
    from pyfastpim import _core
    was = _core._threads_by_work(False)
    yield
    _core._threads_by_work(was)


@pytest.fixture
def sanitized():
    return _SAN


# ---- backend and ISA fixtures ---------------------------------------------------------------------
# `backend`: each test runs on the CPU and on the suite's OpenCL device (helpers.Backend: one
# interface over _core and the device); the OpenCL case skips with a reason when there is none.
# `isa`: each test runs under every SIMD level this CPU has (pyfastpim.set_isa_limit), the limit
# restored afterwards. `dev`: the suite's OpenCL device (PYFASTPIM_OPENCL_DEVICE chooses it).

@pytest.fixture(scope="session", params=["cpu", "opencl"])
def backend(request):
    from helpers import HAVE_CL, NO_CL_REASON, Backend
    if request.param == "opencl" and not HAVE_CL:
        pytest.skip(NO_CL_REASON)
    return Backend(request.param)


@pytest.fixture(scope="session")
def dev():
    from helpers import HAVE_CL, NO_CL_REASON
    if not HAVE_CL:
        pytest.skip(NO_CL_REASON)
    import pyfastpim
    return pyfastpim.resolve_device("opencl")


def _parametrizes(metafunc, name):
    for m in metafunc.definition.iter_markers("parametrize"):
        names = m.args[0] if m.args else m.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc):
    # a test that parametrizes "isa" itself keeps its own values
    if "isa" in metafunc.fixturenames and not _parametrizes(metafunc, "isa"):
        from helpers import available_isas
        metafunc.parametrize("isa", available_isas(), indirect=True)


@pytest.fixture
def isa(request):
    import pyfastpim
    from helpers import restore_isa_limit
    active = pyfastpim.cpu_isa()[0]
    assert pyfastpim.set_isa_limit(request.param) == request.param
    try:
        yield request.param
    finally:
        restore_isa_limit(active)
