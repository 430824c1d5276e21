"""The benchmark table of `make bench` (this run beside the previous one) and the README's performance section.

Usage:
    report.py [build/bench.json] [--history .benchmarks] [--prev FILE]
    report.py [build/bench.json] --readme README.md [--peers build/peers.json]

Without ``--readme``: prints every case's median time and its ratios to its group's roofline and
reference, measured in the same run, with the case's targets (``extra_info['targets']``, see
benchmarks/conftest.py), and beside each the same figure of the previous run: the newest run in
the pytest-benchmark history (``--history``, where `make bench` autosaves every run) that is
older than this one, or ``--prev FILE``. The last lines compare the two runs' medians.

With ``--readme``: replaces the text between ``<!-- bench:begin -->`` and ``<!-- bench:end -->``
in that file by the table of this ONE run (machine, ISA, date and commit named), and the text
between ``<!-- peers:begin -->`` and ``<!-- peers:end -->`` by the model-level comparison with
MemIntelli from ``--peers`` (benchmarks/memintelli_models.py appends there).
"""
import argparse
import glob
import json
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGREEMENT = 0.15  # back-to-back runs on a quiet machine should agree within this on every median


def load(path):
    with open(path) as fh:
        return json.load(fh)


def case_name(b):
    """Short name of a case: the test name without ``test_``, parameters kept (``slicing[slice-input]``)."""
    name = b["name"]
    return name[5:] if name.startswith("test_") else name


def _base(b):
    return case_name(b).split("[")[0]


def analyse(data):
    """{fullname: row} with the case's group, role, median and ratios (roofline, reference, targets)."""
    groups = defaultdict(list)
    for b in data["benchmarks"]:
        groups[b.get("group") or "-"].append(b)
    rows = {}
    for group, cases in groups.items():
        by_role = {}
        for b in cases:
            by_role.setdefault(b["extra_info"].get("role", "subject"), b)
        ref, roof = by_role.get("reference"), by_role.get("roofline")
        by_name = {}
        for c in cases:
            by_name.setdefault(_base(c), c)
            by_name.setdefault(case_name(c), c)
        for b in cases:
            t = b["stats"]["median"]
            info = b["extra_info"]
            r_roof = t / roof["stats"]["median"] if roof and roof is not b else None
            r_ref = ref["stats"]["median"] / t if ref and ref is not b else None
            checks = []
            for key, target in sorted(info.get("targets", {}).items()):
                if key.startswith("vs:"):  # ratio to another case of the group, e.g. "vs:dpe_noise_off"
                    other = by_name.get(key[3:])
                    value = t / other["stats"]["median"] if other else None
                else:
                    value = {"roofline": r_roof, "speedup_vs_reference": r_ref}.get(key, info.get(key))
                if not isinstance(value, (int, float)):
                    continue
                at_least = key.startswith("speedup")
                checks.append(dict(key=key, value=value, target=target, at_least=at_least,
                                   met=value >= target if at_least else value <= target))
            rows[b["fullname"]] = dict(group=group, case=case_name(b), role=info.get("role", "subject"), median=t,
                                       rounds=b["stats"].get("rounds"), steal=info.get("steal_pct"),
                                       roofline=r_roof, reference=r_ref,
                                       checks=checks, ref_over_roof=(ref["stats"]["median"] / roof["stats"]["median"]
                                                                     if ref and roof else None))
    return rows


def find_previous(current, history):
    """The newest saved run in ``history`` (recursively) older than ``current``; (path, data) or (None, None)."""
    now = current.get("datetime", "")
    best = (None, None, "")
    for path in glob.glob(os.path.join(history, "**", "*.json"), recursive=True):
        try:
            data = load(path)
        except (OSError, ValueError):
            continue
        when = data.get("datetime", "") if isinstance(data, dict) else ""
        if not when or "benchmarks" not in data or when >= now and now:
            continue
        if when > best[2]:
            best = (path, data, when)
    return best[0], best[1]


def _ratio(v, fmt):
    return fmt % v if v is not None else ""


def _fmt_checks(checks):
    return "; ".join("%s=%.3g (target %s %g: %s)" % (c["key"], c["value"], ">=" if c["at_least"] else "<=",
                                                      c["target"], "met" if c["met"] else "MISSED") for c in checks)


def table(rows, prev_rows=None):
    """The console table: each ratio with the previous run's beside it."""
    prev_rows = prev_rows or {}
    out = []
    order = sorted(rows, key=lambda k: (rows[k]["group"], rows[k]["median"]))
    for key in order:
        r, p = rows[key], prev_rows.get(key)
        prev_checks = {c["key"]: c["value"] for c in p["checks"]} if p else {}
        change = "%+.0f%%" % (100.0 * (r["median"] / p["median"] - 1.0)) if p and p["median"] else ""
        checks = _fmt_checks(r["checks"])
        if prev_checks:
            checks += " | prev: " + ", ".join("%s=%.3g" % (k, v) for k, v in sorted(prev_checks.items()))
        out.append((r["group"], r["case"], r["role"], str(r["rounds"] or ""), "%.4g" % r["median"],
                    "%.4g" % p["median"] if p else "", change,
                    _ratio(r["roofline"], "%.2fx"), _ratio(p and p["roofline"], "%.2fx"),
                    _ratio(r["reference"], "%.1fx"), _ratio(p and p["reference"], "%.1fx"), checks))
    header = ("group", "case", "role", "rounds", "median s", "prev s", "change", "vs roofline", "prev",
              "speedup vs ref", "prev", "targets")
    widths = [max(len(str(x[i])) for x in out + [header]) for i in range(len(header) - 1)]
    fmt = "  ".join("%%-%ds" % w for w in widths) + "  %s"
    lines = [fmt % header, "-" * (sum(widths) + 2 * len(widths) + 10)]
    lines += [fmt % x for x in out]
    return "\n".join(lines)


def agreement(rows, prev_rows):
    """Summary lines comparing the medians of the cases both runs have."""
    common = [k for k in rows if k in prev_rows and prev_rows[k]["median"]]
    if not common:
        return ["no case in common with the previous run"]
    changes = sorted(((abs(rows[k]["median"] / prev_rows[k]["median"] - 1.0), rows[k]["case"], k) for k in common),
                     reverse=True)
    outside = [c for c in changes if c[0] > AGREEMENT]
    lines = ["%d cases in both runs: %d agree within %d%% on the median; largest change %.1f%% (%s)"
             % (len(common), len(common) - len(outside), round(100 * AGREEMENT), 100 * changes[0][0], changes[0][1])]

    def steal(k):  # the hypervisor's share of the CPU during the case, previous run / this run (when recorded)
        a, b = prev_rows[k].get("steal"), rows[k].get("steal")
        return "" if a is None or b is None else " (steal %.1f%% / %.1f%%)" % (a, b)

    if outside:
        lines.append("outside %d%%: %s" % (round(100 * AGREEMENT), ", ".join("%s %.0f%%%s" % (n, 100 * c, steal(k))
                                                                             for c, n, k in outside)))
    new = sorted(rows[k]["case"] for k in rows if k not in prev_rows)
    if new:
        lines.append("new since the previous run: " + ", ".join(new))
    return lines


def steal_summary(rows):
    """One line on the hypervisor's steal during this run's cases (conftest.py records it), or None."""
    steal = sorted((r["steal"], r["case"]) for r in rows.values() if r.get("steal") is not None)
    if not steal:
        return None
    return "hypervisor steal during the cases: median %.1f%%, highest %.1f%% (%s)" % (
        steal[len(steal) // 2][0], steal[-1][0], steal[-1][1])


# ---------------------------------------------------------------- README ---------------------------------------

def machine_line(data):
    mi = data.get("machine_info", {})
    pf = mi.get("pyfastpim", {})
    cpu = pf.get("cpu_model") or (mi.get("cpu") or {}).get("brand_raw") or mi.get("processor") or "unknown CPU"
    cores = pf.get("cpu_count") or (mi.get("cpu") or {}).get("count")
    isa = pf.get("isa")
    if pf.get("isa_detected") and pf.get("isa_detected") != isa:
        isa = "%s (detected %s)" % (isa, pf["isa_detected"])
    threads = pf.get("threads")
    commit = (data.get("commit_info") or {}).get("id") or ""
    dirty = (data.get("commit_info") or {}).get("dirty")
    how = ("pinned by PYFASTPIM_BENCH_THREADS" if pf.get("bench_threads")
           else "the defaults: no thread variables")
    return ("%s, %s CPUs, pyfastpim ISA %s, %s threads (%s), %s UTC, commit %s%s"
            % (cpu, cores if cores else "?", isa or "?", threads if threads else "?", how,
               (data.get("datetime") or "?")[:16].replace("T", " "), commit[:10] or "?",
               " (modified)" if dirty else ""))


def _md_time(t):
    return "%.3g s" % t if t >= 0.1 else "%.3g ms" % (t * 1e3) if t >= 1e-4 else "%.3g us" % (t * 1e6)


def readme_bench(data, source):
    rows = analyse(data)
    lines = ["<!-- generated by benchmarks/report.py from %s (run %s); `make bench-readme` regenerates it -->"
             % (source, data.get("datetime", "?")),
             "", "Machine: " + machine_line(data) + ".", "",
             "| group | case | role | median | vs roofline | speedup vs reference | targets |",
             "|---|---|---|---|---|---|---|"]
    notes = []
    for key in sorted(rows, key=lambda k: (rows[k]["group"], rows[k]["median"])):
        r = rows[key]
        checks = "; ".join("%s %.3g (%s %g: %s)" % (c["key"].replace("_", " "), c["value"], ">=" if c["at_least"]
                                                     else "<=", c["target"], "met" if c["met"] else "missed")
                           for c in r["checks"])
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            r["group"], r["case"], r["role"], _md_time(r["median"]), _ratio(r["roofline"], "%.2fx"),
            _ratio(r["reference"], "%.1fx"), checks))
        for c in r["checks"]:
            if c["key"] == "speedup_vs_reference" and not c["met"] and r["ref_over_roof"] is not None \
                    and r["ref_over_roof"] < c["target"]:
                notes.append("%s: the %gx speedup target over the reference is out of reach on this machine: the "
                             "roofline itself (the bare float arithmetic) is only %.1fx faster than the reference."
                             % (r["case"], c["target"], r["ref_over_roof"]))
    if notes:
        lines += [""] + ["- " + n for n in notes]
    return "\n".join(lines)


def latest_peers(runs, pinned=False):
    """Newest record per (case, implementation) among runs at the libraries' default threads, or with
    ``pinned`` per (case, implementation, threads set) among runs with ``--threads``."""
    latest = {}
    for rec in runs:
        if bool(rec.get("threads_set")) != pinned:
            continue
        key = (rec["case"], rec["impl"]) + ((rec["threads_set"],) if pinned else ())
        if key not in latest or rec.get("date", "") >= latest[key].get("date", ""):
            latest[key] = rec
    return latest


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def readme_peers(runs, source):
    latest = latest_peers(runs)
    pinned = latest_peers(runs, pinned=True)
    if not latest:
        return "<!-- generated by benchmarks/report.py: no peer results in %s -->" % source
    cases = sorted({c for c, _ in latest})
    any_rec = next(iter(latest.values()))
    dates = sorted(r.get("date", "") for r in latest.values())
    lines = ["<!-- generated by benchmarks/report.py from %s; `make bench-peers` measures, `make bench-readme` "
             "renders -->" % source, "",
             "Machine: %s, %s CPUs; measured %s to %s; each implementation and model in its own process, "
             "library default threads; one warm-up image, then timed batches (median; CPU = process CPU time "
             "of that batch)." % (any_rec.get("cpu_model", "?"), any_rec.get("cpus", "?"), dates[0], dates[-1]), "",
             "| model | batch | pyfastpim s/batch (CPU s) | MemIntelli s/batch (CPU s) | speedup | "
             "peak RSS pyfastpim | peak RSS MemIntelli | threads pyfastpim / MemIntelli | "
             "MemIntelli at pyfastpim's threads (CPU s) | speedup there |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for case in cases:
        p, m = latest.get((case, "pyfastpim")), latest.get((case, "memintelli"))

        def cell(rec):
            if not rec:
                return "not measured"
            w = _median(rec["wall_s"])
            return "%.3g (%.3g)" % (w, rec["cpu_s"][rec["wall_s"].index(w)])
        speed = ("%.1fx" % (_median(m["wall_s"]) / _median(p["wall_s"]))) if p and m else ""
        batch = (p or m)["batch"]
        mp = pinned.get((case, "memintelli", p["threads"])) if p else None
        if mp is not None and m is not None and m["threads"] == p["threads"]:
            mp = None  # MemIntelli's default already is pyfastpim's thread count
        speed_p = ("%.1fx" % (_median(mp["wall_s"]) / _median(p["wall_s"]))) if mp else ""
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s / %s | %s | %s |" % (
            case, batch, cell(p), cell(m), speed, "%.0f MB" % p["peak_rss_mb"] if p else "",
            "%.0f MB" % m["peak_rss_mb"] if m else "", p["threads"] if p else "-", m["threads"] if m else "-",
            cell(mp) if mp else "", speed_p))
    return "\n".join(lines)


def replace_block(text, name, body):
    begin, end = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pat.search(text):
        raise SystemExit("report.py: %r and %r not found in the README" % (begin, end))
    return pat.sub(lambda _: begin + "\n" + body + "\n" + end, text, count=1)


def _shown(path):
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def write_readme(readme, bench_path, peers_path=None):
    with open(readme, encoding="utf-8") as fh:
        text = fh.read()
    text = replace_block(text, "bench", readme_bench(load(bench_path), _shown(bench_path)))
    if peers_path and os.path.exists(peers_path):
        text = replace_block(text, "peers", readme_peers(load(peers_path), _shown(peers_path)))
    with open(readme, "w", encoding="utf-8") as fh:
        fh.write(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench", nargs="?", default=os.path.join("build", "bench.json"))
    ap.add_argument("--history", default=".benchmarks", help="pytest-benchmark storage searched for the previous run")
    ap.add_argument("--prev", help="the previous run's JSON (instead of searching --history)")
    ap.add_argument("--readme", help="write the performance section of this README instead of printing the table")
    ap.add_argument("--peers", default=os.path.join("build", "peers.json"))
    args = ap.parse_args(argv)
    if args.readme:
        write_readme(args.readme, args.bench, args.peers)
        print("report.py: %s regenerated from %s%s" % (args.readme, args.bench,
                                                       " and " + args.peers if os.path.exists(args.peers) else ""))
        return
    data = load(args.bench)
    if args.prev:
        prev_path, prev = args.prev, load(args.prev)
    else:
        prev_path, prev = find_previous(data, args.history)
    rows = analyse(data)
    prev_rows = analyse(prev) if prev else {}
    print(table(rows, prev_rows))
    print()
    steal = steal_summary(rows)
    if steal:
        print(steal)
    if prev:
        print("previous run: %s (%s)" % (prev.get("datetime", "?"), prev_path))
        for line in agreement(rows, prev_rows):
            print(line)
    else:
        print("no previous run in %s: the prev columns fill from the next `make bench`" % args.history)


if __name__ == "__main__":
    main(sys.argv[1:])
