"""LinearMem / Conv2dMem under DistributedDataParallel (gloo, 2 processes on this machine).

Two worker processes each take half of a batch; with noise off the engine is deterministic and
every input row is quantized on its own (granules of one row), so the ranks' outputs are exactly
the rows of the one-process run, and DDP's averaged gradients equal the one-process gradients
(up to summation order). Rank 1 starts from different weights: DDP's initial broadcast must
re-program its crossbars (automatically: the weights' version changed), and so must the
optimizer step before the second forward.
"""
import os
import socket
import subprocess
import sys

import pytest
torch = pytest.importorskip("torch", reason="DistributedDataParallel is torch")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # tests/api -> the checkout
WORLD = 2
BATCH = 8


def _engine():
    from noise_off import noise_free_engine  # tests/: on sys.path here (conftest) and in the workers (PYTHONPATH)
    return noise_free_engine(radc=2 ** 10, seed=0)


def _model(seed):
    from pyfastpim.nn import Conv2dMem, LinearMem
    torch.manual_seed(seed)
    engine = _engine()
    s = (1, 1, 2, 2)
    return torch.nn.Sequential(
        Conv2dMem(engine, 2, 4, 3, s, s, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        LinearMem(engine, 4 * 6 * 6, 5, s, s))


def _data():
    g = torch.Generator().manual_seed(123)
    return torch.randn(BATCH, 2, 6, 6, generator=g), torch.randint(0, 5, (BATCH,), generator=g)


def _step(model, x, y):
    """forward, mean cross-entropy, backward, SGD step, forward again; returns what is compared."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    out = model(x)
    torch.nn.functional.cross_entropy(out, y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()
    with torch.no_grad():
        out2 = model(x)
    state = {k: v.clone() for k, v in getattr(model, "module", model).state_dict().items()}
    return {"out": out.detach(), "grads": grads, "out2": out2, "state": state}


def _worker(rank, port, path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        model = DDP(_model(seed=0 if rank == 0 else 99))
        x, y = _data()
        rows = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
        torch.save(_step(model, x[rows], y[rows]), path)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_processes_match_one(tmp_path):
    pyfastpim = pytest.importorskip("pyfastpim")
    if not hasattr(pyfastpim, "DPETensor"):
        pytest.skip("pyfastpim.DPETensor not in this build")
    ref = _step(_model(seed=0), *_data())

    port = _free_port()
    # the children import the same pyfastpim as this process (the checkout or the installed package)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))
    paths = [pkg_root, os.path.dirname(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p]  # + tests/
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, str(r), str(port), str(tmp_path / ("r%d.pt" % r))],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(WORLD)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=120)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("DDP workers timed out")
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log
    res = [torch.load(tmp_path / ("r%d.pt" % r)) for r in range(WORLD)]

    assert torch.equal(torch.cat([r["out"] for r in res]), ref["out"])
    for r in res:
        for g, g_ref in zip(r["grads"], ref["grads"]):
            torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)
    # the ranks stay in sync, and each re-programmed its crossbars after the step: its second output is
    # what a fresh model with the stepped weights computes (which differs from the one-process run only
    # where a last-ulp gradient difference flips a weight's quantization)
    for a, b in zip(res[0]["state"].values(), res[1]["state"].values()):
        assert torch.equal(a, b)
    for a, b in zip(res[0]["state"].values(), ref["state"].values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    fresh = _model(seed=7)
    fresh.load_state_dict(res[0]["state"])
    x, _ = _data()
    with torch.no_grad():
        assert torch.equal(fresh(x), torch.cat([r["out2"] for r in res]))


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
