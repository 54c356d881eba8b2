"""LlamaGen's VQ tokenizer (``tokenizer/tokenizer_image/vq_model.py``): codebook, encoder and decoder.

Checkpoint keys follow LlamaGen (``encoder.*``, ``decoder.*``, ``quant_conv``,
``post_quant_conv``, ``quantize.embedding.weight``; the usage buffer
``quantize.codebook_used`` is optional). The codebook is L2-normalised when
quantising and when looking codes up (``codebook_l2_norm``). VQ-16 (the c2i
tokenizer ``vq_ds16_c2i.pt``): 16384 codes of dimension 8, 16x downsampling;
small configurations (``vq_config("VQ-tiny", ...)``) keep every size a
parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from relaxspec.reference.checkpoint import load_strict
from relaxspec.theory.neighbours import DEFAULT_K_MAX, neighbour_table


@dataclass(frozen=True)
class VQConfig:
    """Shape of a LlamaGen VQ model; the downsampling factor is 2^(len(ch_mult) - 1)."""

    codebook_size: int = 16384
    codebook_embed_dim: int = 8
    codebook_l2_norm: bool = True
    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4)
    z_channels: int = 256
    num_res_blocks: int = 2
    image_channels: int = 3
    norm_groups: int = 32

    def __post_init__(self) -> None:
        for c in {self.ch * m for m in self.ch_mult}:
            if c % self.norm_groups:
                raise ValueError(f"channel count {c} is not a multiple of norm_groups {self.norm_groups}")

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)


VQ_PRESETS: dict[str, dict] = {
    "VQ-16": {"ch_mult": (1, 1, 2, 2, 4)},
    "VQ-8": {"ch_mult": (1, 2, 2, 4)},
    "VQ-tiny": {"ch": 32, "ch_mult": (1, 1), "z_channels": 32, "num_res_blocks": 1, "norm_groups": 8,
                "codebook_size": 8, "codebook_embed_dim": 4},
}


def vq_config(name: str, **overrides: object) -> VQConfig:
    """A named VQ configuration with ``overrides`` (e.g. ``codebook_size=512``)."""
    if name not in VQ_PRESETS:
        raise ValueError(f"unknown VQ model {name!r}; expected one of {sorted(VQ_PRESETS)}")
    return replace(VQConfig(**VQ_PRESETS[name]), **overrides)  # type: ignore[arg-type]


def _norm(c: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(groups, c, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = _norm(cin, groups), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = _norm(cout, groups), nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h


class AttnBlock(nn.Module):
    def __init__(self, c: int, groups: int) -> None:
        super().__init__()
        self.norm = _norm(c, groups)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        B, C, H, W = x.shape
        q, k, v = (m(h).reshape(B, C, H * W).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, C, H, W)
        return x + self.proj_out(y)


def _level(blk: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """One resolution level: residual blocks, each followed by its attention block if any."""
    for j, res in enumerate(blk.res):
        h = res(h)
        if len(blk.attn):
            h = blk.attn[j](h)
    return h


class Encoder(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        g, ch, mult = cfg.norm_groups, cfg.ch, cfg.ch_mult
        self.conv_in = nn.Conv2d(cfg.image_channels, ch, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        cin = ch
        for i, m in enumerate(mult):
            blk = nn.Module()
            blk.res, blk.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(cfg.num_res_blocks):
                blk.res.append(ResnetBlock(cin, ch * m, g))
                cin = ch * m
                if i == len(mult) - 1:
                    blk.attn.append(AttnBlock(cin, g))
            if i != len(mult) - 1:
                blk.downsample = nn.Module()
                blk.downsample.conv = nn.Conv2d(cin, cin, 3, stride=2, padding=0)
            self.conv_blocks.append(blk)
        self.mid = nn.ModuleList([ResnetBlock(cin, cin, g), AttnBlock(cin, g), ResnetBlock(cin, cin, g)])
        self.norm_out = _norm(cin, g)
        self.conv_out = nn.Conv2d(cin, cfg.z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for blk in self.conv_blocks:
            h = _level(blk, h)
            if hasattr(blk, "downsample"):
                h = blk.downsample.conv(F.pad(h, (0, 1, 0, 1)))
        for m in self.mid:
            h = m(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VQDecoder(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        g, ch, mult = cfg.norm_groups, cfg.ch, cfg.ch_mult
        cin = ch * mult[-1]
        self.conv_in = nn.Conv2d(cfg.z_channels, cin, 3, padding=1)
        self.mid = nn.ModuleList([ResnetBlock(cin, cin, g), AttnBlock(cin, g), ResnetBlock(cin, cin, g)])
        self.conv_blocks = nn.ModuleList()
        for i in reversed(range(len(mult))):
            blk = nn.Module()
            blk.res, blk.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(cfg.num_res_blocks + 1):
                blk.res.append(ResnetBlock(cin, ch * mult[i], g))
                cin = ch * mult[i]
                if i == len(mult) - 1:
                    blk.attn.append(AttnBlock(cin, g))
            if i != 0:
                blk.upsample = nn.Module()
                blk.upsample.conv = nn.Conv2d(cin, cin, 3, padding=1)
            self.conv_blocks.append(blk)
        self.norm_out = _norm(cin, g)
        self.conv_out = nn.Conv2d(cin, cfg.image_channels, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for blk in self.conv_blocks:
            h = _level(blk, h)
            if hasattr(blk, "upsample"):
                h = blk.upsample.conv(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(h)))


class VQModel(nn.Module):
    """Encoder, codebook and decoder; token grids <-> images in [-1, 1]."""

    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = VQDecoder(cfg)
        self.quantize = nn.Module()
        self.quantize.embedding = nn.Embedding(cfg.codebook_size, cfg.codebook_embed_dim)
        self.quant_conv = nn.Conv2d(cfg.z_channels, cfg.codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(cfg.codebook_embed_dim, cfg.z_channels, 1)

    @classmethod
    def load(cls, cfg: VQConfig, path: str | Path) -> VQModel:
        """Build ``cfg`` and load a LlamaGen VQ checkpoint strictly."""
        model = cls(cfg)
        load_strict(model, path, optional={"quantize.codebook_used": None})
        return model.eval()

    def codes(self) -> torch.Tensor:
        """Code vectors as used for lookup (L2-normalised rows when ``codebook_l2_norm``)."""
        w = self.quantize.embedding.weight
        return F.normalize(w, p=2, dim=-1) if self.cfg.codebook_l2_norm else w

    def codebook(self) -> np.ndarray:
        """The codebook E (V, d) as float64 NumPy, as the quantiser uses it."""
        return self.codes().detach().double().cpu().numpy()

    def neighbours(self, k_max: int | None = DEFAULT_K_MAX, *, normalize: bool = False) -> np.ndarray:
        """LANTERN's neighbour table of the raw code vectors (``normalize=True``: of the unit rows)."""
        raw = self.quantize.embedding.weight.detach().double().cpu().numpy()
        return neighbour_table(raw, k_max, normalize=normalize)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) in [-1, 1] -> token grids (B, H / f, W / f)."""
        z = self.quant_conv(self.encoder(images)).permute(0, 2, 3, 1)
        e = self.codes()
        if self.cfg.codebook_l2_norm:
            z = F.normalize(z, p=2, dim=-1)
        d = torch.cdist(z.reshape(-1, z.shape[-1]), e)
        return d.argmin(dim=1).view(z.shape[:3])

    def decode_codes(self, grid: torch.Tensor) -> torch.Tensor:
        """Token grids (B, h, w) -> images (B, C, h f, w f), nominally in [-1, 1]."""
        if grid.min() < 0 or grid.max() >= self.cfg.codebook_size:
            raise ValueError(f"token ids must lie in [0, {self.cfg.codebook_size})")
        z = self.codes()[grid].permute(0, 3, 1, 2)
        return self.decoder(self.post_quant_conv(z))


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """Images in [-1, 1] (B, C, H, W) -> uint8 (B, H, W, C), clamped as torchvision's save_image."""
    x = ((images.detach().float().clamp(-1, 1) + 1) / 2 * 255 + 0.5).clamp(0, 255).to(torch.uint8)
    return x.permute(0, 2, 3, 1).cpu().numpy()


def save_png(image: np.ndarray, path: str | Path) -> None:
    """Write one uint8 image (H, W, C) with C in {1, 3} as PNG (atomically)."""
    from PIL import Image

    path = Path(path)
    arr = image[..., 0] if image.shape[-1] == 1 else image
    tmp = path.with_suffix(".tmp.png")
    Image.fromarray(arr).save(tmp, format="PNG")
    tmp.replace(path)
