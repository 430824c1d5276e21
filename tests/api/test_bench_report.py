"""benchmarks/report.py: the previous run beside this one, the README's generated performance
section; benchmarks/conftest.py's rounds; benchmarks/memintelli_models.py's JSON records."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT
BENCH = os.path.join(ROOT, "benchmarks")
pytestmark = pytest.mark.skipif(not os.path.isdir(BENCH), reason="benchmarks/ is not here (installed package)")


def _load(name, filename):
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, filename))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def report():
    return _load("pyfastpim_bench_report", "report.py")


def _case(name, group, role, median, targets=None, rounds=12, **extra):
    info = dict(role=role, **extra)
    if targets:
        info["targets"] = targets
    return dict(name="test_" + name, fullname="benchmarks/test_x.py::test_" + name, group=group,
                extra_info=info, stats=dict(median=median, rounds=rounds))


def _run(when, medians, extra_case=None):
    g = "dpe 512"
    cases = [_case("roof", g, "roofline", medians["roof"]),
             _case("ref", g, "reference", medians["ref"], rounds=1),
             _case("subject", g, "subject", medians["subject"],
                   targets={"roofline": 1.5, "speedup_vs_reference": 100.0, "vs:off": 1.25, "rss_mb": 150},
                   rss_mb=medians.get("rss", 40.0)),
             _case("off", g, "subject", medians["off"])]
    if extra_case:
        cases.append(extra_case)
    return dict(datetime=when, benchmarks=cases, commit_info=dict(id="0123456789abcdef", dirty=False),
                machine_info=dict(pyfastpim=dict(cpu_model="Test CPU 9000", cpu_count=16, isa="avx512",
                                                 isa_detected="avx512", threads=16)))


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh)


def test_ratios_and_targets(report):
    rows = report.analyse(_run("2026-01-02T00:00:00", dict(roof=0.1, ref=4.0, subject=0.13, off=0.11, rss=200.0)))
    sub = rows["benchmarks/test_x.py::test_subject"]
    assert sub["roofline"] == pytest.approx(1.3) and sub["reference"] == pytest.approx(4.0 / 0.13)
    checks = {c["key"]: c for c in sub["checks"]}
    assert checks["roofline"]["met"] and not checks["speedup_vs_reference"]["met"]
    assert checks["vs:off"]["value"] == pytest.approx(0.13 / 0.11) and checks["vs:off"]["met"]
    assert checks["rss_mb"]["value"] == 200.0 and not checks["rss_mb"]["met"]
    assert rows["benchmarks/test_x.py::test_roof"]["roofline"] is None  # no ratio of a case to itself
    assert sub["ref_over_roof"] == pytest.approx(40.0)


def test_previous_run_is_the_newest_older_one(report, tmp_path):
    hist = tmp_path / "hist" / "Linux-CPython-3.11-64bit"
    older = _run("2026-01-01T10:00:00", dict(roof=0.1, ref=4.0, subject=0.2, off=0.11))
    prev = _run("2026-01-02T10:00:00", dict(roof=0.1, ref=4.0, subject=0.13, off=0.11))
    cur = _run("2026-01-03T10:00:00", dict(roof=0.1, ref=4.4, subject=0.17, off=0.112),
               extra_case=_case("batch1", "dpe 1", "subject", 0.001))
    later = _run("2026-01-04T10:00:00", dict(roof=0.1, ref=4.0, subject=0.5, off=0.11))
    for i, d in enumerate([older, prev, cur, later]):  # `cur` is in the history too (autosave)
        _write(str(hist / ("%04d_run.json" % (i + 1))), d)
    (hist / "0009_broken.json").write_text("{not json")
    path, found = report.find_previous(cur, str(tmp_path / "hist"))
    assert found["datetime"] == prev["datetime"] and path.endswith("0002_run.json")
    rows, prev_rows = report.analyse(cur), report.analyse(found)
    text = report.table(rows, prev_rows)
    header = text.splitlines()[0].split()
    assert header.count("prev") == 3 and "prev s" in text.splitlines()[0] and "change" in header
    line = [ln for ln in text.splitlines() if ln.split()[2:3] == ["subject"]][0]
    assert "1.70x" in line and "1.30x" in line and "+31%" in line  # 0.17 vs 0.13: ratio and median, both runs
    assert "prev: " in line and "roofline=1.3" in line
    summary = report.agreement(rows, prev_rows)
    assert summary[0].startswith("4 cases in both runs: 3 agree within 15%")  # subject +31% (ref +10%)
    assert "subject" in summary[0] and "outside 15%: subject 31%" in summary[1]
    assert "new since the previous run: batch1" in summary[2]


def test_agreement_shows_the_steal_of_changed_cases(report):
    prev = _run("2026-01-02T10:00:00", dict(roof=0.1, ref=4.0, subject=0.13, off=0.11))
    cur = _run("2026-01-03T10:00:00", dict(roof=0.1, ref=4.0, subject=0.2, off=0.16))
    for run, pct in ((prev, 0.25), (cur, 18.0)):
        for b in run["benchmarks"]:
            if b["name"] == "test_subject":
                b["extra_info"]["steal_pct"] = pct
    summary = report.agreement(report.analyse(cur), report.analyse(prev))
    # both runs recorded the subject's steal; the off case's runs did not: no figure
    assert "subject 54% (steal 0.2% / 18.0%)" in summary[1] and "off 45%," not in summary[1]
    assert summary[1].endswith("off 45%")
    assert report.steal_summary(report.analyse(cur)) == "hypervisor steal during the cases: median 18.0%, highest " \
                                                        "18.0% (subject)"
    assert report.steal_summary(report.analyse(_run("t", dict(roof=1, ref=1, subject=1, off=1)))) is None


def test_steal_share_from_proc_stat():
    conf = _load("pyfastpim_bench_conftest2", "conftest.py")
    assert conf.steal_pct((1000, 10), (1400, 50)) == 10.0
    assert conf.steal_pct(None, (1400, 50)) is None and conf.steal_pct((1400, 50), (1400, 50)) is None
    ticks = conf.cpu_ticks()
    if not os.path.exists("/proc/stat"):
        assert ticks is None
        return
    assert ticks[0] > 0 and 0 <= ticks[1] <= ticks[0]


def test_no_previous_run(report, tmp_path, capsys):
    cur = _run("2026-01-03T10:00:00", dict(roof=0.1, ref=4.0, subject=0.13, off=0.11))
    _write(str(tmp_path / "bench.json"), cur)
    report.main([str(tmp_path / "bench.json"), "--history", str(tmp_path / "none")])
    out = capsys.readouterr().out
    assert "no previous run" in out and "1.30x" in out


README_TEMPLATE = """# x
intro stays 0.5 s
<!-- bench:begin -->
old table 1.27x
<!-- bench:end -->
between
<!-- peers:begin -->
old peers
<!-- peers:end -->
tail
"""


def _peer(impl, case, wall, cpu, rss, date, batch=16, threads_set=None, threads=None):
    threads = threads or threads_set or (2 if impl == "pyfastpim" else 1)
    return dict(impl=impl, case=case, batch=batch, wall_s=wall, cpu_s=cpu, peak_rss_mb=rss, date=date,
                threads=threads, threads_set=threads_set, cpu_model="Test CPU 9000", cpus=16)


def test_readme_generated_from_one_run(report, tmp_path):
    cur = _run("2026-01-03T10:00:00", dict(roof=0.1, ref=4.0, subject=0.13, off=0.11))
    _write(str(tmp_path / "bench.json"), cur)
    peers = [_peer("pyfastpim", "resnet18_cifar", [7.0, 6.0, 6.5], [12.0, 11.0, 11.5], 580.0, "2026-01-03 09:00 UTC"),
             _peer("memintelli", "resnet18_cifar", [200.0], [190.0], 3300.0, "2026-01-03 09:10 UTC"),
             _peer("memintelli", "resnet18_cifar", [100.0], [180.0], 3300.0, "2026-01-03 09:20 UTC", threads_set=2),
             _peer("memintelli", "resnet18_cifar", [50.0], [180.0], 3300.0, "2026-01-03 09:25 UTC", threads_set=4),
             _peer("memintelli", "resnet18_cifar", [300.0], [290.0], 3400.0, "2026-01-02 09:00 UTC"),
             _peer("pyfastpim", "lenet5_mnist", [0.2], [0.3], 240.0, "2026-01-03 09:30 UTC", batch=64)]
    _write(str(tmp_path / "peers.json"), peers)
    readme = tmp_path / "README.md"
    readme.write_text(README_TEMPLATE)
    report.write_readme(str(readme), str(tmp_path / "bench.json"), str(tmp_path / "peers.json"))
    text = readme.read_text()
    assert text.startswith("# x\nintro stays 0.5 s\n<!-- bench:begin -->\n")
    assert text.endswith("<!-- peers:end -->\ntail\n")
    assert "old table" not in text and "old peers" not in text and "\nbetween\n" in text
    bench = text[text.index("bench:begin"):text.index("bench:end")]
    assert "Test CPU 9000, 16 CPUs, pyfastpim ISA avx512, 16 threads" in bench and "2026-01-03 10:00" in bench
    assert "commit 0123456789" in bench and "run 2026-01-03T10:00:00" in bench
    assert re.search(r"\| dpe 512 \| subject \| subject \| 0\.13 s \| 1\.30x \| 30\.8x \|.*speedup vs reference 30\.8 "
                     r"\(>= 100: missed\)", bench)
    assert bench.count("\n| dpe 512 |") == 4
    assert "only 40.0x faster than the reference" in bench  # the missed 100x is out of reach: stated with numbers
    pe = text[text.index("peers:begin"):text.index("peers:end")]
    # newest default-thread record per implementation; the median of the timed batches with its CPU time
    # MemIntelli at its default (1 thread here) and, pinned by --threads, at pyfastpim's 2 threads
    assert "| resnet18_cifar | 16 | 6.5 (11.5) | 200 (190) | 30.8x | 580 MB | 3300 MB | 2 / 1 | 100 (180) | 15.4x |" \
        in pe
    assert "| lenet5_mnist | 64 | 0.2 (0.3) | not measured |  | 240 MB |  | 2 / - |  |  |" in pe
    assert "Test CPU 9000, 16 CPUs" in pe
    readme.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="bench:begin"):
        report.write_readme(str(readme), str(tmp_path / "bench.json"))


def test_readme_performance_section_is_generated():
    """Outside the generated blocks the README's performance section states no measured figure; the
    generated block, when it names a run that build/bench.json holds, is what the generator writes."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text[text.index("## Performance"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    for name in ("bench", "peers"):
        assert section.count("<!-- %s:begin -->" % name) == 1 and section.count("<!-- %s:end -->" % name) == 1
    free = re.sub(r"<!-- (bench|peers):begin -->.*?<!-- \1:end -->", "", section, flags=re.S)
    figures = re.findall(r"\b\d+(?:\.\d+)?\s*(?:s|ms|us|MB|GB|x)\b", free)
    assert not figures, "hand-written figures outside the generated blocks: %s" % figures
    m = re.search(r"from build/bench\.json \(run ([^)]+)\)", section)
    bench_json = os.path.join(ROOT, "build", "bench.json")
    if not m or not os.path.exists(bench_json):
        pytest.skip("README's table not generated yet or build/bench.json absent")
    rep = _load("pyfastpim_bench_report2", "report.py")
    data = rep.load(bench_json)
    if data.get("datetime") != m.group(1):
        pytest.skip("build/bench.json is from another run than README's table")
    block = re.search(r"<!-- bench:begin -->\n(.*?)\n<!-- bench:end -->", section, re.S).group(1)
    assert block == rep.readme_bench(data, "build/bench.json")


def test_bench_rounds_and_pedantic_minimum():
    conf = _load("pyfastpim_bench_conftest", "conftest.py")
    opts = conf.rounds_for("benchmarks/test_bench_dpe.py::test_dpe_noise_on")
    assert opts["min_rounds"] >= 10 and opts["max_time"] >= 1.0 and opts["warmup"]
    calls, probes = [], []

    def original(target, **kw):
        calls.append(kw)

    class Fake:
        extra_info = {"role": "subject"}
    conf._pedantic(Fake, original, probes.append, args=(1,), rounds=3)  # fast: raised to the minimum
    assert calls[-1]["rounds"] == conf.PEDANTIC_MIN_ROUNDS >= 5 and probes == [1]  # after one warm-up call
    conf._pedantic(Fake, original, probes.append, setup=lambda: ((2,), {}), rounds=2)
    assert probes == [1, 2] and calls[-1]["rounds"] == conf.PEDANTIC_MIN_ROUNDS
    budget = conf.PEDANTIC_BUDGET_S
    try:
        conf.PEDANTIC_BUDGET_S = 0.0  # as if one call took longer than the budget: the file's rounds stay
        conf._pedantic(Fake, original, probes.append, args=(3,), rounds=3)
        assert calls[-1]["rounds"] == 3
    finally:
        conf.PEDANTIC_BUDGET_S = budget
    conf._pedantic(Fake, original, probes.append, args=(4,), rounds=9)  # more than the minimum: no probe
    assert calls[-1]["rounds"] == 9 and probes == [1, 2, 3]
    Fake.extra_info = {"role": "reference"}  # the slow transcriptions: a few rounds, no warm-up
    conf._pedantic(Fake, original, probes.append, args=(5,), rounds=1)
    assert calls[-1]["rounds"] == conf.REFERENCE_MIN_ROUNDS >= 3 and calls[-1]["warmup_rounds"] == 0
    assert probes == [1, 2, 3]
    conf._pedantic(Fake, original, probes.append, rounds=7, warmup_rounds=2)
    assert calls[-1]["rounds"] == 7 and calls[-1]["warmup_rounds"] == 2


def test_peer_script_records_json(tmp_path):
    pytest.importorskip("torch")
    models = _load("pyfastpim_bench_models", "memintelli_models.py")
    assert {c: s["batch"] for c, s in models.CASES.items()} == {"lenet5_mnist": 64, "vgg13_bn_cifar": 32,
                                                                 "resnet18_cifar": 16}
    from pyfastpim.memintelli import NN_models
    assert all(hasattr(NN_models, s["factory"]) for s in models.CASES.values())
    out = str(tmp_path / "peers.json")
    for _ in range(2):
        models.main(["pyfastpim", "lenet5_mnist", "2", "--repeat", "2", "--json", out])
    runs = json.load(open(out))
    assert len(runs) == 2
    rec = runs[-1]
    assert rec["impl"] == "pyfastpim" and rec["case"] == "lenet5_mnist" and rec["batch"] == 2
    assert len(rec["wall_s"]) == len(rec["cpu_s"]) == 2 and all(w > 0 for w in rec["wall_s"])
    assert all(c >= 0 for c in rec["cpu_s"]) and rec["peak_rss_mb"] > 0 and rec["threads"] >= 1
    assert rec["isa"][0] in ("generic", "avx2", "avx512") and rec["cpus"] >= 1


def test_every_benchmark_module_collects():
    """`make bench` runs benchmarks/ only on request: a module that fails to import (a missing
    import after a merge) would go unnoticed until then. Collection imports every module."""
    pytest.importorskip("pytest_benchmark")
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                        os.path.join(ROOT, "benchmarks")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "error" not in r.stdout.lower().split("collected")[-1], r.stdout[-3000:]
