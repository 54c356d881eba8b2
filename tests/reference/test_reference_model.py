"""The LlamaGen GPT: checkpoint layout and strict loading, KV cache, tree forward, CFG, VQ."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference_helpers import official_shapes, official_state, random_model, tiny_config

from relaxspec.reference.checkpoint import read_state_dict
from relaxspec.reference.decode import guide
from relaxspec.reference.model import Transformer, load_gpt
from relaxspec.reference.model_config import gpt_config
from relaxspec.reference.vq import VQModel, save_png, to_uint8, vq_config

TINY = {"vocab_size": 8, "block_size": 4, "num_classes": 3, "multiple_of": 8}


def test_official_shapes_of_the_llamagen_configs() -> None:
    # SwiGLU widths find_multiple(int(8 dim / 3), 256) and 1001 class rows (null class last)
    widths = {"GPT-B": 2048, "GPT-L": 2816, "GPT-XL": 3584, "GPT-XXL": 4096, "GPT-3B": 8704}
    for name, width in widths.items():
        cfg = gpt_config(name)
        assert cfg.ffn_dim == width and cfg.class_rows == 1001 and cfg.null_class == 1000
        assert cfg.vocab_size == 16384 and cfg.grid_size == 16
    assert gpt_config("GPT-XL", block_size=576).grid_size == 24
    with pytest.raises(ValueError, match="square"):
        gpt_config("GPT-B", block_size=200)


def test_module_layout_is_llamagens() -> None:
    cfg = tiny_config(n_kv_head=1)
    got = {k: tuple(v.shape) for k, v in Transformer(cfg).state_dict().items()}
    assert got == official_shapes(cfg)


@pytest.mark.parametrize("wrap", ["model", "bare", "compiled"])
def test_official_checkpoint_loads(tmp_path, wrap: str) -> None:
    cfg = tiny_config()
    state = official_state(cfg, seed=0)
    if wrap == "compiled":
        obj = {"model": {"_orig_mod." + k: v for k, v in state.items()}, "steps": torch.tensor(3)}
    elif wrap == "model":
        obj = {"model": state, "optimizer": {"lr": torch.tensor(1.0)}}
    else:
        obj = dict(state, freqs_cis=torch.zeros(cfg.seq_len, cfg.head_dim // 2, 2))
    torch.save(obj, tmp_path / "c2i.pt")
    model = load_gpt(tmp_path / "c2i.pt", "GPT-tiny", **TINY)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k


@pytest.mark.parametrize("fault, message", [
    ("missing", r"missing tensors \['layers.1.feed_forward.w2.weight'\]"),
    ("extra", r"unexpected tensors \['layers.2.attention.wo.weight'\]"),
    ("shape", r"mis-shaped tensors \[layers.0.attention.wqkv.weight: \(90, 32\) in the file, \(96, 32\)"),
    ("vocab", r"vocabulary mismatch: .* has 9 image tokens, the codebook .* has 8"),
    ("rope", r"mis-shaped tensors \[freqs_cis"),
    ("nan", r"NaN or infinite values in \['norm.weight'\]"),
])
def test_bad_checkpoint_names_the_tensor(tmp_path, fault: str, message: str) -> None:
    cfg = tiny_config()
    state = official_state(cfg, seed=0)
    if fault == "missing":
        del state["layers.1.feed_forward.w2.weight"]
    elif fault == "extra":
        state["layers.2.attention.wo.weight"] = torch.zeros(32, 32)
    elif fault == "shape":
        state["layers.0.attention.wqkv.weight"] = torch.zeros(90, 32)
    elif fault == "vocab":
        state["tok_embeddings.weight"] = torch.zeros(9, 32)
    elif fault == "rope":
        state["freqs_cis"] = torch.zeros(17, 8, 2)  # a 4 x 4 grid's table
    else:
        state["norm.weight"][3] = float("nan")
    torch.save({"model": state}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=message):
        load_gpt(tmp_path / "bad.pt", "GPT-tiny", **TINY)


def test_corrupt_or_absent_file(tmp_path) -> None:
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="corrupt or not a torch checkpoint"):
        read_state_dict(tmp_path / "junk.pt")
    with pytest.raises(ValueError, match="does not exist"):
        read_state_dict(tmp_path / "absent.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="not a state dict"):
        read_state_dict(tmp_path / "list.pt")


def cached_logits(model: Transformer, labels: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Token-by-token decoding with the cache: each step a one-node tree."""
    model.setup_cache(labels.shape[0], 8)
    rows = [model.logits(model.forward_tree(model.embed_class(labels), [-1], [0], 0))]
    prefix = model.accept_path(0, [0])
    for t in range(tokens.shape[1]):
        h = model.forward_tree(model.embed_tokens(tokens[:, t : t + 1]), [-1], [0], prefix)
        prefix = model.accept_path(prefix, [0])
        rows.append(model.logits(h))
    return torch.cat(rows, dim=1)


@torch.no_grad()
def test_kv_cache_matches_full_forward() -> None:
    cfg = tiny_config(block_size=16, n_kv_head=1)
    model = random_model(cfg, seed=1, std=0.05)
    tokens = torch.randint(0, 8, (2, 15), generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([2, 3])
    full = model(tokens, labels)
    torch.testing.assert_close(cached_logits(model, labels, tokens), full, rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_tree_forward_gives_each_node_its_path_logits_and_accepting_a_path_fixes_the_cache() -> None:
    cfg = tiny_config(block_size=16)
    model = random_model(cfg, seed=2, std=0.05)
    labels = torch.tensor([1])
    prefix_tokens = torch.tensor([[5, 1, 7]])
    # tree below root token 4 (at position 4): node: parent
    parents = np.array([-1, 0, 0, 1, 1, 2, 3, 5])
    tokens = np.array([4, 0, 3, 6, 2, 3, 1, 5])
    cached_logits(model, labels, prefix_tokens)
    prefix = 1 + prefix_tokens.shape[1]
    h = model.forward_tree(model.embed_tokens(torch.tensor(tokens))[None], parents, np.arange(8), prefix)
    tree_logits = model.logits(h)[0]
    for v in range(8):
        path, a = [], v
        while a >= 0:
            path.append(a)
            a = parents[a]
        seq = torch.cat([prefix_tokens, torch.tensor(tokens[path[::-1]])[None]], dim=1)
        torch.testing.assert_close(tree_logits[v], model(seq, labels)[0, -1], rtol=1e-5, atol=1e-6)
    # accept root -> 2 -> 5 -> 7 and compare the cache with decoding that path directly
    accepted = [0, 2, 5, 7]
    new_prefix = model.accept_path(prefix, accepted)
    kv = [(la.attention.kv_cache.k[:, :, :new_prefix].clone(),
           la.attention.kv_cache.v[:, :, :new_prefix].clone()) for la in model.layers]
    direct = torch.cat([prefix_tokens, torch.tensor(tokens[accepted])[None, :-1]], dim=1)
    cached_logits(model, labels, direct)
    last = model.embed_tokens(torch.tensor(tokens[accepted[-1:]]))[None]
    model.forward_tree(last, [-1], [0], new_prefix - 1)
    for (k, v), layer in zip(kv, model.layers, strict=True):
        torch.testing.assert_close(k, layer.attention.kv_cache.k[:, :, :new_prefix], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(v, layer.attention.kv_cache.v[:, :, :new_prefix], rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_cfg_guidance_equals_two_separate_forwards() -> None:
    cfg = tiny_config(block_size=16)
    model = random_model(cfg, seed=3)
    tokens = torch.tensor([[1, 4, 4, 0, 7]])
    s = 3.5
    both = cached_logits(model, torch.tensor([2, cfg.null_class]), tokens.expand(2, -1))
    cond = model(tokens, torch.tensor([2]))[0]
    uncond = model(tokens, torch.tensor([cfg.null_class]))[0]
    torch.testing.assert_close(guide(both, s), uncond + s * (cond - uncond), rtol=1e-5, atol=1e-5)


def test_vq_checkpoint_round_trip_and_png(tmp_path) -> None:
    cfg = vq_config("VQ-tiny")
    torch.manual_seed(0)
    vq = VQModel(cfg)
    state = dict(vq.state_dict())
    state["quantize.codebook_used"] = torch.zeros(65536)  # LlamaGen's usage buffer: accepted, ignored
    torch.save({"model": state}, tmp_path / "vq.pt")
    loaded = VQModel.load(cfg, tmp_path / "vq.pt")
    codes = loaded.codebook()
    assert codes.shape == (8, 4)
    np.testing.assert_allclose(np.linalg.norm(codes, axis=1), 1.0, rtol=1e-6)
    grid = torch.tensor([[[0, 7], [3, 3]]])
    with torch.no_grad():
        images = loaded.decode_codes(grid)
        assert images.shape == (1, 3, 4, 4)
        assert loaded.encode(images).shape == (1, 2, 2)
    save_png(to_uint8(images)[0], tmp_path / "x.png")
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
    table = loaded.neighbours(k_max=7)
    assert table.shape == (8, 7) and table.dtype == np.uint16
    del state["decoder.conv_out.bias"]
    torch.save({"model": state}, tmp_path / "vq_bad.pt")
    with pytest.raises(ValueError, match=r"missing tensors \['decoder.conv_out.bias'\]"):
        VQModel.load(cfg, tmp_path / "vq_bad.pt")
    with pytest.raises(ValueError, match="token ids"):
        loaded.decode_codes(torch.tensor([[[0, 8]]]))


def test_vq_sizes_are_parameters() -> None:
    cfg = vq_config("VQ-tiny", codebook_size=512, codebook_embed_dim=8, image_channels=1)
    vq = VQModel(cfg)
    assert vq.quantize.embedding.weight.shape == (512, 8) and cfg.downsample == 2
    assert vq_config("VQ-16").downsample == 16 and vq_config("VQ-8").downsample == 8
    with torch.no_grad():
        assert vq.decode_codes(torch.zeros(2, 3, 3, dtype=torch.long)).shape == (2, 1, 6, 6)
