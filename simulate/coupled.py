"""Coupled Jacobi windows (SCD, SPEC 10.1) and SJD-PAC windows (SPEC 10.2) in a world: what
``simulate.run`` runs for a :class:`core.trees.windows.CoupledWindow` or
:class:`core.trees.windows.PacWindow` (through :mod:`simulate.jacobi`).

``simulate.run(world, parse_tree("jacobi:16,coupled=principled"), "r2", ...)`` decodes each
sequence with windows of 16 drafts whose next drafts are coupled with this forward's p;
``pac:32,width=3,depth=3`` adds SJD-PAC's proactive candidates, verified as a tree by R2. Both are
verified unboosted by rule R2 (the rule SCD and SJD-PAC use; boosts and R4 on them are issue 29 item 4).
Per step the run records ``tokens`` (accepted + 1 per target forward), ``tree_size`` (draft nodes of the
verified tree: L for a chain), ``tree_depth`` = L, ``accepted_depth``, ``draft_calls`` = 0,
``root_choice`` (the accepted candidate of the first column, -1 if none) and ``token_tv``: 0 for the
lossless windows (docs/theory.md, Theorem 15.1 and Proposition 15.2), NaN for SCD ``official`` and PAC
with ``official`` siblings, whose distortion depends on the window's history and is not known per step
(their exact laws on tiny targets: :mod:`theory.coupled`). ``exact_expectations=True`` adds E[tokens]
given each window (chains only: a PAC window with width > 1 is refused).

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
from relaxspec.theory.rules import Rule
from relaxspec.theory.verification import Verification


def is_coupled(window: object) -> bool:
    """Whether ``window`` is a coupled (SCD) or PAC window, decoded by this module."""
    return isinstance(window, CoupledWindow | PacWindow)


def check_coupled_run(window: JacobiWindow, verification: Verification | str, exact: bool) -> None:
    """Raise ``ValueError`` (one line) unless this module can decode ``window`` under ``verification`` (a
    value or its spec)."""
    v = Verification.parse(verification)
    rule, relax, boost = v.rule, v.relax, v.boost
    if rule != Rule.R2 or not relax.is_exact or not boost.is_none:
        raise ValueError(f"{window} is verified by the unboosted sampled-draft test (rule r2 with no "
                         f"relaxation or boost, as SCD and SJD-PAC verify), got rule {rule}, relax {relax}, "
                         f"boost {boost}")
    if exact and isinstance(window, PacWindow) and window.width > 1:
        raise ValueError(f"{window}: exact_expectations needs p at every node of the PD tree; it is given "
                         "for chains only (width=1, or a jacobi window)")


def run_coupled(world, window: JacobiWindow, out: tuple, *, seq_len: int, temperature: float, seed: int,
                threads: int | None, backend: str, exact: bool) -> np.ndarray:
    """Decode ``len(out[4])`` sequences into ``simulate.engine``'s per-step buffers ``out`` = (o_int,
    o_exp, o_tv, o_ttv, n_steps); returns the tokens, (n_sequences, seq_len + L) int64 padded with -1.
    ``simulate.jacobi.check_jacobi_run`` and :func:`check_coupled_run` check the arguments."""
    o_int, o_exp, o_tv, o_ttv, n_steps = out
    codes = window_codes(window)
    L = codes.window
    seqs = np.full((len(n_steps), int(seq_len) + L), -1, dtype=np.int64)
    if backend == "numpy":
        _decode_numpy(world, codes, out, seqs, int(seq_len), temperature, int(seed), exact)
    else:
        W = world.kernel_world(float(temperature))
        old = numba.get_num_threads()
        try:
            if threads is not None:
                numba.set_num_threads(int(threads))
            coupled_kernel(W, L, codes.copy, codes.coupling, codes.store_official, codes.width, codes.depth,
                           codes.siblings, bool(exact), len(n_steps), int(seq_len), int(seed), o_int, o_exp,
                           seqs, n_steps)
        finally:
            numba.set_num_threads(old)
    tv = 0.0 if window.lossless else np.nan  # type: ignore[attr-defined]
    for s in range(len(n_steps)):
        o_ttv[s, :n_steps[s]] = tv
        if exact:
            o_tv[s, :n_steps[s]] = tv
    return seqs


def _decode_numpy(world, codes, out, seqs, seq_len, temperature, seed, exact) -> None:
    """The readable oracle on the world's rows, with the kernel's uniforms."""
    o_int, o_exp, _, _, n_steps = out
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
        steps = decode_coupled(target, advance, state, V, codes, seq_len, u, noise, exact=exact)
        for i, st in enumerate(steps):
            o_int[s, i] = (st.accepted + 1, st.tree_size, codes.window, st.accepted, 0, st.choice)
            o_exp[s, i] = st.expected_tokens
        tokens = np.concatenate([st.tokens for st in steps])
        seqs[s, :tokens.size] = tokens
        n_steps[s] = len(steps)


__all__ = ["check_coupled_run", "is_coupled", "run_coupled"]
