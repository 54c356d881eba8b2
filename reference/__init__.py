"""A compact PyTorch decoder compatible with LlamaGen c2i checkpoints (issue 4).

Modules, one concept each:

- :mod:`reference.model`: the GPT, its static KV cache, tree forward and path acceptance,
  strict checkpoint loading (:func:`load_gpt`); its shape and named configurations (GPT-B ... GPT-3B
  and small ones) in :mod:`reference.model_config`, tree attention over the cache (inputs, masks,
  static shapes) in :mod:`reference.tree_attention`;
- :mod:`reference.vq`: the VQ tokenizer (codebook, encoder, decoder), PNG output and the
  neighbour table;
- :mod:`reference.drafter`: draft sessions for an independent GPT and an EAGLE head;
- :mod:`reference.train_drafter`: drafter training (``python -m relaxspec.reference.train_drafter``);
- :mod:`reference.decode`: AR and speculative decoding verified on the device (or through
  ``theory``'s oracle: ``verifier="theory"``), with per-step statistics and trace capture;
  draft trees from a drafter, or SJD's Jacobi windows; rule R2 boosted by GSD or Cool-SD
  (:func:`reference.decode.gsd_embedding`);
- :mod:`reference.verify`: the device verifier (R1-R3 with the relaxations, GSD and Cool-SD,
  Jacobi windows; R4 and the budget through :mod:`reference.verify_traversal`): theory's decisions
  as batched torch operations, with one host read per step (:mod:`reference.verify_ops`: the
  primitives and the counted host link);
- :mod:`reference.cuda_graph`: CUDA graph capture of the padded, fixed-shape tree forward;
- :mod:`reference.jacobi`: what one Jacobi window leaves to the next (kept drafts and the
  stored logits of their laws), shared by the decoder and replay;
- SPEC 10's methods: :mod:`reference.coupled` (what a coupled or SJD-PAC window leaves to the
  next) and :mod:`reference.decode_columns` (their loop), :mod:`reference.decode_vvs` (VVS's loop
  with skip steps) and :mod:`reference.vvs` (a skipped token's exact TV from a trace),
  :mod:`reference.frontier` (their checks), :mod:`reference.replay_frontier` (their replay);
- :mod:`reference.capture`: trace capture from a decoder held in memory;
- :mod:`reference.replay`: trace replay through ``theory`` and ``simulate`` and rescoring;
- :mod:`reference.generate` / :mod:`reference.cli`: ``relaxspec generate | replay | rescore``;
- :mod:`reference.checkpoint`: reading and checking state dicts.
"""
