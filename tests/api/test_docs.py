"""The numbers contract ships in the repository and every section citation resolves to it."""
import glob
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


def test_readme_points_at_the_contract_in_the_repository():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "docs/semantics.md" in readme and "shared/spec" not in readme
    assert "Only the fused MVM is ported" not in readme and "AVX-512" in readme
