"""VVS's skipped verification (SPEC 10.3) in a world: what ``simulate.run`` runs for a
:class:`core.trees.skips.VvsTree`.

``simulate.run(world, parse_tree("vvs:10,4,59,uniform=2"), "r1+lantern:k=K,delta=D", ...)`` drafts
EAGLE-2's tree ``eagle2:10,4,59`` every step and verifies it with R1 (LANTERN's relaxation, as VVS does),
except on skip steps (every 2nd step here; ``dynamic``: when the tree's paths are alike),
which make no target forward: a uniformly drawn root-to-leaf path's first gamma = min(L_s, floor(Lbar))
drafts and a bonus from the stale row (:mod:`simulate.vvs_kernels`). The first step is never skipped
(there is no stale row yet), nor two in a row. A bounded schedule (``vvs:..,uniform=2,tv=0.1``, ours:
docs/theory.md 15.7) takes a skip only when every token it can emit has exact TV <= 0.1 given the tree
(the world gives the target's rows there; a decoder would need the forward the skip saves).

What the result records, per step: ``tokens`` (emitted tokens: gamma + 1 on a skip step),
``accepted_depth`` (gamma on a skip step), ``tree_size``, ``tree_depth``, ``draft_calls`` (the tree is
drafted on every step), ``root_choice``; ``token_tv`` the exact TV of the emitted tokens' laws (R1's on a
verify step; on a skip step the laws of the path mixture given the tree, ``theory.vvs.skip_step_tv``,
against the target's rows computed after the fact); with ``exact_expectations=True``, E[tokens] and
E[TV] given the tree (a skip step: ``skip_step_tv``'s). ``SimResult.target_forwards`` is 1 on a verify
step and 0 on a skip step, and ``SimResult.tokens_per_forward`` = tokens / target forwards counts the
skipped tokens with no forward.

Not modelled (VVS's code, HyattDD/VVS ``models/skip_utils_llamagen.py``): its gamma caps by the mean
length of the tree's candidate rows rather than the running accepted length, its dynamic score uses every
other candidate row, counts a missing depth as similarity 0 and weights every depth up to the longest,
and no skip is taken before the sixth token; the reference decoder's stale logits are item 3's.

Sequence s draws every uniform from ``stream_key(seed, s)`` (thread-count invariant); ``backend="numpy"``
decodes through :func:`simulate.vvs_oracle.decode_vvs` with the same uniforms and takes the same decisions
(the dynamic score is summed in another order there: a decision could differ only at a score within
rounding of S).
"""

from __future__ import annotations

import numba
import numpy as np

from relaxspec.core.trees.skips import VvsTree
from relaxspec.simulate.vvs_kernels import SCHEDULE_CODES, vvs_kernel
from relaxspec.simulate.vvs_oracle import decode_vvs, vvs_verification_problem
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld, World
from relaxspec.theory.verification import KernelArgs, Verification


def check_vvs_run(world: World, tree: VvsTree, verification: Verification | str) -> None:
    """Raise ``ValueError`` (one line) unless ``tree``'s skip steps decode in ``world`` under
    ``verification`` (a value or its spec)."""
    if not isinstance(world, (LatentWorld, StationaryWorld)):
        raise ValueError(f"{tree}: skip steps are simulated in a LatentWorld or StationaryWorld, got "
                         f"{type(world).__name__} (a trace replays the steps it recorded)")
    problem = vvs_verification_problem(tree, Verification.parse(verification))
    if problem is not None:
        raise ValueError(problem)
    if tree.schedule.kind.reads_similarity:
        try:
            world.embedding()
        except ValueError as err:
            raise ValueError(f"{tree}: the dynamic schedule compares the paths' code vectors: {err}") \
                from None


def unit_codes(world: World) -> np.ndarray:
    """The world's code vectors (``embedding()``) scaled to unit rows (a zero row stays zero)."""
    emb = np.asarray(world.embedding(), dtype=np.float64)
    norm = np.linalg.norm(emb, axis=1, keepdims=True)
    return np.ascontiguousarray(np.divide(emb, norm, out=np.zeros_like(emb), where=norm > 0))


def run_vvs(world: LatentWorld | StationaryWorld, tree: VvsTree, spec: KernelArgs, out: tuple, *,
            seq_len: int, temperature: float, seed: int, threads: int | None, backend: str, exact: bool
            ) -> np.ndarray:
    """Decode ``len(out[4])`` sequences into ``simulate.engine``'s per-step buffers ``out`` = (o_int, o_exp,
    o_tv, o_ttv, n_steps) under the verification ``spec`` encodes (R1: ``spec.verification``, its kernel
    tuples and tables); returns ``skipped``, (n_sequences, seq_len) bool. ``simulate.run`` and
    :func:`check_vvs_run` check the arguments."""
    n_seq = len(out[4])
    skipped = np.zeros((n_seq, int(seq_len)), dtype=np.bool_)
    sched = tree.schedule
    emb = unit_codes(world) if sched.kind.reads_similarity else np.zeros((world.vocab_size, 0))
    if backend == "numpy":
        _decode_numpy(world, tree, spec, emb, out, skipped, int(seq_len), temperature, int(seed), exact)
        return skipped
    ps = tree.kernel_spec()
    policy = (ps.top_k, ps.max_calls, ps.total_tokens, ps.check_steps, ps.threshold, ps.selection,
              ps.max_nodes, ps.max_buffer)
    sc = (SCHEDULE_CODES[sched.kind], sched.interval, float(sched.similarity), float(sched.alpha),
          -1.0 if sched.tv is None else float(sched.tv))
    W = world.kernel_world(float(temperature))
    old = numba.get_num_threads()
    try:
        if threads is not None:
            numba.set_num_threads(int(threads))
        vvs_kernel(W, policy, spec.rs, spec.bs, sc, emb, bool(exact), n_seq, int(seq_len),
                   int(seed), out[:4], skipped, out[4])
    finally:
        numba.set_num_threads(old)
    return skipped


def _decode_numpy(world, tree, spec: KernelArgs, emb, out, skipped, seq_len, temperature, seed,
                  exact) -> None:
    o_int, o_exp, o_tv, o_ttv, n_steps = out
    nb = spec.neighbours.astype(np.int64)
    for s in range(len(n_steps)):
        steps = decode_vvs(world, tree, spec.verification, nb, emb, seq_len, temperature, seed, s, exact)
        for i, st in enumerate(steps):
            m = len(st.path)
            root_kids = st.tree.children(0)
            choice = int(np.flatnonzero(root_kids == st.path[1])[0]) if m > 1 else -1
            o_int[s, i] = (m, st.tree.size - 1, st.tree.depth, m - 1, st.draft_calls, choice)
            o_exp[s, i], o_tv[s, i], o_ttv[s, i] = st.expected_tokens, st.expected_tv, st.token_tv
            skipped[s, i] = st.skipped
        n_steps[s] = len(steps)


__all__ = ["check_vvs_run", "run_vvs", "unit_codes"]
