"""``run``: decode sequences by drafting and verifying in a world, in parallel (Numba).

Each sequence s draws all its randomness from ``stream_key(seed, s)`` (the
world's own noise is keyed by prefix), so results are identical for any
thread count. Per step the engine builds the policy's tree with the world's
drafter, verifies it with the node uniforms ``u_accept[v]`` / ``u_draw[v]``
(and ``u_tree[w]`` for R2's draws), computing the target p only at the nodes
the walk visits (the root, each accepted node, the node whose residual or
bonus is drawn; R3: the nodes on acceptable chains), records the exact TV of
the tokens emitted (theory's TV of each deciding node's emitted law), and
moves the world's state along the accepted path and the bonus token.

``run(..., exact_expectations=True)`` also computes p at every node with
children and records theory's exact expectation of each step given its tree
and state (E[tokens], E[TV]), the quantities the agreement-with-theory tests
compare with; it costs about one extra softmax row per tree node.

``run(world, tree, verification)`` takes the rule, its relaxation or boost and its variant as one
:class:`theory.verification.Verification` (or its spec string: ``"r1+lantern:k=1000,delta=0.1"``).
A boost (``"r2+gsd:G=10"``, ``"r2+cool:delta=2"``) raises R2's sampled-draft test (GSD's group or
Cool-SD's depth-scaled acceptance, SPEC 9.2-9.3; GSD reads the world's
``embedding()``); the step's TV is then the exact TV of the stages tested
(SPEC 9.4). The budget (``"r2+budget:tv=0.1,k=50"``, SPEC 9.5) merges the
world's neighbour table (as a LANTERN relaxation reads it) within a budget of
tv per node; the step's TV is the sum of the charges of the stages its
path's nodes tested (each node's sum is at most tv, docs/theory.md 14.1).

``run(world, tree, "r4")`` verifies sampled-draft static trees (children drawn
from q without replacement, built exactly as for R2, and SJD windows as
chains) by traversal verification (SPEC 9.6, :mod:`simulate.traversal_kernels`,
the twin of ``theory.traversal``): ``u_accept[v]`` is node v's eta, ``u_draw[v]``
the bonus where the step ends. p is computed where the loop's tests go (the
nodes with children on each tested path, and the end's row for the bonus).
R4 takes the boosts (GSD, Cool-SD, the budget: relaxed R4); its ``token_tv`` is
the sum of the Deltas of the stages the step entered (0 exact), whose
expectation given the tree is Theorem 12.3's bound (``expected_tv``).

``run(world, JacobiWindow(L), "r2", ...)`` decodes with SJD's Jacobi
windows instead of draft trees (no drafter; SPEC 9.1): :mod:`simulate.jacobi`.

``run(..., backend="numpy")`` runs the same loop through the readable NumPy
oracle (the world's rows, ``policy.build`` and ``theory.sample_step`` /
``theory.node_outcome``): it reproduces the Numba run's integer outcomes.
"""

from __future__ import annotations

import math
import time

import numba
import numpy as np
from numba import njit, prange

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.policies import KIND_STATIC, PolicySpec, TreePolicy
from relaxspec.core.trees.skips import VvsTree
from relaxspec.core.trees.spec import draft_source
from relaxspec.simulate.jacobi import check_jacobi_run, run_windows
from relaxspec.simulate.policy_kernels import EXPAND_BATCH, build_dynamic, build_static
from relaxspec.simulate.results import SimResult
from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE, check_seed, step_counter, stream_key, uniform
from relaxspec.simulate.sequence_kernels import (
    advance_root,
    buffer_scratch,
    node_scratch,
    p_row,
    parent_rows,
    record_step,
    walk_step,
)
from relaxspec.simulate.step_kernels import children_csr, leaf_bonus, path_tv, step_expectation_kernel
from relaxspec.simulate.traversal_kernels import (
    child_tokens_csr,
    traversal_expectation_kernel,
    traversal_reset,
    traversal_scratch,
    traversal_walk_kernel,
)
from relaxspec.simulate.vvs import check_vvs_run, run_vvs
from relaxspec.simulate.world_kernels import (
    initial_state,
    row_scratch,
    vocab_size,
)
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld, TraceWorld, World
from relaxspec.theory.rules import RULE_R2, RULE_R4
from relaxspec.theory.tree import parent_depths
from relaxspec.theory.verification import KernelArgs, Verification

BACKENDS = ("numba", "numpy")
STEP_FIELDS = ("tokens", "tree_size", "tree_depth", "accepted_depth", "draft_calls", "root_choice")


@njit(cache=True, error_model="numpy")
def _sequence(s, W, ps, rs, bs, exact, seq_len, seed, o, n_steps):
    """Decode sequence ``s``: the policy tuple ``ps`` (built in :func:`_run_numba`), the rule tuple ``rs``
    (``theory.verification.KernelArgs.rs``), the boost tuple ``bs`` (``KernelArgs.bs``), per-step
    outputs ``o`` =
    (o_int, o_exp, o_tv, o_ttv) of this sequence; all scratch is allocated once per sequence, so the step
    loop allocates nothing (a boosted R2 stage allocates its rank and TV scratch). Rule 4 (R4) walks
    with :func:`simulate.traversal_kernels.traversal_walk_kernel` on its own state."""
    kind, tparents, tranks, tdepths, top_k, max_calls, total_tokens, check_steps, threshold, S, max_nodes, \
        max_buffer, n_q = ps
    rule, code, k, param, variant, nb = rs
    V = vocab_size(W)
    d = W[1].shape[0]
    draws = rule == RULE_R2 or rule == RULE_R4  # R2 and R4 verify children drawn from q without replacement
    keep_q = draws  # they verify with q; R1 and R3 never read it after the build
    bparent, btoken, bdepth, zs, hs, have, qrow, score = buffer_scratch(max_buffer, d)
    q_rows = np.empty((n_q if keep_q else 1, V))
    p_rows = np.empty((max_nodes + 1, V))
    es, cmaxs = row_scratch(W, EXPAND_BATCH)
    scratch = np.empty((3, V))
    parents, tokens, depths, buf_of, prow, qrow_f, cstart, cidx, path, tops, psums, ua, ud, edge, reach, \
        ok = node_scratch(max_nodes)
    nt = tparents.shape[0]
    utree = np.empty(max(nt, 1))
    state = np.zeros(2, dtype=np.int64)
    walk_tv = np.zeros(1)  # a boosted R2 walk's stage TVs (path_tv reads them)
    mark = np.zeros(V, dtype=np.int64)
    seen = np.zeros(V, dtype=np.int64)
    smark = np.zeros(V + 1, dtype=np.int64)  # the child selection's scratch
    r4 = rule == RULE_R4
    ts = traversal_scratch(max_nodes if r4 else 0, n_q if r4 else 0, V if r4 else 0, bs[0])
    ktok = np.empty(max_nodes, dtype=np.int64)
    charge = np.zeros(1)
    epoch = 0
    key = stream_key(seed, s)
    if W[0] == 0:
        hs[0] = initial_state(W[1], W[4], W[5][0], key, zs[0])
    have[0] = True
    pos = 0
    step = 0
    while pos < seq_len:
        if kind == KIND_STATIC:
            if draws:
                for w in range(nt):
                    utree[w] = uniform(key, step_counter(step, w, U_TREE))
            n, calls = build_static(W, tparents, tranks, tdepths, draws, keep_q, utree, S, smark, bparent,
                                    btoken, bdepth, zs, hs, have, qrow, q_rows, es, cmaxs, scratch, parents,
                                    tokens, depths, buf_of)
        else:
            n, calls = build_dynamic(W, top_k, max_calls, total_tokens, check_steps, threshold, S, smark,
                                     keep_q, bparent, btoken, bdepth, zs, hs, have, qrow, q_rows, es, cmaxs,
                                     score, parents, tokens, depths, buf_of)
        children_csr(parents, n, cstart, cidx)
        if r4:
            child_tokens_csr(tokens, n, cidx, ktok)
        for v in range(n):
            qrow_f[v] = qrow[buf_of[v]]
            prow[v] = -1
            ua[v] = uniform(key, step_counter(step, v, U_ACCEPT))
            ud[v] = uniform(key, step_counter(step, v, U_DRAW))
        npr = 0
        e_tok, e_tv = math.nan, math.nan
        if exact:  # p at every node with children, for theory's expectation of the step
            npr = parent_rows(W, n, cstart, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es,
                              cmaxs, npr)
            if r4:
                e_tok, e_tv = traversal_expectation_kernel(parents, depths, n, cstart, cidx, ktok, p_rows,
                                                           prow, q_rows, qrow_f, bs, ts, path, reach)
            else:
                e_tok, e_tv, epoch = step_expectation_kernel(parents, tokens, depths, n, cstart, cidx, p_rows,
                                                             prow, psums, q_rows, qrow_f, rs, bs, mark, seen,
                                                             epoch, scratch, edge, reach)
        if r4:
            traversal_reset(ts, n, bs)
            charge[0] = 0.0
            while True:  # the walk asks for p where it goes
                m, bonus, need = traversal_walk_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, prow,
                                                       q_rows, qrow_f, ua, ud, bs, ts, path, charge,
                                                       scratch[0])
                if need < 0:
                    break
                npr = p_row(W, need, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs,
                            npr)
        else:
            m, bonus, epoch, npr = walk_step(W, parents, tokens, depths, n, cstart, cidx, buf_of, bparent,
                                             btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, q_rows,
                                             qrow_f, ua, ud, rs, bs, mark, epoch, scratch, path, state,
                                             walk_tv, ok, tops, npr)
        end = path[m - 1]
        if bonus < 0:
            if prow[end] < 0:
                npr = p_row(W, end, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs,
                             npr)
            bonus = leaf_bonus(p_rows[prow[end]], ud[end], rule, scratch[0])
        if r4:
            t_tv = charge[0]
        else:
            t_tv, epoch = path_tv(parents, tokens, depths, path, m, cstart, cidx, p_rows, prow, psums, q_rows,
                                  qrow_f, rs, bs, walk_tv, mark, seen, epoch)
        record_step(o, step, m, n, depths, path, cstart, cidx, calls, e_tok, e_tv, t_tv)
        advance_root(W, buf_of[end], bonus, bparent, btoken, zs, hs, have)
        pos += m
        step += 1
    n_steps[s] = step


@njit(parallel=True, cache=True, error_model="numpy")
def simulate_kernel(W, ps, rs, bs, exact, n_seq, seq_len, seed, out, n_steps):
    """Decode ``n_seq`` sequences in parallel; per-step outputs ``out`` (each (n_seq, seq_len, ...))."""
    # a parfor passes each captured variable to its worker on its own: tuples holding arrays are taken
    # apart here and rebuilt in the loop (Numba cannot hand such a nested tuple to the gufunc)
    kind, tparents, tranks, tdepths, top_k, max_calls, total_tokens, check_steps, threshold, S, max_nodes, \
        max_buffer, n_q = ps
    rule, code, k, param, variant, nb = rs
    bkind, before, after, fallback, tau, dist, omega, emb, delta, table = bs
    o_int, o_exp, o_tv, o_ttv = out
    for s in prange(n_seq):
        # int64: Numba types a prange index as int64 and again as uint64 (two compiles of _sequence)
        _sequence(np.int64(s), W,
                  (kind, tparents, tranks, tdepths, top_k, max_calls, total_tokens, check_steps,
                   threshold, S, max_nodes, max_buffer, n_q), (rule, code, k, param, variant, nb),
                  (bkind, before, after, fallback, tau, dist, omega, emb, delta, table), exact, seq_len, seed,
                  (o_int[s], o_exp[s], o_tv[s], o_ttv[s]), n_steps)


# ------------------------------------------------------------------ Python layer
def _check_run_args(world, tree, n_sequences, seq_len, temperature, seed, threads, backend):
    if not isinstance(world, World):
        raise ValueError("world must be a LatentWorld, StationaryWorld or TraceWorld, "
                         f"got {type(world).__name__}")
    if not isinstance(world, TraceWorld) and not isinstance(tree, TreePolicy):
        raise ValueError("tree must be a tree policy (StaticTree, Eagle2Tree, ...), "
                         f"got {type(tree).__name__}")
    for name, v, lo in (("n_sequences", n_sequences, 1), ("seq_len", seq_len, 1)):
        if isinstance(v, bool) or int(v) != v or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be > 0 (greedy decoding is rule r3), got {temperature!r}")
    check_seed(seed)
    max_threads = numba.config.NUMBA_NUM_THREADS
    if threads is not None and (int(threads) != threads or not 1 <= threads <= max_threads):
        raise ValueError(f"threads must be in [1, {numba.config.NUMBA_NUM_THREADS}], got {threads!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(world, TraceWorld):
        tree.check_vocab(world.vocab_size)


def run(
    world: World,
    tree: TreePolicy | None,
    verification: Verification | str = "r1",
    *,
    n_sequences: int,
    seq_len: int = 256,
    temperature: float = 1.0,
    seed: int = 0,
    threads: int | None = None,
    backend: str = "numba",
    exact_expectations: bool = False,
) -> SimResult:
    """Decode ``n_sequences`` sequences of ``seq_len`` tokens with drafting and verification.

    ``tree`` is the draft-tree policy (ignored for a :class:`TraceWorld`,
    whose recorded trees are re-verified). ``verification`` is the rule, its
    relaxation or boost and its variant as one value
    (:class:`theory.verification.Verification`, or its spec string such as
    ``"r2+lantern++:k=1000,lam=5"``; GSD reads the world's ``embedding()``, a
    LANTERN relaxation and the budget its ``neighbours(k)``); the result
    records it (``SimResult.verification``). ``threads`` sets Numba's thread
    count (results do not depend on it). The last step of a sequence may
    overshoot ``seq_len``; its tokens all count (steps are the unit).
    ``exact_expectations=True`` also records theory's exact per-step
    expectations (``expected_tokens``, ``expected_tv``), which need p at
    every node with children: slower, same outcomes. A trace replay always
    records them. Rule ``r4`` is traversal verification (module docstring).
    """
    verification = Verification.parse(verification)
    _check_run_args(world, tree, n_sequences, seq_len, temperature, seed, threads, backend)
    if isinstance(tree, JacobiWindow):  # SJD's windows (SPEC 9.1): simulate.jacobi
        check_jacobi_run(world, tree, verification)
    elif isinstance(tree, VvsTree):  # VVS's skip steps (SPEC 10.3): simulate.vvs
        check_vvs_run(world, tree, verification)
    if not isinstance(tree, JacobiWindow) and not isinstance(world, TraceWorld):  # a trace brings its trees
        verification.check_source(draft_source(tree), f"tree {tree}")
    exact = bool(exact_expectations)
    if isinstance(world, TraceWorld):
        from relaxspec.simulate.replay import replay_trace

        return replay_trace(world, verification)
    assert isinstance(world, (LatentWorld, StationaryWorld)) and tree is not None  # as _check_run_args says
    v = verification
    emb = world.embedding() if v.reads_embedding else None
    width = v.neighbour_k
    spec = v.encode(world.vocab_size, neighbours=world.neighbours(width) if width else None, emb=emb)
    t0, c0 = time.perf_counter(), time.process_time()
    skipped = None
    if isinstance(tree, VvsTree):
        out = _outputs(n_sequences, seq_len)
        skipped = run_vvs(world, tree, spec, out, seq_len=seq_len,
                          temperature=temperature,
                          seed=seed, threads=threads, backend=backend, exact=exact)
    elif isinstance(tree, JacobiWindow):
        out = _outputs(n_sequences, seq_len)
        run_windows(world, tree, spec, verification, out, seq_len=seq_len, temperature=temperature, seed=seed,
                    threads=threads, backend=backend, exact=exact)
    elif backend == "numpy":
        out = _run_numpy(world, tree, spec, verification, n_sequences, seq_len, temperature, seed, exact, emb)
    else:
        out = _run_numba(world, tree.kernel_spec(), spec, n_sequences, seq_len, temperature, seed, threads,
                         exact)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    o_int, o_exp, o_tv, o_ttv, n_steps = out
    rows = [np.arange(n_steps[s]) for s in range(n_sequences)]
    def cat(a):
        return np.concatenate([a[s][rows[s]] for s in range(n_sequences)])
    ints = cat(o_int)
    return SimResult(
        world=world.name, tree=str(tree), verification=verification, temperature=temperature,
        n_sequences=int(n_sequences), seq_len=int(seq_len), seed=int(seed),
        **{f: ints[:, i].astype(np.int64) for i, f in enumerate(STEP_FIELDS)},
        token_tv=cat(o_ttv), expected_tokens=cat(o_exp), expected_tv=cat(o_tv),
        sequence=np.repeat(np.arange(n_sequences), n_steps), exact_expectations=exact, seconds=seconds,
        extra={"cpu_seconds": cpu_seconds},
        target_forwards=None if skipped is None else (~cat(skipped)).astype(np.int64),
    )


def _outputs(n_seq: int, seq_len: int) -> tuple:
    """Per-step output buffers: ints, expected tokens, expected TV, token TV, step counts."""
    return (np.zeros((n_seq, seq_len, len(STEP_FIELDS)), dtype=np.int64), np.full((n_seq, seq_len), np.nan),
            np.full((n_seq, seq_len), np.nan), np.zeros((n_seq, seq_len)), np.zeros(n_seq, dtype=np.int64))


def _run_numba(world, ps: PolicySpec, spec: KernelArgs, n_seq, seq_len, temperature, seed, threads, exact):
    W = world.kernel_world(float(temperature))
    n_q = ps.max_buffer  # rows of q: at most one per buffer node
    if ps.kind == KIND_STATIC:
        tdepths = parent_depths(ps.parents)
        n_q = int(np.unique(ps.parents[1:]).size) if ps.parents.size > 1 else 1
        kids_max = max(np.bincount(ps.parents[1:]).max() if ps.parents.size > 1 else 0, 0)
        if kids_max > world.vocab_size:
            raise ValueError(
                f"the static tree has a node with {kids_max} children but V = {world.vocab_size}")
    else:
        tdepths = np.zeros(0, dtype=np.int64)
        n_q = 1 + (ps.max_calls - 1) * min(ps.top_k, world.vocab_size)
    out = _outputs(n_seq, seq_len)
    old = numba.get_num_threads()
    try:
        if threads is not None:
            numba.set_num_threads(int(threads))
        policy = (ps.kind, ps.parents, ps.ranks, tdepths, ps.top_k, ps.max_calls, ps.total_tokens,
                  ps.check_steps, ps.threshold, ps.selection, ps.max_nodes, ps.max_buffer, max(n_q, 1))
        simulate_kernel(W, policy, spec.rs, spec.bs, exact, int(n_seq), int(seq_len), int(seed),
                        out[:4], out[4])
    finally:
        numba.set_num_threads(old)
    return out


def _run_numpy(world, tree, spec, verification: Verification, n_seq, seq_len, temperature, seed, exact, emb):
    from relaxspec.simulate.oracle import oracle_sequence

    out = _outputs(n_seq, seq_len)
    o_int, o_exp, o_tv, o_ttv, n_steps = out
    v = verification
    nb = spec.budget_table if v.uses_budget else spec.neighbours  # the table the rule merges
    for s in range(n_seq):
        n_steps[s] = oracle_sequence(world, tree, v, nb, seq_len, temperature, seed, s, exact, o_int[s],
                                     o_exp[s], o_tv[s], o_ttv[s], emb)
    return out


__all__ = ["SimResult", "run", "LatentWorld", "StationaryWorld"]
