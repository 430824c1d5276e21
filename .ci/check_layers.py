#!/usr/bin/env python3
"""Fails when a layer of the C core includes a layer above it.

csrc/ has four layers; includes may only point down:

    python   (the only layer that includes Python.h)
    cpu, opencl   (backends: neither includes the other, nor python)
    core     (no Python, no CPU-ISA intrinsics or OpenMP, no OpenCL)

Run by `make test`; prints every offending line and exits 1."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = {
    "core": {"core"},
    "cpu": {"core", "cpu"},
    "opencl": {"core", "opencl"},
    "python": {"core", "cpu", "opencl", "python"},
}
# System headers that mark a layer: only the named layers may include them.
SYSTEM = {
    "Python.h": {"python"},
    "immintrin.h": {"cpu"},
    "omp.h": {"cpu", "python"},
    "CL/cl.h": {"opencl"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def main():
    errors = []
    csrc = os.path.join(ROOT, "csrc")
    loose = [p for p in glob.glob(os.path.join(csrc, "*")) if os.path.isfile(p)]
    errors += ["%s: every C file lives in one of %s" % (os.path.relpath(p, ROOT), sorted(ALLOWED)) for p in loose]
    for layer, allowed in ALLOWED.items():
        for path in sorted(glob.glob(os.path.join(csrc, layer, "**", "*.[ch]"), recursive=True)):
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().split("\n")
            pragma_omp = any(re.match(r"\s*#\s*pragma\s+omp\b", l) for l in lines)
            if pragma_omp and layer not in SYSTEM["omp.h"]:
                errors.append("%s: OpenMP pragma in layer %r" % (os.path.relpath(path, ROOT), layer))
            for no, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                where = "%s:%d" % (os.path.relpath(path, ROOT), no)
                if kind == '"' and "/" in name:
                    target = name.split("/", 1)[0]
                    if target in ALLOWED and target not in allowed:
                        errors.append("%s: layer %r includes %r (from layer %r)" % (where, layer, name, target))
                elif kind == '"' and not os.path.exists(os.path.join(os.path.dirname(path), name)) \
                        and name != "pf_cl_sources.h":
                    errors.append("%s: include %r by its layer path (\"core/...\")" % (where, name))
                if name in SYSTEM and layer not in SYSTEM[name]:
                    errors.append("%s: layer %r includes <%s>" % (where, layer, name))
    for e in errors:
        print(e)
    if errors:
        print("check_layers: %d violation(s); see .ci/check_layers.py for the rule" % len(errors))
        return 1
    print("check_layers: csrc/ layering OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
