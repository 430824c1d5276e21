"""Example 01 shape: one matrix product on the crossbar in INT and BFP modes, with its SNR."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pyfastpim.memintelli.pimpy.memmat_tensor import DPETensor  # noqa: E402
from pyfastpim.memintelli.pimpy.data_formats import SlicedData  # noqa: E402
from pyfastpim.memintelli.pimpy.utils import SNR  # noqa: E402


def main(rows=40, inner=150, cols=60):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(42)
    engine = DPETensor(HGS=1e-5, LGS=1e-8, write_variation=0.0, rate_stuck_HGS=0.001, rate_stuck_LGS=0.0,
                       read_variation={0: 0.05, 1: 0.05, 2: 0.05, 3: 0.05}, vnoise=0.05, rdac=2 ** 2,
                       g_level=2 ** 2, radc=2 ** 12, device=device)
    x = torch.randn(rows, inner, device=device)
    w = torch.randn(inner, cols, device=device)
    slices = torch.tensor([1, 1, 2, 2, 2])
    snr = {}
    for mode, bw_e in (("INT", None), ("FP", 8)):
        xs = SlicedData(slices, device=device, bw_e=bw_e, is_weight=False, paral_size=(1, 32), quant_gran=(1, 128))
        ws = SlicedData(slices, device=device, bw_e=bw_e, is_weight=True, paral_size=(32, 32),
                        quant_gran=(128, 128))
        xs.slice_data_imp(engine, x)
        ws.slice_data_imp(engine, w)
        out = engine(xs, ws)
        assert out.shape == (rows, cols) and out.device == x.device
        snr[mode] = SNR(torch.matmul(x, w).cpu().numpy(), out.cpu().numpy())
        print("%s mode: SNR %.2f dB" % (mode, snr[mode]))
    return snr


if __name__ == "__main__":
    main()
