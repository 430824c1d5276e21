"""`pip install .` builds an importable package from the source tree (the install path of the README)."""
import os
import subprocess
import sys

import pytest

from helpers import ROOT  # noqa: E402  (the checkout)


@pytest.mark.skipif(os.environ.get("PYFASTPIM_SANITIZED") == "1", reason="the regular suite already covers it")
def test_pip_install_builds_an_importable_package(tmp_path):
    if not os.path.exists(os.path.join(ROOT, "setup.py")):
        pytest.skip("run from an installed package: no source tree to install")
    # --no-build-isolation builds with this interpreter's setuptools (Debian: python3-setuptools;
    # a fresh venv on 3.12+ has none, and plain `pip install .` is the path for it)
    # (pyproject's build-system asks setuptools >= 61: older ones, as Python 3.9's ensurepip gives a venv,
    # build the metadata as UNKNOWN and fail; plain `pip install .` fetches a newer one)
    pytest.importorskip("setuptools", minversion="61",
                        reason="--no-build-isolation needs setuptools >= 61 (pyproject's build-system) here")
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--no-cache-dir", "--target", str(target), ROOT],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import pyfastpim, pyfastpim.nn, pyfastpim.memintelli, numpy as np; "
            "print(pyfastpim.__file__); "
            "print(np.asarray(pyfastpim.asarray(np.ones(3, np.float32))).sum())")
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    path, total = r.stdout.split()
    assert path.startswith(str(target)) and float(total) == 3.0
    assert r.stderr == ""
