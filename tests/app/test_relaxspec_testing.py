"""relaxspec.testing (issue 20): the public checks pass on every rule the suite has, catch a
deliberately wrong one (docs/testing.md), and turn bad rules into AssertionErrors that name them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from relaxspec.core.trees.policies import StaticTree
from relaxspec.testing import (
    KernelRule,
    Law,
    Node,
    TheoryRule,
    Verdict,
    check_consistent,
    check_expected_tokens,
    check_lossless,
    check_matches,
    check_monotone,
    check_tv_bound,
    nodes,
    proved_bound,
    theory_expected_tokens,
    tree_cases,
    uniforms,
)
from relaxspec.theory import Relax, node_outcome
from relaxspec.theory.boost import Boost
from relaxspec.theory.relax import KINDS
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.stages import r1_reject, r1_stage
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import check_node_inputs

ROOT = Path(__file__).resolve().parents[2]
# small runs on top of the active profile (tests/conftest.py: derandomized under CI)
QUICK = settings(max_examples=20)
TINY = settings(max_examples=4)
NO_SHRINK = settings(max_examples=4, phases=[Phase.explicit, Phase.generate])  # the message, not the minimum


def forgetful_r1(p, q, children, relax, neighbours, variant, u):
    """LANTERN's R1 that, on rejecting x, zeroes x alone instead of its proximity set (WRONG)."""
    r, Z, reach = p.copy(), 1.0, 1.0
    accept, emitted, decision = np.zeros(children.size), np.zeros(p.size), None
    for i, x in enumerate(children):
        a, zeroed, _, _ = r1_stage(r, Z, int(x), neighbours[x].astype(np.int64), relax, variant)
        accept[i] = reach * a
        emitted[x] += reach * a
        if decision is None and u[i] < a:
            decision = (i, int(x))
        reach *= 1.0 - a
        Z = r1_reject(r, Z, zeroed[:1])  # BUG: the proximity set stays in the residual
    total = r.sum()
    emitted += reach * (r / total if total > 0 else 1.0 / p.size)
    index, token = decision or (-1, draw_token(r, u[-1]))
    return Verdict(index, token, Law(accept, emitted))


# --- the suite's rules through the public API ------------------------------------------------


@pytest.mark.parametrize("rule", ["r1", "r2", "r3"])
def test_theory_rules_are_lossless_without_relaxation(rule):
    """R1 and R2 emit p; R3 (greedy) emits the point mass on argmax p (its ``target``)."""
    check_lossless(TheoryRule(rule), settings=QUICK)


@pytest.mark.parametrize("rule", ["r1", "r2"])
def test_kernel_rules_are_lossless_by_chi_square(rule):
    """The kernels expose no law: check_lossless samples them (chi-square at 1e-6)."""
    check_lossless(KernelRule(rule), settings=TINY, samples=1500)


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
@pytest.mark.parametrize("variant", ["principled", "official"])
def test_theory_r1_relaxed_stays_within_the_proved_bound(kind, variant):
    check_tv_bound(TheoryRule("r1"), proved_bound("r1"), nodes=nodes(max_v=16, kinds=(kind,),
                                                                      variants=(variant,)), settings=QUICK)


@pytest.mark.parametrize("rule", ["r2", "r3"])
def test_theory_r2_r3_stay_within_the_proved_bound(rule):
    check_tv_bound(TheoryRule(rule), proved_bound(rule), settings=QUICK)


def test_kernel_r1_stays_within_the_proved_bound_by_sampling():
    check_tv_bound(KernelRule("r1"), proved_bound("r1"), nodes=nodes(max_v=8, kinds=("additive",)),
                   settings=TINY, samples=4000)


@pytest.mark.parametrize("rule", ["r1", "r2"])
def test_kernels_decide_as_theory(rule):
    check_matches(KernelRule(rule), TheoryRule(rule), settings=settings(max_examples=60))


@pytest.mark.parametrize("parameter", ["delta", "k"])
def test_theory_r1_single_child_acceptance_is_monotone(parameter):
    check_monotone(TheoryRule("r1"), parameter, settings=QUICK)


def test_theory_r2_single_draft_acceptance_is_monotone_in_lam():
    check_monotone(TheoryRule("r2"), "lam", settings=QUICK)


def test_kernel_r1_is_monotone_in_delta_by_paired_runs():
    check_monotone(KernelRule("r1"), "delta", settings=TINY, samples=500)


@pytest.mark.parametrize("rule", ["r1", "r2", "r3"])
def test_theory_rules_expected_tokens_on_small_trees(rule):
    """Per-node laws composed over static, EAGLE-2, DDD and random trees = theory's exact value."""
    check_expected_tokens(TheoryRule(rule), settings=settings(max_examples=12))


def test_theory_r1_expected_tokens_on_eagles_static_tree():
    check_expected_tokens(TheoryRule("r1"), StaticTree.mc_sim_7b_63(), settings=TINY)


def test_kernel_r1_expected_tokens_by_walking_trees():
    check_expected_tokens(KernelRule("r1"), settings=TINY, samples=1000)


@pytest.mark.parametrize("rule", ["r1", "r2"])
def test_theory_rules_decide_as_their_law(rule):
    check_consistent(TheoryRule(rule), nodes=nodes(max_v=6, max_m=3), settings=settings(max_examples=3),
                     samples=1000)


# --- the deliberately wrong rule (docs/testing.md) ----------------------------------------------


def test_forgetful_rule_is_lossless_yet_caught_by_the_proved_bound():
    """Forgetting A(x) on rejection changes nothing without relaxation, so check_lossless passes;
    with a relaxation a later child merges the same neighbours again and the TV exceeds p(D)."""
    check_lossless(forgetful_r1, settings=QUICK)
    wide = nodes(max_v=8, min_m=2, max_m=4, kinds=("additive", "multiplicative"))
    search = settings(max_examples=300, phases=[Phase.explicit, Phase.generate])
    with pytest.raises(AssertionError, match=r"'forgetful_r1' exceeds its TV bound: TV\(emitted, target\)"):
        check_tv_bound(forgetful_r1, proved_bound("r1"), nodes=wide, settings=search)
    check_tv_bound(TheoryRule("r1"), proved_bound("r1"), nodes=wide, settings=search)


def _docs_node() -> Node:
    p = np.array([0.07981103996430955, 8.790488337778136e-08, 0.27158181238036483, 0.06253692324059018,
                  0.036140444158873394, 0.15742929810943845, 0.39250039424154])
    return Node(p, np.eye(7)[6], np.array([[1], [0], [0], [0], [0], [0], [0]]), np.array([1, 2]),
                Relax.additive(1, 0.1), "principled")


def test_forgetful_rule_counterexample_of_the_docs():
    """The node Hypothesis shrinks to in docs/testing.md: children 1 and 2 share their nearest
    neighbour, token 0. The right rule merges it into child 1 and removes it (TV = p(0) = p(D));
    the forgetful rule merges it again into child 2 and still emits it from the residual. It
    stays within the nominal budget delta E[#tested]: only the proved bound p(D) catches it."""
    node = _docs_node()
    p, nb = node.p, node.nb
    right = node_outcome(p, node.kids, Verification("r1", node.relax), neighbours=nb)
    wrong = forgetful_r1(p, node.q, node.kids, node.relax, nb, node.variant, np.zeros(3)).law
    assert proved_bound("r1")(node) == pytest.approx(p[0], abs=1e-15)
    assert right.tv == pytest.approx(p[0], abs=1e-15)
    tv = 0.5 * np.abs(wrong.emitted - p).sum()
    assert tv == pytest.approx(0.1315770484816702, abs=1e-12)
    assert wrong.emitted[0] > 0.06  # token 0: merged into both children and still drawn
    tried = 1.0 + (1.0 - wrong.accept_probs[0])
    assert tv < node.relax.delta * tried


def residual_from_p(p, q, children, relax, neighbours, variant, u):
    """Exact R1 with the classic bug: the token emitted after all rejections is drawn from p."""
    v = TheoryRule("r1", law=False)(p, q, children, relax, neighbours, variant, u)
    return v if v.index >= 0 else Verdict(-1, draw_token(p, u[-1]))


def forgetful_sampler(p, q, children, relax, neighbours, variant, u):
    v = forgetful_r1(p, q, children, relax, neighbours, variant, u)
    return Verdict(v.index, v.token)


def sqrt_uniforms_r1(p, q, children, relax, neighbours, variant, u):
    """The R1 kernel fed sqrt(u): accepts with probability a^2."""
    u = np.sqrt(u)
    return KernelRule("r1")(p, q, children, relax, neighbours, variant, u)


sqrt_uniforms_r1.spec_rule = "r1"


def test_sampling_checks_catch_wrong_samplers():
    """Where a rule exposes no law the checks sample it, and still catch it."""
    search = settings(max_examples=40, phases=[Phase.generate])
    with pytest.raises(AssertionError, match="'residual_from_p' is not lossless: .* chi-square"):
        check_lossless(residual_from_p, settings=search, samples=1000)
    with pytest.raises(AssertionError, match="'forgetful_sampler' exceeds its TV bound .* empirical TV"):
        check_tv_bound(forgetful_sampler, proved_bound("r1"), nodes=st.just(_docs_node()), settings=NO_SHRINK)
    with pytest.raises(AssertionError, match="'sqrt_uniforms_r1' walks the tree .* other than theory"):
        check_expected_tokens(sqrt_uniforms_r1, StaticTree.chain(3), settings=search, samples=1000)


def shrinking_r1(p, q, children, relax, neighbours, variant, u):
    """R1 with delta replaced by 1 - delta: acceptance falls as delta grows."""
    if relax.kind == "additive":
        relax = Relax.additive(relax.k, 1.0 - relax.delta)
    return TheoryRule("r1")(p, q, children, relax, neighbours, variant, u)


def flipped_r1(p, q, children, relax, neighbours, variant, u):
    """R1 verifying the other variant than the one asked for."""
    other = "official" if variant == "principled" else "principled"
    return TheoryRule("r1", law=False)(p, q, children, relax, neighbours, other, u)


def lying_r1(p, q, children, relax, neighbours, variant, u):
    """Decides as exact R1 but reports the relaxed rule's law."""
    law = TheoryRule("r1")(p, q, children, relax, neighbours, variant, u).law
    v = TheoryRule("r1", law=False)(p, q, children, Relax.none(), neighbours, variant, u)
    return Verdict(v.index, v.token, law)


def test_checks_catch_non_monotone_mismatched_and_lying_rules():
    search = settings(max_examples=200, phases=[Phase.generate])
    with pytest.raises(AssertionError, match="'shrinking_r1' is not monotone in delta"):
        check_monotone(shrinking_r1, "delta", settings=search)
    with pytest.raises(AssertionError, match="'flipped_r1' decides .* where the reference 'simulate r1"):
        check_matches(flipped_r1, KernelRule("r1"), settings=search)
    with pytest.raises(AssertionError, match="'lying_r1' (.* own law .* probability 0|decides against)"):
        check_consistent(lying_r1, nodes=nodes(max_v=6, kinds=("additive",), variants=("principled",)),
                         settings=settings(max_examples=30, phases=[Phase.generate]), samples=1000)


# --- bad rules give AssertionErrors naming the rule and the input ------------------------------


def _exact_r1(p, q, children, relax, neighbours, variant, u):
    return TheoryRule("r1")(p, q, children, relax, neighbours, variant, u)


def unnormalised(p, q, children, relax, neighbours, variant, u):
    v = _exact_r1(p, q, children, relax, neighbours, variant, u)
    return Verdict(v.index, v.token, Law(v.law.accept_probs, 0.9 * v.law.emitted))


def out_of_range(p, q, children, relax, neighbours, variant, u):
    return Verdict(children.size, 0)


def wrong_token(p, q, children, relax, neighbours, variant, u):
    return Verdict(0, (int(children[0]) + 1) % p.size)


def greedy_reader(p, q, children, relax, neighbours, variant, u):
    u[children.size + 1]  # one uniform too many
    return Verdict(-1, 0)


def raiser(p, q, children, relax, neighbours, variant, u):
    raise ValueError("boom")


@pytest.mark.parametrize(("rule", "message"), [
    (unnormalised, "returned an emitted law that sums to"),
    (out_of_range, "returned index 1: not -1 or the index of one of its 1 children"),
    (wrong_token, "accepted child 0 \\(token \\d+\\) but emitted token"),
    (greedy_reader, "raised IndexError: .* given m \\+ 1 = "),
    (raiser, "raised ValueError: boom"),
])
def test_bad_rules_fail_with_their_name_and_input(rule, message):
    with pytest.raises(AssertionError, match=f"rule '{rule.__name__}' {message}") as info:
        check_lossless(rule, settings=NO_SHRINK)
    assert "input: Node(p=[" in str(info.value)


def test_not_a_rule_and_bad_parameters():
    with pytest.raises(AssertionError, match="is not callable"):
        check_lossless(42)
    with pytest.raises(AssertionError, match="parameter must be one of"):
        check_monotone(TheoryRule("r1"), "beta")
    with pytest.raises(AssertionError, match="they verify different nodes"):
        check_matches(TheoryRule("r1"), TheoryRule("r2"))


def test_the_suites_rules_take_one_verification():
    """A rule, a bound and an expected value are named by one verification (a value or its spec): its rule
    and boost; each node gives the relaxation and the variant, so a spec naming them is refused."""
    gsd = Verification("r2", boost=Boost.group(2))
    assert TheoryRule("r2+gsd:G=2").verification == TheoryRule(gsd).verification == gsd
    assert KernelRule("r2+gsd:G=2", depth=2).name == "simulate r2+gsd:G=2,tau=0.15,dist=0.5 kernel depth 2"
    assert TheoryRule("r2+gsd:G=2").kinds == ("none",) and TheoryRule("r1").kinds == KINDS
    assert proved_bound("r2+budget:tv=0.05,k=2").__name__ == "proved_bound('r2+budget:tv=0.05,k=2')"
    for make in (TheoryRule, KernelRule, proved_bound, theory_expected_tokens):
        with pytest.raises(ValueError, match="give every node its relaxation and variant"):
            make("r1+lantern:k=2,delta=0.1")
        with pytest.raises(ValueError, match="give every node its relaxation and variant"):
            make("r1/official")
    with pytest.raises(ValueError, match="no per-node bound is proved for 'r4\\+gsd"):
        proved_bound("r4+gsd:G=2")
    with pytest.raises(ValueError, match="needs rule r2 or r4"):
        TheoryRule("r1+cool:delta=2")

    def claims_r9(p, q, children, relax, neighbours, variant, u):
        return _exact_r1(p, q, children, relax, neighbours, variant, u)

    claims_r9.spec_rule = "r9"
    with pytest.raises(AssertionError, match="rule 'claims_r9': spec_rule 'r9': verification 'r9': unknown"):
        check_expected_tokens(claims_r9, settings=NO_SHRINK)


def test_a_rule_that_is_not_deterministic_is_named():
    calls = []

    def moody(p, q, children, relax, neighbours, variant, u):
        calls.append(1)
        assert len(calls) > 1, "first call fails"
        return _exact_r1(p, q, children, relax, neighbours, variant, u)

    with pytest.raises(AssertionError, match="'moody'.*deterministic"):
        check_lossless(moody, settings=TINY)


def test_bound_that_raises_is_named():
    def bad_bound(node):
        raise KeyError("no bound here")

    with pytest.raises(AssertionError, match="bound bad_bound raised KeyError"):
        check_tv_bound(TheoryRule("r1"), bad_bound, settings=NO_SHRINK)


# --- strategies -----------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(node=nodes(), u=uniforms(5))
def test_strategies_generate_valid_nodes_and_uniforms(node, u):
    check_node_inputs(node.p, node.kids, Verification("r1", node.relax, node.variant), neighbours=node.nb,
                      q=None)
    assert node.q.shape == node.p.shape and abs(node.q.sum() - 1.0) < 1e-9
    assert u.shape == (5,) and np.all((u >= 0.0) & (u < 1.0))


@settings(max_examples=20, deadline=None)
@given(case=tree_cases())
def test_strategies_generate_valid_tree_cases(case):
    assert case.p.shape == case.q.shape == (case.tree.size, case.V)
    case.tree.check_vocab(case.V)
    for u in range(case.tree.size):
        if case.tree.children(u).size:
            node = case.node(u)
            check_node_inputs(node.p, node.kids, Verification("r1", node.relax, node.variant),
                              neighbours=node.nb, q=None)


# --- profiles and the pytest plugin ---------------------------------------------------------------


def test_profiles_are_registered_on_import():
    ci = settings.get_profile("relaxspec-ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None
    assert settings.get_profile("relaxspec-quick").max_examples < settings.get_profile(
        "relaxspec-thorough").max_examples


def test_plugin_is_declared_as_a_pytest11_entry_point():
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert table == {"relaxspec": "relaxspec.testing.plugin"}


def _run_pytest(where: Path, want: str, *args: str) -> subprocess.CompletedProcess:
    installed = any(e.value == "relaxspec.testing.plugin" for e in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "relaxspec.testing.plugin"]
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")} | {"WANT": want}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, *args,
                           str(where)], capture_output=True, text=True, env=env, cwd=where)


def test_plugin_option_loads_the_profile_and_leaves_a_conftest_alone_without_it(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        from hypothesis import settings
        settings.register_profile("mine", max_examples=7)
        settings.load_profile("mine")
    """))
    (tmp_path / "test_profile.py").write_text(textwrap.dedent("""
        import os
        from hypothesis import settings
        def test_profile():
            want = os.environ.get("WANT")
            got = settings.default
            assert (got.max_examples, got.derandomize) == {"mine": (7, False), "ci": (100, True)}[want]
    """))
    alone = _run_pytest(tmp_path, "mine")
    with_option = _run_pytest(tmp_path, "ci", "--relaxspec-profile=ci")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert with_option.returncode == 0, with_option.stdout + with_option.stderr
