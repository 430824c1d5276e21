"""Command line: ``python3 -m pyfastpim demo`` (the main job of ``make run``)."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m pyfastpim", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{demo,info}")  # named in its error
    demo = sub.add_parser("demo", help="run the demo")
    demo.add_argument("--plot", metavar="PNG",
                      help="save a plot of accuracy vs ADC bits, read variation, wire resistance and drift time")
    demo.add_argument("--quick", action="store_true", help="fewer engine settings (for tests)")
    sub.add_parser("info", help="print build and device information")
    args = parser.parse_args(argv)
    if args.cmd == "info":
        return _info()
    missing = _missing_demo_modules(bool(args.plot))
    if missing:
        print("python3 -m pyfastpim demo needs %s (optional dependencies of pyfastpim): pip install %s; Debian: "
              "apt install %s" % (", ".join(m for m, _, _ in missing), " ".join(p for _, p, _ in missing),
                                 " ".join(d for _, _, d in missing)), file=sys.stderr)
        return 2
    from . import demo as demo_mod
    return demo_mod.main(args)


def _info():
    """Version, location, CPU kernels and the devices (each OpenCL device's string, or why there is none)."""
    import pyfastpim
    active, detected = pyfastpim.cpu_isa()
    print("pyfastpim %s (%s)" % (pyfastpim.__version__, pyfastpim.__file__))
    print("cpu: isa %s (detected %s), %d threads" % (active, detected, pyfastpim.get_num_threads()))
    devices = [d for d in pyfastpim.devices() if d["device"] != "cpu"]
    for d in devices:
        print("%s: %s (%s, %s)" % (d["device"], d["name"], d["platform_name"], d["type"]))
    if not devices:
        why = pyfastpim._core.cl_library_error()
        print("opencl: no device" + (" (%s)" % why if why else ""))
    return 0


def _missing_demo_modules(plot):
    import importlib.util
    need = [("torch", "torch", "python3-torch"), ("sklearn", "scikit-learn", "python3-sklearn")]
    if plot:
        need.append(("matplotlib", "matplotlib", "python3-matplotlib"))
    missing = []
    for mod, pip_name, deb in need:
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):  # a module blocked with sys.modules[name] = None
            found = False
        if not found:
            missing.append((mod, pip_name, deb))
    return missing


if __name__ == "__main__":
    sys.exit(main())
