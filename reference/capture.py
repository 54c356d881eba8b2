"""Capturing a trace (SPEC section 7) from a decoder held in memory.

``relaxspec generate --trace`` captures from LlamaGen checkpoint files; this
captures from any :class:`~reference.decode.Decoder` (the shipped mini model,
a random-weight model built in a notebook), with the header filled from the
decoder's own settings and a hash of the target's weights. A boosted decoder's
header names its boost (GSD's embedding choice is part of the spec) and a GSD
trace stores the decoder's embedding table (``embedding.npy``) with its hash in
``extra["gsd_embedding_sha256"]``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from relaxspec.core.trace import TraceHeader, TraceWriter, array_sha256
from relaxspec.reference.decode import Decoder, DecodeResult


def module_sha256(module: torch.nn.Module) -> str:
    """SHA-256 of a module's state dict (names, dtypes, shapes and bytes, in order)."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        a = t.detach().cpu().contiguous()
        h.update(f"{name}{a.dtype}{tuple(a.shape)}".encode())
        h.update(a.view(torch.uint8).numpy().tobytes() if a.numel() else b"")
    return h.hexdigest()


def decoder_header(decoder: Decoder, *, seed: int = 0, codebook: np.ndarray | None = None,
                   model: str = "in-memory", checkpoint_sha256: str | None = None,
                   extra: dict | None = None) -> TraceHeader:
    """The trace header of sequences decoded by ``decoder`` with uniforms keyed by ``seed``.

    Verification, tree, sampling and logits dtype come from the decoder;
    ``checkpoint_sha256`` names the target's weights (default: a hash of its
    state dict), ``codebook`` the vocabulary (zeros when not given).
    """
    st = decoder.settings
    extra = dict(extra or {})
    if decoder.embedding is not None:
        extra["gsd_embedding_sha256"] = array_sha256(decoder.embedding.astype(np.float32))
    return TraceHeader(
        model=model, checkpoint_sha256=checkpoint_sha256 or module_sha256(decoder.target),
        vocab_size=decoder.vocab,
        codebook_sha256=array_sha256(codebook) if codebook is not None else "0" * 64,
        verification=st.verification, tree=str(decoder.policy) if decoder.policy else "ar",
        target_sampling=st.target_sampling, draft_sampling=st.draft_sampling, logits_dtype=st.logits_dtype,
        extra={"cfg_scale": st.cfg_scale, "seed": seed, **extra})


def capture_trace(decoder: Decoder, path: str | Path, labels: Sequence[int], *, seed: int = 0,
                  neighbours: np.ndarray | None = None, codebook: np.ndarray | None = None,
                  model: str = "in-memory", checkpoint_sha256: str | None = None, extra: dict | None = None,
                  resume: bool = False, progress: bool = False) -> list[DecodeResult]:
    """Generate one sequence per label (sequence i keyed by (seed, i)) and write their trace to ``path``.

    ``neighbours`` is the table the decoder relaxes with (stored in the trace;
    required when the decoder relaxes); the other keywords name the header's
    fields (:func:`decoder_header`). ``resume=True`` appends to an existing
    trace of the same header, decoding only the sequences it lacks (and
    returning only those).
    """
    header = decoder_header(decoder, seed=seed, codebook=codebook, model=model,
                            checkpoint_sha256=checkpoint_sha256, extra=extra)
    embedding = None if decoder.embedding is None else decoder.embedding.astype(np.float32)
    with TraceWriter(path, header, neighbours, resume=resume, embedding=embedding,
                     codes=decoder.code_table) as writer:
        todo = [i for i in range(len(labels)) if i not in writer.done_sequences]
        return [decoder.generate(int(labels[i]), seed, sequence=i, trace=writer)
                for i in tqdm(todo, desc=model, disable=not progress or not todo, unit="seq")]
