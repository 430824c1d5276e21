"""The README's usage example runs as written."""
import os
import re

import pytest

from helpers import ROOT  # noqa: E402  (the checkout)


def test_readme_python_example_runs(capsys):
    pytest.importorskip("torch", reason="the README example uses torch")
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    snr = float(capsys.readouterr().out.split()[-1])
    assert snr > 10  # 6-bit operands through a noisy crossbar (with stuck cells) still track the float product
