"""Per-rule speed against each configuration's own floor (issue 30): section 5 of simulate_bench.py.

Every rule x boost x draft source runs a few short sequences on one Numba thread in a fresh interpreter
of a checkout (its own ``.venv`` when it has one, as in ``benchmarks/layout_speed.py``), so that an older
checkout (``--before``) runs the very same configurations in the same session, alternating with this one
draft source by draft source. Each configuration reports its steps per CPU-second and a digest of every
per-step number it produced (tokens, tree sizes, depths, draft calls, root choices, token TV bits), so
that before and after can be compared number for number.

A configuration's floor is what it cannot avoid per step, at costs measured in this process in the same
run (:func:`floor_costs`), summed over the step's own counts (:func:`floor_seconds`):

- rows: every row the step needs (draft rows: EAGLE-2's 1 + 10 per beam, a static tree's expanded
  nodes; target rows: one per token the step emits, the root's and each accepted node's, or the Jacobi
  window's L + 1) at the cost of the logits pass alone (the codebook pass without exp, sums or
  selection; draft rows at the per-row cost of a 10-state pass, target rows at a 1-state pass);
- sequential passes over V, each at the cost of a plain sequential float64 sum of V (theory's arithmetic
  sums left to right, so no exact implementation makes them parallel): one per step for the token drawn
  at its end (bonus or residual), one per node a tree draws its children at (R2 / R4 on a static tree:
  the cumulative sum of q) or per draft a window keeps (drawn from p), and for R2 / R4 one per stage
  (the residual's normalisation);
- the stages a step must test: R2 at least one per accepted draft and one per step (a window: also the
  rejected draft after them); R4 at least every node on the path its first test walks (the first
  children down to a leaf: the whole window of a Jacobi step), each needing its stage's alpha. A stage's
  draft residual has full support (V tokens) on a tree and on a Jacobi window's kept drafts (q = the p
  they were drawn from), one token on its fresh ones;
- the test, per stage: nothing more for R1 / R2 / R4 and Cool-SD; GSD one compare pass over V (the
  draft's rank and window); the budget one pass over the k neighbours of each token the draft residual
  can draw (the issue's floor; a float64 add and an index read per pair, at the speed of a plain four-way
  gather loop). The budget's exact shortcut (docs/theory.md section 16) reads fewer pairs, so its ratio
  can pass 100%;
- with the exact TV (the second floor, boosted rules only): the stage's exact TV (R4: its Delta) reads
  every draftable token's acceptance: GSD on a full-support stage a sort of V (NumPy's vectorised
  ``np.sort``, values only) and a gather of every token's embedding row in rank order, on a one-token
  stage a compare pass; Cool-SD one pass over V; the budget's charge is already in its test's pass.

R4 also divides by the sum of each residual it makes: one sequential pass per rejection (the
normaliser S of [alpha P_u - Q_u]^+). The walk rejects at least every node of its first path below the
accepted depth m (post-order puts them before any node at depth m), so the floor counts max(0, D - m)
such passes, D the first path's depth (a window: L). Still a lower bound: each rejection can make R4
recompute its parent's stage and the stages down the next path, which the step's records do not count.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

from relaxspec.simulate.world_kernels import _block_logits
from relaxspec.theory.boost import BoostKind
from relaxspec.theory.rules import budget_index_dtype
from relaxspec.theory.verification import Verification

WORLD = "ambiguous"
WINDOW = 15
STATIC = "static:naive_extend_57"
EAGLE2 = "eagle2:10,4,58"
JACOBI = f"jacobi:{WINDOW}"
BOOSTS = ("", "+gsd:G=10,tau=0.15,dist=0.5", "+cool:delta=2", "+budget:tv=0.1,k=50", "+budget:tv=0.1,k=1000")
# (draft source label, tree spec, verifications): one group per fresh interpreter
GROUPS = (
    ("EAGLE-2 (10, 4, 58)", EAGLE2, ("r1", "r1+lantern:k=1000,delta=0.1", "r1+lantern++:k=1000,lam=2")),
    ("static naive_extend_57", STATIC, ("r1", "r1+lantern:k=1000,delta=0.1", *[f"r2{b}" for b in BOOSTS])),
    ("static naive_extend_57", STATIC, tuple(f"r4{b}" for b in BOOSTS)),
    (f"Jacobi window {WINDOW}", JACOBI, tuple(f"r2{b}" for b in BOOSTS)),
    (f"Jacobi window {WINDOW}", JACOBI, tuple(f"r4{b}" for b in BOOSTS)),
    ("coupled window (SCD)", f"{JACOBI},coupled=principled", ("r2",)),
    ("SJD-PAC window", f"pac:{WINDOW}", ("r2",)),
)

WORKER = r"""
import hashlib, json, sys
import numpy as np
from relaxspec.core.trees.spec import parse_tree
from relaxspec.simulate.engine import run
from relaxspec.simulate.worlds import LatentWorld

a = json.loads(sys.argv[1])
world = LatentWorld.preset(a["world"], **a["overrides"])
out = []
for tree_spec, ver in a["configs"]:
    tree = parse_tree(tree_spec)
    run(world, tree, ver, n_sequences=1, seq_len=2, threads=1, seed=0)  # compile or load; tables
    res = run(world, tree, ver, n_sequences=a["sequences"], seq_len=a["seq_len"], threads=1, seed=1)
    h = hashlib.sha256()
    for f in ("tokens", "tree_size", "tree_depth", "accepted_depth", "draft_calls", "root_choice"):
        h.update(np.ascontiguousarray(getattr(res, f), dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(res.token_tv, dtype=np.float64).tobytes())
    out.append({"tree": tree_spec, "verification": ver, "steps": int(res.n_steps),
                "cpu": res.extra["cpu_seconds"], "wall": res.seconds,
                "tokens": res.tokens.tolist(), "calls": res.draft_calls.tolist(),
                "sequence": res.sequence.tolist(), "digest": h.hexdigest()[:16]})
print(json.dumps(out))
"""


def checkout_python(checkout: Path) -> tuple[str, dict]:
    """The interpreter and environment that import ``checkout``'s code (``layout_speed.measure``)."""
    own = checkout / ".venv" / "bin" / "python"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    if not own.is_file():
        env["PYTHONPATH"] = str(checkout)
    return (str(own) if own.is_file() else sys.executable), env


def run_group(checkout: Path, configs: list[tuple[str, str]], overrides: dict, sequences: int,
              seq_len: int) -> list[dict]:
    """One fresh interpreter of ``checkout`` running ``configs`` (tree, verification) in turn."""
    python, env = checkout_python(checkout)
    arg = json.dumps({"world": WORLD, "overrides": overrides, "configs": configs, "sequences": sequences,
                      "seq_len": seq_len})
    out = subprocess.run([python, "-c", WORKER, arg], cwd=checkout, env=env, capture_output=True, text=True,
                         check=False)
    if out.returncode:
        raise SystemExit(f"simulate_bench: error: the per-rule run in {checkout} failed:\n"
                         f"{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- floors
@njit(cache=True, error_model="numpy")
def _rank_pass(r, x):
    """One compare pass over V: how many tokens outrank x (GSD's window needs at least this)."""
    rx = r[x]
    c = 0
    for y in range(r.shape[0]):
        c += r[y] > rx
    return c


@njit(cache=True, error_model="numpy")
def _gather_pass(r, table, n):
    """Proximity masses of tokens 0..n-1 (each a sum over its row of ``table``), four sums side by side:
    the budget's V x k pass at the best this loop does."""
    K = table.shape[1]
    s = 0.0
    for x in range(0, n - 3, 4):
        t0, t1, t2, t3 = table[x], table[x + 1], table[x + 2], table[x + 3]
        e0, e1, e2, e3 = 0.0, 0.0, 0.0, 0.0
        for j in range(K):
            e0 += r[t0[j]]
            e1 += r[t1[j]]
            e2 += r[t2[j]]
            e3 += r[t3[j]]
        s += e0 + e1 + e2 + e3
    return s


@njit(cache=True, error_model="numpy")
def _seq_pass(r):
    """A sequential float64 sum over V (theory's left-to-right sums and cumulative sums)."""
    s = 0.0
    for x in range(r.shape[0]):
        s += r[x]
    return s


@njit(cache=True, error_model="numpy")
def logits_pass(T, bias, Ms, zfs, acc):
    """The logits of every state over the whole codebook, block by block, and nothing else: the floor of
    any exact softmax row (``simulate.world_kernels._block_logits`` in one compiled loop)."""
    s = 0.0
    for x0 in range(0, T.shape[1], acc.shape[1]):
        _block_logits(T, bias, Ms, zfs, x0, min(acc.shape[1], T.shape[1] - x0), acc)
        s += acc[0, 0]
    return s


@njit(cache=True, error_model="numpy")
def _gather_rows(emb, order, out):
    """Every embedding row in the order ``order`` (GSD's windows read them in rank order)."""
    for j in range(order.shape[0]):
        y = order[j]
        for c in range(emb.shape[1]):
            out[c, j] = emb[y, c]


def best_cpu(f, reps: int = 50, rounds: int = 7) -> float:
    """Best CPU seconds per call over ``rounds`` rounds of ``reps`` calls, after one call that compiles."""
    f()
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        for _ in range(reps):
            f()
        best = min(best, (time.process_time() - t) / reps)
    return best


def floor_costs(world, logits_row: float, logits_row10: float) -> dict[str, float]:
    """CPU seconds of the floors' pieces on ``world``'s rows: ``row1`` / ``row10`` (the logits pass per row,
    1 and 10 states: given), ``pass`` (a compare pass over V), ``seq`` (a sequential sum over V), ``sort``
    (np.sort of V float64), ``rows`` (a gather of V embedding rows in a random order), ``gather1`` (one
    (token, neighbour) pair of the budget's V x k pass)."""
    V = world.vocab_size
    rng = np.random.default_rng(0)
    r = rng.dirichlet(np.full(V, 0.3))
    table = np.ascontiguousarray(world.neighbours(1000)[:, :1000], dtype=budget_index_dtype(V))  # as kernels
    emb = world.embedding()
    perm = rng.permutation(V)
    rows = np.empty((emb.shape[1], V))
    t_gather = best_cpu(lambda: _gather_pass(r, table, V), 2, 5) / (V * 1000)
    return {"row1": logits_row, "row10": logits_row10, "pass": best_cpu(lambda: _rank_pass(r, 7), 200, 5),
            "seq": best_cpu(lambda: _seq_pass(r), 200, 5), "sort": best_cpu(lambda: np.sort(r), 50, 5),
            "rows": best_cpu(lambda: _gather_rows(emb, perm, rows), 50, 5), "gather1": t_gather}


def stage_counts(tree: str, traversal: bool, rec: dict, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the stages it must test at least and how many of them have a full-support draft residual
    (module docstring); ``depth``: the nodes with children on a tree's first root-to-leaf path."""
    tokens = np.asarray(rec["tokens"])
    seq = np.asarray(rec["sequence"])
    window = not (tree.startswith("static") or tree.startswith("eagle2"))
    if traversal:
        stages = np.full(tokens.size, WINDOW if window else depth)
    elif window:  # every accepted draft, and the draft after them unless the window was all accepted
        stages = np.minimum(tokens, WINDOW)
    else:
        stages = np.maximum(1, tokens - 1)
    if not window:
        return stages, stages
    kept = np.zeros(tokens.size, dtype=np.int64)  # drafts the window kept from its previous step
    for i in range(1, tokens.size):
        if seq[i] == seq[i - 1]:
            kept[i] = WINDOW - (tokens[i - 1] - 1)
    return stages, np.minimum(stages, kept)


def floor_seconds(tree: str, verification: str, rec: dict, costs: dict, static: tuple[int, int],
                  V: int) -> tuple[float, float]:
    """(floor of the test, floor with the exact TV): CPU seconds per step (module docstring); ``static``:
    a static tree's expanded nodes and the depth of its first path."""
    tokens = np.asarray(rec["tokens"], dtype=float)
    if tree.startswith("eagle2"):
        top_k = 10
        draft = float(np.mean(1 + (np.asarray(rec["calls"]) - 1) * top_k))
        target = float(tokens.mean())
    elif tree.startswith("static"):
        draft, target = float(static[0]), float(tokens.mean())
    else:  # a window: the target forward along its L + 1 positions, no drafter
        draft, target = 0.0, float(WINDOW + 1)
    rows = draft * costs["row10"] + target * costs["row1"]
    v = Verification.parse(verification)
    stages, full = stage_counts(tree, v.is_traversal, rec, static[1])
    stages, full = float(stages.mean()), float(full.mean())
    one = stages - full  # stages whose draft residual holds one token
    sampled = v.samples_drafts
    if tree.startswith("static"):
        draws = static[0] if sampled else 0.0
    elif tree.startswith("eagle2"):
        draws = 0.0
    else:  # the drafts a window keeps, each drawn from its p
        draws = float(np.mean(np.maximum(0, WINDOW - (tokens - 1))))
    rejected = 0.0
    if v.is_traversal:  # the first path's nodes below the accepted depth (module docstring)
        depth = WINDOW if not (tree.startswith("static") or tree.startswith("eagle2")) else static[1]
        rejected = float(np.mean(np.maximum(0.0, depth - (tokens - 1))))
    rows += costs["seq"] * (1.0 + draws + (stages if sampled else 0.0) + rejected)
    test, tv = 0.0, 0.0
    if v.boost.kind == BoostKind.GROUP:
        test = stages * costs["pass"]
        tv = full * (costs["sort"] + costs["rows"]) + one * costs["pass"]
    elif v.boost.kind == BoostKind.DEPTH:
        tv = stages * costs["pass"]
    elif v.boost.kind == BoostKind.BUDGET:
        k = v.boost.k
        test = (full * V + one) * k * costs["gather1"]
    return rows + test, rows + test + tv


def static_shape(tree: str) -> tuple[int, int]:
    """A static tree's expanded nodes per step (each one drafter row) and the nodes with children on its
    first root-to-leaf path (the first children)."""
    from relaxspec.core.trees.spec import parse_tree

    parents = np.asarray(parse_tree(tree).parents)
    internal = np.unique(parents[1:])
    depth, v = 0, 0
    while v in internal:
        depth += 1
        v = int(np.flatnonzero(parents == v)[0])
    return int(internal.size), depth


def digest_rows(records: list[dict]) -> str:
    """One digest of every configuration's numbers (to compare two checkouts at a glance)."""
    return hashlib.sha256("".join(r["digest"] for r in records).encode()).hexdigest()[:16]


def per_rule_table(say, costs: dict, checkouts: dict[str, Path], overrides: dict, sequences: int,
                   seq_len: int, V: int) -> dict[str, list[dict]]:
    """Run every group in each checkout (alternating), then print the table; returns the records."""
    records: dict[str, list[dict]] = {name: [] for name in checkouts}
    for _, tree, verifications in GROUPS:
        configs = [(tree, v) for v in verifications]
        for name, path in checkouts.items():
            records[name] += run_group(path, configs, overrides, sequences, seq_len)
    static = static_shape(STATIC)
    names = list(checkouts)
    after = records[names[-1]]
    head = "| draft source | rule | "
    head += "".join(f"steps per CPU-s {n} | " for n in names)
    if len(names) > 1:
        head += "after / before | same numbers | "
    head += "floor (test) | after / floor | floor (test + exact TV) | after / floor |"
    say(head)
    say("|" + "---|" * (head.count("|") - 1))
    labels = {tree: label for label, tree, _ in GROUPS}
    for i, rec in enumerate(after):
        tree, ver = rec["tree"], rec["verification"]
        speed = {n: records[n][i]["steps"] / records[n][i]["cpu"] for n in names}
        f_test, f_tv = floor_seconds(tree, ver, rec, costs, static, V)
        row = f"| {labels[tree]} | {ver} | " + "".join(f"{speed[n]:.0f} | " for n in names)
        if len(names) > 1:
            same = all(records[n][i]["digest"] == rec["digest"] for n in names)
            row += f"{speed[names[-1]] / speed[names[0]]:.1f}x | {'yes' if same else 'NO'} | "
        row += f"{1 / f_test:.0f} | {speed[names[-1]] * f_test:.0%} | "
        boosted = not Verification.parse(ver).boost.is_none
        row += f"{1 / f_tv:.0f} | {speed[names[-1]] * f_tv:.0%} |" if boosted else "| |"
        say(row)
    return records
