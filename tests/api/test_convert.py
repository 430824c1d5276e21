"""pyfastpim.nn.convert: replacing nn.Linear / nn.Conv2d in arbitrary models."""
import warnings

import pytest
torch = pytest.importorskip("torch", reason="convert() works on torch models")
from torch import nn  # noqa: E402

import pyfastpim
import pyfastpim.nn
from pyfastpim.nn import Conv2dMem, LinearMem, convert
from helpers import NOISE_OFF

HIGH_RES = (1, 1, 2, 2, 2, 2, 2, 2, 2)   # 16-bit slices, 2 bits per cell


def ideal_engine():
    if not hasattr(pyfastpim, "DPETensor"):
        pytest.skip("pyfastpim.DPETensor not in this build")
    return pyfastpim.DPETensor(g_level=4, rdac=4, radc=2 ** 16, seed=0, **NOISE_OFF)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, (3, 1), padding="same", bias=False)
        self.head = nn.ModuleList([nn.Linear(8 * 4 * 4, 32), nn.Linear(32, 10)])

    def forward(self, x):
        x = torch.relu(self.conv(x)).flatten(1)
        return self.head[1](torch.relu(self.head[0](x)))


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.BatchNorm2d(8),
                         nn.Conv2d(8, 8, 3, padding=(1, 2), dilation=(1, 2)), nn.ReLU(), Block()).eval()


def test_convert_ideal_engine_matches_float_model():
    model = make_model()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        ref = model(x)
    params = {k: v.clone() for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # everything here is mappable
        out_model = convert(model, ideal_engine(), HIGH_RES, HIGH_RES)
    assert out_model is model
    kinds = [type(m) for m in model.modules()]
    assert kinds.count(Conv2dMem) == 3 and kinds.count(LinearMem) == 2
    assert nn.Linear not in kinds and nn.Conv2d not in kinds
    assert model[5].conv.padding == (1, 0) and model[5].conv.bias is None
    # weights copied exactly, same state_dict keys
    state = model.state_dict()
    assert set(state) == set(params)
    for k in params:
        assert torch.equal(state[k], params[k])
    with torch.no_grad():
        out = model(x)
    assert pyfastpim.RE(ref, out) < 1e-2
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    # training still works through the converted model
    model.train()
    model(x).sum().backward()
    assert model[0].weight.grad is not None and model[5].head[1].bias.grad is not None


def test_convert_warns_for_unmappable_layers_and_leaves_them():
    eng = ideal_engine()
    shared = nn.Linear(4, 4)
    model = nn.Sequential(nn.Conv2d(4, 4, 3, groups=2), nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect"),
                          nn.Conv2d(4, 4, 2, padding="same"), nn.Conv1d(4, 4, 1), nn.ConvTranspose2d(4, 4, 2),
                          nn.MultiheadAttention(4, 1), shared, nn.Sequential(shared), nn.Linear(4, 2))
    with pytest.warns(UserWarning) as rec:
        convert(model, eng, (1, 1, 2), (1, 1, 2))
    msg = str(rec[0].message)
    for part in ("0 (Conv2d groups=2)", "1 (Conv2d padding_mode='reflect')", "2 (Conv2d asymmetric padding='same')",
                 "3 (Conv1d", "4 (ConvTranspose2d", "5 (MultiheadAttention"):
        assert part in msg
    assert "left 6 layer(s)" in msg                   # and nothing else: the linear layers were mapped
    assert type(model[0]) is nn.Conv2d and type(model[4]) is nn.ConvTranspose2d
    assert type(model[5].out_proj) is not LinearMem
    assert isinstance(model[6], LinearMem) and model[7][0] is model[6]    # sharing preserved
    assert isinstance(model[8], LinearMem)


def test_convert_options():
    eng = ideal_engine()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8)), nn.Linear(8, 2))
    model[2].weight.requires_grad_(False)
    convert(model, eng, (1, 1, 2, 2), (1, 1, 2, 2), exclude=["1"], bw_e=4, input_paral_size=(1, 16),
            weight_paral_size=(16, 16), input_quant_gran="per-row", weight_quant_gran=None)
    assert isinstance(model[0], LinearMem) and type(model[1][0]) is nn.Linear
    assert model[0].bw_e == 4 and model[0].weight_paral_size == (16, 16) and model[0].input_quant_gran == "per-row"
    assert model[0].engine is eng and not model[2].weight.requires_grad
    # a bare layer is returned converted
    lin = convert(nn.Linear(3, 2), eng, (1, 1, 2, 2), (1, 1, 2, 2))
    assert isinstance(lin, LinearMem)
    with pytest.raises(TypeError, match="paral"):
        convert(nn.Linear(3, 2), eng, (1, 1, 2, 2), (1, 1, 2, 2), paral_size=(1, 32))
    with pytest.raises(TypeError, match="nn.Module"):
        convert("model", eng, (1, 1, 2, 2), (1, 1, 2, 2))
