"""Command line: ``python3 -m pyfastpim demo`` (the main job of ``make run``)."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m pyfastpim", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    demo = sub.add_parser("demo", help="run the demo")
    demo.add_argument("--plot", metavar="PNG", help="save a plot of accuracy vs ADC bits and read variation")
    demo.add_argument("--quick", action="store_true", help="fewer engine settings (for tests)")
    sub.add_parser("info", help="print build and device information")
    args = parser.parse_args(argv)
    if args.cmd == "info":
        import pyfastpim
        print("pyfastpim", pyfastpim.__version__, "isa", pyfastpim.cpu_isa(), "threads", pyfastpim.get_num_threads())
        return 0
    from . import demo as demo_mod
    return demo_mod.main(args)


if __name__ == "__main__":
    sys.exit(main())
