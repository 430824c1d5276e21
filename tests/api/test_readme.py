"""The README's usage example runs as written, as a new user runs it: in a fresh interpreter whose
working directory is outside the checkout, with the package under test importable."""
import os
import re
import subprocess
import sys

import pytest

from helpers import CHILD_TIMEOUT, PKG_ROOT, ROOT  # noqa: E402  (the checkout, the package under test)


def test_readme_python_example_runs(tmp_path):
    pytest.importorskip("torch", reason="the README example uses torch")
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    for i, code in enumerate(blocks):
        script = tmp_path / ("readme_%d.py" % i)
        script.write_text(code)
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=str(tmp_path),
                           env=dict(os.environ, PYTHONPATH=PKG_ROOT), timeout=CHILD_TIMEOUT)
        assert r.returncode == 0, r.stdout + r.stderr
    snr = float(r.stdout.split()[-1])
    assert snr > 10  # 6-bit operands through a noisy crossbar (with stuck cells) still track the float product
