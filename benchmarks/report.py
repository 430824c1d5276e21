"""Prints the benchmark table of `make bench`: time per case and ratios measured in one run.

Usage: report.py [build/bench.json]
"""
import json
import sys
from collections import defaultdict


def main(path="build/bench.json"):
    with open(path) as fh:
        data = json.load(fh)
    groups = defaultdict(list)
    for b in data["benchmarks"]:
        groups[b.get("group") or "-"].append(b)
    rows = []
    for group in sorted(groups):
        cases = groups[group]
        by_role = {}
        for b in cases:
            by_role.setdefault(b["extra_info"].get("role", "subject"), b)
        ref = by_role.get("reference")
        roof = by_role.get("roofline")
        for b in sorted(cases, key=lambda c: c["stats"]["median"]):
            t = b["stats"]["median"]
            info = b["extra_info"]
            r_roof = t / roof["stats"]["median"] if roof else None
            r_ref = ref["stats"]["median"] / t if ref else None
            checks = []
            by_name = {c["name"].split("[")[0].replace("test_", ""): c for c in cases}
            for key, target in sorted(info.get("targets", {}).items()):
                if key.startswith("vs:"):  # ratio to another case of the group, e.g. "vs:dpe_noise_off"
                    other = by_name.get(key[3:])
                    value = t / other["stats"]["median"] if other else None
                else:
                    value = {"roofline": r_roof, "speedup_vs_reference": r_ref}.get(key, info.get(key))
                if value is None:
                    continue
                ok = value >= target if key.startswith("speedup") else value <= target
                checks.append("%s=%.3g (target %s %g: %s)" % (key, value, ">=" if key.startswith("speedup") else "<=",
                                                              target, "met" if ok else "MISSED"))
            rows.append((group, b["name"].split("[")[0].replace("test_", ""), info.get("role", "subject"),
                         "%.4f" % t, "%.2fx" % r_roof if r_roof else "", "%.1fx" % r_ref if r_ref else "",
                         "; ".join(checks)))
    header = ("group", "case", "role", "median s", "vs roofline", "speedup vs ref", "targets")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header) - 1)]
    fmt = "  ".join("%%-%ds" % w for w in widths) + "  %s"
    print(fmt % header)
    print("-" * (sum(widths) + 2 * len(widths) + 10))
    for r in rows:
        print(fmt % r)


if __name__ == "__main__":
    main(*sys.argv[1:])
