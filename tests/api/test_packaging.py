"""Packaging and portability: error messages on every Python, OpenCL loaded at run time,
the unbuilt source tree's ImportError, the build pre-check."""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pyfastpim

from helpers import ROOT  # noqa: E402  (the checkout)
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))
SANITIZED = os.environ.get("PYFASTPIM_SANITIZED") == "1"

# The conversions PyUnicode_FromFormat (PyErr_Format) knows on 3.9-3.13: anything else
# (%g, %f, %e, ...) is printed literally on 3.11 and raises SystemError on 3.12+.
_OK = re.compile(r"%(?:%|-?\d*(?:\.\d+)?(?:c|d|i|u|x|ld|li|lu|lld|lli|llu|zd|zi|zu|p|s|U|V|S|R|A))")
_CONV = re.compile(r"%(?:%|[-0 #+]?\d*(?:\.\d+)?(?:ll|l|z)?[a-zA-Z])")


def test_c_format_strings_use_only_conversions_python_knows():
    sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "*", "*.c")))
    if not sources:
        pytest.skip("no C sources here (installed package)")
    bad = []
    for path in sources:
        src = open(path, encoding="utf-8").read()
        for m in re.finditer(r"\b(PyErr_Format|PyUnicode_FromFormat|PyErr_WarnFormat)\s*\((.*?)\);", src, re.S):
            fmt = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2)))
            for conv in _CONV.findall(fmt):
                if not _OK.fullmatch(conv):
                    bad.append("%s:%d: %s" % (os.path.basename(path), src[:m.start()].count("\n") + 1, conv))
    assert not bad, bad


@pytest.mark.parametrize("kwargs, name, shown", [
    (dict(rate_stuck_HGS=2.0), "rate_stuck_HGS", "got 2"),
    (dict(rate_stuck_LGS=-0.5), "rate_stuck_LGS", "got -0.5"),
    (dict(write_variation=-1.0), "write_variation", "got -1"),
    (dict(HGS=1e-7, LGS=1e-5), "LGS", "LGS=1e-05, HGS=1e-07"),
])
def test_float_arguments_in_messages_are_formatted(kwargs, name, shown):
    codes = np.zeros((2, 4, 4), np.uint8)
    with pytest.raises(ValueError) as e:
        pyfastpim.program_weights(codes, [1, 1], 4, **kwargs)
    msg = str(e.value)
    assert name in msg and shown in msg and "%g" not in msg


def _run(code, env=None, cwd=None):
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([PKG_ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_extension_does_not_link_opencl():
    """The ICD loader is opened at run time: _core's dynamic section must not need it."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    r = subprocess.run([readelf, "-d", pyfastpim._core.__file__], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", r.stdout)
    assert needed and not [n for n in needed if "OpenCL" in n], needed


def test_extension_uses_openblas_only_for_lapacks_dgbsv():
    """setup.py and the README say OpenBLAS is linked for one LAPACK routine, dgbsv (the IR-drop
    solver's last resort; the attention products are our own GEMM): of the symbols _core leaves
    undefined, libopenblas defines only dgbsv_ (no cblas_* or other BLAS call). Dropping OpenBLAS
    would need that banded LU written here first."""
    nm, readelf = shutil.which("nm"), shutil.which("readelf")
    if nm is None or readelf is None:
        pytest.skip("nm / readelf (binutils) is not installed")
    r = subprocess.run([readelf, "-d", pyfastpim._core.__file__], capture_output=True, text=True)
    assert "[libopenblas.so.0]" in r.stdout, r.stdout
    lib = [line.split("=>")[1].split()[0] for line in
           subprocess.run(["ldd", pyfastpim._core.__file__], capture_output=True, text=True).stdout.splitlines()
           if line.strip().startswith("libopenblas.so.0 =>")]
    assert lib, "ldd does not resolve libopenblas.so.0"

    def symbols(*args):
        out = subprocess.run([nm, "-D", *args], capture_output=True, text=True, check=True).stdout
        return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    from_openblas = symbols("--undefined-only", pyfastpim._core.__file__) & symbols("--defined-only", lib[0])
    assert from_openblas == {"dgbsv_"}, sorted(from_openblas)


def test_without_the_opencl_library_import_and_cpu_work_and_devices_say_why(tmp_path):
    """PYFASTPIM_OPENCL_LIBRARY points the loader at a missing file: a machine without OpenCL."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # a numpy-only install (Debian's torch itself maps libOpenCL)\n"
        "import numpy as np, pyfastpim\n"
        "from pyfastpim import DPETensor, dpe_matmul\n"
        "assert [d['device'] for d in pyfastpim.devices()] == ['cpu']\n"
        "rng = np.random.default_rng(0)\n"
        "x, w = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)\n"
        "y = np.asarray(dpe_matmul(x, w, DPETensor()))\n"
        "assert y.shape == (4, 8) and np.corrcoef(y.ravel(), (x @ w).ravel())[0, 1] > 0.9\n"
        "msg = pyfastpim._core.cl_library_error()\n"
        "assert 'libOpenCL-missing.so.1' in msg and 'ocl-icd-libopencl1' in msg, msg\n"
        "for dev in ('opencl', 'opencl:0:0'):\n"
        "    try:\n"
        "        DPETensor(device=dev)\n"
        "    except RuntimeError as e:\n"
        "        assert 'libOpenCL-missing.so.1' in str(e) and 'ocl-icd-libopencl1' in str(e), e\n"
        "    else:\n"
        "        raise AssertionError(dev)\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libOpenCL' not in maps, 'libOpenCL is mapped'\n"
        "print('ok')\n")
    _run_without_opencl(code, tmp_path)


def _run_without_opencl(code, tmp_path):
    """Runs code in a child whose OpenCL ICD loader is a missing file; it must print 'ok'."""
    env = dict(os.environ, PYFASTPIM_OPENCL_LIBRARY=str(tmp_path / "libOpenCL-missing.so.1"))
    r = _run(code, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr[-3000:]


def test_without_the_opencl_library_opening_a_device_directly_names_the_library(tmp_path):
    """pyfastpim.OpenCLDevice(P, D) (no device string) on a machine without the ICD loader: the
    RuntimeError names the missing library and its package, as DPETensor(device=...) does, not an
    empty platform list (the loader was never loaded, so it listed nothing)."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import pyfastpim\n"
        "def message(p, d):\n"
        "    try:\n"
        "        pyfastpim.OpenCLDevice(p, d)\n"
        "    except RuntimeError as e:\n"
        "        return str(e)\n"
        "for m in (message(0, 0), message(1, 2)):\n"
        "    assert 'libOpenCL-missing.so.1' in m and 'ocl-icd-libopencl1' in m and 'lists none' not in m, m\n"
        "print('ok')\n")
    _run_without_opencl(code, tmp_path)


def test_unbuilt_source_tree_gives_a_clear_import_error(tmp_path):
    src = tmp_path / "checkout"
    shutil.copytree(os.path.dirname(os.path.abspath(pyfastpim.__file__)), src / "pyfastpim",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    (src / "setup.py").write_text("# a source tree\n")
    r = subprocess.run([sys.executable, "-c", "import pyfastpim"], cwd=src, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=""))
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: pyfastpim's C extension") and "not built" in last, r.stderr
    assert "circular import" not in r.stderr and "pip install ." in last


def _load_setup():
    path = os.path.join(ROOT, "setup.py")
    if not os.path.exists(path):
        pytest.skip("no setup.py here (installed package)")
    pytest.importorskip("setuptools", reason="setup.py needs setuptools (a fresh 3.12+ venv has none)")
    spec = importlib.util.spec_from_file_location("pyfastpim_setup", path)
    mod = importlib.util.module_from_spec(spec)
    cwd = os.getcwd()
    os.chdir(ROOT)  # setup.py globs csrc/ relative to the working directory, as setuptools runs it
    try:
        spec.loader.exec_module(mod)  # defines the helpers; setup() only runs as __main__
    finally:
        os.chdir(cwd)
    return mod


@pytest.mark.skipif(SANITIZED, reason="compiler probes; the regular suite covers them")
def test_build_precheck_names_missing_headers_libraries_and_debian_packages(monkeypatch):
    setup = _load_setup()
    inc, lib = setup.build_paths()
    setup.precheck(inc, lib)  # everything present on this machine: no exception
    monkeypatch.setattr(setup, "REQUIREMENTS", setup.REQUIREMENTS + [
        ("pf_no_such_dir/pf_no_such.h", None, None, "pf-fake-header-dev"),
        ("stdio.h", "pf_no_such_lib", None, "pf-fake-lib-dev")])
    with pytest.raises(SystemExit) as e:
        setup.precheck(inc, lib)
    msg = str(e.value)
    assert "<pf_no_such_dir/pf_no_such.h> (Debian package: pf-fake-header-dev)" in msg
    assert "libpf_no_such_lib.so (Debian package: pf-fake-lib-dev)" in msg
    assert "apt install pf-fake-header-dev pf-fake-lib-dev" in msg
    assert "cblas.h" not in msg  # what is present is not listed


def test_license_metadata_matches_the_setuptools_in_use():
    setup = _load_setup()
    import setuptools
    meta = setup.license_metadata()
    if int(setuptools.__version__.split(".")[0]) >= 77:
        assert meta == {"license_expression": "MIT"}
    else:
        assert meta == {"license": "MIT"}
    assert os.path.exists(os.path.join(ROOT, "LICENSE"))


def test_demo_without_its_optional_dependencies_says_what_to_install(tmp_path):
    code = ("import sys\n"
            "sys.modules['torch'] = None\n"
            "sys.modules['sklearn'] = None\n"
            "from pyfastpim.__main__ import main\n"
            "sys.exit(main(['demo', '--quick']))\n")
    r = _run(code, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "needs torch, sklearn" in r.stderr and "pip install torch scikit-learn" in r.stderr
    assert "python3-torch python3-sklearn" in r.stderr and "Traceback" not in r.stderr


def test_numpy_only_use_does_not_import_torch():
    """SlicedData() imported torch (about 1.5 s) for its default device and slice constants; a
    NumPy-only program now never imports it, and the attributes still come as torch on access."""
    code = (
        "import sys\n"
        "import numpy as np, pyfastpim\n"
        "rng = np.random.default_rng(0)\n"
        "x, w = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)\n"
        "eng = pyfastpim.DPETensor(wire_resistance=1.0)\n"
        "xs = pyfastpim.SlicedData((1, 1, 2, 2), paral_size=(1, 32), quant_gran=(1, 32))\n"
        "ws = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))\n"
        "xs.slice_data_imp(eng, x); ws.slice_data_imp(eng, w)\n"
        "y = eng(xs, ws); y2 = pyfastpim.dpe_matmul(x, w, eng); y3, _ = eng.forward_linear(x, ws, (1, 1, 2, 2))\n"
        "t = ws.t(); r = repr(xs) + repr(ws) + repr(eng) + repr(t)\n"
        "ctx = pyfastpim.AttentionContext(update_rate=0.5, strength=1.0)\n"
        "ctx.update_outgoing(x, x); ctx.incoming = ctx.outgoing; z = ctx.apply(x)\n"
        "assert all(type(a) is np.ndarray for a in (y, y2, y3, z)), [type(a) for a in (y, y2, y3, z)]\n"
        "assert 'device=cpu' in r, r\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "import torch\n"
        "assert xs.device == torch.device('cpu') and isinstance(ws.sliced_weights, torch.Tensor)\n"
        "assert ws.sliced_weights.tolist() == [1, 4, 16, -32] and ws.sliced_max_weights.tolist() == [3, 3, 1, 1]\n"
        "assert isinstance(xs.max_data, torch.Tensor)\n"
        "print('ok')\n")
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr[-3000:]


def test_command_line_info_lists_devices_and_a_missing_command_is_named(tmp_path):
    # `python -m pyfastpim info` ("print build and device information") printed no device at all, and
    # `python -m pyfastpim` without a command said "the following arguments are required: cmd", a name
    # the usage line never showed
    env = dict(os.environ, PYFASTPIM_OPENCL_LIBRARY=str(tmp_path / "libOpenCL-missing.so.1"))
    r = _run("import sys; from pyfastpim.__main__ import main; sys.exit(main(['info']))", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "pyfastpim %s (" % pyfastpim.__version__ in r.stdout and "cpu: isa " in r.stdout, r.stdout
    assert "opencl: no device (" in r.stdout and "libOpenCL-missing.so.1" in r.stdout, r.stdout
    r = _run("import sys; from pyfastpim.__main__ import main; sys.exit(main(['info']))", cwd=tmp_path)
    opencl = [d["device"] for d in pyfastpim.devices() if d["device"] != "cpu"]
    for dev in opencl:
        assert "\n%s: " % dev in r.stdout, r.stdout
    r = _run("import sys; from pyfastpim.__main__ import main; sys.exit(main([]))", cwd=tmp_path)
    assert r.returncode == 2 and "required: {demo,info}" in r.stderr and "cmd" not in r.stderr, r.stderr
