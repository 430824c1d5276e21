"""The sanitized build must let UBSan see signed overflow: Python's CFLAGS carry -fwrapv
(signed overflow defined as wrapping), which setup.py drops when PYFASTPIM_SANITIZE=1."""
import os
import re
import subprocess
import sys
import sysconfig

import pytest

import pyfastpim

from helpers import ROOT  # noqa: E402  (the checkout)


# Stands in for the compiler and the linker: logs each command line, creates its -o file, succeeds.
# setuptools 72 dropped `build_ext --dry-run`, which printed the same commands without running them.
FAKE_CC = """#!/bin/sh
echo "$*" >> "$PF_FAKE_CC_LOG"
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
[ -n "$out" ] && [ "$out" != /dev/null ] && : > "$out"
exit 0
"""


def _compile_commands(tmp_path, sanitize):
    pytest.importorskip("setuptools", reason="setup.py needs setuptools (a venv may lack it)")
    cc = tmp_path / "fake-cc"
    cc.write_text(FAKE_CC)
    cc.chmod(0o755)
    log = tmp_path / "commands.log"
    env = dict(os.environ, CC=str(cc), LDSHARED="%s -shared" % cc, PF_FAKE_CC_LOG=str(log))
    env.pop("PYFASTPIM_SANITIZE", None)
    if sanitize:
        env["PYFASTPIM_SANITIZE"] = "1"
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--force",
                        "--build-temp", str(tmp_path / "t"), "--build-lib", str(tmp_path / "l")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    cmds = [line for line in log.read_text().splitlines() if re.search(r" -c csrc/\w+/\w+\.c ", " " + line + " ")]
    assert len(cmds) >= 10, "no compile commands in the build"
    return cmds


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "setup.py")), reason="needs the source tree")
def test_sanitized_build_drops_fwrapv(tmp_path):
    if "-fwrapv" in (sysconfig.get_config_var("CFLAGS") or "").split():  # else there is nothing to drop
        (tmp_path / "plain").mkdir()
        assert any("-fwrapv" in cmd.split() for cmd in _compile_commands(tmp_path / "plain", sanitize=False))
    for cmd in _compile_commands(tmp_path, sanitize=True):
        flags = cmd.split()
        assert "-fwrapv" not in flags, cmd
        assert "-fsanitize=address,undefined" in flags and flags[-1] != "-fwrapv"


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "setup.py")), reason="needs the source tree")
def test_implicit_declarations_fail_the_build(tmp_path):
    """A C API the Python being built against lacks (Py_NewRef on 3.9) compiled as an implicit
    declaration: the build passed and the module failed to load with an undefined symbol."""
    for cmd in _compile_commands(tmp_path, sanitize=False):
        assert "-Werror=implicit-function-declaration" in cmd.split(), cmd


def test_loaded_sanitized_module_was_built_without_fwrapv():
    """Under make sanitize, the module actually loaded records its compiler switches (DWARF
    producer strings): -fsanitize present, -fwrapv absent."""
    if os.environ.get("PYFASTPIM_SANITIZED") != "1":
        pytest.skip("only under make sanitize")
    with open(pyfastpim._core.__file__, "rb") as fh:
        blob = fh.read()
    producers = re.findall(rb"GNU C[^\x00]*", blob)
    assert producers, "no DWARF producer strings (built without -g?)"
    assert any(b"-fsanitize=" in p for p in producers)
    for p in producers:
        assert b" -fwrapv" not in p, p


def test_isa_emulation_is_only_in_its_own_build():
    """The build of `make test-isa-emulation` (which sets PYFASTPIM_ISA_EMULATED=1 for its tests) runs its AVX-512
    and VNNI instances through SIMDe; every other build must carry the real instructions."""
    assert pyfastpim._core.ISA_EMULATION == (os.environ.get("PYFASTPIM_ISA_EMULATED") == "1")


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".ci", "tsan-cc")), reason="needs the source tree")
def test_the_tsan_compiler_wrapper_knows_every_simd_file():
    """clang (the `make tsan` compiler) ignores GCC's file-wide `#pragma GCC target`: .ci/tsan-cc
    gives each SIMD kernel file its ISA on the command line, so a new kernel file must be listed
    there with the features its pragma names (an AVX-VNNI file was missed once)."""
    wrapper = open(os.path.join(ROOT, ".ci", "tsan-cc")).read()
    cases = {}
    for line in wrapper.splitlines():
        m = re.match(r"\s*([^)]*\.c)\)\s*exec .*\"\$@\"(.*);;", line)
        if m:
            flags = set(re.findall(r"-m([\w-]+)", m.group(2)))
            for pattern in m.group(1).split("|"):
                cases[pattern.strip().lstrip("*")] = flags
    src = os.path.join(ROOT, "csrc", "cpu")
    for name in sorted(os.listdir(src)):
        if not name.endswith(".c"):
            continue
        m = re.search(r'#pragma GCC target\("([^"]+)"\)', open(os.path.join(src, name)).read())
        if not m:
            continue
        matches = [flags for suffix, flags in cases.items() if name.endswith(suffix)]
        assert matches, "%s has '#pragma GCC target' but no case in .ci/tsan-cc" % name
        want = set(m.group(1).split(","))
        assert want <= matches[0], "%s: .ci/tsan-cc lacks %s" % (name, sorted(want - matches[0]))
