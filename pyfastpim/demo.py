"""The digits demo (``python3 -m pyfastpim demo``, ``make run``).

Trains a small MLP and a small CNN in float on scikit-learn's 8x8 handwritten digits (shipped
with scikit-learn, nothing is downloaded), converts both with :func:`pyfastpim.nn.convert`, and
prints the test accuracy of the float models and of the converted models under several engine
settings (noise off, MemIntelli's defaults, noisier devices, fewer ADC bits) with the time per
batch. ``--plot out.png`` also sweeps the ADC resolution and the read variation and draws the
accuracy curves (mean and spread over engine seeds); ``--quick`` runs a reduced set (for tests).

A second table shows the CNN under device physics with noise otherwise off: accuracy against
the wire resistance (IR drop, ohms per wire segment) and against the time since programming
(conductance drift, with and without global drift compensation); ``--plot`` draws both curves
as well.

The last row fine-tunes the converted models on the noisy engine for a few epochs
(hardware-aware training, MemIntelli's example 3): the straight-through gradients flow through
the crossbar layers and the weights are re-programmed automatically after every optimizer step.
"""
import copy
import time

import numpy as np

INPUT_SLICE = (1, 1, 2, 4)
WEIGHT_SLICE = (1, 1, 2, 4)
BATCH = 120
SEED = 0

NOISY = dict(write_variation=0.1, read_variation=0.1, vnoise=0.1, rate_stuck_HGS=0.01, rate_stuck_LGS=0.01)
FINETUNE_LABEL = "noisier, fine-tuned"
FINETUNE_EPOCHS = 1
NOISE_OFF = dict(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0)


def settings(quick=False):
    """(label, DPETensor keyword arguments) of the table rows after the float model."""
    rows = [("noise off", dict(NOISE_OFF)),
            ("MemIntelli defaults", {})]
    if not quick:
        rows += [("6-bit ADC", dict(radc=2 ** 6)),
                 ("4-bit ADC", dict(radc=2 ** 4))]
    rows += [("noisier devices", dict(NOISY)),
             (FINETUNE_LABEL, dict(NOISY))]
    return rows


def describe(kw):
    """A row's engine settings in words (its DPETensor keyword arguments)."""
    if not kw:
        return "DPETensor() defaults"
    if kw == NOISE_OFF:
        return "all noise and faults 0"
    return ", ".join("%s=%s" % (k, ("2**%d" % int(np.log2(v))) if k == "radc" else v) for k, v in kw.items())


def load_data():
    """Digits scaled to [0, 1]: (x_train, y_train, x_test, y_test) torch tensors, a fixed stratified split."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, digits.target, test_size=0.2, random_state=SEED, stratify=digits.target)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr).long(), torch.from_numpy(xte), torch.from_numpy(yte).long())


def build_mlp():
    """The demo's float MLP for 8x8 digits: 64-128-64-10 with ReLUs."""
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))


def build_cnn():
    """The demo's float CNN for 8x8 digits (two 3x3 conv layers with pooling, then a linear layer)."""
    from torch import nn
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)),
                         nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),     # 16 x 4 x 4
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),    # 32 x 2 x 2
                         nn.Flatten(), nn.Linear(128, 10))


def train(model, x, y, epochs=30, lr=1e-2, batch=64):
    """Plain float training with Adam (seconds)."""
    import torch
    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    return model


def evaluate(model, x, y, batch=BATCH, progress=None):
    """(accuracy, seconds per batch) of ``model`` on ``x``, ``y`` under torch.no_grad().

    ``progress``: a bar over the batches (tqdm, when installed); None shows it only on a terminal
    or in a notebook and only for evaluations longer than half a second."""
    import torch
    from ._progress import progress as progress_bar
    correct, elapsed, n = 0, 0.0, 0
    with torch.no_grad(), progress_bar(-(-len(x) // batch), "evaluate", progress, unit="batch", delay=0.5) as bar:
        model(x[:batch])  # warm-up, not timed
        for i in range(0, len(x), batch):
            t0 = time.perf_counter()
            out = model(x[i:i + batch])
            elapsed += time.perf_counter() - t0
            correct += int((out.argmax(1) == y[i:i + batch]).sum())
            n += 1
            bar.update(1)
    return correct / len(x), elapsed / n


def on_engine(model, engine_kw, seed=SEED):
    """A converted copy of the float ``model`` running on a fresh engine with ``engine_kw``."""
    import pyfastpim
    import pyfastpim.nn
    engine = pyfastpim.DPETensor(seed=seed, **engine_kw)
    return pyfastpim.nn.convert(copy.deepcopy(model), engine, INPUT_SLICE, WEIGHT_SLICE, progress=False)


def sweeps(quick=False):
    """The plot's sweeps: ADC bits (MemIntelli's default noise) and read variation (noise otherwise off)."""
    adc_bits = [4, 8] if quick else [3, 4, 5, 6, 7, 8, 10, 12]
    read_var = [0.0, 0.2] if quick else [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5]
    return ([("adc", b, dict(radc=2 ** b)) for b in adc_bits] +
            [("read", r, dict(NOISE_OFF, read_variation=r)) for r in read_var])


#: Drift model of the physics sweep: G(t) = G(t0) (t/t0)^-nu, nu ~ N(nu_mean, nu_std) per cell.
DRIFT = dict(t0=1.0, nu_mean=0.05, nu_std=0.005)


def physics_sweeps(quick=False):
    """(kind, value, engine kwargs, drift kwargs or None) of the CNN's device-physics sweeps."""
    # with MemIntelli's 0.1-10 uS cells, wires of a few ohms (realistic) change nothing: the sweep
    # goes on until the IR drop costs accuracy
    wires = [0.0, 20.0] if quick else [0.0, 1.0, 10.0, 100.0, 300.0, 1000.0, 3000.0]
    times = [1e4] if quick else [1.0, 1e2, 1e4, 1e6, 1e8, 1e10]
    rows = [("wire", r, dict(NOISE_OFF, wire_resistance=r), None) for r in wires]
    for comp, kind in ((False, "drift"), (True, "drift, compensated")):
        rows += [(kind, t, dict(NOISE_OFF), dict(DRIFT, t_seconds=t, compensation=comp)) for t in times]
    return rows


def on_engine_physics(model, engine_kw, drift_kw, seed=SEED):
    """Like :func:`on_engine`, with the engine drifted as ``drift_kw`` says (None: no drift)."""
    import pyfastpim
    import pyfastpim.nn
    engine = pyfastpim.DPETensor(seed=seed, **engine_kw)
    if drift_kw is not None:
        engine.drift(**drift_kw)
    return pyfastpim.nn.convert(copy.deepcopy(model), engine, INPUT_SLICE, WEIGHT_SLICE, progress=False)


def _progress(total, desc):
    # tqdm when installed and stderr is a terminal (PYFASTPIM_PROGRESS=1/0 forces it on/off)
    from ._progress import progress
    return progress(total, desc)


def plot_figure(results):
    """Accuracy vs ADC bits and vs read variation for both models, and the CNN under IR drop and
    drift, on a new :class:`matplotlib.figure.Figure` (no pyplot, no backend change: a notebook
    displays it, ``fig.savefig`` writes it)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 8), constrained_layout=True)
    axes = fig.subplots(2, 2).ravel()
    for ax, kind, xlabel, title in ((axes[0], "adc", "ADC resolution (bits)", "Accuracy vs ADC bits (default noise)"),
                                    (axes[1], "read", "read variation (sigma)", "Accuracy vs read variation")):
        for name, marker in (("MLP", "o"), ("CNN", "s")):
            pts = sorted((v, 100 * np.mean(accs), 100 * np.min(accs), 100 * np.max(accs))
                         for (k, m, v), accs in results.items() if k == kind and m == name)
            xs, mean, lo, hi = (np.array(c) for c in zip(*pts))
            ax.plot(xs, mean, marker=marker, label=name)
            ax.fill_between(xs, lo, hi, alpha=0.2, color=ax.lines[-1].get_color())
            ax.axhline(100 * results[("float", name, None)], ls="--", lw=0.8,
                       color=ax.lines[-1].get_color(), label="%s float" % name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(title)
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right" if kind == "adc" else "lower left")
    _plot_physics(axes[2], axes[3], results)
    nseeds = len(next(v for k, v in results.items() if k[0] != "float"))
    fig.suptitle("pyfastpim, digits: slices %s (inputs) / %s (weights); mean and min-max over %d engine seed%s"
                 % (INPUT_SLICE, WEIGHT_SLICE, nseeds, "s" if nseeds > 1 else ""), fontsize=11)
    return fig


def plot(path, results):
    """:func:`plot_figure` written to ``path`` (PNG)."""
    plot_figure(results).savefig(path, dpi=100)


def print_physics(results, nseeds):
    """The CNN's device-physics table: accuracy per wire resistance and per drift time."""
    print()
    print("CNN under device physics (noise otherwise off; mean over %d engine seed%s):"
          % (nseeds, "s" if nseeds > 1 else ""))
    for kind, unit in (("wire", "ohm"), ("drift", "s"), ("drift, compensated", "s")):
        pts = sorted((v, 100 * np.mean(a)) for (k, m, v), a in results.items() if k == kind and m == "CNN")
        label = {"wire": "IR drop, wire resistance",
                 "drift": "drift, t since programming",
                 "drift, compensated": "drift + global compensation"}[kind]
        print("  %-30s %s" % (label, "  ".join("%g %s: %.1f%%" % (v, unit, acc) for v, acc in pts)))
    print("  (drift: t0 = %g s, nu = %g +- %g per cell; docs/physics.md)" % (DRIFT["t0"], DRIFT["nu_mean"],
                                                                             DRIFT["nu_std"]))


def _plot_physics(ax_wire, ax_drift, results):
    """CNN accuracy vs wire resistance and vs drift time (panels 3 and 4)."""
    float_acc = 100 * results[("float", "CNN", None)]
    for ax, kinds, xlabel, title in (
            (ax_wire, ("wire",), "wire resistance per segment (ohm)", "CNN: IR drop (noise off)"),
            (ax_drift, ("drift", "drift, compensated"), "time since programming (s)",
             "CNN: drift, nu = %g +- %g (noise off)" % (DRIFT["nu_mean"], DRIFT["nu_std"]))):
        for kind in kinds:
            pts = sorted((v, 100 * np.mean(a), 100 * np.min(a), 100 * np.max(a))
                         for (k, m, v), a in results.items() if k == kind and m == "CNN")
            if not pts:
                continue
            xs, mean, lo, hi = (np.array(c) for c in zip(*pts))
            xplot = np.maximum(xs, 0.5) if kind == "wire" else xs  # log axis: 0 ohm drawn at 0.5
            ax.plot(xplot, mean, marker="s", label=kind)
            ax.fill_between(xplot, lo, hi, alpha=0.2, color=ax.lines[-1].get_color())
        ax.axhline(float_acc, ls="--", lw=0.8, color="gray", label="CNN float")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(title)
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left")


def main(args=None):
    """Run the demo; ``args`` has ``quick`` and ``plot`` (see ``python3 -m pyfastpim demo --help``)."""
    import torch
    # The float models are tiny (8x8 images): torch's own thread pool only adds synchronization
    # (badly so on a busy machine), so torch runs single-threaded here; the engine keeps its threads.
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(args)
    finally:
        torch.set_num_threads(torch_threads)


def _run(args):
    import torch
    quick = bool(getattr(args, "quick", False))
    plot_path = getattr(args, "plot", None)
    t_start = time.perf_counter()
    torch.manual_seed(SEED)
    xtr, ytr, xte, yte = load_data()
    print("pyfastpim demo: scikit-learn digits (8x8), %d train / %d test images, test batches of %d"
          % (len(xtr), len(xte), BATCH))
    print("input_slice=%s weight_slice=%s, crossbars 32x32, engine seed %d" % (INPUT_SLICE, WEIGHT_SLICE, SEED))
    models = {}
    t0 = time.perf_counter()
    for name, build in (("MLP", build_mlp), ("CNN", build_cnn)):
        models[name] = train(build(), xtr, ytr, epochs=20 if quick else 30)
    print("float training of both models: %.1f s" % (time.perf_counter() - t0))

    results = {}
    rows = [("float (PyTorch)", None)] + settings(quick)
    tasks = [(label, kw, name, SEED) for label, kw in rows for name in models]
    seeds = [SEED] if quick else [SEED, SEED + 1, SEED + 2]
    if plot_path:
        tasks += [((kind, value), kw, name, seed) for kind, value, kw in sweeps(quick) for name in models
                  for seed in seeds]
    phys_seeds = seeds if plot_path else [SEED]
    drift_of = {}
    for kind, value, kw, dkw in physics_sweeps(quick):
        drift_of[(kind, value)] = dkw
        tasks += [((kind, value), kw, "CNN", seed) for seed in phys_seeds]
    table = {}
    with _progress(len(tasks), "evaluating") as bar:
        for label, kw, name, seed in tasks:
            if isinstance(label, tuple) and label in drift_of:
                model = on_engine_physics(models[name], kw, drift_of[label], seed)
            else:
                model = models[name] if kw is None else on_engine(models[name], kw, seed)
            if label == FINETUNE_LABEL:  # hardware-aware training on the noisy engine
                train(model, xtr, ytr, epochs=FINETUNE_EPOCHS, lr=1e-3)
            acc, spb = evaluate(model, xte, yte, progress=False)  # one bar: the outer one
            if isinstance(label, tuple):
                results.setdefault((label[0], name, label[1]), []).append(acc)
            else:
                table[(label, name)] = (acc, spb)
                if kw is None:
                    results[("float", name, None)] = acc
            bar.update(1)

    header = "%-20s %9s %9s %11s %11s  %s" % ("setting", "MLP acc", "CNN acc", "MLP ms/bat", "CNN ms/bat",
                                             "engine parameters")
    print()
    print(header)
    print("-" * len(header))
    for label, kw in rows:
        (am, tm), (ac, tc) = table[(label, "MLP")], table[(label, "CNN")]
        what = "-" if kw is None else describe(kw)
        if label == FINETUNE_LABEL:
            what = "as above, then %d epoch of training on the engine" % FINETUNE_EPOCHS
        print("%-20s %8.1f%% %8.1f%% %11.2f %11.2f  %s" % (label, 100 * am, 100 * ac, 1e3 * tm, 1e3 * tc, what))
    print_physics(results, len(phys_seeds))
    if plot_path:
        plot(plot_path, results)
        print("\nplot written to %s" % plot_path)
    print("\ntotal %.1f s" % (time.perf_counter() - t_start))
    return 0
