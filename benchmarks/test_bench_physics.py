"""Device physics (issue 15): IR drop from wire resistance on the 1024 x 1024 layer of the engine
benchmark (slices (1, 1, 2, 2), 32 x 32 crossbars).

- Programming: slicing + programming the weights with IR drop (the effective conductances of all
  4 x 32 x 32 = 4096 crossbar blocks are solved here, once) against the same without IR drop.
- Per call, x (512, 1024): each IR-drop product against the same product without IR drop, target
  within 1.1x (the kernel reads the stored G_eff: no per-call network solve; with read and DAC
  noise, read noise multiplies the stored G_eff per cell, the documented approximation of
  docs/physics.md). The target is the median ratio of calls alternating with the reference's
  (interleaved.py), so both see the same phases of a shared machine. Noise-free without IR drop
  the engine takes the exact integer path, which IR drop cannot (G_eff are not integer levels):
  the noise-off target and the group's reference are the float kernel's product, and the
  default (integer) product's speedup over it is in the table too.
"""
import time

from pyfastpim import DPETensor, _core
from engine_case import K, P, float_kernel, program, sliced
from interleaved import interleaved_ratio

BASE = dict(g_level=4, rdac=4, radc=2 ** 12, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0)
NOISE_OFF = dict(BASE, read_variation=0.0, vnoise=0.0)
NOISE_ON = dict(BASE, read_variation=0.05, vnoise=0.05)
WIRE = 2.0  # ohms per segment
GROUP_CALL = "physics: call 512x1024 @ 1024x1024"
GROUP_PROGRAM = "physics: programming 1024x1024"


def test_physics_program_no_ir(benchmark, operands):
    _, w = operands
    eng = DPETensor(**NOISE_OFF)
    benchmark.group = GROUP_PROGRAM
    benchmark.extra_info["role"] = "reference"
    # about a millisecond per call, unlike the seconds of the other references: a warm-up call (first-touch
    # page faults) and 200 rounds (0.2 s) for a stable median: 3 cold rounds moved 80-280% between runs
    benchmark.pedantic(program, args=(eng, w), rounds=200, warmup_rounds=1, iterations=1)


def test_physics_program_ir_drop(benchmark, operands):
    _, w = operands
    eng = DPETensor(wire_resistance=WIRE, **NOISE_OFF)
    benchmark.group = GROUP_PROGRAM
    benchmark.extra_info["role"] = "subject"
    benchmark.extra_info["blocks"] = 4 * (K // 32) * (P // 32)
    cpu = []

    def timed():
        t0 = time.process_time()  # CPU seconds of all threads: meaningful on a shared machine too
        ws = program(eng, w)
        cpu.append(time.process_time() - t0)
        return ws
    ws = benchmark.pedantic(timed, rounds=1, iterations=1)
    assert ws._physics is not None
    benchmark.extra_info["cpu_s"] = cpu[0]
    benchmark.extra_info["cpu_ms_per_block"] = 1e3 * cpu[0] / benchmark.extra_info["blocks"]


def bench_call(benchmark, operands, engine_kw, role, targets=None):
    """One timed product of the case on an engine with engine_kw, in the call group; the engine and operands."""
    x, w = operands
    eng = DPETensor(**engine_kw)
    xs, ws = sliced(eng, x, w)
    benchmark.group = GROUP_CALL
    benchmark.extra_info["role"] = role
    if targets:
        benchmark.extra_info["targets"] = targets
    benchmark.pedantic(eng, args=(xs, ws), rounds=5, iterations=1, warmup_rounds=1)
    return eng, xs, ws


def bench_ir_call(benchmark, operands, noise_kw, reference_kw, key):
    """The IR-drop case with noise_kw, its target the interleaved ratio `key` to the case without IR drop
    (reference_kw): with noise off that reference runs on the float kernel, as the IR-drop case must."""
    x, w = operands
    c0 = _core.dpe_int_path()["calls"]
    eng, xs, ws = bench_call(benchmark, operands, dict(noise_kw, wire_resistance=WIRE), "subject", {key: 1.1})
    assert _core.dpe_int_path()["calls"] == c0  # G_eff are no integer levels: the float kernel
    ref = DPETensor(**reference_kw)
    rxs, rws = sliced(ref, x, w)
    with float_kernel():
        benchmark.extra_info[key] = interleaved_ratio(lambda: eng(xs, ws), lambda: ref(rxs, rws))


# one function per case (not parametrized): report.py names cases by function and resolves "vs:" by it

def test_physics_call_noise_off_float(benchmark, operands):
    assert _core.dpe_int_path()["enabled"]
    with float_kernel():  # the float kernel, which the IR-drop case runs
        bench_call(benchmark, operands, NOISE_OFF, "reference")


def test_physics_call_noise_off(benchmark, operands):
    c0 = _core.dpe_int_path()["calls"]
    bench_call(benchmark, operands, NOISE_OFF, "subject")
    assert _core.dpe_int_path()["calls"] > c0  # the default path of a noise-free product: the integer one


def test_physics_call_ir_noise_off(benchmark, operands):
    bench_ir_call(benchmark, operands, NOISE_OFF, NOISE_OFF, "vs_noise_off_float_interleaved")


def test_physics_call_noise_on(benchmark, operands):
    bench_call(benchmark, operands, NOISE_ON, "subject")


def test_physics_call_ir_noise_on(benchmark, operands):
    bench_ir_call(benchmark, operands, NOISE_ON, NOISE_ON, "vs_noise_on_interleaved")
