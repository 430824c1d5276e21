"""The OpenCL backend's table-driven launcher (csrc/opencl/internal.h PF_CL_KERNELS, launcher.c).

Every kernel is declared once in a table with its argument kinds; building the program checks each
declared argument count against what the program reports (CL_KERNEL_NUM_ARGS) and refuses a
mismatch with a clear error. Here: the table matches the built program, matches the kernels'
source text in kernels/*.cl (parsed independently), lists every kernel of that source, and a wrong
count is refused by the same check the build runs.
"""
import glob
import os
import re

import pytest

import pyfastpim
from pyfastpim import _core
from helpers import ROOT

NPLAT, _ = _core.cl_devices()
pytestmark = pytest.mark.skipif(NPLAT == 0, reason="no OpenCL platform: the OpenCL ICD loader reports none "
                                                   "(install pocl-opencl-icd to run these tests)")
KERNELS = os.path.join(ROOT, "kernels")


def source_kernels():
    """{kernel name: parameter count} from the text of kernels/*.cl."""
    found = {}
    for path in sorted(glob.glob(os.path.join(KERNELS, "*.cl"))):
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"\bkernel\s+void\s+(\w+)\s*\(([^)]*)\)", text):
            params = [p for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
            assert m.group(1) not in found, f"kernel {m.group(1)} defined twice"
            found[m.group(1)] = len(params)
    return found


@pytest.fixture(scope="module")
def device():
    return pyfastpim.resolve_device("opencl")


def test_kernel_table_matches_the_built_program(device):
    table = device._kernel_table()
    names = [name for name, _, _ in table]
    assert len(names) == len(set(names)), "a kernel is declared twice"
    for name, declared, actual in table:
        assert declared == actual, f"{name}: declared {declared} arguments, the program's kernel takes {actual}"
        assert declared >= 2


def test_kernel_table_matches_the_kernel_sources(device):
    table = {name: declared for name, declared, _ in device._kernel_table()}
    source = source_kernels()
    # every kernel of the program is declared, and nothing else
    assert set(table) == set(source)
    for name, count in source.items():
        assert table[name] == count, f"{name}: {count} parameters in kernels/*.cl, {table[name]} declared"
    # the MVM kernels share their first 21 arguments; the tiled one adds kt and two local tiles
    assert table["pf_dpe_mvm_tiled"] == table["pf_dpe_mvm"] + 3


@pytest.mark.parametrize("name", ["pf_dpe_mvm", "pf_dpe_pack_x", "pf_slice_quant", "pf_attn_tanh"])
def test_a_wrong_argument_count_is_refused(device, name):
    counts = {n: actual for n, _, actual in device._kernel_table()}
    assert device._check_kernel_args(name, counts[name]) is None
    for wrong in (counts[name] + 1, counts[name] - 1, 0):
        with pytest.raises(RuntimeError) as info:
            device._check_kernel_args(name, wrong)
        msg = str(info.value)
        assert name in msg and f"declared with {wrong} arguments" in msg and f"takes {counts[name]}" in msg


def test_unknown_kernel_name_is_a_value_error(device):
    with pytest.raises(ValueError, match="no kernel 'pf_no_such_kernel'"):
        device._check_kernel_args("pf_no_such_kernel", 3)

