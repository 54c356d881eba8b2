"""Coupled Jacobi windows (SCD, SPEC 10.1) and SJD-PAC windows (SPEC 10.2) in a world: what
``simulate.run`` runs for a :class:`core.trees.windows.CoupledWindow` or
:class:`core.trees.windows.PacWindow` (through :mod:`simulate.jacobi`).

``simulate.run(world, parse_tree("jacobi:16,coupled=principled"), "r2", ...)`` decodes each
sequence with windows of 16 drafts whose next drafts are coupled with this forward's p;
``pac:32,width=3,depth=3`` adds SJD-PAC's proactive candidates, verified as a tree by R2. Both are
verified by rule R2 (the rule SCD and SJD-PAC use), unboosted or with the budgeted relaxation
(``r2+budget:tv=..,k=..``, SPEC 9.5: each node's stages share its budget; docs/theory.md 15.6 proves
the per-token TV bound, which needs every draft distributed as the law it is stored with, so the
``official`` coupling and siblings take the exact test only: ``Verification.source_problem`` of
``core.trees.spec.draft_source``). Per step the run records ``tokens`` (accepted + 1 per target
forward), ``tree_size`` (draft nodes of the verified tree: L for a chain), ``tree_depth`` = L,
``accepted_depth``, ``draft_calls`` = 0, ``root_choice`` (the accepted candidate of the first column, -1
if none) and ``token_tv``: the budget's charges of the stages each deciding node tested (their
expectation bounds the token's TV, at most tv per token), 0 for the unboosted lossless windows
(docs/theory.md, Theorem 15.1 and Proposition 15.2), NaN for SCD ``official`` and PAC with
``official`` siblings, whose distortion depends on the window's history and is not known per step
(their exact laws on tiny targets: :mod:`theory.coupled`). ``exact_expectations=True`` adds E[tokens]
and E[TV] given each window (chains only: a PAC window with width > 1 is refused).

Sequence s draws every uniform from ``stream_key(seed, s)`` (thread-count invariant);
``backend="numpy"`` decodes through :func:`simulate.coupled_oracle.decode_coupled` with the same
uniforms and reproduces the kernel's decisions.
"""

from __future__ import annotations

import numba
import numpy as np

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.windows import CoupledWindow, PacWindow
from relaxspec.simulate.coupled_kernels import coupled_kernel, noise_uniforms, window_codes
from relaxspec.simulate.coupled_oracle import decode_coupled
from relaxspec.simulate.rng import step_counter, stream_key, uniform
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory.boost import NO_BOOST
from relaxspec.theory.budget import check_budget
from relaxspec.theory.verification import KernelArgs, Verification


def is_coupled(window: object) -> bool:
    """Whether ``window`` is a coupled (SCD) or PAC window, decoded by this module."""
    return isinstance(window, CoupledWindow | PacWindow)


def check_coupled_exact(window: JacobiWindow, exact: bool) -> None:
    """Raise ``ValueError`` (one line) when ``exact`` expectations are asked of a PD tree (which verification
    a window takes: ``Verification.source_problem``)."""
    if exact and isinstance(window, PacWindow) and window.width > 1:
        raise ValueError(f"{window}: exact_expectations needs p at every node of the PD tree; it is given "
                         "for chains only (width=1, or a jacobi window)")


def run_coupled(world, window: JacobiWindow, spec: KernelArgs, verification: Verification, out: tuple, *,
                seq_len: int, temperature: float, seed: int, threads: int | None, backend: str,
                exact: bool) -> np.ndarray:
    """Decode ``len(out[4])`` sequences into ``simulate.engine``'s per-step buffers ``out`` = (o_int,
    o_exp, o_tv, o_ttv, n_steps) with ``verification`` (R2, unboosted or budgeted; ``spec`` its
    ``Verification.encode``); returns the tokens, (n_sequences, seq_len + L) int64 padded with -1.
    ``simulate.jacobi.check_jacobi_run`` and :func:`check_coupled_exact` check the arguments."""
    o_int, o_exp, o_tv, o_ttv, n_steps = out
    codes = window_codes(window)
    L = codes.window
    seqs = np.full((len(n_steps), int(seq_len) + L), -1, dtype=np.int64)
    if backend == "numpy":
        boost = verification.boost
        nb = check_budget(boost, spec.budget_table, world.vocab_size) if boost.uses_budget else None
        _decode_numpy(world, codes, out, seqs, int(seq_len), temperature, int(seed), exact, boost, nb)
    else:
        W = world.kernel_world(float(temperature))
        old = numba.get_num_threads()
        try:
            if threads is not None:
                numba.set_num_threads(int(threads))
            coupled_kernel(W, L, codes.copy, codes.coupling, codes.store_official, codes.width, codes.depth,
                           codes.siblings, spec.bs, bool(exact), len(n_steps), int(seq_len), int(seed),
                           out[:4], seqs, n_steps)
        finally:
            numba.set_num_threads(old)
    if not window.lossless:  # type: ignore[attr-defined]  # the official variants' TV is not known per step
        for s in range(len(n_steps)):
            o_ttv[s, :n_steps[s]] = np.nan
            if exact:
                o_tv[s, :n_steps[s]] = np.nan
    return seqs


def _decode_numpy(world, codes, out, seqs, seq_len, temperature, seed, exact, boost=NO_BOOST,
                  nb=None) -> None:
    """The readable oracle on the world's rows, with the kernel's uniforms."""
    o_int, o_exp, o_tv, o_ttv, n_steps = out
    latent = isinstance(world, LatentWorld)
    V = world.vocab_size

    def target(state):
        return world.target_probs(state[0] if latent else None, temperature)

    def advance(state, x):
        return world.advance(*state, x) if latent else state

    for s in range(len(n_steps)):
        key = np.uint64(stream_key(np.int64(seed), np.int64(s)))

        def u(step: int, node: int, purpose: int, key=key) -> float:
            return uniform(key, step_counter(step, node, purpose))

        def noise(position: int, size: int, key=key) -> np.ndarray:
            g = np.empty(size)
            noise_uniforms(key, position, g)
            return g

        state = world.initial(key) if latent else ()
        steps = decode_coupled(target, advance, state, V, codes, seq_len, u, noise, exact=exact, boost=boost,
                               nb=nb)
        for i, st in enumerate(steps):
            o_int[s, i] = (st.accepted + 1, st.tree_size, codes.window, st.accepted, 0, st.choice)
            o_exp[s, i], o_ttv[s, i] = st.expected_tokens, st.token_tv
            if exact:
                o_tv[s, i] = st.expected_tv
        tokens = np.concatenate([st.tokens for st in steps])
        seqs[s, :tokens.size] = tokens
        n_steps[s] = len(steps)


__all__ = ["check_coupled_exact", "is_coupled", "run_coupled"]
