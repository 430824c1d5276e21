"""The numbers contract ships in the repository and every section citation resolves to it; every
public function, class, method and property has a docstring."""
import glob
import importlib
import inspect
import os
import re

import pytest

from helpers import ROOT  # noqa: E402  (the checkout)
SEMANTICS = os.path.join(ROOT, "docs", "semantics.md")

# "docs/semantics.md section 7", "sections 1-6", "spec section 9", "spec 3-4", "section 7.1"
_CITE = re.compile(r"(?:docs/semantics\.md|spec)\s+(?:sections?\s+)?(\d+(?:\.\d+)?)(?:\s*-\s*(\d+))?")


def _sections():
    text = open(SEMANTICS, encoding="utf-8").read()
    return set(re.findall(r"^##+ (\d+(?:\.\d+)?)\.? ", text, re.M))


def _files():
    pats = ["README.md", "pyfastpim/*.py", "pyfastpim/nn/*.py", "csrc/*/*.[ch]", "kernels/*.cl", "tests/*.py",
            "tests/*/*.py"]  # the groups (core, api, backends) and reference/
    return [p for pat in pats for p in sorted(glob.glob(os.path.join(ROOT, pat)))]


def test_contract_has_numbered_sections():
    if not os.path.exists(SEMANTICS):
        pytest.skip("docs/ is not here (installed package)")
    assert {str(i) for i in range(1, 12)} | {"7.1"} <= _sections()


def test_every_section_citation_resolves():
    if not os.path.exists(SEMANTICS):
        pytest.skip("docs/ is not here (installed package)")
    have = _sections()
    bad = []
    for path in _files():
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            for m in _CITE.finditer(line):
                lo = m.group(1)
                hi = m.group(2)
                wanted = [lo] if hi is None else [str(i) for i in range(int(float(lo)), int(hi) + 1)]
                bad += ["%s:%d: %s" % (os.path.relpath(path, ROOT), n, w) for w in wanted if w not in have]
    assert not bad, bad


def _readme():
    return open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def test_readme_points_at_the_contract_in_the_repository():
    readme = _readme()
    assert "docs/semantics.md" in readme and "shared/spec" not in readme
    assert "Only the fused MVM is ported" not in readme and "AVX-512" in readme


# (module, needs torch): the public namespaces a user reaches with help()
PUBLIC_MODULES = [("pyfastpim", False), ("pyfastpim.physics", False), ("pyfastpim.memory", False),
                  ("pyfastpim.devices", False), ("pyfastpim.metrics", False), ("pyfastpim.demo", False),
                  ("pyfastpim.nn", True), ("pyfastpim.memintelli", True), ("pyfastpim.memintelli.NN_layers", True),
                  ("pyfastpim.memintelli.NN_layers.functions", True), ("pyfastpim.memintelli.NN_layers.activation", True),
                  ("pyfastpim.memintelli.pimpy", True), ("pyfastpim.memintelli.pimpy.utils", True),
                  ("pyfastpim.memintelli.NN_models", True)]


def _undocumented(module):
    """Public callables of the module defined in pyfastpim, and their classes' public methods and
    properties, without a docstring (inherited ones count: torch's forward, a base class's method)."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    out = []
    for name in names:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or not callable(obj) or not (getattr(obj, "__module__", None) or "").startswith(
                "pyfastpim"):
            continue
        if not inspect.getdoc(obj):
            out.append(name)
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if not attr.startswith("_") and (callable(value) or isinstance(value, (property, staticmethod,
                                                                                    classmethod))):
                    if not inspect.getdoc(getattr(obj, attr) if not isinstance(value, property) else value):
                        out.append("%s.%s" % (name, attr))
    return out


@pytest.mark.parametrize("name,needs_torch", PUBLIC_MODULES, ids=[m for m, _ in PUBLIC_MODULES])
def test_public_api_has_docstrings(name, needs_torch):
    if needs_torch:
        pytest.importorskip("torch")
    assert _undocumented(importlib.import_module(name)) == []


def test_readme_names_every_copy_kind_of_memory_stats():
    """The README's list of memory.stats() copy kinds is memory.COPY_KINDS: it named four of the six
    (not cuda_to_host / host_to_cuda, which pyfastpim.memintelli counts)."""
    from pyfastpim import memory
    listed = re.search(r"its copies by kind\s*\(([^;]*)\);", _readme())
    assert listed, "README: the sentence on memory.stats()'s copy kinds is gone"
    assert set(re.findall(r"`(\w+)`", listed.group(1))) == set(memory.COPY_KINDS)


def test_readme_names_every_command_of_the_command_line():
    """Each subcommand of `python3 -m pyfastpim` is in the README (`info` was not), and the README's
    make targets and PYFASTPIM_* variables exist (in the Makefile; read by the package's sources)."""
    import subprocess
    import sys
    from helpers import PKG_ROOT
    out = subprocess.run([sys.executable, "-m", "pyfastpim", "--help"], capture_output=True, text=True, cwd="/",
                         env=dict(os.environ, PYTHONPATH=PKG_ROOT), timeout=120).stdout
    commands = re.search(r"\{([a-z,]+)\}", out).group(1).split(",")
    readme = _readme()
    assert "demo" in commands and [c for c in commands if "python3 -m pyfastpim " + c not in readme] == []
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.M))
    assert set(re.findall(r"`make ([a-z][a-z0-9-]*)", readme)) - targets == set()
    sources = "".join(open(p, encoding="utf-8", errors="replace").read() for pat in (
        "pyfastpim/**/*.py", "csrc/**/*.[ch]", "setup.py") for p in glob.glob(os.path.join(ROOT, pat), recursive=True))
    assert set(re.findall(r"PYFASTPIM_[A-Z0-9_]+", readme)) - set(re.findall(r"PYFASTPIM_[A-Z0-9_]+", sources)) == set()


def test_signatures_written_out_in_the_docs_are_the_real_ones():
    """Every full signature the README and docs/*.md write out (`pyfastpim.X(a, b=1, ...)`,
    `engine.drift(...)`) is the callable's: README gave AttentionContext's without its `device=None`."""
    import pyfastpim
    pytest.importorskip("torch", reason="pyfastpim.nn.convert is one of them")
    import pyfastpim.nn  # noqa: F401
    owners = {"engine": pyfastpim.DPETensor, "pyfastpim": pyfastpim}
    texts = [_readme()] + [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
    found = []
    for text in texts:
        for path, params in re.findall(r"`((?:pyfastpim|engine)(?:\.\w+)+)\(([a-z_][^`]*=[^`]*)\)`", text):
            parts = path.split(".")
            obj = owners[parts[0]]
            for part in parts[1:]:
                obj = getattr(obj, part)
            real = str(inspect.signature(obj)).replace("(self, ", "(")
            found.append(path)
            assert "(%s)" % params == real, (path, params, real)
    assert {"pyfastpim.AttentionContext", "pyfastpim.nn.convert", "engine.drift", "pyfastpim.asarray"} <= set(found)
