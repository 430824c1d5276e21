"""The digits demo: ``python3 -m pyfastpim demo --quick --plot out.png``."""
import os
import re
import subprocess
import sys

import pytest


def test_demo_quick_prints_table_and_writes_plot(tmp_path):
    pytest.importorskip("torch", reason="the demo trains torch models")
    pytest.importorskip("sklearn", reason="the demo uses scikit-learn's digits")
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    import pyfastpim
    if not hasattr(pyfastpim, "DPETensor"):
        pytest.skip("pyfastpim.DPETensor not in this build")
    png = tmp_path / "demo.png"
    # the child imports the same pyfastpim as this process (the checkout or the installed package)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg_root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "-m", "pyfastpim", "demo", "--quick", "--plot", str(png)], cwd=tmp_path,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    lines = out.splitlines()
    header = [i for i, line in enumerate(lines) if line.startswith("setting")]
    assert header, out
    rows = {}
    for line in lines[header[0] + 2:]:
        if not line.strip():
            break
        label, rest = line[:20].strip(), line[20:].split()
        rows[label] = (float(rest[0].rstrip("%")), float(rest[1].rstrip("%")))
    assert set(rows) == {"float (PyTorch)", "noise off", "MemIntelli defaults", "noisier devices",
                         "noisier, fine-tuned"}
    for mlp, cnn in rows.values():
        assert 70.0 <= mlp <= 100.0 and 70.0 <= cnn <= 100.0
    # noise off with 8-bit slices is within a few points of the float model
    assert abs(rows["noise off"][0] - rows["float (PyTorch)"][0]) <= 3.0
    # device physics table: CNN accuracy per wire resistance and per drift time
    phys = {}
    for line in lines:
        m = re.match(r"\s+(IR drop, wire resistance|drift, t since programming|drift \+ global compensation)\s+(.*)$",
                     line)
        if m:
            phys[m.group(1)] = [(float(v), float(a)) for v, a in re.findall(r"([0-9.e+]+) (?:ohm|s): ([0-9.]+)%",
                                                                             m.group(2))]
    assert set(phys) == {"IR drop, wire resistance", "drift, t since programming", "drift + global compensation"}, out
    assert [v for v, _ in phys["IR drop, wire resistance"]] == [0.0, 20.0]
    assert phys["IR drop, wire resistance"][0][1] == rows["noise off"][1]  # 0 ohm is the noise-off CNN
    for points in phys.values():
        assert points and all(50.0 <= acc <= 100.0 for _, acc in points)
    assert "\r" not in out and "it/s" not in proc.stderr.decode()        # no progress bar when not a tty
    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10000
