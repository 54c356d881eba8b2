"""Speculative Jacobi decoding in a world (SPEC 9.1): what ``simulate.run`` runs for a
:class:`core.trees.jacobi.JacobiWindow`.

``simulate.run(world, JacobiWindow(L), "r2+gsd:G=10")`` (an unrelaxed R2 or R4, boosted or not) decodes
each sequence with windows of L drafts and no drafter: one target forward per step gives p_1..p_{L+1}
along the window's drafts (the world's target only), the window is verified left to right with the
sampled-draft test (boosted: GSD's group, Cool-SD's depth scaling or the budget of SPEC 9.5 over the
world's neighbour table) or, with rule R4 (``"r4"``), by traversal verification of the window's chain
(SPEC 9.6: the last draft is tested first, a rejection updates its parent; boosts as for R2), the
accepted drafts and one more token are committed, and the next window keeps the tokens sampled after
the emitted one and refills its end with fresh tokens
(:mod:`theory.jacobi_sampler` documents the indexing and the uniforms). Per step the run records
``tokens`` (accepted + 1, per target forward), ``tree_size`` = ``tree_depth`` = L, ``accepted_depth``,
``draft_calls`` = 0, ``root_choice`` (0 if d_1 was accepted, else -1) and ``token_tv``, the exact TV
of the emitted tokens' laws (SPEC 9.4; 0 without a boost); ``exact_expectations=True`` adds the
window's exact E[tokens] and E[TV] given its drafts.

Sequence s draws every uniform from ``stream_key(seed, s)``, so runs do not depend on the thread count;
``backend="numpy"`` decodes through :func:`theory.jacobi_sampler.decode_jacobi` with the same uniforms
(R4 and the budget: the same window life, ``fill_window`` / ``kept_drafts``, with each window verified by
``theory.rule_step.sample_window_step`` and recorded by ``simulate.oracle.step_record_tv``) and
reproduces the kernel's decisions.
"""

from __future__ import annotations

import numba
import numpy as np

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.spec import draft_source
from relaxspec.simulate.coupled import check_coupled_exact, is_coupled, run_coupled
from relaxspec.simulate.jacobi_kernels import FRESH_COPY, FRESH_UNIFORM, jacobi_kernel
from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_uniforms, stream_key
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld, TraceWorld, World
from relaxspec.theory.boost import Boost
from relaxspec.theory.jacobi_sampler import Fresh, check_window, decode_jacobi, fill_window, kept_drafts
from relaxspec.theory.rule_step import sample_window_step, window_rule_expectation
from relaxspec.theory.verification import KernelArgs, Verification

FRESH_CODES = {Fresh.UNIFORM: FRESH_UNIFORM, Fresh.COPY: FRESH_COPY}


def check_jacobi_run(world: World, window: JacobiWindow, verification: Verification) -> None:
    """Raise ``ValueError`` unless a Jacobi window can decode in ``world`` with ``verification``."""
    if not isinstance(window, JacobiWindow):
        raise ValueError(f"expected a JacobiWindow, got {type(window).__name__}")
    if isinstance(world, TraceWorld):
        raise ValueError(f"{window}: a TraceWorld replays recorded draft trees; a Jacobi window is simulated "
                         "in a LatentWorld or StationaryWorld")
    if not isinstance(world, (LatentWorld, StationaryWorld)):
        raise ValueError(f"{window} decodes in a LatentWorld or StationaryWorld, got {type(world).__name__}")
    verification.check_source(draft_source(window), str(window))


def run_windows(world: LatentWorld | StationaryWorld, window: JacobiWindow, spec: KernelArgs,
                verification: Verification, out: tuple, *, seq_len: int, temperature: float, seed: int,
                threads: int | None, backend: str, exact: bool) -> np.ndarray:
    """Decode ``len(out[4])`` sequences into the per-step buffers ``out`` = (o_int, o_exp, o_tv, o_ttv,
    n_steps) of ``simulate.engine`` with the rule ``spec`` (``Verification.encode`` of ``verification``, an
    unrelaxed R2 or R4, boosted or not, with GSD's embedding table or the budget's neighbour table);
    returns the tokens,
    (n_sequences, seq_len + L) int64 padded with -1 (the last step may overshoot seq_len).
    ``simulate.run`` and :func:`check_jacobi_run` check the arguments."""
    if is_coupled(window):  # SCD's and SJD-PAC's windows (SPEC 10.1-10.2): simulate.coupled
        check_coupled_exact(window, exact)
        return run_coupled(world, window, spec, verification, out, seq_len=seq_len, temperature=temperature,
                           seed=seed, threads=threads, backend=backend, exact=exact)
    seqs = np.full((len(out[4]), int(seq_len) + window.window), -1, dtype=np.int64)
    if backend == "numpy":
        emb = spec.emb if verification.reads_embedding else None
        if verification.walks_own_step:
            _decode_rule_numpy(world, window, verification, emb, spec.budget_table, out, seqs, seq_len,
                               temperature, seed, exact)
        else:
            _decode_numpy(world, window, verification.boost, emb, out, seqs, seq_len, temperature, seed,
                          exact)
        return seqs
    W = world.kernel_world(float(temperature))
    old = numba.get_num_threads()
    try:
        if threads is not None:
            numba.set_num_threads(int(threads))
        jacobi_kernel(W, window.window, FRESH_CODES[window.fresh], spec.rs, spec.bs, bool(exact),
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


def _decode_rule_numpy(world, window: JacobiWindow, verification: Verification, emb, nb, out, seqs, seq_len,
                       temperature, seed, exact) -> None:
    """The readable oracle of R4 and of the budget on windows (which ``decode_jacobi`` does not take): the
    window's life of ``decode_jacobi`` (``fill_window``, ``kept_drafts``, the same uniforms) around
    ``theory.rule_step``'s verification of the window's chain."""
    from relaxspec.simulate.oracle import step_record_tv

    o_int, o_exp, o_tv, o_ttv, n_steps = out
    L, V = window.window, world.vocab_size
    latent = isinstance(world, LatentWorld)
    nb = None if nb.shape[1] == 0 and not verification.uses_budget else nb
    for s in range(len(n_steps)):
        state = world.initial(np.uint64(stream_key(np.int64(seed), np.int64(s)))) if latent else ()
        kept, kept_q = np.zeros(0, dtype=np.int64), np.zeros((0, V))
        last: int | None = None
        pos = step = 0
        while pos < seq_len:
            u_accept = step_uniforms(seed, s, step, L, U_ACCEPT)
            u_draw = step_uniforms(seed, s, step, L + 1, U_DRAW)
            drafts, q = fill_window(kept, kept_q, L, V, window.fresh, step_uniforms(seed, s, step, L, U_TREE),
                                    last)
            states = [state]
            for x in drafts:
                states.append(world.advance(*states[-1], int(x)) if latent else states[-1])
            p = np.array([world.target_probs(st[0] if latent else None, temperature) for st in states])
            kw = dict(neighbours=nb, emb=emb)
            a, token = sample_window_step(p, drafts, q, u_accept, u_draw, verification, **kw)
            e_tok, e_tv = (window_rule_expectation(p, drafts, q, verification, **kw) if exact
                           else (np.nan, np.nan))
            chain = check_window(p, drafts, q, Boost.none(), None)
            o_int[s, step] = (a + 1, L, L, a, 0, 0 if a else -1)
            o_exp[s, step], o_tv[s, step] = e_tok, e_tv
            o_ttv[s, step] = step_record_tv(chain.tree, chain.p, chain.q, list(range(a + 1)), verification,
                                            nb, emb)
            seqs[s, pos:pos + a + 1] = np.append(drafts[:a], token)
            kept, kept_q = kept_drafts(p, u_draw, a)
            state = world.advance(*states[a], token) if latent else state
            last = token
            pos += a + 1
            step += 1
        n_steps[s] = step
