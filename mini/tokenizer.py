"""The mini model's tokenizer: the reference LlamaGen VQ model at a small Fashion-MNIST config.

``reference.vq.VQModel`` with one image channel, downsampling 4 (32 x 32 ->
8 x 8 = 64 tokens) and an L2-normalised codebook of 512 codes of dimension 8,
trained as LlamaGen trains its VQ (without the perceptual and GAN terms):
pixel reconstruction (MSE on [-1, 1]) + codebook loss + 0.25 x commitment
loss, straight-through gradients, with dead-code restarts (a code unused for
``restart_every`` steps is moved onto a random encoder output of the batch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from relaxspec.mini.checkpointing import LoopCheckpoint
from relaxspec.mini.evaluator import images_to_tensor
from relaxspec.mini.timing import Clock
from relaxspec.reference.vq import VQConfig, VQModel, vq_config

COMMITMENT = 0.25


def tokenizer_config(codebook_size: int = 512, ch: int = 16) -> VQConfig:
    """The mini tokenizer's shape: LlamaGen VQ with ``ch_mult=(1, 2, 2)`` (downsampling 4), grayscale."""
    return vq_config("VQ-8", ch=ch, ch_mult=(1, 2, 2), z_channels=64, num_res_blocks=1, norm_groups=8,
                     image_channels=1, codebook_size=codebook_size, codebook_embed_dim=8)


@dataclass(frozen=True)
class TokenizerBudget:
    """Optimisation budget: ``steps`` Adam steps of ``batch`` training images."""

    steps: int = 800
    batch: int = 32
    lr: float = 2e-3
    restart_every: int = 100
    n_train: int = 0
    codebook_size: int = 512
    ch: int = 16


def quantise(model: VQModel, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encoder output ``z`` (B, h, w, d; unit rows), nearest codes ``zq`` and their ids (B, h, w)."""
    z = model.quant_conv(model.encoder(images)).permute(0, 2, 3, 1)
    if model.cfg.codebook_l2_norm:
        z = F.normalize(z, p=2, dim=-1)
    e = model.codes()
    ids = torch.cdist(z.reshape(-1, z.shape[-1]), e).argmin(1).view(z.shape[:3])
    return z, e[ids], ids


def vq_losses(model: VQModel, images: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """Total loss, its parts and the token ids of one batch (straight-through estimator)."""
    z, zq, ids = quantise(model, images)
    codebook = F.mse_loss(zq, z.detach())
    commit = F.mse_loss(z, zq.detach())
    z_st = (z + (zq - z).detach()).permute(0, 3, 1, 2)
    recon = F.mse_loss(model.decoder(model.post_quant_conv(z_st)), images)
    loss = recon + codebook + COMMITMENT * commit
    return loss, {"recon": recon.item(), "codebook": codebook.item(), "commit": commit.item()}, ids


def train_tokenizer(train_images: np.ndarray, budget: TokenizerBudget, *, seed: int = 0,
                    progress: bool = True, checkpoint: LoopCheckpoint | None = None) -> tuple[VQModel, dict]:
    """Train the tokenizer on uint8 images; return it and a card fragment (config, budget, seconds).

    With ``checkpoint`` the loop resumes from it and checkpoints as it goes (:mod:`mini.checkpointing`).
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    images = train_images[:budget.n_train] if budget.n_train else train_images
    x = images_to_tensor(images)
    model = VQModel(tokenizer_config(budget.codebook_size, budget.ch))
    opt = torch.optim.Adam(model.parameters(), lr=budget.lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=budget.lr, total_steps=budget.steps,
                                                pct_start=0.05)
    last_used = torch.zeros(budget.codebook_size, dtype=torch.long)
    restarts = torch.zeros((), dtype=torch.long)
    state = {"model": model, "opt": opt, "sched": sched, "gen": gen, "last_used": last_used,
             "restarts": restarts}
    start = checkpoint.restore(state) if checkpoint else 0
    clock = Clock()
    model.train()
    bar = tqdm(range(start, budget.steps), desc="tokenizer", disable=not progress, unit="step",
               initial=start, total=budget.steps)
    for step in bar:
        idx = torch.randint(len(x), (budget.batch,), generator=gen)
        loss, parts, ids = vq_losses(model, x[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        last_used[ids.unique()] = step
        if budget.restart_every and (step + 1) % budget.restart_every == 0 and step + 1 < 0.8 * budget.steps:
            restarts += _restart_dead_codes(model, x[idx], last_used, step, budget.restart_every, gen)
        bar.set_postfix(recon=f"{parts['recon']:.4f}", restarts=int(restarts))
        if checkpoint:
            checkpoint.after_step(step + 1, state, budget.steps)
    model.eval()
    timer = checkpoint or clock
    seconds, cpu_seconds = timer.wall(), timer.cpu()
    return model, {"config": _config_dict(model.cfg), "budget": asdict(budget), "training_seconds": seconds,
                   "training_cpu_seconds": cpu_seconds, "dead_code_restarts": int(restarts)}


@torch.no_grad()
def _restart_dead_codes(model: VQModel, images: torch.Tensor, last_used: torch.Tensor, step: int,
                        window: int, gen: torch.Generator) -> int:
    dead = torch.nonzero(last_used <= step - window).flatten()
    if dead.numel() == 0:
        return 0
    z, _, _ = quantise(model, images)
    z = z.reshape(-1, z.shape[-1])
    pick = torch.randint(len(z), (dead.numel(),), generator=gen)
    model.quantize.embedding.weight[dead] = z[pick] + 0.01 * torch.randn(dead.numel(), z.shape[1],
                                                                           generator=gen)
    last_used[dead] = step
    return int(dead.numel())


def _config_dict(cfg: VQConfig) -> dict:
    d = asdict(cfg)
    d["ch_mult"] = list(cfg.ch_mult)
    return d


def config_from_dict(d: dict) -> VQConfig:
    """The VQ config stored in a card."""
    try:
        return VQConfig(**{**d, "ch_mult": tuple(d["ch_mult"])})
    except (KeyError, TypeError) as err:
        raise ValueError(f"tokenizer card config {d!r} is malformed: {err}") from err


@torch.no_grad()
def encode_images(model: VQModel, images: np.ndarray, batch: int = 500, progress: bool = False) -> np.ndarray:
    """Token grids ``(N, 64)`` int16 (row-major 8 x 8) of uint8 images."""
    model.eval()
    out = []
    for i in tqdm(range(0, len(images), batch), desc="encode", disable=not progress, unit="batch"):
        out.append(model.encode(images_to_tensor(images[i:i + batch])).flatten(1).to(torch.int16).numpy())
    return np.concatenate(out)


@torch.no_grad()
def decode_tokens(model: VQModel, tokens: np.ndarray, batch: int = 500) -> np.ndarray:
    """uint8 images ``(N, 32, 32)`` of token sequences ``(N, 64)``."""
    tokens = np.asarray(tokens, dtype=np.int64)
    side = int(round(np.sqrt(tokens.shape[-1])))
    if tokens.ndim != 2 or side * side != tokens.shape[1]:
        raise ValueError(f"token sequences must have shape (N, grid^2), got {tokens.shape}")
    if tokens.min() < 0 or tokens.max() >= model.cfg.codebook_size:
        raise ValueError(f"token ids outside the codebook [0, {model.cfg.codebook_size}) of the tokenizer")
    out = []
    for i in range(0, len(tokens), batch):
        grid = torch.from_numpy(tokens[i:i + batch]).view(-1, side, side)
        img = model.decode_codes(grid)[:, 0]
        out.append(((img.clamp(-1, 1) + 1) * 127.5 + 0.5).clamp(0, 255).to(torch.uint8).numpy())
    return np.concatenate(out)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over images of the PSNR (dB) between uint8 image stacks of equal shape."""
    if a.shape != b.shape:
        raise ValueError(f"image stacks differ in shape: {a.shape} vs {b.shape}")
    mse = ((a.astype(np.float64) - b.astype(np.float64)) ** 2).reshape(len(a), -1).mean(1)
    return float(np.mean(10 * np.log10(255.0**2 / np.maximum(mse, 1e-10))))


def codebook_usage(tokens: np.ndarray, codebook_size: int) -> dict[str, float]:
    """Fraction of codes used and the perplexity exp(H) of the code frequencies."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64).ravel(), minlength=codebook_size)
    p = counts / counts.sum()
    nz = p[p > 0]
    perplexity = float(np.exp(-(nz * np.log(nz)).sum()))
    return {"fraction_used": float((counts > 0).mean()), "perplexity": perplexity}


@torch.no_grad()
def codebook_geometry(model: VQModel, images: np.ndarray, batch: int = 1024) -> dict[str, float]:
    """How close the codes lie: the median distance from a code to its nearest other code, against the
    median distance from an encoder output (of ``images``) to its code (the quantisation error). Codes
    closer to each other than the quantisation error are near-duplicates at the encoder's resolution."""
    e = model.codes().double()
    nearest = []
    for i in range(0, len(e), batch):
        d = torch.cdist(e[i:i + batch], e)
        d[torch.arange(d.shape[0]), torch.arange(i, i + d.shape[0])] = float("inf")
        nearest.append(d.min(1).values)
    errors = []
    for i in range(0, len(images), 500):
        z, zq, _ = quantise(model.eval(), images_to_tensor(images[i:i + 500]))
        errors.append((z - zq).norm(dim=-1).flatten())
    return {"nearest_code_distance_median": float(torch.cat(nearest).median()),
            "quantisation_error_median": float(torch.cat(errors).median())}


def tokenizer_metrics(model: VQModel, images: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """Reconstruction PSNR (32 x 32, uint8) and codebook usage on ``images``; also their tokens."""
    from relaxspec.mini.fashion_mnist import pad_to_32

    tokens = encode_images(model, images)
    recon = decode_tokens(model, tokens)
    metrics = {"psnr_db": psnr(recon, pad_to_32(images)), **codebook_usage(tokens, model.cfg.codebook_size)}
    return metrics, tokens
