"""Speculative Jacobi decoding in a world (SPEC 9.1): what ``simulate.run`` runs for a
:class:`core.trees.jacobi.JacobiWindow`.

``simulate.run(world, JacobiWindow(L), rule="r2", boost=...)`` decodes each sequence with windows of L
drafts and no drafter: one target forward per step gives p_1..p_{L+1} along the window's drafts (the
world's target only), the window is verified left to right with the sampled-draft test (boosted:
GSD's group or Cool-SD's depth scaling), the accepted drafts and one more token are committed, and the
next window keeps the tokens sampled after the emitted one and refills its end with fresh tokens
(:mod:`theory.jacobi_sampler` documents the indexing and the uniforms). Per step the run records
``tokens`` (accepted + 1, per target forward), ``tree_size`` = ``tree_depth`` = L, ``accepted_depth``,
``draft_calls`` = 0, ``root_choice`` (0 if d_1 was accepted, else -1) and ``token_tv``, the exact TV
of the emitted tokens' laws (SPEC 9.4; 0 without a boost); ``exact_expectations=True`` adds the
window's exact E[tokens] and E[TV] given its drafts.

Sequence s draws every uniform from ``stream_key(seed, s)``, so runs do not depend on the thread count;
``backend="numpy"`` decodes through :func:`theory.jacobi_sampler.decode_jacobi` with the same uniforms
and reproduces the kernel's decisions.
"""

from __future__ import annotations

import numba
import numpy as np

from core.trees.jacobi import JacobiWindow
from simulate.jacobi_kernels import FRESH_COPY, FRESH_UNIFORM, jacobi_kernel
from simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_uniforms, stream_key
from simulate.verify import RuleSpec
from simulate.worlds import LatentWorld, StationaryWorld, TraceWorld, World
from theory.boost import Boost
from theory.jacobi_sampler import decode_jacobi
from theory.relax import Relax
from theory.rules import check_boost

FRESH_CODES = {"uniform": FRESH_UNIFORM, "copy": FRESH_COPY}


def check_jacobi_run(world: World, window: JacobiWindow, rule: str, relax: Relax, boost: Boost) -> None:
    """Raise ``ValueError`` unless a Jacobi window can decode in ``world`` with this rule and boost."""
    if not isinstance(window, JacobiWindow):
        raise ValueError(f"expected a JacobiWindow, got {type(window).__name__}")
    if isinstance(world, TraceWorld):
        raise ValueError(f"{window}: a TraceWorld replays recorded draft trees; a Jacobi window is simulated "
                         "in a LatentWorld or StationaryWorld")
    if not isinstance(world, (LatentWorld, StationaryWorld)):
        raise ValueError(f"{window} decodes in a LatentWorld or StationaryWorld, got {type(world).__name__}")
    if rule != "r2":
        raise ValueError(f"{window} verifies sampled drafts: it needs rule r2, got rule {rule!r}")
    if not isinstance(relax, Relax) or not relax.is_exact:
        raise ValueError(f"{window} takes no LANTERN relaxation (its boosts are gsd / cool: boost=...), "
                         f"got {relax}")
    check_boost(rule, relax, boost)


def run_windows(world: LatentWorld | StationaryWorld, window: JacobiWindow, spec: RuleSpec, boost: Boost,
                out: tuple, *, seq_len: int, temperature: float, seed: int, threads: int | None, backend: str,
                exact: bool) -> np.ndarray:
    """Decode ``len(out[4])`` sequences into the per-step buffers ``out`` = (o_int, o_exp, o_tv, o_ttv,
    n_steps) of ``simulate.engine`` with the rule ``spec`` (``RuleSpec.make`` of unrelaxed R2 and
    ``boost``, with GSD's embedding table); returns the tokens, (n_sequences, seq_len + L) int64 padded
    with -1 (the last step may overshoot seq_len). ``simulate.run`` and :func:`check_jacobi_run` check
    the arguments."""
    seqs = np.full((len(out[4]), int(seq_len) + window.window), -1, dtype=np.int64)
    if backend == "numpy":
        _decode_numpy(world, window, boost, spec.boost.emb if boost.kind == "group" else None, out, seqs,
                      seq_len, temperature, seed, exact)
        return seqs
    W = world.kernel_world(float(temperature))
    old = numba.get_num_threads()
    try:
        if threads is not None:
            numba.set_num_threads(int(threads))
        jacobi_kernel(W, window.window, FRESH_CODES[window.fresh], spec.args, spec.boost_args, bool(exact),
                      len(out[4]), int(seq_len), int(seed), out[:4], seqs, out[4])
    finally:
        numba.set_num_threads(old)
    return seqs


def _decode_numpy(world, window: JacobiWindow, boost: Boost, emb, out, seqs, seq_len, temperature, seed,
                  exact) -> None:
    """The readable oracle: :func:`theory.jacobi_sampler.decode_jacobi` on the world's rows."""
    o_int, o_exp, o_tv, o_ttv, n_steps = out
    L, V = window.window, world.vocab_size
    latent = isinstance(world, LatentWorld)

    def target(state):
        return world.target_probs(state[0] if latent else None, temperature)

    def advance(state, x):
        return world.advance(*state, x) if latent else state

    for s in range(len(n_steps)):
        def uniforms(step: int, s: int = s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return (step_uniforms(seed, s, step, L, U_ACCEPT), step_uniforms(seed, s, step, L + 1, U_DRAW),
                    step_uniforms(seed, s, step, L, U_TREE))

        state = world.initial(np.uint64(stream_key(np.int64(seed), np.int64(s)))) if latent else ()
        steps = decode_jacobi(target, advance, state, V, L, seq_len, uniforms, fresh=window.fresh,
                              boost=boost, emb=emb, exact=exact)
        for i, st in enumerate(steps):
            o_int[s, i] = (st.accepted + 1, L, L, st.accepted, 0, 0 if st.accepted else -1)
            o_exp[s, i], o_tv[s, i], o_ttv[s, i] = st.expected_tokens, st.expected_tv, st.token_tv
        tokens = np.concatenate([st.tokens for st in steps])
        seqs[s, :tokens.size] = tokens
        n_steps[s] = len(steps)
