"""Model-level speed beside MemIntelli: inference batches of a zoo model, same script, either engine.

Usage (run each implementation in its own process; MemIntelli is not part of this repository):

    python3 benchmarks/memintelli_models.py pyfastpim resnet18_cifar 16
    PYTHONPATH=/tmp/memintelli python3 benchmarks/memintelli_models.py memintelli resnet18_cifar 16
    make bench-peers     # every case, each implementation in its own process (MEMINTELLI=/path)

Options: ``--threads N`` sets torch's and pyfastpim's thread counts (default: each library's own
default, which for Debian's torch is 1 thread), ``--repeat N`` timed batches (default 5 for
pyfastpim, 1 for MemIntelli, whose ResNet-18 batch takes minutes), ``--json PATH`` where the result
is appended (default build/peers.json; ``-`` for none). ``benchmarks/report.py --readme README.md``
renders the newest result of each (implementation, case) from that file.

The model and engine settings are those of MemIntelli's examples: 05 (VGG CIFAR), 07 (ResNet CIFAR)
and, for LeNet-5 (which has no example of its own), the MNIST settings of example 02 (engine, slices
(1, 1, 2), crossbar and quantization sizes; the LeNet5 class's default 4-bit slices would need 16
conductance levels, example 02's engine has 4). Weights are random (the speed does not depend on
them). After one warm-up batch of one image, each timed batch records wall time and process CPU time
(all threads; CPU / wall above 1 shows the threads at work, below the thread count shows other load
on the machine), plus the process's peak RSS."""
import argparse
import datetime
import importlib
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded by path too (tests)
from bench_machine import cpu_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_RESNET_ENGINE = dict(HGS=1e-5, LGS=1e-8, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0,
                      read_variation=0.05, vnoise=0.0, rdac=2 ** 1, g_level=2 ** 1, radc=2 ** 6)
_VGG_ENGINE = dict(HGS=1e-5, LGS=1e-8, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0,
                   read_variation=0.05, vnoise=0.0, rdac=2 ** 2, g_level=2 ** 2, radc=2 ** 10)
_MNIST_ENGINE = dict(HGS=1e-5, LGS=1e-8, write_variation=0.05, rate_stuck_HGS=0.005, rate_stuck_LGS=0.005,
                     read_variation={0: 0.05, 1: 0.05, 2: 0.05, 3: 0.05}, vnoise=0.05, rdac=2 ** 2, g_level=2 ** 2,
                     radc=2 ** 12)

# name: dict(factory (zoo function or class), model kwargs, engine kwargs, layer kwargs, input shape, batch)
CASES = {
    "lenet5_mnist": dict(
        factory="LeNet5", kwargs={}, engine=_MNIST_ENGINE, image=(1, 28, 28), batch=64,
        layer=dict(input_slice=(1, 1, 2), weight_slice=(1, 1, 2), input_paral_size=(1, 32),
                   weight_paral_size=(32, 32), input_quant_gran=(1, 64), weight_quant_gran=(64, 64))),
    "vgg13_bn_cifar": dict(
        factory="vgg_cifar_zoo", kwargs=dict(model_name="vgg13_bn", num_classes=10, pretrained=False),
        engine=_VGG_ENGINE, image=(3, 32, 32), batch=32,
        layer=dict(input_slice=(1, 1, 2, 2), weight_slice=(1, 1, 2, 2), input_paral_size=(1, 64),
                   weight_paral_size=(64, 64), input_quant_gran=(1, 64), weight_quant_gran=(64, 64))),
    "resnet18_cifar": dict(
        factory="ResNet_CIFAR_zoo", kwargs=dict(model_name="resnet18", num_classes=10, pretrained=False),
        engine=_RESNET_ENGINE, image=(3, 32, 32), batch=16,
        layer=dict(input_slice=(1, 1, 1, 1), weight_slice=(1, 1, 1, 1), input_paral_size=(1, 64),
                   weight_paral_size=(64, 1), input_quant_gran=(1, 256), weight_quant_gran=(256, 1))),
}
PACKAGES = {"pyfastpim": "pyfastpim.memintelli", "memintelli": "memintelli"}


def _threads(impl):
    if impl == "pyfastpim":
        import pyfastpim
        return pyfastpim.get_num_threads()
    return torch.get_num_threads()


def run_case(impl, case, batch=None, repeat=None, threads=None):
    """One case in this process: returns the result record (wall and CPU seconds per timed batch, peak RSS).

    ``threads``: None keeps each library's default (what a user gets); n sets torch's and pyfastpim's."""
    spec = CASES[case]
    batch = spec["batch"] if batch is None else batch
    repeat = (5 if impl == "pyfastpim" else 1) if repeat is None else repeat
    pkg = PACKAGES[impl]
    if impl == "pyfastpim" and ROOT not in sys.path:
        sys.path.insert(0, ROOT)  # the checkout's in-place build, as `make bench` uses
    engine_cls = importlib.import_module(pkg + ".pimpy.memmat_tensor").DPETensor
    if threads:
        torch.set_num_threads(threads)
        if impl == "pyfastpim":
            import pyfastpim
            pyfastpim.set_num_threads(threads)
    zoo = importlib.import_module(pkg + ".NN_models")
    torch.manual_seed(0)
    device = torch.device("cpu")
    t0 = time.perf_counter()
    engine = engine_cls(**spec["engine"], device=device)
    model = getattr(zoo, spec["factory"])(**spec["kwargs"], mem_enabled=True, engine=engine, device=device,
                                          bw_e=None, **spec["layer"])
    model.update_weight()
    model.eval()
    t_build = time.perf_counter() - t0
    wall, cpu = [], []
    load_before = os.getloadavg()[0]
    with torch.no_grad():
        model(torch.randn(1, *spec["image"]))
        x = torch.randn(batch, *spec["image"])
        for _ in range(repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            model(x)
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
    rec = dict(impl=impl, case=case, batch=batch, wall_s=wall, cpu_s=cpu, build_s=t_build,
               peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               threads=_threads(impl), threads_set=threads, loadavg_1min=[load_before, os.getloadavg()[0]],
               cpu_model=cpu_model(), cpus=os.cpu_count(), torch=torch.__version__,
               date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    if impl == "pyfastpim":
        import pyfastpim
        rec["isa"] = list(pyfastpim.cpu_isa())  # (active, detected)
        rec["version"] = getattr(pyfastpim, "__version__", None)
    return rec


def append_json(path, rec):
    """Appends ``rec`` to the JSON list in ``path`` (created when missing)."""
    runs = []
    if os.path.exists(path):
        with open(path) as fh:
            runs = json.load(fh)
    runs.append(rec)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(runs, fh, indent=1)
    os.replace(tmp, path)


def describe(rec):
    med = sorted(rec["wall_s"])[len(rec["wall_s"]) // 2]
    i = rec["wall_s"].index(med)
    return ("%s %s batch %d: %.3f s per batch (median of %d; CPU %.3f s, CPU/wall %.2f, %d threads), "
            "build+program %.2f s, peak RSS %.0f MB, load %.1f->%.1f"
            % (rec["impl"], rec["case"], rec["batch"], med, len(rec["wall_s"]), rec["cpu_s"][i],
               rec["cpu_s"][i] / med if med else 0.0, rec["threads"], rec["build_s"], rec["peak_rss_mb"],
               rec["loadavg_1min"][0], rec["loadavg_1min"][1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("impl", choices=sorted(PACKAGES))
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("batch", type=int, nargs="?", default=None, help="default: the case's batch size")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None,
                    help="set torch's (and pyfastpim's) thread count; default: the libraries' defaults")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "peers.json"))
    args = ap.parse_args(argv)
    rec = run_case(args.impl, args.case, args.batch, args.repeat, args.threads)
    print(describe(rec), flush=True)
    if args.json != "-":
        append_json(args.json, rec)


if __name__ == "__main__":
    main()
