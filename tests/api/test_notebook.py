"""Notebook-grade objects: the example notebook runs, reprs say what an object is, the demo
draws on its own Figure, progress bars stay off where output is captured."""
import importlib
from html import escape as html_escape
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import pyfastpim
from pyfastpim import DPETensor, SlicedData

from helpers import ROOT  # noqa: E402  (the checkout)
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))
NOTEBOOK = os.path.join(ROOT, "examples", "quickstart.ipynb")


def test_example_notebook_executes_with_its_plot_and_tables(tmp_path, monkeypatch):
    if not os.path.exists(NOTEBOOK):
        pytest.skip("examples/ is not here (installed package)")
    nbformat = pytest.importorskip("nbformat", reason="nbformat/nbclient not installed (Debian: python3-nbclient)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (Debian: python3-nbclient)")
    pytest.importorskip("ipykernel", reason="ipykernel not installed (Debian: python3-ipykernel)")
    pytest.importorskip("matplotlib", reason="the notebook plots with matplotlib")
    # a kernel spec running this interpreter, importing the pyfastpim under test
    spec_dir = tmp_path / "jupyter" / "kernels" / "pyfastpim-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pyfastpim test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([PKG_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="pyfastpim-test",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    data = [o.get("data", {}) for o in outputs]
    pngs = [d["image/png"] for d in data if "image/png" in d]
    assert len(pngs) == 1 and len(pngs[0]) > 5000  # the SNR figure, base64
    htmls = [d["text/html"] for d in data if "text/html" in d]
    assert any("<table>" in h and "read_variation" in h for h in htmls)      # the engine
    assert any("<table>" in h and "shift weight" in h for h in htmls)       # the sliced weights
    text = "".join(o.get("text", "") for o in outputs)
    snr = float(text.split("SNR against the float product: ")[1].split()[0])
    assert snr > 10
    assert "(0, 0) (1, %d)" % (32 * 256 * 4) in text  # no host copy; one counted float16 conversion


def _engine_and_data():
    e = DPETensor(g_level=64, read_variation={i: 0.01 + 0.001 * i for i in range(64)}, seed=3)
    w = SlicedData([1, 2, 3], is_weight=True, paral_size=(16, 16), quant_gran=(16, 16))
    return e, w


def test_engine_repr_is_compact_and_names_the_device():
    e, _ = _engine_and_data()
    r = repr(e)
    assert "device='cpu'" in r and "g_level=64" in r
    assert "read_variation={0.01..0.073 over 64 levels}" in r
    assert r.count(":") == 0  # no per-level dict entries
    assert "read_variation=0.02," in repr(DPETensor())
    html = e._repr_html_()
    assert html.count("<tr>") == len(r.split(", ")) + 2  # header, one row per field, the per-level sigmas
    assert "63: 0.073" in html


def test_engine_repr_shows_a_non_number_attribute_as_it_is():
    # the engine's attributes are assignable (MemIntelli's); the repr formatted them with %g / %d, so
    # print(engine) after e.g. engine.vnoise = "0.1" raised a bare "must be real number, not str"
    for name, value in (("vnoise", "0.1"), ("g_level", "16"), ("HGS", [1e-5]), ("radc", "256"),
                        ("rdac", None), ("seed", "x")):
        e = DPETensor()
        setattr(e, name, value)
        assert "%s=%r," % (name, value) in repr(e), (name, repr(e))
        assert "<td>%s</td><td>%s</td>" % (name, html_escape(repr(value))) in e._repr_html_()


def test_sliced_repr_says_kind_shape_slicing_and_programming():
    e, w = _engine_and_data()
    assert repr(w).startswith("SlicedData(weights, not sliced yet, slice_method=(1, 2, 3) (6 bits, INT)")
    w.slice_data_imp(e, np.ones((40, 24), np.float32))
    r = repr(w)
    assert "shape=(40, 24)" in r and "paral_size=(16, 16)" in r and "granule=(16, 16)" in r
    assert "programmed: g_level=64" in r and "seed=3" in r
    x = SlicedData([1, 3], bw_e=4, paral_size=(1, 16), quant_gran="per-row")
    x.slice_data_imp(e, np.ones((2, 3, 16), np.float32))
    r = repr(x)
    assert r.startswith("SlicedData(input, shape=(2, 3, 16)") and "(4 bits, BFP)" in r and "programmed" not in r
    html = w._repr_html_()
    # one row per slice, most significant first: sign bit 5, then bits 3..4, then 0..2
    assert html.count("<tr>") == 4
    assert "<td>0</td><td>1</td><td>5</td><td>1</td><td>-32</td><td>sign</td>" in html
    assert "<td>2</td><td>3</td><td>0..2</td><td>7</td><td>1</td>" in html


def test_layer_repr_shows_device_and_programming():
    torch = pytest.importorskip("torch", reason="layers are torch modules")
    from pyfastpim.nn import LinearMem
    layer = LinearMem(DPETensor(), 32, 4, [1, 1, 2, 2], [1, 1, 2, 2])
    assert repr(layer).endswith("device=cpu, programmed)")
    with torch.no_grad():
        layer.weight.mul_(2)  # a changed weight is re-programmed on the next forward
    assert repr(layer).endswith("device=cpu, re-programs on next forward)")
    with torch.no_grad():
        layer(torch.ones(2, 32))
    assert repr(layer).endswith("device=cpu, programmed)")


def test_layer_repr_shows_every_setting_and_the_engines():
    # MemIntelli's layers print "LinearMem()" / "Conv2dMem()"; pyfastpim's printed the features and slicing
    # but not the quantization granularities nor the engine the layer computes on, so two layers differing
    # only in those (or in g_level, the converters or noise) printed alike
    pytest.importorskip("torch", reason="layers are torch modules")
    from pyfastpim.nn import Conv2dMem, LinearMem
    eng = DPETensor(g_level=8, rdac=8, radc=[64, 128, 256], write_variation=0.0, read_variation=0.0, vnoise=0.0,
                    rate_stuck_HGS=0.0)
    lin = LinearMem(eng, 32, 4, [1, 1, 2], [1, 1, 2], bias=False, input_quant_gran="per-row",
                    weight_quant_gran=(64, 4), input_paral_size=(1, 16), weight_paral_size=(16, 4), bw_e=8)
    assert repr(lin) == ("LinearMem(in_features=32, out_features=4, bias=False, input_slice=(1, 1, 2), "
                         "weight_slice=(1, 1, 2), bw_e=8, input_paral_size=(1, 16), weight_paral_size=(16, 4), "
                         "input_quant_gran=per-row, weight_quant_gran=(64, 4), "
                         "engine=(g_level=8, rdac=8, radc=[64, 128, 256], noise=off), device=cpu, programmed)")
    conv = Conv2dMem(DPETensor(), 3, 8, 3, [1, 1, 2, 2], [1, 1, 2, 2], padding=1)
    r = repr(conv)
    for field in ("3, 8, kernel_size=(3, 3)", "padding=(1, 1)", "bias=True", "input_slice=(1, 1, 2, 2)",
                  "input_quant_gran=(1, 32), weight_quant_gran=(32, 32)",
                  "engine=(g_level=16, rdac=16, radc=256, noise=on)", "device=cpu, programmed)"):
        assert field in r, (field, r)
    from pyfastpim.memintelli.NN_layers import LinearMem as MiLinearMem
    from pyfastpim.memintelli.pimpy import DPETensor as MiDPETensor
    mi = MiLinearMem(MiDPETensor(device="cpu"), 20, 10, [1, 1, 2, 4], [1, 1, 2, 4], device="cpu")
    assert "in_features=20, out_features=10" in repr(mi) and "engine=(g_level=16" in repr(mi)


def test_layer_repr_survives_an_invalid_input_slice_method():
    # input_slice_method is read at each call (MemIntelli's attribute, assignable); the repr read it through
    # the forward's check, so after assigning an invalid one print(model) raised instead of showing it
    torch = pytest.importorskip("torch", reason="layers are torch modules")
    from pyfastpim.nn import LinearMem
    lin = LinearMem(DPETensor(), 8, 4, [1, 1, 2], [1, 1, 2])
    lin.input_slice_method = torch.tensor([2, 2])
    assert "input_slice=tensor([2, 2]) (invalid), weight_slice=(1, 1, 2)" in repr(lin)
    with pytest.raises(ValueError, match="^argument 'input_slice_method': the first"):
        lin(torch.ones(2, 8))


def test_clear_errors_for_read_variation_none_and_shape_mismatch():
    with pytest.raises(TypeError) as e:  # a wrong type (tests/api/test_scalar_arguments.py)
        DPETensor(read_variation=None)
    msg = str(e.value)
    assert "read_variation" in msg and "got None" in msg and "or None" not in msg
    engine = DPETensor()
    with pytest.raises(ValueError, match=r"input \(4, 64\) has 64 columns, weights \(96, 8\) have 96 rows"):
        pyfastpim.dpe_matmul(np.ones((4, 64), np.float32), np.ones((96, 8), np.float32), engine)


def test_demo_draws_on_its_own_figure_without_pyplot_or_backend_change():
    pytest.importorskip("matplotlib")
    code = (
        "import sys, matplotlib\n"
        "backend = matplotlib.get_backend()\n"
        "from pyfastpim import demo\n"
        "res = {('float', 'MLP', None): 0.9, ('float', 'CNN', None): 0.95}\n"
        "for kind, vals in (('adc', (4, 8)), ('read', (0.0, 0.2))):\n"
        "    for m in ('MLP', 'CNN'):\n"
        "        for v in vals:\n"
        "            res[(kind, m, v)] = [0.5 + v / 100, 0.6]\n"
        "fig = demo.plot_figure(res)\n"
        "from matplotlib.figure import Figure\n"
        "assert isinstance(fig, Figure) and len(fig.axes) == 4, fig\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "assert matplotlib.get_backend() == backend, (backend, matplotlib.get_backend())\n"
        "demo.plot(sys.argv[1], res)\n"
        "print('ok')\n")
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "pyfastpim-demo-%d.png" % os.getpid())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               MPLBACKEND="module://matplotlib_inline.backend_inline")
    env.pop("PYFASTPIM_PROGRESS", None)
    r = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True, timeout=300, env=env,
                       cwd=os.path.dirname(out))
    try:
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
        with open(out, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    finally:
        if os.path.exists(out):
            os.remove(out)


def test_progress_is_off_when_captured_and_optional(monkeypatch):
    from pyfastpim import _progress
    monkeypatch.delenv("PYFASTPIM_PROGRESS", raising=False)
    bar = _progress.progress(3, "x")  # pytest captures stderr: not a terminal
    assert isinstance(bar, _progress._Silent)
    monkeypatch.setenv("PYFASTPIM_PROGRESS", "1")
    try:
        importlib.import_module("tqdm")
        assert not isinstance(_progress.progress(3, "x"), _progress._Silent)
    except ImportError:
        assert isinstance(_progress.progress(3, "x"), _progress._Silent)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with _progress.progress(2, "x") as b:  # tqdm missing: silent, same interface
        b.update(2)
    assert b.n == 2
    monkeypatch.setenv("PYFASTPIM_PROGRESS", "0")
    assert isinstance(_progress.progress(3, "x", enable=None), _progress._Silent)


def test_attention_context_repr_shows_its_matrices_shapes():
    # the repr printed the placeholder "outgoing=(D, D)" whatever D was, so a notebook could not tell a
    # context's size from it
    ctx = pyfastpim.AttentionContext(update_rate=0.5, strength=1.0)
    assert repr(ctx).endswith("embed_dim=None, incoming=None, outgoing=None)")
    x = np.ones((4, 24), np.float32)
    ctx.update_outgoing(x, x)
    assert repr(ctx).endswith("incoming=None, outgoing=(24, 24))"), repr(ctx)
    ctx.incoming = ctx.outgoing
    assert "incoming=(24, 24), outgoing=(24, 24)" in repr(ctx)
