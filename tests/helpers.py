"""Helpers shared by the test groups (tests/core, tests/api, tests/backends).

Import as ``from helpers import ...`` (tests/conftest.py puts tests/ on sys.path). Test modules
never import each other: what two files need lives here or in a conftest fixture.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout (tests/ is its child)
TESTS = os.path.join(ROOT, "tests")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pyfastpim  # noqa: E402
from pyfastpim import _core  # noqa: E402
from reference.dpe_ref import conductance_levels, mvm_exact, slice_constants  # noqa: E402
from reference.spec import program_levels_reference, quantize_reference, slice_reference  # noqa: E402
import noise_off  # noqa: E402

# ---- environment ----------------------------------------------------------------------------------

SAN = os.environ.get("PYFASTPIM_SANITIZED") == "1"  # under ASan/UBSan (`make sanitize`): ~10x slower
NPLAT, CL_DEVICES = _core.cl_devices()
HAVE_CL = NPLAT > 0
NO_CL_REASON = "no OpenCL platform: the OpenCL ICD loader reports none (install pocl-opencl-icd to run these tests)"
needs_cl = pytest.mark.skipif(not HAVE_CL, reason=NO_CL_REASON)
# the package under test (the sanitized build's copy under `make sanitize`), for child interpreters
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))
CHILD_TIMEOUT = 300  # generous: a loaded machine under the sanitizers; a hang is forever


def run_script(body, what="the script", env=None):
    """stdout of `body` (dedented) run in a fresh interpreter that imports the package under test,
    with the variables in `env` added to the environment; fails the test on a hang (CHILD_TIMEOUT)
    or a non-zero exit."""
    import subprocess
    import sys
    import textwrap
    script = "import sys; sys.path.insert(0, %r)\n" % PKG_ROOT + textwrap.dedent(body)
    child_env = dict(os.environ, **env) if env else None
    try:
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                           env=child_env)
    except subprocess.TimeoutExpired:
        pytest.fail("%s hung (no answer in %d s)" % (what, CHILD_TIMEOUT))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


# the CPU draws noise with its SIMD (SLEEF) path: OpenCL computes the same bits
SIMD_NOISE = pyfastpim.cpu_isa()[0] in ("avx2", "avx512")

ISAS = ("generic", "avx2", "avx512")


def available_isas():
    """The ISAs this CPU can run, portable first ('generic', then 'avx2', 'avx512' if present)."""
    return ISAS[:ISAS.index(pyfastpim.cpu_isa()[1]) + 1]


def no_isa_limit():
    """Lift any set_isa_limit: the top tier ('avx512', by contrast, would keep VNNI kernels off)."""
    pyfastpim.set_isa_limit("avx512vnni")


def restore_isa_limit(active):
    """Undo set_isa_limit: `active` is pyfastpim.cpu_isa()[0] from before the change."""
    if active == pyfastpim.cpu_isa()[1]:
        no_isa_limit()
    else:
        pyfastpim.set_isa_limit(active)


def short_instance(rows, tile_rows):
    """Rows of the short micro-kernel instance (csrc/core/dpe.h: 1, 2, 4) that a panel of `rows` valid rows takes,
    None for the full tile of `tile_rows`."""
    return next((s for s in (1, 2, 4) if rows <= s < tile_rows), None)


def rel(a, b):
    """Relative L2 distance of a from b (absolute when b is zero)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return np.linalg.norm(a - b) / nb if nb else np.linalg.norm(a - b)


# ---- DPE kernel cases (slice codes and programmed levels) ------------------------------------------

HGS, LGS = 1e-5, 1e-7


def make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level):
    """Random slice codes, input scales, weight levels and weight scales for _core.dpe_mvm."""
    mx, _ = slice_constants(xw)
    mw, _ = slice_constants(ww)
    xs = np.stack([rng.integers(0, m + 1, (N, R, K)) for m in mx]).astype(np.uint8)
    wsl = np.stack([rng.integers(0, m + 1, (K, P)) for m in mw])
    wl = np.stack([conductance_levels(wsl[j], mw[j], g_level) for j in range(len(mw))]).astype(np.uint8)
    xsc = rng.random((N, -(-R // xg[0]), -(-K // xg[1]))).astype(np.float32)
    wsc = rng.random((-(-K // wg[0]), -(-P // wg[1]))).astype(np.float32)
    return xs, xsc, wl, wsc


def written_conductance(rng, wl, g_level, sigma=0.05):
    """Programmed conductances of levels wl with write variation sigma (float32), as a chip stores them."""
    g = (wl * ((HGS - LGS) / (g_level - 1)) + LGS) * np.exp(sigma * rng.standard_normal(wl.shape))
    return g.astype(np.float32)


def mvm_args(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc, sigma=None, vnoise=0.0, seed=1, call=0,
             cond=None):
    """The positional argument tuple of _core.dpe_mvm / cl_dpe_mvm (after the device)."""
    return (xs, xsc, xg, xw, wl, cond, wsc, wg, ww, n, rdac, g_level, radc, HGS, LGS, sigma, vnoise, seed, call)


def engine_case(rng, N=2, R=40, K=96, P=70):
    """The engine's default shape family: 32-row crossbars, widths (1, 1, 2, 2), g_level 4."""
    return make_case(rng, N, R, K, P, 32, (1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), 4)


def engine_args(xs, xsc, wl, wsc, **kw):
    return mvm_args(xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4, **kw)


widths = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(lambda t: (1,) + tuple(t))


@st.composite
def configs(draw):
    """A random _core.dpe_mvm configuration (shapes, widths, granules, converters, seed)."""
    n = draw(st.sampled_from([1, 3, 4, 8, 16, 32]))
    g_level = draw(st.sampled_from([2, 4, 8, 16]))
    xw = draw(widths)
    ww = draw(widths.filter(lambda w: max(w) <= int(np.log2(g_level))))
    N = draw(st.integers(1, 3))
    R = draw(st.integers(1, 20))
    K = draw(st.integers(1, 80))
    P = draw(st.integers(1, 40))
    xg = (draw(st.integers(1, 4)), n * draw(st.integers(1, 3)))
    wg = (n * draw(st.integers(1, 3)), draw(st.integers(1, 40)))
    rdac = draw(st.sampled_from([2, 4, 16, 256]))
    if draw(st.booleans()):
        radc = [draw(st.sampled_from([2 ** 4, 2 ** 8, 2 ** 12, 2 ** 16]))] * len(ww)
    else:
        radc = [draw(st.integers(2, 2 ** 16)) for _ in ww]
    seed = draw(st.integers(0, 2 ** 31))
    return dict(N=N, R=R, K=K, P=P, n=n, xw=xw, ww=ww, xg=xg, wg=wg, g_level=g_level, rdac=rdac, radc=radc,
                seed=seed)


def config_case(c):
    """(dpe_mvm positional arguments up to radc, the rng) for a configs() draw."""
    rng = np.random.default_rng(c["seed"])
    xs, xsc, wl, wsc = make_case(rng, c["N"], c["R"], c["K"], c["P"], c["n"], c["xw"], c["ww"], c["xg"], c["wg"],
                                 c["g_level"])
    return (xs, xsc, c["xg"], c["xw"], wl, wsc, c["wg"], c["ww"], c["n"], c["rdac"], c["g_level"], c["radc"]), rng


def reference_product(x, w, engine, xw, ww, xp, wp, xg, wg, bw_e=None):
    """Quantize/slice/program with the spec transcription, then the exact MVM transcription."""
    x3 = x if x.ndim == 3 else x[None]
    qx = quantize_reference(x3, xp, xg, xw, bw_e)
    qw = quantize_reference(w, wp, wg, ww, bw_e)
    xs = slice_reference(qx["q"], xw)
    wsl = slice_reference(qw["q"], ww)[:, 0]
    L = program_levels_reference(wsl, ww, engine.g_level)
    radc = list(reversed(engine.radc)) if engine.radc_is_list else [engine.radc] * len(ww)
    out = mvm_exact(xs, qx["gran_scale"], qx["granule"], xw, L, qw["gran_scale"][0], qw["granule"], ww, xp[1],
                    engine.rdac, engine.g_level, radc)
    return out if x.ndim == 3 else out[0]


# ---- backends -------------------------------------------------------------------------------------

class Backend:
    """One compute backend behind one interface: 'cpu' (_core) or 'opencl' (the suite's device)."""

    def __init__(self, name):
        self.name = name
        self.dev = pyfastpim.resolve_device("opencl") if name == "opencl" else None

    def __repr__(self):
        return "Backend(%r)" % self.name

    def dpe_mvm(self, *args, **kw):
        if self.dev is None:
            return _core.dpe_mvm(*args, **kw)
        return pyfastpim.cl_dpe_mvm(self.dev, *args, **kw)

    def dpe_conv2d(self, *args, **kw):
        if self.dev is None:
            return _core.dpe_conv2d(*args, **kw)
        from pyfastpim.devices import cl_dpe_conv2d
        return cl_dpe_conv2d(self.dev, *args, **kw)

    def slice_quantize(self, *args, **kw):
        return _core.slice_quantize(*args, device=self.dev, **kw)

    def program_conductance(self, *args, **kw):
        return _core.program_conductance(*args, device=self.dev, **kw)

    def normals(self, *args):
        return _core.normals(*args, device=self.dev)


# OpenCL tile shapes, PYFASTPIM_CL_TILE = "TM,TN,LX,LY,PANEL" (csrc/opencl/runtime.c choose_tile): the
# device's own, a GPU's (4 x 4 register tiles in 16 x 8 work-groups, column-major weights) and a ragged one
# (3 x 2 tiles, 4 x 2 work-groups, panel-packed weights), so PoCL runs what a GPU would
CL_TILES = {"device": None, "gpu": "4,4,16,8,0", "ragged": "3,2,4,2,1"}


def open_cl_device(tile):
    """A fresh handle on the suite's device, built with the given tile shape."""
    base = pyfastpim.resolve_device("opencl")
    if tile is None:
        return base
    old = os.environ.get("PYFASTPIM_CL_TILE")
    os.environ["PYFASTPIM_CL_TILE"] = tile
    try:
        d = _core.OpenCLDevice(base.info["platform"], base.info["device"])
        d.build()  # the tile shape is read at build time
    finally:
        if old is None:
            del os.environ["PYFASTPIM_CL_TILE"]
        else:
            os.environ["PYFASTPIM_CL_TILE"] = old
    return d


# ---- convolution cases -----------------------------------------------------------------------------

def conv_args(c, sigma=0.0, vnoise=0.0, cond=False, dequant=True):
    """The positional arguments of _core.dpe_conv2d / cl_dpe_conv2d for a case dict c (N, C, H, W, P,
    kh, kw, stride, padding, dilation, n, g_level, xw, ww, xg, wg, bfp, rdac, radc, seed, scale, zeros)."""
    rng = np.random.default_rng(c["seed"])
    img = (rng.standard_normal((c["N"], c["C"], c["H"], c["W"])) * c["scale"]).astype(np.float32)
    if c["zeros"]:
        img[:, :1] = 0.0  # zero granules (INT divisor 1, scale 0)
    K = c["C"] * c["kh"] * c["kw"]
    mw = [2 ** w - 1 for w in reversed(c["ww"])]
    wl = np.stack([rng.integers(0, m + 1, (K, c["P"])) for m in mw]).astype(np.uint8)
    wsc = rng.random((-(-K // c["wg"][0]), -(-c["P"] // c["wg"][1]))).astype(np.float32)
    wc = None
    if cond:
        QG = (HGS - LGS) / (c["g_level"] - 1)
        wc = (wl * QG + LGS).astype(np.float32) * (1 + 0.02 * rng.standard_normal(wl.shape)).astype(np.float32)
    sig = np.full(c["g_level"], sigma, np.float32) if sigma else None
    return (img, (c["kh"], c["kw"]), c["stride"], c["padding"], c["dilation"], c["xg"], c["xw"], c["bfp"], wl, wc,
            wsc, c["wg"], c["ww"], c["n"], c["rdac"], c["g_level"], [c["radc"]] * len(c["ww"]), HGS, LGS, sig,
            vnoise, 7, 3, dequant)


NOISE_OFF = noise_off.NOISE_OFF  # the noise-off settings (noise_off.py, which child interpreters import)


def layer_engine(**kw):
    """The layer tests' engine: noise off, 16 levels, a 16-level DAC, a 2**10-level ADC, seed 3; kw override."""
    return noise_off.noise_free_engine(**dict(dict(g_level=16, rdac=16, radc=2 ** 10, seed=3), **kw))


# keyword arguments of one valid call of each raw entry point, for the argument tests to break one at a time

def mvm_kwargs(**over):
    """Consistent _core.dpe_mvm keyword arguments (N=1, R=3, K=16, P=8, n=8), then the overrides."""
    K, P, n = 16, 8, 8
    rng = np.random.default_rng(3)
    args = dict(x_codes=rng.integers(0, 2, (2, 1, 3, K)).astype(np.uint8), x_scale=np.ones((1, 3, K // n), np.float32),
                x_granule=(1, n), x_widths=(1, 1), w_levels=rng.integers(0, 16, (2, K, P)).astype(np.uint8) % 2,
                w_conductance=None, w_scale=np.ones((K // n, 1), np.float32), w_granule=(n, 8), w_widths=(1, 1),
                n=n, rdac=16, g_level=16, radc=[256, 256], HGS=HGS, LGS=LGS, read_sigma=None, vnoise=0.0, seed=1,
                call=0)
    args.update(over)
    return args


def conv_kwargs(**over):
    """Consistent _core.dpe_conv2d keyword arguments (N=1, C=2, 5x5 image, 3x3 kernel, P=4, n=2), then the
    overrides."""
    rng = np.random.default_rng(4)
    C, kh, P, n = 2, 3, 4, 2
    K = C * kh * kh
    args = dict(image=rng.standard_normal((1, C, 5, 5)).astype(np.float32), kernel_size=(kh, kh), stride=(1, 1),
                padding=(0, 0), dilation=(1, 1), x_granule=(1, n), x_widths=(1, 1, 2), bfp=False,
                w_levels=rng.integers(0, 2, (2, K, P)).astype(np.uint8), w_conductance=None,
                w_scale=np.ones((-(-K // n), 1), np.float32), w_granule=(n, 8), w_widths=(1, 1), n=n, rdac=16,
                g_level=16, radc=[256, 256], HGS=HGS, LGS=LGS, read_sigma=None, vnoise=0.0, seed=1, call=0)
    args.update(over)
    return args


def program_kwargs(**over):
    """Consistent _core.program_conductance keyword arguments (2 slices of 3x3 cells), then the overrides."""
    args = dict(levels=np.zeros((2, 3, 3), np.uint8), g_level=16, HGS=HGS, LGS=LGS, write_variation=0.0,
                rate_stuck_HGS=0.0, rate_stuck_LGS=0.0, seed=None)
    args.update(over)
    return args


def at_isa(isa, fn):
    """fn() with the CPU kernels capped at `isa` (the limit restored afterwards)."""
    active = pyfastpim.cpu_isa()[0]
    try:
        assert pyfastpim.set_isa_limit(isa) == isa
        return fn()
    finally:
        restore_isa_limit(active)


class Raises:
    """A value whose every conversion (__index__, __float__) raises `exc`: user code's exception, which
    must reach the caller as it is."""

    def __init__(self, exc):
        self.exc = exc

    def __index__(self):
        raise self.exc

    def __float__(self):
        raise self.exc


class Iface:
    """Exposes only __array_interface__ = d (any dict, malformed ones included); `keep` is held for as long
    as the exporter lives (the array whose memory d points to)."""

    def __init__(self, d, keep=None):
        self.keep = keep
        self.__array_interface__ = d


class InterfaceOnly(Iface):
    """Exposes array a only through its __array_interface__ (no .shape, no slicing), keeping a alive."""

    def __init__(self, a):
        super().__init__(a.__array_interface__, keep=a)


class DLPackOnly:
    """Exposes a only through DLPack, as a pre-1.0 producer (NumPy 1.24's __dlpack__: no max_version)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def type_name(v):
    """The type's name as the library's TypeErrors give it ("numpy.float32" for NumPy's types)."""
    return type(v).__module__ + "." + type(v).__name__ if type(v).__module__ == "numpy" else type(v).__name__


def outcome(fn, *args, **kw):
    """('ok', None) or (exception type, message) of fn(*args, **kw): to compare how calls fail.
    The interpreter's own hint is left out of the message: Python 3.13 appends ". Did you mean
    'x'?" to an unexpected keyword in a real call, not to the same error raised by
    inspect.Signature.bind."""
    try:
        fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - compared by the caller
        return type(exc), re.sub(r"\. Did you mean '[^']*'\?$", "", str(exc))
    return "ok", None
