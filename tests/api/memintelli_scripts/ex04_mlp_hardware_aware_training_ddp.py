"""Example 04 shape: hardware-aware training under DistributedDataParallel (gloo, 2 processes on the CPU).

Each process trains on its shard (DistributedSampler); DDP averages the gradients, every rank
re-programs its crossbars after each step (update_weight on model.module), and the ranks'
weights stay identical.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from pyfastpim.memintelli.pimpy.memmat_tensor import DPETensor  # noqa: E402
from _common import synthetic_classes  # noqa: E402
from ex02_mlp_inference import MLP  # noqa: E402


def _worker(rank, world, port, out_path, steps):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group(backend="gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(100 + rank)  # different initial weights: DDP's broadcast must re-program rank 1
        engine = DPETensor(HGS=1e-5, LGS=1e-8, write_variation=0.02, rate_stuck_HGS=0.001, read_variation=0.05,
                           vnoise=0.05, rdac=2 ** 4, g_level=2 ** 4, radc=2 ** 12, device="cpu")
        model = DDP(MLP(engine, (24, 16, 4), [1, 1, 2, 4], [1, 1, 2, 4], torch.device("cpu")))
        x, y = synthetic_classes(128, 24, 4, seed=3)
        data = TensorDataset(x, y)
        loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, num_replicas=world, rank=rank))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for step, (xb, yb) in enumerate(loader):
            if step == steps:
                break
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            model.module.update_weight()
            losses.append(float(loss))
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        # every rank's crossbars hold its weights: identical weights give identical programmed levels
        levels = torch.cat([torch.as_tensor(m.weight_sliced.quantized_data).reshape(-1)
                            for m in model.module.modules() if hasattr(m, "weight_sliced")])
        glev = [torch.empty_like(levels) for _ in range(world)]
        dist.all_gather(glev, levels)
        if rank == 0:
            torch.save({"param_diff": float((gathered[0] - gathered[1]).abs().max()),
                        "wq_diff": float((glev[0] - glev[1]).abs().max()), "losses": losses}, out_path)
    finally:
        dist.destroy_process_group()


def main(out_path=None, steps=3, world=2):
    out_path = out_path or os.path.join(os.getcwd(), "ddp_result.pt")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(world, port, out_path, steps), nprocs=world, join=True)
    result = torch.load(out_path)
    print("max weight difference between ranks %g, losses %s" % (result["param_diff"], result["losses"]))
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
