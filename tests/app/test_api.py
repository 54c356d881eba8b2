"""The public API at ``import relaxspec`` (issue 27 item 3): a handful of names loaded lazily, the callable
``relaxspec.simulate`` taking spec strings, a one-line notice before a cold compile, and README's Python
blocks, which run as they are written."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import relaxspec

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves_to_its_home() -> None:
    from relaxspec.figures import render
    from relaxspec.results import load
    from relaxspec.simulate import inputs, results, worlds
    from relaxspec.theory import tree, verification, verify

    assert sorted(relaxspec.__all__) == sorted({*relaxspec._EXPORTS, "simulate", "__version__"})
    assert dir(relaxspec) == sorted(relaxspec.__all__)
    expected = {"Tree": tree.Tree, "expected_tokens_per_step": tree.expected_tokens_per_step,
                "sample_step": tree.sample_step, "step_expectation": tree.step_expectation,
                "node_outcome": verify.node_outcome, "Verification": verification.Verification,
                "LatentWorld": worlds.LatentWorld, "StationaryWorld": worlds.StationaryWorld,
                "TraceWorld": worlds.TraceWorld, "SimResult": results.SimResult, "world": inputs.as_world,
                "tree": inputs.as_tree, "load_results": load, "render": render}
    assert set(expected) == set(relaxspec._EXPORTS)
    for name, obj in expected.items():
        assert getattr(relaxspec, name) is obj, name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        relaxspec.nothing  # noqa: B018


def test_simulate_is_the_subpackage_and_callable() -> None:
    import relaxspec.simulate as package

    assert relaxspec.simulate is package and callable(package)
    assert package.run is package.engine.run and package.LatentWorld is relaxspec.LatentWorld


def test_spec_strings_decode_as_the_objects_they_name() -> None:
    """``relaxspec.simulate(name, tree spec, verification spec)`` gives the same outcomes as ``run`` on the
    objects (a ranked tree with LANTERN, and a Jacobi window under R2)."""
    from relaxspec.core.trees import Eagle2Tree
    from relaxspec.core.trees.jacobi import JacobiWindow
    from relaxspec.simulate import LatentWorld, run

    world = LatentWorld.preset("ambiguous")
    kw = {"n_sequences": 2, "seq_len": 12, "seed": 3}
    cases = [(("eagle2:4,2,6", "r1+lantern:k=8,delta=0.1"),
              (Eagle2Tree(4, 2, 6), {"verification": "r1+lantern:k=8,delta=0.1"})),
             (("jacobi:4", "r2"), (JacobiWindow(4), {"verification": "r2"}))]
    for (tree_spec, v_spec), (tree, rule) in cases:
        got = relaxspec.simulate("ambiguous", tree_spec, v_spec, **kw)
        want = run(world, tree, **rule, **kw)
        assert got.tree == want.tree and got.verification == want.verification
        for field in ("tokens", "tree_size", "root_choice", "token_tv"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))


def test_a_sequoia_spec_is_built_from_the_acceptance_measured_in_the_world() -> None:
    from relaxspec.core.trees import SequoiaTree
    from relaxspec.simulate import LatentWorld, measure_positional_acceptance

    world = LatentWorld.preset("ambiguous")
    small = {"width": 4, "n_sequences": 2, "seq_len": 8}
    tree = relaxspec.tree("sequoia:6,3", world, "r1", seed=5, sequoia=small)
    vector = measure_positional_acceptance(world, width=4, n_sequences=2, seq_len=8, seed=6)
    assert isinstance(tree, SequoiaTree) and str(tree) == "sequoia:6,3"
    assert tree.parents.tolist() == SequoiaTree(vector.tolist(), 6, 3).parents.tolist()


def test_bad_specs_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match=r"^unknown world 'nowhere': a preset \(ambiguous, confident"):
        relaxspec.world("nowhere")
    with pytest.raises(ValueError, match="measured in a world: give the world"):
        relaxspec.tree("sequoia:6,3")
    with pytest.raises(ValueError, match="bad tree spec"):
        relaxspec.tree("eagle2:4")


@pytest.mark.parametrize("notice", ["compiling the simulator's Numba kernels (once)", None])
def test_the_first_call_announces_a_cold_compile(monkeypatch, caplog, notice) -> None:
    """Through the API the notice is one warning of logger relaxspec.simulate.inputs (shown with no logging
    set up), at the first call only, and nothing when the cache is warm."""
    from relaxspec.simulate import inputs

    calls = []
    monkeypatch.setattr(inputs, "_announced", False)
    monkeypatch.setattr(inputs, "compile_notice", lambda: calls.append("checked") or notice)
    monkeypatch.setattr(inputs, "run", lambda *a, **kw: calls.append("run"))
    with caplog.at_level(logging.WARNING, logger="relaxspec"):
        relaxspec.simulate("ambiguous", "chain:2", "r1", n_sequences=1)
        relaxspec.simulate("ambiguous", "chain:2", "r1", n_sequences=1)
    assert calls == ["checked", "run", "run"]
    lines = [r.getMessage() for r in caplog.records if r.name == "relaxspec.simulate.inputs"]
    assert lines == ([f"relaxspec: note: {notice}"] if notice else [])


def readme_python_blocks() -> list[str]:
    """README's fenced blocks marked exactly ``python`` (``python no-run`` ones are shown only)."""
    return re.findall(r"^```python\n(.*?)^```$", (ROOT / "README.md").read_text(), flags=re.M | re.S)


def test_readme_python_blocks_run(tmp_path) -> None:
    """The quickstart runs as written, in a fresh interpreter outside the repository, with
    ``import relaxspec`` alone."""
    blocks = readme_python_blocks()
    assert blocks and "relaxspec.simulate(" in blocks[0]
    for code in blocks:
        imports = re.findall(r"^\s*(?:import|from)\s+(\S+)", code, flags=re.M)
        assert imports and set(imports) == {"relaxspec"}, imports
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
