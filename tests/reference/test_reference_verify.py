"""The device verifier (``reference.verify``, issue 19) takes theory's decisions: in float64 on CPU every
step, window and node equals ``theory.rule_step`` / ``theory.sampler`` given the same uniforms (R1, R2
with GSD and Cool-SD, R3; every relaxation and variant; R1's residual exhaustion); in float32 a decision
differs only where a uniform or a comparison lies within rounding of its threshold; ``probs`` keeps the
tokens ``theory.distributions.logits_to_probs`` keeps; one host read per step; bad input raises a clear
``ValueError``."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxspec import reference
from relaxspec.core.trace import Sampling
from relaxspec.reference.verify import DeviceVerifier
from relaxspec.testing.strategies import distributions, tree_cases, uniforms
from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.distributions import logits_to_probs
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import Relax, merge_count
from relaxspec.theory.rule_step import sample_rule_step, sample_window_step
from relaxspec.theory.sampler import draw_token, sample_node
from relaxspec.theory.stages import r1_reject, r1_stage
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import BoostAt, r1_walk, r2_given_states

BOOSTS = (NO_BOOST, Boost.group(3, 0.3, 2.0), Boost.group(5, 1.0, 50.0),
          Boost.group(4, 0.5, 8.0, window="official"), Boost.group(14, 1.0, 50.0, window="official"),
          Boost.depth([2.0, 1.5]), Boost.cool(3.0))
"""GSD (both windows, tight and loose groups) and Cool-SD (a list and the annealed schedule)."""
GAP = 1e-5
"""A float32 decision may differ from theory's only where a threshold is this close."""


def outcome(run) -> tuple:
    """A step's ``(path, token)`` as plain ints, or the ValueError's message."""
    try:
        path, token = run()
    except ValueError as err:
        return "ValueError", str(err)
    return [int(v) for v in np.atleast_1d(path)], int(token)


def verifier(rule: str, relax: Relax = Relax.none(), variant: str = "principled", boost: Boost = NO_BOOST, *,
             V: int, nb: np.ndarray | None = None, emb: np.ndarray | None = None,
             device: str = "cpu", dtype: torch.dtype = torch.float64, mode: str = "device"
             ) -> DeviceVerifier:
    """The verifier under test; ``mode="device"`` by default: the GPU's torch kernels and batched walk, whose
    one read per step the tests count (``auto`` would pick ``host`` on this CPU)."""
    return DeviceVerifier(Verification(rule, relax, variant, boost), vocab_size=V, neighbours=nb,
                          embedding=emb, device=device, dtype=dtype, mode=mode)


def reads_ok(ver: DeviceVerifier, depth: int) -> bool:
    """One read per step for the batched walk; per node: the flags, one per node visited, the draw."""
    return ver.link.syncs == 1 if ver.mode == "device" else 1 <= ver.link.syncs <= depth + 3


# ----------------------------------------------------------------------------- steps, windows, nodes
@settings(max_examples=150, deadline=None)
@given(case=tree_cases(3, 16), rule=st.sampled_from(["r1", "r2", "r3"]), boost=st.sampled_from(BOOSTS),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_step_takes_theorys_decisions(case, rule, boost, seed, data):
    V, n = case.V, case.tree.size
    boost = boost if rule == "r2" else NO_BOOST
    relax = case.relax if boost.is_none else Relax.none()
    emb = np.random.default_rng(seed).standard_normal((V, 1 + seed % 3))
    ua, ud = data.draw(uniforms(n)), data.draw(uniforms(n))
    expected = outcome(lambda: sample_rule_step(case.tree, case.p, ua, ud,
                                                Verification(rule, relax, case.variant, boost),
                                                neighbours=case.nb, q_dists=case.q, emb=emb))
    ver = verifier(rule, relax, case.variant, boost, V=V, nb=case.nb, emb=emb,
                   mode=data.draw(st.sampled_from(["device", "host"])))
    if data.draw(st.booleans()):
        ua, ud = torch.from_numpy(ua), torch.from_numpy(ud)
    got = outcome(lambda: ver.step(case.tree, torch.from_numpy(case.p), ua, ud, q=torch.from_numpy(case.q)))
    assert got == expected
    assert reads_ok(ver, case.tree.depth) if rule != "r3" else ver.link.syncs == 1


@st.composite
def windows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p_rows (L + 1, V), drafts (L,), q_rows (L, V)): drafts drawn from their q, sometimes one replaced
    by any token (zero draft probability: theory refuses the window)."""
    V, L = draw(st.integers(2, 16)), draw(st.integers(1, 5))
    p = np.array([draw(distributions(V)) for _ in range(L + 1)])
    q = np.array([draw(distributions(V)) for _ in range(L)])
    drafts = [draw_token(q[j], draw(st.floats(0.0, 1.0, exclude_max=True))) for j in range(L)]
    if draw(st.integers(0, 4)) == 0:
        drafts[draw(st.integers(0, L - 1))] = draw(st.integers(0, V - 1))
    return p, np.array(drafts, dtype=np.int64), q


@settings(max_examples=100, deadline=None)
@given(window=windows(), boost=st.sampled_from(BOOSTS), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_window_takes_theorys_decisions(window, boost, seed, data):
    p, drafts, q = window
    V, L = p.shape[1], drafts.size
    emb = np.random.default_rng(seed).standard_normal((V, 2))
    ua, ud = data.draw(uniforms(L)), data.draw(uniforms(L + 1))
    expected = outcome(lambda: sample_window_step(p, drafts, q, ua, ud, Verification("r2", boost=boost),
                                                  emb=emb))
    ver = verifier("r2", boost=boost, V=V, emb=emb, mode=data.draw(st.sampled_from(["device", "host"])))
    got = outcome(lambda: ver.window(torch.from_numpy(p), drafts, torch.from_numpy(q), ua, ud))
    assert got == expected
    assert reads_ok(ver, L)


def random_nodes(rng: np.random.Generator, m: int, V: int, K: int) -> tuple:
    """m nodes over V tokens: p and q (Dirichlet, a third of them with integer weights and zeros), up to
    K children each (padded with -1), their uniforms and the draw uniforms."""
    def row() -> np.ndarray:
        if rng.random() < 1 / 3:
            w = rng.integers(0, 4, V).astype(np.float64)
            w[-1] += w.sum() == 0
            return w / w.sum()
        return rng.dirichlet(np.full(V, rng.choice([0.2, 1.0])))

    p, q = np.array([row() for _ in range(m)]), np.array([row() for _ in range(m)])
    counts = rng.integers(0, K + 1, m)
    kids = np.full((m, K), -1, dtype=np.int64)
    for i in range(m):  # drafts as R2 draws them (q > 0) where q allows
        support = np.flatnonzero(q[i] > 0)
        pool = support if support.size >= counts[i] and rng.random() < 0.8 else np.arange(V)
        kids[i, : counts[i]] = rng.choice(pool, counts[i], replace=False)
    return p, q, kids, counts, rng.random((m, K)), rng.random(m)


RULES = [(rule, relax, variant) for rule in ("r1", "r2", "r3") for variant in ("principled", "official")
         for relax in (Relax.none(), Relax.additive(5, 0.3), Relax.multiplicative(8, 3.0))]


@pytest.mark.parametrize(("rule", "relax", "variant"), RULES, ids=[f"{r}-{x}-{v}" for r, x, v in RULES])
def test_verify_nodes_is_sample_node(rule, relax, variant):
    rng = np.random.default_rng(RULES.index((rule, relax, variant)))
    V = 20
    nb = neighbour_table(rng.standard_normal((V, 2)), 12)
    p, q, kids, counts, ua, ud = random_nodes(rng, 60, V, 4)
    ver = verifier(rule, relax, variant, V=V, nb=nb)
    expected = [outcome(lambda i=i: sample_node(p[i], kids[i, : counts[i]], ua[i, : counts[i]], ud[i],
                                                Verification(rule, relax, variant), neighbours=nb, q=q[i]))
                for i in range(60)]
    ok = [i for i, e in enumerate(expected) if e[0] != "ValueError"]
    index, token = ver.verify_nodes(torch.from_numpy(p[ok]), kids[ok], ua[ok], ud[ok],
                                    q=torch.from_numpy(q[ok]))
    assert [([int(a)], int(b)) for a, b in zip(index, token, strict=True)] == [expected[i] for i in ok]
    assert len(ok) > 30 and ver.link.syncs == 1
    for i in set(range(60)) - set(ok):  # theory refuses a reached zero-probability draft, and so does this
        one = slice(i, i + 1)
        got = outcome(lambda one=one: ver.verify_nodes(torch.from_numpy(p[one]), kids[one], ua[one], ud[one],
                                                        q=torch.from_numpy(q[one])))
        assert got == expected[i]


@pytest.mark.parametrize("support", [[2], [2, 4]])
def test_r2_stops_when_the_draft_residual_has_no_mass(support):
    rng = np.random.default_rng(len(support))
    V = 6
    tree = Tree(np.array([-1, 0, 0, 0]), np.array([0, 2, 4, 5]))  # token 5 is never drafted: q(5) = 0
    q = np.full((4, V), 1 / V)
    q[0] = 0.0
    q[0, support] = 1 / len(support)
    ver = verifier("r2", V=V)
    tokens = set()
    for _ in range(40):
        p = rng.dirichlet(np.ones(V), 4)
        ua, ud = rng.random(4) * 1.5 % 1.0, rng.random(4)
        expected = sample_rule_step(tree, p, ua, ud, "r2", neighbours=None, q_dists=q)
        path, token = ver.step(tree, torch.from_numpy(p), ua, ud, q=torch.from_numpy(q))
        assert (path.tolist(), token) == expected
        tokens.add(token if path.size == 1 else -1)
    assert len(tokens) > 2  # residual draws happened


@pytest.mark.parametrize("rule", ["r1", "r2", "r3"])
def test_tables_that_repeat_tokens_are_read_as_theory_reads_them(rule):
    rng = np.random.default_rng(["r1", "r2", "r3"].index(rule))
    V, K = 12, 6
    nb = rng.integers(0, 4, (V, K))  # repeats, and rows that list their own token
    p, q, kids, counts, ua, ud = random_nodes(rng, 40, V, 3)
    ok = [i for i in range(40) if all(q[i, kids[i, : counts[i]]] > 0)]
    for relax in (Relax.additive(K - 1, 0.5), Relax.multiplicative(K - 1, 4.0)):
        for variant in ("principled", "official"):
            index, token = verifier(rule, relax, variant, V=V, nb=nb).verify_nodes(
                torch.from_numpy(p[ok]), kids[ok], ua[ok], ud[ok], q=torch.from_numpy(q[ok]))
            for j, i in enumerate(ok):
                m = counts[i]
                expected = sample_node(p[i], kids[i, :m], ua[i, :m], ud[i],
                                       Verification(rule, relax, variant), neighbours=nb, q=q[i])
                assert (index[j], token[j]) == expected


def exhausting_node() -> tuple[np.ndarray, np.ndarray, Relax, list[int]]:
    """Issue 19's case: V = 37, official R1 with additive k = 26, delta = 0.44, children [11, 14, 12, 7]."""
    rng = np.random.default_rng(167)
    p = rng.dirichlet(np.full(37, 0.3))
    return p, neighbour_table(rng.standard_normal((37, 3)), 36), Relax.additive(26, 0.44), [11, 14, 12, 7]


def test_r1_official_residual_exhaustion_hand_case():
    p, nb, relax, kids = exhausting_node()
    V = p.size
    r, Z, tracked, reset = p.copy(), 1.0, [], []
    for c in kids:  # theory's walk: the k + 1-neighbour zeroing empties the residual twice
        _, zeroed, _, _ = r1_stage(r, Z, c, nb[c], relax, "official")
        tracked.append(Z - sum(r[t] for t in zeroed))
        Z = r1_reject(r, Z, zeroed)
        reset.append(Z == V)
    assert reset == [False, True, False, True]
    assert 0.0 < tracked[1] < 1e-15  # the mass tracked by subtraction: rounding, not a residual
    accepts = [s.accept for s in r1_walk(p, np.array(kids), nb, relax, "official")][:4]
    tree = Tree(np.array([-1, 0, 0, 0, 0]), np.array([0, *kids]))
    dists = np.vstack([p, np.random.default_rng(1).dirichlet(np.ones(V), 4)])
    ver = verifier("r1", relax, "official", V=V, nb=nb)
    rng = np.random.default_rng(2)
    cases = [rng.random(5) for _ in range(60)]
    for i, a in enumerate(accepts):  # at each threshold, rejected through child i then on either side
        u = np.full(5, 0.999)
        u[1 + i] = a
        cases.append(u.copy())
        u[1 + i] = np.nextafter(a, 0.0)
        cases.append(u)
    for ua in cases:
        ud = rng.random(5)
        expected = sample_rule_step(tree, dists, ua, ud, Verification("r1", relax, "official"), neighbours=nb)
        path, token = ver.step(tree, torch.from_numpy(dists), ua, ud)
        assert (path.tolist(), token) == expected
    assert ver.link.syncs == len(cases)


def test_r1_official_exhaustion_on_random_nodes():
    rng = np.random.default_rng(11)
    resets = 0
    for _ in range(40):  # test_residual_exhaustion's search space: V <= 40, k up to V - 2
        V = int(rng.integers(5, 41))
        relax = Relax.additive(int(rng.integers(1, V - 1)), float(rng.uniform(0.05, 0.6)))
        nb = neighbour_table(rng.standard_normal((V, 3)), V - 1)
        m = 16
        p = rng.dirichlet(np.full(V, 0.3), m)
        kids = np.array([rng.choice(V, 4, replace=False) for _ in range(m)])
        ua, ud = rng.random((m, 4)), rng.random(m)
        ua[rng.random((m, 4)) < 0.5] = 0.999  # reach the later children and the final draw
        index, token = verifier("r1", relax, "official", V=V, nb=nb).verify_nodes(torch.from_numpy(p), kids,
                                                                                 ua, ud)
        for i in range(m):
            assert (index[i], token[i]) == sample_node(p[i], kids[i], ua[i], ud[i],
                                                       Verification("r1", relax, "official"), neighbours=nb)
            resets += any(s.mass == V for s in r1_walk(p[i], kids[i], nb, relax, "official"))
    assert resets > 20


def test_large_vocabulary_tree_is_theorys():
    rng = np.random.default_rng(5)
    V, n = 16384, 60
    parents = [-1] + [int(rng.integers(max(0, v - 4), v)) for v in range(1, n)]
    tokens = [0]
    for v in range(1, n):
        siblings = {tokens[u] for u in range(1, v) if parents[u] == parents[v]}
        tokens.append(int(rng.choice([t for t in rng.integers(0, V, 8).tolist() if t not in siblings])))
    tree = Tree(np.array(parents), np.array(tokens))
    p = rng.dirichlet(np.full(V, 0.05), n)
    q = rng.dirichlet(np.full(V, 0.05), n)
    for v in range(1, n):  # mass on the drafts, so that the walk goes deep
        p[parents[v], tokens[v]] += 0.3
        q[parents[v], tokens[v]] += 0.3
    p /= p.sum(axis=1, keepdims=True)
    q /= q.sum(axis=1, keepdims=True)
    offsets = 1 + rng.permutation(V - 1)[:65]
    nb = (np.arange(V)[:, None] + offsets[None]) % V
    emb = rng.standard_normal((V, 4))
    depths = []
    for rule, relax, variant, boost in [("r1", Relax.additive(64, 0.2), "official", NO_BOOST),
                                        ("r2", Relax.none(), "principled", Boost.group(10, 0.15, 8.0))]:
        ver = verifier(rule, relax, variant, boost, V=V, nb=nb, emb=emb)
        for seed in range(2 if rule == "r1" else 1):
            u = np.random.default_rng(seed)
            ua, ud = u.random(n) * 0.5, u.random(n)
            expected = sample_rule_step(tree, p, ua, ud, Verification(rule, relax, variant, boost),
                                        neighbours=nb, q_dists=q, emb=emb)
            path, token = ver.step(tree, torch.from_numpy(p), ua, ud, q=torch.from_numpy(q))
            assert (path.tolist(), token) == expected
            depths.append(len(path) - 1)
    assert max(depths) >= 3


# ----------------------------------------------------------------------------- float32 and the GPU
def merge_gap(r: np.ndarray, total: float, x: int, row: np.ndarray, relax: Relax) -> float:
    """How close the running sums C_j of ``theory.relax.merge_count`` come to their bound."""
    if relax.is_exact:
        return 1.0
    bound = relax.delta * total if relax.kind == "additive" else (relax.lam - 1.0) * r[x]
    return float(np.min(np.abs(np.cumsum(r[row[: relax.k]]) - bound)))


def threshold_gap(p, q, kids, ua, ud, rule, relax, variant, nb) -> float:
    """How close theory's decisions at a node come to their thresholds: a uniform to its acceptance
    probability or to a CDF step of the residual it draws from, a merged mass to its bound, or (R3) a
    relaxed mass to the best other token."""
    gaps, res = [1.0], None
    if rule == "r3":
        gaps.append(np.diff(np.sort(p)[-2:])[0])
        for x in kids:
            _, c = merge_count(p, 1.0, int(x), nb[x], relax)
            others = p.copy()
            others[x] = -1.0
            gaps += [abs(p[x] + c - others.max()), merge_gap(p, 1.0, int(x), nb[x], relax)]
    elif rule == "r1":
        for s in r1_walk(p, kids, nb, relax, variant):  # lazily: the walk updates its residual in place
            if s.index == kids.size:
                res = s.residual
                break
            x = int(kids[s.index])
            gaps += [abs(ua[s.index] - s.accept), merge_gap(s.residual, s.mass, x, nb[x], relax)]
    else:
        for s in r2_given_states(p, q, kids, nb, relax, variant, BoostAt()):
            if s.qp is None:
                res = s.r
                break
            x = int(s.tokens[0])
            gaps += [abs(ua[s.stage] - s.accept[0]), merge_gap(s.r, 1.0, x, nb[x], relax)]
    if res is not None and res.sum() > 0:
        cum = np.cumsum(res)
        gaps.append(float(np.min(np.abs(ud * cum[-1] - cum))) / cum[-1])
    return min(gaps)


def float32_differences(device: str) -> tuple[int, list[tuple[float, bool]]]:
    """2000 random nodes, every rule, relaxation and variant (and official exhaustion), verified in
    float32 on ``device``, a tenth of them with uniforms put on theory's thresholds: the number of nodes
    and, for each decision that differs from float64 theory, its :func:`threshold_gap` and whether its
    uniforms were put on the thresholds."""
    rng = np.random.default_rng(19)
    total, differ = 0, []
    for rule, relax, variant in RULES + [("r1", Relax.additive(30, 0.4), "official")]:
        V = 40
        nb = neighbour_table(rng.standard_normal((V, 3)), 39)
        p, q, kids, counts, ua, ud = random_nodes(rng, 105, V, 4)
        keep = [i for i in range(105) if rule != "r2" or all(q[i, kids[i, : counts[i]]] > 0)]
        p, q, kids, counts, ua, ud = p[keep], q[keep], kids[keep], counts[keep], ua[keep], ud[keep]
        placed = rng.random(len(keep)) < 0.1
        for i in np.flatnonzero(placed):
            kk = kids[i, : counts[i]]
            if rule == "r1":
                for s in r1_walk(p[i], kk, nb, relax, variant):
                    if s.index < kk.size and s.accept < 1.0:
                        ua[i, s.index] = s.accept
            elif rule == "r2":
                for s in r2_given_states(p[i], q[i], kk, nb, relax, variant, BoostAt()):
                    if s.qp is not None and s.accept[0] < 1.0:
                        ua[i, s.stage] = s.accept[0]
        ver = verifier(rule, relax, variant, V=V, nb=nb, device=device, dtype=torch.float32)
        index, token = ver.verify_nodes(torch.from_numpy(p).to(device), kids, ua, ud,
                                        q=torch.from_numpy(q).to(device))
        for i in range(len(keep)):
            kk = kids[i, : counts[i]]
            expected = sample_node(p[i], kk, ua[i, : counts[i]], ud[i], Verification(rule, relax, variant),
                                   neighbours=nb, q=q[i])
            total += 1
            if expected != (index[i], token[i]):
                differ.append((threshold_gap(p[i], q[i], kk, ua[i], ud[i], rule, relax, variant, nb),
                               bool(placed[i])))
    return total, differ


def check_float32(device: str) -> None:
    total, differ = float32_differences(device)
    report = (f"{device} float32: {len(differ)} of {total} decisions differ from float64 theory, "
              f"{sum(not placed for _, placed in differ)} without uniforms on the thresholds; "
              f"gaps {[float(g) for g, _ in differ]}")
    print(report)
    assert total >= 1800
    assert all(g < GAP for g, _ in differ), report
    assert sum(not placed for _, placed in differ) <= total // 100, report
    assert any(placed for _, placed in differ), report  # the count does see rounding at a threshold


def test_float32_decisions_differ_only_at_thresholds():
    check_float32("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_float32_decisions_differ_only_at_thresholds():
    check_float32("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_float64_step_and_probs_match_cpu():
    rng = np.random.default_rng(3)
    V, n = 64, 9
    tree = Tree(np.array([-1, 0, 0, 0, 1, 1, 4, 4, 2]), np.array([0, 3, 5, 9, 1, 2, 7, 8, 4]))
    nb = neighbour_table(rng.standard_normal((V, 3)), 20)
    for rule in ("r1", "r2", "r3"):
        cpu, gpu = (verifier(rule, Relax.additive(8, 0.2), "official", V=V, nb=nb, device=d)
                    for d in ("cpu", "cuda"))
        for _ in range(20):
            p, q = rng.dirichlet(np.ones(V), n), rng.dirichlet(np.ones(V), n)
            ua, ud = rng.random(n), rng.random(n)
            a = cpu.step(tree, torch.from_numpy(p), ua, ud, q=torch.from_numpy(q))
            b = gpu.step(tree, torch.from_numpy(p).cuda(), ua, ud, q=torch.from_numpy(q).cuda())
            assert (a[0].tolist(), a[1]) == (b[0].tolist(), b[1])
        assert gpu.link.syncs == 20
    z = torch.from_numpy(rng.standard_normal((5, V)))
    s = Sampling(0.9, 10, 0.8)
    assert torch.equal(cpu.probs(z, s) > 0, gpu.probs(z.cuda(), s).cpu() > 0)


# ----------------------------------------------------------------------------- probabilities
SAMPLINGS = [Sampling(), Sampling(0.7, 10), Sampling(1.3, 0, 0.8), Sampling(1.0, 20, 0.5), Sampling(0.0),
             Sampling(2.0, 1), Sampling(0.5, 64, 0.05)]


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=str)
def test_probs_keep_theorys_tokens(sampling):
    rng = np.random.default_rng(7)
    z = rng.standard_normal((40, 64)) * 3
    z[:, :8] = np.round(z[:, :8])  # ties
    z[::5, -3:] = -np.inf
    expected = logits_to_probs(z, temperature=sampling.temperature, top_k=sampling.top_k,
                               top_p=sampling.top_p)
    ver = verifier("r1", V=64)
    got = ver.probs(torch.from_numpy(z), sampling).numpy()
    assert np.array_equal(got > 0, expected > 0)
    # torch's exp and NumPy's SIMD exp round differently in the last bit: a few ulps
    assert np.all(np.abs(got - expected) <= 8 * np.spacing(expected))
    assert ver.link.syncs == 1
    assert ver.probs(torch.from_numpy(z).float(), sampling).dtype == torch.float64


@pytest.mark.parametrize(("logits", "sampling", "expected"), [
    ([0.0, 1.0, 1.0, 1.0, -2.0], Sampling(1.0, 2), [0.0, 1 / 3, 1 / 3, 1 / 3, 0.0]),  # ties at the k-th kept
    ([5.0, 5.0, 5.0, 5.0], Sampling(1.0, 0, 0.5), [1 / 3, 1 / 3, 1 / 3, 0.0]),  # mass before = top_p: kept
    ([5.0, 5.0, 5.0, 5.0], Sampling(1.0, 0, 0.5 - 1e-13), [1 / 3, 1 / 3, 1 / 3, 0.0]),  # within TOP_P_TOL
    ([5.0, 5.0, 5.0, 5.0], Sampling(1.0, 0, 0.5 - 1e-9), [0.5, 0.5, 0.0, 0.0]),
    ([1.0, 3.0, 3.0, 0.0], Sampling(0.0), [0.0, 1.0, 0.0, 0.0]),  # greedy: the lowest id among ties
    ([0.0, 2.0, 2.0, -np.inf], Sampling(0.5, 3, 0.9), [0.0, 0.5, 0.5, 0.0]),
])
def test_probs_hand_cases_equal_theory_exactly(logits, sampling, expected):
    z = np.array([logits])
    theory = logits_to_probs(z, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    got = verifier("r1", V=z.shape[1]).probs(torch.from_numpy(z), sampling).numpy()
    assert np.array_equal(theory[0], expected)
    assert np.array_equal(got, theory)


# ----------------------------------------------------------------------------- r4 and the budget boost
@pytest.mark.parametrize(("rule", "boost", "function"), [("r4", NO_BOOST, "traversal_step"),
                                                         ("r4", Boost.group(3), "traversal_step"),
                                                         ("r2", Boost.budget(0.1, 2), "budget_r2_step"),
                                                         ("r4", Boost.budget(0.1, 2), "traversal_step")])
def test_r4_and_budget_go_to_verify_traversal(monkeypatch, rule, boost, function):
    calls = []

    def fake(tree, p, q, u_accept, u_draw, **kw):
        calls.append((function, tree, p, q, u_accept, u_draw, kw))
        return [0, 1], 7

    module = types.ModuleType("relaxspec.reference.verify_traversal")
    module.traversal_step = module.budget_r2_step = fake
    monkeypatch.setitem(sys.modules, "relaxspec.reference.verify_traversal", module)
    monkeypatch.setattr(reference, "verify_traversal", module, raising=False)
    V = 6
    nb = neighbour_table(np.random.default_rng(0).standard_normal((V, 2)), 3)
    emb = np.random.default_rng(1).standard_normal((V, 2))
    ver = verifier(rule, boost=boost, V=V, nb=nb, emb=emb)
    tree = Tree(np.array([-1, 0]), np.array([0, 2]))
    p = torch.full((2, V), 1 / V, dtype=torch.float64)
    path, token = ver.step(tree, p, np.zeros(2), np.zeros(2), q=p)
    assert path.tolist() == [0, 1] and token == 7
    name, _, p_in, q_in, ua, _, kw = calls[0]
    assert name == function and torch.equal(p_in, p) and torch.equal(q_in, p) and ua.dtype == torch.float64
    assert kw["link"] is ver.link and kw["boost"] == boost
    assert (kw["neighbours"] is None) == (boost.kind != "budget")
    if boost.kind == "budget":
        assert torch.equal(kw["neighbours"], torch.as_tensor(nb[:, :2], dtype=torch.long))
    if function == "traversal_step":
        assert (kw["emb"] is None) == (boost.kind != "group")
    lone = ver.step(Tree(np.array([-1]), np.array([0])), p[:1], np.zeros(1), np.zeros(1))  # q: zeros
    assert lone[1] == 7 and not calls[-1][3].any()
    assert ver.window(torch.full((3, V), 1 / V, dtype=torch.float64), np.array([1, 2]),
                      torch.full((2, V), 1 / V, dtype=torch.float64), np.zeros(2), np.zeros(3)) == (1, 7)
    assert calls[-1][4].tolist() == [0.0, 0.0, 0.0]  # the chain's uniforms: node 0 untested
    with pytest.raises(ValueError, match="verifies a whole step"):
        ver.verify_nodes(p, np.array([[1], [2]]), np.zeros((2, 1)), np.zeros(2), q=p)


# ----------------------------------------------------------------------------- bad input
def small_case(V: int = 5) -> tuple[Tree, torch.Tensor, np.ndarray]:
    p = torch.full((3, V), 1 / V, dtype=torch.float64)
    nb = neighbour_table(np.arange(V * 2.0).reshape(V, 2), 3)
    return Tree(np.array([-1, 0, 0]), np.array([0, 1, 2])), p, nb


@pytest.mark.parametrize(("row", "message"), [([np.nan, 0.0], "contain NaN"),
                                              ([np.inf, 0.0], r"contain \+inf"),
                                              ([-np.inf, -np.inf], "-inf everywhere")])
def test_probs_refuse_bad_logits(row, message):
    z = torch.zeros((3, 2), dtype=torch.float64)
    z[1] = torch.tensor(row)
    ver = verifier("r1", V=2)
    with pytest.raises(ValueError, match=message):
        ver.probs(z, Sampling())
    assert ver.link.syncs == 1


def test_probs_refuse_bad_shapes_devices_and_sampling():
    ver = verifier("r1", V=4)
    with pytest.raises(ValueError, match=r"shape \(n, V=4\)"):
        ver.probs(torch.zeros((2, 5)), Sampling())
    with pytest.raises(ValueError, match="is on meta"):
        ver.probs(torch.zeros((2, 4), device="meta"), Sampling())
    with pytest.raises(ValueError, match="top_k"):
        ver.probs(torch.zeros((2, 4)), Sampling(1.0, 5))
    with pytest.raises(ValueError, match="temperature"):
        ver.probs(torch.zeros((2, 4)), Sampling(-1.0))


def test_tables_of_another_vocabulary_or_device_are_refused():
    _, _, nb = small_case()
    relax = Relax.additive(2, 0.1)
    with pytest.raises(ValueError, match="another codebook"):
        verifier("r1", relax, V=6, nb=nb)
    with pytest.raises(ValueError, match="neighbour table is on meta"):
        verifier("r1", relax, V=5, nb=torch.zeros((5, 3), dtype=torch.long, device="meta"))
    with pytest.raises(ValueError, match="outside"):
        verifier("r1", relax, V=5, nb=nb.astype(np.int64) - 1)
    with pytest.raises(ValueError, match="needs a neighbour table"):
        verifier("r1", relax, V=5)
    with pytest.raises(ValueError, match="embedding table"):
        verifier("r2", boost=Boost.group(3), V=5, emb=np.zeros((4, 2)))
    ver = verifier("r1", relax, V=5, nb=torch.as_tensor(nb.astype(np.int32)))  # validated on the host, once
    assert ver.link.syncs == 1 and ver.table.dtype == torch.long and ver.table.shape == (5, 2)


def test_steps_refuse_bad_input():
    tree, p, nb = small_case()
    r1 = verifier("r1", Relax.additive(2, 0.1), "official", V=5, nb=nb)
    u = np.zeros(3)
    with pytest.raises(ValueError, match=r"u_accept must have shape \(3,\)"):
        r1.step(tree, p, np.zeros(2), u)
    with pytest.raises(ValueError, match=r"u_draw must have shape \(3,\)"):
        r1.step(tree, p, u, torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"p must have shape \(n_nodes=3, V=5\)"):
        r1.step(tree, p[:, :4], u, u)
    with pytest.raises(ValueError, match="p must be a torch tensor"):
        r1.step(tree, p.numpy(), u, u)
    with pytest.raises(ValueError, match="rule r2 needs the draft distribution q"):
        verifier("r2", V=5).step(tree, p, u, u)
    bad = p.clone()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"p\[2\] has a NaN or infinite entry"):
        r1.step(tree, bad, u, u)
    with pytest.raises(ValueError, match=r"u_draw must hold uniforms in \[0, 1\)"):
        r1.step(tree, p, u, np.array([0.0, 1.0, 0.5]))
    with pytest.raises(ValueError, match="out of range for V = 2"):
        verifier("r1", V=2).step(tree, p[:, :2], u, u)
    q = p.clone()
    q[0, 1] = 0.0
    q[0] /= q[0].sum()
    with pytest.raises(ValueError, match="drafted token 1 has zero draft probability"):
        verifier("r2", V=5).step(tree, p, u, u, q=q)
    with pytest.raises(ValueError, match="zero probability under its q"):
        verifier("r2", V=5).window(p, np.array([1, 2]), q[:2], u[:2], u)
    with pytest.raises(ValueError, match=r"q_rows\[0\] does not sum to 1"):
        verifier("r2", V=5).window(p, np.array([1, 2]), q[:2] * 2, u[:2], u)
    with pytest.raises(ValueError, match="needs rule r2 or r4"):
        r1.window(p, np.array([1, 2]), p[:2], u[:2], u)


def test_host_mode_is_theory_on_the_tensors_memory():
    """mode="host" (the default on a CPU): theory's probabilities bit for bit, its error messages; a GPU
    verifier cannot run NumPy's kernels."""
    from relaxspec.theory.distributions import logits_to_probs

    z = np.random.default_rng(3).normal(size=(4, 32)).astype(np.float32)
    ver = DeviceVerifier("r1", vocab_size=32)
    assert ver.mode == "host"
    for sampling in (Sampling(1.0, 0, 1.0), Sampling(0.7, 5, 0.9), Sampling(0.0, 0, 1.0)):
        expected = logits_to_probs(z.astype(np.float64), temperature=sampling.temperature,
                                   top_k=sampling.top_k, top_p=sampling.top_p)
        assert np.array_equal(ver.probs(torch.from_numpy(z), sampling).numpy(), expected)
    z[1, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ver.probs(torch.from_numpy(z), Sampling())
    with pytest.raises(ValueError, match="mode 'host'.*needs a CPU"):
        DeviceVerifier("r1", vocab_size=32, device="meta", mode="host")
