"""Progress bars (tqdm, optional) in pyfastpim.nn.convert and the evaluation helper: off where output
is captured, on for a terminal or a notebook, a bar over exactly the layers / batches done."""
import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="convert() and evaluate() work on torch models")
import torch.nn as nn  # noqa: E402

import pyfastpim  # noqa: E402
from pyfastpim import _progress  # noqa: E402
from helpers import NOISE_OFF  # noqa: E402


class Recorder:
    """Stands in for tqdm's class: records every bar made and its updates."""
    bars = []

    def __init__(self, total=None, desc=None, unit="it", leave=True, file=None, delay=0.0):
        self.total, self.desc, self.unit, self.delay, self.n, self.closed = total, desc, unit, delay, 0, False
        Recorder.bars.append(self)

    def update(self, n=1):
        self.n += n

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@pytest.fixture
def recorder(monkeypatch):
    Recorder.bars = []
    monkeypatch.setattr(_progress, "_tqdm_class", lambda: Recorder)
    monkeypatch.delenv("PYFASTPIM_PROGRESS", raising=False)
    return Recorder


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.grouped = nn.Conv2d(4, 4, 3, padding=1, groups=2)  # not mapped: still one visited layer
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(4 * 8 * 8, 16), nn.ReLU())
        self.shared = nn.Linear(16, 16)
        self.again = self.shared  # a shared module is converted (and counted) once
        self.skip = nn.Sequential(nn.Linear(16, 16))  # excluded below
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.again(self.shared(self.body(self.grouped(self.conv(x))))))


def _engine():
    return pyfastpim.DPETensor(g_level=4, rdac=4, radc=256, seed=0, **NOISE_OFF)


def _convert(model, warns=None, **kw):
    """convert(model); Net's grouped convolution warns, unless `warns` is False (a convert refused before it
    reaches the layers: pytest >= 8 fails a pytest.warns block left by an exception without the warning)."""
    warns = isinstance(model, Net) if warns is None else warns
    with pytest.warns(UserWarning, match="grouped|groups") if warns else _nowarn():
        return pyfastpim.nn.convert(model, _engine(), (1, 1, 2), (1, 1, 2), exclude=("skip",), **kw)


class _nowarn:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_convert_bar_counts_every_layer_visited(recorder):
    model = _convert(Net(), progress=True)
    (bar,) = recorder.bars
    # conv, grouped conv (left as it is), body's Linear, the shared Linear once, head: 5; `skip` excluded
    assert bar.total == 5 and bar.n == 5 and bar.closed and bar.unit == "layer" and "convert" in bar.desc
    assert bar.delay > 0  # quick conversions show nothing even where bars are on
    assert isinstance(model.head, pyfastpim.nn.LinearMem) and type(model.skip[0]) is nn.Linear
    single = _convert(nn.Linear(8, 4), progress=True)  # the model itself is the layer
    assert isinstance(single, pyfastpim.nn.LinearMem) and recorder.bars[-1].total == recorder.bars[-1].n == 1


def test_convert_bar_is_off_by_default_where_output_is_captured(recorder, monkeypatch):
    _convert(Net())  # pytest captures stderr: not a terminal, not a notebook
    _convert(Net(), progress=False)
    assert recorder.bars == []
    monkeypatch.setenv("PYFASTPIM_PROGRESS", "1")
    _convert(Net())
    assert len(recorder.bars) == 1
    monkeypatch.setenv("PYFASTPIM_PROGRESS", "0")
    _convert(Net())
    assert len(recorder.bars) == 1


@pytest.mark.parametrize("value", ["true", "on", " 1", "2"])
def test_a_malformed_progress_variable_raises_naming_it(recorder, monkeypatch, value):
    # PYFASTPIM_PROGRESS is '1' / '0' / empty (automatic), as PYFASTPIM_CL_PROFILE: any other value was
    # silently automatic, so PYFASTPIM_PROGRESS=true under captured output showed no bar and said nothing
    monkeypatch.setenv("PYFASTPIM_PROGRESS", value)
    with pytest.raises(ValueError, match="^environment variable PYFASTPIM_PROGRESS: expected '1'.*'0'.*empty"):
        _convert(Net(), warns=False)  # refused before any layer is converted
    with pytest.raises(ValueError, match="PYFASTPIM_PROGRESS"):
        _progress.enabled()
    assert _progress.enabled(True) is True and _progress.enabled(False) is False  # not read when forced
    _convert(Net(), progress=False)
    assert recorder.bars == []
    for ok in ("", "0"):
        monkeypatch.setenv("PYFASTPIM_PROGRESS", ok)
        _convert(Net())
    assert recorder.bars == []


def test_bar_on_for_a_terminal_or_a_notebook(monkeypatch):
    monkeypatch.delenv("PYFASTPIM_PROGRESS", raising=False)

    class Tty:
        def isatty(self):
            return True

        def write(self, s):
            pass

        def flush(self):
            pass
    monkeypatch.setattr(sys, "stderr", Tty())
    assert _progress.enabled() and not _progress.enabled(False)
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(isatty=lambda: False))
    assert not _progress.enabled()
    shell_cls = type("ZMQInteractiveShell", (), {})
    fake_ipython = types.SimpleNamespace(get_ipython=lambda: shell_cls())
    monkeypatch.setitem(sys.modules, "IPython", fake_ipython)
    assert _progress.in_notebook() and _progress.enabled()
    terminal_cls = type("TerminalInteractiveShell", (), {})  # IPython in a terminal without a tty: off
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: terminal_cls()))
    assert not _progress.in_notebook() and not _progress.enabled()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert not _progress.enabled()


def test_evaluate_bar_counts_batches(recorder):
    from pyfastpim import demo
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    x, y = torch.randn(70, 1, 4, 4), torch.randint(0, 3, (70,))
    acc, spb = demo.evaluate(model, x, y, batch=32, progress=True)
    (bar,) = recorder.bars
    assert bar.total == bar.n == 3 and bar.unit == "batch" and bar.closed  # 32 + 32 + 6
    with torch.no_grad():
        assert acc == pytest.approx(float((model(x).argmax(1) == y).float().mean()))
    assert spb >= 0
    demo.evaluate(model, x, y, batch=32)  # default: captured here, no bar
    assert len(recorder.bars) == 1


def test_real_tqdm_writes_the_bar_to_stderr(monkeypatch, capsys):
    pytest.importorskip("tqdm", reason="tqdm is optional")
    monkeypatch.delenv("PYFASTPIM_PROGRESS", raising=False)
    bar = _progress.progress(4, "pyfastpim.nn.convert", True, unit="layer")
    with bar:
        bar.update(4)
    err = capsys.readouterr().err
    assert "pyfastpim.nn.convert" in err and "/4 [" in err and "layer" in err


def test_without_tqdm_the_bar_is_silent(recorder, monkeypatch):
    monkeypatch.undo()  # the real _tqdm_class, with tqdm made unimportable
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.std", None)
    monkeypatch.setitem(sys.modules, "tqdm.notebook", None)
    assert _progress._tqdm_class() is None
    model = _convert(Net(), progress=True)  # still converts
    assert isinstance(model.head, pyfastpim.nn.LinearMem)
