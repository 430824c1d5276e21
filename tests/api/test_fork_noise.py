"""Noise streams across fork and spawn (issue 13): torch DataLoader workers forked from a parent that
holds a noisy layer must not draw the same noise for the same call numbers.

The rule (docs/semantics.md section 11, pyfastpim.noise_stream): an engine created in a process keys
its noise with its seed, in any process; an engine *inherited* by a forked child (or unpickled, as
spawn workers get their dataset) keeps its programmed weights but keys its per-call noise with
mix(seed, the child's noise stream). A forked child's stream comes from the parent's fork number, so
the same program gives the same streams; pyfastpim.seed_worker derives it from torch's worker seed.

Every DataLoader runs in a fresh interpreter (its own fork tree) under a timeout."""
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import pyfastpim
from pyfastpim import DPETensor, dpe_matmul
from helpers import CHILD_TIMEOUT, PKG_ROOT, run_script

TIMEOUT = CHILD_TIMEOUT
ROOT = PKG_ROOT


WORKERS = """
import json, numpy as np, torch, pyfastpim
from pyfastpim import DPETensor, dpe_matmul
from pyfastpim.nn import LinearMem
torch.manual_seed(0)
rng = np.random.default_rng(1)
xn = rng.standard_normal((4, 32)).astype(np.float32)
wn = rng.standard_normal((32, 8)).astype(np.float32)
eng = DPETensor(read_variation=0.05, vnoise=0.05, write_variation=0.02)          # per-call noise
chip = DPETensor(read_variation=0.0, vnoise=0.0, write_variation=0.05, seed=11)  # programming only
kw = dict(weight_paral_size=(32, 8), weight_quant_gran=(32, 8))
layer = LinearMem(eng, 32, 8, (1, 1, 2), (1, 1, 2), **kw)
fixed = LinearMem(chip, 32, 8, (1, 1, 2), (1, 1, 2), **kw)
x = torch.from_numpy(xn)

def b(t):
    return np.asarray(t, np.float32).tobytes().hex()

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        with torch.no_grad():
            call = eng.calls
            noisy = layer(x)
            prog = fixed(x)
        fresh = dpe_matmul(xn, wn, DPETensor(read_variation=0.05, vnoise=0.05, seed=3))  # made in the worker
        info = torch.utils.data.get_worker_info()
        return dict(worker=info.id, call=call, noisy=b(noisy), prog=b(prog), fresh=b(fresh),
                    stream=str(pyfastpim.noise_stream()))

with torch.no_grad(), pyfastpim.threads(2):
    layer(x)  # the parent runs parallel kernels first
    prog_parent = b(fixed(x))
c0 = eng.calls

def epoch(**extra):
    loader = torch.utils.data.DataLoader(Data(), batch_size=None, num_workers=2, multiprocessing_context="fork",
                                         timeout=%(timeout)d, **extra)
    return list(loader)

res = {"c0": c0, "prog_parent": prog_parent, "stream": str(pyfastpim.noise_stream()),
       "fresh_parent": b(dpe_matmul(xn, wn, DPETensor(read_variation=0.05, vnoise=0.05, seed=3)))}
res["auto1"] = epoch()
res["auto2"] = epoch()
torch.manual_seed(123)
res["seeded1"] = epoch(worker_init_fn=pyfastpim.seed_worker)
torch.manual_seed(123)
res["seeded2"] = epoch(worker_init_fn=pyfastpim.seed_worker)
with torch.no_grad():
    res["parent_c0"] = b(layer(x))  # the parent's own call c0, after the workers ran
    res["parent_calls"] = eng.calls
print(json.dumps(res))
"""


def _run_dataloader(body):
    return json.loads(run_script(body, "the DataLoader script").strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs():
    pytest.importorskip("torch")
    body = WORKERS % {"timeout": TIMEOUT - 60}
    return _run_dataloader(body), _run_dataloader(body)


def _check_epoch(items, res):
    assert [it["worker"] for it in items] == [0, 1, 0, 1]  # batch_size=None: items round-robin
    assert [it["call"] for it in items] == [res["c0"], res["c0"], res["c0"] + 1, res["c0"] + 1]
    noisy = [it["noisy"] for it in items] + [res["parent_c0"]]
    # worker 0 and worker 1 make the same call numbers with the same inherited layer, and the
    # parent makes call c0 too: all five draw distinct noise
    assert len(set(noisy)) == 5
    # programming (write variation) follows the seed alone: the same chip in every process
    assert all(it["prog"] == res["prog_parent"] for it in items)
    # an engine created in a worker with seed 3 gives what one created in the parent gives
    assert all(it["fresh"] == res["fresh_parent"] for it in items)
    streams = {it["worker"]: it["stream"] for it in items}
    assert "None" not in streams.values() and streams[0] != streams[1]


def test_fork_workers_draw_distinct_noise_from_an_inherited_layer(runs):
    res, _ = runs
    assert res["stream"] == "None"  # the parent has no stream: its engines key with their seeds
    assert res["parent_calls"] == res["c0"] + 1  # the workers' calls do not advance the parent's counter
    for name in ("auto1", "auto2", "seeded1", "seeded2"):
        _check_epoch(res[name], res)


def test_a_new_set_of_fork_workers_draws_new_noise(runs):
    res, _ = runs
    # each DataLoader iterator forks new workers (fork numbers 3, 4 after 1, 2): fresh noise per epoch,
    # as torch draws a new base seed per epoch
    assert {it["noisy"] for it in res["auto1"]}.isdisjoint(it["noisy"] for it in res["auto2"])


def test_seed_worker_streams_follow_torch_manual_seed(runs):
    res, _ = runs
    # the same torch seed gives the same worker seeds, hence the same noise, whatever else forked before
    assert res["seeded1"] == res["seeded2"]
    assert {it["noisy"] for it in res["seeded1"]}.isdisjoint(it["noisy"] for it in res["auto1"])


def test_the_same_program_gives_the_same_worker_noise(runs):
    first, second = runs
    assert first == second  # fork streams depend on the fork order only: reproducible run to run


def test_unpickled_engine_follows_the_process_stream():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    w = rng.standard_normal((32, 5)).astype(np.float32)
    eng = DPETensor(read_variation=0.05, vnoise=0.05, seed=9)
    clone = pickle.loads(pickle.dumps(eng))
    assert eng._counter.inherited is False and clone._counter.inherited is True
    assert pyfastpim.noise_stream() is None
    assert clone._noise_key() == eng._noise_key() == 9  # no stream: the seed alone
    np.testing.assert_array_equal(dpe_matmul(x, w, clone), dpe_matmul(x, w, eng))
    try:
        pyfastpim.set_noise_stream(7)  # what seed_worker does in a spawn worker
        assert pyfastpim.noise_stream() == 7
        key = clone._noise_key()
        assert key != 9 and 0 <= key < 2 ** 63
        assert eng._noise_key() == 9  # the process's own engines keep their seed
        pyfastpim.set_noise_stream(8)
        assert clone._noise_key() != key  # distinct streams, distinct keys
        noisy = dpe_matmul(x, w, clone)
        assert not np.array_equal(noisy, dpe_matmul(x, w, eng))
        clone.reset(9)  # reset makes it the process's own engine again
        assert clone._counter.inherited is False and clone._noise_key() == 9
    finally:
        pyfastpim.set_noise_stream(None)
    assert pyfastpim.noise_stream() is None


def test_set_noise_stream_rejects_bad_values():
    for bad, exc in ((-1, ValueError), (2 ** 64, ValueError), (1.5, TypeError), ("1", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="stream"):
            pyfastpim.set_noise_stream(bad)
    assert pyfastpim.noise_stream() is None


def test_seed_worker_outside_a_worker_raises():
    pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="worker_init_fn"):
        pyfastpim.seed_worker(0)
    for ok in (np.int64(1), None):
        with pytest.raises(RuntimeError, match="worker_init_fn"):
            pyfastpim.seed_worker(ok)


@pytest.mark.parametrize("bad", [1.5, "0", True, [0]])
def test_seed_worker_checks_its_argument_first(bad):
    # found by review: a bad worker_id was reported as "not in a DataLoader worker", its argument never looked at
    pytest.importorskip("torch")
    with pytest.raises(TypeError, match="^argument 'worker_id': expected an int or None, got "):
        pyfastpim.seed_worker(bad)


SPAWN = """
import json, sys, numpy as np, torch, pyfastpim
from pyfastpim import DPETensor, SlicedData

class Data(torch.utils.data.Dataset):
    def __init__(self):
        rng = np.random.default_rng(4)
        self.eng = DPETensor(read_variation=0.05, vnoise=0.05)
        self.xs = SlicedData((1, 1, 2, 4), is_weight=False)
        self.xs.slice_data_imp(self.eng, rng.standard_normal((4, 32)).astype(np.float32))
        self.ws = SlicedData((1, 1, 2, 4), is_weight=True)
        self.ws.slice_data_imp(self.eng, rng.standard_normal((32, 8)).astype(np.float32))
    def __len__(self):
        return 2
    def __getitem__(self, i):
        out = np.asarray(self.eng(self.xs, self.ws))
        return dict(worker=torch.utils.data.get_worker_info().id, out=out.tobytes().hex(),
                    stream=str(pyfastpim.noise_stream()))

if __name__ == "__main__":
    torch.manual_seed(5)
    loader = torch.utils.data.DataLoader(Data(), batch_size=None, num_workers=2, worker_init_fn=pyfastpim.seed_worker,
                                         multiprocessing_context="spawn", timeout=%(timeout)d)
    seeded = list(loader)
    d = Data()
    unstreamed = np.asarray(d.eng(d.xs, d.ws)).tobytes().hex()  # what a worker without a stream draws
    print(json.dumps(dict(seeded=seeded, unstreamed=unstreamed)))
"""


@pytest.mark.skipif("site-packages" in os.path.abspath(pyfastpim.__file__).split(os.sep),
                    reason="spawn workers re-import the script's package from the checkout")
def test_spawn_workers_draw_distinct_noise_with_seed_worker(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "spawn_noise.py"
    script.write_text("import sys; sys.path.insert(0, %r)\n" % ROOT + SPAWN % {"timeout": 2 * TIMEOUT - 60})
    try:  # two spawn workers each import torch: slow under the sanitizers
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=2 * TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("the spawn DataLoader script hung (no answer in %d s)" % (2 * TIMEOUT))
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    seeded = res["seeded"]
    assert [it["worker"] for it in seeded] == [0, 1]
    # a spawned worker is a fresh process without a stream of its own; seed_worker gives each worker
    # one, so the two unpickled engines draw distinct noise for the same call number ...
    assert "None" not in (seeded[0]["stream"], seeded[1]["stream"])
    assert seeded[0]["stream"] != seeded[1]["stream"] and seeded[0]["out"] != seeded[1]["out"]
    # ... and not the noise of the seed alone (what both would draw without seed_worker)
    assert res["unstreamed"] not in (seeded[0]["out"], seeded[1]["out"])
