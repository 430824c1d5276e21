"""DeiT vision transformers (MemIntelli's ``DeiT`` / ``deit_zoo``): every linear layer on the crossbar.

The patch embedding (a strided convolution), layer norms, attention products and softmax stay
digital, as in MemIntelli. Module names follow the official DeiT checkpoints (timm layout), which
load unchanged (``pretrained=True`` reads the checkpoint's ``'model'`` entry).
"""
import torch
import torch.nn as nn

from ._common import MemModel, build_mem_args, default_device, linear, load_into, load_url_state_dict

__all__ = ["DeiT", "deit_zoo", "PatchEmbed", "Block", "Mlp", "Attention"]

model_urls = {
    'deit_tiny_patch16_224': 'https://dl.fbaipublicfiles.com/deit/deit_tiny_patch16_224-a1311bcf.pth',
    'deit_small_patch16_224': 'https://dl.fbaipublicfiles.com/deit/deit_small_patch16_224-cd65a155.pth',
    'deit_base_patch16_224': 'https://dl.fbaipublicfiles.com/deit/deit_base_patch16_224-b5f2ef4d.pth',
}
_CONFIGS = {'deit_tiny_patch16_224': dict(embed_dim=192, depth=12, num_heads=3),
            'deit_small_patch16_224': dict(embed_dim=384, depth=12, num_heads=6),
            'deit_base_patch16_224': dict(embed_dim=768, depth=12, num_heads=12)}


class PatchEmbed(nn.Module):
    """Image (N, C, H, W) -> patch tokens (N, H/p * W/p, embed_dim) with a stride-p convolution."""

    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
        super().__init__()
        self.img_size = (img_size, img_size)
        self.patch_size = (patch_size, patch_size)
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.,
                 mem_enabled=False, mem_args=None):
        super().__init__()
        a = dict(mem_args or {}) if mem_enabled else {}
        self.fc1 = linear(a, mem_enabled, in_features, hidden_features or in_features)
        self.act = act_layer()
        self.fc2 = linear(a, mem_enabled, hidden_features or in_features, out_features or in_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Attention(nn.Module):
    """Multi-head self-attention; the qkv and output projections are crossbar layers."""

    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0., proj_drop=0., mem_enabled=False,
                 mem_args=None):
        super().__init__()
        if dim % num_heads:
            raise ValueError("dim (%d) must be a multiple of num_heads (%d)" % (dim, num_heads))
        a = dict(mem_args or {}) if mem_enabled else {}
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = linear(a, mem_enabled, dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = linear(a, mem_enabled, dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = self.attn_drop(torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1))
        return self.proj_drop(self.proj((attn @ v).transpose(1, 2).reshape(b, n, c)))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, drop=0., attn_drop=0., act_layer=nn.GELU,
                 norm_layer=nn.LayerNorm, mem_enabled=False, mem_args=None):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop,
                              mem_enabled=mem_enabled, mem_args=mem_args)
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=drop, mem_enabled=mem_enabled,
                       mem_args=mem_args)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DeiT(MemModel):
    """``DeiT(img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dim=768, depth=12, num_heads=12,
    mlp_ratio=4., qkv_bias=True, representation_size=None, distilled=False, drop_rate=0., attn_drop_rate=0.,
    drop_path_rate=0., mem_enabled=False, mem_args=None)`` (drop_path_rate is accepted and unused, as in MemIntelli)."""

    def __init__(self, img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dim=768, depth=12,
                 num_heads=12, mlp_ratio=4., qkv_bias=True, representation_size=None, distilled=False, drop_rate=0.,
                 attn_drop_rate=0., drop_path_rate=0., mem_enabled=False, mem_args=None):
        super().__init__()
        self.mem_enabled = mem_enabled
        self.mem_args = dict(mem_args or {}) if mem_enabled else {}
        a, m = self.mem_args, mem_enabled
        self.num_classes = num_classes
        self.num_features = self.embed_dim = embed_dim
        self.num_tokens = 2 if distilled else 1
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if distilled else None
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + self.num_tokens, embed_dim))
        self.pos_drop = nn.Dropout(p=drop_rate)
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate,
                                            mem_enabled=m, mem_args=a) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        if representation_size:
            self.num_features = representation_size
            self.pre_logits = nn.Sequential(linear(a, m, embed_dim, representation_size), nn.Tanh())
        else:
            self.pre_logits = nn.Identity()
        self.head = linear(a, m, self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        if distilled:
            self.head_dist = linear(a, m, embed_dim, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x):
        x = self.patch_embed(x)
        tokens = [self.cls_token.expand(x.shape[0], -1, -1)]
        if self.dist_token is not None:
            tokens.append(self.dist_token.expand(x.shape[0], -1, -1))
        x = self.pos_drop(torch.cat(tokens + [x], dim=1) + self.pos_embed)
        x = self.norm(self.blocks(x))
        return self.head(self.pre_logits(x[:, 0]))


def deit_zoo(model_name='deit_base_patch16_224', num_classes=1000, pretrained=False, mem_enabled=False, engine=None,
             input_slice=(1, 1, 2, 4), weight_slice=(1, 1, 2, 4), device=None, bw_e=None,
             input_paral_size=(1, 32), weight_paral_size=(32, 32), input_quant_gran=(1, 64),
             weight_quant_gran=(64, 64)):
    """A 224x224 DeiT ('deit_tiny_patch16_224', 'deit_small_patch16_224', 'deit_base_patch16_224').

    Unlike MemIntelli's (which drops them), the paral sizes and granularities are passed to the layers."""
    if model_name not in _CONFIGS:
        raise ValueError(f"Invalid model name: {model_name}")
    mem_args = build_mem_args(mem_enabled, engine=engine, input_slice=input_slice, weight_slice=weight_slice,
                              device=default_device() if device is None else device, bw_e=bw_e,
                              input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                              input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)
    model = DeiT(patch_size=16, num_classes=num_classes, mem_enabled=mem_enabled, mem_args=mem_args,
                 **_CONFIGS[model_name])
    if pretrained:
        checkpoint = load_url_state_dict(model_urls[model_name])
        load_into(model, checkpoint['model'] if 'model' in checkpoint else checkpoint)
    return model

# The layers MemIntelli's module imports for its own use (scripts import them from here); not in __all__.
from ..NN_layers import LinearMem  # noqa: E402
_REEXPORTS = (LinearMem,)  # referenced: pyflakes sees them used
